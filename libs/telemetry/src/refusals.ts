import type { Counter } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { Metrics } from './metrics.ts';

/**
 * Per key, how many times something happened since the last time it was reported, and whether a report is due now:
 * the first occurrence at once, then at most one per `intervalMs`.
 */
class OncePerInterval {
  private readonly lastMs = new Map<string, number>();
  private readonly since = new Map<string, number>();

  constructor(
    private readonly intervalMs: number,
    private readonly now: () => number,
  ) {}

  /** Counts `n` occurrences of `key`. @returns the count to report (these included) when a report is due, else null */
  take(key: string, n: number): number | null {
    const count = (this.since.get(key) ?? 0) + n;
    const now = this.now();
    const last = this.lastMs.get(key);
    if (last !== undefined && now - last < this.intervalMs) {
      this.since.set(key, count);
      return null;
    }
    this.lastMs.set(key, now);
    this.since.set(key, 0);
    return count;
  }
}

/**
 * "How you'd notice": every refusal is counted in `crowdplay_refusals_total`
 * (labels: `reason` = the error code, `area`), and logged at most once per
 * `intervalMs` per reason, with the number refused since the previous line.
 */
export class Refusals {
  private readonly counter: Counter;
  private readonly due: OncePerInterval;

  constructor(
    metrics: Metrics,
    private readonly logger: Logger,
    /** REFUSAL_LOG_INTERVAL_MS: at most one line per reason this often. */
    readonly intervalMs: number,
    now: () => number = Date.now,
  ) {
    this.counter = metrics.counter('crowdplay_refusals_total');
    this.due = new OncePerInterval(intervalMs, now);
  }

  /**
   * Counts one refusal (or `n`), and logs if this reason was not logged in
   * the last interval.
   * @param area the component that refused (gateway, engine, …)
   * @param reason the CP_ERR_* code
   * @param detail extra fields for the log line (first occurrence of the interval)
   */
  refuse(area: string, reason: string, detail?: Record<string, unknown>, n = 1): void {
    this.counter.add(n, { area, reason });
    const count = this.due.take(`${area}|${reason}`, n);
    if (count !== null)
      this.logger.warn(
        { ...detail, area, reason, refused: count, intervalMs: this.intervalMs },
        `refused: ${reason} (${count} since last report)`,
      );
  }
}

/**
 * An error line that can repeat many times a second while a dependency is down (every failed commit, every retry):
 * written the first time, then at most once per `intervalMs` per key, each line with `repeated`, the number of times
 * it happened since the previous line (1 for the first). What it is about is counted elsewhere (a metric); this bounds
 * only the log.
 */
export class ThrottledLog {
  private readonly due: OncePerInterval;

  constructor(
    private readonly logger: Logger,
    /** At most one line per key this often, ms (REFUSAL_LOG_INTERVAL_MS where the process has it). */
    readonly intervalMs: number,
    now: () => number = Date.now,
  ) {
    this.due = new OncePerInterval(intervalMs, now);
  }

  /**
   * Counts one occurrence of `key` and writes `msg` at error level with `fields` if `key` was not written in the last
   * interval.
   * @returns whether a line was written
   */
  error(key: string, fields: Record<string, unknown>, msg: string): boolean {
    const count = this.due.take(key, 1);
    if (count === null) return false;
    this.logger.error({ ...fields, repeated: count, intervalMs: this.intervalMs }, msg);
    return true;
  }
}
