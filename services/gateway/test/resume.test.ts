/**
 * Resume after a reconnect (docs/protocol.md "Resume"): a game socket with
 * `lastEventId` gets the batches it missed from the event log, once each and
 * in order, then the live ones; when the log cannot serve it, a `resync`
 * frame and the snapshot. A viewer ahead of the channel gets a resync too.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { encodeJson, InProcessBus, type BusHandler, type SubscribeOptions, type Subscription } from '@crowdplay/bus';
import {
  connected,
  metricValue,
  openSuiteStore,
  startHarness,
  updateFrame,
  viewerToken,
  waitUntil,
  type SuiteStore,
  type Frame,
} from './helpers.ts';

let suite: SuiteStore;
let h: Awaited<ReturnType<typeof startHarness>>;
let epoch = 0;

function batch(ev: number): { t: 'batch'; channel: string; ev: number; tick: number; closedAt: number; actions: object } {
  return { t: 'batch', channel: suite.channel, ev, tick: ev, closedAt: Date.now(), actions: {} };
}

/** A live batch that is not in the log: once a socket has it, every frame sent before it has arrived. */
function publishMarker(ev: number): void {
  h.bus.publish(h.subj.channelGame(suite.channel), encodeJson(batch(ev)));
}

/** What a shard does with a batch: log it, then publish it. */
async function logAndPublish(ev: number): Promise<void> {
  const b = batch(ev);
  await suite.store.events.append([{ channel: suite.channel, eventId: ev, epoch, kind: 'batch', body: JSON.stringify(b) }]);
  h.bus.publish(h.subj.channelGame(suite.channel), encodeJson(b));
}

/** logAndPublish on another harness's bus. */
async function logAndPublishOn(harness: { bus: InProcessBus; subj: typeof h.subj }, ev: number): Promise<void> {
  const b = batch(ev);
  await suite.store.events.append([{ channel: suite.channel, eventId: ev, epoch, kind: 'batch', body: JSON.stringify(b) }]);
  harness.bus.publish(harness.subj.channelGame(suite.channel), encodeJson(b));
}

/**
 * An in-process bus whose subscriptions start late, as a NATS subscription does until the server has read its SUB: a
 * subscription whose subject `gate` answers with a promise receives only what is published after that promise settled.
 * `flush()` (the client's PING, answered after the SUB) waits for every such subscription; `flushed` settles at the
 * first flush.
 */
class LateSubscribeBus extends InProcessBus {
  gate: ((subject: string) => Promise<void> | undefined) | undefined;
  private readonly late: Array<Promise<void>> = [];
  private markFlushed!: () => void;
  readonly flushed = new Promise<void>((r) => (this.markFlushed = r));

  override subscribe(subject: string, handler: BusHandler, opts?: SubscribeOptions): Subscription {
    const gate = this.gate?.(subject);
    if (!gate) return super.subscribe(subject, handler, opts);
    let sub: Subscription | null = null;
    let cancelled = false;
    this.late.push(
      gate.then(() => {
        if (!cancelled) sub = super.subscribe(subject, handler, opts);
      }),
    );
    return {
      unsubscribe: () => {
        cancelled = true;
        sub?.unsubscribe();
      },
      drain: async () => {
        cancelled = true;
        await sub?.drain();
      },
    };
  }

  override async flush(): Promise<void> {
    this.markFlushed();
    await Promise.all(this.late);
    return super.flush();
  }
}

function game(lastEventId?: number): ReturnType<typeof connected> {
  return connected(h.wsUrl({ role: 'game', channel: suite.channel, key: suite.acme.apiKey, lastEventId }));
}

const evs = (frames: Frame[]): number[] => frames.filter((f) => f.t === 'batch').map((f) => f.ev as number);

before(async () => {
  suite = await openSuiteStore();
  epoch = await suite.store.channels.acquire(suite.channel, 's1');
  h = await startHarness({ store: suite.store, channels: [suite.channel] });
  h.shard.snapshots.set(suite.channel, JSON.stringify(updateFrame(suite.channel, 35)));
  for (const ev of [10, 20, 30]) await logAndPublish(ev);
});
after(async () => {
  await h?.close();
  await suite?.close();
});

describe('gateway resume', () => {
  it('game - the batches missed since lastEventId are replayed once each, in order, then the live ones', async () => {
    const g = await game(10);
    await logAndPublish(40); // live while the replay is read: held, then sent once
    await g.frame((f) => f.t === 'batch' && f.ev === 40, 'batch 40');
    publishMarker(41);
    await g.frame((f) => f.t === 'batch' && f.ev === 41, 'the marker batch 41');
    assert.deepEqual(evs(g.frames), [20, 30, 40, 41], 'the held live batch 40 was sent once');
    assert.ok(!g.frames.some((f) => f.t === 'resync'));
    // The channel's current update follows the replayed batches: the game reads its rounds' states from it.
    const order = g.frames.filter((f) => f.t === 'batch' || f.t === 'update').map((f) => `${f.t}:${String(f.ev)}`);
    assert.deepEqual(order.slice(0, 3), ['batch:20', 'batch:30', 'update:35'], order.join(' '));
    assert.equal(metricValue(await h.metricsText(), 'crowdplay_resumes_total', { role: 'game', outcome: 'replayed' }), 1);
    await g.close();
  });

  it('game - after the channel moved to another shard (new epoch) the log still serves the resume', async () => {
    epoch = await suite.store.channels.acquire(suite.channel, 's2');
    await logAndPublish(50);
    const g = await game(30);
    await g.frame((f) => f.t === 'batch' && f.ev === 50, 'batch 50');
    assert.deepEqual(evs(g.frames), [40, 50]);
    await g.close();
  });

  it('game - without lastEventId nothing is replayed (first connect)', async () => {
    const g = await game();
    publishMarker(51);
    await g.frame((f) => f.t === 'batch' && f.ev === 51, 'the marker batch 51');
    assert.deepEqual(evs(g.frames), [51], 'no replayed batch before the live one');
    await g.close();
  });

  it('game - more missed than EVENT_LOG_RESUME_MAX_EVENTS: resync (behind), the snapshot, then live batches', async () => {
    const h2 = await startHarness({ store: suite.store, channels: [suite.channel], eventLog: { resumeMaxEvents: 1 } });
    h2.shard.snapshots.set(suite.channel, JSON.stringify(updateFrame(suite.channel, 35)));
    try {
      const g = await connected(h2.wsUrl({ role: 'game', channel: suite.channel, key: suite.acme.apiKey, lastEventId: 10 }));
      const r = await g.frame((f) => f.t === 'resync', 'resync');
      assert.deepEqual(r, { t: 'resync', channel: suite.channel, from: 10, reason: 'behind' });
      const u = await g.frame((f) => f.t === 'update', 'snapshot');
      assert.equal(u.ev, 35);
      assert.ok(g.frames.indexOf(r) < g.frames.indexOf(u), 'resync before the snapshot');
      assert.deepEqual(evs(g.frames), [], 'nothing replayed');
      h2.bus.publish(h2.subj.channelGame(suite.channel), encodeJson(batch(60)));
      await g.frame((f) => f.t === 'batch' && f.ev === 60, 'live batch after the snapshot');
      assert.equal(metricValue(await h2.metricsText(), 'crowdplay_resumes_total', { role: 'game', outcome: 'resync_behind' }), 1);
      await g.close();
    } finally {
      await h2.close();
    }
  });

  it('game - events pruned past retention: resync (pruned) and the snapshot; a resume from above the floor still replays', async () => {
    assert.equal(await suite.store.events.prune(new Date(Date.now() + 60_000), 3), 3); // 10, 20, 30 (the oldest)
    const g = await game(20);
    assert.deepEqual(await g.frame((f) => f.t === 'resync', 'resync'), { t: 'resync', channel: suite.channel, from: 20, reason: 'pruned' });
    assert.equal((await g.frame((f) => f.t === 'update', 'snapshot')).ev, 35);
    await g.close();
    const g2 = await game(30);
    await g2.frame((f) => f.t === 'batch' && f.ev === 50, 'batch 50');
    assert.deepEqual(evs(g2.frames), [40, 50]);
    assert.ok(!g2.frames.some((f) => f.t === 'resync'));
    await g2.close();
    const text = await h.metricsText();
    assert.equal(metricValue(text, 'crowdplay_resumes_total', { role: 'game', outcome: 'resync_pruned' }), 1);
  });

  it('game - a bad lastEventId is refused with 4400 and nothing is sent', async () => {
    const { Client } = await import('./helpers.ts');
    const c = new Client(h.wsUrl({ role: 'game', channel: suite.channel, key: suite.acme.apiKey, lastEventId: 'x1' }));
    const closed = await c.closed;
    assert.equal(closed.code, 4400);
    assert.deepEqual(
      c.frames.map((f) => f.t),
      ['error'],
    );
  });

  it('game - a batch logged before the resume read but published after the replay is not sent twice', async () => {
    // The shard's order: log (committed, so the replay reads it), then publish (reaching this gateway after the replay).
    const skipped = async (): Promise<number> => metricValue(await h.metricsText(), 'crowdplay_replayed_live_skipped_total');
    const skippedBefore = await skipped();
    const b = batch(80);
    await suite.store.events.append([{ channel: suite.channel, eventId: 80, epoch, kind: 'batch', body: JSON.stringify(b) }]);
    const g = await game(50);
    await g.frame((f) => f.t === 'batch' && f.ev === 80, 'batch 80 replayed');
    const round = { t: 'round', round: { id: 'r1', state: 'locked' } };
    h.bus.publish(h.subj.channelGame(suite.channel), encodeJson(round)); // not a batch: sent, and the check goes on
    h.bus.publish(h.subj.channelGame(suite.channel), encodeJson(b)); // the live copy of the replayed 80
    await logAndPublish(90);
    await g.frame((f) => f.t === 'batch' && f.ev === 90, 'batch 90');
    assert.deepEqual(evs(g.frames), [80, 90]);
    assert.ok(g.frames.some((f) => f.t === 'round'));
    assert.equal((await skipped()) - skippedBefore, 1);
    await g.close();
  });

  it('game - a batch logged and published while the subscription is not yet active at the bus is replayed, not lost', async () => {
    // NATS starts delivering to a subscription once the server has read its SUB, which a busy gateway may send late. The
    // shard logs the batch after the subscribe was asked, and publishes it before the subscription is active: only a
    // log read made after the bus confirmed the subscription (flush) finds it.
    const bus = new LateSubscribeBus();
    const h2 = await startHarness({ store: suite.store, channels: [suite.channel], bus });
    const since = suite.store.events.since.bind(suite.store.events);
    let sinceDone!: () => void;
    const sinceRead = new Promise<void>((r) => (sinceDone = r));
    suite.store.events.since = async (...args) => {
      try {
        return await since(...args);
      } finally {
        sinceDone();
      }
    };
    try {
      bus.gate = (subject) =>
        subject === h2.subj.channelGame(suite.channel)
          ? Promise.race([bus.flushed, sinceRead]).then(() => logAndPublishOn(h2, 200))
          : undefined;
      const g = await connected(h2.wsUrl({ role: 'game', channel: suite.channel, key: suite.acme.apiKey, lastEventId: 100 }));
      await sinceRead;
      h2.bus.publish(h2.subj.channelGame(suite.channel), encodeJson(batch(201))); // live, after the subscription is active
      await g.frame((f) => f.t === 'batch' && f.ev === 201, 'the live batch 201');
      assert.deepEqual(evs(g.frames), [200, 201], 'batch 200 reached the game (replayed from the log)');
      await g.close();
    } finally {
      suite.store.events.since = since;
      await h2.close();
    }
  });

  it('game - a game ahead of the log (nothing replayed, e.g. a fresh database) gets live batches below its lastEventId', async () => {
    const resumes = async (): Promise<number> =>
      metricValue(await h.metricsText(), 'crowdplay_resumes_total', { role: 'game', outcome: 'replayed' });
    const before = await resumes();
    const g = await game(5000);
    await waitUntil(async () => (await resumes()) === before + 1, 'the resume done');
    h.bus.publish(h.subj.channelGame(suite.channel), encodeJson(batch(100)));
    await g.frame((f) => f.t === 'batch' && f.ev === 100, 'live batch 100');
    assert.deepEqual(evs(g.frames), [100]);
    await g.close();
  });

  it('game - a live batch at or below one the socket was sent is not sent again (a new owner repeating the last logged batch)', async () => {
    const skipped = async (): Promise<number> => metricValue(await h.metricsText(), 'crowdplay_replayed_live_skipped_total');
    const resumes = async (): Promise<number> =>
      metricValue(await h.metricsText(), 'crowdplay_resumes_total', { role: 'game', outcome: 'replayed' });
    const before = await resumes();
    const g = await game(6000);
    await waitUntil(async () => (await resumes()) === before + 1, 'the resume done');
    const skippedBefore = await skipped();
    for (const ev of [300, 300, 250, 310]) h.bus.publish(h.subj.channelGame(suite.channel), encodeJson(batch(ev)));
    await g.frame((f) => f.t === 'batch' && f.ev === 310, 'batch 310');
    assert.deepEqual(evs(g.frames), [300, 310]);
    assert.equal((await skipped()) - skippedBefore, 2);
    await g.close();
  });

  it('crowd - a viewer ahead of the channel (changes it saw were lost) gets resync (ahead) then the update; others no resync', async () => {
    const token = await viewerToken(suite.acme.tenant.signingSecret, { sub: 'ahead' });
    const ahead = await connected(h.wsUrl({ role: 'crowd', channel: suite.channel, token, lastEventId: 1000 }));
    assert.deepEqual(await ahead.frame((f) => f.t === 'resync', 'resync'), {
      t: 'resync',
      channel: suite.channel,
      from: 1000,
      reason: 'ahead',
    });
    assert.equal((await ahead.frame((f) => f.t === 'update', 'update')).ev, 35);
    const behind = await connected(h.wsUrl({ role: 'crowd', channel: suite.channel, token, lastEventId: 20 }));
    assert.equal((await behind.frame((f) => f.t === 'update', 'update')).ev, 35);
    const current = await connected(h.wsUrl({ role: 'crowd', channel: suite.channel, token, lastEventId: 35 }));
    await waitUntil(
      async () => metricValue(await h.metricsText(), 'crowdplay_resumes_total', { role: 'crowd' }) === 3,
      'three crowd resumes',
    );
    // A live update after the resumes: once each socket has it, whatever a resume sent has arrived.
    h.bus.publish(h.subj.channelOut(suite.channel), encodeJson(updateFrame(suite.channel, 36)));
    for (const c of [behind, current]) await c.frame((f) => f.t === 'update' && f.ev === 36, 'the live update 36');
    assert.ok(!behind.frames.some((f) => f.t === 'resync') && !current.frames.some((f) => f.t === 'resync'));
    assert.deepEqual(
      current.frames.filter((f) => f.t === 'update').map((f) => f.ev),
      [36],
      'nothing missed: no update before the live one',
    );
    for (const c of [ahead, behind, current]) await c.close();
  });
});
