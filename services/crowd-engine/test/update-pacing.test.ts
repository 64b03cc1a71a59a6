/**
 * SHARD_TURN_BUDGET_MS: viewer updates that fall due together are
 * published at most a budget's worth per event-loop turn, the rest in later
 * turns. The shard's clock advances 8 ms per update delivered (a slow fanout,
 * as 10 viewers' ws.sends per update are), so a 20 ms budget fits three
 * updates in a turn.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ChannelUpdate } from '@crowdplay/protocol';
import { decodeJson } from '@crowdplay/bus';
import { startHarness, type Harness } from './harness.ts';
import type { GameModule } from '../src/index.ts';

const CHANNELS = Array.from({ length: 12 }, (_, i) => `pace${i}`);
const STEP_MS = 8;

interface Paced {
  h: Harness;
  /** Each update after `mark()`: its channel, and the event-loop turn it was delivered in (0, 1, …). */
  seen: Array<{ channel: string; turn: number }>;
  mark: () => void;
  close: () => Promise<void>;
}

/** A harness whose shard clock advances STEP_MS per update delivered, with every channel declared and its first update out. */
async function paced(budgetMs: number): Promise<Paced> {
  let offset = 0;
  const h = await startHarness({ engine: { turnBudgetMs: budgetMs, updateIntervalMs: 10 }, now: () => Date.now() + offset });
  for (const c of CHANNELS) await h.store.channels.ensure(c, 'acme');
  for (const c of CHANNELS) await h.router.assign(c);
  for (const c of CHANNELS) assert.equal((await h.ctl(c, { op: 'declare', actions: [{ name: 'cheer', maxPerTick: 100 }] })).ok, true);
  await h.waitFor(() => CHANNELS.every((c) => h.updates.some((u) => u.channel === c)));
  let recording = false;
  let turn = 0;
  let marked = false;
  const seen: Paced['seen'] = [];
  h.bus.subscribe(`${h.subjects.prefix}.ch.*.out`, (m) => {
    offset += STEP_MS;
    if (!recording) return;
    if (!marked) {
      marked = true;
      setImmediate(() => {
        turn++;
        marked = false;
      });
    }
    seen.push({ channel: decodeJson<ChannelUpdate>(m.data).channel, turn });
  });
  return {
    h,
    seen,
    mark: () => {
      recording = true;
      turn = 0;
    },
    close: () => h.close(),
  };
}

/** One intent on every channel in one go, so the next tick closes every channel's batch and each update falls due in that tick. */
async function everyChannelChanges(p: Paced): Promise<Map<number, number>> {
  await new Promise((r) => setTimeout(r, 50));
  p.mark();
  for (const c of CHANNELS) p.h.send(c, [{ action: 'cheer' }]);
  await p.h.waitFor(() => CHANNELS.every((c) => p.seen.some((s) => s.channel === c)));
  const perTurn = new Map<number, number>();
  for (const s of p.seen) perTurn.set(s.turn, (perTurn.get(s.turn) ?? 0) + 1);
  return perTurn;
}

describe('crowd-engine - update pacing (SHARD_TURN_BUDGET_MS)', () => {
  let p: Paced;
  before(async () => (p = await paced(20)));
  after(() => p.close());

  it('publishes at most the budget per turn; the rest in later turns, in order, each counted as deferred', async () => {
    const textBefore = await p.h.telemetry.metrics.prometheusText();
    const deferredBefore = deferred(textBefore);
    const yieldsBefore = counter(textBefore, 'crowdplay_tick_yields_total');
    const perTurn = await everyChannelChanges(p);
    assert.equal(Math.max(...perTurn.values()), 3, `updates per turn: ${JSON.stringify([...perTurn])}`);
    assert.ok(perTurn.size >= 4, `12 updates over ${perTurn.size} turns`);
    for (const c of CHANNELS) assert.equal(p.seen.filter((s) => s.channel === c).length, 1, `one update for ${c}`);
    assert.deepEqual(
      p.seen.map((s) => s.channel),
      CHANNELS,
      'deferred updates go out in the order they fell due',
    );
    for (const c of CHANNELS) {
      const last = p.h.updates.filter((u) => u.channel === c).at(-1)!;
      assert.equal(last.tally.cheer?._, 1, `${c}'s update carries its intent`);
    }
    const text = await p.h.telemetry.metrics.prometheusText();
    // Twelve updates, three a turn: the other nine waited, either deferred or behind a tick that yielded.
    const waited = deferred(text) - deferredBefore + counter(text, 'crowdplay_tick_yields_total') - yieldsBefore;
    assert.ok(
      waited >= 3,
      `deferred ${deferred(text) - deferredBefore}, tick yields ${counter(text, 'crowdplay_tick_yields_total') - yieldsBefore}`,
    );
    assert.match(text, /crowdplay_channel_updates_due(\{[^}]*\})? 0\b/, 'nothing left due');
  });
});

describe('crowd-engine - update pacing: an update the bus refuses', () => {
  let p: Paced;
  before(async () => (p = await paced(20)));
  after(() => p.close());

  it('is logged, and the other channels and later changes still reach viewers', async () => {
    const bus = p.h.bus;
    const publish = bus.publish.bind(bus);
    let refused = 0;
    const victim = p.h.subjects.channelOut(CHANNELS[7]!);
    bus.publish = (subject, data, opts) => {
      if (subject === victim && refused === 0) {
        refused++;
        throw new Error('payload too big');
      }
      return publish(subject, data, opts);
    };
    try {
      const deferredBefore = deferred(await p.h.telemetry.metrics.prometheusText());
      await new Promise((r) => setTimeout(r, 50));
      p.mark();
      for (const c of CHANNELS) p.h.send(c, [{ action: 'cheer' }]);
      await p.h.waitFor(() => CHANNELS.every((c) => c === CHANNELS[7] || p.seen.some((s) => s.channel === c)));
      assert.equal(refused, 1);
      assert.ok(deferred(await p.h.telemetry.metrics.prometheusText()) > deferredBefore, 'the refused one was among the deferred');
      assert.ok(
        p.h.logs.some((l) => l.msg === 'viewer update not published' && l.channel === CHANNELS[7]),
        JSON.stringify(p.h.logs.map((l) => l.msg)),
      );
      // A later change on every channel: all twelve get it (the drain was not left stuck).
      const seen = p.seen.length;
      for (const c of CHANNELS) p.h.send(c, [{ action: 'cheer' }]);
      await p.h.waitFor(() => CHANNELS.every((c) => p.seen.slice(seen).some((s) => s.channel === c)));
    } finally {
      bus.publish = publish;
    }
  });
});

describe('crowd-engine - update pacing off (SHARD_TURN_BUDGET_MS=0)', () => {
  let p: Paced;
  before(async () => (p = await paced(0)));
  after(() => p.close());

  it('publishes every due update in the turn it fell due', async () => {
    const perTurn = await everyChannelChanges(p);
    assert.deepEqual([...perTurn.values()], [12], `updates per turn: ${JSON.stringify([...perTurn])}`);
    assert.equal(deferred(await p.h.telemetry.metrics.prometheusText()), 0);
  });
});

describe('crowd-engine - update pacing and close', () => {
  let p: Paced;
  before(async () => (p = await paced(20)));
  after(() => p.close());

  it('close drops the deferred updates: the shard publishes nothing after it', async () => {
    await new Promise((r) => setTimeout(r, 50));
    const bus = p.h.bus;
    const publish = bus.publish.bind(bus);
    let closed: Promise<void> | null = null;
    const published: Array<{ subject: string; afterClose: boolean }> = [];
    bus.publish = (subject, data, opts) => {
      if (subject.endsWith('.out')) published.push({ subject, afterClose: closed !== null });
      return publish(subject, data, opts);
    };
    bus.subscribe(`${p.h.subjects.prefix}.ch.*.out`, () => (closed ??= p.h.shard.close()));
    for (const c of CHANNELS) p.h.send(c, [{ action: 'cheer' }]);
    await p.h.waitFor(() => closed);
    await closed;
    await new Promise((r) => setTimeout(r, 100));
    bus.publish = publish;
    assert.ok(published.length >= 1 && published.length <= 3, `${published.length} updates published: the first turn's, no more`);
    assert.deepEqual(
      published.filter((x) => x.afterClose),
      [],
    );
    assert.equal(p.h.shard.channels.length, 0);
  });
});

/**
 * A harness whose channels run a built-in game whose every `tick` costs STEP_MS on the shard's clock;
 * each call is recorded with its event-loop turn once `recording` is set.
 */
async function slowTicks(budgetMs: number): Promise<{ h: Harness; calls: number[]; record: () => void }> {
  let offset = 0;
  let recording = false;
  let turn = 0;
  let marked = false;
  const calls: number[] = [];
  const game = (): GameModule => ({
    name: 'slow',
    actions: () => [{ name: 'cheer', maxPerTick: 100 }],
    init: () => ({}),
    onBatch: () => null,
    tick: () => {
      offset += STEP_MS;
      if (recording) {
        if (!marked) {
          marked = true;
          setImmediate(() => {
            turn++;
            marked = false;
          });
        }
        calls.push(turn);
      }
      return null;
    },
  });
  const h = await startHarness({ engine: { turnBudgetMs: budgetMs }, gameFor: game, now: () => Date.now() + offset });
  for (const c of CHANNELS) await h.store.channels.ensure(c, 'acme');
  for (const c of CHANNELS) await h.router.assign(c);
  return { h, calls, record: () => (recording = true) };
}

function perTurn(turns: number[]): number[] {
  const n = new Map<number, number>();
  for (const t of turns) n.set(t, (n.get(t) ?? 0) + 1);
  return [...n.values()];
}

describe('crowd-engine - a tick yields (SHARD_TURN_BUDGET_MS)', () => {
  it('a tick over many channels runs the budget per turn and goes on in the next; with 0 it runs in one', async () => {
    for (const budget of [20, 0]) {
      const t = await slowTicks(budget);
      try {
        const yieldsBefore = counter(await t.h.telemetry.metrics.prometheusText(), 'crowdplay_tick_yields_total');
        t.record();
        await t.h.waitFor(() => t.calls.length >= 3 * CHANNELS.length);
        const yields = counter(await t.h.telemetry.metrics.prometheusText(), 'crowdplay_tick_yields_total') - yieldsBefore;
        const most = Math.max(...perTurn(t.calls));
        if (budget > 0) {
          assert.equal(most, 3, `game ticks per turn: ${JSON.stringify(perTurn(t.calls))}`);
          assert.ok(yields >= 3, `tick yields counted: ${yields}`);
        } else {
          assert.equal(most, CHANNELS.length, `every channel in one turn with no budget: ${JSON.stringify(perTurn(t.calls))}`);
          assert.equal(yields, 0);
        }
      } finally {
        await t.h.close();
      }
    }
  });
});

function counter(text: string, name: string): number {
  const m = new RegExp(`^${name}(\\{[^}]*\\})? (\\d+)`, 'm').exec(text);
  return m ? Number(m[2]) : 0;
}

function deferred(text: string): number {
  return counter(text, 'crowdplay_channel_updates_deferred_total');
}
