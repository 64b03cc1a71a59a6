/**
 * Event id guarantees across moves and restarts: two shards sharing
 * one Postgres schema and subject prefix, the sequencer closed and a new one
 * started on the same store mid-run, channels moved back and forth between
 * the shards while intents flow. Every event id seen for a channel (batches
 * and updates) rises strictly, no id serves two channels, every id after a
 * move is above the high-water mark read before that move's acquire, and the
 * event log holds every published batch.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SequencerService } from '@crowdplay/sequencer';
import type { Batch, ChannelUpdate } from '@crowdplay/protocol';
import { startHarness, type Harness } from './harness.ts';
import type { Shard } from '../src/index.ts';

describe('event ids across shard moves and a sequencer restart', () => {
  let h: Harness & { schema: { drop(): Promise<void> } };
  let s2: Shard;
  const CH = ['m1', 'm2', 'm3'];
  before(async () => {
    h = await startHarness();
    for (const c of CH) await h.store.channels.ensure(c, 'acme');
    s2 = await h.newShard('s2');
  });
  after(() => h.close());

  it('ids rise strictly per channel, are never reused, and after an acquire come only from blocks leased after it', async () => {
    const shards: Record<string, Shard> = { s1: h.shard, s2 };
    const owner: Record<string, string> = {};
    for (const c of CH) {
      const epoch = await h.store.channels.acquire(c, 's1');
      await h.shard.acquire(c, epoch);
      owner[c] = 's1';
      await h.ctl(c, { op: 'declare', actions: [{ name: 'cheer', maxPerTick: 100 }] });
    }
    /** After each move: the high-water mark before the acquire, and the first batch index after it. */
    const moves: Array<{ channel: string; highWater: number; fromBatch: number; fromUpdate: number }> = [];
    let sending = true;
    const pump = (async () => {
      let n = 0;
      while (sending) {
        for (const c of CH) h.send(c, [{ action: 'cheer', seq: ++n }]);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    let sequencer: SequencerService = h.sequencer;
    for (let round = 0; round < 8; round++) {
      await new Promise((r) => setTimeout(r, 120));
      const c = CH[round % CH.length]!;
      const from = owner[c]!;
      const to = from === 's1' ? 's2' : 's1';
      await shards[from]!.release(c);
      if (round === 3) {
        // The sequencer restarts mid-run: a new process on the same store.
        await sequencer.close();
        sequencer = new SequencerService({ bus: h.bus, subjects: h.subjects, store: h.store, telemetry: h.telemetry });
        await sequencer.start();
      }
      const highWater = await h.store.sequencer.highWater();
      moves.push({ channel: c, highWater, fromBatch: h.batches.length, fromUpdate: h.updates.length });
      const epoch = await h.store.channels.acquire(c, to);
      await shards[to]!.acquire(c, epoch);
      owner[c] = to;
    }
    await new Promise((r) => setTimeout(r, 150));
    sending = false;
    await pump;
    await new Promise((r) => setTimeout(r, 150));
    if (sequencer !== h.sequencer) await sequencer.close();

    const seen = new Map<number, string>();
    for (const c of CH) {
      const bs = h.batches.filter((b: Batch) => b.channel === c).map((b) => b.ev);
      const us = h.updates.filter((u: ChannelUpdate) => u.channel === c).map((u) => u.ev);
      assert.ok(bs.length > 10, `${c}: batches flowed (${bs.length})`);
      for (const list of [bs, us])
        for (let i = 1; i < list.length; i++) assert.ok(list[i]! > list[i - 1]!, `${c}: ${list[i]} after ${list[i - 1]}`);
      for (const ev of new Set([...bs, ...us])) {
        assert.ok(!seen.has(ev) || seen.get(ev) === c, `id ${ev} used by ${seen.get(ev)} and ${c}`);
        seen.set(ev, c);
      }
      // The event log holds every published batch of the channel.
      const logged = (await h.store.events.since(c, 0, 100_000)).events.map((e) => e.eventId);
      assert.deepEqual(logged, bs, `${c}: the log holds exactly the published batches`);
    }
    for (const m of moves) {
      const after = [
        ...h.batches.slice(m.fromBatch).filter((b) => b.channel === m.channel),
        ...h.updates.slice(m.fromUpdate).filter((u) => u.channel === m.channel),
      ].map((x) => x.ev);
      for (const ev of after)
        assert.ok(ev > m.highWater, `${m.channel}: id ${ev} after the move is above the mark before its acquire (${m.highWater})`);
    }
  });
});
