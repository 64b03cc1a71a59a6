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
    private readonly intervalMs: number,
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
