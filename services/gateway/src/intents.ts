/**
 * Intent micro-batching: accepted intents of one channel are coalesced for
 * INTENT_BATCH_MS (0 = the next event-loop turn) or until INTENT_BATCH_MAX
 * are waiting, then published as one `IntentBatch` to `ch.<C>.in`, so the bus
 * carries batches, not presses (DESIGN.md, data flow 3).
 *
 * Viewer sockets that joined the channel ride in the same micro-batch
 * (`IntentBatch.joins`; the shard answers each with a balance frame): a
 * batch may carry joins and no intent. Joins have their own INTENT_BATCH_MAX
 * bound (a join storm is published in slices) and do not count towards the
 * intents' one, so acts are batched as before.
 *
 * Tracing (on only with the OTEL_* settings): each intent's span context rides
 * with it; the batch's publish span is a child of the first intent's span and
 * LINKS every intent's span (a link per intent, up to the SDK's link limit of
 * 128), and it is active while the batch is published, so the bus carries its
 * `traceparent` to the shard. Off: no span, no link, nothing kept per intent.
 */
import { context, ROOT_CONTEXT, SpanKind, trace, type Link, type SpanContext } from '@opentelemetry/api';
import { encodeJson, type Bus, type Subjects } from '@crowdplay/bus';
import type { BusIntent, IntentBatch } from '@crowdplay/protocol';
import { tracer, tracingOn, type Logger } from '@crowdplay/telemetry';
import type { GatewayMetrics } from './metrics.ts';

/** Options of {@link IntentBatcher}. */
export interface IntentBatcherOptions {
  /** This gateway's id (IntentBatch.gw: where the shard sends the acks). */
  gatewayId: string;
  /** INTENT_BATCH_MS: how long a channel's first intent waits for company, ms (0 = setImmediate). */
  batchMs: number;
  /** INTENT_BATCH_MAX: a batch this long is published at once, intents. */
  batchMax: number;
}

/** A viewer socket that joined a channel, as `IntentBatch.joins` lists it. */
export interface BusJoin {
  conn: number;
  viewer: string;
}

interface PendingBatch {
  intents: BusIntent[];
  /** Span contexts of the traced intents (tracing on only; the first one is the batch span's parent). */
  traced: SpanContext[] | undefined;
  joins: BusJoin[];
  timer: ReturnType<typeof setTimeout> | undefined;
  immediate: ReturnType<typeof setImmediate> | undefined;
}

/** Per-channel micro-batches of intents and joins. One timer per channel with pending work, none per intent. */
export class IntentBatcher {
  private readonly pending = new Map<string, PendingBatch>();

  constructor(
    private readonly bus: Bus,
    private readonly subjects: Subjects,
    private readonly opts: IntentBatcherOptions,
    private readonly metrics: GatewayMetrics,
    private readonly logger: Logger,
  ) {}

  /** Intents waiting across all channels. */
  get waiting(): number {
    let n = 0;
    for (const b of this.pending.values()) n += b.intents.length;
    return n;
  }

  /**
   * Appends an accepted intent to its channel's batch (publishing it when it holds INTENT_BATCH_MAX intents).
   * @param span the intent's span context when it is traced: the batch's publish span links it
   */
  add(channel: string, intent: BusIntent, span?: SpanContext): void {
    const b = this.batchOf(channel);
    b.intents.push(intent);
    if (span !== undefined) (b.traced ??= []).push(span);
    if (b.intents.length >= this.opts.batchMax) this.flushChannel(channel, b);
  }

  /**
   * Appends a viewer socket that joined `channel` (after its welcome) to the
   * channel's batch (publishing it when it holds INTENT_BATCH_MAX joins).
   */
  join(channel: string, conn: number, viewer: string): void {
    const b = this.batchOf(channel);
    b.joins.push({ conn, viewer });
    if (b.joins.length >= this.opts.batchMax) this.flushChannel(channel, b);
  }

  /** Publishes every pending batch now (drain). */
  flushAll(): void {
    for (const [channel, b] of [...this.pending]) this.flushChannel(channel, b);
  }

  /** Cancels timers and forgets pending intents (after `flushAll` on a drain). */
  close(): void {
    for (const b of this.pending.values()) {
      clearTimeout(b.timer);
      if (b.immediate) clearImmediate(b.immediate);
    }
    this.pending.clear();
  }

  /** The channel's pending batch, created (with its timer) when there is none. */
  private batchOf(channel: string): PendingBatch {
    const found = this.pending.get(channel);
    if (found) return found;
    const batch: PendingBatch = { intents: [], joins: [], traced: undefined, timer: undefined, immediate: undefined };
    this.pending.set(channel, batch);
    if (this.opts.batchMs === 0) batch.immediate = setImmediate(() => this.flushChannel(channel, batch));
    else batch.timer = setTimeout(() => this.flushChannel(channel, batch), this.opts.batchMs);
    return batch;
  }

  private flushChannel(channel: string, b: PendingBatch): void {
    if (this.pending.get(channel) !== b) return; // already flushed
    this.pending.delete(channel);
    clearTimeout(b.timer);
    if (b.immediate) clearImmediate(b.immediate);
    if (b.intents.length === 0 && b.joins.length === 0) return;
    const batch: IntentBatch = { gw: this.opts.gatewayId, intents: b.intents };
    if (b.joins.length > 0) batch.joins = b.joins;
    try {
      if (b.traced !== undefined && tracingOn()) this.publishTraced(channel, batch, b.traced);
      else if (tracingOn()) context.with(ROOT_CONTEXT, () => this.bus.publish(this.subjects.channelIn(channel), encodeJson(batch)));
      else this.bus.publish(this.subjects.channelIn(channel), encodeJson(batch));
    } catch (err) {
      // Only a malformed subject throws (channel ids are validated at connect): a bug, not load.
      this.logger.error({ err, channel, intents: b.intents.length, joins: b.joins.length }, 'intent batch publish failed');
      return;
    }
    if (b.intents.length === 0) return; // join-only batches are not counted: intents ÷ batches stays the batching factor
    this.metrics.intentBatches.add(1);
    this.metrics.intentsForwarded.add(b.intents.length);
  }

  /** Publishes `batch` inside its publish span: child of the first traced intent, a link to each. */
  private publishTraced(channel: string, batch: IntentBatch, traced: SpanContext[]): void {
    const links: Link[] = traced.map((c) => ({ context: c }));
    const span = tracer().startSpan(
      'crowdplay.intent_batch.publish',
      {
        kind: SpanKind.PRODUCER,
        links,
        attributes: {
          'messaging.system': 'crowdplay-bus',
          'messaging.operation.type': 'publish',
          'messaging.batch.message_count': batch.intents.length,
          'crowdplay.channel': channel,
          'crowdplay.gateway': batch.gw,
        },
      },
      trace.setSpanContext(ROOT_CONTEXT, traced[0]!),
    );
    try {
      context.with(trace.setSpan(ROOT_CONTEXT, span), () => this.bus.publish(this.subjects.channelIn(channel), encodeJson(batch)));
    } finally {
      span.end();
    }
  }
}
