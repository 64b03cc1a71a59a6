import type { LevelWithSilent, Logger } from 'pino';
import { createLogger } from './logger.ts';
import { Metrics } from './metrics.ts';
import { Refusals } from './refusals.ts';
import {
  droppedSpans,
  metricExporter,
  metricsExporterOf,
  resourceOf,
  startTracing,
  tracesExporterOf,
  type OtelSettings,
} from './tracing.ts';

/** Logger, metrics and refusal accounting of one process. */
export interface Telemetry {
  logger: Logger;
  metrics: Metrics;
  refusals: Refusals;
  /** Whether this process records spans (OTEL_* settings). */
  tracing: boolean;
  /** Flushes and stops the metric push and tracing (when this was their last user). */
  close(): Promise<void>;
}

/**
 * Builds the process's telemetry. `refusalLogIntervalMs` is REFUSAL_LOG_INTERVAL_MS.
 * With `otel` (Config['otel']) selecting exporters, tracing starts (one SDK per process, see startTracing)
 * and the metrics are also pushed over OTLP; without, nothing leaves the process but GET /metrics.
 * @throws Error when a chosen exporter package cannot be loaded
 */
export function createTelemetry(opts: {
  service: string;
  level: LevelWithSilent;
  refusalLogIntervalMs: number;
  logger?: Logger;
  otel?: OtelSettings;
}): Telemetry {
  const logger = opts.logger ?? createLogger({ level: opts.level, service: opts.service });
  const otel = opts.otel;
  const push = otel ? metricExporter(otel) : undefined;
  // The resource names the process in /metrics' target_info too (service.name = OTEL_SERVICE_NAME or crowdplay-<service>).
  const metrics = new Metrics({
    service: opts.service,
    ...(otel ? { resource: resourceOf(otel, opts.service) } : {}),
    ...(push && otel ? { push, pushIntervalMs: otel.exportIntervalMs } : {}),
  });
  if (push && otel)
    logger.info({ exporter: metricsExporterOf(otel), protocol: otel.protocol, intervalMs: otel.exportIntervalMs }, 'otel: metric push on');
  const refusals = new Refusals(metrics, logger, opts.refusalLogIntervalMs);
  const tracing = otel && tracesExporterOf(otel) !== 'none' ? startTracing(otel, opts.service, logger) : undefined;
  if (tracing?.enabled) {
    metrics.observableCounter('crowdplay_otel_spans_dropped_total', () => droppedSpans());
  }
  return {
    logger,
    metrics,
    refusals,
    tracing: tracing?.enabled ?? false,
    close: async () => {
      await metrics.close();
      await tracing?.shutdown();
    },
  };
}
