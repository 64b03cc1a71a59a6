import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { CrowdplayError, isCrowdplayError, MAX_POINTS, type ErrorCode } from '@crowdplay/protocol';
import { openStore, type Store } from '@crowdplay/store';
import { createTelemetry } from '@crowdplay/telemetry';
import { testSchema, type TestSchema } from '@crowdplay/testing';
import { Ledger, verifyLedger, type LedgerOptions, type TransferRequest, type TransferResult } from '../src/index.ts';
import { GatedDb, snapshot, sqlError } from './helpers.ts';

const W = (owner: string) => ({ kind: 'wallet' as const, owner });
const E = (owner: string) => ({ kind: 'escrow' as const, owner });
const TREASURY = { kind: 'treasury' as const, owner: '' };
const HOUSE = { kind: 'house' as const, owner: '' };

function rejectsWith(code: ErrorCode) {
  return (err: unknown): boolean => {
    assert.ok(isCrowdplayError(err, code), `expected ${code}, got ${String((err as { code?: string })?.code ?? err)}`);
    return true;
  };
}

/** Settles every promise; returns results and error codes in order. */
async function outcomes(ps: Array<Promise<TransferResult>>): Promise<Array<TransferResult | string>> {
  const rs = await Promise.allSettled(ps);
  return rs.map((r) => (r.status === 'fulfilled' ? r.value : String((r.reason as { code?: string }).code ?? r.reason)));
}

/** The same suite against real Postgres (own schema) and embedded PGlite. */
function ledgerSuite(name: string, open: () => Promise<{ store: Store; cleanup: () => Promise<void> }>): void {
  describe(`ledger (${name})`, () => {
    let store: Store;
    let cleanup: () => Promise<void>;
    let db: GatedDb;
    let epoch: number;
    const ledgers: Ledger[] = [];
    const make = (opts: Partial<LedgerOptions> = {}, telemetry?: ReturnType<typeof createTelemetry>): Ledger => {
      const l = new Ledger(db, { commitMs: 2, commitMaxTransfers: 500, maxQueued: 10_000, ...opts }, telemetry);
      ledgers.push(l);
      return l;
    };
    const stake = (id: string, viewer: string, round: string, amount: number, ep = epoch, channelId = 'ch-1'): TransferRequest => ({
      id,
      tenantId: 'acme',
      from: W(viewer),
      to: E(round),
      amount,
      kind: 'stake',
      channelId,
      epoch: ep,
      roundId: round,
    });

    before(async () => {
      ({ store, cleanup } = await open());
      db = new GatedDb(store.db);
      await store.tenants.create('acme', 'Acme');
      await store.tenants.create('other', 'Other');
      await store.channels.ensure('ch-1', 'acme');
      await store.channels.ensure('ch-o', 'other');
      epoch = await store.channels.acquire('ch-1', 'shard-a');
      await store.channels.acquire('ch-o', 'shard-a');
    });
    afterEach(() => {
      db.open();
      db.failNext.length = 0;
      db.failAfterNext.length = 0;
    });
    after(async () => {
      for (const l of ledgers) await l.close();
      await store.close();
      await cleanup();
    });

    it('grant: treasury → wallet, the treasury goes negative; balances come back with the ack', async () => {
      const l = make();
      const r = await l.grant('acme', 'ann', 100, 'grant-ann-1');
      assert.deepEqual(r, { id: 'grant-ann-1', replayed: false, fromBalance: null, toBalance: 100 });
      assert.equal(await l.balance('acme', W('ann')), 100);
      assert.equal(await l.balance('acme', TREASURY), -100);
      assert.equal(await l.balance('acme', W('nobody-yet')), 0, 'an account that does not exist has balance 0');
      const id = await l.ensureAccount('acme', HOUSE);
      assert.ok(Number.isSafeInteger(id) && id > 0);
      assert.equal(await l.ensureAccount('acme', HOUSE), id, 'ensureAccount is idempotent');
      await assert.rejects(l.ensureAccount('ghost', HOUSE), rejectsWith('CP_ERR_TENANT_UNKNOWN'));
    });

    it('group commit: concurrent transfers share one transaction and are acked only after it returns', async () => {
      const l = make();
      const before = db.commits;
      const returnedBefore = db.returned;
      db.hold();
      const acked: number[] = [];
      const ps = Array.from({ length: 50 }, (_, i) =>
        l.grant('acme', `gc-${i}`, 10 + i, `gc-${i}`).then((r) => {
          // Each ack runs after the statement (its own transaction) came back from the database.
          acked.push(db.returned - returnedBefore);
          return r;
        }),
      );
      await db.waitHeld(1);
      await new Promise((r) => setImmediate(r));
      assert.equal(acked.length, 0, 'nothing is acked while the commit is outstanding');
      db.open();
      const rs = await Promise.all(ps);
      assert.equal(db.commits - before, 1, 'one statement for all 50');
      assert.deepEqual(new Set(acked), new Set([1]));
      assert.deepEqual(
        rs.map((r) => r.toBalance),
        Array.from({ length: 50 }, (_, i) => 10 + i),
      );
      // Committed, not merely executed: another session sees them.
      if (store.kind === 'postgres') {
        const { rows } = await store.db.query<{ n: string }>("SELECT count(*) AS n FROM transfers WHERE id LIKE 'gc-%'");
        assert.equal(Number(rows[0]!.n), 50);
      }
    });

    it('a full batch (commitMaxTransfers) commits at once; the rest waits for commitMs or drain', async () => {
      const l = make({ commitMaxTransfers: 10, commitMs: 600_000 });
      const before = db.commits;
      const settled: boolean[] = [];
      const ps = Array.from({ length: 25 }, (_, i) =>
        l.grant('acme', `full-${i}`, 1, `full-${i}`).finally(() => {
          settled[i] = true;
        }),
      );
      await Promise.all(ps.slice(0, 20));
      assert.equal(db.commits - before, 2, 'two full batches, no wait');
      await new Promise((r) => setImmediate(r));
      assert.equal(settled.filter(Boolean).length, 20, 'the last 5 wait for commitMs');
      await l.drain();
      await Promise.all(ps);
      assert.equal(db.commits - before, 3);
      await assert.rejects(l.grant('acme', 'late', 1, 'full-late'), rejectsWith('CP_ERR_LEDGER_CLOSED'));
      await l.close();
      await l.close(); // idempotent
    });

    it('a refused transfer refuses only itself: the rest of its batch commits', async () => {
      const l = make();
      await l.grant('acme', 'bob', 100, 'grant-bob-1');
      await l.grant('acme', 'dup', 5, 'refuse-dup');
      const before = db.commits;
      const got = await outcomes([
        l.transfer(stake('refuse-ok-1', 'bob', 'r-refuse', 30)),
        l.transfer(stake('refuse-funds', 'bob', 'r-refuse', 1_000)),
        l.transfer(stake('refuse-stale', 'bob', 'r-refuse', 10, epoch - 1)),
        l.transfer(stake('refuse-nochan', 'bob', 'r-refuse', 10, 1, 'no-such-channel')),
        l.transfer(stake('refuse-foreign', 'bob', 'r-refuse', 10, 1, 'ch-o')),
        l.transfer({ ...stake('refuse-dup', 'bob', 'r-refuse', 10) }),
        l.transfer(stake('refuse-ok-2', 'bob', 'r-refuse', 70)),
      ]);
      assert.equal(db.commits - before, 1, 'one statement, not aborted');
      // The escrow is only credited in this batch: a hot account (no floor to check), so no balance is reported for it.
      assert.deepEqual(got, [
        { id: 'refuse-ok-1', replayed: false, fromBalance: 70, toBalance: null },
        'CP_ERR_LEDGER_INSUFFICIENT_FUNDS',
        'CP_ERR_CHANNEL_STALE_EPOCH',
        'CP_ERR_CHANNEL_UNKNOWN',
        'CP_ERR_AUTH_FORBIDDEN_CHANNEL',
        'CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT',
        { id: 'refuse-ok-2', replayed: false, fromBalance: 0, toBalance: null },
      ]);
      assert.equal(await l.balance('acme', W('bob')), 0);
      assert.equal(await l.balance('acme', E('r-refuse')), 100);
    });

    it('an escrow the batch debits stays checked: a payout past what it holds is refused, even with stakes in the same batch', async () => {
      const l = make();
      await l.grant('acme', 'esc', 100, 'grant-esc-1');
      const payout = (id: string, amount: number): TransferRequest => ({
        id,
        tenantId: 'acme',
        from: E('r-mixed'),
        to: W('esc'),
        amount,
        kind: 'payout',
        channelId: 'ch-1',
        epoch,
        roundId: 'r-mixed',
      });
      const got = await outcomes([
        l.transfer({ ...stake('mixed-1', 'esc', 'r-mixed', 10), roundId: 'r-mixed' }),
        l.transfer(payout('mixed-p1', 15)),
        l.transfer(payout('mixed-p2', 4)),
      ]);
      assert.deepEqual(got, [
        { id: 'mixed-1', replayed: false, fromBalance: 90, toBalance: 10 },
        'CP_ERR_LEDGER_INSUFFICIENT_FUNDS',
        { id: 'mixed-p2', replayed: false, fromBalance: 6, toBalance: 94 },
      ]);
      assert.equal(await l.balance('acme', E('r-mixed')), 6);
    });

    it('funds are checked in queue order against the balances inside the commit', async () => {
      const l = make();
      await l.grant('acme', 'cat', 100, 'grant-cat-1');
      const got = await outcomes([
        l.transfer(stake('order-1', 'cat', 'r-order', 60)),
        l.transfer(stake('order-2', 'cat', 'r-order', 60)),
        l.transfer(stake('order-3', 'cat', 'r-order', 40)),
        l.grant('acme', 'cat', 25, 'order-4'),
        l.transfer(stake('order-5', 'cat', 'r-order', 25)),
      ]);
      assert.deepEqual(
        got.map((g) => (typeof g === 'string' ? g : (g.fromBalance ?? g.toBalance))),
        [40, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS', 0, 25, 0],
      );
      assert.equal(await l.balance('acme', W('cat')), 0);
    });

    it('an escrow never goes below zero either', async () => {
      const l = make();
      await l.grant('acme', 'dan', 30, 'grant-dan-1');
      await l.transfer(stake('esc-stake', 'dan', 'r-esc', 30));
      const payout = (id: string, amount: number): TransferRequest => ({
        id,
        tenantId: 'acme',
        from: E('r-esc'),
        to: W('dan'),
        amount,
        kind: 'payout',
        channelId: 'ch-1',
        epoch,
        roundId: 'r-esc',
      });
      await assert.rejects(l.transfer(payout('esc-pay-big', 31)), rejectsWith('CP_ERR_LEDGER_INSUFFICIENT_FUNDS'));
      assert.equal((await l.transfer(payout('esc-pay', 30))).fromBalance, 0);
      assert.equal(await l.balance('acme', W('dan')), 30);
    });

    it('idempotency: an identical replay is a no-op, the same id with other fields is a conflict', async () => {
      const l = make();
      const first = await l.grant('acme', 'eve', 50, 'idem-1');
      assert.equal(first.replayed, false);
      const snap = await snapshot(store.db);
      // Across commits (looked up in Postgres) …
      assert.deepEqual(await l.grant('acme', 'eve', 50, 'idem-1'), { id: 'idem-1', replayed: true, fromBalance: null, toBalance: null });
      await assert.rejects(l.grant('acme', 'eve', 51, 'idem-1'), rejectsWith('CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT'));
      await assert.rejects(l.grant('acme', 'eve-2', 50, 'idem-1'), rejectsWith('CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT'));
      // … and by another Ledger (another process would do the same).
      const other = make();
      assert.equal((await other.grant('acme', 'eve', 50, 'idem-1')).replayed, true);
      assert.deepEqual(await snapshot(store.db), snap, 'replays and conflicts changed nothing');
      // While the first is still pending (same batch).
      const got = await outcomes([
        l.grant('acme', 'eve', 7, 'idem-2'),
        l.grant('acme', 'eve', 7, 'idem-2'),
        l.grant('acme', 'eve', 8, 'idem-2'),
      ]);
      assert.deepEqual(got, [
        { id: 'idem-2', replayed: false, fromBalance: null, toBalance: 57 },
        { id: 'idem-2', replayed: true, fromBalance: null, toBalance: null },
        'CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT',
      ]);
      assert.equal(await l.balance('acme', W('eve')), 57);
    });

    it('a transfer with a stale epoch is refused and changes nothing', async () => {
      const l = make();
      await l.grant('acme', 'fay', 100, 'grant-fay-1');
      await store.channels.ensure('ch-move', 'acme');
      const e1 = await store.channels.acquire('ch-move', 'shard-a');
      await l.transfer(stake('fence-1', 'fay', 'r-fence', 10, e1, 'ch-move'));
      const e2 = await store.channels.acquire('ch-move', 'shard-b');
      const snap = await snapshot(store.db);
      await assert.rejects(l.transfer(stake('fence-2', 'fay', 'r-fence', 10, e1, 'ch-move')), rejectsWith('CP_ERR_CHANNEL_STALE_EPOCH'));
      assert.deepEqual(await snapshot(store.db), snap);
      // The id was not used: the new owner may send it at its epoch.
      assert.equal((await l.transfer(stake('fence-2', 'fay', 'r-fence', 10, e2, 'ch-move'))).fromBalance, 80);
      // A write that bypasses the Ledger is fenced by Postgres itself (the cp_check_epoch trigger).
      await assert.rejects(
        store.db.query(
          `INSERT INTO transfers (id, tenant_id, channel_id, epoch, from_account, to_account, amount, kind, fingerprint)
           SELECT 'fence-raw', 'acme', 'ch-move', $1, f.id, t.id, 1, 'stake', $2
           FROM accounts f, accounts t WHERE f.owner = 'fay' AND f.kind = 'wallet' AND t.owner = 'r-fence' AND t.kind = 'escrow'`,
          [e1, randomBytes(32)],
        ),
        rejectsWith('CP_ERR_CHANNEL_STALE_EPOCH'),
      );
    });

    it('bad input is refused with a code and changes nothing', async () => {
      const l = make();
      await l.grant('acme', 'gus', 100, 'grant-gus-1');
      const snap = await snapshot(store.db);
      const commits = db.commits;
      const good = stake('bad-x', 'gus', 'r-bad', 10);
      const cases: Array<[unknown, ErrorCode]> = [
        [{ ...good, amount: -5 }, 'CP_ERR_LEDGER_INVALID_AMOUNT'],
        [{ ...good, amount: 0 }, 'CP_ERR_LEDGER_INVALID_AMOUNT'],
        [{ ...good, amount: 1.5 }, 'CP_ERR_LEDGER_INVALID_AMOUNT'],
        [{ ...good, amount: Number.NaN }, 'CP_ERR_LEDGER_INVALID_AMOUNT'],
        [{ ...good, amount: Number.POSITIVE_INFINITY }, 'CP_ERR_LEDGER_INVALID_AMOUNT'],
        [{ ...good, amount: 1e20 }, 'CP_ERR_LEDGER_INVALID_AMOUNT'],
        [{ ...good, amount: '10' }, 'CP_ERR_LEDGER_INVALID_AMOUNT'],
        [{ ...good, id: '' }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, id: 'has space' }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, id: 'x'.repeat(129) }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, tenantId: 'bad tenant' }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, from: { kind: 'vault', owner: 'gus' } }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, from: W('') }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, to: { kind: 'treasury', owner: 'x' } }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, to: W('gus') }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, kind: 'Stake!' }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, epoch: undefined }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, epoch: -1 }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, channelId: undefined }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, channelId: 'a.b' }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [{ ...good, roundId: '' }, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
        [null, 'CP_ERR_LEDGER_INVALID_TRANSFER'],
      ];
      for (const [req, code] of cases) await assert.rejects(l.transfer(req as TransferRequest), rejectsWith(code), JSON.stringify(req));
      await assert.rejects(l.transfer({ ...good, tenantId: 'ghost' }), rejectsWith('CP_ERR_TENANT_UNKNOWN'));
      await assert.rejects(l.grant('acme', 'gus', -1, 'bad-grant'), rejectsWith('CP_ERR_LEDGER_INVALID_AMOUNT'));
      await assert.rejects(l.balance('acme', { kind: 'vault' as 'wallet', owner: 'x' }), rejectsWith('CP_ERR_LEDGER_INVALID_TRANSFER'));
      assert.deepEqual(await snapshot(store.db), snap, 'no balance changed, no transfer written');
      assert.equal(db.commits, commits, 'nothing reached the commit statement');
    });

    it('over LEDGER_MAX_QUEUED a transfer is refused, counted and logged', async () => {
      const telemetry = createTelemetry({ service: 'ledger-test', level: 'silent', refusalLogIntervalMs: 60_000 });
      try {
        const l = make({ maxQueued: 3 }, telemetry);
        db.hold();
        const ps = [0, 1, 2].map((i) => l.grant('acme', 'hal', 1, `queue-${i}`));
        await assert.rejects(l.grant('acme', 'hal', 1, 'queue-3'), rejectsWith('CP_ERR_LEDGER_OVERLOADED'));
        assert.equal(l.queued, 3);
        db.open();
        await Promise.all(ps);
        assert.equal(l.queued, 0);
        assert.equal((await l.grant('acme', 'hal', 1, 'queue-3')).replayed, false, 'room again once committed');
        const text = await telemetry.metrics.prometheusText();
        assert.match(text, /crowdplay_refusals_total\{[^}]*reason="CP_ERR_LEDGER_OVERLOADED"[^}]*\} 1/);
        assert.match(text, /crowdplay_ledger_transfers_total\{result="committed"[^}]*\} 4\n/);
        assert.match(text, /crowdplay_ledger_commit_transfers_count\{[^}]*\} 2\n/);
      } finally {
        await telemetry.close();
      }
    });

    it('a failed statement is retried (deadlock, lost reply) or split so one bad transfer refuses only itself', async () => {
      const l = make();
      await l.grant('acme', 'ivy', 100, 'grant-ivy-1');
      // A deadlock: the same batch is sent again and commits once.
      db.failNext.push(sqlError('40P01'));
      let before = db.commits;
      assert.deepEqual(
        (await outcomes([l.grant('acme', 'ivy', 1, 'retry-1'), l.grant('acme', 'ivy', 2, 'retry-2')])).map((r) =>
          typeof r === 'string' ? r : r.replayed,
        ),
        [false, false],
      );
      assert.equal(db.commits - before, 2);
      // The reply was lost after the COMMIT: the retry finds the transfers committed and reports replays; nothing applied twice.
      db.failAfterNext.push(sqlError('08006', 'connection lost'));
      const got = await outcomes([l.grant('acme', 'ivy', 4, 'lost-1'), l.grant('acme', 'ivy', 8, 'lost-2')]);
      assert.deepEqual(
        got.map((r) => (typeof r === 'string' ? r : r.replayed)),
        [true, true],
      );
      assert.equal(await l.balance('acme', W('ivy')), 115);
      // A statement that fails for a reason the batch cannot fix: each transfer is committed alone.
      db.failNext.push(sqlError('23514'), sqlError('23514'));
      before = db.commits;
      const split = await outcomes([
        l.grant('acme', 'ivy', 16, 'split-1'),
        l.grant('acme', 'ivy', 32, 'split-2'),
        l.grant('acme', 'ivy', 64, 'split-3'),
      ]);
      assert.deepEqual(
        split.map((r) => (typeof r === 'string' ? r : r.toBalance)),
        ['CP_ERR_LEDGER_INSUFFICIENT_FUNDS', 147, 211],
      );
      assert.equal(db.commits - before, 4, 'the batch, then one statement per transfer');
      // Something that never goes away: every transfer fails as unavailable, nothing is half done.
      db.failNext.push(sqlError('40001'), sqlError('40001'), sqlError('40001'), sqlError('40001'));
      await assert.rejects(l.grant('acme', 'ivy', 1, 'gone-1'), rejectsWith('CP_ERR_LEDGER_UNAVAILABLE'));
      assert.equal(await l.balance('acme', W('ivy')), 211);
    });

    it('the database unavailable (CP_ERR_STORE_UNAVAILABLE): the batch is sent again, never split; still down, every transfer is CP_ERR_LEDGER_UNAVAILABLE', async () => {
      const l = make();
      await l.grant('acme', 'uma', 100, 'grant-uma-1');
      const down = (): Error =>
        new CrowdplayError('CP_ERR_STORE_UNAVAILABLE', ['connect ECONNREFUSED'], { cause: sqlError('ECONNREFUSED') });
      // Back before the retries run out: the same batch commits once.
      db.failNext.push(down(), down());
      let before = db.commits;
      const back = await outcomes([l.grant('acme', 'uma', 1, 'down-1'), l.grant('acme', 'uma', 2, 'down-2')]);
      assert.deepEqual(
        back.map((r) => (typeof r === 'string' ? r : r.replayed)),
        [false, false],
      );
      assert.equal(db.commits - before, 3);
      // Lost after the COMMIT (the server went away with the reply): the retry finds them committed.
      db.failAfterNext.push(down());
      const lost = await outcomes([l.grant('acme', 'uma', 4, 'down-lost-1'), l.grant('acme', 'uma', 8, 'down-lost-2')]);
      assert.deepEqual(
        lost.map((r) => (typeof r === 'string' ? r : r.replayed)),
        [true, true],
      );
      // Down through every retry: the outcome is unknown, so no transfer is refused as if it had not happened; one
      // statement per attempt, none per transfer.
      db.failNext.push(down(), down(), down(), down());
      before = db.commits;
      const gone = await outcomes([l.grant('acme', 'uma', 16, 'down-gone-1'), l.grant('acme', 'uma', 32, 'down-gone-2')]);
      assert.deepEqual(gone, ['CP_ERR_LEDGER_UNAVAILABLE', 'CP_ERR_LEDGER_UNAVAILABLE']);
      assert.equal(db.commits - before, 4, 'the batch was never split into single transfers');
      assert.equal(await l.balance('acme', W('uma')), 115);
      // Sent again with the same ids once the database answers: committed exactly once.
      const again = await outcomes([l.grant('acme', 'uma', 16, 'down-gone-1'), l.grant('acme', 'uma', 32, 'down-gone-2')]);
      assert.deepEqual(
        again.map((r) => (typeof r === 'string' ? r : r.replayed)),
        [false, false],
      );
      assert.equal(await l.balance('acme', W('uma')), 163);
    });

    it('a grant that would take a wallet above MAX_POINTS is refused (CP_ERR_LEDGER_BALANCE_LIMIT), in queue order, and changes nothing', async () => {
      const l = make();
      await l.grant('acme', 'capped', MAX_POINTS - 5, 'cap-1');
      const treasury = await l.balance('acme', TREASURY);
      await assert.rejects(l.grant('acme', 'capped', 6, 'cap-2'), rejectsWith('CP_ERR_LEDGER_BALANCE_LIMIT'));
      assert.equal(await l.balance('acme', W('capped')), MAX_POINTS - 5);
      assert.equal(await l.balance('acme', TREASURY), treasury);
      // Two grants in one batch: the second sees the first's balance, so together they cannot overshoot.
      db.hold();
      const both = outcomes([l.grant('acme', 'capped', 3, 'cap-3'), l.grant('acme', 'capped', 3, 'cap-4')]);
      await db.waitHeld(1);
      db.open();
      const [first, second] = await both;
      assert.equal((first as TransferResult).toBalance, MAX_POINTS - 2);
      assert.equal(second, 'CP_ERR_LEDGER_BALANCE_LIMIT');
      const r = await l.grant('acme', 'capped', 2, 'cap-5');
      assert.equal(r.toBalance, MAX_POINTS);
      const { rows } = await store.db.query<{ id: string }>("SELECT id FROM transfers WHERE id LIKE 'cap-%' ORDER BY id");
      assert.deepEqual(
        rows.map((x) => x.id),
        ['cap-1', 'cap-3', 'cap-5'],
      );
      // Only grants are capped: points coming back from a round (a refund) are never refused.
      await l.transfer(stake('cap-stake', 'capped', 'cap-round', 10));
      const back = await l.transfer({
        ...stake('cap-refund', 'capped', 'cap-round', 10),
        from: E('cap-round'),
        to: W('capped'),
        kind: 'refund',
      });
      assert.equal(back.toBalance, MAX_POINTS);
    });

    it('balance reads never round: a balance past Number.MAX_SAFE_INTEGER throws naming the account', async () => {
      const l = make();
      await l.ensureAccount('acme', W('huge'));
      const set = (v: string) =>
        store.db.query("UPDATE accounts SET balance = $1::bigint WHERE tenant_id = 'acme' AND kind = 'wallet' AND owner = 'huge'", [v]);
      try {
        await set(String(Number.MAX_SAFE_INTEGER));
        assert.equal(await l.balance('acme', W('huge')), Number.MAX_SAFE_INTEGER);
        await set('9007199254740993'); // 2^53 + 1: as a Number it would read 2^53
        await assert.rejects(l.balance('acme', W('huge')), (err: unknown) => {
          assert.ok(err instanceof RangeError);
          assert.match(err.message, /tenant acme wallet account "huge" holds 9007199254740993 points/);
          return true;
        });
        await assert.rejects(l.walletBalances('acme', ['ann', 'huge']), /tenant acme wallet "huge" holds 9007199254740993 points/);
      } finally {
        await set('0');
      }
    });

    it('verify: ok on the healthy ledger every test above left behind', async () => {
      const v = await verifyLedger(store.db);
      assert.deepEqual(v, { ok: true, failures: [] });
    });

    describe('verify names each corruption made by direct SQL', () => {
      const checks = async (): Promise<string[]> => [...new Set((await verifyLedger(store.db)).failures.map((f) => f.check))].sort();
      const accountId = async (kind: string, owner: string): Promise<number> =>
        Number(
          (
            await store.db.query<{ id: string }>('SELECT id FROM accounts WHERE tenant_id = $1 AND kind = $2 AND owner = $3', [
              'acme',
              kind,
              owner,
            ])
          ).rows[0]!.id,
        );

      it('an unbalanced entry: a balance changed without its counter-entry', async () => {
        await store.db.query("UPDATE accounts SET balance = balance + 7 WHERE tenant_id = 'acme' AND kind = 'wallet' AND owner = 'ann'");
        const v = await verifyLedger(store.db);
        assert.deepEqual(await checks(), ['balance_matches_transfers', 'sum_zero']);
        assert.ok(v.failures.some((f) => f.check === 'sum_zero' && /tenant acme: balances sum to 7/.test(f.detail)));
        assert.ok(
          v.failures.some(
            (f) => f.check === 'balance_matches_transfers' && /wallet ann .* has balance 107, its transfers net 100/.test(f.detail),
          ),
        );
        await store.db.query("UPDATE accounts SET balance = balance - 7 WHERE tenant_id = 'acme' AND kind = 'wallet' AND owner = 'ann'");
        assert.deepEqual(await checks(), []);
      });

      it('a negative wallet (with the CHECK constraint dropped)', async () => {
        await store.db.query('ALTER TABLE accounts DROP CONSTRAINT accounts_non_negative');
        const ann = await accountId('wallet', 'ann');
        const bob = await accountId('wallet', 'bob');
        // A complete, balanced transfer of more than ann has: only the sign is wrong.
        await store.db.query(
          `INSERT INTO transfers (id, tenant_id, from_account, to_account, amount, kind, fingerprint) VALUES ('corrupt-neg', 'acme', $1, $2, 150, 'adjust', $3)`,
          [ann, bob, randomBytes(32)],
        );
        await store.db.query('UPDATE accounts SET balance = balance - 150 WHERE id = $1', [ann]);
        await store.db.query('UPDATE accounts SET balance = balance + 150 WHERE id = $1', [bob]);
        const v = await verifyLedger(store.db);
        assert.deepEqual(await checks(), ['non_negative']);
        assert.match(v.failures[0]!.detail, /tenant acme: wallet ann \(account \d+\) has balance -50/);
        await store.db.query("DELETE FROM transfers WHERE id = 'corrupt-neg'");
        await store.db.query('UPDATE accounts SET balance = balance + 150 WHERE id = $1', [ann]);
        await store.db.query('UPDATE accounts SET balance = balance - 150 WHERE id = $1', [bob]);
        await store.db.query(
          "ALTER TABLE accounts ADD CONSTRAINT accounts_non_negative CHECK (kind NOT IN ('wallet', 'escrow') OR balance >= 0)",
        );
        assert.deepEqual(await checks(), []);
      });

      it('a round that leaks: points leave its escrow other than as payout, refund or take', async () => {
        const escrow = await accountId('escrow', 'r-refuse');
        const ann = await accountId('wallet', 'ann');
        await store.db.query(
          `INSERT INTO transfers (id, tenant_id, channel_id, epoch, from_account, to_account, amount, kind, round_id, fingerprint)
           VALUES ('corrupt-leak', 'acme', 'ch-1', $1, $2, $3, 10, 'adjust', 'r-refuse', $4)`,
          [epoch, escrow, ann, randomBytes(32)],
        );
        await store.db.query('UPDATE accounts SET balance = balance - 10 WHERE id = $1', [escrow]);
        await store.db.query('UPDATE accounts SET balance = balance + 10 WHERE id = $1', [ann]);
        const v = await verifyLedger(store.db);
        assert.deepEqual(await checks(), ['round_escrow']);
        assert.match(
          v.failures[0]!.detail,
          /tenant acme: round r-refuse leaks: stakes in 100 vs payouts 0 \+ refunds 0 \+ take 0 \+ held 90; 10 points moved out by other kinds/,
        );
        await store.db.query("DELETE FROM transfers WHERE id = 'corrupt-leak'");
        await store.db.query('UPDATE accounts SET balance = balance + 10 WHERE id = $1', [escrow]);
        await store.db.query('UPDATE accounts SET balance = balance - 10 WHERE id = $1', [ann]);
        assert.deepEqual(await checks(), []);
      });

      it('a finished round that still holds points', async () => {
        // r-refuse's escrow holds 100: mark the round settled and paid as if every payout had been made.
        await store.db.query(
          `INSERT INTO rounds (channel_id, id, uid, tenant_id, kind, outcomes, opened_at, deadline_at, state, winner, book, paid, epoch)
           VALUES ('ch-1', 'corrupt', 'r-refuse', 'acme', 'pool', '["x","y"]', now(), now(), 'settled', 0, '{}', true, $1)`,
          [epoch],
        );
        const v = await verifyLedger(store.db);
        assert.deepEqual(await checks(), ['round_final']);
        assert.equal(v.failures[0]!.detail, 'tenant acme: round ch-1/corrupt is settled and paid, but its escrow account holds 100');
        await store.db.query("DELETE FROM rounds WHERE id = 'corrupt'");
        assert.deepEqual(await checks(), []);
      });
    });
  });
}

let pgSchema: TestSchema;
ledgerSuite('postgres', async () => {
  pgSchema = await testSchema();
  const store = await openStore({ url: pgSchema.databaseUrl, schema: pgSchema.schema, poolMax: 4, pgliteDir: 'memory' });
  assert.equal(store.kind, 'postgres');
  return { store, cleanup: () => pgSchema.drop() };
});

ledgerSuite('pglite', async () => {
  const store = await openStore({ url: '', schema: 'public', poolMax: 10, pgliteDir: 'memory' });
  assert.equal(store.kind, 'pglite');
  return { store, cleanup: async () => undefined };
});

describe('ledger (postgres) - two ledgers, two pools, one schema', () => {
  let schema: TestSchema;
  let a: Store;
  let b: Store;
  before(async () => {
    schema = await testSchema();
    const opts = { url: schema.databaseUrl, schema: schema.schema, poolMax: 3, pgliteDir: 'memory' };
    a = await openStore(opts);
    b = await openStore(opts);
    await a.tenants.create('acme', 'Acme');
    for (const c of ['c-0', 'c-1']) await a.channels.ensure(c, 'acme');
  });
  after(async () => {
    await a.close();
    await b.close();
    await schema.drop();
  });

  it('hammering the same wallets: no deadlock, no negative balance, replays resolve once, verify ok', async () => {
    const epochs = [await a.channels.acquire('c-0', 'shard-a'), await a.channels.acquire('c-1', 'shard-b')];
    const la = new Ledger(a.db, { commitMs: 1, commitMaxTransfers: 40, maxQueued: 10_000 });
    const lb = new Ledger(b.db, { commitMs: 1, commitMaxTransfers: 40, maxQueued: 10_000 });
    const viewers = Array.from({ length: 12 }, (_, i) => `v${i}`);
    await Promise.all(viewers.map((v) => la.grant('acme', v, 200, `fund-${v}`)));
    let seed = 42;
    const rand = (n: number): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    const reqs = (who: string, n: number): TransferRequest[] =>
      Array.from({ length: n }, (_, i) => {
        const from = viewers[rand(viewers.length)]!;
        let to = viewers[rand(viewers.length)]!;
        if (to === from) to = viewers[(viewers.indexOf(from) + 1) % viewers.length]!;
        const c = rand(2);
        const r = rand(10);
        // Every 10th: the same transfer, same id, sent by both ledgers at once.
        if (i % 10 === 0)
          return { id: `shared-${i}`, tenantId: 'acme', from: TREASURY, to: W(viewers[i % viewers.length]!), amount: 3, kind: 'grant' };
        const id = `${who}-${i}`;
        if (r === 0) return { id, tenantId: 'acme', from: TREASURY, to: W(viewers[i % viewers.length]!), amount: 3, kind: 'grant' };
        if (r < 4)
          return {
            id,
            tenantId: 'acme',
            from: W(from),
            to: E(`round-${c}`),
            amount: 1 + rand(30),
            kind: 'stake',
            channelId: `c-${c}`,
            epoch: epochs[c]!,
            roundId: `round-${c}`,
          };
        if (r < 5)
          return {
            id,
            tenantId: 'acme',
            from: E(`round-${c}`),
            to: HOUSE,
            amount: 1 + rand(5),
            kind: 'take',
            channelId: `c-${c}`,
            epoch: epochs[c]!,
            roundId: `round-${c}`,
          };
        if (r < 6)
          return {
            id,
            tenantId: 'acme',
            from: E(`round-${c}`),
            to: W(to),
            amount: 1 + rand(20),
            kind: 'payout',
            channelId: `c-${c}`,
            epoch: epochs[c]!,
            roundId: `round-${c}`,
          };
        return { id, tenantId: 'acme', from: W(from), to: W(to), amount: 1 + rand(40), kind: 'gift' };
      });
    const ra = reqs('a', 1_500);
    const rb = reqs('b', 1_500);
    const results = await Promise.allSettled([...ra.map((r) => la.transfer(r)), ...rb.map((r) => lb.transfer(r))]);
    const codes = new Map<string, number>();
    for (const r of results) {
      const k = r.status === 'fulfilled' ? (r.value.replayed ? 'replayed' : 'committed') : String((r.reason as { code?: string }).code);
      codes.set(k, (codes.get(k) ?? 0) + 1);
    }
    // Only business refusals: no deadlock, no unavailable, no conflict.
    assert.deepEqual(
      [...codes.keys()].filter((k) => !['committed', 'replayed', 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS'].includes(k)),
      [],
      JSON.stringify([...codes]),
    );
    assert.ok((codes.get('committed') ?? 0) > 1_000, JSON.stringify([...codes]));
    assert.equal(codes.get('replayed'), 150, 'each shared transfer: committed by one ledger, a replay for the other');
    // Each shared id was committed exactly once.
    const { rows } = await a.db.query<{ n: string }>("SELECT count(*) AS n FROM transfers WHERE id LIKE 'shared-%'");
    const sharedIds = new Set([...ra, ...rb].filter((r) => r.id.startsWith('shared-')).map((r) => r.id));
    assert.equal(Number(rows[0]!.n), sharedIds.size);
    await la.close();
    await lb.close();
    const neg = await a.db.query<{ n: string }>("SELECT count(*) AS n FROM accounts WHERE kind IN ('wallet', 'escrow') AND balance < 0");
    assert.equal(Number(neg.rows[0]!.n), 0);
    assert.deepEqual(await verifyLedger(a.db), { ok: true, failures: [] });
  });
});

describe('crowdplay ledger verify (CLI)', () => {
  it('exits 0 on a healthy ledger and 1 with the failures listed when one is corrupt', async () => {
    const { spawnSync } = await import('node:child_process');
    const { fileURLToPath } = await import('node:url');
    const schema = await testSchema();
    const store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 2, pgliteDir: 'memory' });
    try {
      await store.tenants.create('acme', 'Acme');
      const l = new Ledger(store.db, { commitMs: 1, commitMaxTransfers: 100, maxQueued: 100 });
      await l.grant('acme', 'v1', 10, 'cli-1');
      await l.close();
      const root = fileURLToPath(new URL('../../../', import.meta.url));
      const run = () =>
        spawnSync(process.execPath, ['--import', 'tsx', 'services/cli/src/main.ts', 'ledger', 'verify'], {
          cwd: root,
          env: { ...process.env, DATABASE_URL: schema.databaseUrl, DATABASE_SCHEMA: schema.schema, LOG_LEVEL: 'silent' },
          encoding: 'utf8',
          timeout: 60_000,
        });
      const ok = run();
      assert.equal(ok.status, 0, ok.stderr);
      assert.match(ok.stdout, /ledger verify: ok/);
      await store.db.query("UPDATE accounts SET balance = balance + 1 WHERE kind = 'wallet'");
      const bad = run();
      assert.equal(bad.status, 1, bad.stderr);
      assert.match(bad.stdout, /^sum_zero: tenant acme: balances sum to 1, not 0$/m);
      assert.match(bad.stdout, /^balance_matches_transfers: /m);
      assert.match(bad.stdout, /ledger verify: 3 failure\(s\)/);
    } finally {
      await store.close();
      await schema.drop();
    }
  });
});
