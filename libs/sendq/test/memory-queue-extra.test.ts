/** In-process-only checks: telemetry wiring, close(), openSendQueue's choice, and the GCRA property. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Metrics, Refusals, type Logger } from '@crowdplay/telemetry';
import { ManualClock, MemoryBucket, MemorySendQueue, openSendQueue, type JobResult, type SendJob } from '../src/index.ts';
import { REDIS_URL, TELEGRAM_LIMITS, deleteKeys, uniquePrefix, type TestPayload } from './harness.ts';
import { Redis } from 'ioredis';

function captureLogger(): { logger: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const logger = { warn: (obj: Record<string, unknown>) => lines.push(obj) } as unknown as Logger;
  return { logger, lines };
}

const flush = async (): Promise<void> => {
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
};

void test('memory - telemetry: sends, 429s, pause ms, depth, superseded, purged and refusals are exported', async (t) => {
  const metrics = new Metrics({ service: 'sendq-test' });
  const { logger, lines } = captureLogger();
  const clock = new ManualClock();
  const settled: Array<[string, JobResult['status']]> = [];
  const q = new MemorySendQueue<TestPayload>({
    limits: TELEGRAM_LIMITS,
    clock,
    metrics,
    refusals: new Refusals(metrics, logger, 60_000, () => clock.now()),
    onSettled: (job: SendJob<unknown>, r) => settled.push([job.id, r.status]),
  });
  t.after(async () => {
    await q.close();
    await metrics.close();
  });
  let first = true;
  q.start((job) => {
    if (job.chatId === 2 && first) {
      first = false;
      return Promise.resolve({ retryAfterS: 2 });
    }
    return Promise.resolve({ ok: true });
  });
  await q.enqueue({ chatId: -1, lane: 'board', key: 'b', payload: { n: 1 } });
  const a = await q.enqueue({ chatId: -1, lane: 'board', key: 'b', payload: { n: 2 } });
  await q.enqueue({ chatId: -1, lane: 'board', key: 'b', payload: { n: 3 } });
  await q.enqueue({ chatId: 2, lane: 'tx', payload: { n: 4 } });
  await q.enqueue({ chatId: 3, lane: 'tx', payload: { n: 5 } });
  await q.enqueue({ chatId: 3, lane: 'tx', payload: { n: 6 } });
  await flush();
  // n1 went out at once; n2 waited behind the chat limit and n3 superseded it; chat 3 waits behind the bot rate.
  assert.equal(await q.deactivate(3), 2);
  assert.equal((await q.enqueue({ chatId: 3, lane: 'tx', payload: { n: 7 } })).status, 'refused');
  assert.equal((await q.enqueue({ chatId: 3, lane: 'tx', payload: { n: 8 } })).status, 'refused');
  for (let i = 0; i < 20 && clock.nextTimerAt() !== undefined; i++) {
    clock.set(clock.nextTimerAt()!);
    await flush();
  }
  const text = await metrics.prometheusText();
  const value = (re: RegExp): number => Number(re.exec(text)?.[1] ?? NaN);
  assert.equal(
    value(/crowdplay_sendq_sends_total\{lane="tx",outcome="ok"[^}]*\} (\d+)/),
    1,
    /crowdplay_sendq_sends_total\{lane="tx",outcome="ok"[^}]*\} (\d+)/.source,
  );
  assert.equal(
    value(/crowdplay_sendq_sends_total\{lane="tx",outcome="retryAfter"[^}]*\} (\d+)/),
    1,
    /crowdplay_sendq_sends_total\{lane="tx",outcome="retryAfter"[^}]*\} (\d+)/.source,
  );
  assert.equal(
    value(/crowdplay_sendq_sends_total\{lane="board",outcome="ok"[^}]*\} (\d+)/),
    2,
    /crowdplay_sendq_sends_total\{lane="board",outcome="ok"[^}]*\} (\d+)/.source,
  );
  assert.equal(value(/crowdplay_sendq_rate_limited_total\{[^}]*\} (\d+)/), 1, /crowdplay_sendq_rate_limited_total\{[^}]*\} (\d+)/.source);
  assert.equal(value(/crowdplay_sendq_pause_ms_total\{[^}]*\} (\d+)/), 2_000, /crowdplay_sendq_pause_ms_total\{[^}]*\} (\d+)/.source);
  assert.equal(
    value(/crowdplay_sendq_superseded_total\{lane="board"[^}]*\} (\d+)/),
    1,
    /crowdplay_sendq_superseded_total\{lane="board"[^}]*\} (\d+)/.source,
  );
  assert.equal(value(/crowdplay_sendq_purged_total\{[^}]*\} (\d+)/), 2, /crowdplay_sendq_purged_total\{[^}]*\} (\d+)/.source);
  assert.equal(
    value(/crowdplay_sendq_refused_total\{reason="deactivated"[^}]*\} (\d+)/),
    2,
    /crowdplay_sendq_refused_total\{reason="deactivated"[^}]*\} (\d+)/.source,
  );
  assert.equal(value(/crowdplay_sendq_depth\{lane="tx"[^}]*\} (\d+)/), 0, /crowdplay_sendq_depth\{lane="tx"[^}]*\} (\d+)/.source);
  assert.equal(
    value(/crowdplay_refusals_total\{area="sendq",reason="CP_ERR_SENDQ_CHAT_DEACTIVATED"[^}]*\} (\d+)/),
    2,
    /crowdplay_refusals_total\{area="sendq",reason="CP_ERR_SENDQ_CHAT_DEACTIVATED"[^}]*\} (\d+)/.source,
  );
  assert.equal(lines.filter((l) => l.area === 'sendq').length, 1, 'logged once per interval');
  assert.ok(value(/crowdplay_sendq_bucket_waits_total\{limit="bot"[^}]*\} (\d+)/) >= 1, 'bot waits counted');
  // Two call starts per lane (tx: the 429 and its retry) within the last 10 s, of the 300 the bot rate allows there.
  assert.equal(value(/crowdplay_sendq_lane_utilisation\{lane="tx"[^}]*\} ([\d.]+)/), 0.007);
  assert.equal(value(/crowdplay_sendq_lane_utilisation\{lane="board"[^}]*\} ([\d.]+)/), 0.007);
  assert.deepEqual(q.stats().laneUtilisation, { tx: 0.007, board: 0.007 });
  clock.advance(10_000);
  assert.deepEqual(q.stats().laneUtilisation, { tx: 0, board: 0 }, 'ten seconds later the window is empty');
  assert.equal(settled.length, 6, JSON.stringify(settled));
  assert.deepEqual(
    settled.find(([, st]) => st === 'superseded'),
    [a.status === 'queued' ? a.id : '', 'superseded'],
  );
});

void test('memory - close: queued jobs resolve failed/closed, a call in flight finishes first', async () => {
  const clock = new ManualClock();
  const q = new MemorySendQueue<TestPayload>({ limits: TELEGRAM_LIMITS, clock });
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  q.start(async () => {
    await gate;
    return { ok: true };
  });
  const a = await q.enqueue({ chatId: 1, lane: 'tx', payload: { n: 1 } });
  const b = await q.enqueue({ chatId: 1, lane: 'tx', payload: { n: 2 } });
  await flush();
  const closing = q.close(5_000);
  release();
  await closing;
  assert.ok(a.status === 'queued' && b.status === 'queued');
  assert.deepEqual(await a.result, { status: 'sent' });
  assert.deepEqual(await b.result, { status: 'failed', reason: 'closed' });
  assert.deepEqual(await q.enqueue({ chatId: 1, lane: 'tx', payload: { n: 3 } }), { status: 'refused', reason: 'closed' });
  await q.close();
});

void test('open - an empty REDIS_URL gives the in-process queue and bucket; a URL gives BullMQ and the Lua bucket', async () => {
  const m = await openSendQueue<TestPayload>({ redisUrl: '', limits: TELEGRAM_LIMITS });
  assert.equal(m.kind, 'memory');
  assert.equal(m.bucket.kind, 'memory');
  await m.close();
  const prefix = uniquePrefix();
  const r = await openSendQueue<TestPayload>({ redisUrl: REDIS_URL, prefix, limits: TELEGRAM_LIMITS });
  assert.equal(r.kind, 'bullmq');
  assert.equal(r.bucket.kind, 'redis');
  await r.close();
  const redis = new Redis(REDIS_URL);
  await deleteKeys(redis, prefix);
  await redis.quit();
});

void test('gcra - property: under any demand, no group exceeds 20 grants per minute, no chat 1 per second, the bot 30 per second', () => {
  fc.assert(
    fc.property(
      fc.array(fc.record({ chat: fc.integer({ min: -3, max: 3 }).filter((c) => c !== 0), stepMs: fc.integer({ min: 0, max: 700 }) }), {
        minLength: 1,
        maxLength: 400,
      }),
      (ops) => {
        const clock = new ManualClock(0);
        const b = new MemoryBucket({ limits: TELEGRAM_LIMITS, clock });
        const grants = new Map<number, number[]>();
        const all: number[] = [];
        for (const op of ops) {
          clock.advance(op.stepMs);
          const r = b.takeNow(String(op.chat), op.chat < 0);
          if (!r.granted) {
            assert.ok(r.retryAfterMs >= 1 && r.botWaitMs <= r.retryAfterMs, 'a refusal names a positive wait');
            continue;
          }
          all.push(r.nowMs);
          grants.set(op.chat, [...(grants.get(op.chat) ?? []), r.nowMs]);
        }
        const within = (g: number[], w: number): number => Math.max(0, ...g.map((x) => g.filter((y) => y >= x && y < x + w).length));
        assert.ok(within(all, 1_000) <= 30, 'bot');
        for (const [chat, g] of grants) {
          assert.ok(within(g, 1_000) <= 1, `chat ${chat}`);
          if (chat < 0) assert.ok(within(g, 60_000) <= 20, `group ${chat}`);
        }
      },
    ),
    { numRuns: 200 },
  );
});

void test('gcra - property: with any group burst, booked slots and slots moved by replies included, no window exceeds a limit', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 20 }),
      fc.array(
        fc.record({
          chat: fc.integer({ min: -3, max: 3 }).filter((c) => c !== 0),
          stepMs: fc.integer({ min: 0, max: 700 }),
          lane: fc.constantFrom('tx' as const, 'board' as const),
          book: fc.boolean(),
        }),
        // Lengths up to the maximum (fast-check's default size keeps arrays short): minutes of demand, not seconds.
        { minLength: 1, maxLength: 400, size: 'max' },
      ),
      (groupBurst, ops) => {
        const clock = new ManualClock(0);
        const b = new MemoryBucket({ limits: { ...TELEGRAM_LIMITS, groupBurst }, clock });
        // Each grant's departure, µs; a booked board's (`id`) is followed until it claims its slot, as a worker does.
        const departures: Array<{ chat: number; atUs: number; id?: string }> = [];
        const claimDue = (): void => {
          for (let moved = true; moved;) {
            moved = false;
            for (const d of departures) {
              if (d.id === undefined || d.atUs > clock.now() * 1000) continue;
              const r = b.departNow(d.id, String(d.chat), d.chat < 0, d.atUs / 1000);
              if (r.movedToMs === null) delete d.id;
              else {
                d.atUs = Math.round(r.movedToMs * 1000);
                moved = true;
              }
            }
          }
        };
        let ids = 0;
        for (const op of ops) {
          clock.advance(op.stepMs);
          claimDue();
          const id = op.lane === 'board' ? `b${++ids}` : undefined;
          const r = b.takeNow(
            String(op.chat),
            op.chat < 0,
            op.book ? 250 : 0,
            id === undefined ? { lane: 'tx' } : { lane: 'board', bookingId: id },
          );
          if (!r.granted) continue;
          departures.push({
            chat: op.chat,
            atUs: Math.round((r.nowMs + r.waitMs) * 1000),
            ...(r.waitMs > 0 && id !== undefined ? { id } : {}),
          });
        }
        clock.advance(10_000);
        claimDue();
        const within = (g: number[], w: number): number => Math.max(0, ...g.map((x) => g.filter((y) => y >= x && y < x + w).length));
        assert.ok(
          within(
            departures.map((d) => d.atUs),
            1_000_000,
          ) <= 30,
          'bot',
        );
        for (const chat of new Set(departures.map((d) => d.chat))) {
          const g = departures.filter((d) => d.chat === chat).map((d) => d.atUs);
          assert.ok(within(g, 1_000_000) <= 1, `chat ${chat}`);
          if (chat < 0) assert.ok(within(g, 60_000_000) <= 20, `group ${chat} with burst ${groupBurst}: ${within(g, 60_000_000)}`);
        }
      },
    ),
    { numRuns: 200 },
  );
});
