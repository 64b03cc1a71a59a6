/**
 * OpenTelemetry tracing of one process: the NodeSDK, configured from the
 * `otel` section of the Config (the OTEL_* settings declared in libs/config),
 * never from process.env by us.
 *
 * Off (the default: no OTEL_EXPORTER_OTLP_ENDPOINT, no OTEL_TRACES_EXPORTER):
 * no SDK, no tracer provider, no instrumentation, no exporter, no network
 * attempt; `tracingOn()` is false and the hot paths create no span object.
 *
 * On: W3C trace context (`traceparent`) is the propagator; spans go through a
 * BatchSpanProcessor (OTEL_BSP_*) to the OTLP exporter of
 * OTEL_EXPORTER_OTLP_PROTOCOL (or the console); HTTP (every fastify route but
 * the probes and /metrics), pg and ioredis are instrumented with the standard
 * instrumentations. Those hook `require`, and every service imports them
 * (ESM, or the esbuild bundle's external imports) before the configuration is
 * read, so `require-in-the-middle` never sees them load: the SDK applies each
 * instrumentation's own patch to the module already in `require.cache` (the
 * same object an ESM `import` of a CommonJS package gets; patches are on
 * prototypes). pg and ioredis spans are made only inside a traced operation
 * (requireParentSpan), so BullMQ's polling of Redis does not make traces.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { readFileSync, existsSync } from 'node:fs';
import { hostname } from 'node:os';
import {
  context,
  diag,
  DiagLogLevel,
  propagation,
  ROOT_CONTEXT,
  trace,
  SpanKind,
  SpanStatusCode,
  type Attributes,
  type Context,
  type Span,
  type DiagLogger,
  type TextMapGetter,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { Instrumentation, InstrumentationModuleDefinition } from '@opentelemetry/instrumentation';
import type * as InstrumentationHttp from '@opentelemetry/instrumentation-http';
import type * as InstrumentationIORedis from '@opentelemetry/instrumentation-ioredis';
import type * as InstrumentationPg from '@opentelemetry/instrumentation-pg';
import { defaultResource, resourceFromAttributes, type Resource } from '@opentelemetry/resources';
import type { PushMetricExporter } from '@opentelemetry/sdk-metrics';
import type * as SdkNode from '@opentelemetry/sdk-node';
import type { NodeSDK } from '@opentelemetry/sdk-node';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ConsoleSpanExporter,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  type Sampler,
  type SpanExporter,
} from '@opentelemetry/sdk-trace';
import type { Logger } from 'pino';

/** The OTEL_* settings (libs/config `otel` section; the same shape, so Config['otel'] passes as is). */
export interface OtelSettings {
  readonly sdkDisabled: boolean;
  /** Empty: `crowdplay-<service>`. */
  readonly serviceName: string;
  /** `k=v,k=v`. */
  readonly resourceAttributes: string;
  readonly tracesExporter: '' | 'otlp' | 'console' | 'none';
  readonly metricsExporter: '' | 'otlp' | 'prometheus' | 'console' | 'none';
  /** OTLP base URL, or '' (nothing exported). */
  readonly endpoint: string;
  readonly protocol: 'http/protobuf' | 'http/json' | 'grpc';
  /** `k=v,k=v`, values percent-decoded. */
  readonly headers: string;
  readonly timeoutMs: number;
  readonly sampler:
    'parentbased_always_on' | 'parentbased_always_off' | 'parentbased_traceidratio' | 'always_on' | 'always_off' | 'traceidratio';
  /** A ratio 0–1, as text. */
  readonly samplerArg: string;
  readonly exportIntervalMs: number;
  readonly spanQueueMax: number;
  readonly spanExportDelayMs: number;
}

/** OpenTelemetry's own defaults: off unless an endpoint or exporter is set. */
export const OTEL_OFF: OtelSettings = {
  sdkDisabled: false,
  serviceName: '',
  resourceAttributes: '',
  tracesExporter: '',
  metricsExporter: '',
  endpoint: '',
  protocol: 'http/protobuf',
  headers: '',
  timeoutMs: 10_000,
  sampler: 'parentbased_always_on',
  samplerArg: '1',
  exportIntervalMs: 60_000,
  spanQueueMax: 2_048,
  spanExportDelayMs: 5_000,
};

/** The trace exporter the settings select: `otlp` when an endpoint is set and none is named; `none` when disabled. */
export function tracesExporterOf(s: OtelSettings): 'otlp' | 'console' | 'none' {
  if (s.sdkDisabled) return 'none';
  if (s.tracesExporter === '') return s.endpoint ? 'otlp' : 'none';
  if (s.tracesExporter === 'otlp' && !s.endpoint) return 'none';
  return s.tracesExporter;
}

/** The metric push the settings select (GET /metrics answers whatever this is). */
export function metricsExporterOf(s: OtelSettings): 'otlp' | 'console' | 'none' {
  if (s.sdkDisabled) return 'none';
  if (s.metricsExporter === '') return s.endpoint ? 'otlp' : 'none';
  if (s.metricsExporter === 'otlp') return s.endpoint ? 'otlp' : 'none';
  return s.metricsExporter === 'console' ? 'console' : 'none';
}

/**
 * `k=v,k2=v2` → record (values percent-decoded, keys and values trimmed).
 * @throws TypeError on a pair without `=` (config validated the shape first)
 */
export function parseKeyValues(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  if (text.trim() === '') return out;
  for (const pair of text.split(',')) {
    const at = pair.indexOf('=');
    if (at <= 0) throw new TypeError(`not a key=value pair: "${pair}"`);
    out[pair.slice(0, at).trim()] = decodeURIComponent(pair.slice(at + 1).trim());
  }
  return out;
}

const requireHere = createRequire(import.meta.url);

/** An exporter package, loaded only when its protocol is chosen (grpc pulls in @grpc/grpc-js). */
function loadExporter<T>(pkg: string, name: string): new (config: Record<string, unknown>) => T {
  const mod = requireHere(pkg) as Record<string, new (config: Record<string, unknown>) => T>;
  const ctor = mod[name];
  if (typeof ctor !== 'function') throw new Error(`${pkg} has no ${name}`);
  return ctor;
}

function otlpConfig(s: OtelSettings, signal: 'traces' | 'metrics'): Record<string, unknown> {
  const base = s.endpoint.replace(/\/+$/, '');
  return {
    url: s.protocol === 'grpc' ? base : `${base}/v1/${signal}`,
    headers: parseKeyValues(s.headers),
    timeoutMillis: s.timeoutMs,
  };
}

function spanExporter(s: OtelSettings): SpanExporter {
  if (tracesExporterOf(s) === 'console') return new ConsoleSpanExporter();
  const pkg = { 'http/json': 'http', 'http/protobuf': 'proto', grpc: 'grpc' }[s.protocol];
  const Ctor = loadExporter<SpanExporter>(`@opentelemetry/exporter-trace-otlp-${pkg}`, 'OTLPTraceExporter');
  return new Ctor(otlpConfig(s, 'traces'));
}

/**
 * The OTLP (or console) metric exporter the settings select, or undefined
 * (no push). GET /metrics is served either way.
 */
export function metricExporter(s: OtelSettings): PushMetricExporter | undefined {
  const kind = metricsExporterOf(s);
  if (kind === 'none') return undefined;
  if (kind === 'console') return new (loadExporter<PushMetricExporter>('@opentelemetry/sdk-metrics', 'ConsoleMetricExporter'))({});
  const pkg = { 'http/json': 'http', 'http/protobuf': 'proto', grpc: 'grpc' }[s.protocol];
  const Ctor = loadExporter<PushMetricExporter>(`@opentelemetry/exporter-metrics-otlp-${pkg}`, 'OTLPMetricExporter');
  return new Ctor(otlpConfig(s, 'metrics'));
}

/** OTEL_TRACES_SAMPLER(_ARG) → the sampler (the OpenTelemetry specification's names). */
export function samplerOf(s: OtelSettings): Sampler {
  const ratio = Math.min(1, Math.max(0, Number(s.samplerArg)));
  switch (s.sampler) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return new TraceIdRatioBasedSampler(ratio);
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) });
    default:
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
  }
}

/** The resource of the process's spans and pushed metrics: service.name, instance id, OTEL_RESOURCE_ATTRIBUTES. */
export function resourceOf(s: OtelSettings, service: string): Resource {
  return defaultResource().merge(
    resourceFromAttributes({
      'service.namespace': 'crowdplay',
      'service.instance.id': `${hostname()}-${process.pid}`,
      ...parseKeyValues(s.resourceAttributes),
      'service.name': s.serviceName || `crowdplay-${service}`,
    }),
  );
}

/** The version field of the package.json above `file` whose name is `name`. */
function packageVersion(file: string, name: string): string | undefined {
  for (let dir = dirname(file); dir !== dirname(dir); dir = dirname(dir)) {
    const pj = join(dir, 'package.json');
    if (!existsSync(pj)) continue;
    try {
      const p = JSON.parse(readFileSync(pj, 'utf8')) as { name?: string; version?: string };
      if (p.name === name) return p.version;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/**
 * Applies `instr`'s patches to the modules it targets that are already
 * loaded (see the module comment: ESM imports and the bundle load them before
 * the SDK starts). Node built-ins (`http`) are patched on their one exports
 * object; packages when `require.cache` holds them.
 * (`getModuleDefinitions()` builds fresh definitions, so `disable()` does
 * not undo these: call each result's `unpatch()`.)
 * @returns the modules patched here
 */
export function patchLoadedModules(instr: Instrumentation): PatchedModule[] {
  const patched: PatchedModule[] = [];
  const defs =
    (instr as Instrumentation & { getModuleDefinitions?: () => InstrumentationModuleDefinition[] }).getModuleDefinitions?.() ?? [];
  for (const def of defs) {
    if (typeof def.patch !== 'function') continue;
    let exports: unknown;
    let version: string | undefined;
    if (def.name === 'http' || def.name === 'https') {
      exports = requireHere(`node:${def.name}`);
      version = process.versions.node;
    } else {
      let path: string;
      try {
        path = requireHere.resolve(def.name);
      } catch {
        continue; // not installed
      }
      const cached = requireHere.cache[path];
      if (!cached?.loaded) continue; // not loaded yet: require-in-the-middle patches it when it is
      exports = cached.exports;
      version = packageVersion(path, def.name);
    }
    if (def.moduleExports === exports) continue; // already patched through the require hook
    def.moduleExports = exports;
    def.moduleVersion = version;
    def.patch(exports, version);
    patched.push({
      name: def.name,
      // The require hook may have patched (and `disable()` unpatched) the same exports since: undo only what is still wrapped.
      unpatch: () => {
        if (stillWrapped(def.name, exports)) def.unpatch?.(exports, version);
      },
    });
  }
  return patched;
}

/** Whether the function each instrumentation wraps first in `name`'s exports is still wrapped (shimmer marks it `__wrapped`). */
function stillWrapped(name: string, exports: unknown): boolean {
  const e = exports as Record<string, { prototype?: Record<string, unknown> } | undefined> & { prototype?: Record<string, unknown> };
  const probe: Record<string, unknown> = {
    http: e.Server?.prototype?.emit,
    https: e.Server?.prototype?.emit,
    pg: e.Client?.prototype?.query,
    'pg-pool': e.prototype?.connect,
    ioredis: e.prototype?.sendCommand,
  };
  if (!(name in probe)) return true;
  return (probe[name] as { __wrapped?: boolean } | undefined)?.__wrapped === true;
}

/** A module {@link patchLoadedModules} patched, and how to undo it (the instrumentation's `disable()` does not know it). */
export interface PatchedModule {
  name: string;
  unpatch(): void;
}

/** Paths whose HTTP requests are not traced (probes and scrapes would be most of the spans). */
const UNTRACED_PATHS = new Set(['/metrics', '/healthz', '/readyz', '/livez']);

interface Running {
  sdk: NodeSDK;
  instrumentations: Instrumentation[];
  patched: PatchedModule[];
  users: number;
  counts: { droppedSpans: number };
}

let running: Running | undefined;
let tracerRef: Tracer | undefined;

/**
 * True while this process records spans. The hot paths (every intent) test
 * this before creating any span object, so tracing off costs one call.
 */
export function tracingOn(): boolean {
  return tracerRef !== undefined;
}

/** crowdplay's tracer. Only meaningful while `tracingOn()`; a no-op tracer otherwise. */
export function tracer(): Tracer {
  return tracerRef ?? trace.getTracer('crowdplay');
}

/** Spans dropped because OTEL_BSP_MAX_QUEUE_SIZE was reached, since tracing started in this process. */
export function droppedSpans(): number {
  return running?.counts.droppedSpans ?? 0;
}

/** Handle of {@link startTracing}. */
export interface TracingHandle {
  /** Whether this call turned tracing on (or joined it being on). */
  readonly enabled: boolean;
  /** Flushes the spans waiting and, for the last user, stops the SDK. Safe to call twice. */
  shutdown(): Promise<void>;
}

const OFF_HANDLE: TracingHandle = { enabled: false, shutdown: () => Promise.resolve() };

/** Routes the SDK's diagnostics to pino (at most one line per message text a minute) and counts dropped spans. */
function diagToPino(logger: Logger, r: { droppedSpans: number }): DiagLogger {
  const last = new Map<string, number>();
  const log =
    (level: 'warn' | 'error' | 'info' | 'debug') =>
    (message: string, ...args: unknown[]) => {
      const dropped = /^Dropped (\d+) spans/.exec(message);
      if (dropped) r.droppedSpans += Number(dropped[1]);
      const now = Date.now();
      const key = message.slice(0, 80);
      if ((last.get(key) ?? 0) > now - 60_000) return;
      if (last.size > 100) last.clear();
      last.set(key, now);
      logger[level]({ component: 'otel', detail: args.length > 0 ? String(args[0]) : undefined }, `otel: ${message}`);
    };
  return { error: log('error'), warn: log('warn'), info: log('info'), debug: log('debug'), verbose: log('debug') };
}

/**
 * Starts OpenTelemetry tracing for this process when the settings select a
 * trace exporter (see {@link tracesExporterOf}); else does nothing at all.
 * One SDK per process: a second call while it runs joins it (its settings
 * are ignored), and the SDK stops with its last user's `shutdown()`.
 *
 * @param service the process label (`standalone`, `gateway`, …): service.name is `crowdplay-<service>` unless OTEL_SERVICE_NAME
 * @throws Error when the chosen exporter package cannot be loaded
 */
export function startTracing(s: OtelSettings, service: string, logger: Logger): TracingHandle {
  if (tracesExporterOf(s) === 'none') return OFF_HANDLE;
  if (!running) {
    // Loaded here, not at import: the SDK and the instrumentations cost ~4 MB of heap and ~10 MB resident in a
    // process that never traces (measured: import of @opentelemetry/sdk-node, Node 20), which is the default.
    const { NodeSDK } = requireHere('@opentelemetry/sdk-node') as typeof SdkNode;
    const { HttpInstrumentation } = requireHere('@opentelemetry/instrumentation-http') as typeof InstrumentationHttp;
    const { PgInstrumentation } = requireHere('@opentelemetry/instrumentation-pg') as typeof InstrumentationPg;
    const { IORedisInstrumentation } = requireHere('@opentelemetry/instrumentation-ioredis') as typeof InstrumentationIORedis;
    const counts = { droppedSpans: 0 };
    diag.setLogger(diagToPino(logger, counts), { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
    const instrumentations: Instrumentation[] = [
      new HttpInstrumentation({
        ignoreIncomingRequestHook: (req) => UNTRACED_PATHS.has((req.url ?? '').split('?')[0] ?? ''),
        // Outgoing calls (Telegram, avatars) only inside a traced operation.
        requireParentforOutgoingSpans: true,
      }),
      new PgInstrumentation({ requireParentSpan: true }),
      new IORedisInstrumentation({ requireParentSpan: true }),
    ];
    const sdk = new NodeSDK({
      resource: resourceOf(s, service),
      autoDetectResources: false,
      textMapPropagator: new W3CTraceContextPropagator(),
      sampler: samplerOf(s),
      spanProcessors: [
        new BatchSpanProcessor({
          exporter: spanExporter(s),
          maxQueueSize: s.spanQueueMax,
          maxExportBatchSize: Math.min(512, s.spanQueueMax),
          scheduledDelayMillis: s.spanExportDelayMs,
          exportTimeoutMillis: s.timeoutMs,
        }),
      ],
      // Metrics have their own provider (Metrics: Prometheus text, optional OTLP push); logs are pino's.
      metricReaders: [],
      logRecordProcessors: [],
      instrumentations,
    });
    sdk.start();
    const patched = instrumentations.flatMap((i) => patchLoadedModules(i));
    running = { sdk, instrumentations, patched, users: 0, counts };
    tracerRef = trace.getTracerProvider().getTracer('crowdplay');
    logger.info(
      {
        exporter: tracesExporterOf(s),
        protocol: s.protocol,
        endpoint: s.endpoint || undefined,
        sampler: s.sampler,
        patchedLoaded: patched.map((p) => p.name),
      },
      'otel: tracing on',
    );
  }
  const cur = running;
  cur.users++;
  let done: Promise<void> | undefined;
  return {
    enabled: true,
    shutdown: () => {
      done ??= (async () => {
        if (--cur.users > 0) return;
        if (running === cur) {
          running = undefined;
          tracerRef = undefined;
        }
        await cur.sdk.shutdown().catch((err: unknown) => logger.warn({ err }, 'otel: shutdown failed'));
        for (const i of cur.instrumentations) i.disable();
        for (const p of cur.patched) p.unpatch();
        trace.disable();
        context.disable();
        propagation.disable();
        diag.disable();
      })();
      return done;
    },
  };
}

const recordGetter: TextMapGetter<Record<string, string>> = {
  keys: (c) => Object.keys(c),
  get: (c, k) => c[k],
};

/**
 * The trace context of the active span as W3C headers (`traceparent`,
 * `tracestate`) for a carrier that crosses a process (bus headers, job
 * data), or undefined when no span is active (tracing off: always).
 */
export function traceCarrier(ctx: Context = context.active()): Record<string, string> | undefined {
  if (trace.getSpan(ctx) === undefined) return undefined;
  const out: Record<string, string> = {};
  propagation.inject(ctx, out);
  return out.traceparent === undefined ? undefined : out;
}

/** The context a carrier from {@link traceCarrier} names (ROOT_CONTEXT when it names none). */
export function contextFromCarrier(carrier: Record<string, string> | undefined): Context {
  if (carrier === undefined || typeof carrier.traceparent !== 'string') return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, carrier, recordGetter);
}

/**
 * Runs `fn` inside a span named `name` whose parent is the context `carrier`
 * names (a root span when it names none), ending it when the promise
 * settles (status ERROR with the message when it rejects). Call it only when
 * `tracingOn()`; the callers keep an untraced path with no span.
 * Used where trace context crosses a queue (BullMQ job data).
 */
export async function withSpan<T>(
  name: string,
  opts: { carrier?: Record<string, string> | undefined; kind?: SpanKind; attributes?: Attributes },
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = contextFromCarrier(opts.carrier);
  return tracer().startActiveSpan(
    name,
    { kind: opts.kind ?? SpanKind.CONSUMER, attributes: opts.attributes ?? {} },
    parent,
    async (span) => {
      try {
        return await fn(span);
      } catch (err) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
        throw err;
      } finally {
        span.end();
      }
    },
  );
}
