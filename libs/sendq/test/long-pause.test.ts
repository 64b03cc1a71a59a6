/**
 * A 429 whose retry_after is longer than a Node timer can wait (2^31 − 1 ms,
 * ~24.8 days): the pause is honoured by chained timers, never by a timer
 * that overflows (fires after 1 ms) and re-arms in a loop.
 */
import { mock, test } from 'node:test';
import assert from 'node:assert/strict';
import { Metrics } from '@crowdplay/telemetry';
import { MemorySendQueue, systemClock, type Clock, type SendQueueOptions } from '../src/index.ts';
import { TELEGRAM_LIMITS, type TestPayload } from './harness.ts';

/** Node's timer limit, ms. */
const TIMER_LIMIT_MS = 2 ** 31 - 1;
const DAY_MS = 86_400_000;
/** 26 days: past the timer limit. */
const LONG_RETRY_AFTER_S = (26 * DAY_MS) / 1000;

const flush = async (): Promise<void> => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
};

interface LogLine {
  level: 'info' | 'warn' | 'error';
  fields: Record<string, unknown>;
  msg: string;
}

function captureLogger(): { logger: NonNullable<SendQueueOptions['logger']>; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const at =
    (level: LogLine['level']) =>
    (fields: Record<string, unknown>, msg: string): void => {
      lines.push({ level, fields, msg });
    };
  return {
    logger: { info: at('info'), warn: at('warn'), error: at('error') } as unknown as NonNullable<SendQueueOptions['logger']>,
    lines,
  };
}

/** Records every setTimeout delay and counts the callbacks that ran, over whatever setTimeout is installed now. */
function spyTimers(): { delays: number[]; fired: () => number; restore: () => void } {
  const inner = globalThis.setTimeout;
  const delays: number[] = [];
  let fired = 0;
  const spy = ((fn: (...a: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    delays.push(ms ?? 0);
    return inner(
      (...a: unknown[]) => {
        fired++;
        fn(...a);
      },
      ms,
      ...args,
    );
  }) as typeof setTimeout;
  globalThis.setTimeout = spy;
  return { delays, fired: () => fired, restore: () => (globalThis.setTimeout = inner) };
}

void test('long pause - a 26-day retry_after on a fake clock: a few chained timers, no overflow, the gauge shows the end', async (t) => {
  const startMs = 1_800_000_000_000;
  mock.timers.enable({ apis: ['setTimeout', 'Date'], now: startMs });
  const timers = spyTimers();
  const metrics = new Metrics({ service: 'sendq-long-pause' });
  const { logger, lines } = captureLogger();
  // A clock on the mocked Date and the system clock's timers (the production code path on mocked timers).
  const clock: Clock = { now: () => Date.now(), after: (ms, fn) => systemClock.after(ms, fn), speed: 1 };
  const q = new MemorySendQueue<TestPayload>({ limits: TELEGRAM_LIMITS, clock, metrics, logger });
  t.after(async () => {
    await q.close(0);
    timers.restore();
    mock.timers.reset();
    await metrics.close();
  });
  const calls: Array<{ chatId: number; atMs: number }> = [];
  let answeredAt = -1;
  q.start((job) => {
    calls.push({ chatId: job.chatId, atMs: Date.now() });
    if (answeredAt < 0) {
      answeredAt = Date.now();
      return Promise.resolve({ retryAfterS: LONG_RETRY_AFTER_S });
    }
    return Promise.resolve({ ok: true });
  });
  const a = await q.enqueue({ chatId: 1, lane: 'tx', payload: { n: 1 } });
  const b = await q.enqueue({ chatId: 2, lane: 'tx', payload: { n: 2 } });
  assert.ok(a.status === 'queued' && b.status === 'queued');
  await flush();
  assert.equal(calls.length, 1, 'the first call answered 429');
  const endMs = answeredAt + LONG_RETRY_AFTER_S * 1000;

  const firedBefore = timers.fired();
  // Walk the fake clock through the whole pause, a day at a time, letting the queue react after each step.
  while (Date.now() < endMs - DAY_MS) {
    mock.timers.tick(DAY_MS);
    await flush();
    assert.equal(calls.length, 1, `no call during the pause (at +${Date.now() - answeredAt} ms)`);
  }
  const firedDuring = timers.fired() - firedBefore;
  assert.ok(firedDuring <= 3, `${firedDuring} timers fired during a 26-day pause (chained within the limit)`);
  assert.ok(
    timers.delays.every((d) => d <= TIMER_LIMIT_MS),
    `a timer beyond the limit: ${timers.delays.filter((d) => d > TIMER_LIMIT_MS).join(', ')}`,
  );
  const text = await metrics.prometheusText();
  const gauge = /^crowdplay_sendq_pause_end_seconds(?:\{[^}]*\})? (\S+)$/m.exec(text);
  assert.ok(gauge, 'crowdplay_sendq_pause_end_seconds is exported');
  assert.equal(Number(gauge[1]), endMs / 1000);
  assert.equal(q.stats().pauseEndMs, endMs);
  const paused = lines.filter((l) => l.msg.startsWith('send queue paused'));
  assert.equal(paused.length, 1, 'the pause is logged once, as it starts');
  assert.equal(paused[0]!.level, 'error', 'a 26-day pause is past TELEGRAM_SENDQ_PAUSE_ERROR_AFTER_S (default 300 s)');
  assert.equal(paused[0]!.fields.pauseMs, LONG_RETRY_AFTER_S * 1000);
  assert.equal(paused[0]!.fields.source, '429');

  // Past the end: both jobs go.
  mock.timers.tick(2 * DAY_MS);
  await flush();
  mock.timers.tick(2_000);
  await flush();
  assert.deepEqual(calls.map((c) => c.chatId).sort(), [1, 1, 2]);
  for (const c of calls.slice(1)) assert.ok(c.atMs >= endMs, `call at ${c.atMs} before the pause's end ${endMs}`);
});

void test('long pause - real timers: no TimeoutOverflowWarning and no timer spinning during a 26-day pause', async (t) => {
  const warnings: string[] = [];
  const onWarning = (w: Error): void => void (w.name === 'TimeoutOverflowWarning' && warnings.push(w.message));
  process.on('warning', onWarning);
  const timers = spyTimers();
  const q = new MemorySendQueue<TestPayload>({ limits: TELEGRAM_LIMITS, clock: systemClock });
  t.after(async () => {
    timers.restore();
    process.off('warning', onWarning);
    await q.close(0);
  });
  let limited = false;
  let calls = 0;
  q.start(() => {
    calls++;
    if (!limited) {
      limited = true;
      return Promise.resolve({ retryAfterS: LONG_RETRY_AFTER_S });
    }
    return Promise.resolve({ ok: true });
  });
  await q.enqueue({ chatId: 1, lane: 'tx', payload: { n: 1 } });
  await q.enqueue({ chatId: 2, lane: 'tx', payload: { n: 2 } });
  const armed = timers.delays.length;
  // Today's bug re-arms every ~1 ms: watch ~150 ms of real time (or until 20 re-arms give it away).
  const until = performance.now() + 150;
  while (performance.now() < until && timers.delays.length - armed < 20) await new Promise((r) => setImmediate(r));
  assert.equal(calls, 1, 'nothing sent during the pause');
  assert.ok(timers.delays.length - armed <= 2, `${timers.delays.length - armed} timers armed during the pause`);
  await flush();
  assert.deepEqual(warnings, [], 'no TimeoutOverflowWarning');
});
