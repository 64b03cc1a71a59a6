/**
 * The one behaviour suite every SendBucket adapter passes (MemoryBucket,
 * RedisBucket with the clock passed to the Lua script). Exact values: the
 * arithmetic is integer µs (gcra.ts), so every wait is known to the ms.
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { ManualClock, type SendBucket, type SendLimits } from '../src/index.ts';
import { TELEGRAM_LIMITS } from './harness.ts';

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
    assert.deepEqual(await bucket.take('-100', true), { granted: true, nowMs: 5_000_000 });
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
    assert.deepEqual(await bucket.take('7', false), { granted: true, nowMs: 5_000_034 });
    clock.advance(34);
    // A private chat has no group limit: its own 1/s binds.
    assert.deepEqual(await bucket.take('7', false), { granted: false, nowMs: 5_000_068, retryAfterMs: 966, botWaitMs: 0, limit: 'chat' });
    assert.deepEqual(await bucket.take('8', false), { granted: true, nowMs: 5_000_068 });
  });

  void test(`${name} - bucket: a refused take consumes nothing`, async (t) => {
    const { bucket, clock } = await setup(t);
    assert.equal((await bucket.take('-200', true)).granted, true);
    for (let i = 0; i < 50; i++) {
      clock.advance(50);
      assert.equal((await bucket.take('-200', true)).granted, false);
    }
    clock.set(5_003_000); // exactly 3,000 ms after the first grant
    assert.deepEqual(await bucket.take('-200', true), { granted: true, nowMs: 5_003_000 });
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
    assert.deepEqual(await bucket.take('9', false), { granted: true, nowMs: 5_005_000 });
  });

  void test(`${name} - bucket: bad input throws RangeError and takes nothing`, async (t) => {
    const { bucket } = await setup(t);
    await assert.rejects(bucket.take('', false), RangeError);
    await assert.rejects(bucket.pause(-1), RangeError);
    await assert.rejects(bucket.pause(Number.NaN), RangeError);
    assert.equal(await bucket.pausedForMs(), 0);
    assert.deepEqual(await bucket.take('10', false), { granted: true, nowMs: 5_000_000 }, 'nothing was taken by the bad calls');
  });
}
