/**
 * Test harnesses: a queue + its clock + a way to run time forward until a
 * condition holds. In process: a ManualClock advanced timer by timer (no real
 * waiting). BullMQ: a scaledClock (real timers N× faster; BullMQ's delayed
 * jobs use Date.now) polled until the condition holds.
 */
import { Redis } from 'ioredis';
import {
  BullmqSendQueue,
  ManualClock,
  MemorySendQueue,
  RedisBucket,
  scaledClock,
  sendqKeys,
  type Clock,
  type SendLimits,
  type SendQueue,
  type SendQueueOptions,
} from '../src/index.ts';

/** Telegram's documented limits (the defaults of config.telegram). */
export const TELEGRAM_LIMITS: SendLimits = { botRatePerS: 30, groupRatePerMin: 20, chatRatePerS: 1 };

export interface TestPayload {
  n: number;
  tag?: string;
}

export interface HarnessOptions {
  limits?: SendLimits;
  concurrency?: number;
  maxRetries?: number;
  retryBaseMs?: number;
  retryMaxMs?: number;
  maxRequeues?: number;
  maxQueued?: number;
  onError?: (err: unknown, context: string) => void;
  logger?: SendQueueOptions['logger'];
}

export interface Harness {
  readonly queue: SendQueue<TestPayload>;
  readonly clock: Clock;
  /**
   * Lets time pass (clock time) until `pred()` holds.
   * @throws Error naming `what` when it does not hold within `maxClockMs` of clock time.
   */
  run(pred: () => boolean, maxClockMs: number, what: () => string): Promise<void>;
  /** Lets pending async work settle without moving the clock (in process) / waits `realMs` (BullMQ). */
  settle(): Promise<void>;
  close(): Promise<void>;
}

export type HarnessFactory = (opts?: HarnessOptions) => Promise<Harness>;

const flush = async (): Promise<void> => {
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
};

/** In-process queue on a ManualClock. */
export const memoryHarness: HarnessFactory = (opts = {}) => {
  const clock = new ManualClock();
  const queue = new MemorySendQueue<TestPayload>({ ...opts, limits: opts.limits ?? TELEGRAM_LIMITS, clock });
  return Promise.resolve({
    queue,
    clock,
    async run(pred, maxClockMs, what) {
      const end = clock.now() + maxClockMs;
      for (;;) {
        await flush();
        if (pred()) return;
        const next = clock.nextTimerAt();
        if (next === undefined || next > end)
          throw new Error(`not reached within ${maxClockMs} clock ms (at +${clock.now() - (end - maxClockMs)}): ${what()}`);
        clock.set(next);
      }
    },
    settle: flush,
    close: () => queue.close(1_000),
  });
};

export const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';

/** Deletes every key under `prefix` (SCAN, not KEYS). */
export async function deleteKeys(redis: Redis, prefix: string): Promise<number> {
  let n = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${sendqKeys(prefix).base}*`, 'COUNT', 500);
    cursor = next;
    if (keys.length > 0) n += await redis.del(...keys);
  } while (cursor !== '0');
  return n;
}

let prefixSeq = 0;
/** A unique prefix per harness (the suite's keys never meet another run's). */
export function uniquePrefix(): string {
  return `t_sendq_${process.pid}_${Date.now().toString(36)}_${prefixSeq++}`;
}

/** BullMQ queue + Redis Lua bucket on a clock running `speed`× real time, under a unique prefix deleted on close. */
export function bullmqHarness(speed: number): HarnessFactory {
  return async (opts = {}) => {
    const prefix = uniquePrefix();
    const clock = scaledClock(speed);
    const queue = await BullmqSendQueue.open<TestPayload>({
      ...opts,
      limits: opts.limits ?? TELEGRAM_LIMITS,
      clock,
      redisUrl: REDIS_URL,
      prefix,
    });
    return {
      queue,
      clock,
      async run(pred, maxClockMs, what) {
        const deadline = Date.now() + maxClockMs / speed + 3_000;
        for (;;) {
          if (pred()) return;
          if (Date.now() > deadline) throw new Error(`not reached within ${maxClockMs} clock ms: ${what()}`);
          await new Promise((r) => setTimeout(r, 5));
        }
      },
      async settle() {
        await new Promise((r) => setTimeout(r, 30));
      },
      async close() {
        await queue.close(2_000);
        const redis = new Redis(REDIS_URL);
        try {
          await deleteKeys(redis, prefix);
        } finally {
          await redis.quit();
        }
      },
    };
  };
}

/** Opens a RedisBucket on its own connection, with a clock passed to the script. */
export async function openRedisBucket(limits: SendLimits, clock: Clock | undefined, prefix: string): Promise<RedisBucket> {
  return RedisBucket.open({ redisUrl: REDIS_URL, prefix, limits, clock });
}
