import { constants as perfConstants, monitorEventLoopDelay, PerformanceObserver, type IntervalHistogram } from 'node:perf_hooks';
import { MeterProvider, PeriodicExportingMetricReader, type IMetricReader, type PushMetricExporter } from '@opentelemetry/sdk-metrics';
import type { Resource } from '@opentelemetry/resources';
import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import type {
  Attributes,
  Counter,
  Histogram,
  Meter,
  MetricOptions,
  ObservableCounter,
  ObservableGauge,
  UpDownCounter,
} from '@opentelemetry/api';
import {
  metricDefinition,
  type CounterName,
  type GaugeName,
  type HistogramName,
  type MetricDefinition,
  type ObservableCounterName,
  type UpDownCounterName,
} from './catalogue.ts';
import { SummedCounter } from './summed-counter.ts';

/** What an observable instrument's `read()` returns at scrape time: one value, or one value per label set (none: no series). */
export type MetricReading = number | Array<[number, Attributes]>;

const GC_KINDS: Record<number, string> = {
  [perfConstants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [perfConstants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [perfConstants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [perfConstants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};

/** Period of the lag timer behind `crowdplay_event_loop_lag_ms{quantile="max"}`, ms (monitorEventLoopDelay's resolution too). */
const LAG_TICK_MS = 10;

/** The OpenTelemetry options of a catalogue entry: its help, its unit (none for a plain number) and its buckets. */
function optionsOf(d: MetricDefinition): MetricOptions {
  return {
    description: d.help,
    ...(d.unit === '1' ? {} : { unit: d.unit }),
    ...(d.buckets ? { advice: { explicitBucketBoundaries: [...d.buckets] } } : {}),
  };
}

/**
 * Metrics through the OpenTelemetry metrics API, read by Prometheus from
 * `/metrics` (the exporter's serializer, no server of its own). One instance
 * per process (tests make their own, so they never share counters).
 *
 * Every metric is declared in the catalogue (catalogue.ts); a call site names
 * it only, and gets the instrument of its catalogued type, help, unit and
 * buckets. Registering a name twice on one instance returns instruments that
 * share one series set (OpenTelemetry merges identical registrations).
 */
export class Metrics {
  private readonly meter: Meter;
  private readonly provider: MeterProvider;
  private readonly exporter: PrometheusExporter;
  private readonly serializer = new PrometheusSerializer();
  private readonly loopDelay: IntervalHistogram;
  /** Largest lateness of {@link LAG_TICK_MS} ticks since the previous scrape, ms (see the constructor). */
  private lagMaxMs = 0;
  private lagLastTick = performance.now();
  private readonly lagTimer: NodeJS.Timeout;
  private readonly gcObserver: PerformanceObserver;
  /** Every counter handed out, by name: their sums go to the SDK before each collection (see the constructor). */
  private readonly counters = new Map<CounterName, SummedCounter>();
  private closed = false;

  /**
   * @param opts.push an OTLP (or console) exporter the metrics are also pushed to every `pushIntervalMs`
   *   (OTEL_METRICS_EXPORTER, OTEL_METRIC_EXPORT_INTERVAL); `resource` names the process in those pushes
   */
  constructor(opts: { service: string; push?: PushMetricExporter; pushIntervalMs?: number; resource?: Resource }) {
    this.exporter = new PrometheusExporter({ preventServerStart: true });
    const readers: IMetricReader[] = [this.exporter];
    if (opts.push) {
      const interval = opts.pushIntervalMs ?? 60_000;
      readers.push(
        new PeriodicExportingMetricReader({
          exporter: opts.push,
          exportIntervalMillis: interval,
          exportTimeoutMillis: Math.min(interval, 30_000),
        }),
      );
    }
    this.provider = new MeterProvider({ readers, ...(opts.resource ? { resource: opts.resource } : {}) });
    this.meter = this.provider.getMeter(`crowdplay.${opts.service}`);
    // Event-loop lag: the first thing a saturated Node process shows.
    this.loopDelay = monitorEventLoopDelay({ resolution: 10 });
    this.loopDelay.enable();
    const lag = this.meter.createObservableGauge(
      'crowdplay_event_loop_lag_ms',
      optionsOf(metricDefinition('crowdplay_event_loop_lag_ms', 'gauge')),
    );
    // The max also comes from a timer of our own: resetting the histogram (each scrape) also forgets when it last ticked,
    // so its first tick after a reset records nothing, and a stall that a scrape follows before that tick (a scrape
    // arriving during the stall is read right after it) was lost from the max (measured: a 120 ms block then a reset
    // showed 10 ms). This timer's lateness is measured from its own last run, which no scrape resets.
    this.lagTimer = setInterval(() => {
      const now = performance.now();
      const late = now - this.lagLastTick - LAG_TICK_MS;
      if (late > this.lagMaxMs) this.lagMaxMs = late;
      this.lagLastTick = now;
    }, LAG_TICK_MS);
    this.lagTimer.unref();
    // A collection runs every observable callback before it reads the synchronous instruments (MeterSharedState.collect),
    // so the counters' sums handed over here are in the reading they precede.
    this.meter.addBatchObservableCallback(() => {
      for (const c of this.counters.values()) c.flush();
    }, [lag]);
    lag.addCallback((r) => {
      const h = this.loopDelay;
      const max = Math.max(h.count > 0 ? h.max / 1e6 : 0, this.lagMaxMs);
      this.lagMaxMs = 0;
      if (h.count > 0) {
        r.observe(h.percentile(50) / 1e6, { quantile: 'p50' });
        r.observe(h.percentile(99) / 1e6, { quantile: 'p99' });
      }
      if (h.count > 0 || max > 0) r.observe(max, { quantile: 'max' });
      h.reset();
    });
    // Where the memory is: V8's heap (used / reserved), memory of JS objects held outside it (Buffers, canvases), and the
    // ArrayBuffers among those; RSS minus heap_total minus external is native memory of the process (threads, libraries).
    const mem = this.meter.createObservableGauge(
      'crowdplay_process_memory_bytes',
      optionsOf(metricDefinition('crowdplay_process_memory_bytes', 'gauge')),
    );
    // Garbage collections of the main thread's heap (HEAP_GROWING_PERCENT trades memory against these), by kind.
    const gcMs = this.histogram('crowdplay_gc_ms');
    this.gcObserver = new PerformanceObserver((list) => {
      for (const e of list.getEntries())
        gcMs.record(e.duration, { kind: GC_KINDS[(e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind ?? 0] ?? 'other' });
    });
    this.gcObserver.observe({ entryTypes: ['gc'] });
    mem.addCallback((r) => {
      const m = process.memoryUsage();
      r.observe(m.rss, { kind: 'rss' });
      r.observe(m.heapUsed, { kind: 'heap_used' });
      r.observe(m.heapTotal, { kind: 'heap_total' });
      r.observe(m.external, { kind: 'external' });
      r.observe(m.arrayBuffers, { kind: 'array_buffers' });
    });
  }

  /**
   * The counter `name` (added to at the event; Prometheus `<name>`, already ending in `_total`). Adds are summed
   * per label set and handed to OpenTelemetry when the metrics are read ({@link SummedCounter}); one instance per name.
   * @throws RangeError when `name` is not in the catalogue; TypeError when it is catalogued as another type
   */
  counter(name: CounterName): Counter {
    let c = this.counters.get(name);
    if (!c) {
      c = new SummedCounter(this.meter.createCounter(name, optionsOf(metricDefinition(name, 'counter'))));
      this.counters.set(name, c);
    }
    return c;
  }

  /**
   * The up-down counter `name` (added to and taken from at the event; a Prometheus gauge).
   * @throws RangeError when `name` is not in the catalogue; TypeError when it is catalogued as another type
   */
  upDown(name: UpDownCounterName): UpDownCounter {
    return this.meter.createUpDownCounter(name, optionsOf(metricDefinition(name, 'upDownCounter')));
  }

  /**
   * The histogram `name`, with the catalogue's unit and bucket boundaries (Prometheus `<name>_bucket`, `_sum`, `_count`).
   * @throws RangeError when `name` is not in the catalogue; TypeError when it is catalogued as another type
   */
  histogram(name: HistogramName): Histogram {
    return this.meter.createHistogram(name, optionsOf(metricDefinition(name, 'histogram')));
  }

  /**
   * The gauge `name`, read at scrape time from `read()` (one value, or one per label set).
   * @throws RangeError when `name` is not in the catalogue; TypeError when it is catalogued as another type
   */
  gauge(name: GaugeName, read: () => MetricReading): ObservableGauge {
    const g = this.meter.createObservableGauge(name, optionsOf(metricDefinition(name, 'gauge')));
    g.addCallback((r) => observeReading(r, read()));
    return g;
  }

  /**
   * The observable counter `name`: a running total (never decreasing) read at scrape time from `read()`,
   * one value or one per label set (a Prometheus counter).
   * @throws RangeError when `name` is not in the catalogue; TypeError when it is catalogued as another type
   */
  observableCounter(name: ObservableCounterName, read: () => MetricReading): ObservableCounter {
    const c = this.meter.createObservableCounter(name, optionsOf(metricDefinition(name, 'observableCounter')));
    c.addCallback((r) => observeReading(r, read()));
    return c;
  }

  /** The Prometheus text exposition of every metric (for GET /metrics). */
  async prometheusText(): Promise<string> {
    const { resourceMetrics } = await this.exporter.collect();
    return this.serializer.serialize(resourceMetrics);
  }

  /** Stops the event-loop monitor and the provider. Safe to call twice. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.loopDelay.disable();
    clearInterval(this.lagTimer);
    this.gcObserver.disconnect();
    await this.provider.shutdown();
  }
}

function observeReading(r: { observe(value: number, attributes?: Attributes): void }, v: MetricReading): void {
  if (typeof v === 'number') r.observe(v);
  else for (const [value, attrs] of v) r.observe(value, attrs);
}
