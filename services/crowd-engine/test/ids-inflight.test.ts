/**
 * Event ids stay strictly increasing per channel when a tick is still logging
 * and publishing a batch while the channel leaves the shard: the
 * tick's event-log write is held (committed, then the answer delayed) while
 * the shard releases the channel, hands it off, or drops it because the router
 * moved it away. Without waiting for the tick in flight, its batch (an id of
 * the old owner's block) went out after the new owner's batches.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { encodeJson } from '@crowdplay/bus';
import type { Batch } from '@crowdplay/protocol';
import type { LoggedEvent } from '@crowdplay/store';
import { startHarness, type Harness } from './harness.ts';
import type { Shard } from '../src/index.ts';

/** How long a held log write waits at most for another batch of its channel to be published, ms. */
const HOLD_MS = 3_000;

describe('a tick in flight while its channel leaves the shard', () => {
  let h: Harness & { schema: { drop(): Promise<void> } };
  let s2: Shard;
  before(async () => {
    h = await startHarness();
    s2 = await h.newShard('s2');
  });
  after(() => h.close());

  const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
  const evs = (ch: string, from = 0): number[] =>
    h.batches
      .slice(from)
      .filter((b: Batch) => b.channel === ch)
      .map((b) => b.ev);

  async function ownedByS1(ch: string): Promise<void> {
    await h.store.channels.ensure(ch, 'acme');
    await h.shard.acquire(ch, await h.store.channels.acquire(ch, 's1'));
    assert.equal((await h.ctl(ch, { op: 'declare', actions: [{ name: 'cheer', maxPerTick: 100 }] })).ok, true);
  }

  /**
   * Holds the next event-log write that carries a batch of `ch` after it committed (a slow answer), until
   * another batch of `ch` is published or HOLD_MS pass. Resolves `held` with the held batch's id; `released`
   * resolves once the write returned to the shard.
   */
  function holdLogWrite(ch: string): { held: Promise<number>; released: Promise<void> } {
    const events = h.store.events;
    const real = events.append.bind(events);
    let onHeld!: (ev: number) => void;
    const held = new Promise<number>((r) => (onHeld = r));
    let onReleased!: () => void;
    const released = new Promise<void>((r) => (onReleased = r));
    events.append = async (list: readonly LoggedEvent[]): Promise<string[]> => {
      const stale = await real(list);
      const e = list.find((x) => x.channel === ch);
      if (!e) return stale;
      events.append = real;
      onHeld(e.eventId);
      const deadline = Date.now() + HOLD_MS;
      while (Date.now() < deadline && !h.batches.some((b) => b.channel === ch && b.ev !== e.eventId)) await sleep(5);
      onReleased();
      return stale;
    };
    return { held, released };
  }

  /** Every id of `ch` published rises strictly, in the order the bus delivered them. */
  function assertRising(ch: string): void {
    const list = evs(ch);
    for (let i = 1; i < list.length; i++)
      assert.ok(list[i]! > list[i - 1]!, `${ch}: batch ${list[i]} published after ${list[i - 1]} (${list.join(', ')})`);
  }

  it('release waits for the tick in flight: its batch is published before release returns, never after the new owner', async () => {
    const ch = 'q-release';
    await ownedByS1(ch);
    const hold = holdLogWrite(ch);
    h.send(ch, [{ action: 'cheer' }]);
    const heldEv = await hold.held;
    await h.shard.release(ch);
    const mark = h.batches.length;
    const highWater = await h.store.sequencer.highWater();
    await s2.acquire(ch, await h.store.channels.acquire(ch, 's2'));
    h.send(ch, [{ action: 'cheer' }]);
    await h.waitFor(() => evs(ch).some((ev) => ev > highWater));
    await hold.released;
    await h.waitFor(() => evs(ch).includes(heldEv), 2_000); // the acked intent reaches the game (before or after the move)
    assertRising(ch);
    for (const ev of evs(ch, mark)) assert.ok(ev > highWater, `${ch}: id ${ev} published after release returned is above ${highWater}`);
    const logged = (await h.store.events.since(ch, 0, 1_000)).events.map((e) => e.eventId);
    assert.deepEqual(logged, evs(ch), 'the log holds exactly the published batches');
    await s2.release(ch);
  });

  it('handOff waits for the tick in flight: its batch goes out before the handoff closes the open tick', async () => {
    const ch = 'q-handoff';
    await ownedByS1(ch);
    const hold = holdLogWrite(ch);
    h.send(ch, [{ action: 'cheer', seq: 901, conn: 901 }]);
    const heldEv = await hold.held;
    // An intent for the next tick (the held one blocks it): handOff closes it.
    h.send(ch, [{ action: 'cheer', seq: 902, conn: 902 }]);
    await h.waitFor(() => h.acks.find((a) => a.seq === 902 && a.ok));
    await h.shard.handOff(ch);
    await hold.released;
    await h.waitFor(() => evs(ch).includes(heldEv), 2_000);
    assert.equal(evs(ch).length, 2, `both batches published (${evs(ch).join(', ')})`);
    assertRising(ch);
    const highWater = await h.store.sequencer.highWater();
    await s2.acquire(ch, await h.store.channels.acquire(ch, 's2'));
    h.shard.forget(ch);
    h.send(ch, [{ action: 'cheer' }]);
    await h.waitFor(() => evs(ch).some((ev) => ev > highWater));
    assertRising(ch);
    await s2.release(ch);
  });

  it('a channel the router moved away publishes nothing more from the tick in flight', async () => {
    const ch = 'q-moved';
    await ownedByS1(ch);
    const hold = holdLogWrite(ch);
    h.send(ch, [{ action: 'cheer' }]);
    const heldEv = await hold.held;
    // s1 is cut off meanwhile: the router gives the channel to s2 at a newer epoch and announces it.
    const epoch = await h.store.channels.acquire(ch, 's2');
    await s2.acquire(ch, epoch);
    h.bus.publish(h.subjects.routerAssignments(), encodeJson({ channel: ch, shard: 's2', epoch }));
    await h.waitFor(() => !h.shard.channels.includes(ch));
    // s1 was cut off before its snapshot: the game declares again to the new owner.
    assert.equal((await h.ctl(ch, { op: 'declare', actions: [{ name: 'cheer', maxPerTick: 100 }] })).ok, true);
    h.send(ch, [{ action: 'cheer' }]);
    await h.waitFor(() => evs(ch).some((ev) => ev > heldEv));
    await hold.released;
    await sleep(100); // a publish from the held tick would land now
    assert.ok(!evs(ch).includes(heldEv), `the old owner's batch ${heldEv} is not published after the move (${evs(ch).join(', ')})`);
    assertRising(ch);
    // ...but it is in the log, and the new owner sent the last logged batch again on acquire (REPEAT_HEADER), before its
    // own: no game is left without a logged batch (gateways skip it for a game socket that has it).
    assert.deepEqual(
      h.repeats.filter((b) => b.channel === ch).map((b) => b.ev),
      [heldEv],
    );
    await s2.release(ch);
  });
});
