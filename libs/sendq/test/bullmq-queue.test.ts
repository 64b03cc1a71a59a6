/**
 * Runs the shared queue suite against BullMQ + the Redis Lua bucket (REDIS_URL,
 * default redis://127.0.0.1:6379), each test under its own key prefix, deleted
 * afterwards. The clock runs 50× real time so per-minute limits take ~1 s. It
 * FAILS, never skips, when Redis is unreachable.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { BullmqSendQueue, RedisBucket, botRetryMs, scaledClock, sendqKeys, type SendBucket, type SendFn } from '../src/index.ts';
import { REDIS_URL, TELEGRAM_LIMITS, bullmqHarness, deleteKeys, uniquePrefix, type TestPayload } from './harness.ts';
import { sendqSuite } from './sendq-suite.ts';

sendqSuite('bullmq', bullmqHarness(50));

/** After the test: `queues` closed (2 s each), then `prefix`'s keys deleted. */
function closeAfter(t: { after(fn: () => Promise<void>): void }, prefix: string, ...queues: Array<BullmqSendQueue<TestPayload>>): void {
  t.after(async () => {
    for (const q of queues) await q.close(2_000);
    const r = new Redis(REDIS_URL);
    await deleteKeys(r, prefix);
    await r.quit();
  });
}

void test(
  'bullmq - two processes: one bot-wide limit, one pause, each job sent once, results cross over',
  { timeout: 20_000 },
  async (t) => {
    const prefix = uniquePrefix();
    const clock = scaledClock(50);
    const open = (): Promise<BullmqSendQueue<TestPayload>> =>
      BullmqSendQueue.open<TestPayload>({ redisUrl: REDIS_URL, prefix, limits: TELEGRAM_LIMITS, clock, concurrency: 4 });
    const a = await open();
    const b = await open();
    closeAfter(t, prefix, a, b);
    const calls: Array<{ id: string; by: string; atMs: number; grantedAtMs: number; ok: boolean }> = [];
    let answeredAt = -1;
    const sender =
      (by: string): SendFn<TestPayload> =>
      (job) => {
        const limited = calls.length === 20;
        calls.push({ id: job.id, by, atMs: clock.now(), grantedAtMs: job.grantedAtMs, ok: !limited });
        if (limited) answeredAt = clock.now();
        return Promise.resolve(limited ? { retryAfterS: 2 } : { ok: true, value: by });
      };
    a.start(sender('a'));
    b.start(sender('b'));
    // Producer: process a only; both work.
    const results = [];
    for (let n = 1; n <= 90; n++) {
      const r = await a.enqueue({ chatId: 1_000 + n, lane: 'tx', payload: { n } });
      assert.equal(r.status, 'queued');
      if (r.status === 'queued') results.push(r.result);
    }
    const settled = await Promise.all(results);
    assert.ok(
      settled.every((s) => s.status === 'sent'),
      JSON.stringify(settled.filter((s) => s.status !== 'sent')),
    );
    const sentBy = new Set(settled.map((s) => (s.status === 'sent' ? String(s.value) : '')));
    assert.deepEqual([...sentBy].sort(), ['a', 'b'], 'both processes sent, and b’s results reached a');
    const ok = calls.filter((c) => c.ok);
    assert.equal(ok.length, 90);
    assert.equal(new Set(ok.map((c) => c.id)).size, 90, 'no job sent twice');
    const grants = calls.map((c) => c.grantedAtMs).sort((x, y) => x - y);
    for (let i = 0; i + 30 < grants.length; i++) assert.ok(grants[i + 30]! - grants[i]! >= 1_000, `31 grants within 1 s at ${grants[i]}`);
    // The 429 seen by one process paused both: the only calls after it started after the pause.
    const late = calls.filter((c) => c.atMs > answeredAt + 50 && c.atMs < answeredAt + 2_000);
    assert.deepEqual(late, [], 'no call during the pause (allowing the pause write’s own round trip)');
  },
);

void test('bullmq - a job re-run after a worker stopped mid-call is never called again', { timeout: 20_000 }, async (t) => {
  const prefix = uniquePrefix();
  const q = await BullmqSendQueue.open<TestPayload>({ redisUrl: REDIS_URL, prefix, limits: TELEGRAM_LIMITS, clock: scaledClock(50) });
  const r = new Redis(REDIS_URL);
  t.after(async () => {
    await q.close(2_000);
    await deleteKeys(r, prefix);
    await r.quit();
  });
  const crashed = await q.enqueue({ chatId: 91, lane: 'board', payload: { n: 1 } });
  const fine = await q.enqueue({ chatId: 92, lane: 'board', payload: { n: 2 } });
  assert.ok(crashed.status === 'queued' && fine.status === 'queued');
  // What a worker does right before calling send; it then "died" before recording the outcome.
  await r.incr(sendqKeys(prefix).called(crashed.id));
  const calls: number[] = [];
  q.start((job) => {
    calls.push(job.payload.n);
    return Promise.resolve({ ok: true });
  });
  assert.deepEqual(await crashed.result, { status: 'dropped', reason: 'outcome unknown: a worker stopped during the call' });
  assert.deepEqual(await fine.result, { status: 'sent' });
  assert.deepEqual(calls, [2]);
  assert.equal(await r.exists(sendqKeys(prefix).called(crashed.id)), 0, 'the counter goes with the job');
});

void test(
  'bullmq - booked bot slots: workers wait for the slot the bucket booked, never call before it; 0 books nothing',
  { timeout: 30_000 },
  async (t) => {
    const r = new Redis(REDIS_URL);
    const opened: Array<{ q: BullmqSendQueue<TestPayload>; prefix: string }> = [];
    // One hook, in order: queues closed, their keys deleted, then the connection (hooks run in registration order).
    t.after(async () => {
      for (const o of opened) {
        await o.q.close(2_000);
        await deleteKeys(r, o.prefix);
      }
      await r.quit();
    });
    for (const botBookMs of [250, 0]) {
      const prefix = uniquePrefix();
      const clock = scaledClock(1);
      const q = await BullmqSendQueue.open<TestPayload>({
        redisUrl: REDIS_URL,
        prefix,
        limits: TELEGRAM_LIMITS,
        clock,
        concurrency: 8,
        botBookMs,
      });
      opened.push({ q, prefix });
      const calls: Array<{ atMs: number; grantedAtMs: number }> = [];
      q.start((job) => {
        calls.push({ atMs: clock.now(), grantedAtMs: job.grantedAtMs });
        return Promise.resolve({ ok: true });
      });
      const results = [];
      for (let n = 1; n <= 45; n++) {
        const e = await q.enqueue({ chatId: 5_000 + n, lane: 'tx', payload: { n } });
        if (e.status === 'queued') results.push(e.result);
      }
      // A busy event loop (6 ms of every 10), as in the product while players guess: timers fire late.
      const busy = setInterval(() => {
        const until = performance.now() + 6;
        while (performance.now() < until);
      }, 10);
      const settled = await Promise.all(results).finally(() => clearInterval(busy));
      assert.equal(settled.filter((s) => s.status === 'sent').length, 45);
      const st = q.stats();
      if (botBookMs > 0) {
        assert.ok(st.booked.takes > 20, `most takes booked: ${st.booked.takes}`);
        assert.ok(st.booked.waitMs > 0);
        // The bucket's clock is Redis TIME (ms, µs precision), the call's this process's: allow 2 ms of clock skew.
        for (const c of calls) assert.ok(c.atMs >= c.grantedAtMs - 2, `called ${c.grantedAtMs - c.atMs} ms before its slot`);
      } else {
        assert.equal(st.booked.takes, 0);
        assert.ok(st.bucketWaits.bot > 0, 'workers were refused by the bot rate instead');
      }
      const slots = calls.map((c) => c.grantedAtMs).sort((a, b) => a - b);
      // Call starts of one process: at most 30 in any 1,000 ms (the window, call-window.ts, exact there), seen here
      // one Redis round trip later (the call is marked between the window and the call): 10 ms of slack.
      const starts = calls.map((c) => c.atMs).sort((a, b) => a - b);
      for (let i = 30; i < starts.length; i++) assert.ok(starts[i]! - starts[i - 30]! >= 990, `31 calls within 1 s at ${starts[i - 30]}`);
      // 33.334 ms less 1 µs: ms floats near 1.8e12 resolve ~0.25 µs.
      for (let i = 1; i < slots.length; i++)
        assert.ok(slots[i]! - slots[i - 1]! >= 33.333, `slots ${slots[i - 1]} and ${slots[i]} closer than 1000/30 ms`);
    }
  },
);

void test(
  'bullmq - lanes: with the board lane saturated, a reply departs within one board slot of its enqueue, and boards fill every other slot',
  { timeout: 30_000 },
  async (t) => {
    const prefix = uniquePrefix();
    const clock = scaledClock(1);
    const q = await BullmqSendQueue.open<TestPayload>({ redisUrl: REDIS_URL, prefix, limits: TELEGRAM_LIMITS, clock, concurrency: 8 });
    closeAfter(t, prefix, q);
    const calls: Array<{ lane: string; n: number; grantedAtMs: number }> = [];
    // Telegram answers in ~100 ms: every board worker holds its slot for a booked wait and a call.
    q.start(async (job) => {
      calls.push({ lane: job.lane, n: job.payload.n, grantedAtMs: job.grantedAtMs });
      await new Promise((r) => setTimeout(r, 100));
      return { ok: true };
    });
    const boards = [];
    for (let n = 1; n <= 90; n++) {
      const e = await q.enqueue({ chatId: 7_000 + n, lane: 'board', payload: { n } });
      if (e.status === 'queued') boards.push(e.result);
    }
    // Replies arrive while the board lane is busy, one at a time.
    const waits: number[] = [];
    for (let k = 1; k <= 5; k++) {
      while (calls.filter((c) => c.lane === 'board').length < 15 * k) await new Promise((r) => setTimeout(r, 5));
      const at = clock.now();
      const e = await q.enqueue({ chatId: 8_000 + k, lane: 'tx', payload: { n: 1_000 + k } });
      assert.equal(e.status, 'queued');
      if (e.status === 'queued') assert.equal((await e.result).status, 'sent');
      const tx = calls.find((c) => c.n === 1_000 + k)!;
      // Board calls whose slot came between the reply's enqueue and its own slot: the one departing, at most one more.
      waits.push(calls.filter((c) => c.lane === 'board' && c.grantedAtMs > at && c.grantedAtMs < tx.grantedAtMs).length);
    }
    await Promise.all(boards);
    assert.ok(
      waits.every((w) => w <= 2),
      `board slots ahead of each reply: ${waits.join(', ')}`,
    );
    assert.ok(q.stats().preempted > 0, 'the replies took booked board slots');
    const slots = calls.map((c) => c.grantedAtMs).sort((a, b) => a - b);
    for (let i = 1; i < slots.length; i++)
      assert.ok(slots[i]! - slots[i - 1]! >= 33.333, `slots ${slots[i - 1]} and ${slots[i]} closer than 1000/30 ms`);
  },
);

void test('bullmq - a negative botBookMs is refused with CP_ERR_CONFIG_INVALID and opens nothing', async () => {
  await assert.rejects(
    BullmqSendQueue.open<TestPayload>({ redisUrl: REDIS_URL, prefix: uniquePrefix(), limits: TELEGRAM_LIMITS, botBookMs: -1 }),
    (err: unknown) => err instanceof Error && /botBookMs must be an integer >= 0/.test(err.message),
  );
});

void test(
  'bullmq - calls whose booked slots passed during a stall are held to the bot rate in any second, and counted',
  { timeout: 30_000 },
  async (t) => {
    const prefix = uniquePrefix();
    const clock = scaledClock(1);
    const limits = { ...TELEGRAM_LIMITS, botRatePerS: 5 };
    const q = await BullmqSendQueue.open<TestPayload>({ redisUrl: REDIS_URL, prefix, limits, clock, concurrency: 8, botBookMs: 2_000 });
    closeAfter(t, prefix, q);
    const starts: number[] = [];
    let stalled = false;
    q.start((job) => {
      starts.push(clock.now());
      if (!stalled) {
        // The first call: every other worker has booked a slot 200 ms apart; a 1.5 s stall lets several slots pass.
        stalled = true;
        setTimeout(() => {
          const until = performance.now() + 1_500;
          while (performance.now() < until);
        }, 50);
      }
      return Promise.resolve({ ok: true, value: job.id });
    });
    const results = [];
    for (let n = 1; n <= 12; n++) {
      const e = await q.enqueue({ chatId: 7_000 + n, lane: 'tx', payload: { n } });
      if (e.status === 'queued') results.push(e.result);
    }
    const settled = await Promise.all(results);
    assert.equal(settled.filter((s) => s.status === 'sent').length, 12);
    const st = q.stats();
    assert.ok(st.windowWaits.calls > 0 && st.windowWaits.waitMs > 0, `window waits counted: ${JSON.stringify(st.windowWaits)}`);
    starts.sort((a, b) => a - b);
    for (let i = 5; i < starts.length; i++) assert.ok(starts[i]! - starts[i - 5]! >= 990, `6 calls within 1 s at ${starts[i - 5]}`);
  },
);

void test('botRetryMs: beyond the booking bound the worker comes back when the slot is within it; other refusals wait it all', () => {
  assert.equal(botRetryMs({ limit: 'bot', botWaitMs: 1_300 }, 1_000), 300);
  assert.equal(botRetryMs({ limit: 'bot', botWaitMs: 1_000.2 }, 1_000), 1, 'at least 1 ms');
  assert.equal(botRetryMs({ limit: 'bot', botWaitMs: 1_300 }, 0), 1_300, 'no booking: the whole wait');
  assert.equal(botRetryMs({ limit: 'pause', botWaitMs: 1_300 }, 1_000), 1_300, 'a pause is waited out');
  assert.equal(botRetryMs({ limit: 'pause', botWaitMs: 0 }, 1_000), 1);
});

void test(
  'bullmq - a board take refused beyond the booking bound takes again once the slot is within it, not after the whole wait',
  { timeout: 20_000 },
  async (t) => {
    const prefix = uniquePrefix();
    const clock = scaledClock(1);
    const real = await RedisBucket.open({ redisUrl: REDIS_URL, prefix, limits: TELEGRAM_LIMITS, clock });
    const takes: number[] = [];
    // The bot's next slot 1,300 ms away, booking bound 1,000 ms: the first take is refused by the bot rate alone.
    const bucket: SendBucket = {
      kind: real.kind,
      take: async (chatKey, isGroup, maxWaitMs, lane) => {
        takes.push(clock.now());
        if (takes.length === 1) return { granted: false, nowMs: clock.now(), retryAfterMs: 1_300, botWaitMs: 1_300, limit: 'bot' };
        return real.take(chatKey, isGroup, maxWaitMs, lane);
      },
      depart: (...a) => real.depart(...a),
      pause: (ms) => real.pause(ms),
      pausedForMs: () => real.pausedForMs(),
      close: () => real.close(),
    };
    const q = await BullmqSendQueue.open<TestPayload>({
      redisUrl: REDIS_URL,
      prefix,
      limits: TELEGRAM_LIMITS,
      clock,
      bucket,
      botBookMs: 1_000,
    });
    closeAfter(t, prefix, q);
    t.after(() => real.close());
    q.start(() => Promise.resolve({ ok: true }));
    const r = await q.enqueue({ chatId: -77, lane: 'board', payload: { n: 1 } });
    assert.equal(r.status, 'queued');
    if (r.status !== 'queued') return;
    assert.deepEqual(await r.result, { status: 'sent' });
    assert.equal(takes.length, 2, 'refused once, then granted');
    const gap = takes[1]! - takes[0]!;
    // botRetryMs: 1,300 − 1,000 = 300 ms (plus the fetch); waiting the whole 1,300 ms would leave the booked slots empty.
    assert.ok(gap >= 290 && gap < 1_000, `took again ${gap} ms after the refusal`);
    assert.equal(q.stats().bucketWaits.bot, 1, 'the refusal is counted');
  },
);
