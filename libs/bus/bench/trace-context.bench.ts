/**
 * `npm run bench -- trace-context [--json FILE] [--n 2000000]`
 *
 * What tracing costs the hot path, on one core, tracing OFF (no OTEL_*
 * setting: no SDK registered) and ON (the NodeSDK from libs/telemetry with
 * an OTLP/HTTP JSON exporter to a local sink that answers 200):
 * - `guard`: `tracingOn()`, the one call every intent pays (gateway
 *   onCrowdText) whether tracing is on or off;
 * - `bus-hooks`: what every bus message pays in the adapters: the publish
 *   side `publishHeaders(undefined)` and the delivery side `runInContext`
 *   (extract + context.with) around a no-op handler;
 * - `bus`: InProcessBus publish → delivery of one message (the whole path, hooks included);
 * - `intent-span` (ON only): one `crowdplay.intent` span started and ended plus one link, what a traced intent adds.
 * ns/op is the median of 5 runs of `--n` operations.
 */
import { createServer } from 'node:http';
import { writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { AddressInfo } from 'node:net';
import { ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api';
import { createTelemetry, OTEL_OFF, tracer, tracingOn, type OtelSettings } from '@crowdplay/telemetry';
import { InProcessBus, publishHeaders, runInContext, type BusMessage } from '../src/index.ts';

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function nsPerOp(n: number, fn: (i: number) => void): number {
  const runs: number[] = [];
  for (let r = 0; r < 6; r++) {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) fn(i);
    const ms = performance.now() - t0;
    if (r > 0) runs.push((ms * 1e6) / n); // the first run warms up
  }
  return median(runs);
}

async function busNsPerOp(n: number): Promise<number> {
  const runs: number[] = [];
  for (let r = 0; r < 6; r++) {
    const bus = new InProcessBus();
    let got = 0;
    bus.subscribe('b.x', () => void got++);
    const data = new Uint8Array(16);
    const t0 = performance.now();
    for (let i = 0; i < n; i++) bus.publish('b.x', data);
    await bus.flush();
    const ms = performance.now() - t0;
    if (got !== n) throw new Error(`delivered ${got} of ${n}`);
    await bus.close();
    if (r > 0) runs.push((ms * 1e6) / n);
  }
  return median(runs);
}

async function measure(n: number): Promise<Record<string, number>> {
  let sink = 0;
  const msg: BusMessage = { subject: 's', data: new Uint8Array(0), headers: undefined, reply: undefined, respond: () => undefined };
  const handler = (): void => void sink++;
  const out: Record<string, number> = {
    guard: nsPerOp(n, () => {
      if (tracingOn()) sink++;
    }),
    'bus-hooks': nsPerOp(n, () => {
      if (publishHeaders(undefined) !== undefined) sink++;
      runInContext(handler, msg);
    }),
    bus: await busNsPerOp(Math.min(n, 500_000)),
  };
  if (tracingOn()) {
    const parent = tracer().startSpan('parent');
    const link = { context: parent.spanContext() };
    out['intent-span'] = nsPerOp(Math.min(n, 200_000), () => {
      const span = tracer().startSpan('crowdplay.intent', { kind: SpanKind.SERVER, links: [link] }, ROOT_CONTEXT);
      span.end();
    });
    parent.end();
  }
  if (sink < 0) console.log(sink);
  return out;
}

export async function main(args: readonly string[]): Promise<number> {
  const { values } = parseArgs({ args: [...args], options: { json: { type: 'string' }, n: { type: 'string', default: '2000000' } } });
  const n = Number(values.n);
  const off = await measure(n);
  // ON: a sink answering 200 to every export (the exports happen beside the timed loops).
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const settings: OtelSettings = {
    ...OTEL_OFF,
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    protocol: 'http/json',
    metricsExporter: 'none',
  };
  const t = createTelemetry({ service: 'bench', level: 'silent', refusalLogIntervalMs: 60_000, otel: settings });
  const on = await measure(n);
  await t.close();
  server.close();
  if (trace.getTracerProvider() === undefined) throw new Error('unreachable');
  const rows = Object.keys(on).map((k) => ({ op: k, offNs: off[k], onNs: on[k] }));
  console.log(`trace-context bench (${cpus()[0]?.model ?? 'cpu'}, node ${process.version}), ns/op, median of 5 × ${n}`);
  for (const r of rows)
    console.log(
      `${r.op.padEnd(12)} off ${r.offNs === undefined ? '—' : r.offNs.toFixed(1).padStart(8)}   on ${r.onNs!.toFixed(1).padStart(8)}`,
    );
  if (values.json) writeFileSync(values.json, `${JSON.stringify({ n, node: process.version, cpu: cpus()[0]?.model, rows }, null, 2)}\n`);
  return 0;
}
