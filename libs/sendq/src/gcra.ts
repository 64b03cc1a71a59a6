/**
 * The bucket's arithmetic, pure (no clock, no I/O). The Redis Lua script
 * (`redis-bucket.ts`) implements exactly the same steps; `MemoryBucket` calls
 * these functions. Times are integer MICROSECONDS so sums of emission
 * intervals never drift (1000/30 ms is not a float-exact number).
 *
 * Each limit is a GCRA ("generic cell rate algorithm", ITU-T I.371; the
 * virtual-scheduling form) with burst 1, which is a token bucket of depth 1
 * refilled every emission interval `T = ceil(1e6 / ratePerUs)`:
 * per key a theoretical arrival time `tat` (µs).
 *
 *     allowed(key)  = tat(key) <= now
 *     wait(key)     = max(0, tat(key) − now)
 *     on grant:       tat(key) := max(tat(key), now) + T(key)   for every key checked
 *
 * `take` checks the pause (`pausedUntil > now` refuses), then the bot, group
 * (if a group) and chat keys; it grants only when every one allows, and then
 * advances all of them; a refusal changes nothing. Consecutive grants on a
 * key are therefore at least `T` apart, so in any half-open window of `W` µs
 * at most `ceil(W / T)` grants happen: 30 per second for the bot (T = 33,334 µs),
 * 20 per minute per group (T = 3,000,000 µs), 1 per second per chat.
 */
import type { LimitName, SendLimits } from './types.ts';

/** Emission intervals, µs (rounded up, so a rate is never exceeded). */
export interface Intervals {
  botUs: number;
  groupUs: number;
  chatUs: number;
}

/** The intervals of `limits`, µs: ceil(1e6 / botRatePerS), ceil(60e6 / groupRatePerMin), ceil(1e6 / chatRatePerS). */
export function intervalsOf(limits: SendLimits): Intervals {
  return {
    botUs: Math.ceil(1e6 / limits.botRatePerS),
    groupUs: Math.ceil(60e6 / limits.groupRatePerMin),
    chatUs: Math.ceil(1e6 / limits.chatRatePerS),
  };
}

/** Stored state read for one take (absent keys are 0: never used / expired). */
export interface TakeState {
  pausedUntilUs: number;
  botTatUs: number;
  chatTatUs: number;
  /** undefined when the chat is not a group. */
  groupTatUs: number | undefined;
}

/** The decision of {@link decideTake}. */
export type TakeDecision =
  | { granted: true; botTatUs: number; chatTatUs: number; groupTatUs: number | undefined }
  | { granted: false; retryUs: number; botWaitUs: number; limit: LimitName };

/**
 * One atomic take at `nowUs` (see the module doc). On a grant, returns the new
 * tats to store; on a refusal, the waits (µs, > 0 for `retryUs`).
 * Ties on the longest wait name the limit in the order pause, bot, group, chat.
 */
export function decideTake(s: TakeState, nowUs: number, iv: Intervals): TakeDecision {
  const pauseW = Math.max(0, s.pausedUntilUs - nowUs);
  const botW = Math.max(0, s.botTatUs - nowUs);
  const groupW = s.groupTatUs === undefined ? 0 : Math.max(0, s.groupTatUs - nowUs);
  const chatW = Math.max(0, s.chatTatUs - nowUs);
  const retryUs = Math.max(pauseW, botW, groupW, chatW);
  if (retryUs > 0) {
    const limit: LimitName = retryUs === pauseW ? 'pause' : retryUs === botW ? 'bot' : retryUs === groupW ? 'group' : 'chat';
    return { granted: false, retryUs, botWaitUs: Math.max(pauseW, botW), limit };
  }
  return {
    granted: true,
    botTatUs: Math.max(s.botTatUs, nowUs) + iv.botUs,
    chatTatUs: Math.max(s.chatTatUs, nowUs) + iv.chatUs,
    groupTatUs: s.groupTatUs === undefined ? undefined : Math.max(s.groupTatUs, nowUs) + iv.groupUs,
  };
}

/** µs → ms for a wait: rounded up, at least 1 when positive. */
export function waitUsToMs(us: number): number {
  return us <= 0 ? 0 : Math.max(1, Math.ceil(us / 1000));
}
