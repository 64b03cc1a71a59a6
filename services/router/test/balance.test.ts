/**
 * The router's decisions with fake clocks and fake shards: liveness and the
 * restart grace, least-loaded pick, rebalance plans and their budget, and a
 * Router on the in-process bus that fails channels over, rebalances a new
 * shard, keeps assignments across a restart and publishes every change.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessBus, decodeJson, encodeJson, subjects as makeSubjects } from '@crowdplay/bus';
import { createTelemetry } from '@crowdplay/telemetry';
import type { ChannelRow, Store } from '@crowdplay/store';
import { CrowdplayError, decodeAssignments, isCrowdplayError } from '@crowdplay/protocol';
import {
  CachingRouter,
  MoveBudget,
  Router,
  RouterClient,
  pickLeastLoaded,
  planMoves,
  planPlacement,
  shardState,
  type AssignmentChange,
  type MemberLoad,
} from '../src/index.ts';

const m = (id: string, channels: number, intentsPerS = 0, lastSeenMs = 0, draining = false): MemberLoad => ({
  id,
  channels,
  intentsPerS,
  lastSeenMs,
  draining,
});

describe('router decisions (pure)', () => {
  it('shardState: live, draining, dead after the timeout; unknown owners get one timeout of grace after a start', () => {
    assert.equal(shardState(m('a', 0, 0, 1_000), 3_999, 3_000, 0), 'live');
    assert.equal(shardState(m('a', 0, 0, 1_000), 4_001, 3_000, 0), 'dead');
    assert.equal(shardState(m('a', 0, 0, 1_000, true), 2_000, 3_000, 0), 'draining');
    assert.equal(shardState(undefined, 12_000, 3_000, 10_000), 'unknown');
    assert.equal(shardState(undefined, 13_001, 3_000, 10_000), 'dead');
  });

  it('pickLeastLoaded: channels plus intents/s weighted; ties by channels then id; null when none', () => {
    assert.equal(pickLeastLoaded([], 200), null);
    assert.equal(pickLeastLoaded([m('b', 2), m('a', 2)], 200)?.id, 'a');
    assert.equal(pickLeastLoaded([m('a', 1, 1_000), m('b', 3)], 200)?.id, 'b', '1 + 1000/200 = 6 > 3');
    assert.equal(pickLeastLoaded([m('a', 1, 100), m('b', 3)], 200)?.id, 'a', '1.5 < 3');
  });

  it('planMoves: a new shard gets its fair share; nothing moves when even; skip and max are honoured', () => {
    const owned = new Map([
      ['s1', ['c1', 'c2', 'c3']],
      ['s2', ['c4', 'c5', 'c6']],
      ['s3', [] as string[]],
    ]);
    const moves = planMoves(owned, 10);
    assert.deepEqual(moves, [
      { channel: 'c1', from: 's1', to: 's3' },
      { channel: 'c4', from: 's2', to: 's3' },
    ]);
    assert.deepEqual(
      planMoves(
        new Map([
          ['s1', ['a', 'b']],
          ['s2', ['c']],
        ]),
        10,
      ),
      [],
      'off by one is even',
    );
    assert.equal(planMoves(owned, 1).length, 1);
    assert.deepEqual(planMoves(owned, 10, new Set(['c1', 'c2', 'c3'])), [{ channel: 'c4', from: 's2', to: 's3' }]);
    assert.deepEqual(planMoves(new Map([['s1', ['a', 'b', 'c']]]), 10), [], 'one shard: nowhere to go');
  });

  it('planPlacement: a batch spreads by load as one-by-one picks would; nothing without live shards', () => {
    const live = [m('a', 3), m('b', 0), m('c', 1)];
    const picks = planPlacement(live, 6, 200);
    const per = (s: string) => picks.filter((p) => p === s).length;
    assert.deepEqual([per('a'), per('b'), per('c')], [1, 3, 2], 'ends level at 4 each');
    assert.deepEqual(
      live.map((x) => x.channels),
      [3, 0, 1],
      'the members are not changed',
    );
    assert.deepEqual(
      planPlacement([m('busy', 0, 2_000), m('idle', 5)], 6, 200),
      ['idle', 'idle', 'idle', 'idle', 'idle', 'busy'],
      'intents weigh in: 2,000/s count as 10 channels; at a tie the one with fewer channels',
    );
    assert.deepEqual(planPlacement([], 5, 200), []);
    assert.deepEqual(planPlacement(live, 0, 200), []);
  });

  it('MoveBudget: perS moves per second, bursts capped at one second, 0 = never', () => {
    const b = new MoveBudget(2, 0);
    assert.equal(b.take(5, 0), 2);
    assert.equal(b.take(5, 100), 0);
    assert.equal(b.take(5, 600), 1);
    assert.equal(b.take(5, 10_000), 2, 'capped at perS');
    assert.equal(new MoveBudget(0, 0).take(5, 10_000), 0);
  });
});

/** A fake channels table: acquire bumps the epoch, release clears the owner at its epoch. */
function fakeStore(ids: string[]): { store: Store; rows: Map<string, ChannelRow> } {
  const rows = new Map<string, ChannelRow>(
    ids.map((id) => [id, { id, tenantId: 't', epoch: 0, owner: null, migratedTo: null, migratedAt: null }]),
  );
  const channels = {
    get: (id: string) => Promise.resolve(rows.has(id) ? { ...rows.get(id)! } : null),
    getMany: (ids: string[]) => Promise.resolve(new Map(ids.filter((id) => rows.has(id)).map((id) => [id, { ...rows.get(id)! }]))),
    acquireMany: (ps: Array<{ channel: string; shard: string }>) => {
      const out = new Map<string, number>();
      for (const p of ps) {
        const r = rows.get(p.channel);
        if (!r || r.migratedTo !== null) continue;
        r.epoch++;
        r.owner = p.shard;
        out.set(p.channel, r.epoch);
      }
      return Promise.resolve(out);
    },
    releaseMany: (items: Array<{ channel: string; shard: string; epoch: number }>) => {
      const out = new Set<string>();
      for (const i of items) {
        const r = rows.get(i.channel);
        if (r && r.owner === i.shard && r.epoch === i.epoch) {
          r.owner = null;
          out.add(i.channel);
        }
      }
      return Promise.resolve(out);
    },
    acquire: (id: string, shard: string) => {
      const r = rows.get(id);
      if (!r) return Promise.reject(new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [id]));
      r.epoch++;
      r.owner = shard;
      return Promise.resolve(r.epoch);
    },
    release: (id: string, shard: string, epoch: number) => {
      const r = rows.get(id);
      if (r && r.owner === shard && r.epoch === epoch) {
        r.owner = null;
        return Promise.resolve(true);
      }
      return Promise.resolve(false);
    },
    listOwned: (shard: string) => Promise.resolve([...rows.values()].filter((r) => r.owner === shard).map((r) => ({ ...r }))),
    listAssigned: () => Promise.resolve([...rows.values()].filter((r) => r.owner !== null).map((r) => ({ ...r }))),
  };
  return { store: { channels } as unknown as Store, rows };
}

function setup(ids: string[]) {
  const bus = new InProcessBus();
  const subjects = makeSubjects('rt');
  const telemetry = createTelemetry({ service: 'test', level: 'silent', refusalLogIntervalMs: 60_000 });
  const { store, rows } = fakeStore(ids);
  let now = 1_000_000;
  const clock = { now: () => now, advance: (ms: number) => (now += ms) };
  const owned = new Map<string, Set<string>>();
  /** Every control request the fake shards got: `<shard> <op>[ handoff][ ifIdle] <channel>`. */
  const ops: string[] = [];
  /** Shards that refuse a handoff (as a shard whose store write failed does). */
  const refuseHandoff = new Set<string>();
  /** Acquires each shard refuses before it takes one (as a shard whose sequencer lease timed out does). */
  const refuseAcquires = new Map<string, number>();
  /** Shards whose acquires wait unanswered here (as a slow shard's do) until the test runs the held replies. */
  const heldAcquires = new Map<string, Array<() => void>>();
  /** Shards that take requests and never answer them (as a shard that stopped mid-drain does). */
  const silent = new Set<string>();
  const beat = (id: string) => bus.publish(subjects.shardHeartbeat(), encodeJson({ id, channels: owned.get(id)!.size, intentsPerS: 0 }));
  const shard = (id: string) => {
    owned.set(id, new Set());
    bus.subscribe(subjects.shardCtl(id), (msg) => {
      const req = decodeJson<{ op: string; channel: string; epoch: number; handoff?: boolean; ifIdle?: boolean }>(msg.data);
      ops.push(`${id} ${req.op}${req.handoff ? ' handoff' : ''}${req.ifIdle ? ' ifIdle' : ''} ${req.channel}`);
      if (silent.has(id)) return;
      const mine = owned.get(id)!;
      if (req.op === 'release' && req.handoff && refuseHandoff.has(id)) {
        msg.respond(encodeJson({ ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'handoff failed' }));
        return;
      }
      if (req.op === 'acquire' && heldAcquires.has(id)) {
        heldAcquires.get(id)!.push(() => {
          mine.add(req.channel);
          msg.respond(encodeJson({ ok: true, channels: mine.size }));
        });
        return;
      }
      if (req.op === 'acquire' && (refuseAcquires.get(id) ?? 0) > 0) {
        refuseAcquires.set(id, refuseAcquires.get(id)! - 1);
        msg.respond(encodeJson({ ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'sequencer lease timed out' }));
        return;
      }
      if (req.op === 'acquire') mine.add(req.channel);
      else if (mine.delete(req.channel)) {
        const r = rows.get(req.channel)!;
        if (r.owner === id) r.owner = null;
      }
      msg.respond(encodeJson({ ok: true, channels: mine.size }));
    });
    return { beat: () => beat(id) };
  };
  const changes: AssignmentChange[] = [];
  bus.subscribe(subjects.routerAssignments(), (msg) => changes.push(...decodeAssignments(msg.data)));
  const newRouter = (
    opts: { moveAcquireAttempts?: number; rebalanceCooldownMs?: number; requestTimeoutMs?: number; assignDeadlineMs?: number } = {},
  ) =>
    new Router(
      { bus, subjects, store, telemetry },
      { shardTimeoutMs: 3_000, waitForShardMs: 0, requestTimeoutMs: 1_000, rebalanceMovesPerS: 2, now: clock.now, ...opts },
    );
  return {
    bus,
    subjects,
    telemetry,
    rows,
    clock,
    shard,
    beat,
    owned,
    changes,
    newRouter,
    ops,
    refuseHandoff,
    refuseAcquires,
    heldAcquires,
    silent,
  };
}

const tick = () => new Promise((r) => setImmediate(r));

/** Starts `router` with shard a live (the only one) and assigns every channel of `ids` to it. @returns shard a */
async function allOnA(
  t: ReturnType<typeof setup>,
  router: Router,
  ids: readonly string[],
): Promise<ReturnType<ReturnType<typeof setup>['shard']>> {
  await router.start();
  const a = t.shard('a');
  a.beat();
  await tick();
  for (const c of ids) await router.assign(c);
  return a;
}

/** Starts `router` with shard a live, assigns `channel` (to a), then brings shard b up: a move from a has somewhere to go. */
async function ownedByAThenB(t: ReturnType<typeof setup>, router: Router, channel: string): Promise<void> {
  await router.start();
  const a = t.shard('a');
  a.beat();
  await tick();
  await router.assign(channel);
  const b = t.shard('b');
  a.beat();
  b.beat();
  await tick();
}

describe('Router with fake shards and a fake clock', () => {
  it('fails over a silent shard, rebalances onto a new one within the budget, survives a restart', async () => {
    const ids = ['c1', 'c2', 'c3', 'c4', 'c5', 'c6'];
    const t = setup(ids);
    // No checkMs: no background timer; the test drives check().
    const router = t.newRouter();
    await router.start();
    const a = t.shard('a');
    const b = t.shard('b');
    a.beat();
    b.beat();
    await tick();
    for (const c of ids) await router.assign(c);
    assert.equal(t.owned.get('a')!.size, 3);
    assert.equal(t.owned.get('b')!.size, 3);
    assert.equal(t.changes.length, 6, 'every assignment is published');

    // b falls silent: after the timeout its channels move to a, at a new epoch, without anyone asking.
    const before = new Map(ids.map((c) => [c, t.rows.get(c)!.epoch]));
    t.clock.advance(2_000);
    a.beat();
    await tick();
    await router.check();
    assert.equal(t.owned.get('a')!.size, 3, 'within the timeout nothing moves');
    t.clock.advance(1_500);
    a.beat();
    await tick();
    await router.check();
    for (const c of t.owned.get('b')!) {
      assert.equal(t.rows.get(c)!.owner, 'a');
      assert.equal(t.rows.get(c)!.epoch, before.get(c)! + 1);
      assert.equal((await router.lookup(c))?.shard, 'a');
    }
    assert.equal(t.owned.get('a')!.size, 6);
    assert.equal(t.changes.filter((c) => c.shard === 'a').length, 6);

    // A new shard joins: 2 moves per second, until it holds its share of 3.
    const c = t.shard('c');
    t.owned.get('b')!.clear();
    c.beat();
    a.beat();
    await tick();
    await router.check();
    assert.equal(t.owned.get('c')!.size, 2, 'the budget allows 2 moves now');
    await router.check();
    assert.equal(t.owned.get('c')!.size, 2, 'and no more in the same second');
    t.clock.advance(600);
    a.beat();
    c.beat();
    await tick();
    await router.check();
    assert.equal(t.owned.get('c')!.size, 3);
    assert.equal(t.owned.get('a')!.size, 3);
    t.clock.advance(1_000);
    await router.check();
    assert.equal(t.owned.get('c')!.size, 3, 'even: nothing more moves');
    for (const ch of t.owned.get('c')!) assert.equal(t.rows.get(ch)!.owner, 'c');
    const snapshot = new Map(ids.map((ch) => [ch, { owner: t.rows.get(ch)!.owner, epoch: t.rows.get(ch)!.epoch }]));
    await router.close();

    // A new router (restart): same owners and epochs, before and after the shards are heard from; nothing moves.
    const again = t.newRouter();
    await again.start();
    for (const ch of ids) {
      const got = await again.assign(ch);
      assert.deepEqual({ owner: got.shard, epoch: got.epoch }, snapshot.get(ch));
    }
    t.clock.advance(1_000);
    a.beat();
    c.beat();
    await tick();
    await again.check();
    for (const ch of ids) assert.deepEqual({ owner: t.rows.get(ch)!.owner, epoch: t.rows.get(ch)!.epoch }, snapshot.get(ch));
    await again.close();
  });

  it('a burst of new channels assigned at once spreads over the live shards (each pick counts before its acquire answers)', async () => {
    const ids = ['c1', 'c2', 'c3', 'c4', 'c5', 'c6'];
    const t = setup(ids);
    const router = t.newRouter();
    await router.start();
    for (const id of ['a', 'b', 'c']) t.shard(id).beat();
    await tick();
    // All six in flight together, before any heartbeat reports the new load.
    const got = await Promise.all(ids.map((c) => router.assign(c)));
    const per = (s: string) => got.filter((a) => a.shard === s).length;
    assert.deepEqual([per('a'), per('b'), per('c')], [2, 2, 2]);
    assert.deepEqual(
      [...t.owned.values()].map((s) => s.size),
      [2, 2, 2],
    );
    await router.close();
  });

  it('a heartbeat in the middle of a burst does not hide the placements still in flight: the next batch spreads evenly', async () => {
    const first = ['c1', 'c2', 'c3', 'c4', 'c5', 'c6'];
    const second = ['c7', 'c8', 'c9'];
    const t = setup([...first, ...second]);
    const router = t.newRouter();
    await router.start();
    for (const id of ['a', 'b', 'c']) t.shard(id).beat();
    await tick();
    for (const id of ['a', 'b', 'c']) t.heldAcquires.set(id, []);
    const burst1 = first.map((c) => router.assign(c));
    while ([...t.heldAcquires.values()].reduce((n, q) => n + q.length, 0) < first.length) await tick();
    // a beats before its acquires answered: it holds nothing yet, as far as it knows.
    t.beat('a');
    await tick();
    const burst2 = second.map((c) => router.assign(c));
    while ([...t.heldAcquires.values()].reduce((n, q) => n + q.length, 0) < first.length + second.length) await tick();
    for (const q of t.heldAcquires.values()) for (const answer of q.splice(0)) answer();
    t.heldAcquires.clear();
    const got = await Promise.all([...burst1, ...burst2]);
    const per = (s: string) => got.filter((x) => x.shard === s).length;
    assert.deepEqual([per('a'), per('b'), per('c')], [3, 3, 3], 'the second batch went one to each shard, not all to a');
    await router.close();
  });

  it('rebalance hands a channel off (open rounds move with it) and the old owner forgets it; a failed handoff leaves it', async () => {
    const ids = ['c1', 'c2', 'c3', 'c4'];
    const t = setup(ids);
    const router = t.newRouter();
    const a = await allOnA(t, router, ids);
    assert.equal(t.owned.get('a')!.size, 4);
    const epochs = new Map(ids.map((c) => [c, t.rows.get(c)!.epoch]));
    // b joins; a refuses the first handoffs: nothing moves, nothing is released.
    const b = t.shard('b');
    t.refuseHandoff.add('a');
    a.beat();
    b.beat();
    await tick();
    t.ops.length = 0;
    await router.check();
    assert.equal(t.owned.get('a')!.size, 4, 'a failed handoff keeps the channel where it is');
    assert.ok(t.ops.length > 0 && t.ops.every((op) => /^a release handoff c\d$/.test(op)), t.ops.join(', '));
    for (const c of ids)
      assert.deepEqual({ owner: t.rows.get(c)!.owner, epoch: t.rows.get(c)!.epoch }, { owner: 'a', epoch: epochs.get(c) });
    // Later (past the busy period) the handoffs succeed: two channels move to b at a new epoch, a forgets each.
    t.refuseHandoff.clear();
    t.clock.advance(20 * 500 + 1_000);
    a.beat();
    b.beat();
    await tick();
    t.ops.length = 0;
    await router.check();
    assert.equal(t.owned.get('b')!.size, 2);
    assert.equal(t.owned.get('a')!.size, 2);
    for (const c of t.owned.get('b')!) {
      assert.deepEqual({ owner: t.rows.get(c)!.owner, epoch: t.rows.get(c)!.epoch }, { owner: 'b', epoch: epochs.get(c)! + 1 });
      assert.deepEqual(
        t.ops.filter((op) => op.endsWith(` ${c}`)),
        [`a release handoff ${c}`, `b acquire ${c}`, `a forget ${c}`],
        'handoff, acquire, forget, in order',
      );
    }
    assert.ok(!t.ops.some((op) => op.includes('ifIdle')), 'no release that cancels rounds');
    await router.close();
  });

  it('rebalance: a channel it moved stays put for ROUTER_REBALANCE_COOLDOWN_MS, so the spread never moves it back and forth', async () => {
    const ids = ['c1', 'c2', 'c3', 'c4'];
    const t = setup(ids);
    const router = t.newRouter({ rebalanceCooldownMs: 5_000 });
    const a = await allOnA(t, router, ids);
    const b = t.shard('b');
    a.beat();
    b.beat();
    await tick();
    await router.check();
    assert.deepEqual([...t.owned.get('b')!].sort(), ['c1', 'c2'], 'the two lowest ids moved to b');
    const epochs = new Map(ids.map((c) => [c, t.rows.get(c)!.epoch]));
    // a empties (its channels are released): b is now the fuller one, and its lowest id is the channel just moved.
    for (const c of ['c3', 'c4']) await router.release(c);
    t.owned.get('a')!.clear();
    for (const wait of [1_000, 1_000, 1_000]) {
      t.clock.advance(wait);
      a.beat();
      b.beat();
      await tick();
      await router.check();
      assert.deepEqual([...t.owned.get('b')!].sort(), ['c1', 'c2'], 'within the cooldown nothing moves back');
    }
    for (const c of ['c1', 'c2'])
      assert.deepEqual({ owner: t.rows.get(c)!.owner, epoch: t.rows.get(c)!.epoch }, { owner: 'b', epoch: epochs.get(c) });
    // Past it, the spread is evened out again.
    t.clock.advance(2_500);
    a.beat();
    b.beat();
    await tick();
    await router.check();
    assert.equal(t.owned.get('a')!.size, 1);
    assert.equal(t.owned.get('b')!.size, 1);
    await router.close();
  });

  it('rebalance: the moves of one check off one owner go as one batch (one placement), each channel at a new epoch', async () => {
    const ids = ['c1', 'c2', 'c3', 'c4', 'c5', 'c6'];
    const t = setup(ids);
    const router = t.newRouter();
    const a = await allOnA(t, router, ids);
    const epochs = new Map(ids.map((c) => [c, t.rows.get(c)!.epoch]));
    const placements = async (reason: string): Promise<number> =>
      Number(
        new RegExp(`crowdplay_router_placements_total\\{[^}]*reason="${reason}"[^}]*\\} (\\d+)`).exec(
          await t.telemetry.metrics.prometheusText(),
        )?.[1] ?? 0,
      );
    const b = t.shard('b');
    a.beat();
    b.beat();
    await tick();
    t.ops.length = 0;
    await router.check();
    assert.deepEqual([...t.owned.get('b')!].sort(), ['c1', 'c2'], 'the budget’s two moves, the lowest ids');
    assert.equal(await placements('rebalance'), 1, 'both placed by one statement');
    for (const c of ['c1', 'c2']) {
      assert.deepEqual({ owner: t.rows.get(c)!.owner, epoch: t.rows.get(c)!.epoch }, { owner: 'b', epoch: epochs.get(c)! + 1 });
      assert.deepEqual(
        t.ops.filter((op) => op.endsWith(` ${c}`)),
        [`a release handoff ${c}`, `b acquire ${c}`, `a forget ${c}`],
      );
    }
    // Both handoffs were asked before either acquire: one batch, not one move after the other.
    const lastHandoff = Math.max(...['c1', 'c2'].map((c) => t.ops.indexOf(`a release handoff ${c}`)));
    const firstAcquire = Math.min(...['c1', 'c2'].map((c) => t.ops.indexOf(`b acquire ${c}`)));
    assert.ok(lastHandoff < firstAcquire, t.ops.join(', '));
    await router.close();
  });

  it('rebalance: no second one is planned while one is in flight (its channels are out of the counts until placed)', async () => {
    const ids = ['c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7', 'c8'];
    const t = setup(ids);
    const router = t.newRouter();
    const a = await allOnA(t, router, ids);
    const b = t.shard('b');
    a.beat();
    b.beat();
    await tick();
    const held: Array<() => void> = [];
    t.heldAcquires.set('b', held);
    t.ops.length = 0;
    const first = router.check();
    while (held.length < 2) await tick();
    // A second of budget later, another pass: b still looks empty and a short of the two handed off.
    t.clock.advance(1_000);
    a.beat();
    b.beat();
    await tick();
    const second = router.check();
    for (let i = 0; i < 20; i++) await tick();
    assert.deepEqual(
      t.ops.filter((op) => op.includes('handoff')).sort(),
      ['a release handoff c1', 'a release handoff c2'],
      'no handoff beyond the first pass’s',
    );
    t.heldAcquires.delete('b');
    for (const answer of held.splice(0)) answer();
    await Promise.all([first, second]);
    assert.deepEqual([...t.owned.get('b')!].sort(), ['c1', 'c2']);
    // Once it ended, the next pass plans again.
    t.clock.advance(1_000);
    a.beat();
    b.beat();
    await tick();
    await router.check();
    assert.equal(t.owned.get('b')!.size, 4);
    await router.close();
  });

  it('rebalance: none while first joins are being placed; the spread resumes once they are', async () => {
    const ids = ['c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7'];
    const t = setup(ids);
    const router = t.newRouter();
    await router.start();
    const a = t.shard('a');
    a.beat();
    await tick();
    for (const c of ids.slice(0, 6)) await router.assign(c);
    const b = t.shard('b');
    t.heldAcquires.set('b', []);
    a.beat();
    b.beat();
    await tick();
    // c7's placement goes to the empty shard b, whose acquire is held: a first join is in flight.
    const joining = router.assign('c7');
    // Joins gather for ROUTER_PLACEMENT_COALESCE_MS (5 ms) before their placement starts.
    for (let i = 0; i < 500 && t.heldAcquires.get('b')!.length === 0; i++) await new Promise((r) => setTimeout(r, 1));
    assert.equal(t.heldAcquires.get('b')!.length, 1, 'c7 is being acquired by b');
    const opsBefore = t.ops.length;
    t.clock.advance(1_000);
    a.beat();
    b.beat();
    await tick();
    await router.check();
    assert.deepEqual(t.ops.slice(opsBefore), [], 'no rebalance move while a placement is in flight');
    for (const reply of t.heldAcquires.get('b')!.splice(0)) reply();
    t.heldAcquires.delete('b');
    assert.equal((await joining).shard, 'b');
    t.clock.advance(1_000);
    a.beat();
    b.beat();
    await tick();
    await router.check();
    assert.ok(
      t.ops.slice(opsBefore).some((op) => op.startsWith('a release handoff')),
      `the spread resumes: ${JSON.stringify(t.ops.slice(opsBefore))}`,
    );
    await router.close();
  });

  it('move (a drain): an acquire the new owner fails is tried again, so the handed-off channel does not stay unowned', async () => {
    const t = setup(['m1']);
    const router = t.newRouter();
    await ownedByAThenB(t, router, 'm1');
    t.refuseAcquires.set('b', 1);
    t.ops.length = 0;
    const moved = await router.move('m1', 'a');
    assert.deepEqual({ moved: moved.moved, shard: moved.shard }, { moved: true, shard: 'b' });
    assert.deepEqual(t.ops, ['a release handoff m1', 'b acquire m1', 'b acquire m1', 'a forget m1']);
    assert.deepEqual({ owner: t.rows.get('m1')!.owner, epoch: t.rows.get('m1')!.epoch }, { owner: 'b', epoch: moved.epoch });
    assert.equal((await router.lookup('m1'))?.shard, 'b');
    // Refused every time: the move fails after 3 tries (the error reaches the draining shard, which refunds).
    t.refuseAcquires.set('a', 3);
    t.ops.length = 0;
    await assert.rejects(router.move('m1', 'b'), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CHANNEL_UNAVAILABLE'));
    assert.deepEqual(t.ops, ['b release handoff m1', 'a acquire m1', 'a acquire m1', 'a acquire m1']);
    await router.close();
  });

  it('two moves of one channel at once: it is handed off and placed once, at one new epoch; the later one finds it moved', async () => {
    const t = setup(['m1', 'm2']);
    const router = t.newRouter();
    const a = await allOnA(t, router, ['m1', 'm2']);
    const b = t.shard('b');
    a.beat();
    b.beat();
    await tick();
    const epochs = { m1: t.rows.get('m1')!.epoch, m2: t.rows.get('m2')!.epoch };
    t.ops.length = 0;
    // Both read the rows (owner a) before either has moved anything; the drain takes m1 and m2, the move m1 alone.
    const [moved, drained] = await Promise.all([router.move('m1', 'a'), router.drain('a')]);
    const m1 = [moved, ...drained].filter((m) => m.channel === 'm1');
    assert.deepEqual(
      m1.map((m) => m.moved).sort(),
      [false, true],
      `one of the two moved m1, the other found it moved: ${JSON.stringify(m1)}`,
    );
    for (const ch of ['m1', 'm2'] as const) {
      assert.deepEqual(
        t.ops.filter((op) => op.endsWith(` ${ch}`)),
        [`a release handoff ${ch}`, `b acquire ${ch}`, `a forget ${ch}`],
        `${ch} handed off, acquired and forgotten once: ${t.ops.join(', ')}`,
      );
      assert.deepEqual({ owner: t.rows.get(ch)!.owner, epoch: t.rows.get(ch)!.epoch }, { owner: 'b', epoch: epochs[ch] + 1 });
    }
    await router.close();
  });

  it('a drain with nowhere to go moves nothing; it warns only when other shards were ever heard from', async () => {
    const t = setup(['s1']);
    const router = t.newRouter();
    const levels: string[] = [];
    const logger = t.telemetry.logger as unknown as Record<string, (obj: unknown, msg?: string) => void>;
    for (const level of ['info', 'warn']) logger[level] = (_obj, msg) => void (msg === 'move: no other live shard' && levels.push(level));
    const a = await allOnA(t, router, ['s1']);
    // Standalone: the only shard there ever was stops.
    const alone = await router.drain('a');
    assert.deepEqual(alone, [{ channel: 's1', moved: false, shard: 'a', epoch: t.rows.get('s1')!.epoch }]);
    // A cluster whose other shard died: the same, worth a warning.
    const b = t.shard('b');
    b.beat();
    a.beat();
    await tick();
    t.clock.advance(3_500);
    a.beat();
    await tick();
    const stranded = await router.drain('a');
    assert.equal(stranded[0]?.moved, false);
    assert.deepEqual(levels, ['info', 'warn']);
    assert.equal(t.rows.get('s1')!.owner, 'a', 'nothing moved');
    await router.close();
  });

  it('a join while its owner drains stays with that owner until the drain hands the channel off', async () => {
    const t = setup(['j1']);
    const router = t.newRouter();
    await ownedByAThenB(t, router, 'j1');
    const epoch = t.rows.get('j1')!.epoch;
    // a says it is draining (SIGTERM): it still serves what its drain has not moved yet.
    t.bus.publish(t.subjects.shardHeartbeat(), encodeJson({ id: 'a', channels: 1, intentsPerS: 0, draining: true }));
    await tick();
    t.ops.length = 0;
    const joined = await router.assign('j1');
    assert.deepEqual({ shard: joined.shard, epoch: joined.epoch }, { shard: 'a', epoch });
    assert.deepEqual(t.ops, [], 'no placement elsewhere without a handoff');
    assert.deepEqual({ owner: t.rows.get('j1')!.owner, epoch: t.rows.get('j1')!.epoch }, { owner: 'a', epoch });
    // The drain moves it, handed off first.
    const [moved] = await router.drain('a');
    assert.deepEqual({ moved: moved?.moved, shard: moved?.shard }, { moved: true, shard: 'b' });
    assert.deepEqual(t.ops, ['a release handoff j1', 'b acquire j1', 'a forget j1']);
    assert.equal((await router.assign('j1')).shard, 'b');
    await router.close();
  });

  it('a move waiting on a shard that stopped answering ends when the router declares it dead; the next check places it', async () => {
    const t = setup(['d1']);
    // The request's own timeout is far beyond the test's: only the declaration can end the wait.
    const router = t.newRouter({ requestTimeoutMs: 600_000 });
    await ownedByAThenB(t, router, 'd1');
    const epoch = t.rows.get('d1')!.epoch;
    t.silent.add('a');
    t.ops.length = 0;
    let outcome: string | null = null;
    void router.move('d1', 'a').then(
      (m) => (outcome = `moved to ${m.shard}`),
      (err: unknown) => (outcome = isCrowdplayError(err, 'CP_ERR_CHANNEL_UNAVAILABLE') ? 'refused' : String(err)),
    );
    for (let i = 0; i < 5; i++) await tick();
    assert.deepEqual(t.ops, ['a release handoff d1']);
    assert.equal(outcome, null, 'the handoff waits for a');
    t.clock.advance(3_500);
    t.beat('b');
    await tick();
    await router.check();
    for (let i = 0; i < 5 && outcome === null; i++) await tick();
    assert.equal(outcome, 'refused', 'declared dead: the handoff is answered at once, without waiting out its timeout');
    assert.deepEqual({ owner: t.rows.get('d1')!.owner, epoch: t.rows.get('d1')!.epoch }, { owner: 'a', epoch }, 'nothing moved yet');
    await router.check();
    assert.deepEqual({ owner: t.rows.get('d1')!.owner, epoch: t.rows.get('d1')!.epoch }, { owner: 'b', epoch: epoch + 1 });
    assert.equal((await router.lookup('d1'))?.shard, 'b');
    await router.close();
    await t.bus.close();
  });

  it('move: ROUTER_MOVE_ACQUIRE_ATTEMPTS bounds the tries (1: no second acquire)', async () => {
    const t = setup(['m2']);
    const router = t.newRouter({ moveAcquireAttempts: 1 });
    await ownedByAThenB(t, router, 'm2');
    t.refuseAcquires.set('b', 1);
    t.ops.length = 0;
    await assert.rejects(router.move('m2', 'a'), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CHANNEL_UNAVAILABLE'));
    assert.deepEqual(t.ops, ['a release handoff m2', 'b acquire m2'], 'one try only');
    await router.close();
  });

  it('an owner recorded in Postgres that never beats after a restart loses its channels once the grace passes', async () => {
    const t = setup(['x']);
    t.rows.get('x')!.owner = 'gone';
    t.rows.get('x')!.epoch = 7;
    const router = t.newRouter();
    await router.start();
    const a = t.shard('a');
    a.beat();
    await tick();
    assert.deepEqual(await router.assign('x'), { channel: 'x', shard: 'gone', epoch: 7 }, 'within the grace the owner keeps it');
    t.clock.advance(3_100);
    a.beat();
    await tick();
    await router.check();
    assert.deepEqual({ owner: t.rows.get('x')!.owner, epoch: t.rows.get('x')!.epoch }, { owner: 'a', epoch: 8 });
    await router.close();
  });

  it('a shard process restarting under the same id (new instance) gets its predecessor’s channels again at a new epoch', async () => {
    const t = setup(['c1']);
    const router = t.newRouter();
    await router.start();
    t.shard('a');
    const beat = (instance: string) =>
      t.bus.publish(t.subjects.shardHeartbeat(), encodeJson({ id: 'a', instance, channels: t.owned.get('a')!.size }));
    beat('i1');
    await tick();
    const first = await router.assign('c1');
    assert.equal(first.epoch, 1);
    beat('i1');
    await tick();
    assert.equal(t.rows.get('c1')!.epoch, 1, 'the same process: nothing happens');
    // The process restarts: it owns nothing and disowned its rows (Shard.start).
    t.owned.get('a')!.clear();
    t.rows.get('c1')!.owner = null;
    beat('i2');
    for (let i = 0; i < 5; i++) await tick();
    assert.deepEqual({ owner: t.rows.get('c1')!.owner, epoch: t.rows.get('c1')!.epoch }, { owner: 'a', epoch: 2 });
    assert.ok(t.owned.get('a')!.has('c1'), 'the new process was asked to acquire it');
    await router.close();
  });

  it('CachingRouter answers from its cache and follows published changes', async () => {
    const t = setup(['c1']);
    const router = t.newRouter();
    await router.start();
    t.shard('a').beat();
    await tick();
    let calls = 0;
    const counting = {
      assign: (c: string) => (calls++, router.assign(c)),
      lookup: (c: string) => router.lookup(c),
      release: (c: string) => router.release(c),
      membership: () => router.membership(),
      migrate: (f: string, to: string) => router.migrate(f, to),
    };
    const cache = new CachingRouter(counting, { bus: t.bus, subjects: t.subjects }, 10);
    await cache.start();
    const first = await cache.assign('c1');
    assert.equal((await cache.assign('c1')).epoch, first.epoch);
    assert.equal(calls, 1);
    t.bus.publish(t.subjects.routerAssignments(), encodeJson({ channel: 'c1', shard: 'b', epoch: first.epoch + 1 }));
    await tick();
    assert.deepEqual(cache.cached('c1'), { channel: 'c1', shard: 'b', epoch: first.epoch + 1 });
    t.bus.publish(t.subjects.routerAssignments(), encodeJson({ channel: 'c1', shard: 'a', epoch: first.epoch }));
    await tick();
    assert.equal(cache.cached('c1')?.shard, 'b', 'an older epoch never replaces a newer one');
    t.bus.publish(t.subjects.routerAssignments(), encodeJson({ channel: 'c1', shard: null, epoch: first.epoch + 1 }));
    await tick();
    assert.equal(cache.cached('c1'), undefined);
    // Past ROUTER_ASSIGNMENT_CACHE_MAX (10 here) the least recently used entry goes, counted.
    assert.equal(cache.evictions, 0);
    for (let i = 0; i < 12; i++) cache.apply({ channel: `e${i}`, shard: 'a', epoch: 1 });
    assert.equal(cache.size, 10);
    assert.equal(cache.evictions, 2);
    assert.equal(cache.cached('e0'), undefined);
    assert.equal(cache.cached('e11')?.shard, 'a');
    cache.close();
    await router.close();
  });
});

describe('router.ctl with a hung router on the bus', () => {
  it('every request is answered by the live router: a hung one that kept its subscription takes none away', async () => {
    const t = setup(['c1']);
    const live = t.newRouter();
    // A hung router (SIGSTOP): its subscriptions stay on the bus, its handlers never run.
    const hungBus = new Proxy(t.bus, {
      get(target, prop, receiver) {
        if (prop === 'subscribe')
          return (subject: string, _handler: unknown, opts?: { queue?: string }) => target.subscribe(subject, () => undefined, opts);
        const v = Reflect.get(target, prop, receiver) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const telemetry = createTelemetry({ service: 'test', level: 'silent', refusalLogIntervalMs: 60_000 });
    const hung = new Router(
      { bus: hungBus, subjects: t.subjects, store: fakeStore([]).store, telemetry },
      { shardTimeoutMs: 3_000, waitForShardMs: 0, requestTimeoutMs: 1_000 },
    );
    await hung.start();
    await live.start();
    t.shard('a').beat();
    await tick();
    const client = new RouterClient(t.bus, t.subjects, 300);
    const answers = await Promise.allSettled(Array.from({ length: 6 }, () => client.membership()));
    assert.deepEqual(
      answers.map((a) => a.status),
      Array(6).fill('fulfilled'),
    );
    await hung.close();
    await live.close();
  });
});

describe('RouterClient batches the assigns of one turn', () => {
  it('one request carries them; each channel answers on its own, an unknown one with its code', async () => {
    const t = setup(['c1', 'c2', 'c3', 'c4', 'c5']);
    const router = t.newRouter();
    await router.start();
    for (const id of ['a', 'b']) t.shard(id).beat();
    await tick();
    const requests: Array<{ op: string; channel?: string; channels?: string[] }> = [];
    t.bus.subscribe(t.subjects.routerCtl(), (msg) => requests.push(decodeJson(msg.data)));
    const client = new RouterClient(t.bus, t.subjects, 1_000);
    const asked = ['c1', 'c2', 'c3', 'c4', 'c5', 'nope', 'c1'];
    const got = await Promise.allSettled(asked.map((c) => client.assign(c)));
    assert.equal(requests.length, 1, 'one request for the turn');
    assert.deepEqual(requests[0]!.channels, ['c1', 'c2', 'c3', 'c4', 'c5', 'nope'], 'each channel once');
    for (const [i, c] of asked.entries()) {
      const r = got[i]!;
      if (c === 'nope') {
        assert.equal(r.status, 'rejected');
        assert.equal((r as PromiseRejectedResult).reason.code, 'CP_ERR_CHANNEL_UNKNOWN');
        continue;
      }
      assert.equal(r.status, 'fulfilled', c);
      const a = (r as PromiseFulfilledResult<{ shard: string; epoch: number }>).value;
      assert.deepEqual({ shard: a.shard, epoch: a.epoch }, { shard: t.rows.get(c)!.owner, epoch: t.rows.get(c)!.epoch });
    }
    assert.equal(await client.assign('c2').then((a) => a.shard), t.rows.get('c2')!.owner, 'a lone assign goes as before');
    assert.equal(requests.at(-1)!.channel, 'c2');
    await router.close();
  });

  it('a router that refuses the batch (an older version) is asked one channel at a time, and stays so', async () => {
    const t = setup([]);
    const requests: Array<{ op: string; channel?: string; channels?: string[] }> = [];
    t.bus.subscribe(
      t.subjects.routerCtl(),
      (msg) => {
        const req = decodeJson<{ op: string; channel?: string; channels?: string[] }>(msg.data);
        requests.push(req);
        msg.respond(
          encodeJson(
            req.channels
              ? { ok: false, code: 'CP_ERR_PROTO_INVALID', message: '/ must not have additional properties' }
              : { ok: true, assignment: { channel: req.channel, shard: 's1', epoch: 1 } },
          ),
        );
      },
      { queue: 'router' },
    );
    const client = new RouterClient(t.bus, t.subjects, 1_000);
    const first = await Promise.all(['x1', 'x2', 'x3'].map((c) => client.assign(c)));
    assert.deepEqual(
      first.map((a) => a.channel),
      ['x1', 'x2', 'x3'],
    );
    assert.deepEqual(
      requests.map((r) => r.channels?.length ?? r.channel),
      [3, 'x1', 'x2', 'x3'],
    );
    await Promise.all(['y1', 'y2'].map((c) => client.assign(c)));
    assert.deepEqual(
      requests.slice(4).map((r) => r.channel),
      ['y1', 'y2'],
      'no batch is tried again at once',
    );
  });

  it('a batch has one deadline: what is placed answers, the rest CP_ERR_CHANNEL_UNAVAILABLE (counted), placed later', async () => {
    const t = setup(['d1', 'd2', 'd3']);
    const router = t.newRouter({ assignDeadlineMs: 100 });
    await router.start();
    t.shard('a').beat();
    await tick();
    type Reply = { ok: boolean; assigned?: Array<{ channel: string; shard?: string; epoch?: number; code?: string }> };
    const ask = async (channels: string[]): Promise<Reply> =>
      decodeJson<Reply>(
        (await t.bus.request(t.subjects.routerCtl(), encodeJson({ v: 2, op: 'assign', channels }), { timeoutMs: 2_000 })).data,
      );
    const unavailable = async (): Promise<number> =>
      Number(
        /crowdplay_refusals_total\{[^}]*area="router"[^}]*reason="CP_ERR_CHANNEL_UNAVAILABLE"[^}]*\} (\d+)/.exec(
          await t.telemetry.metrics.prometheusText(),
        )?.[1] ?? 0,
      );
    assert.equal((await ask(['d1'])).assigned?.[0]?.shard, 'a');
    const held: Array<() => void> = [];
    t.heldAcquires.set('a', held);
    const before = await unavailable();
    const late = await ask(['d1', 'd2', 'd3']);
    assert.deepEqual(
      late.assigned?.map((r) => [r.channel, r.shard ?? r.code]),
      [
        ['d1', 'a'],
        ['d2', 'CP_ERR_CHANNEL_UNAVAILABLE'],
        ['d3', 'CP_ERR_CHANNEL_UNAVAILABLE'],
      ],
    );
    assert.equal((await unavailable()) - before, 2, 'each late channel counted');
    // The placement went on: once the shard answers, the same channels are assigned to it.
    assert.equal(held.length, 2);
    t.heldAcquires.delete('a');
    for (const answer of held.splice(0)) answer();
    const placed = await ask(['d2', 'd3']);
    assert.deepEqual(
      placed.assigned?.map((r) => [r.channel, r.shard, r.epoch]),
      [
        ['d2', 'a', t.rows.get('d2')!.epoch],
        ['d3', 'a', t.rows.get('d3')!.epoch],
      ],
    );
    await router.close();
  });

  it('bad batches are refused with a code and place nothing', async () => {
    const t = setup(['c1', 'c2']);
    const router = t.newRouter();
    await router.start();
    t.shard('a').beat();
    await tick();
    const ask = async (body: object): Promise<{ ok: boolean; code?: string }> =>
      decodeJson((await t.bus.request(t.subjects.routerCtl(), encodeJson(body), { timeoutMs: 1_000 })).data);
    const bad: Array<[object, string]> = [
      [{ v: 2, op: 'assign', channels: [] }, 'CP_ERR_PROTO_INVALID'],
      [{ v: 2, op: 'assign', channels: Array.from({ length: 1_001 }, (_, i) => `c${i}`) }, 'CP_ERR_PROTO_INVALID'],
      [{ v: 2, op: 'assign', channels: ['c1', 'not a channel!'] }, 'CP_ERR_PROTO_INVALID'],
      [{ v: 2, op: 'assign', channels: ['c1'], channel: 'c2' }, 'CP_ERR_PROTO_INVALID'],
      [{ v: 3, op: 'assign', channels: ['c1'] }, 'CP_ERR_PROTO_VERSION'],
    ];
    for (const [body, code] of bad)
      assert.deepEqual(await ask(body).then((r) => ({ ok: r.ok, code: r.code })), { ok: false, code }, JSON.stringify(body).slice(0, 60));
    for (const c of ['c1', 'c2']) assert.deepEqual({ owner: t.rows.get(c)!.owner, epoch: t.rows.get(c)!.epoch }, { owner: null, epoch: 0 });
    assert.equal(t.owned.get('a')!.size, 0);
    await router.close();
  });
});
