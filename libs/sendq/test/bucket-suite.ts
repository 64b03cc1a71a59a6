/**
 * The one behaviour suite every SendBucket adapter passes (MemoryBucket,
 * RedisBucket with the clock passed to the Lua script). Exact values: the
 * arithmetic is integer µs (gcra.ts), so every wait is known to the ms.
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError } from '@crowdplay/protocol';
import { ManualClock, type SendBucket, type SendLimits } from '../src/index.ts';
import { TELEGRAM_LIMITS } from './harness.ts';

/** Telegram's limits with a group burst of 2 (TELEGRAM_GROUP_BURST=2; its default is 1): T_group = ceil(60e6 / 19) = 3,157,895 µs. */
const BURST_2: SendLimits = { ...TELEGRAM_LIMITS, groupBurst: 2 };

/** The most grants in any half-open window [s, s + windowMs) for every whole-ms start s (grants in whole ms). */
function mostInAnyWindow(grants: readonly number[], windowMs: number): number {
  let most = 0;
  let lo = 0;
  let hi = 0;
  for (let s = grants[0]! - windowMs; s <= grants[grants.length - 1]!; s++) {
    while (lo < grants.length && grants[lo]! < s) lo++;
    while (hi < grants.length && grants[hi]! < s + windowMs) hi++;
    most = Math.max(most, hi - lo);
  }
  return most;
}

export type BucketFactory = (limits: SendLimits, clock: ManualClock) => Promise<{ bucket: SendBucket; cleanup(): Promise<void> }>;

export function bucketSuite(name: string, factory: BucketFactory): void {
  async function setup(t: TestContext, limits = TELEGRAM_LIMITS): Promise<{ bucket: SendBucket; clock: ManualClock }> {
    const clock = new ManualClock(5_000_000);
    const { bucket, cleanup } = await factory(limits, clock);
    t.after(cleanup);
    return { bucket, clock };
  }

  void test(`${name} - bucket: one take checks bot, group and chat limits at once, with exact waits`, async (t) => {
    const { bucket, clock } = await setup(t);
    assert.deepEqual(await bucket.take('-100', true), { granted: true, nowMs: 5_000_000, waitMs: 0 });
    // The group's 20/min (3,000 ms) is the longest wait; the bot's 30/s (33.334 ms) applies to every chat.
    assert.deepEqual(await bucket.take('-100', true), {
      granted: false,
      nowMs: 5_000_000,
      retryAfterMs: 3_000,
      botWaitMs: 34,
      limit: 'group',
    });
    assert.deepEqual(await bucket.take('7', false), { granted: false, nowMs: 5_000_000, retryAfterMs: 34, botWaitMs: 34, limit: 'bot' });
    clock.advance(34);
    assert.deepEqual(await bucket.take('7', false), { granted: true, nowMs: 5_000_034, waitMs: 0 });
    clock.advance(34);
    // A private chat has no group limit: its own 1/s binds.
    assert.deepEqual(await bucket.take('7', false), { granted: false, nowMs: 5_000_068, retryAfterMs: 966, botWaitMs: 0, limit: 'chat' });
    assert.deepEqual(await bucket.take('8', false), { granted: true, nowMs: 5_000_068, waitMs: 0 });
  });

  void test(`${name} - bucket: a refused take consumes nothing`, async (t) => {
    const { bucket, clock } = await setup(t);
    assert.equal((await bucket.take('-200', true)).granted, true);
    for (let i = 0; i < 50; i++) {
      clock.advance(50);
      assert.equal((await bucket.take('-200', true)).granted, false);
    }
    clock.set(5_003_000); // exactly 3,000 ms after the first grant
    assert.deepEqual(await bucket.take('-200', true), { granted: true, nowMs: 5_003_000, waitMs: 0 });
  });

  void test(`${name} - bucket: a group gets exactly 20 grants per minute, 3,000 ms apart, under constant demand`, async (t) => {
    const { bucket, clock } = await setup(t);
    const grants: number[] = [];
    while (clock.now() < 5_000_000 + 120_000) {
      const r = await bucket.take('-300', true);
      if (r.granted) grants.push(r.nowMs - 5_000_000);
      else clock.advance(r.retryAfterMs);
    }
    assert.equal(grants.filter((g) => g < 60_000).length, 20);
    assert.equal(grants.length, 40);
    assert.deepEqual(grants.slice(0, 4), [0, 3_000, 6_000, 9_000]);
  });

  void test(`${name} - bucket: group burst 2 - a group that was quiet gets its second grant after the chat's 1 s, not 3 s`, async (t) => {
    const { bucket, clock } = await setup(t, BURST_2);
    for (const from of [5_000_000, 5_070_000]) {
      clock.set(from); // at the start, and again after a quiet minute: the burst is back
      assert.deepEqual(await bucket.take('-400', true), { granted: true, nowMs: from, waitMs: 0 });
      // Only the chat's own 1/s holds the second call back.
      assert.deepEqual(await bucket.take('-400', true), {
        granted: false,
        nowMs: from,
        retryAfterMs: 1_000,
        botWaitMs: 34,
        limit: 'chat',
      });
      clock.advance(1_000);
      assert.deepEqual(await bucket.take('-400', true), { granted: true, nowMs: from + 1_000, waitMs: 0 });
      // The burst is spent: the third call waits for the group, one T_group (3,157.895 ms) after the first.
      assert.deepEqual(await bucket.take('-400', true), {
        granted: false,
        nowMs: from + 1_000,
        retryAfterMs: 2_158,
        botWaitMs: 34,
        limit: 'group',
      });
    }
  });

  void test(`${name} - bucket: group burst 2 - under constant demand no 60 s window of five minutes holds more than 20 grants`, async (t) => {
    const { bucket, clock } = await setup(t, BURST_2);
    const grants: number[] = [];
    while (clock.now() < 5_000_000 + 300_000) {
      const r = await bucket.take('-500', true);
      if (r.granted) grants.push(r.nowMs - 5_000_000);
      else clock.advance(r.retryAfterMs);
    }
    // A burst of two (the chat's 1 s apart), then one every T_group = 3,157,895 µs, counted from the first call.
    assert.deepEqual(grants.slice(0, 5), [0, 1_000, 3_158, 6_316, 9_474]);
    assert.equal(grants.length, 96, '2 + floor(300 s / T_group) = 2 + 94');
    assert.equal(mostInAnyWindow(grants, 60_000), 20, 'at most 20 in any 60 s, and the bound is reached');
    assert.equal(grants.filter((g) => g >= 60_000 && g < 120_000).length, 19, 'a group sending all the time: 19 a minute');
  });

  void test(`${name} - bucket: group burst 1 is the even spacing: 3,000 ms from the first call on`, async (t) => {
    const { bucket, clock } = await setup(t, { ...TELEGRAM_LIMITS, groupBurst: 1 });
    const grants: number[] = [];
    while (clock.now() < 5_000_000 + 300_000) {
      const r = await bucket.take('-600', true);
      if (r.granted) grants.push(r.nowMs - 5_000_000);
      else {
        if (grants.length === 1)
          assert.deepEqual(r, { granted: false, nowMs: 5_000_000, retryAfterMs: 3_000, botWaitMs: 34, limit: 'group' });
        clock.advance(r.retryAfterMs);
      }
    }
    assert.deepEqual(
      grants,
      Array.from({ length: 100 }, (_, i) => i * 3_000),
    );
    assert.equal(mostInAnyWindow(grants, 60_000), 20);
  });

  void test(`${name} - bucket: a group burst of 0, below 0, not an integer or above the group rate is refused`, async () => {
    for (const groupBurst of [0, -1, 1.5, 21, Number.NaN]) {
      await assert.rejects(
        async () => factory({ ...TELEGRAM_LIMITS, groupBurst }, new ManualClock(5_000_000)),
        (e: unknown) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') && /limits\.groupBurst/.test(e.message),
        String(groupBurst),
      );
    }
  });

  void test(`${name} - bucket: the bot gets at most 30 grants in any second across chats`, async (t) => {
    const { bucket, clock } = await setup(t);
    const grants: number[] = [];
    let chat = 0;
    while (clock.now() < 5_000_000 + 2_000) {
      const r = await bucket.take(String(++chat), false);
      if (r.granted) grants.push(r.nowMs);
      else clock.advance(r.retryAfterMs);
    }
    // Stepping by the promised wait (whole ms, rounded up from 33.334): grants 34 ms apart, 30 in the first second.
    assert.equal(grants.filter((g) => g < 5_001_000).length, 30);
    assert.equal(grants.length, 59);
  });

  void test(`${name} - bucket: pause holds every chat; a shorter pause never shortens a longer one`, async (t) => {
    const { bucket, clock } = await setup(t);
    assert.equal(await bucket.pausedForMs(), 0);
    assert.equal(await bucket.pause(5_000), 5_005_000);
    assert.equal(await bucket.pause(1_000), 5_005_000);
    assert.equal(await bucket.pausedForMs(), 5_000);
    assert.deepEqual(await bucket.take('9', false), {
      granted: false,
      nowMs: 5_000_000,
      retryAfterMs: 5_000,
      botWaitMs: 5_000,
      limit: 'pause',
    });
    clock.advance(4_999);
    assert.equal(await bucket.pausedForMs(), 1);
    assert.equal((await bucket.take('9', false)).granted, false);
    clock.advance(1);
    assert.equal(await bucket.pausedForMs(), 0);
    assert.deepEqual(await bucket.take('9', false), { granted: true, nowMs: 5_005_000, waitMs: 0 });
  });

  void test(`${name} - bucket: booking - refused only by the bot rate, a take within maxWaitMs gets the next free slots in turn, one bot interval apart`, async (t) => {
    const { bucket, clock } = await setup(t);
    assert.deepEqual(await bucket.take('1', false, 250), { granted: true, nowMs: 5_000_000, waitMs: 0 });
    // Each booking moves the bot's next slot one interval (33.334 ms) on.
    const waits: number[] = [];
    for (let chat = 2; chat <= 8; chat++) {
      const r = await bucket.take(String(chat), false, 250);
      assert.equal(r.granted, true, `chat ${chat}`);
      if (r.granted) waits.push(r.waitMs);
    }
    assert.deepEqual(waits, [33.334, 66.668, 100.002, 133.336, 166.67, 200.004, 233.338]);
    // The next slot is 266.7 ms away: beyond 250 it is refused as before, and the refusal books nothing.
    assert.deepEqual(await bucket.take('9', false, 250), {
      granted: false,
      nowMs: 5_000_000,
      retryAfterMs: 267,
      botWaitMs: 267,
      limit: 'bot',
    });
    assert.deepEqual(await bucket.take('9', false, 300), { granted: true, nowMs: 5_000_000, waitMs: 266.672 });
    // Without maxWaitMs nothing is booked.
    assert.deepEqual(await bucket.take('10', false), { granted: false, nowMs: 5_000_000, retryAfterMs: 301, botWaitMs: 301, limit: 'bot' });
    // A booked chat's own limit counts from its slot: chat 8 went at +233.3 ms, so it may go again at +1,233.3 ms.
    clock.set(5_000_300);
    const again = await bucket.take('8', false, 10_000);
    assert.deepEqual(again, { granted: false, nowMs: 5_000_300, retryAfterMs: 934, botWaitMs: 1, limit: 'chat' });
  });

  void test(`${name} - bucket: lanes - a reply departs at the earliest board booking, which moves to the next free slot`, async (t) => {
    const { bucket, clock } = await setup(t);
    const board = (id: string): { lane: 'board'; bookingId: string } => ({ lane: 'board', bookingId: id });
    assert.deepEqual(await bucket.take('10', false, 250, board('b0')), { granted: true, nowMs: 5_000_000, waitMs: 0 });
    const waits: number[] = [];
    for (const [chat, id] of [
      ['11', 'b1'],
      ['12', 'b2'],
      ['13', 'b3'],
      ['14', 'b4'],
    ] as const) {
      const r = await bucket.take(chat, false, 250, board(id));
      if (r.granted) waits.push(r.waitMs);
    }
    assert.deepEqual(waits, [33.334, 66.668, 100.002, 133.336]);
    // Only the bot rate refuses the reply: it takes b1's slot instead of waiting behind four boards.
    assert.deepEqual(await bucket.take('99', false, 0, { lane: 'tx' }), {
      granted: true,
      nowMs: 5_000_000,
      waitMs: 33.334,
      preempted: true,
    });
    // b1 learns at its slot that it moved to the bot's next free slot; b2's slot is still its own and is claimed.
    assert.deepEqual(await bucket.depart('b1', '11', false, 5_000_033.334), { movedToMs: 5_000_166.67, waitMs: 166.67, pausedMs: 0 });
    clock.advance(67);
    assert.deepEqual(await bucket.depart('b2', '12', false, 5_000_066.668), { movedToMs: null, waitMs: 0, pausedMs: 0 });
    // A claimed slot is not taken: the next reply takes b3's (100.002 ms), not b2's, which has departed.
    assert.deepEqual(await bucket.take('98', false, 0, { lane: 'tx' }), {
      granted: true,
      nowMs: 5_000_067,
      waitMs: 33.002,
      preempted: true,
    });
    // Boards book behind everything and never take a booking: the next free slot is after b1's and b3's new ones.
    assert.deepEqual(await bucket.take('15', false, 250), { granted: true, nowMs: 5_000_067, waitMs: 166.338 });
    assert.deepEqual(await bucket.take('16', false, 0), {
      granted: false,
      nowMs: 5_000_067,
      retryAfterMs: 200,
      botWaitMs: 200,
      limit: 'bot',
    });
    // The moved board's own limit counts from its new slot (+166.67 ms): chat 11 may go again at +1,166.67 ms.
    clock.set(5_001_100);
    assert.deepEqual(await bucket.take('11', false), { granted: false, nowMs: 5_001_100, retryAfterMs: 67, botWaitMs: 0, limit: 'chat' });
  });

  void test(`${name} - bucket: lanes with group burst 2 - a moved board's group counts from its new slot, burst and all`, async (t) => {
    const { bucket, clock } = await setup(t, BURST_2);
    const board = (id: string): { lane: 'board'; bookingId: string } => ({ lane: 'board', bookingId: id });
    assert.deepEqual(await bucket.take('1', false, 250, board('x0')), { granted: true, nowMs: 5_000_000, waitMs: 0 });
    assert.deepEqual(await bucket.take('-700', true, 250, board('g1')), { granted: true, nowMs: 5_000_000, waitMs: 33.334 });
    // A reply takes the group's booked slot; the group's board moves to the bot's next free slot (+66.668 ms).
    assert.deepEqual(await bucket.take('99', false, 0, { lane: 'tx' }), {
      granted: true,
      nowMs: 5_000_000,
      waitMs: 33.334,
      preempted: true,
    });
    assert.deepEqual(await bucket.depart('g1', '-700', true, 5_000_033.334), { movedToMs: 5_000_066.668, waitMs: 66.668, pausedMs: 0 });
    // The group's second call: the burst allows it once the chat's 1 s from the new slot has passed.
    clock.set(5_001_066);
    assert.deepEqual(await bucket.take('-700', true), { granted: false, nowMs: 5_001_066, retryAfterMs: 1, botWaitMs: 0, limit: 'chat' });
    clock.set(5_001_067);
    assert.deepEqual(await bucket.take('-700', true), { granted: true, nowMs: 5_001_067, waitMs: 0 });
    // The third waits for the group: one T_group (3,157.895 ms) after the moved slot, at +3,224.563 ms.
    assert.deepEqual(await bucket.take('-700', true), {
      granted: false,
      nowMs: 5_001_067,
      retryAfterMs: 2_158,
      botWaitMs: 34,
      limit: 'group',
    });
  });

  void test(`${name} - bucket: booking never books past a pause or a chat's own limit`, async (t) => {
    const { bucket, clock } = await setup(t);
    assert.equal((await bucket.take('-1', true, 250)).granted, true);
    // The group's own 3 s binds: refused, even with a long maxWaitMs.
    assert.deepEqual(await bucket.take('-1', true, 10_000), {
      granted: false,
      nowMs: 5_000_000,
      retryAfterMs: 3_000,
      botWaitMs: 34,
      limit: 'group',
    });
    clock.advance(34);
    await bucket.pause(100);
    assert.deepEqual(await bucket.take('2', false, 10_000), {
      granted: false,
      nowMs: 5_000_034,
      retryAfterMs: 100,
      botWaitMs: 100,
      limit: 'pause',
    });
  });

  void test(`${name} - bucket: bad input throws RangeError and takes nothing`, async (t) => {
    const { bucket } = await setup(t);
    await assert.rejects(bucket.take('', false), RangeError);
    await assert.rejects(bucket.pause(-1), RangeError);
    await assert.rejects(bucket.pause(Number.NaN), RangeError);
    await assert.rejects(bucket.take('10', false, -1), RangeError);
    await assert.rejects(bucket.take('10', false, Number.POSITIVE_INFINITY), RangeError);
    assert.equal(await bucket.pausedForMs(), 0);
    assert.deepEqual(await bucket.take('10', false), { granted: true, nowMs: 5_000_000, waitMs: 0 }, 'nothing was taken by the bad calls');
  });
}
