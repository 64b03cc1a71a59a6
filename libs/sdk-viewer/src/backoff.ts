/**
 * Reconnect backoff: exponential with "full jitter" (AWS Architecture Blog,
 * "Exponential Backoff And Jitter", 2015): the delay before attempt `n`
 * (0-based) is a uniform draw from [0, min(maxMs, initialMs · 2^n)].
 * Full jitter spreads a crowd that lost its gateway at the same instant over
 * the whole window instead of reconnecting in synchronized waves.
 */

/** Backoff settings. Every field is optional where accepted; see the defaults. */
export interface BackoffOptions {
  /** Cap of the first delay, ms. @defaultValue {@link DEFAULT_BACKOFF}.initialMs (250) */
  initialMs: number;
  /** Largest delay cap, ms. @defaultValue {@link DEFAULT_BACKOFF}.maxMs (30_000) */
  maxMs: number;
  /** `full`: uniform in [0, cap]; `none`: exactly the cap (tests, debugging). @defaultValue 'full' */
  jitter: 'full' | 'none';
}

/** Defaults: 250 ms first cap, doubling to 30 s, full jitter. */
export const DEFAULT_BACKOFF: Readonly<BackoffOptions> = Object.freeze({ initialMs: 250, maxMs: 30_000, jitter: 'full' });

/**
 * Delay before reconnect attempt `attempt` (0 = first retry), in ms.
 *
 * @param attempt retries already made since the last successful welcome (≥ 0)
 * @param opts backoff settings
 * @param random source of uniform [0, 1) numbers (injectable for tests)
 */
export function backoffDelayMs(attempt: number, opts: BackoffOptions, random: () => number = Math.random): number {
  const exp = Math.min(Math.max(0, attempt), 30); // 2^30 · initialMs is past any sane maxMs
  const cap = Math.min(opts.maxMs, opts.initialMs * 2 ** exp);
  return opts.jitter === 'none' ? cap : Math.floor(random() * cap);
}
