/**
 * libs/telemetry's OpenTelemetry wiring in one process, on the machine's
 * PostgreSQL and Redis:
 * - with no OTEL_* setting (loadConfig({})) nothing is started: no tracer
 *   provider, no span, no instrumentation patch, no bus header, no socket
 *   opened by the SDK;
 * - with OTEL_EXPORTER_OTLP_ENDPOINT (a collector stub, http/json), spans
 *   and pushed metrics reach it; pg and ioredis, imported (ESM) before the
 *   SDK started, are traced as children of the active span (the patches
 *   applied to the loaded modules); the in-process bus carries `traceparent`;
 * - bad OTEL_* values are refused by the config with the variable named.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { createRequire } from 'node:module';
import pg from 'pg';
import { Redis } from 'ioredis';
import { context, trace } from '@opentelemetry/api';
import { loadConfig } from '@crowdplay/config';
import { InProcessBus, type BusMessage } from '@crowdplay/bus';
import { createTelemetry, traceCarrier, tracer, tracingOn } from '@crowdplay/telemetry';
import { serviceUrls } from '@crowdplay/testing';
import { startCollectorStub, type CollectorStub, type StubSpan } from '../otel-collector.ts';
import { until } from '../helpers.ts';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Counts TCP connects made while `fn` runs. */
async function countConnects(fn: () => Promise<void>): Promise<string[]> {
  const seen: string[] = [];
  const original = net.Socket.prototype.connect;
  net.Socket.prototype.connect = function (this: net.Socket, ...args: unknown[]) {
    seen.push(JSON.stringify(args[0]).slice(0, 100));
    return (original as (...a: unknown[]) => net.Socket).apply(this, args);
  } as typeof original;
  try {
    await fn();
  } finally {
    net.Socket.prototype.connect = original;
  }
  return seen;
}

describe('OpenTelemetry SDK (libs/telemetry) in one process', () => {
  let urls: Awaited<ReturnType<typeof serviceUrls>>;
  let pool: pg.Pool;
  let redis: Redis;
  let stub: CollectorStub;

  before(async () => {
    urls = await serviceUrls();
    pool = new pg.Pool({ connectionString: urls.databaseUrl, max: 1 });
    redis = new Redis(urls.redisUrl, { lazyConnect: true });
    await redis.connect();
    stub = await startCollectorStub();
  });

  after(async () => {
    await pool.end();
    redis.disconnect();
    await stub.close();
  });

  it('no OTEL_* setting: no SDK, no span, no patch, no header, no connection', async () => {
    const config = loadConfig({});
    assert.equal(config.otel.endpoint, '');
    const connects = await countConnects(async () => {
      const t = createTelemetry({ service: 'test', level: 'silent', refusalLogIntervalMs: 1_000, otel: config.otel });
      assert.equal(t.tracing, false);
      assert.equal(tracingOn(), false);
      const span = tracer().startSpan('nothing');
      assert.equal(span.isRecording(), false, 'the no-op tracer');
      assert.equal(trace.getSpan(context.active()), undefined);
      assert.equal(traceCarrier(), undefined);
      assert.equal((pg.Client.prototype.query as { __wrapped?: boolean }).__wrapped, undefined, 'pg untouched');
      assert.equal((Redis.prototype.sendCommand as { __wrapped?: boolean }).__wrapped, undefined, 'ioredis untouched');
      // Not even loaded (~10 MB resident saved in every process that does not trace): require.cache is the CommonJS
      // loader's, where an ESM import of these (CommonJS) packages lands too.
      const loaded = (pkg: string): boolean =>
        Object.keys(createRequire(import.meta.url).cache).some((k) => k.includes(`/@opentelemetry/${pkg}/`));
      assert.equal(loaded('api'), true, 'the check sees what is loaded');
      for (const pkg of ['sdk-node', 'instrumentation-http', 'instrumentation-pg', 'instrumentation-ioredis'])
        assert.equal(loaded(pkg), false, pkg);
      const bus = new InProcessBus();
      const got: BusMessage[] = [];
      bus.subscribe('a.b', (m) => got.push(m));
      bus.publish('a.b', new Uint8Array([1]));
      await bus.flush();
      assert.equal(got[0]?.headers, undefined, 'no header added');
      await bus.close();
      const text = await t.metrics.prometheusText();
      assert.doesNotMatch(text, /crowdplay_otel_spans_dropped/);
      assert.match(text, /target_info\{[^}]*service_name="crowdplay-test"/, '/metrics names the process');
      await sleep(300);
      await t.close();
      const named = createTelemetry({
        service: 'test',
        level: 'silent',
        refusalLogIntervalMs: 1_000,
        otel: loadConfig({ OTEL_SERVICE_NAME: 'foo' }).otel,
      });
      assert.match(await named.metrics.prometheusText(), /target_info\{[^}]*service_name="foo"/, 'OTEL_SERVICE_NAME in /metrics');
      await named.close();
    });
    assert.deepEqual(connects, [], 'the SDK opened no connection');
    assert.deepEqual(stub.requests, []);
  });

  it('OTEL_EXPORTER_OTLP_ENDPOINT: spans and metrics reach the collector; pg, ioredis and the bus continue the active span', async () => {
    const config = loadConfig({
      OTEL_EXPORTER_OTLP_ENDPOINT: stub.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '50',
      OTEL_METRIC_EXPORT_INTERVAL: '200',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=test,team=crowd%20play',
    });
    const t = createTelemetry({ service: 'sdk-test', level: 'silent', refusalLogIntervalMs: 1_000, otel: config.otel });
    try {
      assert.equal(t.tracing, true);
      assert.equal(tracingOn(), true);
      t.metrics.counter('crowdplay_granted_points_total').add(1);
      const bus = new InProcessBus();
      let seenHeader: string | undefined;
      let seenTrace: string | undefined;
      bus.subscribe('x.y', (m) => {
        seenHeader = m.headers?.traceparent;
        seenTrace = trace.getSpan(context.active())?.spanContext().traceId;
      });
      let root = '';
      let rootTrace = '';
      await tracer().startActiveSpan('test.root', async (span) => {
        root = span.spanContext().spanId;
        rootTrace = span.spanContext().traceId;
        await pool.query('SELECT 1 AS one');
        await redis.get('crowdplay-otel-test-missing');
        bus.publish('x.y', new Uint8Array([1]), { headers: { own: 'kept' } });
        await bus.flush();
        span.end();
      });
      // Outside any span: pg and ioredis make no span (requireParentSpan).
      await pool.query('SELECT 2 AS two');
      await bus.close();
      assert.match(seenHeader ?? '', new RegExp(`^00-${rootTrace}-[0-9a-f]{16}-01$`), 'traceparent on the bus message');
      assert.equal(seenTrace, rootTrace, 'the handler runs in the publisher’s trace');
      const system = (s: StubSpan): unknown => s.attributes['db.system'] ?? s.attributes['db.system.name'];
      const children = (): StubSpan[] => stub.spans.filter((s) => s.traceId === rootTrace && s.parentSpanId === root);
      await until(
        () => children().some((s) => system(s) === 'postgresql') && children().some((s) => system(s) === 'redis'),
        'a pg and a redis span at the collector',
        5_000,
      ).catch(() => undefined); // the asserts below say which one is missing
      const spans = stub.spans.filter((s) => s.traceId === rootTrace);
      const pgSpan = children().find((s) => system(s) === 'postgresql');
      const redisSpan = children().find((s) => system(s) === 'redis');
      assert.ok(pgSpan, `a pg span under the root: ${JSON.stringify(spans.map((s) => [s.name, s.attributes]))}`);
      assert.ok(redisSpan, `an ioredis span under the root: ${JSON.stringify(spans.map((s) => s.name))}`);
      assert.equal(spans.find((s) => s.name === 'test.root')?.service, 'crowdplay-sdk-test');
      assert.ok(
        !stub.spans.some((s) => /SELECT 2/.test(String(s.attributes['db.statement'] ?? s.attributes['db.query.text'] ?? ''))),
        'no root pg span',
      );
      await until(() => stub.metrics.get('crowdplay-sdk-test')?.has('crowdplay_granted_points_total'), 'the metric push');
    } finally {
      await t.close();
    }
    assert.equal(tracingOn(), false, 'off after close');
    assert.equal((pg.Client.prototype.query as { __wrapped?: boolean }).__wrapped, undefined, 'pg unpatched after close');
  });

  it('the default protocol (http/protobuf) posts protobuf to /v1/traces; grpc loads and shuts down with no collector', async () => {
    const seen: Array<{ path: string; type: string }> = [];
    const { createServer } = await import('node:http');
    const server = createServer((req, res) => {
      seen.push({ path: req.url ?? '', type: String(req.headers['content-type']) });
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end());
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    try {
      const proto = createTelemetry({
        service: 'proto',
        level: 'silent',
        refusalLogIntervalMs: 1_000,
        otel: loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}/`, OTEL_METRICS_EXPORTER: 'none' }).otel,
      });
      tracer().startSpan('proto.span').end();
      await proto.close(); // flushes
      assert.deepEqual(seen, [{ path: '/v1/traces', type: 'application/x-protobuf' }]);
      // grpc: nothing listens on the port; the export fails within OTEL_EXPORTER_OTLP_TIMEOUT and close() still returns.
      const grpc = createTelemetry({
        service: 'grpc',
        level: 'silent',
        refusalLogIntervalMs: 1_000,
        otel: loadConfig({
          OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1',
          OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
          OTEL_EXPORTER_OTLP_TIMEOUT: '500',
        }).otel,
      });
      assert.equal(grpc.tracing, true);
      tracer().startSpan('grpc.span').end();
      const t0 = Date.now();
      await grpc.close();
      assert.ok(Date.now() - t0 < 10_000, `grpc close took ${Date.now() - t0} ms`);
      assert.equal(tracingOn(), false);
    } finally {
      server.close();
    }
  });

  it('bad OTEL_* values are refused by the config, naming the variable', () => {
    for (const [k, v] of [
      ['OTEL_TRACES_SAMPLER_ARG', '1.5'],
      ['OTEL_TRACES_SAMPLER', 'sometimes'],
      ['OTEL_EXPORTER_OTLP_PROTOCOL', 'udp'],
      ['OTEL_EXPORTER_OTLP_ENDPOINT', 'ftp://x'],
      ['OTEL_RESOURCE_ATTRIBUTES', 'novalue'],
      ['OTEL_TRACES_EXPORTER', 'zipkin'],
    ] as const) {
      assert.throws(
        () => loadConfig({ [k]: v }),
        (err: Error) => err.message.includes(k),
        `${k}=${v}`,
      );
    }
  });
});
