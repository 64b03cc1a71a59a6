/**
 * Moving a channel with open rounds between two shards that share the
 * Postgres schema and the bus (docs/architecture.md "Rounds, stakes and the
 * ledger": Drain, Recovery).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { verifyLedger } from '@crowdplay/ledger';
import type { BusAck, BusTrade, RoundView } from '@crowdplay/protocol';
import type { Shard } from '../src/index.ts';
import type { RoundBook } from '../src/round-state.ts';
import { startHarness, type Harness } from './harness.ts';

const T = 'acme';
let seq = 50_000;

describe('channel handoff', () => {
  let h: Harness;
  let s2: Shard;
  before(async () => {
    h = await startHarness({ ledger: true, rounds: { walletReloadMs: 0 } });
    s2 = await h.newShard('s2');
  });
  after(() => h.close());

  const ledger = (): NonNullable<Harness['ledger']> => h.ledger!;
  const fund = (viewer: string, points: number): Promise<unknown> => ledger().grant(T, viewer, points, `g-${viewer}-${++seq}`);
  const bal = (viewer: string): Promise<number> => ledger().balance(T, { kind: 'wallet', owner: viewer });
  const owner = async (ch: string): Promise<string | null> => (await h.store.channels.get(ch))?.owner ?? null;
  async function trade(ch: string, viewer: string, t: BusTrade): Promise<BusAck> {
    const s = ++seq;
    h.send(ch, [{ action: '', viewer, seq: s, conn: s, trade: t }]);
    return h.waitFor(() => h.acks.find((a) => a.seq === s));
  }
  async function ctl(ch: string, req: Record<string, unknown>): Promise<{ ok: boolean; code?: string; round?: RoundView }> {
    return (await h.ctl(ch, { tenant: T, ...req })) as { ok: boolean; code?: string; round?: RoundView };
  }
  async function verified(): Promise<void> {
    assert.deepEqual((await verifyLedger(h.store.db)).failures, []);
  }
  async function channel(ch: string): Promise<void> {
    await h.store.channels.ensure(ch, T);
    await h.router.assign(ch);
  }
  const strip = (a: BusAck): unknown => ({
    ok: a.ok,
    code: a.code,
    cost: a.cost,
    shares: a.shares,
    proceeds: a.proceeds,
    position: a.position,
  });

  /** Opens a pool and a market round on `ch` and trades in them as viewers `<p>a`, `<p>b`, `<p>c`. */
  async function firstHalf(ch: string, p: string): Promise<unknown[]> {
    for (const v of ['a', 'b', 'c']) await fund(`${p}${v}`, 1_000);
    assert.equal((await ctl(ch, { op: 'round.open', round: 'pool', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 })).ok, true);
    const m = { op: 'round.open', round: 'mkt', kind: 'market', outcomes: ['x', 'y', 'z'], durationMs: 60_000, liquidity: 50 };
    assert.equal((await ctl(ch, m)).ok, true);
    return [
      await trade(ch, `${p}a`, { k: 'stake', round: 'pool', outcome: 'x', points: 70, key: 'k1' }),
      await trade(ch, `${p}b`, { k: 'stake', round: 'pool', outcome: 'y', points: 45, key: 'k2' }),
      await trade(ch, `${p}a`, { k: 'buy', round: 'mkt', outcome: 'x', shares: 40, maxCost: 1_000, key: 'b1' }),
      await trade(ch, `${p}b`, { k: 'buy', round: 'mkt', outcome: 'y', budget: 120, key: 'b2' }),
      await trade(ch, `${p}a`, { k: 'sell', round: 'mkt', outcome: 'x', shares: 13, minProceeds: 0, key: 's1' }),
    ].map(strip);
  }
  /** More trades, replays of the first half's keys among them; then settles both rounds. */
  async function secondHalf(ch: string, p: string): Promise<unknown[]> {
    const acks = [
      await trade(ch, `${p}c`, { k: 'stake', round: 'pool', outcome: 'x', points: 33, key: 'k3' }),
      await trade(ch, `${p}a`, { k: 'stake', round: 'pool', outcome: 'x', points: 70, key: 'k1' }), // a replay
      await trade(ch, `${p}a`, { k: 'stake', round: 'pool', outcome: 'x', points: 71, key: 'k1' }), // a conflict
      await trade(ch, `${p}c`, { k: 'buy', round: 'mkt', outcome: 'y', shares: 25, maxCost: 1_000, key: 'b3' }),
      await trade(ch, `${p}b`, { k: 'buy', round: 'mkt', outcome: 'y', budget: 120, key: 'b2' }), // a replay
      await trade(ch, `${p}a`, { k: 'sell', round: 'mkt', outcome: 'x', shares: 27, minProceeds: 0, key: 's2' }),
    ].map(strip);
    assert.equal((await ctl(ch, { op: 'round.settle', round: 'pool', outcome: 'x' })).ok, true);
    assert.equal((await ctl(ch, { op: 'round.settle', round: 'mkt', outcome: 'y' })).ok, true);
    return acks;
  }
  const balances = async (p: string): Promise<number[]> => Promise.all(['a', 'b', 'c'].map((v) => bal(`${p}${v}`)));

  it('move - a pool and a market round keep their stakes and positions, trade on the same book, and pay as without the move', async () => {
    // The same trades on a channel that never moves: the reference.
    await channel('still');
    const refFirst = await firstHalf('still', 'r');
    const refSecond = await secondHalf('still', 'r');

    await channel('mover');
    const from = await owner('mover');
    const first = await firstHalf('mover', 'm');
    assert.deepEqual(first, refFirst);

    const moved = await h.router.move('mover');
    assert.equal(moved.moved, true);
    assert.notEqual(moved.shard, from);
    assert.equal(await owner('mover'), moved.shard);
    const to = moved.shard === 's2' ? s2 : h.shard;
    const old = moved.shard === 's2' ? h.shard : s2;
    assert.ok(to.channels.includes('mover') && !old.channels.includes('mover'));
    for (const id of ['pool', 'mkt']) {
      const row = await h.store.rounds.get('mover', id);
      assert.equal(row?.state, 'open', 'not refunded');
      assert.ok((row?.book as RoundBook).handoff, 'the live book was handed off');
    }
    // The new owner shows the same book.
    const shown = await h.waitFor(() =>
      h.updates.findLast((u) => u.channel === 'mover' && u.rounds?.some((r) => r.id === 'mkt' && r.entries === 3)),
    );
    assert.deepEqual(shown.rounds?.find((r) => r.id === 'pool')?.pool, [70, 45]);

    const second = await secondHalf('mover', 'm');
    assert.deepEqual(second, refSecond, 'same prices, replays and conflicts as without the move');
    assert.deepEqual((second[1] as BusAck).ok, true);
    assert.deepEqual((second[2] as BusAck).code, 'CP_ERR_ROUND_DUPLICATE_ID');
    assert.deepEqual(await balances('m'), await balances('r'), 'settle paid exactly as without the move');
    await verified();
  });

  it('move - the welcome grant the game declared is paid by the new owner to viewers joining after the move', async () => {
    await channel('granting');
    const declare = { op: 'declare', actions: [{ name: 'go', maxPerTick: 5 }], welcomeGrant: 120 };
    assert.equal((await h.ctl('granting', declare)).ok, true);
    h.join('granting', [{ conn: 78_001, viewer: 'early' }]);
    assert.deepEqual((await h.waitFor(() => h.balances.find((b) => b.conn === 78_001))).frame, {
      t: 'balance',
      points: 120,
      reason: 'welcome',
      delta: 120,
    });
    const moved = await h.router.move('granting');
    assert.equal(moved.moved, true);
    // The game has not declared to the new owner: the grant came with the channel's snapshot.
    h.join('granting', [{ conn: 78_002, viewer: 'late' }]);
    assert.deepEqual((await h.waitFor(() => h.balances.find((b) => b.conn === 78_002))).frame, {
      t: 'balance',
      points: 120,
      reason: 'welcome',
      delta: 120,
    });
    assert.equal(await bal('late'), 120);
    h.join('granting', [{ conn: 78_003, viewer: 'early' }]);
    assert.deepEqual((await h.waitFor(() => h.balances.find((b) => b.conn === 78_003))).frame, {
      t: 'balance',
      points: 120,
      reason: 'join',
    });
    assert.equal(await bal('early'), 120, 'paid once per viewer and channel, across the move');
    await verified();
  });

  it('declare - durable when answered ok; one in flight while its channel is handed off is refused as retryable', async () => {
    const actions = [{ name: 'pull', maxPerTick: 10 }];
    // Answered ok: the snapshot holds the declaration (a later owner restores it, after a crash too).
    await channel('declared');
    assert.equal((await h.ctl('declared', { op: 'declare', actions })).ok, true);
    const snap = (await h.store.channels.loadSnapshots(['declared'])).get('declared');
    assert.deepEqual((snap?.state as { actions?: unknown })?.actions, actions);

    // A declare waiting for its event id when the handoff starts: refused, never applied after the final snapshot.
    await channel('racing');
    const o = (await owner('racing'))!;
    const [from, to] = o === 's2' ? [s2, h.shard] : [h.shard, s2];
    type Of = { rt: { id: string } };
    const state = (from as unknown as { s: { eventIdFor: (x: Of) => Promise<number> } }).s;
    const eventIdFor = state.eventIdFor;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let waiting = false;
    // Only the declare's call waits (the shard's ticks take ids for other channels meanwhile).
    state.eventIdFor = async (x) => {
      if (x.rt.id === 'racing' && !waiting) {
        waiting = true;
        await gate;
      }
      return eventIdFor.call(state, x);
    };
    try {
      const answer = h.ctl('racing', { op: 'declare', actions });
      await h.waitFor(() => waiting);
      await from.handOff('racing');
      release();
      assert.equal((await answer).code, 'CP_ERR_CHANNEL_UNAVAILABLE');
    } finally {
      state.eventIdFor = eventIdFor;
      release();
    }
    from.forget('racing');
    await to.acquire('racing', await h.store.channels.acquire('racing', to.id));
    // The gateway's retry reaches the new owner, which takes intents from then on.
    assert.equal((await h.ctl('racing', { op: 'declare', actions })).ok, true);
    const s = ++seq;
    h.send('racing', [{ action: 'pull', viewer: 'rv', seq: s, conn: s }]);
    assert.equal((await h.waitFor(() => h.acks.find((a) => a.seq === s))).ok, true);
  });

  it('handoff - intents meanwhile are refused as retryable; the next acquire resumes the round and the retry is taken', async () => {
    await channel('paused');
    await fund('pa', 100);
    await fund('pb', 100);
    assert.equal((await ctl('paused', { op: 'round.open', round: 'r', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 })).ok, true);
    assert.equal((await trade('paused', 'pa', { k: 'stake', round: 'r', outcome: 'x', points: 10, key: 'a' })).ok, true);
    const o = (await owner('paused'))!;
    const shard = o === 's2' ? s2 : h.shard;
    await shard.handOff('paused');
    assert.equal(await owner('paused'), null);
    const refused = await trade('paused', 'pb', { k: 'stake', round: 'r', outcome: 'y', points: 20, key: 'b' });
    assert.deepEqual([refused.ok, refused.code], [false, 'CP_ERR_CHANNEL_UNAVAILABLE']);
    assert.deepEqual(
      refused.resend?.trade,
      { k: 'stake', round: 'r', outcome: 'y', points: 20, key: 'b' },
      'the intent goes back for the gateway to resend',
    );
    assert.equal((await ctl('paused', { op: 'round.cancel', round: 'r' })).code, 'CP_ERR_CHANNEL_UNAVAILABLE');
    assert.equal(await bal('pb'), 100, 'nothing taken');
    // The next owner (here the same shard, as after a move whose target failed) resumes it from its row.
    await shard.acquire('paused', await h.store.channels.acquire('paused', shard.id));
    const again = await trade('paused', 'pb', { k: 'stake', round: 'r', outcome: 'y', points: 20, key: 'b' });
    assert.deepEqual([again.ok, again.cost], [true, 20]);
    assert.equal((await ctl('paused', { op: 'round.settle', round: 'r', outcome: 'y' })).ok, true);
    assert.deepEqual([await bal('pa'), await bal('pb')], [90, 110]);
    await verified();
  });

  it('handoff - a settled round still paying out does not hold the move; the new owner pays it once', async () => {
    await channel('payer');
    await fund('qa', 1_000);
    await fund('qb', 1_000);
    assert.equal((await ctl('payer', { op: 'round.open', round: 'p', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 })).ok, true);
    assert.equal((await trade('payer', 'qa', { k: 'stake', round: 'p', outcome: 'x', points: 50, key: 'a' })).ok, true);
    assert.equal((await trade('payer', 'qb', { k: 'stake', round: 'p', outcome: 'y', points: 30, key: 'b' })).ok, true);
    const oldEpoch = (await h.store.channels.get('payer'))!.epoch;
    // The old owner's payouts wait (a ledger queue minutes deep under load) until the move is done.
    const l = ledger();
    const transfer = l.transfer.bind(l);
    let held = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    l.transfer = async (req) => {
      if (req.kind === 'payout' && req.epoch === oldEpoch) {
        held++;
        await gate;
      }
      return transfer(req);
    };
    try {
      const settling = ctl('payer', { op: 'round.settle', round: 'p', outcome: 'x' }).catch(() => undefined);
      await h.waitFor(() => held > 0);
      assert.equal((await h.store.rounds.get('payer', 'p'))?.state, 'settled', 'the winner is written before the payouts');
      const moved = await h.router.move('payer');
      assert.equal(moved.moved, true, 'the move did not wait for the payouts');
      release();
      await settling;
    } finally {
      release();
      l.transfer = transfer;
    }
    const deadline = Date.now() + 10_000;
    while (!(await h.store.rounds.get('payer', 'p'))?.paid) {
      assert.ok(Date.now() < deadline, 'the new owner pays the round');
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.deepEqual([await bal('qa'), await bal('qb')], [1_030, 970], 'paid once: 50 + 30 to the winner');
    await verified();
  });

  it('handoff - a handed-off book the ledger disagrees with is refunded, not resumed', async () => {
    await channel('forged');
    await fund('fa', 100);
    assert.equal((await ctl('forged', { op: 'round.open', round: 'r', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 })).ok, true);
    assert.equal((await trade('forged', 'fa', { k: 'stake', round: 'r', outcome: 'x', points: 30, key: 'a' })).ok, true);
    const o = (await owner('forged'))!;
    await (o === 's2' ? s2 : h.shard).handOff('forged');
    // The book loses the stake (as a stale handoff would): the ledger still holds it.
    const row = (await h.store.rounds.get('forged', 'r'))!;
    const book = row.book as RoundBook & { kind: 'pool' };
    await h.store.rounds.update('forged', 'r', row.epoch, { state: 'open', book: { ...book, stakes: [] } });
    const next = o === 's2' ? h.shard : s2;
    await next.acquire('forged', await h.store.channels.acquire('forged', next.id));
    const after = await (async () => {
      for (let i = 0; i < 200; i++) {
        const r = await h.store.rounds.get('forged', 'r');
        if (r?.paid) return r;
        await new Promise((res) => setTimeout(res, 10));
      }
      return null;
    })();
    assert.deepEqual([after?.state, after?.paid], ['cancelled', true]);
    assert.equal(await bal('fa'), 100, 'refunded from the ledger');
    await verified();
  });

  it('drain - channels move to the other live shard with their open rounds; with no other shard they are refunded', async () => {
    await channel('d1');
    await fund('da', 100);
    await fund('db', 100);
    assert.equal((await ctl('d1', { op: 'round.open', round: 'r', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 })).ok, true);
    assert.equal((await trade('d1', 'da', { k: 'stake', round: 'r', outcome: 'x', points: 40, key: 'a' })).ok, true);
    const first = (await owner('d1')) === 's2' ? s2 : h.shard;
    const second = first === s2 ? h.shard : s2;
    await first.drain();
    assert.equal(await owner('d1'), second.id, 'moved, not refunded');
    assert.deepEqual(first.channels, []);
    assert.equal(await bal('da'), 60);
    assert.equal((await trade('d1', 'db', { k: 'stake', round: 'r', outcome: 'y', points: 10, key: 'b' })).ok, true);
    // The last shard drains: nobody can take the channel, so its round is refunded as before.
    await second.drain();
    const row = await h.store.rounds.get('d1', 'r');
    assert.deepEqual([row?.state, row?.paid], ['cancelled', true]);
    assert.deepEqual([await bal('da'), await bal('db')], [100, 100]);
    await verified();
  });
});
