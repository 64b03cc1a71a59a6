/**
 * The event-loop lag of the thread that runs the Bot API stub (its own
 * worker thread, telegram-stub/thread.ts): the stub timestamps a call when
 * its loop reads it, so a stall there bunches the arrivals of calls the
 * product spaced evenly (and its strict 1-s window may answer 429).
 * Sampled every `everyMs` as timer lateness.
 */
export class LoopLagLog {
  private readonly samples: Array<[atMs: number, lagMs: number]> = [];
  private readonly timer: NodeJS.Timeout;
  private expected: number;

  /** @param everyMs sampling period, ms; @param keep most samples kept (oldest dropped) */
  constructor(
    private readonly everyMs = 20,
    private readonly keep = 60_000,
  ) {
    this.expected = Date.now() + everyMs;
    this.timer = setInterval(() => {
      const now = Date.now();
      this.samples.push([now, Math.max(0, now - this.expected)]);
      if (this.samples.length > this.keep) this.samples.shift();
      this.expected = now + this.everyMs;
    }, everyMs);
    this.timer.unref();
  }

  /** Largest lag (ms) sampled in (atMs − windowMs, atMs + everyMs]: what delayed calls read around `atMs`. */
  maxAround(atMs: number, windowMs = 1_000): number {
    let most = 0;
    for (const [t, lag] of this.samples) if (t > atMs - windowMs && t <= atMs + this.everyMs) most = Math.max(most, lag);
    return most;
  }

  /** Largest lag sampled, ms. */
  get max(): number {
    let most = 0;
    for (const [, lag] of this.samples) most = Math.max(most, lag);
    return most;
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
