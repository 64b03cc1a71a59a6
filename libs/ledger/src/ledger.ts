/**
 * The durable double-entry ledger, written through to Postgres with group
 * commit.
 *
 * ## Commit design
 *
 * `transfer()` validates the request (bad input is refused at once, nothing
 * queued) and appends it to an in-memory queue. A committer takes up to
 * `commitMaxTransfers` queued transfers and commits them in ONE statement —
 * `cp_ledger_commit(...)` (libs/store/migrations/1764500000000_ledger.sql) —
 * sent outside any explicit transaction, so the statement is its own
 * transaction: one round trip and one COMMIT (one WAL flush) per batch. A
 * batch starts when it is full, or `commitMs` after its oldest transfer was
 * queued, whichever comes first, and a commit slot is free (`commitConcurrency`
 * slots, default 4: while one batch's COMMIT waits for its WAL flush and this
 * process settles its promises, the next batch executes); while the slots are
 * busy the queue keeps filling, so under load the batch size grows by itself
 * (classic group commit). Every transfer's promise settles only after that statement (and
 * so its COMMIT) has returned: acks go out after the commit.
 *
 * Inside the statement (all decided by Postgres, against locked rows):
 * - idempotency: an id already committed with the same fingerprint is a
 *   replay (`replayed: true`, nothing written); with another fingerprint it is
 *   CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT;
 * - fencing: the batch's channel rows are locked FOR SHARE and a transfer
 *   whose epoch is not the channel's current one is refused
 *   (CP_ERR_CHANNEL_STALE_EPOCH); the `cp_check_epoch()` trigger checks every
 *   inserted row again;
 * - funds: the batch's wallets, escrows and makers are locked (FOR NO KEY
 *   UPDATE, in account-id order) and the transfers are applied in queue order
 *   against those balances; a debit that would take a wallet or escrow below
 *   zero is refused (CP_ERR_LEDGER_INSUFFICIENT_FUNDS), and so is a grant
 *   that would take a wallet above `walletMax` (MAX_POINTS:
 *   CP_ERR_LEDGER_BALANCE_LIMIT); ONLY that transfer is skipped — no
 *   savepoints, no aborted batch. The accounts' CHECK constraint stays the
 *   last line of defence for the floor;
 * - hot accounts (treasury, house, a market round's maker — every trade of
 *   the round touches it — and an escrow the batch only credits — every
 *   stake of a pool round) are not locked up front: the batch's net delta
 *   per hot account is applied with ONE update each, in account-id order, as
 *   the last thing before COMMIT, so such a row is written once per commit
 *   and its lock is held only from that update to the COMMIT. None of them
 *   can go below a floor that way (treasury, house and maker have none; the
 *   escrow only rises in that batch).
 *
 * Lock order (channels FOR SHARE by id → non-hot accounts by id → hot
 * accounts by id) is the same in every committer, in every process. One
 * account can be hot in one batch and not in another only for an escrow
 * (credited by stakes, debited by payouts); a round's payouts start after
 * its stakes stopped (the round locks first), and a deadlock would anyway
 * be retried (below).
 *
 * If the statement itself fails: a deadlock, serialization failure, a unique
 * violation (the same new id committed concurrently by another process) or a
 * lost connection is retried (the retry is safe: ids make it idempotent; a
 * batch that did commit before the connection was lost comes back as
 * replays). Any other failure is isolated by committing each transfer of the
 * batch on its own, so one bad transfer refuses only itself.
 *
 * Why not a SAVEPOINT per transfer: each savepoint is a round trip (node-pg
 * does not pipeline) and a subtransaction; more than 64 subtransactions with
 * writes in one transaction overflow Postgres's per-backend subxid cache and
 * slow every other session's snapshots. Measured on the 2-core dev machine
 * (Postgres 15, batches of 500): SAVEPOINT + INSERT + 2 UPDATEs + RELEASE
 * per transfer from node ≈ 415 ms per batch (~1,200 transfers/s per
 * connection); the same with a plpgsql EXCEPTION block per transfer ≈ 60–80
 * ms; this set-based statement ≈ 10 ms of server time (`npm run bench --
 * ledger`: ~33,000 durable transfers/s end to end).
 */
import { createHash } from 'node:crypto';
import type { Counter, Histogram } from '@opentelemetry/api';
import { CHANNEL_ID_RE, CrowdplayError, isCrowdplayError, MAX_POINTS, type ErrorCode } from '@crowdplay/protocol';
import type { Db } from '@crowdplay/store';
import { ThrottledLog, type Telemetry } from '@crowdplay/telemetry';

/** Account kinds; see the migration for what each one holds. */
export type AccountKind = 'wallet' | 'escrow' | 'maker' | 'treasury' | 'house';
export const ACCOUNT_KINDS: readonly AccountKind[] = ['wallet', 'escrow', 'maker', 'treasury', 'house'];

/**
 * An account of the request's tenant: `owner` is the viewer id (wallet), the
 * round id (escrow, maker) or '' (treasury, house — one per tenant).
 */
export interface AccountRef {
  kind: AccountKind;
  owner: string;
}

/**
 * Transfer kinds the ledger knows the meaning of (verifyLedger checks rounds
 * with them). Any lower-case kind matching TRANSFER_KIND_RE is accepted.
 */
export const TransferKinds = {
  /** treasury → wallet: points issued to a viewer. */
  grant: 'grant',
  /** wallet → escrow (pool round): a stake. */
  stake: 'stake',
  /** escrow → wallet: a winner's payout. */
  payout: 'payout',
  /** escrow → wallet: a stake returned (cancel, drain, nobody won). */
  refund: 'refund',
  /** escrow → house: the house take. */
  take: 'take',
  /** treasury → maker (market round): the LMSR subsidy ceil(b·ln n). */
  subsidy: 'subsidy',
  /** wallet → maker (market round): a buy's charge. */
  buy: 'buy',
  /** maker → wallet (market round): a sell's (cash-out's) proceeds. */
  sell: 'sell',
  /** wallet → maker (market round, cancel): taking back a profitable cash-out. */
  clawback: 'clawback',
  /** maker ↔ treasury (market round, at the end): what the maker account holds goes back (or its loss is covered). */
  makerClose: 'maker_close',
} as const;

/** Pattern of a transfer kind (the migration's CHECK is the same). */
export const TRANSFER_KIND_RE = /^[a-z][a-z_]{0,31}$/;
/** Pattern of transfer ids and round ids: 1–128 printable ASCII characters, no spaces. */
export const TRANSFER_ID_RE = /^[\x21-\x7e]{1,128}$/;
const TENANT_ID_RE = /^[A-Za-z0-9_-]{1,64}$/;
// eslint-disable-next-line no-control-regex
const OWNER_RE = /^[^\x00-\x1f\x7f]{1,128}$/;

/** One transfer of `amount` points from one account of `tenantId` to another. */
export interface TransferRequest {
  /** Idempotency id (TRANSFER_ID_RE), unique across the whole ledger: same id and fields is a no-op replay. */
  id: string;
  tenantId: string;
  from: AccountRef;
  to: AccountRef;
  /** Points: a positive safe integer. */
  amount: number;
  /** What the transfer is (TransferKinds, or any TRANSFER_KIND_RE kind). */
  kind: string;
  /** The channel the transfer is made for; requires `epoch` (fenced). Absent for grants. */
  channelId?: string;
  /** The channel's epoch the writer holds (from acquire). */
  epoch?: number;
  /** The round the transfer belongs to (TRANSFER_ID_RE). */
  roundId?: string;
}

/** The outcome of a committed (or replayed) transfer. */
export interface TransferResult {
  id: string;
  /** True when the id was already committed with the same fields: nothing was written. */
  replayed: boolean;
  /** `from`'s balance right after this transfer (null for hot accounts: treasury, house, maker, an escrow the batch only credited; and for replays). */
  fromBalance: number | null;
  /** `to`'s balance right after this transfer (null for hot accounts: treasury, house, maker, an escrow the batch only credited; and for replays). */
  toBalance: number | null;
}

/** Group-commit settings (the `ledger` section of libs/config: LEDGER_*). */
export interface LedgerOptions {
  /** LEDGER_COMMIT_MS: longest wait of a queued transfer before its batch starts, ms. */
  commitMs: number;
  /** LEDGER_COMMIT_MAX_TRANSFERS: most transfers per commit. */
  commitMaxTransfers: number;
  /** LEDGER_MAX_QUEUED: most transfers queued or committing; past it: CP_ERR_LEDGER_OVERLOADED. */
  maxQueued: number;
  /**
   * LEDGER_COMMIT_CONCURRENCY: commits running at once (default 4; PGlite
   * runs them one after another anyway). Batches in flight together may
   * apply in either order.
   */
  commitConcurrency?: number;
  /** LEDGER_ACCOUNT_CACHE_MAX: account ids cached in memory (default 100_000; oldest dropped first). */
  accountCacheMax?: number;
  /**
   * Most points a grant may leave in a wallet (default MAX_POINTS, 10^15): a grant past it is refused with
   * CP_ERR_LEDGER_BALANCE_LIMIT, checked in the commit against the locked wallet row.
   */
  walletMax?: number;
  /** Called after every commit (benchmarks, tests): transfers in it, its duration in ms. */
  onCommit?: (info: CommitInfo) => void;
}

/** One finished commit, for `onCommit`. */
export interface CommitInfo {
  /** Transfers in the batch (committed, replayed or refused). */
  transfers: number;
  /** Of those, committed now (not replays, not refused). */
  committed: number;
  /** Wall time of the commit, from taking the batch to settling its promises, ms. */
  commitMs: number;
  /** Longest queue wait + commit of a transfer in this batch (its ack latency), ms. */
  oldestMs: number;
}

/** Status codes returned by cp_ledger_commit (see the migration). */
const Status = {
  Committed: 0,
  Replayed: 1,
  Conflict: 2,
  InsufficientFunds: 3,
  StaleEpoch: 4,
  UnknownChannel: 5,
  ForeignChannel: 6,
  BalanceLimit: 7,
} as const;

interface Entry {
  req: TransferRequest;
  fp: Buffer;
  t0: number;
  fromId: number;
  toId: number;
  done: boolean;
  resolve: (r: TransferResult) => void;
  reject: (e: Error) => void;
  /** Identical requests (same id, same fields) that arrived while this one was pending. */
  followers: Array<{ resolve: (r: TransferResult) => void; reject: (e: Error) => void }> | null;
}

interface CommitRow {
  status: number[];
  from_balance: Array<string | number | null>;
  to_balance: Array<string | number | null>;
}

const COMMIT_SQL =
  'SELECT status, from_balance, to_balance FROM cp_ledger_commit($1::text[], $2::bytea, $3::int[], $4::int[], $5::bigint[], $6::int[], ' +
  '$7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[], $12::bigint[], $13::int, $14::int, $15::bigint)';

/** SQLSTATEs after which the whole batch is simply sent again. */
const RETRY_SQLSTATES = new Set(['40P01', '40001', '23505', '55P03', '57P01', '57P02', '57P03']);
const MAX_ATTEMPTS = 4;

/** One account per tenant: owner ''. */
const SINGLETON_KINDS: ReadonlySet<AccountKind> = new Set(['treasury', 'house']);
/**
 * Hot accounts: never locked up front, their net delta applied last (see the
 * module comment). Treasury and house are touched by every grant and take;
 * a market round's maker by every trade of its round. None of them has a
 * floor, so deferring cannot let one go below zero.
 */
const HOT_KINDS: ReadonlySet<AccountKind> = new Set(['treasury', 'house', 'maker']);
const CHECKED_KINDS: ReadonlySet<AccountKind> = new Set(['wallet', 'escrow']);

/**
 * SHA-256 of a transfer's fields (everything but the id and the epoch: a
 * retry of the same transfer by the channel's next owner is a replay, not a
 * conflict).
 */
export function transferFingerprint(req: TransferRequest): Buffer {
  const fields = [
    req.tenantId,
    req.from.kind,
    req.from.owner,
    req.to.kind,
    req.to.owner,
    req.amount,
    req.kind,
    req.channelId ?? null,
    req.roundId ?? null,
  ];
  return createHash('sha256').update(JSON.stringify(fields)).digest();
}

function invalid(why: string): CrowdplayError {
  return new CrowdplayError('CP_ERR_LEDGER_INVALID_TRANSFER', [why]);
}

function checkRef(ref: unknown, name: string): void {
  const r = ref as Partial<AccountRef> | null;
  if (!r || typeof r !== 'object' || !ACCOUNT_KINDS.includes(r.kind as AccountKind))
    throw invalid(`${name}.kind must be one of ${ACCOUNT_KINDS.join(', ')}`);
  if (SINGLETON_KINDS.has(r.kind as AccountKind)) {
    if (r.owner !== '') throw invalid(`${name}.owner must be '' for a ${r.kind} account`);
  } else if (typeof r.owner !== 'string' || !OWNER_RE.test(r.owner))
    throw invalid(`${name}.owner must be 1-128 characters without control characters`);
}

/**
 * Checks a transfer request.
 * @throws CrowdplayError CP_ERR_LEDGER_INVALID_AMOUNT (not a positive safe
 *   integer), CP_ERR_LEDGER_INVALID_TRANSFER (any other field)
 */
export function validateTransfer(req: TransferRequest): void {
  if (!req || typeof req !== 'object') throw invalid('not an object');
  if (typeof req.id !== 'string' || !TRANSFER_ID_RE.test(req.id)) throw invalid('id must be 1-128 printable ASCII characters');
  if (typeof req.tenantId !== 'string' || !TENANT_ID_RE.test(req.tenantId)) throw invalid('tenantId must match ^[A-Za-z0-9_-]{1,64}$');
  if (typeof req.amount !== 'number' || !Number.isSafeInteger(req.amount) || req.amount <= 0) {
    throw new CrowdplayError('CP_ERR_LEDGER_INVALID_AMOUNT', [String(req.amount)]);
  }
  checkRef(req.from, 'from');
  checkRef(req.to, 'to');
  if (req.from.kind === req.to.kind && req.from.owner === req.to.owner) throw invalid('from and to are the same account');
  if (typeof req.kind !== 'string' || !TRANSFER_KIND_RE.test(req.kind)) throw invalid('kind must match ^[a-z][a-z_]{0,31}$');
  if (req.channelId !== undefined) {
    if (typeof req.channelId !== 'string' || !CHANNEL_ID_RE.test(req.channelId))
      throw invalid('channelId must match ^[A-Za-z0-9_-]{1,64}$');
    if (typeof req.epoch !== 'number' || !Number.isSafeInteger(req.epoch) || req.epoch < 0)
      throw invalid('a transfer for a channel needs its epoch (a non-negative integer)');
  } else if (req.epoch !== undefined) throw invalid('epoch without channelId');
  if (req.roundId !== undefined && (typeof req.roundId !== 'string' || !TRANSFER_ID_RE.test(req.roundId))) {
    throw invalid('roundId must be 1-128 printable ASCII characters');
  }
}

function accountKey(tenantId: string, kind: AccountKind, owner: string): string {
  return `${tenantId}\u0000${kind}\u0000${owner}`;
}

function toNumberOrNull(v: string | number | null | undefined): number | null {
  return v === null || v === undefined ? null : Number(v);
}

/**
 * A bigint column read as points: never rounded. Postgres's bigint goes to 2^63 − 1; past
 * Number.MAX_SAFE_INTEGER a Number would silently be another figure, so that is an internal error naming `what`.
 * @throws RangeError past ±Number.MAX_SAFE_INTEGER
 */
export function safePoints(v: string | number, what: string): number {
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw new RangeError(`ledger: ${what} holds ${String(v)} points, beyond Number.MAX_SAFE_INTEGER`);
  return n;
}

function sqlState(err: unknown): string | undefined {
  const c = (err as { code?: unknown } | null)?.code;
  return typeof c === 'string' && !c.startsWith('CP_ERR_') ? c : undefined;
}

/**
 * True when the statement's connection failed (the store's CP_ERR_STORE_UNAVAILABLE: a restart, a crash; or a
 * socket error without SQLSTATE): the batch may or may not have committed, so it is never refused one by one.
 */
function connectionLost(err: unknown): boolean {
  return isCrowdplayError(err) ? err.code === 'CP_ERR_STORE_UNAVAILABLE' : sqlState(err) === undefined;
}

/** True for errors where sending the same batch again is the fix. */
function isRetryable(err: unknown): boolean {
  if (isCrowdplayError(err)) return err.code === 'CP_ERR_STORE_UNAVAILABLE';
  const state = sqlState(err);
  if (state === undefined) return true; // no SQLSTATE: the connection failed (ECONNRESET, …); the retry is idempotent
  return RETRY_SQLSTATES.has(state) || state.startsWith('08');
}

/** The error one transfer gets when the statement that carried it alone failed. */
function singleError(err: unknown, req: TransferRequest): Error {
  // A lost connection falls through to CP_ERR_LEDGER_UNAVAILABLE: the outcome is unknown, the caller sends it again.
  if (isCrowdplayError(err) && err.code !== 'CP_ERR_STORE_UNAVAILABLE') return err;
  switch (sqlState(err)) {
    case '23514':
      return new CrowdplayError('CP_ERR_LEDGER_INSUFFICIENT_FUNDS', [req.from.kind, req.from.owner, req.amount], { cause: err });
    case '22003':
      return new CrowdplayError('CP_ERR_LEDGER_INVALID_AMOUNT', [`${req.amount} (a balance would overflow)`], { cause: err });
    case '23503':
      return new CrowdplayError('CP_ERR_LEDGER_INVALID_TRANSFER', ['refers to a missing tenant, channel or account'], { cause: err });
    default:
      return new CrowdplayError('CP_ERR_LEDGER_UNAVAILABLE', [err instanceof Error ? err.message : String(err)], { cause: err });
  }
}

interface LedgerMetrics {
  transfers: Counter;
  commitMs: Histogram;
  ackMs: Histogram;
  batchSize: Histogram;
}

/**
 * The ledger's hot reads, as it runs them (libs/store/test/explain.test.ts checks with EXPLAIN that they use their
 * indexes): one account's balance ($1 tenant, $2 kind, $3 owner), many wallets' ($1 tenant, $2 owners), and the
 * per-wallet nets of a round ($1 tenant, $2 round, $3 kinds paid in, $4 kinds paid back).
 */
export const LEDGER_SQL = {
  balance: 'SELECT balance FROM accounts WHERE tenant_id = $1 AND kind = $2 AND owner = $3',
  walletBalances: "SELECT owner, balance FROM accounts WHERE tenant_id = $1 AND kind = 'wallet' AND owner = ANY($2::text[])",
  // Both round reads start from the round's few transfers (transfers_round_idx) and look each account up by its
  // id alone (accounts_pkey) in a LATERAL subquery that OFFSET 0 keeps from being flattened into a join; kind and
  // tenant are checked outside it. With the accounts' statistics out of date (a tenant's wallets created since
  // the last ANALYZE) the planner otherwise walked every wallet of the tenant, once per round or per transfer.
  roundNets: `SELECT a.owner, sum(CASE WHEN a.paid_in THEN t.amount ELSE -t.amount END) AS net
       FROM transfers t
       CROSS JOIN LATERAL (
         SELECT w.owner, w.kind, w.tenant_id, t.kind = ANY($3::text[]) AS paid_in FROM accounts w
         WHERE w.id = CASE WHEN t.kind = ANY($3::text[]) THEN t.from_account ELSE t.to_account END
         OFFSET 0) a
       WHERE t.round_id = $2 AND t.tenant_id = $1 AND t.kind = ANY($3::text[] || $4::text[])
         AND a.kind = 'wallet' AND a.tenant_id = t.tenant_id
       GROUP BY a.owner HAVING sum(CASE WHEN a.paid_in THEN t.amount ELSE -t.amount END) <> 0
       ORDER BY a.owner`,
  // $4: one viewer's wallet only, or NULL for every viewer.
  roundFlows: `SELECT t.round_id, a.owner,
         COALESCE(sum(t.amount) FILTER (WHERE a.paid_in AND t.kind = ANY($3::text[])), 0) AS staked,
         COALESCE(sum(CASE WHEN a.paid_in THEN -t.amount ELSE t.amount END), 0) AS moved
       FROM transfers t
       CROSS JOIN LATERAL (
         SELECT w.owner, w.kind, w.tenant_id, w.id = t.from_account AS paid_in FROM accounts w
         WHERE w.id = ANY(ARRAY[t.from_account, t.to_account])
         OFFSET 0) a
       WHERE t.round_id = ANY($2::text[]) AND t.tenant_id = $1 AND a.kind = 'wallet' AND a.tenant_id = t.tenant_id
         AND ($4::text IS NULL OR a.owner = $4::text)
       GROUP BY t.round_id, a.owner
       ORDER BY t.round_id, a.owner`,
} as const;

/**
 * The ledger of one process. Shares the store's `Db` (it does not close it).
 *
 * Ordering: inside one batch, transfers apply in the order they were queued.
 * Up to `commitConcurrency` batches (default 4) commit at once, and those may
 * apply in either order; so a transfer that depends on another (a stake of
 * granted points) is sent after the other's ack — which is how a shard works
 * anyway (a viewer stakes what their acked balance shows). With
 * `commitConcurrency` 1 batches commit strictly one after another.
 */
export class Ledger {
  private readonly queue: Entry[] = [];
  /** Entries queued or committing, by id (identical duplicates follow the first). */
  private readonly pendingById = new Map<string, Entry>();
  private pending = 0;
  private inFlight = 0;
  private timer: NodeJS.Timeout | NodeJS.Immediate | null = null;
  private timerDueAt = 0;
  private draining = false;
  private closePromise: Promise<void> | null = null;
  private idleWaiters: Array<() => void> = [];
  private readonly accountIds = new Map<string, number>();
  private readonly knownTenants = new Set<string>();
  private readonly concurrency: number;
  private readonly accountCacheMax: number;
  private readonly walletMax: number;
  private readonly metrics: LedgerMetrics | null;
  /** "ledger commit failed", at most once per REFUSAL_LOG_INTERVAL_MS. */
  private readonly commitFailLog: ThrottledLog | undefined;

  /**
   * @param db the store's Db (pg Pool or PGlite); migrations must have run
   * @param opts group-commit settings (`config.ledger` fits)
   * @param telemetry optional: metrics `crowdplay_ledger_*` and refusals (area `ledger`) are counted there
   */
  constructor(
    private readonly db: Db,
    private readonly opts: LedgerOptions,
    private readonly telemetry?: Telemetry,
  ) {
    if (!Number.isSafeInteger(opts.commitMs) || opts.commitMs < 0) throw new RangeError('commitMs must be a non-negative integer');
    if (!Number.isSafeInteger(opts.commitMaxTransfers) || opts.commitMaxTransfers < 1)
      throw new RangeError('commitMaxTransfers must be a positive integer');
    if (!Number.isSafeInteger(opts.maxQueued) || opts.maxQueued < 1) throw new RangeError('maxQueued must be a positive integer');
    this.concurrency = opts.commitConcurrency ?? 4;
    if (!Number.isSafeInteger(this.concurrency) || this.concurrency < 1)
      throw new RangeError('commitConcurrency must be a positive integer');
    this.accountCacheMax = opts.accountCacheMax ?? 100_000;
    this.walletMax = opts.walletMax ?? MAX_POINTS;
    if (!Number.isSafeInteger(this.walletMax) || this.walletMax < 1) throw new RangeError('walletMax must be a positive integer');
    this.commitFailLog = telemetry ? new ThrottledLog(telemetry.logger, telemetry.refusals.intervalMs) : undefined;
    if (telemetry) {
      const m = telemetry.metrics;
      this.metrics = {
        transfers: m.counter('crowdplay_ledger_transfers_total'),
        commitMs: m.histogram('crowdplay_ledger_commit_ms'),
        ackMs: m.histogram('crowdplay_ledger_ack_ms'),
        batchSize: m.histogram('crowdplay_ledger_commit_transfers'),
      };
      m.gauge('crowdplay_ledger_queued', () => this.pending);
    } else this.metrics = null;
  }

  /** Transfers queued or committing right now. */
  get queued(): number {
    return this.pending;
  }

  /**
   * Queues a transfer; resolves after the commit that carried it. The two
   * accounts are created (balance 0) before the commit if they do not exist
   * yet — also when the transfer is then refused.
   * @returns the committed transfer (or `replayed: true` for an identical replay)
   * @throws (rejects) CrowdplayError: CP_ERR_LEDGER_INVALID_AMOUNT /
   *   CP_ERR_LEDGER_INVALID_TRANSFER (bad input, nothing queued),
   *   CP_ERR_LEDGER_INSUFFICIENT_FUNDS, CP_ERR_LEDGER_BALANCE_LIMIT (a grant
   *   past `walletMax`), CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT,
   *   CP_ERR_CHANNEL_STALE_EPOCH, CP_ERR_CHANNEL_UNKNOWN,
   *   CP_ERR_AUTH_FORBIDDEN_CHANNEL (the channel is another tenant's),
   *   CP_ERR_TENANT_UNKNOWN, CP_ERR_LEDGER_OVERLOADED (over LEDGER_MAX_QUEUED),
   *   CP_ERR_LEDGER_CLOSED (draining), CP_ERR_LEDGER_UNAVAILABLE (the database
   *   failed; the transfer may or may not have committed — send it again with
   *   the same id to find out).
   */
  transfer(req: TransferRequest): Promise<TransferResult> {
    try {
      validateTransfer(req);
    } catch (err) {
      this.refuse((err as CrowdplayError).code, req?.id);
      return Promise.reject(err as Error);
    }
    if (this.draining) return this.refused(new CrowdplayError('CP_ERR_LEDGER_CLOSED'), req.id);
    const fp = transferFingerprint(req);
    const same = this.pendingById.get(req.id);
    if (same) {
      if (!same.fp.equals(fp)) return this.refused(new CrowdplayError('CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT', [req.id]), req.id);
      return new Promise<TransferResult>((resolve, reject) => {
        (same.followers ??= []).push({ resolve: (r) => resolve({ ...r, replayed: true, fromBalance: null, toBalance: null }), reject });
      });
    }
    if (this.pending >= this.opts.maxQueued)
      return this.refused(new CrowdplayError('CP_ERR_LEDGER_OVERLOADED', [this.opts.maxQueued]), req.id);
    return new Promise<TransferResult>((resolve, reject) => {
      // Copy the request: the caller may reuse its object.
      const copy: TransferRequest = {
        ...req,
        from: { kind: req.from.kind, owner: req.from.owner },
        to: { kind: req.to.kind, owner: req.to.owner },
      };
      const entry: Entry = { req: copy, fp, t0: performance.now(), fromId: 0, toId: 0, done: false, resolve, reject, followers: null };
      this.queue.push(entry);
      this.pendingById.set(req.id, entry);
      this.pending++;
      this.maybeFlush('enqueue');
    });
  }

  /**
   * Grants points to a viewer: treasury → wallet, kind `grant`, no channel.
   * The treasury goes negative by the same amount (it is the issuance account).
   * @throws (rejects) as `transfer`
   */
  grant(tenantId: string, viewer: string, amount: number, id: string): Promise<TransferResult> {
    return this.transfer({
      id,
      tenantId,
      from: { kind: 'treasury', owner: '' },
      to: { kind: 'wallet', owner: viewer },
      amount,
      kind: TransferKinds.grant,
    });
  }

  /**
   * The committed balance of an account, points (0 for an account that does not exist yet).
   * @throws RangeError naming the account when its balance is beyond Number.MAX_SAFE_INTEGER (never rounded);
   *   CrowdplayError CP_ERR_LEDGER_INVALID_TRANSFER for a malformed ref; CP_ERR_STORE_UNAVAILABLE when the
   *   database cannot be reached (retryable)
   */
  async balance(tenantId: string, ref: AccountRef): Promise<number> {
    if (typeof tenantId !== 'string' || !TENANT_ID_RE.test(tenantId)) throw invalid('tenantId must match ^[A-Za-z0-9_-]{1,64}$');
    checkRef(ref, 'account');
    const { rows } = await this.db.query<{ balance: string | number }>(LEDGER_SQL.balance, [tenantId, ref.kind, ref.owner]);
    return rows[0] ? safePoints(rows[0].balance, `tenant ${tenantId} ${ref.kind} account ${JSON.stringify(ref.owner)}`) : 0;
  }

  /**
   * Committed balances of many wallets of one tenant in one query, points
   * (0 for a wallet that does not exist yet).
   * @param viewers wallet owners (at most 10,000 per call)
   * @returns viewer → balance, for every viewer asked
   * @throws RangeError naming the wallet when a balance is beyond Number.MAX_SAFE_INTEGER (never rounded);
   *   CrowdplayError CP_ERR_LEDGER_INVALID_TRANSFER for a malformed tenant or viewer, or too many viewers;
   *   CP_ERR_STORE_UNAVAILABLE when the database cannot be reached (retryable)
   */
  async walletBalances(tenantId: string, viewers: readonly string[]): Promise<Map<string, number>> {
    if (typeof tenantId !== 'string' || !TENANT_ID_RE.test(tenantId)) throw invalid('tenantId must match ^[A-Za-z0-9_-]{1,64}$');
    if (viewers.length > 10_000) throw invalid('at most 10,000 wallets per walletBalances call');
    for (const v of viewers) checkRef({ kind: 'wallet', owner: v }, 'wallet');
    const out = new Map<string, number>(viewers.map((v) => [v, 0]));
    if (viewers.length === 0) return out;
    const { rows } = await this.db.query<{ owner: string; balance: string | number }>(LEDGER_SQL.walletBalances, [tenantId, viewers]);
    for (const r of rows) out.set(r.owner, safePoints(r.balance, `tenant ${tenantId} wallet ${JSON.stringify(r.owner)}`));
    return out;
  }

  /**
   * What each viewer moved into a round, net of what the round moved back
   * BEFORE it ended (payouts, refunds and claw-backs excluded), from the
   * committed transfers named with `roundId` (uses transfers_round_idx):
   * Σ `in` kinds from the wallet − Σ `back` kinds to the wallet.
   * For a pool: in = stake, back = none; for a market: in = buy, back = sell.
   * This is what a cancel refunds (a negative net is a claw-back).
   * @returns viewer → net points (viewers with a zero net omitted), sorted by viewer
   */
  async roundNets(
    tenantId: string,
    roundId: string,
    inKinds: readonly string[],
    backKinds: readonly string[],
  ): Promise<Array<[string, number]>> {
    if (typeof tenantId !== 'string' || !TENANT_ID_RE.test(tenantId)) throw invalid('tenantId must match ^[A-Za-z0-9_-]{1,64}$');
    if (typeof roundId !== 'string' || !TRANSFER_ID_RE.test(roundId)) throw invalid('roundId must be 1-128 printable ASCII characters');
    const { rows } = await this.db.query<{ owner: string; net: string | number }>(LEDGER_SQL.roundNets, [
      tenantId,
      roundId,
      inKinds,
      backKinds,
    ]);
    return rows.map((r) => [r.owner, safePoints(r.net, `round ${roundId}'s net of tenant ${tenantId} wallet ${JSON.stringify(r.owner)}`)]);
  }

  /**
   * Every viewer's points into and out of a round, from its committed
   * transfers (uses transfers_round_idx): `staked` = Σ `stakeKinds` from the
   * viewer's wallet (stakes, buys); `paid` = what the round gave back net of
   * what else the wallet sent it (payouts, refunds, sale proceeds, less
   * claw-backs), so `paid − staked` is the viewer's net result.
   * @returns [viewer, staked, paid] per viewer that moved points, sorted by viewer
   * @throws CrowdplayError CP_ERR_LEDGER_INVALID_TRANSFER (malformed tenant or round id)
   */
  async roundFlows(tenantId: string, roundId: string, stakeKinds: readonly string[]): Promise<Array<[string, number, number]>> {
    const flows = await this.flows(tenantId, [roundId], stakeKinds, null);
    return flows.map((f) => [f.viewer, f.staked, f.paid]);
  }

  /**
   * One viewer's {@link roundFlows} in each of `roundIds` (one query, e.g. a page of a channel's rounds).
   * @returns round id → { staked, paid } for the rounds in which the viewer moved points
   * @throws CrowdplayError CP_ERR_LEDGER_INVALID_TRANSFER (malformed tenant or round id)
   */
  async viewerRoundFlows(
    tenantId: string,
    viewer: string,
    roundIds: readonly string[],
    stakeKinds: readonly string[],
  ): Promise<Map<string, { staked: number; paid: number }>> {
    const out = new Map<string, { staked: number; paid: number }>();
    if (roundIds.length === 0) return out;
    for (const f of await this.flows(tenantId, roundIds, stakeKinds, viewer)) out.set(f.roundId, { staked: f.staked, paid: f.paid });
    return out;
  }

  private async flows(
    tenantId: string,
    roundIds: readonly string[],
    stakeKinds: readonly string[],
    viewer: string | null,
  ): Promise<Array<{ roundId: string; viewer: string; staked: number; paid: number }>> {
    if (typeof tenantId !== 'string' || !TENANT_ID_RE.test(tenantId)) throw invalid('tenantId must match ^[A-Za-z0-9_-]{1,64}$');
    for (const id of roundIds)
      if (typeof id !== 'string' || !TRANSFER_ID_RE.test(id)) throw invalid('roundId must be 1-128 printable ASCII characters');
    const { rows } = await this.db.query<{ round_id: string; owner: string; staked: string | number; moved: string | number }>(
      LEDGER_SQL.roundFlows,
      [tenantId, [...roundIds], stakeKinds, viewer],
    );
    // moved = Σ in − Σ out of the wallet; paid = moved + staked (the stakes are the outflows that are not claw-backs).
    return rows.map((r) => {
      const what = `round ${r.round_id}'s flows of tenant ${tenantId} wallet ${JSON.stringify(r.owner)}`;
      const staked = safePoints(r.staked, what);
      return { roundId: r.round_id, viewer: r.owner, staked, paid: safePoints(safePoints(r.moved, what) + staked, what) };
    });
  }

  /**
   * Ids of the round's committed transfers of these kinds (uses
   * transfers_round_idx), sorted: what a shard that takes over an open round
   * checks its handed-off book against.
   * @throws CrowdplayError CP_ERR_LEDGER_INVALID_TRANSFER (malformed tenant or round id)
   */
  async roundTransferIds(tenantId: string, roundId: string, kinds: readonly string[]): Promise<string[]> {
    if (typeof tenantId !== 'string' || !TENANT_ID_RE.test(tenantId)) throw invalid('tenantId must match ^[A-Za-z0-9_-]{1,64}$');
    if (typeof roundId !== 'string' || !TRANSFER_ID_RE.test(roundId)) throw invalid('roundId must be 1-128 printable ASCII characters');
    const { rows } = await this.db.query<{ id: string }>(
      'SELECT id FROM transfers WHERE round_id = $2 AND tenant_id = $1 AND kind = ANY($3::text[]) ORDER BY id',
      [tenantId, roundId, kinds],
    );
    return rows.map((r) => r.id);
  }

  /**
   * {@link roundTransferIds} of many rounds in one query (a bulk acquire resuming the rounds of many channels):
   * the committed transfers of these kinds of each (tenant, round), by round id, each list sorted. Rounds with
   * none are absent.
   * @throws CrowdplayError CP_ERR_LEDGER_INVALID_TRANSFER (a malformed tenant or round id; nothing is read)
   */
  async roundTransferIdsMany(
    rounds: ReadonlyArray<{ tenantId: string; roundId: string }>,
    kinds: readonly string[],
  ): Promise<Map<string, Array<{ id: string; kind: string }>>> {
    for (const r of rounds) {
      if (typeof r.tenantId !== 'string' || !TENANT_ID_RE.test(r.tenantId)) throw invalid('tenantId must match ^[A-Za-z0-9_-]{1,64}$');
      if (typeof r.roundId !== 'string' || !TRANSFER_ID_RE.test(r.roundId))
        throw invalid('roundId must be 1-128 printable ASCII characters');
    }
    const out = new Map<string, Array<{ id: string; kind: string }>>();
    if (rounds.length === 0) return out;
    const { rows } = await this.db.query<{ id: string; kind: string; round_id: string }>(
      `SELECT t.id, t.kind, t.round_id FROM transfers t
       JOIN unnest($1::text[], $2::text[]) AS r(tenant_id, round_id) ON t.round_id = r.round_id AND t.tenant_id = r.tenant_id
       WHERE t.kind = ANY($3::text[]) ORDER BY t.round_id, t.id`,
      [rounds.map((r) => r.tenantId), rounds.map((r) => r.roundId), kinds],
    );
    for (const r of rows) {
      const list = out.get(r.round_id);
      if (list) list.push({ id: r.id, kind: r.kind });
      else out.set(r.round_id, [{ id: r.id, kind: r.kind }]);
    }
    return out;
  }

  /**
   * Creates the account if it does not exist (balance 0).
   * @returns its id
   * @throws CrowdplayError CP_ERR_LEDGER_INVALID_TRANSFER (malformed ref), CP_ERR_TENANT_UNKNOWN
   */
  async ensureAccount(tenantId: string, ref: AccountRef): Promise<number> {
    if (typeof tenantId !== 'string' || !TENANT_ID_RE.test(tenantId)) throw invalid('tenantId must match ^[A-Za-z0-9_-]{1,64}$');
    checkRef(ref, 'account');
    const unknown = await this.unknownTenants([tenantId]);
    if (unknown.size > 0) throw new CrowdplayError('CP_ERR_TENANT_UNKNOWN', [tenantId]);
    const ids = await this.upsertAccounts([{ tenantId, kind: ref.kind, owner: ref.owner }]);
    return ids.get(accountKey(tenantId, ref.kind, ref.owner))!;
  }

  /**
   * Stops taking transfers (new ones: CP_ERR_LEDGER_CLOSED), commits every
   * queued one at once (no commitMs wait), and resolves when none is left.
   */
  async drain(): Promise<void> {
    this.draining = true;
    this.maybeFlush('drain');
    if (this.pending === 0) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  /** Drains, then stops. Safe to call twice. Does not close the Db (the store owns it). */
  close(): Promise<void> {
    this.closePromise ??= this.drain().finally(() => this.clearTimer());
    return this.closePromise;
  }

  // ---- queue ----

  private refuse(code: ErrorCode | undefined, id: unknown, n = 1): void {
    this.metrics?.transfers.add(n, { result: 'refused' });
    this.telemetry?.refusals.refuse('ledger', code ?? 'CP_ERR_LEDGER_INVALID_TRANSFER', { id: typeof id === 'string' ? id : undefined }, n);
  }

  private refused(err: CrowdplayError, id: string): Promise<TransferResult> {
    this.refuse(err.code, id);
    return Promise.reject(err);
  }

  /**
   * Starts every batch that is due while commit slots are free. Due: the
   * queue holds a full batch; or the oldest queued transfer has waited
   * `commitMs` (checked when the timer fires and when a commit ends — a
   * transfer being queued never makes a partial batch due, so commitMs 0
   * still batches a whole event-loop turn); or the ledger is draining.
   */
  private maybeFlush(why: 'enqueue' | 'timer' | 'commit' | 'drain'): void {
    while (this.inFlight < this.concurrency && this.queue.length > 0) {
      const full = this.queue.length >= this.opts.commitMaxTransfers;
      const due =
        full || this.draining || why === 'timer' || (why === 'commit' && performance.now() >= this.queue[0]!.t0 + this.opts.commitMs);
      if (!due) break;
      const batch = this.queue.splice(0, this.opts.commitMaxTransfers);
      this.inFlight++;
      void this.commit(batch);
    }
    this.syncTimer();
  }

  /** Keeps one timer armed for the oldest queued transfer while a commit slot is free. */
  private syncTimer(): void {
    if (this.queue.length === 0 || this.inFlight >= this.concurrency) {
      this.clearTimer();
      return;
    }
    const dueAt = this.queue[0]!.t0 + this.opts.commitMs;
    if (this.timer && this.timerDueAt === dueAt) return;
    this.clearTimer();
    this.timerDueAt = dueAt;
    const fire = (): void => {
      this.timer = null;
      this.maybeFlush('timer');
    };
    this.timer = this.opts.commitMs === 0 ? setImmediate(fire) : setTimeout(fire, Math.max(0, dueAt - performance.now()));
  }

  private clearTimer(): void {
    if (!this.timer) return;
    if ('refresh' in this.timer) clearTimeout(this.timer);
    else clearImmediate(this.timer);
    this.timer = null;
  }

  private settle(e: Entry, result: TransferResult | Error): void {
    if (e.done) return;
    e.done = true;
    if (this.pendingById.get(e.req.id) === e) this.pendingById.delete(e.req.id);
    if (result instanceof Error) {
      this.refuse(isCrowdplayError(result) ? result.code : 'CP_ERR_LEDGER_UNAVAILABLE', e.req.id, 1 + (e.followers?.length ?? 0));
      e.reject(result);
      if (e.followers) for (const f of e.followers) f.reject(result);
    } else {
      this.metrics?.transfers.add(1, { result: result.replayed ? 'replayed' : 'committed' });
      e.resolve(result);
      if (e.followers) {
        this.metrics?.transfers.add(e.followers.length, { result: 'replayed' });
        for (const f of e.followers) f.resolve(result);
      }
    }
  }

  private async commit(batch: Entry[]): Promise<void> {
    const started = performance.now();
    let committed = 0;
    try {
      await this.resolveAccounts(batch);
      const live = batch.filter((e) => !e.done);
      if (live.length > 0) committed = await this.commitWithRetry(live);
    } catch (err) {
      const e = new CrowdplayError('CP_ERR_LEDGER_UNAVAILABLE', [err instanceof Error ? err.message : String(err)], { cause: err });
      // While Postgres is down every batch fails: one line per interval, with the count (the refusals are counted below).
      this.commitFailLog?.error('commit', { err, transfers: batch.length }, 'ledger commit failed');
      for (const entry of batch) this.settle(entry, e);
    } finally {
      const now = performance.now();
      const info: CommitInfo = {
        transfers: batch.length,
        committed,
        commitMs: now - started,
        oldestMs: batch.length > 0 ? now - batch[0]!.t0 : 0,
      };
      for (const e of batch) if (!e.done) this.settle(e, new CrowdplayError('CP_ERR_LEDGER_UNAVAILABLE', ['no result for this transfer']));
      this.inFlight--;
      this.pending -= batch.length;
      if (this.metrics) {
        this.metrics.commitMs.record(info.commitMs);
        this.metrics.ackMs.record(info.oldestMs);
        this.metrics.batchSize.record(info.transfers);
      }
      this.opts.onCommit?.(info);
      this.maybeFlush('commit');
      if (this.pending === 0 && this.idleWaiters.length > 0) {
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const w of waiters) w();
      }
    }
  }

  // ---- accounts ----

  private async unknownTenants(tenants: string[]): Promise<Set<string>> {
    const ask = tenants.filter((t) => !this.knownTenants.has(t));
    if (ask.length === 0) return new Set();
    const { rows } = await this.db.query<{ id: string }>('SELECT id FROM tenants WHERE id = ANY($1::text[])', [ask]);
    for (const r of rows) this.knownTenants.add(r.id);
    return new Set(ask.filter((t) => !this.knownTenants.has(t)));
  }

  /**
   * Creates missing accounts (autocommit, before the batch's transaction, so
   * the batch never waits on another committer's uncommitted account row)
   * and returns key → id for every ref.
   */
  private async upsertAccounts(refs: Array<{ tenantId: string; kind: AccountKind; owner: string }>): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    const t: string[] = [];
    const k: string[] = [];
    const o: string[] = [];
    for (const r of refs) {
      t.push(r.tenantId);
      k.push(r.kind);
      o.push(r.owner);
    }
    const take = (rows: Array<{ id: string | number; tenant_id: string; kind: AccountKind; owner: string }>): void => {
      for (const r of rows) out.set(accountKey(r.tenant_id, r.kind, r.owner), Number(r.id));
    };
    const { rows } = await this.db.query<{ id: string | number; tenant_id: string; kind: AccountKind; owner: string }>(
      `WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS u(tenant_id, kind, owner)),
       ins AS (
         INSERT INTO accounts (tenant_id, kind, owner)
         SELECT tenant_id, kind, owner FROM u ORDER BY tenant_id, kind, owner COLLATE "C"
         ON CONFLICT DO NOTHING RETURNING id, tenant_id, kind, owner)
       SELECT id, tenant_id, kind, owner FROM ins
       UNION ALL
       SELECT a.id, a.tenant_id, a.kind, a.owner FROM accounts a JOIN u ON a.tenant_id = u.tenant_id AND a.kind = u.kind AND a.owner = u.owner`,
      [t, k, o],
    );
    take(rows);
    // A row inserted concurrently by another process is not in this statement's snapshot: read it now.
    const missing = refs.filter((r) => !out.has(accountKey(r.tenantId, r.kind, r.owner)));
    if (missing.length > 0) {
      const again = await this.db.query<{ id: string | number; tenant_id: string; kind: AccountKind; owner: string }>(
        `SELECT a.id, a.tenant_id, a.kind, a.owner FROM accounts a
         JOIN unnest($1::text[], $2::text[], $3::text[]) AS u(tenant_id, kind, owner)
           ON a.tenant_id = u.tenant_id AND a.kind = u.kind AND a.owner = u.owner`,
        [missing.map((r) => r.tenantId), missing.map((r) => r.kind), missing.map((r) => r.owner)],
      );
      take(again.rows);
    }
    return out;
  }

  private cacheAccount(key: string, id: number): void {
    if (this.accountIds.size >= this.accountCacheMax) {
      // Oldest first (Map keeps insertion order).
      const first = this.accountIds.keys().next();
      if (!first.done) this.accountIds.delete(first.value);
    }
    this.accountIds.set(key, id);
  }

  /** Fills fromId/toId of every entry; refuses entries of unknown tenants. */
  private async resolveAccounts(batch: Entry[]): Promise<void> {
    let missing: Map<string, { tenantId: string; kind: AccountKind; owner: string }> | null = null;
    for (const e of batch) {
      const { tenantId, from, to } = e.req;
      const fk = accountKey(tenantId, from.kind, from.owner);
      const tk = accountKey(tenantId, to.kind, to.owner);
      const f = this.accountIds.get(fk);
      const t = this.accountIds.get(tk);
      if (f !== undefined) e.fromId = f;
      else (missing ??= new Map()).set(fk, { tenantId, kind: from.kind, owner: from.owner });
      if (t !== undefined) e.toId = t;
      else (missing ??= new Map()).set(tk, { tenantId, kind: to.kind, owner: to.owner });
    }
    if (!missing) return;
    const unknown = await this.unknownTenants([...new Set([...missing.values()].map((r) => r.tenantId))]);
    if (unknown.size > 0) {
      for (const e of batch) if (unknown.has(e.req.tenantId)) this.settle(e, new CrowdplayError('CP_ERR_TENANT_UNKNOWN', [e.req.tenantId]));
      for (const [key, r] of missing) if (unknown.has(r.tenantId)) missing.delete(key);
    }
    if (missing.size > 0) {
      const ids = await this.upsertAccounts([...missing.values()]);
      for (const [key, id] of ids) this.cacheAccount(key, id);
      for (const e of batch) {
        if (e.done) continue;
        const { tenantId, from, to } = e.req;
        e.fromId ||= ids.get(accountKey(tenantId, from.kind, from.owner)) ?? 0;
        e.toId ||= ids.get(accountKey(tenantId, to.kind, to.owner)) ?? 0;
        if (!e.fromId || !e.toId) this.settle(e, new CrowdplayError('CP_ERR_LEDGER_UNAVAILABLE', ['account could not be created']));
      }
    }
  }

  // ---- the commit statement ----

  /**
   * Commits `live`; returns how many were committed (not replayed, not refused).
   * A statement that fails is sent again (retryable errors, MAX_ATTEMPTS);
   * if it still fails with a SQLSTATE, each transfer is committed on its own
   * so the one that breaks the statement refuses only itself. Connection
   * failures that outlast the retries reject the whole batch
   * (CP_ERR_LEDGER_UNAVAILABLE, via commit()).
   */
  private async commitWithRetry(live: Entry[]): Promise<number> {
    try {
      return this.apply(live, await this.sendWithRetry(live));
    } catch (err) {
      if (connectionLost(err)) throw err;
      if (live.length === 1) {
        this.settle(live[0]!, singleError(err, live[0]!.req));
        return 0;
      }
      this.telemetry?.logger.warn({ err, transfers: live.length }, 'ledger batch failed; committing its transfers one by one');
      let committed = 0;
      for (const e of live) {
        try {
          committed += this.apply([e], await this.sendWithRetry([e]));
        } catch (single) {
          this.settle(e, singleError(single, e.req));
        }
      }
      return committed;
    }
  }

  private async sendWithRetry(live: Entry[]): Promise<CommitRow> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.send(live);
      } catch (err) {
        if (attempt >= MAX_ATTEMPTS || !isRetryable(err)) throw err;
        // A short, jittered pause so two committers that collided do not collide again.
        await new Promise((r) => setTimeout(r, attempt * (2 + Math.random() * 8)));
      }
    }
  }

  /** Sends one batch as one cp_ledger_commit statement (its own transaction). */
  private async send(live: Entry[]): Promise<CommitRow> {
    const n = live.length;
    // The batch's distinct accounts, ordered as cp_ledger_commit wants them:
    // the checked ones (wallets, escrows that the batch debits), then other
    // non-hot ones, then the hot ones (treasury, house, makers, and an escrow
    // the batch only credits: a pool's stakes all go to one escrow, and a
    // balance that only rises needs no floor check, so stakes of one round in
    // two concurrent commits do not wait for each other's row lock).
    const checked: number[] = [];
    const other: number[] = [];
    const hot: number[] = [];
    const seen = new Set<number>();
    const debited = new Set<number>();
    for (const e of live) debited.add(e.fromId);
    const classify = (id: number, kind: AccountKind): void => {
      if (seen.has(id)) return;
      seen.add(id);
      if (HOT_KINDS.has(kind) || (kind === 'escrow' && !debited.has(id))) hot.push(id);
      else (CHECKED_KINDS.has(kind) ? checked : other).push(id);
    };
    for (const e of live) {
      classify(e.fromId, e.req.from.kind);
      classify(e.toId, e.req.to.kind);
    }
    const accounts = checked.concat(other, hot);
    const index = new Map<number, number>();
    for (let i = 0; i < accounts.length; i++) index.set(accounts[i]!, i + 1); // 1-based for SQL arrays

    const ids = new Array<string>(n);
    const from = new Array<number>(n);
    const to = new Array<number>(n);
    const amounts = new Array<number>(n);
    const ctx = new Array<number>(n);
    const fps = Buffer.allocUnsafe(n * 32);
    const ctxIndex = new Map<string, number>();
    const ctxTenants: string[] = [];
    const ctxChannels: Array<string | null> = [];
    const ctxEpochs: Array<number | null> = [];
    const ctxKinds: string[] = [];
    const ctxRounds: Array<string | null> = [];
    for (let j = 0; j < n; j++) {
      const { req, fp, fromId, toId } = live[j]!;
      ids[j] = req.id;
      from[j] = index.get(fromId)!;
      to[j] = index.get(toId)!;
      amounts[j] = req.amount;
      fp.copy(fps, j * 32);
      const channel = req.channelId ?? null;
      const epoch = channel === null ? null : req.epoch!;
      const round = req.roundId ?? null;
      // \u0001 marks an absent channel or round (ids are printable ASCII, so it never collides).
      const key = `${req.tenantId}\u0000${channel ?? '\u0001'}\u0000${epoch}\u0000${req.kind}\u0000${round ?? '\u0001'}`;
      let c = ctxIndex.get(key);
      if (c === undefined) {
        ctxTenants.push(req.tenantId);
        ctxChannels.push(channel);
        ctxEpochs.push(epoch);
        ctxKinds.push(req.kind);
        ctxRounds.push(round);
        c = ctxTenants.length;
        ctxIndex.set(key, c);
      }
      ctx[j] = c;
    }
    const { rows } = await this.db.query<CommitRow>(COMMIT_SQL, [
      ids,
      fps,
      from,
      to,
      amounts,
      ctx,
      ctxTenants,
      ctxChannels,
      ctxEpochs,
      ctxKinds,
      ctxRounds,
      accounts,
      checked.length,
      checked.length + other.length,
      this.walletMax,
    ]);
    const row = rows[0];
    if (!row || !Array.isArray(row.status) || row.status.length !== n) throw new Error('cp_ledger_commit returned no status per transfer');
    return row;
  }

  private apply(live: Entry[], row: CommitRow): number {
    let committed = 0;
    for (let j = 0; j < live.length; j++) {
      const e = live[j]!;
      const { req } = e;
      switch (Number(row.status[j])) {
        case Status.Committed:
          committed++;
          this.settle(e, {
            id: req.id,
            replayed: false,
            fromBalance: toNumberOrNull(row.from_balance[j]),
            toBalance: toNumberOrNull(row.to_balance[j]),
          });
          break;
        case Status.Replayed:
          this.settle(e, { id: req.id, replayed: true, fromBalance: null, toBalance: null });
          break;
        case Status.Conflict:
          this.settle(e, new CrowdplayError('CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT', [req.id]));
          break;
        case Status.InsufficientFunds:
          this.settle(e, new CrowdplayError('CP_ERR_LEDGER_INSUFFICIENT_FUNDS', [req.from.kind, req.from.owner, req.amount]));
          break;
        case Status.BalanceLimit:
          this.settle(e, new CrowdplayError('CP_ERR_LEDGER_BALANCE_LIMIT', [req.to.kind, req.to.owner, req.amount, this.walletMax]));
          break;
        case Status.StaleEpoch:
          this.settle(e, new CrowdplayError('CP_ERR_CHANNEL_STALE_EPOCH', [req.channelId, req.epoch]));
          break;
        case Status.UnknownChannel:
          this.settle(e, new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [req.channelId]));
          break;
        case Status.ForeignChannel:
          this.settle(e, new CrowdplayError('CP_ERR_AUTH_FORBIDDEN_CHANNEL', [req.channelId]));
          break;
        default:
          this.settle(e, new CrowdplayError('CP_ERR_LEDGER_UNAVAILABLE', [`unknown status ${String(row.status[j])}`]));
      }
    }
    return committed;
  }
}
