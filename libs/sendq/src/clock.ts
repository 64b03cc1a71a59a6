/**
 * The time source of the bucket and the queue. Production uses
 * `systemClock`; tests use `ManualClock` (in-process adapters: time moves only
 * when the test advances it) or `scaledClock` (real timers running N× faster,
 * usable with BullMQ, whose delayed jobs use the real clock).
 */

/** A clock: `now()` in ms and timers in the same unit. */
export interface Clock {
  /** Current time, ms. */
  now(): number;
  /**
   * Calls `fn` once after `ms` of this clock's time (≥ 0; any length: real
   * timers are chained within Node's limit, {@link longTimeout}).
   * @returns a function that cancels the timer (safe to call twice)
   */
  after(ms: number, fn: () => void): () => void;
  /**
   * Clock ms per real ms: 1 for `systemClock`, N for `scaledClock(N)`,
   * `Infinity` for `ManualClock` (not tied to real time: adapters that need
   * real delays, BullMQ, refuse it).
   */
  readonly speed: number;
}

/**
 * Longest delay a Node timer takes, ms (2^31 − 1, ~24.8 days). A longer one
 * fires after 1 ms with a TimeoutOverflowWarning, so a timer re-armed for
 * the same far end would spin.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls `fn` once after `ms` real ms, chaining timers of at most
 * {@link MAX_TIMER_MS} so that any delay (a 429's `retry_after` of weeks)
 * is honoured without an overflow. Every timer of the send queue goes
 * through it (via a {@link Clock}'s `after`, or directly for real-time waits).
 * @param ms delay, real ms (negative or NaN: 0; Infinity: never)
 * @returns a function that cancels the timer (safe to call twice)
 */
export function longTimeout(ms: number, fn: () => void, unref = false): () => void {
  let left = Number.isNaN(ms) ? 0 : Math.max(0, ms);
  let t: NodeJS.Timeout | undefined;
  let cancelled = false;
  const arm = (): void => {
    const step = Math.min(left, MAX_TIMER_MS);
    left -= step;
    t = setTimeout(() => {
      t = undefined;
      if (cancelled) return;
      if (left > 0) arm();
      else fn();
    }, step);
    if (unref) t.unref();
  };
  arm();
  return () => {
    cancelled = true;
    if (t !== undefined) clearTimeout(t);
    t = undefined;
  };
}

/** Wall-clock ms with µs resolution, monotonic within the process (performance.timeOrigin + performance.now()). */
const preciseNow = (): number => performance.timeOrigin + performance.now();

/**
 * Wall-clock ms at µs resolution (monotonic: no NTP steps inside the process)
 * and setTimeout. Timers keep the process alive (queued work is pending
 * work); `close()` cancels them.
 */
export const systemClock: Clock = {
  now: preciseNow,
  after(ms, fn) {
    return longTimeout(ms, fn);
  },
  speed: 1,
};

/**
 * A clock that runs `speed` times faster than real time, starting at
 * the wall clock's now (tests: 60× turns Telegram's per-minute limit into a second).
 * @throws RangeError unless `speed` is a finite number ≥ 1.
 */
export function scaledClock(speed: number): Clock {
  if (!(Number.isFinite(speed) && speed >= 1)) throw new RangeError(`speed must be a finite number >= 1, got ${speed}`);
  const t0 = preciseNow();
  return {
    now: () => t0 + (preciseNow() - t0) * speed,
    after(ms, fn) {
      return longTimeout(Math.max(0, ms) / speed, fn);
    },
    speed,
  };
}

interface ManualTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/** A clock that moves only by `advance`/`set`; due timers fire in time order. */
export class ManualClock implements Clock {
  readonly speed = Infinity;
  private t: number;
  private seq = 0;
  private timers: ManualTimer[] = [];

  /** @param startMs initial time, ms @defaultValue 1_000_000 */
  constructor(startMs = 1_000_000) {
    this.t = startMs;
  }

  now(): number {
    return this.t;
  }

  after(ms: number, fn: () => void): () => void {
    const timer: ManualTimer = { at: this.t + Math.max(0, ms), seq: this.seq++, fn };
    this.timers.push(timer);
    return () => {
      this.timers = this.timers.filter((x) => x !== timer);
    };
  }

  /** Time of the earliest pending timer, or undefined. */
  nextTimerAt(): number | undefined {
    let best: number | undefined;
    for (const x of this.timers) if (best === undefined || x.at < best) best = x.at;
    return best;
  }

  /** Pending timers. */
  pendingTimers(): number {
    return this.timers.length;
  }

  /**
   * Moves time forward by `ms` (≥ 0), firing due timers in order, each at its
   * own time. @throws RangeError on a negative or non-finite `ms`.
   */
  advance(ms: number): void {
    if (!(Number.isFinite(ms) && ms >= 0)) throw new RangeError(`ms must be a finite number >= 0, got ${ms}`);
    this.set(this.t + ms);
  }

  /** Moves time to `toMs` (never backwards), firing due timers in order. */
  set(toMs: number): void {
    for (;;) {
      let next: ManualTimer | undefined;
      for (const x of this.timers)
        if (x.at <= toMs && (next === undefined || x.at < next.at || (x.at === next.at && x.seq < next.seq))) next = x;
      if (next === undefined) break;
      this.timers = this.timers.filter((x) => x !== next);
      if (next.at > this.t) this.t = next.at;
      next.fn();
    }
    if (toMs > this.t) this.t = toMs;
  }
}
