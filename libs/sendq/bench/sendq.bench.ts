/**
 * `npm run bench -- sendq [--json FILE]`: what the send queue costs and how
 * much of Telegram's bot-wide allowance it uses.
 *
 * - take: latency of one bucket take (MemoryBucket; RedisBucket, one Lua
 *   EVALSHA on Redis TIME), over distinct chats with limits that never refuse.
 * - throughput: end-to-end jobs/s with a no-op `send`, limits out of the way
 *   (bot 100,000/s), 2,000 jobs to 2,000 chats, concurrency 8.
 * - utilisation: Telegram's limits (30/s), a backlog of 150 private chats in
 *   real time, both adapters: (calls − 1) ÷ (30/s × time from first to last call)
 *   (in process: grants, which are its calls).
 * - loaded: the BullMQ adapter on a 60 %-busy event loop with 30 ms calls,
 *   300 chats, without booking the bot's next slot and with (TELEGRAM_SENDQ_BOOK_MS).
 * - lanes: the BullMQ adapter with the board lane saturated (600 board jobs
 *   to distinct chats, 30 ms calls, concurrency 8) while 40 replies arrive one
 *   every 100 ms: each reply's wait from enqueue to its call (p50 / p99 / max),
 *   the bucket's utilisation over the replies' span ((calls − 1) ÷ (30/s × span)),
 *   the boards' share of it and the board slots replies took (preempted).
 *
 * Uses the Redis of `serviceUrls()` (REDIS_URL, default redis://127.0.0.1:6379) under a unique prefix,
 * deleted afterwards.
 */
import { writeFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { serviceUrls } from '@crowdplay/testing';
import {
  BullmqSendQueue,
  DEFAULT_BOT_BOOK_MS,
  MemoryBucket,
  MemorySendQueue,
  RedisBucket,
  sendqKeys,
  type SendLimits,
  type SendQueue,
} from '../src/index.ts';

let REDIS_URL = '';
const FAST: SendLimits = { botRatePerS: 100_000, groupRatePerMin: 6_000_000, chatRatePerS: 100_000 };
const TELEGRAM: SendLimits = { botRatePerS: 30, groupRatePerMin: 20, chatRatePerS: 1 };

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
}

async function takeLatency(): Promise<{ memoryUs: number; redisP50Us: number; redisP99Us: number }> {
  const mem = new MemoryBucket({ limits: FAST });
  const n = 200_000;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) mem.takeNow(String(i), false);
  const memoryUs = Number(process.hrtime.bigint() - t0) / 1e3 / n;
  const prefix = `bench_sendq_${Date.now().toString(36)}`;
  const bucket = await RedisBucket.open({ redisUrl: REDIS_URL, prefix, limits: FAST });
  const lat: number[] = [];
  for (let i = 0; i < 5_000; i++) {
    const s = process.hrtime.bigint();
    await bucket.take(String(i), i % 2 === 0);
    lat.push(Number(process.hrtime.bigint() - s) / 1e3);
  }
  await bucket.close();
  await cleanup(prefix);
  return { memoryUs, redisP50Us: pct(lat, 50), redisP99Us: pct(lat, 99) };
}

async function cleanup(prefix: string): Promise<void> {
  const r = new Redis(REDIS_URL);
  let cursor = '0';
  do {
    const [next, keys] = await r.scan(cursor, 'MATCH', `${sendqKeys(prefix).base}*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await r.del(...keys);
  } while (cursor !== '0');
  await r.quit();
}

/** Most of `times` (ms) in any window of `windowMs` (Telegram's strict reading: the stub's sliding window). */
function maxIn(times: number[], windowMs: number): number {
  const t = [...times].sort((a, b) => a - b);
  let most = 0;
  for (let i = 0, j = 0; i < t.length; i++) {
    while (t[i]! - t[j]! >= windowMs) j++;
    most = Math.max(most, i - j + 1);
  }
  return most;
}

/**
 * Runs `jobs` jobs to distinct chats through `q`; returns jobs/s, the grant times and the times `send` was called.
 * @param sendMs how long each call takes (a timer: Telegram answering), ms
 */
async function drive(q: SendQueue<number>, jobs: number, sendMs = 0): Promise<{ perS: number; grants: number[]; calls: number[] }> {
  const grants: number[] = [];
  const calls: number[] = [];
  let done = 0;
  let finish!: () => void;
  const all = new Promise<void>((r) => (finish = r));
  q.start(async (job) => {
    grants.push(job.grantedAtMs);
    calls.push(performance.timeOrigin + performance.now());
    if (sendMs > 0) await new Promise((r) => setTimeout(r, sendMs));
    if (++done === jobs) finish();
    return { ok: true };
  });
  const t0 = performance.now();
  for (let i = 1; i <= jobs; i++) await q.enqueue({ chatId: i, lane: 'tx', payload: i });
  await all;
  return { perS: (jobs / (performance.now() - t0)) * 1000, grants, calls };
}

/** The lanes part (module doc): replies under a saturated board lane on BullMQ. */
async function lanes(): Promise<{
  replies: number;
  boards: number;
  sendMs: number;
  replyWaitMs: { p50: number; p99: number; max: number };
  utilisation: number;
  boardShare: number;
  preempted: number;
}> {
  const prefix = `bench_sendq_${Date.now().toString(36)}_lanes`;
  const q = await BullmqSendQueue.open<number>({ redisUrl: REDIS_URL, prefix, limits: TELEGRAM, concurrency: 8 });
  const sendMs = 30;
  const calls: Array<{ lane: string; n: number; atMs: number }> = [];
  q.start(async (job) => {
    calls.push({ lane: job.lane, n: job.payload, atMs: performance.timeOrigin + performance.now() });
    await new Promise((r) => setTimeout(r, sendMs));
    return { ok: true };
  });
  const boards = 600;
  for (let i = 1; i <= boards; i++) await q.enqueue({ chatId: i, lane: 'board', payload: i });
  while (calls.length < 30) await new Promise((r) => setTimeout(r, 10));
  const replies = 40;
  const enqueuedAt = new Map<number, number>();
  const results: Array<Promise<unknown>> = [];
  for (let k = 1; k <= replies; k++) {
    const n = 100_000 + k;
    enqueuedAt.set(n, performance.timeOrigin + performance.now());
    const e = await q.enqueue({ chatId: n, lane: 'tx', payload: n });
    if (e.status === 'queued') results.push(e.result);
    await new Promise((r) => setTimeout(r, 100));
  }
  await Promise.all(results);
  const replyCalls = calls.filter((c) => c.lane === 'tx');
  const waits = replyCalls.map((c) => c.atMs - enqueuedAt.get(c.n)!);
  const from = Math.min(...enqueuedAt.values());
  const to = Math.max(...replyCalls.map((c) => c.atMs));
  const inSpan = calls.filter((c) => c.atMs >= from && c.atMs <= to);
  const preempted = (q.stats() as { preempted?: number }).preempted ?? 0;
  await q.close(2_000);
  await cleanup(prefix);
  return {
    replies,
    boards,
    sendMs,
    replyWaitMs: { p50: Math.round(pct(waits, 50)), p99: Math.round(pct(waits, 99)), max: Math.round(Math.max(...waits)) },
    utilisation: +((inSpan.length - 1) / (((to - from) / 1000) * TELEGRAM.botRatePerS)).toFixed(3),
    boardShare: +(inSpan.filter((c) => c.lane === 'board').length / inSpan.length).toFixed(3),
    preempted,
  };
}

export async function main(args: readonly string[]): Promise<number> {
  const jsonAt = args.indexOf('--json');
  REDIS_URL = (await serviceUrls()).redisUrl;
  const take = await takeLatency();

  const memQ = new MemorySendQueue<number>({ limits: FAST, concurrency: 8 });
  const memTp = await drive(memQ, 2_000);
  await memQ.close();

  let prefix = `bench_sendq_${Date.now().toString(36)}_q`;
  const bq = await BullmqSendQueue.open<number>({ redisUrl: REDIS_URL, prefix, limits: FAST, concurrency: 8 });
  const bullTp = await drive(bq, 2_000);
  await bq.close();
  await cleanup(prefix);

  prefix = `bench_sendq_${Date.now().toString(36)}_u`;
  const uq = await BullmqSendQueue.open<number>({ redisUrl: REDIS_URL, prefix, limits: TELEGRAM, concurrency: 8 });
  const u = await drive(uq, 150);
  await uq.close();
  await cleanup(prefix);
  const ratio = (g: number[]): { spanS: number; ratio: number } => {
    const spanS = (Math.max(...g) - Math.min(...g)) / 1000;
    return { spanS: +spanS.toFixed(2), ratio: +((g.length - 1) / (spanS * TELEGRAM.botRatePerS)).toFixed(3) };
  };
  const mu = new MemorySendQueue<number>({ limits: TELEGRAM, concurrency: 8 });
  const memU = await drive(mu, 150);
  await mu.close();

  // The same backlog on a busy event loop (the product's while players guess: a 6 ms block every 10 ms) with
  // calls taking 30 ms (the stub's answers in the rollover), without booking (TELEGRAM_SENDQ_BOOK_MS=0) and with.
  const busy = setInterval(() => {
    const until = performance.now() + 6;
    while (performance.now() < until);
  }, 10);
  const loaded: Record<string, { spanS: number; ratio: number; botWaits: number; booked: number; maxCallsIn1s: number }> = {};
  try {
    for (const bookMs of [0, DEFAULT_BOT_BOOK_MS]) {
      prefix = `bench_sendq_${Date.now().toString(36)}_l${bookMs}`;
      const lq = await BullmqSendQueue.open<number>({ redisUrl: REDIS_URL, prefix, limits: TELEGRAM, concurrency: 8, botBookMs: bookMs });
      const l = await drive(lq, 300, 30);
      const st = lq.stats();
      await lq.close();
      await cleanup(prefix);
      loaded[`bookMs${bookMs}`] = {
        ...ratio(l.calls),
        botWaits: st.bucketWaits.bot,
        booked: st.booked.takes,
        maxCallsIn1s: maxIn(l.calls, 1_000),
      };
    }
  } finally {
    clearInterval(busy);
  }

  const lanesPart = await lanes();

  const result = {
    lanes: lanesPart,
    take: { memoryUs: +take.memoryUs.toFixed(3), redisP50Us: Math.round(take.redisP50Us), redisP99Us: Math.round(take.redisP99Us) },
    throughputPerS: { memory: Math.round(memTp.perS), bullmq: Math.round(bullTp.perS) },
    utilisation: { jobs: 150, limitPerS: TELEGRAM.botRatePerS, memory: ratio(memU.grants), bullmq: ratio(u.calls) },
    loadedBullmq: { jobs: 300, limitPerS: TELEGRAM.botRatePerS, loopBusy: 0.6, sendMs: 30, ...loaded },
  };
  console.log('sendq bench');
  console.log(
    `  take            memory ${result.take.memoryUs} µs   redis p50 ${result.take.redisP50Us} µs  p99 ${result.take.redisP99Us} µs`,
  );
  console.log(
    `  throughput      memory ${result.throughputPerS.memory} jobs/s   bullmq ${result.throughputPerS.bullmq} jobs/s (no-op send, limits out of the way)`,
  );
  const { memory: um, bullmq: ub } = result.utilisation;
  console.log(
    `  utilisation     memory ${um.ratio} over ${um.spanS} s   bullmq ${ub.ratio} over ${ub.spanS} s (of 30/s, 150-chat backlog)`,
  );
  for (const [k, v] of Object.entries(loaded)) {
    console.log(
      `  loaded bullmq   ${k}: ${v.ratio} over ${v.spanS} s, ${v.botWaits} bot refusals, ${v.booked} booked, at most ${v.maxCallsIn1s} calls in any 1 s (of 30/s, 300-chat backlog, loop 60 % busy, 30 ms calls)`,
    );
  }
  const ln = result.lanes;
  console.log(
    `  lanes bullmq    reply wait p50 ${ln.replyWaitMs.p50} ms  p99 ${ln.replyWaitMs.p99} ms  max ${ln.replyWaitMs.max} ms; utilisation ${ln.utilisation} (boards ${ln.boardShare}), ${ln.preempted} board slots taken by replies (of 30/s, ${ln.boards} boards queued, ${ln.replies} replies 100 ms apart, ${ln.sendMs} ms calls)`,
  );
  if (jsonAt >= 0 && args[jsonAt + 1]) writeFileSync(args[jsonAt + 1]!, JSON.stringify(result, null, 2));
  return 0;
}
