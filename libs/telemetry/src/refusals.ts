import type { Counter } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { Metrics } from './metrics.ts';

/**
 * "How you'd notice": every refusal is counted in `crowdplay_refusals_total`
 * (labels: `reason` = the error code, `area`), and logged at most once per
 * `intervalMs` per reason, with the number refused since the previous line.
 */
export class Refusals {
  private readonly counter: Counter;
  private readonly lastLogMs = new Map<string, number>();
  private readonly sinceLog = new Map<string, number>();

  constructor(
    metrics: Metrics,
    private readonly logger: Logger,
    /** REFUSAL_LOG_INTERVAL_MS: at most one line per reason this often. */
    readonly intervalMs: number,
    private readonly now: () => number = Date.now,
  ) {
    this.counter = metrics.counter('crowdplay_refusals_total');
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
    const key = `${area}|${reason}`;
    const count = (this.sinceLog.get(key) ?? 0) + n;
    const now = this.now();
    const last = this.lastLogMs.get(key);
    if (last === undefined || now - last >= this.intervalMs) {
      this.logger.warn(
        { ...detail, area, reason, refused: count, intervalMs: this.intervalMs },
        `refused: ${reason} (${count} since last report)`,
      );
      this.lastLogMs.set(key, now);
      this.sinceLog.set(key, 0);
    } else this.sinceLog.set(key, count);
  }
}

/**
 * An error line that can repeat many times a second while a dependency is down (every failed commit, every retry):
 * written the first time, then at most once per `intervalMs` per key, each line with `repeated`, the number of times
 * it happened since the previous line (1 for the first). What it is about is counted elsewhere (a metric); this bounds
 * only the log.
 */
export class ThrottledLog {
  private readonly lastLogMs = new Map<string, number>();
  private readonly sinceLog = new Map<string, number>();

  constructor(
    private readonly logger: Logger,
    /** At most one line per key this often, ms (REFUSAL_LOG_INTERVAL_MS where the process has it). */
    readonly intervalMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Counts one occurrence of `key` and writes `msg` at error level with `fields` if `key` was not written in the last
   * interval.
   * @returns whether a line was written
   */
  error(key: string, fields: Record<string, unknown>, msg: string): boolean {
    const count = (this.sinceLog.get(key) ?? 0) + 1;
    const now = this.now();
    const last = this.lastLogMs.get(key);
    if (last !== undefined && now - last < this.intervalMs) {
      this.sinceLog.set(key, count);
      return false;
    }
    this.logger.error({ ...fields, repeated: count, intervalMs: this.intervalMs }, msg);
    this.lastLogMs.set(key, now);
    this.sinceLog.set(key, 0);
    return true;
  }
}
