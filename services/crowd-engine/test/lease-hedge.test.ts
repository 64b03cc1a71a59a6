/**
 * A hung sequencer: a second member of the sequencers' queue group that takes
 * lease requests and never answers (a paused process). The in-process bus
 * hands the group's requests round robin, so every other lease reaches it.
 * Leases are hedged (SEQUENCER_LEASE_HEDGE_MS): every one, on acquire and in
 * the background refills, is answered after about the hedge delay instead of
 * failing at BUS_REQUEST_TIMEOUT_MS, and event ids still rise strictly per
 * channel, each acquire's from a block leased after it. With no sequencer at
 * all, an acquire fails at once (no responders), not after the timeout.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BusError, type BusMessage } from '@crowdplay/bus';
import type { Batch } from '@crowdplay/protocol';
import { startHarness, type Harness } from './harness.ts';
import type { IdBlock, LeaseFn } from '../src/index.ts';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('leases with a hung sequencer in the queue group', () => {
  let h: Harness & { schema: { drop(): Promise<void> } };
  const hung: BusMessage[] = [];
  let hungSub: { unsubscribe(): void };
  /** Every lease the shard's allocator made: how long it took, and whether it failed. */
  const leases: Array<{ ms: number; failed: boolean }> = [];

  before(async () => {
    h = await startHarness();
    // Subscribed after the harness's sequencer: the round robin goes real, hung, real, …
    hungSub = h.bus.subscribe(h.subjects.sequencerLease(), (m) => hung.push(m), { queue: 'sequencer' });
    // Times every lease of the shard's allocator (acquires' renews and background refills).
    const ids = (h.shard as unknown as { s: { ids: { lease: LeaseFn } } }).s.ids;
    const real = ids.lease;
    ids.lease = async (): Promise<IdBlock> => {
      const t0 = performance.now();
      try {
        const b = await real();
        leases.push({ ms: performance.now() - t0, failed: false });
        return b;
      } catch (err) {
        leases.push({ ms: performance.now() - t0, failed: true });
        throw err;
      }
    };
  });
  after(() => h.close());

  it('every lease is answered after about the hedge delay, not the timeout; ids rise per channel', async () => {
    const { requestTimeoutMs } = h.config.bus;
    const hedgeMs = h.config.sequencer.leaseHedgeMs;
    assert.ok(hedgeMs * 4 < requestTimeoutMs, `hedge ${hedgeMs} ms well under the timeout ${requestTimeoutMs} ms`);
    const CH = ['hg1', 'hg2', 'hg3', 'hg4', 'hg5', 'hg6'];
    const moves: Array<{ channel: string; highWater: number; fromBatch: number }> = [];
    let sending = true;
    let live: string[] = [];
    const pump = (async () => {
      let n = 0;
      while (sending) {
        for (const c of live) h.send(c, [{ action: 'cheer', seq: ++n }]);
        await sleep(10);
      }
    })();
    for (const c of CH) {
      await h.store.channels.ensure(c, 'acme');
      // Moved from an owner that is gone: the acquire leases a block (a first owner's would not need one).
      await h.store.channels.acquire(c, 'shard-gone');
      const highWater = await h.store.sequencer.highWater();
      moves.push({ channel: c, highWater, fromBatch: h.batches.length });
      const epoch = await h.store.channels.acquire(c, 's1');
      const t0 = performance.now();
      await h.shard.acquire(c, epoch);
      const ms = performance.now() - t0;
      assert.ok(ms < requestTimeoutMs / 2, `${c}: acquired in ${ms.toFixed(0)} ms`);
      assert.equal((await h.ctl(c, { op: 'declare', actions: [{ name: 'cheer', maxPerTick: 100 }] })).ok, true);
      live = [...live, c];
      await sleep(150);
    }
    // Intents keep flowing: blocks of 50 ids run out and are refilled in the background.
    await sleep(1_500);
    sending = false;
    await pump;
    await sleep(150);

    assert.ok(hung.length >= 3, `the hung sequencer took ${hung.length} lease requests`);
    assert.ok(leases.length >= CH.length + 3, `${leases.length} leases (acquires and refills)`);
    const failed = leases.filter((l) => l.failed).length;
    const slowest = Math.max(...leases.map((l) => l.ms));
    assert.equal(failed, 0, 'no lease failed');
    assert.ok(slowest < requestTimeoutMs / 2, `slowest lease ${slowest.toFixed(0)} ms`);
    const hedged = leases.filter((l) => l.ms >= hedgeMs - 5).length;
    assert.ok(hedged > 0, 'some leases were answered by a re-send');
    const text = await h.telemetry.metrics.prometheusText();
    const m = /^crowdplay_sequencer_lease_hedges_total(?:\{[^}]*\})? (\d+)/m.exec(text);
    assert.ok(m && Number(m[1]) >= hedged, `hedges counted: ${m?.[1]} (≥ ${hedged})`);

    for (const c of CH) {
      const evs = h.batches.filter((b: Batch) => b.channel === c).map((b) => b.ev);
      assert.ok(evs.length > 5, `${c}: batches flowed (${evs.length})`);
      for (let i = 1; i < evs.length; i++) assert.ok(evs[i]! > evs[i - 1]!, `${c}: ${evs[i]} after ${evs[i - 1]}`);
    }
    for (const mv of moves) {
      const first = h.batches.slice(mv.fromBatch).find((b: Batch) => b.channel === mv.channel);
      assert.ok(first, `${mv.channel}: a batch after the acquire`);
      assert.ok(
        first.ev > mv.highWater,
        `${mv.channel}: first id ${first.ev} above the high-water mark ${mv.highWater} read before the acquire`,
      );
    }
  });

  it('with no sequencer at all, an acquire that needs a lease fails at once with no responders', async () => {
    hungSub.unsubscribe();
    await h.sequencer.close();
    await h.store.channels.ensure('hg-none', 'acme');
    await h.store.channels.acquire('hg-none', 'shard-gone');
    const epoch = await h.store.channels.acquire('hg-none', 's1');
    const t0 = performance.now();
    await assert.rejects(h.shard.acquire('hg-none', epoch), (err: unknown) => {
      const causes: unknown[] = [];
      for (let e: unknown = err; e instanceof Error; e = e.cause) causes.push(e);
      return causes.some((e) => e instanceof BusError && e.code === 'no_responders') || /no responders/.test(String(err));
    });
    const ms = performance.now() - t0;
    assert.ok(ms < h.config.sequencer.leaseHedgeMs, `failed after ${ms.toFixed(0)} ms`);
  });
});
