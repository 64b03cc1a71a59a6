/**
 * First joins gathered into batched placements: the channels asked for within ROUTER_PLACEMENT_COALESCE_MS share one
 * placement, at most ROUTER_PLACEMENT_CONCURRENCY placements run at once (the next batch gathers meanwhile), at most
 * ROUTER_PLACEMENT_QUEUE_MAX channels wait (more are refused CP_ERR_CHANNEL_PLACEMENT_OVERLOADED), and each caller
 * waits at most ROUTER assignDeadlineMs (then CP_ERR_CHANNEL_UNAVAILABLE, retryable, while the placement goes on).
 */
import { CONTROL_BATCH_MAX, CrowdplayError, isCrowdplayError } from '@crowdplay/protocol';
import type { Assignment, AssignResult } from './api.ts';
import type { Placement } from './placement.ts';
import type { RouterState } from './router-state.ts';

/** Defaults of RouterOptions.placementCoalesceMs (ms), placementQueueMax and placementConcurrency. */
const PLACEMENT_COALESCE_MS = 5;
const PLACEMENT_QUEUE_MAX = 50_000;
const PLACEMENT_CONCURRENCY = 4;

interface Waiter {
  resolve: (a: Assignment) => void;
  reject: (err: unknown) => void;
}

export class PlacementQueue {
  /** First joins gathered for the next placement, with their callers. */
  private queued = new Map<string, Waiter[]>();
  private flushTimer: NodeJS.Timeout | null = null;
  /** Placements of first joins in flight (at most ROUTER_PLACEMENT_CONCURRENCY; the next batch gathers meanwhile). */
  private assignPlacing = 0;

  constructor(
    private readonly s: RouterState,
    private readonly placement: Placement,
  ) {}

  /**
   * The channel's owner; a channel without a live one is placed first, in the
   * next placement batch (first joins arriving within
   * ROUTER_PLACEMENT_COALESCE_MS share one). Idempotent.
   * @throws CrowdplayError CP_ERR_CHANNEL_UNKNOWN, CP_ERR_CHANNEL_MIGRATED,
   *   CP_ERR_CHANNEL_UNAVAILABLE (no shard took it, or not within the deadline: retryable),
   *   CP_ERR_CHANNEL_PLACEMENT_OVERLOADED (ROUTER_PLACEMENT_QUEUE_MAX channels wait already: retryable)
   */
  assign(channel: string): Promise<Assignment> {
    const known = this.s.assignments.get(channel);
    if (known && !this.s.inflight.has(channel) && this.s.keeps(known.shard)) return Promise.resolve(known);
    return this.withDeadline(channel, this.placed(channel));
  }

  /** {@link assign} without its deadline: the channel's assignment once known, or its placement's outcome. */
  private placed(channel: string): Promise<Assignment> {
    const p = this.s.inflight.get(channel);
    if (p) return p;
    const known = this.s.assignments.get(channel);
    if (known && this.s.keeps(known.shard)) return Promise.resolve(known);
    const waiting = this.queued.get(channel);
    return new Promise<Assignment>((resolve, reject) => {
      if (waiting) {
        waiting.push({ resolve, reject });
        return;
      }
      const max = this.s.opts.placementQueueMax ?? PLACEMENT_QUEUE_MAX;
      if (this.queued.size >= max) {
        this.s.deps.telemetry.refusals.refuse('router', 'CP_ERR_CHANNEL_PLACEMENT_OVERLOADED', {
          limit: 'ROUTER_PLACEMENT_QUEUE_MAX',
          value: max,
        });
        reject(new CrowdplayError('CP_ERR_CHANNEL_PLACEMENT_OVERLOADED', [max]));
        return;
      }
      this.queued.set(channel, [{ resolve, reject }]);
      this.scheduleFlush();
    });
  }

  /**
   * {@link assign} of each channel of a batch (a gateway's first joins of one turn): they share the placements
   * of the channels queued meanwhile, each answers on its own, and the batch has one deadline (ROUTER
   * assignDeadlineMs, one timer for the batch): a channel still unplaced then answers CP_ERR_CHANNEL_UNAVAILABLE
   * while its placement goes on.
   * @returns one result per channel, in order: its assignment, or the code that refused it
   */
  assignBatch(channels: readonly string[]): Promise<AssignResult[]> {
    if (channels.length === 0) return Promise.resolve([]);
    const ms = this.s.opts.assignDeadlineMs ?? this.s.opts.requestTimeoutMs;
    return new Promise<AssignResult[]>((resolve) => {
      const out: Array<AssignResult | undefined> = new Array<AssignResult | undefined>(channels.length);
      let left = channels.length;
      let timer: NodeJS.Timeout | undefined;
      const answer = (i: number, r: AssignResult): void => {
        if (left === 0 || out[i] !== undefined) return;
        out[i] = r;
        if (--left > 0) return;
        if (timer) clearTimeout(timer);
        resolve(out as AssignResult[]);
      };
      if (ms > 0)
        timer = setTimeout(() => {
          let late = 0;
          for (let i = 0; i < channels.length; i++) {
            if (out[i] !== undefined) continue;
            out[i] = { channel: channels[i]!, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'placement deadline' };
            late++;
          }
          left = 0;
          this.s.deps.telemetry.refusals.refuse(
            'router',
            'CP_ERR_CHANNEL_UNAVAILABLE',
            { channels: late, reason: 'placement deadline' },
            late,
          );
          resolve(out as AssignResult[]);
        }, ms);
      channels.forEach((channel, i) => {
        this.placed(channel).then(
          (a) => answer(i, { channel, shard: a.shard, epoch: a.epoch }),
          (err: unknown) =>
            answer(
              i,
              isCrowdplayError(err)
                ? { channel, code: err.code, message: err.message }
                : { channel, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'router error' },
            ),
        );
      });
    });
  }

  /** `p`, or CP_ERR_CHANNEL_UNAVAILABLE once ROUTER assignDeadlineMs passed (the placement goes on). */
  private withDeadline(channel: string, p: Promise<Assignment>): Promise<Assignment> {
    const ms = this.s.opts.assignDeadlineMs ?? this.s.opts.requestTimeoutMs;
    if (!(ms > 0)) return p;
    return new Promise<Assignment>((resolve, reject) => {
      const t = setTimeout(() => {
        this.s.deps.telemetry.refusals.refuse('router', 'CP_ERR_CHANNEL_UNAVAILABLE', { channel, reason: 'placement deadline' });
        reject(new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [channel], { cause: 'placement deadline' }));
      }, ms);
      p.then(
        (a) => {
          clearTimeout(t);
          resolve(a);
        },
        (err: unknown) => {
          clearTimeout(t);
          reject(err);
        },
      );
    });
  }

  private scheduleFlush(): void {
    if (this.queued.size >= CONTROL_BATCH_MAX) {
      if (this.flushTimer) clearTimeout(this.flushTimer);
      this.flushTimer = null;
      this.flushQueued();
      return;
    }
    this.flushTimer ??= setTimeout(() => {
      this.flushTimer = null;
      this.flushQueued();
    }, this.s.opts.placementCoalesceMs ?? PLACEMENT_COALESCE_MS);
  }

  /**
   * Places the first joins gathered so far, as one batch; their callers get their channel's outcome. While
   * ROUTER_PLACEMENT_CONCURRENCY placements of first joins are in flight the next one gathers (and starts when one
   * ends), so batches grow with the load instead of the statements and messages.
   */
  private flushQueued(): void {
    if (this.assignPlacing >= (this.s.opts.placementConcurrency ?? PLACEMENT_CONCURRENCY)) return;
    const batch = this.queued;
    this.queued = new Map();
    if (batch.size === 0) return;
    const outcome = this.placement.placeExclusive([...batch.keys()], { wait: true, reason: 'assign' });
    for (const [channel, waiters] of batch) {
      const p = outcome.get(channel)!;
      for (const w of waiters) p.then(w.resolve, w.reject);
    }
    this.assignPlacing++;
    void Promise.allSettled(outcome.values()).then(() => {
      this.assignPlacing--;
      if (this.queued.size > 0 && !this.s.closed) this.flushQueued();
    });
  }

  /** Channels waiting for a placement. */
  get size(): number {
    return this.queued.size;
  }

  /** Placements of first joins in flight. */
  get placing(): number {
    return this.assignPlacing;
  }

  /** Refuses every waiting caller (CP_ERR_CHANNEL_UNAVAILABLE) and stops gathering. */
  close(): void {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    for (const [ch, waiters] of this.queued) for (const w of waiters) w.reject(new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [ch]));
    this.queued = new Map();
  }
}
