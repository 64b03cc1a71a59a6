/**
 * Token bucket arithmetic, pure (no clock, no I/O): the caller passes the
 * time and stores the returned state.
 *
 * Formula (the classic single token bucket, as in RFC 2697 §3 "committed"
 * bucket, refilled continuously instead of per byte time): with
 * `elapsedMs = max(0, nowMs - updatedMs)`,
 *
 *     tokens' = min(burst, tokens + elapsedMs * ratePerS / 1000)
 *     allowed = tokens' >= cost
 *     tokens'' = allowed ? tokens' - cost : tokens'
 *     retryAfterMs = allowed ? 0 : ceil((cost - tokens') * 1000 / ratePerS)
 *
 * So over any window of `t` seconds at most `burst + ratePerS * t` units are
 * allowed. A refused take consumes nothing. When the clock goes backwards
 * (`nowMs < updatedMs`) no time has elapsed and `updatedMs` is kept, so time
 * is never counted twice once the clock catches up.
 */

/** A bucket: `tokens` (units, 0..burst, fractional) as of `updatedMs` (ms, caller's clock). */
export interface BucketState {
  tokens: number;
  updatedMs: number;
}

/** Result of {@link takeToken}. */
export interface TakeResult {
  /** True when `cost` tokens were taken. */
  allowed: boolean;
  /** The state to store (refilled, and debited when allowed). */
  state: BucketState;
  /** 0 when allowed; else the least wait, ms (integer ≥ 1), after which the same take succeeds. */
  retryAfterMs: number;
}

/** A full bucket at `nowMs`: the state of a key seen for the first time. */
export function fullBucket(burst: number, nowMs: number): BucketState {
  return { tokens: burst, updatedMs: nowMs };
}

/**
 * @throws RangeError unless `ratePerS` > 0, `burst` >= 1, 0 <= `cost` <= `burst`
 *   (all finite): a cost above the burst could never be allowed.
 */
export function checkBucketParams(ratePerS: number, burst: number, cost = 1): void {
  if (!(Number.isFinite(ratePerS) && ratePerS > 0)) throw new RangeError(`ratePerS must be a finite number > 0, got ${ratePerS}`);
  if (!(Number.isFinite(burst) && burst >= 1)) throw new RangeError(`burst must be a finite number >= 1, got ${burst}`);
  if (!(Number.isFinite(cost) && cost >= 0 && cost <= burst)) throw new RangeError(`cost must be within 0..burst (${burst}), got ${cost}`);
}

/**
 * Takes `cost` tokens from `state` at `nowMs` (see the module doc for the
 * formula). Does not mutate `state`.
 * @param nowMs caller's clock, ms (monotonic preferred; going backwards is tolerated)
 * @param ratePerS refill rate, tokens per second
 * @param burst bucket capacity, tokens
 * @param cost tokens this take needs (default 1)
 * @throws RangeError on invalid parameters (see {@link checkBucketParams}) or a non-finite `nowMs`.
 */
export function takeToken(state: Readonly<BucketState>, nowMs: number, ratePerS: number, burst: number, cost = 1): TakeResult {
  checkBucketParams(ratePerS, burst, cost);
  if (!Number.isFinite(nowMs)) throw new RangeError(`nowMs must be finite, got ${nowMs}`);
  const elapsedMs = nowMs > state.updatedMs ? nowMs - state.updatedMs : 0;
  const updatedMs = elapsedMs > 0 ? nowMs : state.updatedMs;
  const tokens = Math.min(burst, Math.max(0, state.tokens) + (elapsedMs * ratePerS) / 1000);
  if (tokens >= cost) return { allowed: true, state: { tokens: tokens - cost, updatedMs }, retryAfterMs: 0 };
  let retryAfterMs = Math.max(1, Math.ceil(((cost - tokens) * 1000) / ratePerS));
  // Guard against float rounding: the promised wait must really suffice under the refill formula above.
  while (tokens + (retryAfterMs * ratePerS) / 1000 < cost) retryAfterMs++;
  // …and must be the shortest such wait (ceil of a float quotient can overshoot by 1 ms).
  while (retryAfterMs > 1 && tokens + ((retryAfterMs - 1) * ratePerS) / 1000 >= cost) retryAfterMs--;
  return { allowed: false, state: { tokens, updatedMs }, retryAfterMs };
}
