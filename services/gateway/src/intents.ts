/**
 * Intent micro-batching: accepted intents of one channel are coalesced for
 * INTENT_BATCH_MS (0 = the next event-loop turn) or until INTENT_BATCH_MAX
 * are waiting, then published as one `IntentBatch` to `ch.<C>.in`, so the bus
 * carries batches, not presses (DESIGN.md, data flow 3).
 */
import { encodeJson, type Bus, type Subjects } from '@crowdplay/bus';
import type { BusIntent, IntentBatch } from '@crowdplay/protocol';
import type { Logger } from '@crowdplay/telemetry';
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

interface PendingBatch {
  intents: BusIntent[];
  timer: ReturnType<typeof setTimeout> | undefined;
  immediate: ReturnType<typeof setImmediate> | undefined;
}

/** Per-channel micro-batches of intents. One timer per channel with pending intents, none per intent. */
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

  /** Appends an accepted intent to its channel's batch (publishing it when full). */
  add(channel: string, intent: BusIntent): void {
    let b = this.pending.get(channel);
    if (!b) {
      b = { intents: [], timer: undefined, immediate: undefined };
      this.pending.set(channel, b);
      const batch = b;
      if (this.opts.batchMs === 0) batch.immediate = setImmediate(() => this.flushChannel(channel, batch));
      else batch.timer = setTimeout(() => this.flushChannel(channel, batch), this.opts.batchMs);
    }
    b.intents.push(intent);
    if (b.intents.length >= this.opts.batchMax) this.flushChannel(channel, b);
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

  private flushChannel(channel: string, b: PendingBatch): void {
    if (this.pending.get(channel) !== b) return; // already flushed
    this.pending.delete(channel);
    clearTimeout(b.timer);
    if (b.immediate) clearImmediate(b.immediate);
    if (b.intents.length === 0) return;
    const batch: IntentBatch = { gw: this.opts.gatewayId, intents: b.intents };
    try {
      this.bus.publish(this.subjects.channelIn(channel), encodeJson(batch));
    } catch (err) {
      // Only a malformed subject throws (channel ids are validated at connect): a bug, not load.
      this.logger.error({ err, channel, intents: b.intents.length }, 'intent batch publish failed');
      return;
    }
    this.metrics.intentBatches.add(1);
    this.metrics.intentsForwarded.add(b.intents.length);
  }
}
