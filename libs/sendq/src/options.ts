import type { Logger, Metrics, Refusals } from '@crowdplay/telemetry';
import { CrowdplayError } from '@crowdplay/protocol';
import type { Clock } from './clock.ts';
import type { JobResult, SendJob, SendLimits } from './types.ts';

/** Calls of `send` in flight per process. Telegram answers in ~50–300 ms, so 8 covers 30/s with room. */
export const DEFAULT_CONCURRENCY = 8;
/** Queued jobs (both lanes) before enqueue answers `full`: a bound, not a target (supersession keeps boards at ~1 per chat). */
export const DEFAULT_MAX_QUEUED = 100_000;
/** `{retry}` outcomes allowed per job before it fails. */
export const DEFAULT_MAX_RETRIES = 3;
/** First retry backoff, ms; doubles per retry. */
export const DEFAULT_RETRY_BASE_MS = 1_000;
/** Longest retry backoff, ms. */
export const DEFAULT_RETRY_MAX_MS = 30_000;
/**
 * Longest wait for a booked slot of the bot rate, ms (gcra.ts "Booking"): six to seven bot intervals (40 ms
 * at 25/s, 36 ms at 28/s), so most of the default 8 workers can each hold a coming slot instead of being refused
 * together. Measured: without booking the BullMQ sender made ~17 sends/s of 28 allowed (docs/benchmarks.md).
 */
export const DEFAULT_BOT_BOOK_MS = 250;
/** A bot-wide pause longer than this is logged at error, ms (TELEGRAM_PAUSE_ERROR_AFTER_S). */
export const DEFAULT_PAUSE_ERROR_AFTER_MS = 300_000;
/** `{requeue}` outcomes allowed per job before it fails (a repost after "message to edit not found" needs one). */
export const DEFAULT_MAX_REQUEUES = 3;

/** Options shared by both queue adapters. */
export interface SendQueueOptions {
  /** The three rates (from `config.telegram`). */
  limits: SendLimits;
  /** Calls of `send` in flight in this process (bucket takes included). @defaultValue {@link DEFAULT_CONCURRENCY} */
  concurrency?: number;
  /** Queued jobs before enqueue is refused `full` (BullMQ: checked against a count at most 1 s old). @defaultValue {@link DEFAULT_MAX_QUEUED} */
  maxQueued?: number;
  /** @defaultValue {@link DEFAULT_MAX_RETRIES} */
  maxRetries?: number;
  /** Backoff before retry n (1-based): min(retryMaxMs, retryBaseMs × 2^(n−1)), ms. @defaultValue {@link DEFAULT_RETRY_BASE_MS} */
  retryBaseMs?: number;
  /** @defaultValue {@link DEFAULT_RETRY_MAX_MS} */
  retryMaxMs?: number;
  /** @defaultValue {@link DEFAULT_MAX_REQUEUES} */
  maxRequeues?: number;
  /** Longest wait for a booked bot slot, ms; 0: a worker refused by the bot rate gives its job back (TELEGRAM_SENDQ_BOOK_MS). @defaultValue {@link DEFAULT_BOT_BOOK_MS} */
  botBookMs?: number;
  /** Time source of the queue (and of the in-process bucket it creates). @defaultValue `systemClock` */
  clock?: Clock;
  /** Metrics sink (`crowdplay_sendq_*`). Counters are also kept in `stats()`. */
  metrics?: Metrics;
  /** Refusal reporting (area `sendq`). */
  refusals?: Refusals;
  /** Where the queue logs pauses (info; error past `pauseErrorAfterMs`) and dropped jobs (warn). @defaultValue no logging */
  logger?: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** A bot-wide pause longer than this is logged at error, ms (TELEGRAM_PAUSE_ERROR_AFTER_S × 1000). @defaultValue {@link DEFAULT_PAUSE_ERROR_AFTER_MS} */
  pauseErrorAfterMs?: number;
  /** Called in the process that decided a job's end, for every job (after its `result` promise settles). Must not throw. */
  onSettled?: (job: SendJob<unknown>, result: JobResult) => void;
  /** Unexpected errors (a throwing `send`, Redis errors in workers). @defaultValue console.error */
  onError?: (err: unknown, context: string) => void;
}

/** `SendQueueOptions` with defaults applied. */
export interface ResolvedQueueOptions {
  limits: SendLimits;
  concurrency: number;
  maxQueued: number;
  maxRetries: number;
  retryBaseMs: number;
  retryMaxMs: number;
  maxRequeues: number;
  botBookMs: number;
  pauseErrorAfterMs: number;
}

function positiveInt(name: string, v: number, min: number): string | undefined {
  return Number.isInteger(v) && v >= min ? undefined : `${name} must be an integer >= ${min}, got ${v}`;
}

/** `limits.groupBurst` (unset: 1) must be an integer from 1 to `limits.groupRatePerMin`. */
function groupBurst(limits: SendLimits): string | undefined {
  const b = limits.groupBurst;
  if (b === undefined) return undefined;
  if (Number.isInteger(b) && b >= 1 && b <= limits.groupRatePerMin) return undefined;
  return `limits.groupBurst must be an integer from 1 to limits.groupRatePerMin (${limits.groupRatePerMin}), got ${b}`;
}

/**
 * Checks the limits.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID naming each bad field.
 */
export function checkLimits(limits: SendLimits): void {
  const bad = [
    positiveInt('limits.botRatePerS', limits.botRatePerS, 1),
    positiveInt('limits.groupRatePerMin', limits.groupRatePerMin, 1),
    groupBurst(limits),
    positiveInt('limits.chatRatePerS', limits.chatRatePerS, 1),
  ].filter((x): x is string => x !== undefined);
  if (bad.length > 0) throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [bad.join('\n')]);
}

/**
 * Applies defaults and validates.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID naming each bad field.
 */
export function resolveQueueOptions(o: SendQueueOptions): ResolvedQueueOptions {
  checkLimits(o.limits);
  const r: ResolvedQueueOptions = {
    limits: { ...o.limits },
    concurrency: o.concurrency ?? DEFAULT_CONCURRENCY,
    maxQueued: o.maxQueued ?? DEFAULT_MAX_QUEUED,
    maxRetries: o.maxRetries ?? DEFAULT_MAX_RETRIES,
    retryBaseMs: o.retryBaseMs ?? DEFAULT_RETRY_BASE_MS,
    retryMaxMs: o.retryMaxMs ?? DEFAULT_RETRY_MAX_MS,
    maxRequeues: o.maxRequeues ?? DEFAULT_MAX_REQUEUES,
    botBookMs: o.botBookMs ?? DEFAULT_BOT_BOOK_MS,
    pauseErrorAfterMs: o.pauseErrorAfterMs ?? DEFAULT_PAUSE_ERROR_AFTER_MS,
  };
  const bad = [
    positiveInt('concurrency', r.concurrency, 1),
    positiveInt('maxQueued', r.maxQueued, 1),
    positiveInt('maxRetries', r.maxRetries, 0),
    positiveInt('retryBaseMs', r.retryBaseMs, 0),
    positiveInt('retryMaxMs', r.retryMaxMs, 0),
    positiveInt('maxRequeues', r.maxRequeues, 0),
    positiveInt('botBookMs', r.botBookMs, 0),
    positiveInt('pauseErrorAfterMs', r.pauseErrorAfterMs, 0),
  ].filter((x): x is string => x !== undefined);
  if (bad.length > 0) throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [bad.join('\n')]);
  return r;
}

/**
 * Checks a take's `maxWaitMs`.
 * @throws RangeError when it is negative or not finite
 */
export function checkMaxWait(maxWaitMs: number): void {
  if (!(Number.isFinite(maxWaitMs) && maxWaitMs >= 0)) throw new RangeError(`maxWaitMs must be a finite number >= 0, got ${maxWaitMs}`);
}

/** Backoff before retry `n` (1-based), ms: min(retryMaxMs, retryBaseMs × 2^(n−1)). */
export function retryBackoffMs(o: Pick<ResolvedQueueOptions, 'retryBaseMs' | 'retryMaxMs'>, n: number): number {
  return Math.min(o.retryMaxMs, o.retryBaseMs * 2 ** Math.max(0, n - 1));
}

/**
 * A pause read again (the store's remaining time is rounded up to whole ms) ends up to this much later than the one
 * already known, ms: the same pause, not logged again nor restarting slow start.
 */
export const SAME_PAUSE_MS = 2;

/** Where a pause came from: a 429 this process read, `pause()`, or the bucket's store (another process's 429). */
export type PauseSource = '429' | 'pause()' | 'store';

/**
 * Logs a bot-wide pause as it starts: info with its length and end, error when
 * it is longer than `pauseErrorAfterMs` (an operator must know: every chat
 * stands still). Called only when the pause moves this process's end later.
 */
export function logPause(
  logger: SendQueueOptions['logger'],
  o: Pick<ResolvedQueueOptions, 'pauseErrorAfterMs'>,
  pause: { forMs: number; endMs: number; source: PauseSource },
): void {
  if (logger === undefined) return;
  const fields = { pauseMs: Math.round(pause.forMs), pauseEnd: new Date(pause.endMs).toISOString(), source: pause.source };
  if (pause.forMs > o.pauseErrorAfterMs)
    logger.error(
      { ...fields, errorAfterMs: o.pauseErrorAfterMs },
      'send queue paused (bot-wide) for longer than TELEGRAM_PAUSE_ERROR_AFTER_S',
    );
  else logger.info(fields, 'send queue paused (bot-wide)');
}

/** The slow-start window after a success: doubled, at most `concurrency`. */
export function widened(window: number, concurrency: number): number {
  return Math.min(concurrency, window * 2);
}
