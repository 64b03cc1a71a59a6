/**
 * W3C trace context across the bus. Both adapters call these, so a span
 * active where a message is published continues where it is handled, in
 * another process (NATS headers) or this one (in-process bus).
 *
 * With tracing off (no OpenTelemetry SDK registered) no span is ever active:
 * `publishHeaders` returns the headers it was given and `runInContext` calls
 * the handler directly; no header is added to any message.
 */
import { context, propagation, ROOT_CONTEXT, trace, type Context } from '@opentelemetry/api';
import type { BusHandler, BusMessage, Headers } from './bus.ts';

/** Header names the propagator writes; a publisher's own headers of these names are replaced. */
export const TRACE_HEADERS = ['traceparent', 'tracestate'] as const;

/**
 * `headers` plus the active span's `traceparent` (and `tracestate`), or
 * `headers` unchanged when no span is active (never mutates the argument).
 */
export function publishHeaders(headers: Headers | undefined): Headers | undefined {
  const ctx = context.active();
  if (trace.getSpan(ctx) === undefined) return headers;
  const out: Headers = headers === undefined ? {} : { ...headers };
  propagation.inject(ctx, out);
  return out;
}

/** The context a message's headers carry (ROOT_CONTEXT when they carry none). */
export function messageContext(headers: Headers | undefined): Context {
  if (headers === undefined || headers.traceparent === undefined) return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, headers);
}

/**
 * Runs `handler(msg)` in the trace context of the message's headers, or in
 * the root context when they carry none (a handler never inherits the
 * context of whatever delivered the message).
 */
export function runInContext(handler: BusHandler, msg: BusMessage): void {
  context.with(messageContext(msg.headers), handler, undefined, msg);
}
