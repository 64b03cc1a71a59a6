/**
 * The product's send bucket as the rollover rig models it: what an ideal
 * sender under it could have sent (the utilisation's denominator) and how
 * stale its boards would have been (the staleness floor). Both use the
 * bucket's own arithmetic (libs/sendq gcra.ts) at the product's defaults.
 */
import { defaultConfig } from '@crowdplay/config';
import { chatIntervalsOf, gcraGrant, gcraWaitUs } from '@crowdplay/sendq';

/** The bucket's rates: TELEGRAM_BOT_RATE_PER_S, TELEGRAM_GROUP_RATE_PER_MIN, TELEGRAM_GROUP_BURST, TELEGRAM_CHAT_RATE_PER_S. */
export interface BucketRates {
  botPerS: number;
  groupPerMin: number;
  groupBurst: number;
  chatPerS: number;
}

/** The product's bucket at its defaults (TELEGRAM_BOT_RATE_PER_S, TELEGRAM_GROUP_RATE_PER_MIN, TELEGRAM_GROUP_BURST, TELEGRAM_CHAT_RATE_PER_S). */
const TELEGRAM_DEFAULTS = defaultConfig().telegram;
/** The product's bucket (its defaults: TELEGRAM_BOT_RATE_PER_S, TELEGRAM_GROUP_RATE_PER_MIN, TELEGRAM_GROUP_BURST, TELEGRAM_CHAT_RATE_PER_S). */
export const BUCKET_RATES: Readonly<BucketRates> = {
  botPerS: TELEGRAM_DEFAULTS.botRatePerS,
  groupPerMin: TELEGRAM_DEFAULTS.groupRatePerMin,
  groupBurst: TELEGRAM_DEFAULTS.groupBurst,
  chatPerS: TELEGRAM_DEFAULTS.chatRatePerS,
};

/** @throws RangeError when a rate is missing or not a finite number > 0 */
function checkRates(rates: Readonly<BucketRates>): void {
  for (const k of ['botPerS', 'groupPerMin', 'groupBurst', 'chatPerS'] as const) {
    const v: unknown = rates[k];
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new RangeError(`${k} must be a finite number > 0, got ${String(v)}`);
  }
}

/** A chat's keys in the model, µs: its GCRA tats and when its limits next allow a send. */
interface ChatKeys {
  chatTat: number;
  groupTat: number;
  next: number;
}

/** The bucket's intervals, µs: the bot's slot and a chat's (libs/sendq `chatIntervalsOf`). */
function intervalsUs(rates: Readonly<BucketRates>): { botUs: number; iv: ReturnType<typeof chatIntervalsOf> } {
  return {
    botUs: Math.ceil(1e6 / rates.botPerS),
    iv: chatIntervalsOf({ groupRatePerMin: rates.groupPerMin, groupBurst: rates.groupBurst, chatRatePerS: rates.chatPerS }),
  };
}

/** Grants chat `c` a send at `t` (µs), as the bucket counts it: its chat interval and its group's GCRA both advance. */
function grant(c: ChatKeys, t: number, iv: ReturnType<typeof chatIntervalsOf>): void {
  c.chatTat = gcraGrant(c.chatTat, t, iv.chatUs);
  c.groupTat = gcraGrant(c.groupTat, t, iv.groupUs);
  c.next = t + Math.max(gcraWaitUs(c.chatTat, t), gcraWaitUs(c.groupTat, t, iv.groupTauUs));
}

/**
 * What the bucket allowed while work was queued, in sends: an ideal sender
 * under the product's bucket, with its arithmetic (libs/sendq gcra.ts: the
 * bot every ceil(1e6 / botPerS) µs; a group chat by its chat interval and
 * its group's GCRA with a burst of `groupBurst`: at the defaults (burst 1)
 * one every max(60,000 / groupPerMin, 1000 / chatPerS) = 3,000 ms, its first
 * send at once; with a burst of 2, a quiet chat's first two sends 1 s apart,
 * then one every ceil(60e6 / 19) µs), sending at
 * every bot slot in the pending chat that has been allowed longest. A chat is
 * pending from its first accepted guess to the delivery of its final board
 * (or the end of the evaluation), so time when its board was current between
 * two changes counts as allowed too: the figure is an upper bound of the
 * allowance, and the utilisation a lower bound.
 * @param pending per chat [start, end], ms since epoch
 */
export function allowedSends(pending: Array<[number, number]>, rates: Readonly<BucketRates> = BUCKET_RATES): number {
  if (pending.length === 0) return 0;
  // In µs, as the bucket counts: a chat's next send is when its chat interval and its group's GCRA both allow.
  const { botUs, iv } = intervalsUs(rates);
  const chats = pending
    .filter(([a, b]) => b >= a)
    .map(([a, b]) => ({ a: Math.round(a * 1000), b: Math.round(b * 1000), next: Math.round(a * 1000), chatTat: 0, groupTat: 0 }));
  const end = Math.max(...chats.map((c) => c.b));
  let total = 0;
  let t = Math.min(...chats.map((c) => c.a));
  while (t <= end) {
    let best: (typeof chats)[number] | null = null;
    let soonest = Infinity;
    for (const c of chats) {
      if (c.b < t) continue;
      if (c.next <= t) {
        if (!best || c.next < best.next) best = c;
      } else soonest = Math.min(soonest, c.next);
    }
    if (best) {
      total++;
      grant(best, t, iv);
      t += botUs;
    } else if (soonest === Infinity) break;
    else t = soonest;
  }
  return total;
}

/**
 * How long after the bucket first allowed it a chat's final board went, ms:
 * from the earliest moment a send could follow both the chat's last change
 * and its earlier board sends (its chat interval and its group's GCRA, as the
 * bucket grants them: libs/sendq gcra.ts) to the final board's send. It is
 * the product's own lag behind its pacing (render, queues, the call), apart
 * from the wait the chat's limits impose on any sender: 0 for a sender with
 * no latency that sends each chat as soon as it may.
 * @param lastChangeMs the chat's last change, ms since epoch
 * @param finalMs the send of the board showing that change, ms since epoch
 * @param sendsMs the chat's board sends (any order; those from `finalMs` on are ignored), ms since epoch
 * @param rates the bucket. @defaultValue BUCKET_RATES
 * @throws RangeError when a rate is missing or not a finite number > 0, a time is not a finite number or `finalMs` is
 *   before `lastChangeMs`
 */
export function slotLagMs(
  lastChangeMs: number,
  finalMs: number,
  sendsMs: readonly number[],
  rates: Readonly<BucketRates> = BUCKET_RATES,
): number {
  checkRates(rates);
  for (const t of [lastChangeMs, finalMs, ...sendsMs])
    if (!Number.isFinite(t)) throw new RangeError(`a time must be a finite number, got ${t}`);
  if (finalMs < lastChangeMs) throw new RangeError(`the final board (${finalMs}) cannot go before the last change (${lastChangeMs})`);
  const { iv } = intervalsUs(rates);
  const keys: ChatKeys = { chatTat: -Infinity, groupTat: -Infinity, next: -Infinity };
  const before = sendsMs.filter((t) => t < finalMs).sort((a, b) => a - b);
  for (const t of before) grant(keys, Math.round(t * 1000), iv);
  const allowedUs = Math.max(Math.round(lastChangeMs * 1000), keys.next);
  return (Math.round(finalMs * 1000) - allowedUs) / 1000;
}

/**
 * How stale an ideal sender under the bucket leaves each chat's final board:
 * zero render and call latency, a send at every bot slot
 * (ceil(1e6 / botPerS) µs apart) while any chat may go, and each chat as soon
 * as its own limits allow (its chat interval and its group's GCRA, as in
 * {@link allowedSends}: at the defaults 3,000 ms after its previous board).
 * At each slot it sends, among the chats changed since their last board and
 * allowed now, the quietest (the oldest latest change; ties by index), the
 * order the product's scheduler uses; a board shows every change up to its
 * send. It cannot see the future, as no live sender can: a chat that changes
 * just after its board went waits out its own interval.
 * @param chats per chat, its changes' times (ms since epoch, any order; a chat without changes is skipped)
 * @param rates the bucket. @defaultValue BUCKET_RATES
 * @param lagMs how old the state a board shows is at its send, ms (0: the ideal; a real pipeline decides, renders
 *   and queues before the call, and this models that as a board drawing the changes made up to `lagMs` before it)
 * @returns per chat with changes, in input order, the time from its last change to the send of its final board, ms
 * @throws RangeError when a rate is missing or not a finite number > 0, `lagMs` is not ≥ 0 or a time is not a finite number
 */
export function idealStaleness(
  chats: ReadonlyArray<{ changesMs: readonly number[] }>,
  rates: Readonly<BucketRates> = BUCKET_RATES,
  lagMs = 0,
): number[] {
  checkRates(rates);
  if (!(lagMs >= 0) || !Number.isFinite(lagMs)) throw new RangeError(`lagMs must be a finite number ≥ 0, got ${lagMs}`);
  const lagUs = Math.round(lagMs * 1000);
  const { botUs, iv } = intervalsUs(rates);
  const live = chats
    .filter((c) => c.changesMs.length > 0)
    .map((c) => {
      const us = c.changesMs.map((ms) => {
        if (typeof ms !== 'number' || !Number.isFinite(ms))
          throw new RangeError(`a change time is not a finite number: ${JSON.stringify(ms)}`);
        return Math.round(ms * 1000);
      });
      us.sort((a, b) => a - b);
      // known: changes at or before now; sent: changes the last board showed; next: when its limits allow, µs.
      return { us, known: 0, sent: 0, next: -Infinity, chatTat: 0, groupTat: 0, finalUs: -1 };
    });
  let waiting = live.slice();
  let t = Math.min(...live.map((c) => c.us[0]!)) + lagUs;
  while (waiting.length > 0) {
    let best: (typeof live)[number] | null = null;
    let soonest = Infinity;
    for (const c of waiting) {
      while (c.known < c.us.length && c.us[c.known]! <= t - lagUs) c.known++;
      if (c.known > c.sent && c.next <= t) {
        if (!best || c.us[c.known - 1]! < best.us[best.known - 1]!) best = c;
      } else soonest = Math.min(soonest, Math.max(c.next, c.us[c.sent]! + lagUs));
    }
    if (!best) {
      t = soonest;
      continue;
    }
    best.sent = best.known;
    grant(best, t, iv);
    if (best.sent === best.us.length) {
      best.finalUs = t;
      waiting = waiting.filter((c) => c !== best);
    }
    t += botUs;
  }
  return live.map((c) => (c.finalUs - c.us[c.us.length - 1]!) / 1000);
}
