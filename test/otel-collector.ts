/**
 * A local OTLP/HTTP collector stub for the tests: accepts JSON exports
 * (OTEL_EXPORTER_OTLP_PROTOCOL=http/json) at /v1/traces and /v1/metrics and
 * keeps what it received. Not a collector: no protobuf, no retries, no limits.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One received span, flattened with its process's service.name. */
export interface StubSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  links: Array<{ traceId: string; spanId: string }>;
  attributes: Record<string, unknown>;
}

export interface CollectorStub {
  /** Base URL for OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string;
  spans: StubSpan[];
  /** Metric names received over OTLP, by service.name. */
  metrics: Map<string, Set<string>>;
  /** Every request (method and path) the stub got. */
  requests: string[];
  close(): Promise<void>;
}

interface AnyValue {
  stringValue?: string;
  intValue?: number | string;
  doubleValue?: number;
  boolValue?: boolean;
}
type KeyValue = { key: string; value: AnyValue };

function attrs(list: KeyValue[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of list ?? []) out[kv.key] = kv.value.stringValue ?? kv.value.intValue ?? kv.value.doubleValue ?? kv.value.boolValue;
  return out;
}

/** Starts the stub on 127.0.0.1 on a free port. */
export async function startCollectorStub(): Promise<CollectorStub> {
  const spans: StubSpan[] = [];
  const metrics = new Map<string, Set<string>>();
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.push(`${req.method} ${req.url}`);
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
        if (req.url === '/v1/traces') {
          for (const rs of (body.resourceSpans ?? []) as Array<{ resource?: { attributes?: KeyValue[] }; scopeSpans?: unknown[] }>) {
            const service = String(attrs(rs.resource?.attributes)['service.name']);
            for (const ss of (rs.scopeSpans ?? []) as Array<{ spans?: unknown[] }>) {
              for (const s of (ss.spans ?? []) as Array<Record<string, unknown>>) {
                spans.push({
                  service,
                  traceId: String(s.traceId),
                  spanId: String(s.spanId),
                  parentSpanId: String(s.parentSpanId ?? ''),
                  name: String(s.name),
                  kind: Number(s.kind),
                  links: ((s.links ?? []) as Array<{ traceId: string; spanId: string }>).map((l) => ({
                    traceId: l.traceId,
                    spanId: l.spanId,
                  })),
                  attributes: attrs(s.attributes as KeyValue[] | undefined),
                });
              }
            }
          }
        } else if (req.url === '/v1/metrics') {
          for (const rm of (body.resourceMetrics ?? []) as Array<{ resource?: { attributes?: KeyValue[] }; scopeMetrics?: unknown[] }>) {
            const service = String(attrs(rm.resource?.attributes)['service.name']);
            const set = metrics.get(service) ?? new Set<string>();
            metrics.set(service, set);
            for (const sm of (rm.scopeMetrics ?? []) as Array<{ metrics?: Array<{ name: string }> }>)
              for (const m of sm.metrics ?? []) set.add(m.name);
          }
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } catch {
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    metrics,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
