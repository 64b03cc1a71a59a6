/**
 * The failover's shard probes: the gap per channel in both modes (against a scripted owner on the in-process
 * bus), the figures, and the options refused.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessBus, decodeJson, encodeJson, subjects as makeSubjects, type Bus, type Subjects } from '@crowdplay/bus';
import type { AckBatch, IntentBatch } from '@crowdplay/protocol';
import { ShardProbeSet, shardRecoveryFigures, type ShardProbeResult } from '../src/failover/shard-probe.ts';

const INTERVAL = 10;

/** An owner of `channel` that answers each probe with `answer(n)` (n: probes it got so far, from 1); null: silent. */
function owner(bus: Bus, s: Subjects, channel: string, answer: (n: number) => string | null): { stop(): void } {
  let n = 0;
  const sub = bus.subscribe(s.channelIn(channel), (msg) => {
    const batch = decodeJson<IntentBatch>(msg.data);
    for (const it of batch.intents) {
      const code = answer(++n);
      if (code === null) continue;
      const ack = code === 'ok' ? { conn: it.conn, seq: it.seq, ok: true } : { conn: it.conn, seq: it.seq, ok: false, code };
      bus.publish(s.gatewayAcks(batch.gw), encodeJson({ acks: [ack] } as AckBatch));
    }
  });
  return { stop: () => sub.unsubscribe() };
}

function probeSet(bus: Bus, s: Subjects, channels: string[], mode: 'dead' | 'moving'): ShardProbeSet {
  return new ShardProbeSet({ bus, subjects: s, gateway: 'gw-probe', channels, mode, intervalMs: INTERVAL, viewerOf: (i) => `fp-${i}` });
}

describe('failover shard probes', () => {
  it('dead - a gap runs from the fault to the new owner’s first ack that takes an intent', async () => {
    const bus = new InProcessBus();
    const s = makeSubjects('sp1');
    const set = probeSet(bus, s, ['a', 'b'], 'dead');
    const at = Date.now();
    set.arm(at);
    // Nobody serves for a while (the owner is dead); then a and b get owners, b refusing its first two as moving.
    await new Promise((r) => setTimeout(r, 60));
    const ownerAt = Date.now();
    const owners = [owner(bus, s, 'a', () => 'ok'), owner(bus, s, 'b', (n) => (n <= 2 ? 'CP_ERR_CHANNEL_UNAVAILABLE' : 'ok'))];
    await set.settle(Date.now() + 5_000);
    const [a, b] = set.stop();
    for (const o of owners) o.stop();
    assert.equal(set.pending, 0);
    assert.equal(a!.gapFromMs, at);
    assert.ok(a!.recoveredAt! >= ownerAt, 'a recovers only once served');
    assert.ok(b!.recoveredAt! >= a!.recoveredAt!, 'b waits out its refusals');
    assert.deepEqual(b!.acksByCode, { CP_ERR_CHANNEL_UNAVAILABLE: 2, ok: 1 });
    assert.ok(a!.sent > 2, `probes keep going while unanswered (sent ${a!.sent})`);
  });

  it('moving - the gap opens at the last probe taken before the first refusal and closes at the next taken', async () => {
    const bus = new InProcessBus();
    const s = makeSubjects('sp2');
    const set = probeSet(bus, s, ['m', 'q'], 'moving');
    // m: taken twice by the draining owner, refused three times (moving), then taken by the new owner.
    const o = owner(bus, s, 'm', (n) => (n <= 2 ? 'ok' : n <= 5 ? 'CP_ERR_CHANNEL_UNAVAILABLE' : 'ok'));
    // q: always taken (it moved between two probes).
    const oq = owner(bus, s, 'q', () => 'ok');
    set.arm();
    await set.settle(Date.now() + 300);
    assert.equal(set.pending, 1, 'q is not done before its owner is gone');
    set.ownerGone();
    assert.equal(set.pending, 0);
    const [m, q] = set.stop();
    o.stop();
    oq.stop();
    assert.deepEqual(m!.acksByCode, { ok: 3, CP_ERR_CHANNEL_UNAVAILABLE: 3 });
    assert.equal(m!.refused, 3);
    const gap = m!.recoveredAt! - m!.gapFromMs;
    assert.ok(gap >= 3 * INTERVAL, `m's gap covers its three refused probes (${gap} ms)`);
    assert.equal(q!.recoveredAt, q!.gapFromMs, 'q: gap 0');
    const f = shardRecoveryFigures([m!, q!], null);
    assert.deepEqual([f.channels, f.recovered, f.movedBetweenProbes, f.p50, f.max], [2, 2, 1, 0, gap]);
    assert.deepEqual(f.moveMs, { count: 0, p50: null, max: null });
  });

  it('figures - gaps, moves from the declared-dead instant, and channels that never recovered', () => {
    const r = (channel: string, from: number, to: number | null): ShardProbeResult => ({
      channel,
      gapFromMs: from,
      recoveredAt: to,
      refused: 0,
      sent: 4,
      acksByCode: to === null ? {} : { ok: 1 },
    });
    const f = shardRecoveryFigures([r('x', 1_000, 4_000), r('y', 1_000, 4_500), r('z', 1_000, null)], 3_000);
    assert.deepEqual([f.count, f.p50, f.max], [2, 3_000, 3_500]);
    assert.deepEqual(f.moveMs, { count: 2, p50: 1_000, max: 1_500 });
    assert.deepEqual([f.channels, f.recovered, f.probes.sent], [3, 2, 12]);
    assert.deepEqual(f.notRecovered, ['z: sent 4, {}']);
  });

  it('bad options - an interval outside 10…1000 ms is refused before anything is subscribed or sent', () => {
    const bus = new InProcessBus();
    const s = makeSubjects('sp3');
    let published = 0;
    const sub = bus.subscribe(s.channelIn('a'), () => published++);
    for (const intervalMs of [0, 5, 1_001, Number.NaN])
      assert.throws(
        () => new ShardProbeSet({ bus, subjects: s, gateway: 'g', channels: ['a'], mode: 'dead', intervalMs, viewerOf: () => 'v' }),
        /intervalMs must be in 10…1000/,
      );
    sub.unsubscribe();
    assert.equal(published, 0);
  });
});
