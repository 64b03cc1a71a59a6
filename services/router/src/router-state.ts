/**
 * What the router's parts share: the options, the membership heard from heartbeats, the assignments, the channels in
 * flight, the metrics, and the control requests to shards (batched, abandoned when a shard is declared dead) and the
 * announcements of assignment changes. The parts (placement.ts, placement-queue.ts, moves.ts, recovery.ts) and
 * Router (router.ts) each hold one RouterState.
 */
import { encodeJson, type Bus, type Subjects } from '@crowdplay/bus';
import {
  CONTROL_BATCH_MAX,
  CONTROL_VERSION,
  decodeControl,
  isCrowdplayError,
  ShardControlReply,
  type ChannelResult,
} from '@crowdplay/protocol';
import type { Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import type { Assignment, AssignmentChange, Move } from './api.ts';
import { shardState, type MemberLoad, type ShardState } from './balance.ts';

/** ROUTER_DRAIN_BATCH_CHANNELS when none is given. */
export const DRAIN_BATCH_CHANNELS = 250;

/**
 * The channels a drain moves at a time: `n` clamped to 1…CONTROL_BATCH_MAX (DRAIN_BATCH_CHANNELS when unset).
 * The shard sizes its wait for the drain's answer with the same figure.
 */
export function drainBatchOf(n: number | undefined): number {
  return Math.max(1, Math.min(CONTROL_BATCH_MAX, Math.trunc(n ?? DRAIN_BATCH_CHANNELS)));
}

export interface RouterOptions {
  /** A shard not heard from for this long is dead: it gets no new channel and its channels move, ms. */
  shardTimeoutMs: number;
  /** How long a placement waits for a first live shard, ms. */
  waitForShardMs: number;
  /** Timeout of a single-channel control request to a shard (v1, forget), ms. */
  requestTimeoutMs: number;
  /** Timeout of one batch control request to a shard (acquire, handoff of up to CONTROL_BATCH_MAX channels), ms (ROUTER_BATCH_TIMEOUT_MS); default 10,000. */
  batchTimeoutMs?: number;
  /** Period of the failover and rebalance check, ms (ROUTER_CHECK_MS); unset: no background check (call `check()`). */
  checkMs?: number;
  /** Period of the reconciler, ms (ROUTER_RECONCILE_MS); unset or 0: none in the background (call `reconcile()`). */
  reconcileMs?: number;
  /** Channels moved per second to even out the spread (ROUTER_REBALANCE_MOVES_PER_S); 0 or unset: never. */
  rebalanceMovesPerS?: number;
  /** How long a channel a rebalance moved is not moved by another, ms (ROUTER_REBALANCE_COOLDOWN_MS); default 60,000. */
  rebalanceCooldownMs?: number;
  /** Intents/s that weigh as much as one channel in a shard's load (ROUTER_INTENTS_PER_CHANNEL); default 200. */
  intentsPerChannel?: number;
  /**
   * Channels a drain moves at a time (ROUTER_DRAIN_BATCH_CHANNELS; 1…CONTROL_BATCH_MAX); default 250. Each batch is
   * handed off and placed before the next is handed off, so a channel stops taking intents only for its own batch's
   * move, and the others keep being served on the draining shard meanwhile.
   */
  drainBatchChannels?: number;
  /** Placements a channel gets (another shard each time it can) before it is left to the next check (ROUTER_MOVE_ACQUIRE_ATTEMPTS); default 3. */
  moveAcquireAttempts?: number;
  /** How long first joins are gathered into one placement, ms (ROUTER_PLACEMENT_COALESCE_MS); default 5; 0: the next turn. */
  placementCoalesceMs?: number;
  /** Most channels waiting for a placement; more are refused CP_ERR_CHANNEL_PLACEMENT_OVERLOADED (ROUTER_PLACEMENT_QUEUE_MAX); default 50,000. */
  placementQueueMax?: number;
  /** Placements of first joins in flight at once; more joins gather for the next (ROUTER_PLACEMENT_CONCURRENCY); default 4. */
  placementConcurrency?: number;
  /** Longest an `assign` waits for its placement before it is refused CP_ERR_CHANNEL_UNAVAILABLE (retryable), ms; default requestTimeoutMs. */
  assignDeadlineMs?: number;
  /** False once this router's lease is lost (LeasedRouter, lease.ts): checks, reconciles and heartbeats are skipped, requests refused. */
  isActive?: () => boolean;
  now?: () => number;
}

type Counter = ReturnType<Telemetry['metrics']['counter']>;
type Histogram = ReturnType<Telemetry['metrics']['histogram']>;

/** The router's collaborators. */
export interface RouterDeps {
  bus: Bus;
  subjects: Subjects;
  store: Store;
  telemetry: Telemetry;
}

export interface Member extends MemberLoad {
  /** Control protocol version from its heartbeats (1 when it names none). */
  v: number;
  /**
   * Channels placed on it whose acquire has not answered yet. While there are any, its heartbeats' channel counts are
   * not taken: one sent before an acquire answered would make the shard look emptier than it is and draw the next
   * batches, and one read in the same turn as the acquire's answer would count that batch twice. Either way the
   * spread went uneven, for the rebalance to undo at its paced rate. The router's own count (each placement counted
   * when planned, each refusal taken back) stands until the shard's next heartbeat with nothing in flight.
   */
  placing: number;
}

/** A channel's move as moveMany reports it: refused by its owner's handoff, or not placed, with the code. */
export type MoveOutcome = Move & { handoffRefused?: boolean; code?: string };

/** Why channels are placed: the `reason` of crowdplay_router_moves_total. */
export type Reason = 'assign' | 'failover' | 'drain' | 'rebalance' | 'reconcile' | 'restart';

/** Default of RouterOptions.batchTimeoutMs, ms. */
const BATCH_TIMEOUT_MS = 10_000;

export class RouterState {
  readonly members = new Map<string, Member>();
  readonly assignments = new Map<string, Assignment>();
  /** Channels being placed or moved now, with their outcome: concurrent callers share it. */
  readonly inflight = new Map<string, Promise<Assignment>>();
  /** Channels a failover, drain or reconcile could not place: every check tries them again. */
  readonly unplaced = new Set<string>();
  /** When each dead shard was declared dead (router clock, ms), until it beats again. */
  readonly deadSince = new Map<string, number>();
  /** Per shard, the control requests to it in flight: each is answered at once when the shard is declared dead. */
  readonly awaiting = new Map<string, Set<() => void>>();
  /** Background moves (failovers, reconciles) in flight. */
  readonly tasks = new Set<Promise<unknown>>();
  /** Channels a rebalance leaves where they are, until ms: their owner refused a handoff, or a rebalance just moved them. */
  readonly busy = new Map<string, number>();
  readonly now: () => number;
  /** Callers waiting for a first live shard (waitForMember): called on every heartbeat. */
  memberWaiters: Array<() => void> = [];
  startedAtMs = 0;
  closed = false;
  readonly m: {
    moved: Counter;
    moveRetries: Counter;
    migrations: Counter;
    deaths: Counter;
    abandoned: Counter;
    placements: Counter;
    placeMs: Histogram;
    failoverMs: Histogram;
    reconciled: Counter;
  };

  constructor(
    readonly deps: RouterDeps,
    readonly opts: RouterOptions,
  ) {
    this.now = opts.now ?? Date.now;
    const mx = deps.telemetry.metrics;
    this.m = {
      moved: mx.counter('crowdplay_router_moves_total'),
      moveRetries: mx.counter('crowdplay_router_move_acquire_retries_total'),
      migrations: mx.counter('crowdplay_channel_migrations_total'),
      deaths: mx.counter('crowdplay_router_shard_deaths_total'),
      abandoned: mx.counter('crowdplay_router_abandoned_requests_total'),
      placements: mx.counter('crowdplay_router_placements_total'),
      placeMs: mx.histogram('crowdplay_router_placement_ms'),
      failoverMs: mx.histogram('crowdplay_router_failover_move_ms'),
      reconciled: mx.counter('crowdplay_router_reconciled_total'),
    };
  }

  /** The shards that are live now: heard from within ROUTER_SHARD_TIMEOUT_MS and not draining. */
  live(): Member[] {
    return [...this.members.values()].filter((m) => this.stateOf(m.id) === 'live');
  }

  /** `shard`'s state by its last heartbeat and this router's clock (see shardState). */
  stateOf(shard: string): ShardState {
    return shardState(this.members.get(shard), this.now(), this.opts.shardTimeoutMs, this.startedAtMs);
  }

  /**
   * A known owner that keeps its channels: live, draining (it serves what its drain has not handed off yet; placing
   * such a channel elsewhere would skip the handoff, so its open rounds would be refunded and its state since the
   * last snapshot lost), or not heard from yet since this router started.
   */
  keeps(shard: string): boolean {
    const st = this.stateOf(shard);
    return st === 'live' || st === 'draining' || st === 'unknown';
  }

  /** Runs a background move, tracked so `check()` callers and `close()` can wait for it. Never rejects. */
  track(p: Promise<unknown>): void {
    const t = p.catch((err: unknown) => this.deps.telemetry.logger.error({ err }, 'router: background move failed'));
    this.tasks.add(t);
    void t.finally(() => this.tasks.delete(t));
  }

  /** Resolves once the background moves started so far have finished. */
  async settled(): Promise<void> {
    while (this.tasks.size > 0) await Promise.all([...this.tasks]);
  }

  waitForMember(): Promise<void> {
    return new Promise<void>((resolve) => {
      const t = setTimeout(resolve, this.opts.waitForShardMs);
      this.memberWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  batchTimeoutMs(): number {
    return this.opts.batchTimeoutMs ?? BATCH_TIMEOUT_MS;
  }

  /** Answers every control request in flight to `shard` as failed (it was declared dead): see {@link request}. */
  abandonRequests(shard: string): void {
    const waiting = this.awaiting.get(shard);
    if (!waiting) return;
    this.awaiting.delete(shard);
    for (const f of waiting) f();
  }

  /**
   * One control request to `shard`, answered `{ ok: false, code: CP_ERR_CHANNEL_UNAVAILABLE }` when it times out, when
   * the bus fails, or as soon as this router declares the shard dead: a move waiting on a dead shard's handoff then
   * goes on (its channels are placed as the dead shard's) instead of waiting out `timeoutMs`.
   */
  async request(shard: string, body: object, timeoutMs: number): Promise<ShardControlReply> {
    const { bus, subjects, telemetry } = this.deps;
    let msg;
    let abandon: (() => void) | undefined;
    const waiting = this.awaiting.get(shard) ?? new Set<() => void>();
    this.awaiting.set(shard, waiting);
    try {
      const dead = new Promise<'dead'>((resolve) => {
        abandon = () => resolve('dead');
        waiting.add(abandon);
      });
      const r = await Promise.race([bus.request(subjects.shardCtl(shard), encodeJson(body), { timeoutMs }), dead]);
      if (r === 'dead') {
        this.m.abandoned.add(1);
        return { ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: `shard ${shard} was declared dead` };
      }
      msg = r;
    } catch (err) {
      return { ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: String(err) };
    } finally {
      if (abandon) waiting.delete(abandon);
      if (waiting.size === 0 && this.awaiting.get(shard) === waiting) this.awaiting.delete(shard);
    }
    try {
      return decodeControl(ShardControlReply, msg.data);
    } catch (err) {
      const code = isCrowdplayError(err) ? err.code : 'CP_ERR_PROTO_MALFORMED';
      telemetry.refusals.refuse('router', code, { subject: 'shard.ctl reply', shard });
      return { ok: false, code, message: String(err) };
    }
  }

  /**
   * Runs a v2 batch request per CONTROL_BATCH_MAX items; a failed request, or a reply without one result per item,
   * fails each of its channels with the reply's code.
   * @returns one result per item, in order
   */
  async batched<T>(
    items: readonly T[],
    channelOf: (item: T) => string,
    send: (chunk: T[]) => Promise<ShardControlReply>,
  ): Promise<ChannelResult[]> {
    const chunks: T[][] = [];
    for (let i = 0; i < items.length; i += CONTROL_BATCH_MAX) chunks.push(items.slice(i, i + CONTROL_BATCH_MAX));
    const answers = await Promise.all(
      chunks.map(async (chunk) => {
        const r = await send(chunk);
        if (r.ok && r.results && r.results.length === chunk.length) return r.results;
        const code = r.ok ? 'CP_ERR_PROTO_INVALID' : r.code;
        const message = r.ok ? 'a reply without one result per channel' : r.message;
        return chunk.map((it) => ({ channel: channelOf(it), ok: false, code, message }));
      }),
    );
    return answers.flat();
  }

  /** Records assignments and tells the caches (gateways, shards) on `router.assignments`, in v2 batches. */
  announce(changes: readonly AssignmentChange[]): void {
    const { bus, subjects } = this.deps;
    for (const c of changes) {
      if (c.shard === null) this.assignments.delete(c.channel);
      else this.assignments.set(c.channel, { channel: c.channel, shard: c.shard, epoch: c.epoch });
    }
    for (let i = 0; i < changes.length; i += CONTROL_BATCH_MAX)
      bus.publish(subjects.routerAssignments(), encodeJson({ v: CONTROL_VERSION, changes: changes.slice(i, i + CONTROL_BATCH_MAX) }));
  }
}
