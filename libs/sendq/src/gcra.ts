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
 * advances all of them; a refusal changes nothing.
 *
 * Booking (`maxWaitUs` > 0): when the pause and the chat's own limits allow
 * now and only the bot rate refuses, with a wait of at most `maxWaitUs`, the
 * take is granted for the bot's next slot instead: departure `d = tat(bot)`,
 * then every key advances from `d` as on a grant at `d`, and the caller
 * calls at `d` (it waits `d − now`). Each booking moves `tat(bot)` one `T`
 * further, so bookings queue up one bot interval apart and the spacing rule
 * below still holds for the departures. Without booking, workers that all
 * want the bot's next slot each get refused and come back (in the BullMQ
 * adapter every bounce is a handful of Redis round trips, and on a busy event
 * loop a cycle takes longer than `T`, so the bot falls well short of its
 * rate; docs/benchmarks.md). Consecutive grants on a
 * key are therefore at least `T` apart, so in any half-open window of `W` µs
 * at most `ceil(W / T)` grants happen: 30 per second for the bot (T = 33,334 µs),
 * 20 per minute per group (T = 3,000,000 µs), 1 per second per chat.
 *
 * Lanes (priority at the bucket): a board call that books a slot is recorded
 * (its departure, its chat). A transactional take that only the bot rate
 * refuses takes the earliest board booking still ahead (`boardBookedUs`)
 * instead of waiting behind every booking: it departs at that slot, and the
 * board moves to the bot's next free slot (`rebookUs`, one `T` further, as a
 * booking would), its chat's tats advanced from its new departure. The set
 * of departures is the same plus one at the end, so the spacing rule holds;
 * a reply waits at most one bot interval for boards, however many are booked.
 */
import type { Lane, LimitName, SendLimits } from './types.ts';

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
  /** The earliest board booking departing after now, µs (a transactional take may take its slot); undefined: none. */
  boardBookedUs?: number;
}

/** The decision of {@link decideTake}. */
export type TakeDecision =
  | {
      granted: true;
      botTatUs: number;
      chatTatUs: number;
      groupTatUs: number | undefined;
      /** µs from now to the booked departure (0: go now). */
      waitUs: number;
      /**
       * Set when a transactional take took the slot of the earliest board booking (`boardBookedUs`): that
       * board's new departure, µs (the bot's next free slot; `botTatUs` is already one `T` past it).
       */
      rebookUs?: number;
    }
  | { granted: false; retryUs: number; botWaitUs: number; limit: LimitName };

/**
 * One atomic take at `nowUs` (see the module doc). On a grant, returns the new
 * tats to store and the wait before the call (µs, 0 unless booked); on a
 * refusal, the waits (µs, > 0 for `retryUs`).
 * Ties on the longest wait name the limit in the order pause, bot, group, chat.
 * @param maxWaitUs longest wait for the bot's next slot to book instead of refusing (0: never book)
 * @param lane `tx` may take the slot of the earliest board booking (`s.boardBookedUs`) when only the bot rate refuses
 */
export function decideTake(s: TakeState, nowUs: number, iv: Intervals, maxWaitUs = 0, lane: Lane = 'board'): TakeDecision {
  const pauseW = Math.max(0, s.pausedUntilUs - nowUs);
  const botW = Math.max(0, s.botTatUs - nowUs);
  const groupW = s.groupTatUs === undefined ? 0 : Math.max(0, s.groupTatUs - nowUs);
  const chatW = Math.max(0, s.chatTatUs - nowUs);
  const retryUs = Math.max(pauseW, botW, groupW, chatW);
  if (
    lane === 'tx' &&
    retryUs > 0 &&
    pauseW === 0 &&
    groupW === 0 &&
    chatW === 0 &&
    s.boardBookedUs !== undefined &&
    s.boardBookedUs > nowUs
  ) {
    // Priority at the bucket: the reply departs at the earliest board booking; that board moves to the next free slot.
    const at = s.boardBookedUs;
    const rebookUs = Math.max(s.botTatUs, nowUs);
    return {
      granted: true,
      botTatUs: rebookUs + iv.botUs,
      chatTatUs: Math.max(s.chatTatUs, at) + iv.chatUs,
      groupTatUs: s.groupTatUs === undefined ? undefined : Math.max(s.groupTatUs, at) + iv.groupUs,
      waitUs: at - nowUs,
      rebookUs,
    };
  }
  const booked = retryUs > 0 && pauseW === 0 && groupW === 0 && chatW === 0 && botW <= maxWaitUs;
  if (retryUs > 0 && !booked) {
    const limit: LimitName = retryUs === pauseW ? 'pause' : retryUs === botW ? 'bot' : retryUs === groupW ? 'group' : 'chat';
    return { granted: false, retryUs, botWaitUs: Math.max(pauseW, botW), limit };
  }
  const at = nowUs + botW; // the departure: now, or the bot's next slot when booked
  return {
    granted: true,
    botTatUs: Math.max(s.botTatUs, at) + iv.botUs,
    chatTatUs: Math.max(s.chatTatUs, at) + iv.chatUs,
    groupTatUs: s.groupTatUs === undefined ? undefined : Math.max(s.groupTatUs, at) + iv.groupUs,
    waitUs: botW,
  };
}

/** µs → ms for a wait: rounded up, at least 1 when positive. */
export function waitUsToMs(us: number): number {
  return us <= 0 ? 0 : Math.max(1, Math.ceil(us / 1000));
}
