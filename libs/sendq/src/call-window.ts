/**
 * At most `limit` call starts in any `windowMs` for one process: the BullMQ
 * sender's guard behind the bucket. The bucket spaces the slots (gcra.ts), but
 * a call that starts late (its timer or a Redis round trip delayed on a busy
 * event loop) lets the calls booked after it bunch up behind it, and
 * Telegram's window is strict (a 1,000-chat rollover had three 429s once
 * calls kept pace with the slots). A call on schedule never waits here.
 */
export class CallWindow {
  /** Start times (ms) of the latest calls, at most `limit` of them, oldest first. */
  private readonly starts: number[] = [];

  /**
   * @param limit calls allowed in any window (TELEGRAM_BOT_RATE_PER_S)
   * @param windowMs the window, ms
   * @throws RangeError unless limit is an integer ≥ 1 and windowMs > 0
   */
  constructor(
    private readonly limit: number,
    private readonly windowMs = 1_000,
  ) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`limit must be an integer >= 1, got ${limit}`);
    if (!(windowMs > 0)) throw new RangeError(`windowMs must be > 0, got ${windowMs}`);
  }

  /** ms to wait before a call at `nowMs` keeps every window within the limit (0: go now). */
  waitMs(nowMs: number): number {
    if (this.starts.length < this.limit) return 0;
    return Math.max(0, this.starts[this.starts.length - this.limit]! + this.windowMs - nowMs);
  }

  /** Records a call started at `nowMs` (after `waitMs(nowMs)` returned 0). */
  record(nowMs: number): void {
    this.starts.push(nowMs);
    if (this.starts.length > this.limit) this.starts.shift();
  }
}
