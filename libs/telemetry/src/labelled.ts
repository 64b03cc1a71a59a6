import type { Attributes } from '@opentelemetry/api';
import type { Metrics, MetricReading } from './metrics.ts';
import type { Telemetry } from './telemetry.ts';

/** `v` with `attrs` added to each label set (a bare number becomes one value with `attrs`). */
function withAttrs(v: MetricReading, attrs: Attributes): MetricReading {
  return typeof v === 'number' ? [[v, attrs]] : v.map(([value, a]) => [value, { ...a, ...attrs }]);
}

/**
 * A view of `metrics` that adds `attrs` to every value recorded or read through it: several copies of one
 * component in a process (each tenant bot's send queue, scheduler and boards) export the same catalogue
 * metrics under their own label (`bot="<id>"`) instead of overwriting one another. The instruments are
 * the process's; only the labels differ.
 */
export function labelledMetrics(metrics: Metrics, attrs: Attributes): Metrics {
  const view = Object.create(metrics) as Metrics;
  const merge = (a?: Attributes): Attributes => ({ ...a, ...attrs });
  Object.assign(view, {
    counter: (name: Parameters<Metrics['counter']>[0]) => {
      const c = metrics.counter(name);
      return Object.assign(Object.create(c) as typeof c, { add: (v: number, a?: Attributes) => c.add(v, merge(a)) });
    },
    upDown: (name: Parameters<Metrics['upDown']>[0]) => {
      const c = metrics.upDown(name);
      return Object.assign(Object.create(c) as typeof c, { add: (v: number, a?: Attributes) => c.add(v, merge(a)) });
    },
    histogram: (name: Parameters<Metrics['histogram']>[0]) => {
      const h = metrics.histogram(name);
      return Object.assign(Object.create(h) as typeof h, { record: (v: number, a?: Attributes) => h.record(v, merge(a)) });
    },
    gauge: (name: Parameters<Metrics['gauge']>[0], read: () => MetricReading) => metrics.gauge(name, () => withAttrs(read(), attrs)),
    observableCounter: (name: Parameters<Metrics['observableCounter']>[0], read: () => MetricReading) =>
      metrics.observableCounter(name, () => withAttrs(read(), attrs)),
  });
  return view;
}

/**
 * The process's telemetry for one copy of a component: its metrics labelled with `attrs` ({@link labelledMetrics}),
 * its log lines carrying them (a pino child); refusals and closing stay the process's.
 */
export function labelledTelemetry(telemetry: Telemetry, attrs: Record<string, string>): Telemetry {
  return {
    ...telemetry,
    logger: telemetry.logger.child(attrs),
    metrics: labelledMetrics(telemetry.metrics, attrs),
  };
}
