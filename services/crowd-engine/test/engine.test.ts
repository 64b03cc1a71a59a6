import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from './harness.ts';
import { tugOfWar } from '../src/index.ts';

describe('crowd-engine', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
    await h.store.channels.ensure('room', 'acme');
    await h.store.channels.ensure('other', 'acme');
  });
  after(() => h.close());

  it('router - assign acquires the channel on the shard at a new epoch, idempotently', async () => {
    const a = await h.router.assign('room');
    assert.equal(a.shard, 's1');
    assert.equal(a.epoch, 1);
    const [b, c] = await Promise.all([h.router.assign('room'), h.router.assign('room')]);
    assert.deepEqual([b.epoch, c.epoch], [1, 1], 'no second acquire');
    assert.deepEqual(h.shard.channels, ['room']);
    await assert.rejects(h.router.assign('nope'), (e: { code?: string }) => e.code === 'CP_ERR_CHANNEL_UNKNOWN');
    assert.deepEqual(
      (await h.router.membership()).map((m) => m.id),
      ['s1'],
    );
  });

  it('intents - refused with NO_GAME before the game declares, and nothing is batched', async () => {
    const before = h.batches.length;
    h.send('room', [{ action: 'vote', option: 'a', seq: 900 }]);
    const ack = await h.waitFor(() => h.acks.find((a) => a.seq === 900));
    assert.deepEqual([ack.ok, ack.code], [false, 'CP_ERR_INTENT_NO_GAME']);
    await new Promise((r) => setTimeout(r, 120));
    assert.equal(h.batches.length, before);
  });

  it('declare - publishes an update with the actions and a zeroed tally', async () => {
    const r = await h.ctl('room', {
      op: 'declare',
      actions: [
        { name: 'vote', options: ['a', 'b'], maxPerTick: 10 },
        { name: 'cheer', maxPerTick: 100 },
      ],
    });
    assert.equal(r.ok, true);
    const u = await h.waitFor(() => h.updates.find((x) => x.channel === 'room' && x.actions.length === 2));
    assert.deepEqual(u.tally, { vote: { a: 0, b: 0 }, cheer: { _: 0 } });
    const dup = await h.ctl('room', {
      op: 'declare',
      actions: [
        { name: 'x', maxPerTick: 1 },
        { name: 'x', maxPerTick: 2 },
      ],
    });
    assert.deepEqual([dup.ok, dup.code], [false, 'CP_ERR_GAME_INVALID_DECLARE']);
  });

  it('intents - acked, batched per tick with the maxPerTick cap, tallied in the next update', async () => {
    h.acks.length = 0;
    const n = 15;
    h.send(
      'room',
      Array.from({ length: n }, (_, i) => ({ action: 'vote', option: i % 3 === 0 ? 'b' : 'a', seq: 1000 + i })),
    );
    h.send('room', [{ action: 'cheer', seq: 2000 }]);
    await h.waitFor(() => h.acks.length === n + 1);
    assert.ok(h.acks.every((a) => a.ok && a.cost === 0));
    const batch = await h.waitFor(() => h.batches.find((b) => b.channel === 'room' && b.actions.vote));
    const vote = batch.actions.vote!;
    assert.equal(vote.intents.length, 10, 'listed up to maxPerTick');
    assert.equal(vote.dropped, 5, 'the rest counted as dropped');
    assert.deepEqual(vote.tally, { a: 10, b: 5 }, 'tally counts every accepted intent');
    assert.equal(batch.actions.cheer?.tally._, 1);
    assert.match(
      await h.telemetry.metrics.prometheusText(),
      /crowdplay_refusals_total\{area="engine",reason="CP_ERR_INTENT_OVER_CAP"[^}]*\} 5/,
    );
    const u = await h.waitFor(() => h.updates.find((x) => x.channel === 'room' && x.tally.vote?.a === 10));
    assert.deepEqual(u.tally, { vote: { a: 10, b: 5 }, cheer: { _: 1 } });
    assert.equal(u.ev, batch.ev);
  });

  it('intents - bad ones are refused with their code and change nothing', async () => {
    h.acks.length = 0;
    const updatesBefore = h.updates.length;
    h.send('room', [
      { action: 'nope', seq: 1 },
      { action: 'vote', option: 'zzz', seq: 2 },
      { action: 'vote', seq: 3 },
      { action: 'cheer', option: 'a', seq: 4 },
    ]);
    await h.waitFor(() => h.acks.length === 4);
    assert.deepEqual(
      h.acks.map((a) => [a.seq, a.ok, a.code]),
      [
        [1, false, 'CP_ERR_INTENT_UNKNOWN_ACTION'],
        [2, false, 'CP_ERR_INTENT_UNKNOWN_OPTION'],
        [3, false, 'CP_ERR_INTENT_UNKNOWN_OPTION'],
        [4, false, 'CP_ERR_INTENT_UNKNOWN_OPTION'],
      ],
    );
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(h.updates.length, updatesBefore, 'no update: nothing changed');
    const text = await h.telemetry.metrics.prometheusText();
    assert.match(text, /crowdplay_refusals_total\{area="engine",reason="CP_ERR_INTENT_UNKNOWN_ACTION"[^}]*\} 1/);
  });

  it('paid actions - refused without a wallet, acked only after the charge', async () => {
    await h.ctl('other', { op: 'snapshot' }).catch(() => undefined);
    await h.router.assign('other');
    await h.ctl('other', { op: 'declare', actions: [{ name: 'boost', maxPerTick: 5, cost: 10 }] });
    h.acks.length = 0;
    h.send('other', [{ action: 'boost', seq: 77 }]);
    const ack = await h.waitFor(() => h.acks.find((a) => a.seq === 77));
    assert.deepEqual([ack.ok, ack.code], [false, 'CP_ERR_INTENT_INSUFFICIENT_FUNDS']);
  });

  it('updates - only on change, at most once per CHANNEL_UPDATE_MS, event ids strictly rising', async () => {
    const start = h.updates.length;
    const t0 = performance.now();
    for (let i = 0; i < 8; i++) {
      h.send('room', [{ action: 'cheer', seq: 3000 + i }]);
      await new Promise((r) => setTimeout(r, 20));
    }
    // The sends span ~160 ms, longer on a busy machine: at most one update per 60 ms interval of that span, plus the last.
    const spanMs = performance.now() - t0;
    const most = Math.floor(spanMs / 60) + 2;
    await new Promise((r) => setTimeout(r, 200));
    const mine = h.updates.slice(start).filter((u) => u.channel === 'room');
    assert.ok(
      mine.length >= 1 && mine.length <= most,
      `${mine.length} updates for 8 intents over ${Math.round(spanMs)} ms at a 60 ms interval`,
    );
    const idle = h.updates.length;
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(h.updates.length, idle, 'idle ticks send nothing');
    const evs = h.updates.filter((u) => u.channel === 'room').map((u) => u.ev);
    for (let i = 1; i < evs.length; i++) assert.ok(evs[i]! > evs[i - 1]!, `ev ${evs[i]} after ${evs[i - 1]}`);
    const snap = await h.ctl('room', { op: 'snapshot' });
    assert.equal(JSON.parse(snap.update!).tally.cheer._, 9);
  });

  it('ownership - release snapshots; a re-acquire restores state at a new epoch with higher ids', async () => {
    const lastEv = h.updates.filter((u) => u.channel === 'room').at(-1)!.ev;
    await h.router.release('room');
    assert.deepEqual(h.shard.channels, ['other']);
    assert.equal((await h.store.channels.get('room'))?.owner, null);
    const a = await h.router.assign('room');
    assert.equal(a.epoch, 2);
    const snap = JSON.parse((await h.ctl('room', { op: 'snapshot' })).update!);
    assert.equal(snap.tally.cheer._, 9, 'tally restored');
    h.send('room', [{ action: 'cheer', seq: 5000 }]);
    const u = await h.waitFor(() => h.updates.find((x) => x.channel === 'room' && x.tally.cheer?._ === 10));
    assert.ok(u.ev > lastEv, `ids rise across the move (${u.ev} > ${lastEv})`);
  });

  it('fencing - a shard whose epoch is stale cannot log, publish or snapshot and stops serving the channel', async () => {
    // Another owner takes the channel behind the router's back (a cluster move).
    const newEpoch = await h.store.channels.acquire('room', 's2');
    const batchesBefore = h.batches.length;
    h.send('room', [{ action: 'cheer', seq: 6000 }]);
    // The tick's batch is refused by the event log (fenced like every durable write): not published, channel dropped.
    await h.waitFor(() => !h.shard.channels.includes('room'));
    assert.equal(
      h.batches.filter((b) => b.channel === 'room').length,
      h.batches.slice(0, batchesBefore).filter((b) => b.channel === 'room').length,
    );
    assert.match(await h.telemetry.metrics.prometheusText(), /crowdplay_event_log_writes_total\{outcome="stale_epoch"[^}]*\} 1/);
    await h.shard.release('room');
    const row = await h.store.channels.get('room');
    assert.deepEqual([row?.epoch, row?.owner], [newEpoch, 's2'], 'the stale owner changed nothing');
    const snap = await h.store.channels.loadSnapshot('room');
    assert.equal(
      (snap?.state as { tally: { cheer: { _: number } } }).tally.cheer._,
      9,
      'still the snapshot written at the last release: the stale owner wrote nothing',
    );
  });
});

describe('crowd-engine - built-in game', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ gameFor: (c) => (c === 'demo' ? tugOfWar({ maxPerTick: 100, motion: false }) : undefined) });
    await h.store.channels.ensure('demo', 'acme');
  });
  after(() => h.close());

  it('tug-of-war - declares pull, moves the rope with each batch, refuses external declares', async () => {
    await h.router.assign('demo');
    const first = await h.waitFor(() => h.updates.find((u) => u.channel === 'demo'));
    assert.deepEqual(
      first.actions.map((a) => a.name),
      ['pull'],
    );
    assert.equal((first.game as { position: number }).position, 0);
    h.send('demo', [
      { action: 'pull', option: 'right' },
      { action: 'pull', option: 'right' },
      { action: 'pull', option: 'left' },
    ]);
    const moved = await h.waitFor(() => h.updates.find((u) => u.channel === 'demo' && (u.game as { position: number }).position !== 0));
    assert.equal((moved.game as { position: number }).position, 3.33);
    const r = await h.ctl('demo', { op: 'declare', actions: [{ name: 'x', maxPerTick: 1 }] });
    assert.equal(r.code, 'CP_ERR_GAME_INVALID_DECLARE');
    assert.equal(h.batches.length, 0, 'built-in games get batches in process, not on the bus');
  });
});

describe('crowd-engine - limits', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ engine: { maxPendingIntents: 3, maxChannels: 1, maxGameStateBytes: 64 } });
    await h.store.channels.ensure('one', 'acme');
    await h.store.channels.ensure('two', 'acme');
  });
  after(() => h.close());

  it('SHARD_MAX_CHANNELS - a shard at its limit refuses to acquire; counted and logged', async () => {
    await h.router.assign('one');
    await assert.rejects(h.router.assign('two'), (e: { code?: string }) => e.code === 'CP_ERR_CHANNEL_UNAVAILABLE');
    assert.deepEqual(h.shard.channels, ['one'], 'nothing else changed');
    assert.equal((await h.store.channels.get('two'))?.owner, null, 'the router cleared the owner the shard refused');
  });

  it('SHARD_MAX_PENDING_INTENTS - over it intents are refused CP_ERR_INTENT_OVERLOADED until the tick closes', async () => {
    await h.ctl('one', { op: 'declare', actions: [{ name: 'go', maxPerTick: 100 }] });
    h.acks.length = 0;
    h.send(
      'one',
      Array.from({ length: 5 }, (_, i) => ({ action: 'go', seq: 100 + i })),
    );
    await h.waitFor(() => h.acks.length === 5);
    assert.deepEqual(
      h.acks.map((a) => (a.ok ? 'ok' : a.code)),
      ['ok', 'ok', 'ok', 'CP_ERR_INTENT_OVERLOADED', 'CP_ERR_INTENT_OVERLOADED'],
    );
    const batch = await h.waitFor(() => h.batches.find((b) => b.channel === 'one'));
    assert.equal(batch.actions.go?.tally._, 3, 'refused intents were not tallied');
    h.acks.length = 0;
    h.send('one', [{ action: 'go', seq: 200 }]);
    await h.waitFor(() => h.acks.length === 1);
    assert.equal(h.acks[0]!.ok, true, 'room again after the tick');
  });

  it('MAX_GAME_STATE_BYTES - a larger state is refused and the old one stays', async () => {
    assert.equal((await h.ctl('one', { op: 'state', state: { a: 1 } })).ok, true);
    const r = await h.ctl('one', { op: 'state', state: { big: 'x'.repeat(100) } });
    assert.deepEqual([r.ok, r.code], [false, 'CP_ERR_GAME_STATE_TOO_BIG']);
    const snap = JSON.parse((await h.ctl('one', { op: 'snapshot' })).update!) as { game?: unknown };
    assert.deepEqual(snap.game, { a: 1 });
  });
});

describe('crowd-engine - resting channels', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ ledger: true });
    await h.store.channels.ensure('quiet', 'acme');
    await h.router.assign('quiet');
    await h.ctl('quiet', { op: 'declare', actions: [{ name: 'go', maxPerTick: 10 }] });
  });
  after(() => h.close());

  it('a channel with nothing to do leaves the tick; an intent brings it back; its tick count kept counting', async () => {
    h.send('quiet', [{ action: 'go', seq: 1 }]);
    const first = await h.waitFor(() => h.batches.find((b) => b.channel === 'quiet'));
    await h.waitFor(() => !h.shard.ticking.includes('quiet'));
    const restedAt = h.shard.ticks;
    await h.waitFor(() => h.shard.ticks >= restedAt + 5);
    assert.deepEqual(h.shard.ticking, [], 'no tick visits it while it rests');
    h.send('quiet', [{ action: 'go', seq: 2 }]);
    const second = await h.waitFor(() => h.batches.find((b) => b.channel === 'quiet' && b.tick > first.tick));
    const closedBy = h.shard.ticks;
    assert.deepEqual(
      Object.values(second.actions).map((a) => a.intents.length),
      [1],
    );
    // Each tick the shard ran since the first batch counts, the ones that skipped the channel included.
    assert.ok(second.tick - first.tick >= 5, `tick ${first.tick} then ${second.tick}: the resting ticks were not counted`);
    assert.ok(
      second.tick - first.tick <= closedBy - restedAt + 2,
      `tick ${first.tick} then ${second.tick}, ${closedBy - restedAt} shard ticks`,
    );
  });

  it('an open round keeps its channel in the tick until it locks at its deadline', async () => {
    await h.waitFor(() => !h.shard.ticking.includes('quiet'));
    const r = await h.ctl('quiet', { tenant: 'acme', op: 'round.open', round: 'q1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 300 });
    assert.equal(r.ok, true, JSON.stringify(r));
    assert.ok(h.shard.ticking.includes('quiet'), 'the round woke it');
    const locked = await h.waitFor(() => h.roundFrames.find((f) => f.round.id === 'q1' && f.round.state === 'locked'));
    assert.equal(locked.round.state, 'locked', 'no intent came: the tick alone locked it');
    // Locked and not settled: it stays (the tick would cancel it past ROUND_UNSETTLED_MAX_MS).
    assert.ok(h.shard.ticking.includes('quiet'));
  });
});

describe('crowd-engine - the event log unreachable', () => {
  it('each tick still publishes its batch (with a floor); the failure is logged once per interval with its count', async () => {
    const h = await startHarness();
    try {
      await h.store.channels.ensure('down', 'acme');
      await h.router.assign('down');
      assert.equal((await h.ctl('down', { op: 'declare', actions: [{ name: 'cheer', maxPerTick: 100 }] })).ok, true);
      const append = h.store.events.append.bind(h.store.events);
      let failed = 0;
      h.store.events.append = () => {
        failed++;
        return Promise.reject(new Error('Connection terminated unexpectedly'));
      };
      // Three ticks in a row whose append fails.
      for (let i = 0; i < 3; i++) {
        h.send('down', [{ action: 'cheer', seq: 100 + i }]);
        await h.waitFor(() => failed > i);
      }
      await h.waitFor(() => h.batches.filter((b) => b.channel === 'down').length >= 3);
      h.store.events.append = append;
      const lines = h.logs.filter((l) => l.msg === 'event log write failed; publishing with a floor');
      assert.equal(lines.length, 1, `one line for ${failed} failed appends`);
      assert.equal(lines[0]!.repeated, 1);
      assert.equal(lines[0]!.level, 50);
      assert.match(await h.telemetry.metrics.prometheusText(), /crowdplay_event_log_writes_total\{outcome="gap"[^}]*\} [3-9]/);
    } finally {
      await h.close();
    }
  });
});
