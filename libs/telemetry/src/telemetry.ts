import type { LevelWithSilent, Logger } from 'pino';
import { createLogger } from './logger.ts';
import { Metrics } from './metrics.ts';
import { Refusals } from './refusals.ts';

/** Logger, metrics and refusal accounting of one process. */
export interface Telemetry {
  logger: Logger;
  metrics: Metrics;
  refusals: Refusals;
  close(): Promise<void>;
}

/** Builds the process's telemetry. `refusalLogIntervalMs` is REFUSAL_LOG_INTERVAL_MS. */
export function createTelemetry(opts: {
  service: string;
  level: LevelWithSilent;
  refusalLogIntervalMs: number;
  logger?: Logger;
}): Telemetry {
  const logger = opts.logger ?? createLogger({ level: opts.level, service: opts.service });
  const metrics = new Metrics({ service: opts.service });
  const refusals = new Refusals(metrics, logger, opts.refusalLogIntervalMs);
  return { logger, metrics, refusals, close: () => metrics.close() };
}
