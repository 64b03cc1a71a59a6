import { LRUCache } from 'lru-cache';
import { checkBucketParams, fullBucket, takeToken, type BucketState } from './token-bucket.ts';
import { lruCountBound } from './lru-bound.ts';

/**
 * Default bound on remembered keys. A bucket costs about 215 bytes of heap
 * (key string, state object, LRU links; measured on Node 20 with IPv6 /64
 * keys), so 100_000 keys stay near 22 MB per limiter: room for every active
 * address of a busy gateway, small enough that a key-churn flood cannot
 * exhaust memory.
 */
export const DEFAULT_MAX_KEYS = 100_000;

/** Options of {@link KeyedLimiter}. */
export interface KeyedLimiterOptions {
  /** Refill rate, tokens per second (> 0). */
  ratePerS: number;
  /** Bucket capacity, tokens (>= 1); a new key starts full. */
  burst: number;
  /**
   * Most keys kept; the least recently used bucket is evicted beyond it (and
   * that key starts full again when it comes back).
   * @defaultValue {@link DEFAULT_MAX_KEYS}
   */
  maxKeys?: number;
  /**
   * Clock used when `take` gets no `nowMs`, ms.
   * @defaultValue `performance.now` (monotonic)
   */
  nowMs?: () => number;
}

/** Result of {@link KeyedLimiter.take}. */
export interface LimitDecision {
  allowed: boolean;
  /** 0 when allowed; else ms (integer ≥ 1) until the same take would succeed. */
  retryAfterMs: number;
}

/**
 * One token bucket per key (viewer id, client address…) in a bounded LRU
 * memory store. Eviction forgets a bucket, which errs on the side of allowing:
 * watch {@link evictions} — if it grows, `maxKeys` is too small for the
 * traffic (or someone is cycling keys).
 */
export class KeyedLimiter {
  readonly ratePerS: number;
  readonly burst: number;
  readonly maxKeys: number;
  private readonly clock: () => number;
  private readonly buckets: LRUCache<string, BucketState>;
  private evicted = 0;

  /** @throws RangeError on a bad rate, burst (see `checkBucketParams`) or a `maxKeys` that is not an integer >= 1. */
  constructor(opts: KeyedLimiterOptions) {
    checkBucketParams(opts.ratePerS, opts.burst);
    const maxKeys = opts.maxKeys ?? DEFAULT_MAX_KEYS;
    if (!(Number.isInteger(maxKeys) && maxKeys >= 1)) throw new RangeError(`maxKeys must be an integer >= 1, got ${maxKeys}`);
    this.ratePerS = opts.ratePerS;
    this.burst = opts.burst;
    this.maxKeys = maxKeys;
    this.clock = opts.nowMs ?? (() => performance.now());
    this.buckets = new LRUCache<string, BucketState>({
      ...lruCountBound(maxKeys),
      dispose: (_value, _key, reason) => {
        if (reason === 'evict') this.evicted++;
      },
    });
  }

  /**
   * Takes `cost` tokens from `key`'s bucket (a new key starts with `burst`).
   * @param nowMs ms on the same clock as every other call; default the `nowMs` option
   * @param cost tokens, 0..burst (default 1)
   * @throws RangeError on a cost outside 0..burst or a non-finite `nowMs`.
   */
  take(key: string, nowMs: number = this.clock(), cost = 1): LimitDecision {
    const current = this.buckets.get(key);
    const r = takeToken(current ?? fullBucket(this.burst, nowMs), nowMs, this.ratePerS, this.burst, cost);
    if (current) {
      current.tokens = r.state.tokens;
      current.updatedMs = r.state.updatedMs;
    } else {
      this.buckets.set(key, r.state);
    }
    return { allowed: r.allowed, retryAfterMs: r.retryAfterMs };
  }

  /** Forgets `key` (its next take starts with a full bucket). */
  delete(key: string): void {
    this.buckets.delete(key);
  }

  /** Keys currently remembered (≤ maxKeys). */
  get size(): number {
    return this.buckets.size;
  }

  /** Buckets dropped because the store was full, since construction. */
  get evictions(): number {
    return this.evicted;
  }
}
