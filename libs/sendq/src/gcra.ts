/**
 * The bucket's arithmetic, pure (no clock, no I/O). The Redis Lua script
 * (`redis-bucket.ts`) implements exactly the same steps; `MemoryBucket` calls
 * these functions. Times are integer MICROSECONDS so sums of emission
 * intervals never drift (1000/30 ms is not a float-exact number).
 *
 * Each limit is a GCRA ("generic cell rate algorithm" of ITU-T I.371, its
 * virtual-scheduling form GCRA(T, τ)) with emission interval `T` and burst
 * tolerance `τ`: per key a theoretical arrival time `tat` (µs).
 *
 *     allowed(key)  = tat(key) − τ(key) <= now
 *     wait(key)     = max(0, tat(key) − τ(key) − now)
 *     on grant:       tat(key) := max(tat(key), now) + T(key)   for every key checked
 *
 * The bot and chat limits have burst 1 (τ = 0: a token bucket of depth 1
 * refilled every `T`): `T_bot = ceil(1e6 / botRatePerS)`, `T_chat =
 * ceil(1e6 / chatRatePerS)`. The group limit has burst `B`
 * (TELEGRAM_GROUP_BURST, 1 ≤ B ≤ R) with R = groupRatePerMin:
 *
 *     T_group = ceil(60e6 / (R − (B − 1)))     τ_group = (B − 1) × T_group
 *
 * so a group that sent nothing for a while may send B calls at once (each
 * still 1 s apart by its chat limit), then one every `T_group`. B = 1 is
 * `T_group = ceil(60e6 / R)`, τ = 0: even spacing, 3,000,000 µs at 20/min.
 *
 * Why no half-open window of W µs holds more than ceil((W + τ) / T) grants of
 * one key: let n grants of the key fall in it, at t_1 ≤ … ≤ t_n, so
 * t_n − t_1 < W. By induction the tat after the k-th is at least t_1 + k × T
 * (`tat := max(tat, t) + T` grows by at least T per grant), and the n-th was
 * allowed: tat_(n−1) − τ ≤ t_n. So t_1 + (n − 1) × T − τ ≤ t_n < t_1 + W,
 * n − 1 < (W + τ) / T, and n ≤ ceil((W + τ) / T): a burst of B, then one per
 * T, is the most a key can get. For the group with W = 60e6 µs:
 * ceil((W + τ) / T) = ceil(W / T) + B − 1, and T ≥ 60e6 / (R − (B − 1)), so
 * ceil(W / T) ≤ R − (B − 1) and at most R grants fall in any 60 s window:
 * Telegram's "no more than 20 messages per minute to the same group" in its
 * strict reading (the Telegram stub's sliding window). The cost of B > 1 is
 * the steady rate: a group sending all the time gets 60e6 / T = R − (B − 1)
 * per minute (19 at R = 20, B = 2). For the bot and the chat (τ = 0) the
 * bound is ceil(W / T): 30 per second for the bot (T = 33,334 µs), 1 per
 * second per chat.
 *
 * `take` checks the pause (`pausedUntil > now` refuses), then the bot, group
 * (if a group) and chat keys; it grants only when every one allows, and then
 * advances all of them; a refusal changes nothing.
 *
 * Booking (`maxWaitUs` > 0): when the pause and the chat's own limits allow
 * now and only the bot rate refuses, with a wait of at most `maxWaitUs`, the
 * take is granted for the bot's next slot instead: departure `d = tat(bot)`,
 * then every key advances from `d` as on a grant at `d`, and the caller
 * calls at `d` (it waits `d − now`). The chat's keys allowed at `now ≤ d`, so
 * they allow at `d` (a key's allowance only grows with time): the booking is
 * a grant at `d` by the rule above. Each booking moves `tat(bot)` one `T`
 * further, so bookings queue up one bot interval apart and the bound above
 * still holds for the departures. Without booking, workers that all
 * want the bot's next slot each get refused and come back (in the BullMQ
 * adapter every bounce is a handful of Redis round trips, and on a busy event
 * loop a cycle takes longer than `T`, so the bot falls well short of its
 * rate; docs/benchmarks.md).
 *
 * Lanes (priority at the bucket): a board call that books a slot is recorded
 * (its departure, its chat). A transactional take that only the bot rate
 * refuses takes the earliest board booking still ahead (`boardBookedUs`)
 * instead of waiting behind every booking: it departs at that slot, and the
 * board moves to the bot's next free slot (`rebookUs`, one `T` further, as a
 * booking would), its chat's tats advanced from its new departure. The set
 * of departures is the same plus one at the end, so the bot's bound holds;
 * a reply waits at most one bot interval for boards, however many are booked.
 * The moved board's keys stay a GCRA sequence with τ: while its booking is
 * ahead no other take of its chat is granted (its chat key, burst 1, waits
 * until a full `T_chat` after the booked departure), so the board's grant is
 * still its chat's latest; the key had become `max(tat₀, d) + T` at the
 * booking, and raising it to at least `d' + T` for the later departure `d'`
 * gives `max(tat₀, d') + T`, a grant at `d'` (allowed there too, as `d' > d`).
 */
import type { Lane, LimitName, SendLimits } from './types.ts';

/** The per-chat limits of {@link SendLimits}: what a chat's own calls are paced by. */
export type ChatLimits = Pick<SendLimits, 'groupRatePerMin' | 'groupBurst' | 'chatRatePerS'>;

/** A chat's emission intervals and the group's burst tolerance, µs. */
export interface ChatIntervals {
  groupUs: number;
  /** The group limit's burst tolerance τ = (groupBurst − 1) × groupUs (0: burst 1). */
  groupTauUs: number;
  chatUs: number;
}

/** Emission intervals, µs (rounded up, so a rate is never exceeded), and the group's burst tolerance. */
export interface Intervals extends ChatIntervals {
  botUs: number;
}

/**
 * A chat's intervals, µs: `T_group = ceil(60e6 / (groupRatePerMin − (groupBurst − 1)))`, `τ_group = (groupBurst − 1)
 * × T_group`, `T_chat = ceil(1e6 / chatRatePerS)` (the module doc proves the group's R in any 60 s).
 * Expects checked limits (options.ts `checkLimits`); `groupBurst` unset is 1.
 */
export function chatIntervalsOf(limits: ChatLimits): ChatIntervals {
  const extra = (limits.groupBurst ?? 1) - 1;
  const groupUs = Math.ceil(60e6 / (limits.groupRatePerMin - extra));
  return { groupUs, groupTauUs: extra * groupUs, chatUs: Math.ceil(1e6 / limits.chatRatePerS) };
}

/** The intervals of `limits`, µs: ceil(1e6 / botRatePerS) and {@link chatIntervalsOf}. */
export function intervalsOf(limits: SendLimits): Intervals {
  return { botUs: Math.ceil(1e6 / limits.botRatePerS), ...chatIntervalsOf(limits) };
}

/** µs until a GCRA key with theoretical arrival time `tatUs` and burst tolerance `tauUs` allows a grant: max(0, tat − τ − now). */
export function gcraWaitUs(tatUs: number, nowUs: number, tauUs = 0): number {
  return Math.max(0, tatUs - tauUs - nowUs);
}

/** A GCRA key's theoretical arrival time after a grant departing at `atUs`: max(tat, at) + T. */
export function gcraGrant(tatUs: number, atUs: number, intervalUs: number): number {
  return Math.max(tatUs, atUs) + intervalUs;
}

/**
 * The least time, µs, before a chat's `n` next calls can all be granted after one granted now (per-chat order:
 * one after another): each at least `T_chat` after the last, and for a group the GCRA's bound, `n × T_group − τ`
 * (a rested group's burst goes at the chat's spacing, then one per `T_group`). With burst 1, n × max(T_chat, T_group).
 */
export function chatSpacingUs(n: number, iv: ChatIntervals, isGroup: boolean): number {
  return isGroup ? Math.max(n * iv.chatUs, n * iv.groupUs - iv.groupTauUs) : n * iv.chatUs;
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
  const botW = gcraWaitUs(s.botTatUs, nowUs);
  const groupW = s.groupTatUs === undefined ? 0 : gcraWaitUs(s.groupTatUs, nowUs, iv.groupTauUs);
  const chatW = gcraWaitUs(s.chatTatUs, nowUs);
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
      chatTatUs: gcraGrant(s.chatTatUs, at, iv.chatUs),
      groupTatUs: s.groupTatUs === undefined ? undefined : gcraGrant(s.groupTatUs, at, iv.groupUs),
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
    botTatUs: gcraGrant(s.botTatUs, at, iv.botUs),
    chatTatUs: gcraGrant(s.chatTatUs, at, iv.chatUs),
    groupTatUs: s.groupTatUs === undefined ? undefined : gcraGrant(s.groupTatUs, at, iv.groupUs),
    waitUs: botW,
  };
}

/**
 * How long a worker whose take was refused bot-wide stays away before taking again, ms.
 *
 * A take that only the bot rate refuses while booking is on (`maxWaitMs` > 0) was refused
 * because the bot's next free slot is further than `maxWaitMs`: it may book as soon as
 * that slot is within `maxWaitMs`, so the worker comes back after `botWaitMs − maxWaitMs`.
 * Staying away the whole `botWaitMs` lets every slot already booked depart with none booked
 * behind them, and the slot that passes while the worker fetches and takes again is lost
 * to the bot rate (a GCRA of burst 1 never makes it up). Any other refusal waits `botWaitMs`.
 * @param refusal the take's `limit` and `botWaitMs` (ms ≥ 0)
 * @param maxWaitMs the booking bound the take was made with, ms (0: no booking)
 * @returns ms ≥ 1
 */
export function botRetryMs(refusal: { limit: LimitName; botWaitMs: number }, maxWaitMs: number): number {
  const wait = refusal.limit === 'bot' && maxWaitMs > 0 ? refusal.botWaitMs - maxWaitMs : refusal.botWaitMs;
  return Math.max(1, Math.ceil(wait));
}

/** µs → ms for a wait: rounded up, at least 1 when positive. */
export function waitUsToMs(us: number): number {
  return us <= 0 ? 0 : Math.max(1, Math.ceil(us / 1000));
}
