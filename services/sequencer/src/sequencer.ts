/**
 * The sequencer: hands out blocks of event ids over bus request/reply
 * (`subjects.sequencerLease()`, queue group `sequencer`). The high-water mark
 * is raised in Postgres (committed) before a block is handed out, so no
 * restart of any process reuses an id.
 *
 * It also prunes the event log (channel_events): every EVENT_LOG_PRUNE_INTERVAL_MS
 * one pass deletes at most EVENT_LOG_PRUNE_BATCH of the events older than
 * EVENT_LOG_RETENTION_MS (one statement that also raises the channels' floors).
 * Passes never overlap; with several sequencers each prunes (deletes are
 * idempotent, the statement's row locks keep them apart).
 */
import { decodeJson, encodeJson, type Bus, type Subjects, type Subscription } from '@crowdplay/bus';
import type { Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';

/** Request: `{ size }` (ids wanted). Reply: `{ ok, first, last }` inclusive, or `{ ok: false, message }`. */
export interface LeaseRequest {
  size: number;
}
export type LeaseReply = { ok: true; first: number; last: number } | { ok: false; message: string };

/** Largest block one request may take (a sanity bound on a bad request). */
export const MAX_LEASE_SIZE = 1_000_000;
/** Lease requests one high-water-mark update answers at most (each ≤ MAX_LEASE_SIZE: the raise stays a safe integer step). */
export const LEASE_BATCH_MAX = 256;

/** Event log retention (libs/config `eventLog`). */
export interface EventLogRetention {
  /** EVENT_LOG_RETENTION_MS: events older than this are pruned, ms. */
  retentionMs: number;
  /** EVENT_LOG_PRUNE_INTERVAL_MS: between passes, ms. */
  pruneIntervalMs: number;
  /** EVENT_LOG_PRUNE_BATCH: rows one pass deletes at most. */
  pruneBatch: number;
}

export interface SequencerDeps {
  bus: Bus;
  subjects: Subjects;
  store: Store;
  telemetry: Telemetry;
  /** When given, the event log is pruned on a timer (`pruneOnce` works either way). */
  eventLog?: EventLogRetention;
  /** Clock, ms since epoch (tests). */
  now?: () => number;
}

export class SequencerService {
  private sub: Subscription | null = null;
  /** Lease requests not yet answered, in arrival order. */
  private waiting: Array<{ size: number; respond: (r: LeaseReply) => void }> = [];
  private leasing: Promise<void> | null = null;
  private pruneTimer: NodeJS.Timeout | null = null;
  private pruning: Promise<number> | null = null;
  private readonly pruned: (n: number, outcome: string) => void;

  constructor(private readonly deps: SequencerDeps) {
    const mx = deps.telemetry.metrics;
    const leases = mx.counter('crowdplay_sequencer_leases_total');
    this.count = (outcome) => leases.add(1, { outcome });
    const writes = mx.counter('crowdplay_sequencer_lease_writes_total');
    this.batchSize = () => writes.add(1);
    const pruned = mx.counter('crowdplay_event_log_pruned_total');
    const passes = mx.counter('crowdplay_event_log_prune_passes_total');
    this.pruned = (n, outcome) => {
      if (n > 0) pruned.add(n);
      passes.add(1, { outcome });
    };
  }
  private readonly count: (outcome: string) => void;
  private readonly batchSize: (requests: number) => void;

  /**
   * One pruning pass (skipped while one runs: resolves with that one's count):
   * deletes at most `pruneBatch` events older than `retentionMs`.
   * @returns events deleted
   * @throws the store error (also counted as outcome error)
   */
  pruneOnce(retention: EventLogRetention | undefined = this.deps.eventLog): Promise<number> {
    if (!retention) return Promise.resolve(0);
    this.pruning ??= (async () => {
      try {
        const now = (this.deps.now ?? Date.now)();
        const n = await this.deps.store.events.prune(new Date(now - retention.retentionMs), retention.pruneBatch);
        this.pruned(n, n >= retention.pruneBatch ? 'limited' : 'done');
        return n;
      } catch (err) {
        this.pruned(0, 'error');
        throw err;
      } finally {
        this.pruning = null;
      }
    })();
    return this.pruning;
  }

  /**
   * Answers the waiting lease requests, group-committed: every request that
   * arrived while the previous write was in flight shares one raise of the
   * high-water mark (one row update, committed before any answer), split in
   * arrival order, so a later request always gets higher ids. One at a time
   * in this process; Postgres serialises across processes. Measured: 30
   * channels acquired at once under a loaded Postgres took 30 serial updates
   * and timed out the 2 s lease request (the rollover smoke in CI).
   */
  private leaseWaiting(): Promise<void> {
    this.leasing ??= (async () => {
      try {
        while (this.waiting.length > 0) {
          const batch = this.waiting.splice(0, LEASE_BATCH_MAX);
          const total = batch.reduce((n, r) => n + r.size, 0);
          let block: { first: number; last: number };
          try {
            block = await this.deps.store.sequencer.lease(total);
          } catch (err) {
            this.deps.telemetry.logger.error({ err, requests: batch.length }, 'lease failed');
            for (const r of batch) {
              this.count('error');
              r.respond({ ok: false, message: 'lease failed' });
            }
            continue;
          }
          this.batchSize(batch.length);
          let next = block.first;
          for (const r of batch) {
            this.count('ok');
            r.respond({ ok: true, first: next, last: next + r.size - 1 });
            next += r.size;
          }
        }
      } finally {
        this.leasing = null;
      }
    })();
    return this.leasing;
  }

  /** Starts answering lease requests. */
  async start(): Promise<void> {
    const { bus, subjects } = this.deps;
    this.sub = bus.subscribe(
      subjects.sequencerLease(),
      (msg) => {
        let size: number;
        try {
          size = decodeJson<LeaseRequest>(msg.data).size;
        } catch {
          size = NaN;
        }
        if (!Number.isSafeInteger(size) || size < 1 || size > MAX_LEASE_SIZE) {
          this.count('refused');
          msg.respond(encodeJson({ ok: false, message: `size must be an integer in [1, ${MAX_LEASE_SIZE}]` } satisfies LeaseReply));
          return;
        }
        this.waiting.push({ size, respond: (r) => msg.respond(encodeJson(r)) });
        void this.leaseWaiting();
      },
      { queue: 'sequencer' },
    );
    const retention = this.deps.eventLog;
    if (retention) {
      this.pruneTimer = setInterval(() => {
        this.pruneOnce().catch((err: unknown) => this.deps.telemetry.logger.error({ err }, 'event log pruning failed'));
      }, retention.pruneIntervalMs);
      this.pruneTimer.unref();
    }
    await bus.flush();
  }

  /** Stops answering (in-flight leases finish). Safe to call twice. */
  async close(): Promise<void> {
    if (this.pruneTimer) clearInterval(this.pruneTimer);
    this.pruneTimer = null;
    this.sub?.unsubscribe();
    this.sub = null;
    await this.pruning?.catch(() => undefined);
    await this.leasing;
  }
}
