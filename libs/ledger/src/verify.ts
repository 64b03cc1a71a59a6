/**
 * `verifyLedger`: checks every invariant of the ledger with SQL over the whole
 * of `accounts` and `transfers` (full scans: an operator's command, run by
 * `crowdplay ledger verify` and after load scenarios, not on a hot path).
 */
import type { Queryable } from '@crowdplay/store';
import { TransferKinds } from './ledger.ts';

/** The invariants `verifyLedger` checks (the `check` of a failure). */
export type LedgerCheck =
  /** The balances of each tenant (and of the whole ledger) sum to zero. */
  | 'sum_zero'
  /** No wallet or escrow is below zero. */
  | 'non_negative'
  /** Each account's balance equals the points transferred in minus out. */
  | 'balance_matches_transfers'
  /** Each transfer's accounts exist and belong to the transfer's tenant. */
  | 'transfer_accounts'
  /**
   * Each round's escrow: stakes in = payouts + refunds + take + points still
   * held (the escrow's balance; 0 once the round is settled or cancelled), and
   * nothing else moved points in or out of it, and every transfer touching it
   * names its round.
   */
  | 'round_escrow'
  /**
   * Each finished round (settled or cancelled, and marked paid in the
   * `rounds` table) holds nothing: its escrow (pool) and maker (market)
   * accounts are at zero — every point went to payouts, refunds, the take
   * or back to the treasury.
   */
  | 'round_final';

export interface LedgerFailure {
  check: LedgerCheck;
  /** Human-readable: which tenant, account or round, and the numbers. */
  detail: string;
}

export interface LedgerVerification {
  ok: boolean;
  failures: LedgerFailure[];
}

/** At most this many failures are listed per check (the count of the rest is reported). */
export const MAX_FAILURES_PER_CHECK = 20;

type Num = string | number;

function capped(check: LedgerCheck, details: string[], out: LedgerFailure[]): void {
  for (const d of details.slice(0, MAX_FAILURES_PER_CHECK)) out.push({ check, detail: d });
  if (details.length > MAX_FAILURES_PER_CHECK) out.push({ check, detail: `… and ${details.length - MAX_FAILURES_PER_CHECK} more` });
}

/**
 * Checks every ledger invariant (see LedgerCheck) and returns each violation.
 * Read-only; run it on a quiet ledger or accept that transfers committing
 * meanwhile are seen by some checks and not others (each check is one
 * statement, so each is consistent on its own).
 *
 * @param db the store's Db (or any Queryable on the ledger's schema)
 */
export async function verifyLedger(db: Queryable): Promise<LedgerVerification> {
  const failures: LedgerFailure[] = [];

  const sums = await db.query<{ tenant_id: string | null; total: Num }>(
    `SELECT tenant_id, sum(balance) AS total FROM accounts GROUP BY ROLLUP (tenant_id) HAVING sum(balance) <> 0 ORDER BY tenant_id NULLS LAST`,
  );
  capped(
    'sum_zero',
    sums.rows.map((r) =>
      r.tenant_id === null ? `all balances sum to ${r.total}, not 0` : `tenant ${r.tenant_id}: balances sum to ${r.total}, not 0`,
    ),
    failures,
  );

  const negative = await db.query<{ id: Num; tenant_id: string; kind: string; owner: string; balance: Num }>(
    `SELECT id, tenant_id, kind, owner, balance FROM accounts WHERE kind IN ('wallet', 'escrow') AND balance < 0 ORDER BY id`,
  );
  capped(
    'non_negative',
    negative.rows.map((r) => `tenant ${r.tenant_id}: ${r.kind} ${r.owner} (account ${r.id}) has balance ${r.balance}`),
    failures,
  );

  const mismatch = await db.query<{ id: Num; tenant_id: string; kind: string; owner: string; balance: Num; net: Num }>(
    `WITH flows AS (
       SELECT account, sum(delta) AS net FROM (
         SELECT to_account AS account, amount AS delta FROM transfers
         UNION ALL
         SELECT from_account, -amount FROM transfers) x
       GROUP BY account)
     SELECT a.id, a.tenant_id, a.kind, a.owner, a.balance, coalesce(f.net, 0) AS net
     FROM accounts a LEFT JOIN flows f ON f.account = a.id
     WHERE a.balance <> coalesce(f.net, 0)
     ORDER BY a.id`,
  );
  capped(
    'balance_matches_transfers',
    mismatch.rows.map(
      (r) => `tenant ${r.tenant_id}: ${r.kind} ${r.owner || "''"} (account ${r.id}) has balance ${r.balance}, its transfers net ${r.net}`,
    ),
    failures,
  );

  const orphans = await db.query<{ id: string; tenant_id: string; from_tenant: string | null; to_tenant: string | null }>(
    `SELECT t.id, t.tenant_id, f.tenant_id AS from_tenant, g.tenant_id AS to_tenant
     FROM transfers t
     LEFT JOIN accounts f ON f.id = t.from_account
     LEFT JOIN accounts g ON g.id = t.to_account
     WHERE f.id IS NULL OR g.id IS NULL OR f.tenant_id <> t.tenant_id OR g.tenant_id <> t.tenant_id
     ORDER BY t.id`,
  );
  capped(
    'transfer_accounts',
    orphans.rows.map(
      (r) =>
        `transfer ${r.id} (tenant ${r.tenant_id}): from account of tenant ${r.from_tenant ?? '(missing)'}, to account of tenant ${r.to_tenant ?? '(missing)'}`,
    ),
    failures,
  );

  const rounds = await db.query<{
    tenant_id: string;
    round_id: string;
    held: Num;
    stakes_in: Num;
    payouts: Num;
    refunds: Num;
    take: Num;
    other_in: Num;
    other_out: Num;
    wrong_round: Num;
  }>(
    `WITH moves AS (
       SELECT to_account AS account, 'in' AS dir, kind, amount, round_id FROM transfers
       UNION ALL
       SELECT from_account, 'out', kind, amount, round_id FROM transfers),
     r AS (
       SELECT e.tenant_id, e.owner AS round_id, e.balance AS held,
         coalesce(sum(m.amount) FILTER (WHERE m.dir = 'in' AND m.kind = $1), 0) AS stakes_in,
         coalesce(sum(m.amount) FILTER (WHERE m.dir = 'out' AND m.kind = $2), 0) AS payouts,
         coalesce(sum(m.amount) FILTER (WHERE m.dir = 'out' AND m.kind = $3), 0) AS refunds,
         coalesce(sum(m.amount) FILTER (WHERE m.dir = 'out' AND m.kind = $4), 0) AS take,
         coalesce(sum(m.amount) FILTER (WHERE m.dir = 'in' AND m.kind <> $1), 0) AS other_in,
         coalesce(sum(m.amount) FILTER (WHERE m.dir = 'out' AND m.kind NOT IN ($2, $3, $4)), 0) AS other_out,
         count(m.account) FILTER (WHERE m.round_id IS DISTINCT FROM e.owner) AS wrong_round
       FROM accounts e LEFT JOIN moves m ON m.account = e.id
       WHERE e.kind = 'escrow'
       GROUP BY e.id, e.tenant_id, e.owner, e.balance)
     SELECT * FROM r
     WHERE stakes_in <> payouts + refunds + take + held OR other_in <> 0 OR other_out <> 0 OR wrong_round <> 0
     ORDER BY tenant_id, round_id`,
    [TransferKinds.stake, TransferKinds.payout, TransferKinds.refund, TransferKinds.take],
  );
  capped(
    'round_escrow',
    rounds.rows.map((r) => {
      const parts = [`stakes in ${r.stakes_in} vs payouts ${r.payouts} + refunds ${r.refunds} + take ${r.take} + held ${r.held}`];
      if (Number(r.other_in) !== 0) parts.push(`${r.other_in} points moved in by other kinds`);
      if (Number(r.other_out) !== 0) parts.push(`${r.other_out} points moved out by other kinds`);
      if (Number(r.wrong_round) !== 0) parts.push(`${r.wrong_round} transfers name another round`);
      return `tenant ${r.tenant_id}: round ${r.round_id} leaks: ${parts.join('; ')}`;
    }),
    failures,
  );

  const unfinishedMoney = await db.query<{ tenant_id: string; channel_id: string; id: string; state: string; kind: string; balance: Num }>(
    `SELECT r.tenant_id, r.channel_id, r.id, r.state, a.kind, a.balance
     FROM rounds r JOIN accounts a ON a.tenant_id = r.tenant_id AND a.owner = r.uid AND a.kind IN ('escrow', 'maker')
     WHERE r.paid AND a.balance <> 0
     ORDER BY r.tenant_id, r.channel_id, r.id, a.kind`,
  );
  capped(
    'round_final',
    unfinishedMoney.rows.map(
      (r) => `tenant ${r.tenant_id}: round ${r.channel_id}/${r.id} is ${r.state} and paid, but its ${r.kind} account holds ${r.balance}`,
    ),
    failures,
  );

  return { ok: failures.length === 0, failures };
}
