/**
 * Telegram's send ceilings as the stub enforces them: sliding-window logs,
 * "at most `limit` calls in any window of `windowMs`", which is the strict
 * reading of https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this
 * (about 30 messages per second for the bot, no more than 20 per minute in
 * one group, about one per second in one chat). A token bucket with a
 * burst above 1 can pass more than `limit` in some window (burst + rate × t),
 * and the stub answers that with a real 429, as Telegram may.
 */

/** One ceiling: at most `limit` calls in any `windowMs`. */
export interface WindowSpec {
  limit: number;
  windowMs: number;
}

/** The stub's three ceilings; set a field to `undefined` to switch that one off. */
export interface StubLimits {
  /** Bot-wide (default 30 per 1,000 ms). */
  bot?: WindowSpec;
  /** Per group or supergroup chat, i.e. chat_id < 0 (default 20 per 60,000 ms). */
  group?: WindowSpec;
  /** Per chat, any kind (default 1 per 1,000 ms). */
  chat?: WindowSpec;
  /**
   * A call that would fit this many ms later is admitted (default 0: strict).
   * A sender spacing calls evenly at exactly the ceiling (GCRA, burst 1) has
   * them arrive with network and event-loop jitter, so two calls one
   * interval apart can land closer; Telegram's own enforcement is not
   * documented to be this strict. Load runs may allow a few tens of ms.
   */
  toleranceMs?: number;
}

export const TELEGRAM_LIMITS: Required<StubLimits> = {
  bot: { limit: 30, windowMs: 1_000 },
  group: { limit: 20, windowMs: 60_000 },
  chat: { limit: 1, windowMs: 1_000 },
  toleranceMs: 0,
};

/** A sliding-window log for one key: the times (ms) of the calls admitted in the last window. */
export class SlidingWindow {
  private readonly times: number[] = [];
  constructor(readonly spec: WindowSpec) {}

  private prune(nowMs: number): void {
    const from = nowMs - this.spec.windowMs;
    let i = 0;
    while (i < this.times.length && this.times[i]! <= from) i++;
    if (i > 0) this.times.splice(0, i);
  }

  /** 0 when a call at `nowMs` fits; else ms until it would (the oldest admitted call leaves the window). */
  waitMs(nowMs: number): number {
    this.prune(nowMs);
    if (this.times.length < this.spec.limit) return 0;
    return this.times[this.times.length - this.spec.limit]! + this.spec.windowMs - nowMs;
  }

  /** Records an admitted call at `nowMs`. */
  add(nowMs: number): void {
    this.times.push(nowMs);
  }

  /** True when nothing in the log is still inside the window at `nowMs` (the key can be forgotten). */
  idle(nowMs: number): boolean {
    this.prune(nowMs);
    return this.times.length === 0;
  }
}

/** Which ceiling refused a call. */
export type LimitScope = 'bot' | 'group' | 'chat';

/** The three ceilings over every chat. */
export class StubLimiter {
  private readonly bot: SlidingWindow | undefined;
  private readonly groups = new Map<number, SlidingWindow>();
  private readonly chats = new Map<number, SlidingWindow>();
  private sweepAt = 0;

  constructor(private readonly limits: StubLimits) {
    this.bot = limits.bot ? new SlidingWindow(limits.bot) : undefined;
  }

  private window(map: Map<number, SlidingWindow>, spec: WindowSpec, chatId: number): SlidingWindow {
    let w = map.get(chatId);
    if (!w) map.set(chatId, (w = new SlidingWindow(spec)));
    return w;
  }

  /**
   * Admits a call (recording it in every window it counts in) or returns the
   * ceiling that refused it and Telegram's `retry_after`: whole seconds,
   * at least 1, rounded up.
   */
  admit(chatId: number | undefined, nowMs: number): { ok: true } | { ok: false; scope: LimitScope; retryAfterS: number } {
    this.sweep(nowMs);
    const checks: Array<[LimitScope, SlidingWindow]> = [];
    if (this.bot) checks.push(['bot', this.bot]);
    if (chatId !== undefined) {
      if (this.limits.chat) checks.push(['chat', this.window(this.chats, this.limits.chat, chatId)]);
      if (chatId < 0 && this.limits.group) checks.push(['group', this.window(this.groups, this.limits.group, chatId)]);
    }
    let worst: { scope: LimitScope; ms: number } | undefined;
    const tolerance = this.limits.toleranceMs ?? 0;
    for (const [scope, w] of checks) {
      const ms = w.waitMs(nowMs);
      if (ms > tolerance && (!worst || ms > worst.ms)) worst = { scope, ms };
    }
    if (worst) return { ok: false, scope: worst.scope, retryAfterS: Math.max(1, Math.ceil(worst.ms / 1000)) };
    for (const [, w] of checks) w.add(nowMs);
    return { ok: true };
  }

  /** Drops idle per-chat windows now and then (bounded memory over many chats). */
  private sweep(nowMs: number): void {
    if (nowMs < this.sweepAt) return;
    this.sweepAt = nowMs + 60_000;
    for (const map of [this.groups, this.chats]) for (const [k, w] of map) if (w.idle(nowMs)) map.delete(k);
  }
}
