/**
 * The router: pins channels to shards. It keeps membership from shard
 * heartbeats (with their load) and places channels on the least loaded live
 * shards, in batches: a burst of first joins is coalesced
 * (ROUTER_PLACEMENT_COALESCE_MS) into one placement; a dead shard's channels,
 * a drain and a rebalance move as batches too. A placement is one Postgres
 * statement (every channel's epoch bumped and owner set, `acquireMany`), one
 * `acquire` control message per target shard (at most CONTROL_BATCH_MAX
 * channels each) answered per channel, and one `router.assignments` message
 * for the caches. What a shard refuses is released at its epoch and tried on
 * another; what no shard takes is retried by the next check.
 *
 * Every `checkMs` it declares dead the shards that missed their heartbeats
 * (logged with the shard and counted, whatever else is in flight) and starts
 * moving their channels without waiting for an earlier move; every
 * ROUTER_RECONCILE_MS it compares Postgres with what each live shard holds
 * and places any channel whose recorded owner is dead or does not hold it.
 * It keeps no state of its own: on start it rebuilds its assignments from the
 * channels table (owner + epoch), so it can restart without losing them.
 *
 * Control messages are the schemas of @crowdplay/protocol's control.ts: a
 * shard that beats with `v` ≥ 2 gets batches, an older one single-channel
 * messages, so a rolling upgrade keeps talking.
 */
import { decodeJson, encodeJson, type Bus, type BusMessage, type Subjects, type Subscription } from '@crowdplay/bus';
import {
  CONTROL_BATCH_MAX,
  CONTROL_VERSION,
  CrowdplayError,
  decodeAssignments,
  decodeControl,
  Heartbeat,
  isCrowdplayError,
  RouterControl,
  ShardControlReply,
  type ChannelResult,
  type ErrorCode,
} from '@crowdplay/protocol';
import type { Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import type { Assignment, AssignmentChange, AssignResult, Migration, Move, RouterApi, RouterReply, ShardInfo } from './api.ts';
import { MoveBudget, planMoves, planPlacement, shardState, type MemberLoad, type PlannedMove, type ShardState } from './balance.ts';

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

interface Member extends MemberLoad {
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
type MoveOutcome = Move & { handoffRefused?: boolean; code?: string };

/** Why channels are placed: the `reason` of crowdplay_router_moves_total. */
type Reason = 'assign' | 'failover' | 'drain' | 'rebalance' | 'reconcile' | 'restart';

/** How long a channel whose owner could not hand it off is left alone by the rebalance, in checks. */
const BUSY_CHECKS = 20;
/** Default of RouterOptions.rebalanceCooldownMs, ms. */
const REBALANCE_COOLDOWN_MS = 60_000;
const MOVE_ACQUIRE_ATTEMPTS = 3;
const BATCH_TIMEOUT_MS = 10_000;
const PLACEMENT_COALESCE_MS = 5;
const PLACEMENT_QUEUE_MAX = 50_000;
const PLACEMENT_CONCURRENCY = 4;

interface Waiter {
  resolve: (a: Assignment) => void;
  reject: (err: unknown) => void;
}

export class Router implements RouterApi {
  private readonly members = new Map<string, Member>();
  private readonly assignments = new Map<string, Assignment>();
  /** Channels being placed or moved now, with their outcome: concurrent callers share it. */
  private readonly inflight = new Map<string, Promise<Assignment>>();
  private readonly migrating = new Map<string, Promise<Migration>>();
  /** First joins gathered for the next placement, with their callers. */
  private queued = new Map<string, Waiter[]>();
  private flushTimer: NodeJS.Timeout | null = null;
  /** Placements of first joins in flight (at most ROUTER_PLACEMENT_CONCURRENCY; the next batch gathers meanwhile). */
  private assignPlacing = 0;
  /** Channels a failover, drain or reconcile could not place: every check tries them again. */
  private readonly unplaced = new Set<string>();
  /** When each dead shard was declared dead (router clock, ms), until it beats again. */
  private readonly deadSince = new Map<string, number>();
  /** Per shard, the control requests to it in flight: each is answered at once when the shard is declared dead. */
  private readonly awaiting = new Map<string, Set<() => void>>();
  /** Background moves (failovers, reconciles) in flight. */
  private readonly tasks = new Set<Promise<unknown>>();
  /** Channels a reconcile pass found not held by their recorded owner, placed if the next pass finds the same. */
  private suspects = new Set<string>();
  private readonly subs: Subscription[] = [];
  private readonly now: () => number;
  private memberWaiters: Array<() => void> = [];
  private startedAtMs = 0;
  private checkTimer: NodeJS.Timeout | null = null;
  private reconcileTimer: NodeJS.Timeout | null = null;
  private checking: Promise<void> | null = null;
  private reconciling: Promise<void> | null = null;
  private readonly budget: MoveBudget;
  /** Channels a rebalance leaves where they are, until ms: their owner refused a handoff, or a rebalance just moved them. */
  private readonly busy = new Map<string, number>();
  /** A rebalance's moves are in flight: the next one waits (their channels are out of the counts until placed). */
  private rebalancing = false;
  /** The process behind each shard id, from its heartbeats. */
  private readonly instances = new Map<string, string>();
  private closed = false;
  private readonly m: {
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
    private readonly deps: { bus: Bus; subjects: Subjects; store: Store; telemetry: Telemetry },
    private readonly opts: RouterOptions,
  ) {
    this.now = opts.now ?? Date.now;
    this.budget = new MoveBudget(opts.rebalanceMovesPerS ?? 0, this.now());
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
    mx.gauge('crowdplay_router_live_shards', () => this.live().length);
    mx.gauge('crowdplay_router_placement_queue', () => this.queued.size);
    mx.gauge('crowdplay_router_unplaced_channels', () => this.unplaced.size);
  }

  /**
   * Rebuilds the assignments from the channels table (owner + epoch), then
   * starts taking heartbeats, answering `router.ctl` and (with `checkMs`,
   * `reconcileMs`) checking for dead shards, imbalance and channels their
   * recorded owner does not hold. Owners not heard from get one
   * ROUTER_SHARD_TIMEOUT_MS to send a heartbeat before their channels move.
   * @throws the store's error when Postgres is unreachable
   */
  async start(): Promise<void> {
    const { bus, subjects, store, telemetry } = this.deps;
    this.startedAtMs = this.now();
    for (const row of await store.channels.listAssigned()) {
      if (row.owner !== null && row.migratedTo === null)
        this.assignments.set(row.id, { channel: row.id, shard: row.owner, epoch: row.epoch });
    }
    if (this.assignments.size > 0) telemetry.logger.info({ channels: this.assignments.size }, 'router: assignments rebuilt from Postgres');
    this.subs.push(bus.subscribe(subjects.shardHeartbeat(), (msg) => this.onHeartbeat(msg)));
    // Not a queue group: every router that subscribed gets each request and the active one answers, so a hung
    // router (which keeps its subscription until NATS drops its connection) is never the only one asked.
    this.subs.push(bus.subscribe(subjects.routerCtl(), (msg) => void this.onCtl(msg)));
    // A shard that releases channels on its own (drain, release) says so here: they have no owner until assigned again.
    this.subs.push(
      bus.subscribe(subjects.routerAssignments(), (msg) => {
        let changes: AssignmentChange[];
        try {
          changes = decodeAssignments(msg.data);
        } catch (err) {
          telemetry.refusals.refuse('router', isCrowdplayError(err) ? err.code : 'CP_ERR_PROTO_MALFORMED', { subject: msg.subject });
          return;
        }
        for (const c of changes) {
          const known = this.assignments.get(c.channel);
          if (c.shard === null && known && known.epoch <= c.epoch && !this.inflight.has(c.channel)) this.assignments.delete(c.channel);
        }
      }),
    );
    await bus.flush();
    if (this.opts.checkMs) this.checkTimer = setInterval(() => void this.check(), this.opts.checkMs);
    if (this.opts.reconcileMs) this.reconcileTimer = setInterval(() => void this.reconcile(), this.opts.reconcileMs);
  }

  private onHeartbeat(msg: BusMessage): void {
    if (this.opts.isActive?.() === false) return;
    let hb: Heartbeat;
    try {
      hb = decodeControl(Heartbeat, msg.data);
    } catch (err) {
      this.deps.telemetry.refusals.refuse('router', isCrowdplayError(err) ? err.code : 'CP_ERR_PROTO_MALFORMED', { subject: msg.subject });
      return;
    }
    const prev = this.instances.get(hb.id);
    if (typeof hb.instance === 'string' && prev !== hb.instance) {
      this.instances.set(hb.id, hb.instance);
      // A new process behind this shard id (a restart, or the first beat this router hears): what Postgres no longer
      // records as its own was its predecessor's and is assigned again.
      this.track(this.reconcileRestart(hb.id));
    }
    // Updated in place: a placement in flight holds this object and counts its channels in it.
    const m = this.members.get(hb.id) ?? { id: hb.id, channels: 0, intentsPerS: 0, lastSeenMs: 0, draining: false, v: 1, placing: 0 };
    if (m.placing === 0) m.channels = hb.channels;
    m.intentsPerS = hb.intentsPerS ?? 0;
    m.lastSeenMs = this.now();
    m.draining = hb.draining === true;
    m.v = hb.v ?? 1;
    this.members.set(hb.id, m);
    if (this.deadSince.delete(hb.id)) this.deps.telemetry.logger.info({ shard: hb.id }, 'router: a shard declared dead beats again');
    const w = this.memberWaiters;
    this.memberWaiters = [];
    for (const f of w) f();
  }

  private live(): Member[] {
    return [...this.members.values()].filter((m) => this.stateOf(m.id) === 'live');
  }

  private stateOf(shard: string): ShardState {
    return shardState(this.members.get(shard), this.now(), this.opts.shardTimeoutMs, this.startedAtMs);
  }

  /** A known owner that keeps its channels: live, or not heard from yet since this router started. */
  private keeps(shard: string): boolean {
    const st = this.stateOf(shard);
    return st === 'live' || st === 'unknown';
  }

  /** Runs a background move, tracked so `check()` callers and `close()` can wait for it. Never rejects. */
  private track(p: Promise<unknown>): void {
    const t = p.catch((err: unknown) => this.deps.telemetry.logger.error({ err }, 'router: background move failed'));
    this.tasks.add(t);
    void t.finally(() => this.tasks.delete(t));
  }

  /** Resolves once the background moves started so far have finished. */
  async settled(): Promise<void> {
    while (this.tasks.size > 0) await Promise.all([...this.tasks]);
  }

  /**
   * The channel's owner; a channel without a live one is placed first, in the
   * next placement batch (first joins arriving within
   * ROUTER_PLACEMENT_COALESCE_MS share one). Idempotent.
   * @throws CrowdplayError CP_ERR_CHANNEL_UNKNOWN, CP_ERR_CHANNEL_MIGRATED,
   *   CP_ERR_CHANNEL_UNAVAILABLE (no shard took it, or not within the deadline: retryable),
   *   CP_ERR_CHANNEL_PLACEMENT_OVERLOADED (ROUTER_PLACEMENT_QUEUE_MAX channels wait already: retryable)
   */
  assign(channel: string): Promise<Assignment> {
    const known = this.assignments.get(channel);
    if (known && !this.inflight.has(channel) && this.keeps(known.shard)) return Promise.resolve(known);
    return this.withDeadline(channel, this.placed(channel));
  }

  /** {@link assign} without its deadline: the channel's assignment once known, or its placement's outcome. */
  private placed(channel: string): Promise<Assignment> {
    const p = this.inflight.get(channel);
    if (p) return p;
    const known = this.assignments.get(channel);
    if (known && this.keeps(known.shard)) return Promise.resolve(known);
    const waiting = this.queued.get(channel);
    return new Promise<Assignment>((resolve, reject) => {
      if (waiting) {
        waiting.push({ resolve, reject });
        return;
      }
      const max = this.opts.placementQueueMax ?? PLACEMENT_QUEUE_MAX;
      if (this.queued.size >= max) {
        this.deps.telemetry.refusals.refuse('router', 'CP_ERR_CHANNEL_PLACEMENT_OVERLOADED', {
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
  private assignBatch(channels: readonly string[]): Promise<AssignResult[]> {
    if (channels.length === 0) return Promise.resolve([]);
    const ms = this.opts.assignDeadlineMs ?? this.opts.requestTimeoutMs;
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
          this.deps.telemetry.refusals.refuse(
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
    const ms = this.opts.assignDeadlineMs ?? this.opts.requestTimeoutMs;
    if (!(ms > 0)) return p;
    return new Promise<Assignment>((resolve, reject) => {
      const t = setTimeout(() => {
        this.deps.telemetry.refusals.refuse('router', 'CP_ERR_CHANNEL_UNAVAILABLE', { channel, reason: 'placement deadline' });
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
    }, this.opts.placementCoalesceMs ?? PLACEMENT_COALESCE_MS);
  }

  /**
   * Places the first joins gathered so far, as one batch; their callers get their channel's outcome. While
   * ROUTER_PLACEMENT_CONCURRENCY placements of first joins are in flight the next one gathers (and starts when one
   * ends), so batches grow with the load instead of the statements and messages.
   */
  private flushQueued(): void {
    if (this.assignPlacing >= (this.opts.placementConcurrency ?? PLACEMENT_CONCURRENCY)) return;
    const batch = this.queued;
    this.queued = new Map();
    if (batch.size === 0) return;
    const outcome = this.placeExclusive([...batch.keys()], { wait: true, reason: 'assign' });
    for (const [channel, waiters] of batch) {
      const p = outcome.get(channel)!;
      for (const w of waiters) p.then(w.resolve, w.reject);
    }
    this.assignPlacing++;
    void Promise.allSettled(outcome.values()).then(() => {
      this.assignPlacing--;
      if (this.queued.size > 0 && !this.closed) this.flushQueued();
    });
  }

  /**
   * {@link place} for channels not in flight, each marked in flight until its outcome is known (a channel in
   * flight already shares that one).
   */
  private placeExclusive(
    channels: readonly string[],
    opts: { wait: boolean; reason: Reason; exclude?: string },
  ): Map<string, Promise<Assignment>> {
    const out = new Map<string, Promise<Assignment>>();
    const todo: string[] = [];
    for (const ch of channels) {
      const p = this.inflight.get(ch);
      if (p) out.set(ch, p);
      else if (!out.has(ch)) todo.push(ch);
    }
    if (todo.length === 0) return out;
    const run = this.place(todo, opts);
    for (const ch of todo) {
      const p = run.then((r) => {
        const a = r.get(ch);
        if (!a) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [ch]);
        if (a instanceof Error) throw a;
        return a;
      });
      const tracked = p.finally(() => this.inflight.get(ch) === tracked && this.inflight.delete(ch));
      void tracked.catch(() => undefined);
      this.inflight.set(ch, tracked);
      out.set(ch, tracked);
    }
    return out;
  }

  /**
   * Places channels on live shards, in batches: channels whose recorded owner
   * is live (and not `exclude`) stay with it; the others are spread over the
   * live shards by load (planPlacement), their epochs bumped and owners set in
   * one statement, then each target shard is asked to acquire its share (one
   * message per CONTROL_BATCH_MAX channels). A channel a shard refuses or does
   * not answer for is released at its epoch and placed again on another shard
   * where one exists, up to ROUTER_MOVE_ACQUIRE_ATTEMPTS placements. The
   * assignments are announced in one message per batch.
   * @param opts.wait wait up to waitForShardMs for a first live shard
   * @returns per channel its assignment, or the CrowdplayError that refused it (UNKNOWN, MIGRATED, UNAVAILABLE)
   * @throws the store's error (Postgres unreachable: nothing was placed)
   */
  private async place(
    channels: readonly string[],
    opts: { wait: boolean; reason: Reason; exclude?: string },
  ): Promise<Map<string, Assignment | CrowdplayError>> {
    const { store, telemetry } = this.deps;
    const t0 = performance.now();
    const out = new Map<string, Assignment | CrowdplayError>();
    const rows = await store.channels.getMany(channels);
    // Where a placement's time went, for its log line: the rows read, the owners written, the shards' acquires.
    const phase = { readMs: Math.round(performance.now() - t0), writeMs: 0, acquireMs: 0 };
    let todo: string[] = [];
    for (const ch of channels) {
      const row = rows.get(ch);
      if (!row) out.set(ch, new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [ch]));
      else if (row.migratedTo !== null) {
        telemetry.refusals.refuse('router', 'CP_ERR_CHANNEL_MIGRATED', { channel: ch });
        out.set(ch, new CrowdplayError('CP_ERR_CHANNEL_MIGRATED', [ch, row.migratedTo]));
      } else if (row.owner !== null && row.owner !== opts.exclude && opts.reason !== 'reconcile' && this.keeps(row.owner)) {
        // An owner recorded in Postgres that is alive (or may be: this router just started) keeps the channel at its epoch;
        // not when the reconciler found that it does not hold it (a router that died between the epoch bump and the acquire).
        const a: Assignment = { channel: ch, shard: row.owner, epoch: row.epoch };
        this.assignments.set(ch, a);
        out.set(ch, a);
      } else todo.push(ch);
    }
    const attempts = this.opts.moveAcquireAttempts ?? MOVE_ACQUIRE_ATTEMPTS;
    const refusedBy = new Map<string, Set<string>>();
    const placedChanges: AssignmentChange[] = [];
    const ipc = this.opts.intentsPerChannel ?? 200;
    for (let attempt = 1; todo.length > 0 && attempt <= attempts && !this.closed; attempt++) {
      if (attempt > 1) {
        this.m.moveRetries.add(todo.length);
        await new Promise((r) => setTimeout(r, 100 * (attempt - 1)));
      }
      let live = this.live().filter((m) => m.id !== opts.exclude);
      if (live.length === 0 && opts.wait) {
        await this.waitForMember();
        live = this.live().filter((m) => m.id !== opts.exclude);
      }
      if (live.length === 0) break;
      // A shard that refused a channel gets it again only if no other shard is left.
      const plan = new Map<string, string[]>();
      const groups = new Map<string, string[]>();
      for (const ch of todo) {
        const avoid = refusedBy.get(ch);
        const key = avoid ? [...avoid].sort().join(',') : '';
        const list = groups.get(key);
        if (list) list.push(ch);
        else groups.set(key, [ch]);
      }
      for (const [key, chs] of groups) {
        const avoid = new Set(key === '' ? [] : key.split(','));
        const candidates = live.filter((m) => !avoid.has(m.id));
        const picks = planPlacement(candidates.length > 0 ? candidates : live, chs.length, ipc);
        chs.forEach((ch, i) => {
          const shard = picks[i]!;
          const list = plan.get(shard);
          if (list) list.push(ch);
          else plan.set(shard, [ch]);
        });
      }
      // Counted at once, before the acquires answer: placements in flight together would otherwise pick the same shards.
      for (const [shard, chs] of plan) {
        const member = this.members.get(shard)!;
        member.channels += chs.length;
        member.placing += chs.length;
      }
      const tWrite = performance.now();
      let epochs: Map<string, number>;
      try {
        epochs = await store.channels.acquireMany([...plan].flatMap(([shard, chs]) => chs.map((channel) => ({ channel, shard }))));
      } catch (err) {
        for (const [shard, chs] of plan) {
          const member = this.members.get(shard)!;
          member.channels = Math.max(0, member.channels - chs.length);
          member.placing = Math.max(0, member.placing - chs.length);
        }
        throw err;
      }
      const tAcquire = performance.now();
      phase.writeMs += Math.round(tAcquire - tWrite);
      const next: string[] = [];
      const released: Array<{ channel: string; shard: string; epoch: number }> = [];
      await Promise.all(
        [...plan].map(async ([shard, chs]) => {
          const member = this.members.get(shard)!;
          const items: Array<{ channel: string; epoch: number }> = [];
          for (const ch of chs) {
            const epoch = epochs.get(ch);
            if (epoch === undefined) {
              // Unknown or migrated since it was read: nothing was written for it.
              member.channels = Math.max(0, member.channels - 1);
              out.set(ch, new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [ch], { cause: 'unknown or migrated meanwhile' }));
            } else items.push({ channel: ch, epoch });
          }
          let results: ChannelResult[];
          try {
            results = await this.acquireOn(member, items);
          } finally {
            member.placing = Math.max(0, member.placing - chs.length);
          }
          for (let i = 0; i < items.length; i++) {
            const { channel, epoch } = items[i]!;
            const r = results[i]!;
            if (r.ok) {
              const a: Assignment = { channel, shard, epoch };
              this.assignments.set(channel, a);
              placedChanges.push(a);
              out.set(channel, a);
              continue;
            }
            member.channels = Math.max(0, member.channels - 1);
            released.push({ channel, shard, epoch });
            if (r.code === 'CP_ERR_CHANNEL_UNKNOWN' || r.code === 'CP_ERR_CHANNEL_MIGRATED') {
              out.set(channel, new CrowdplayError(r.code as ErrorCode, [channel], { cause: r.message }));
              continue;
            }
            const avoid = refusedBy.get(channel) ?? new Set<string>();
            avoid.add(shard);
            refusedBy.set(channel, avoid);
            out.set(
              channel,
              new CrowdplayError((r.code as ErrorCode | undefined) ?? 'CP_ERR_CHANNEL_UNAVAILABLE', [channel], { cause: r.message }),
            );
            next.push(channel);
          }
        }),
      );
      phase.acquireMs += Math.round(performance.now() - tAcquire);
      // The shard did not take them: clear the owners (at their epochs only) so nobody believes they are served.
      if (released.length > 0)
        await store.channels
          .releaseMany(released)
          .catch((err: unknown) => telemetry.logger.warn({ err }, 'router: release of refused acquires failed'));
      todo = next;
    }
    for (const ch of todo) if (!out.has(ch)) out.set(ch, new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [ch]));
    if (placedChanges.length > 0) {
      this.announce(placedChanges);
      this.m.placements.add(1, { reason: opts.reason });
      const ms = Math.round(performance.now() - t0);
      this.m.placeMs.record(ms);
      telemetry.logger.info(
        placedChanges.length === 1
          ? { ...placedChanges[0], reason: opts.reason, ms }
          : { channels: placedChanges.length, reason: opts.reason, ms, ...phase },
        placedChanges.length === 1 ? 'channel assigned' : 'channels assigned',
      );
    }
    return out;
  }

  private waitForMember(): Promise<void> {
    return new Promise<void>((resolve) => {
      const t = setTimeout(resolve, this.opts.waitForShardMs);
      this.memberWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  /**
   * Asks `member` to acquire channels at their epochs: v2 batches of at most CONTROL_BATCH_MAX (one message
   * each, ROUTER_BATCH_TIMEOUT_MS), or one v1 request per channel to a shard that speaks only v1.
   * @returns one result per item, in order (a timeout or a refusal of the whole request fails each channel)
   */
  private async acquireOn(member: Member, items: ReadonlyArray<{ channel: string; epoch: number }>): Promise<ChannelResult[]> {
    if (items.length === 0) return [];
    if (member.v < 2)
      return Promise.all(
        items.map(async ({ channel, epoch }) => {
          const r = await this.request(member.id, { op: 'acquire', channel, epoch }, this.opts.requestTimeoutMs);
          return r.ok ? { channel, ok: true } : { channel, ok: false, code: r.code, message: r.message };
        }),
      );
    return this.batched(
      items,
      (it) => it.channel,
      (chunk) => this.request(member.id, { v: CONTROL_VERSION, op: 'acquire', channels: chunk }, this.batchTimeoutMs()),
    );
  }

  private batchTimeoutMs(): number {
    return this.opts.batchTimeoutMs ?? BATCH_TIMEOUT_MS;
  }

  /** One control request to a shard, its reply validated; no answer in time is a CP_ERR_CHANNEL_UNAVAILABLE reply. */
  /** Answers every control request in flight to `shard` as failed (it was declared dead): see {@link request}. */
  private abandonRequests(shard: string): void {
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
  private async request(shard: string, body: object, timeoutMs: number): Promise<ShardControlReply> {
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

  /** Records assignments and tells the caches (gateways, shards) on `router.assignments`, in v2 batches. */
  private announce(changes: readonly AssignmentChange[]): void {
    const { bus, subjects } = this.deps;
    for (const c of changes) {
      if (c.shard === null) this.assignments.delete(c.channel);
      else this.assignments.set(c.channel, { channel: c.channel, shard: c.shard, epoch: c.epoch });
    }
    for (let i = 0; i < changes.length; i += CONTROL_BATCH_MAX)
      bus.publish(subjects.routerAssignments(), encodeJson({ v: CONTROL_VERSION, changes: changes.slice(i, i + CONTROL_BATCH_MAX) }));
  }

  /**
   * One pass of the background work (every `checkMs`; tests call it with a
   * fake clock): shards that missed their heartbeats are declared dead (a log
   * line naming each, crowdplay_router_shard_deaths_total) and their channels
   * start moving to live shards in a background batch, as do channels an
   * earlier move could not place; then, if nothing is dead or unplaced, up to
   * the rebalance budget of channels move from the fullest to the emptiest
   * live shard. Detection never waits for a move in flight: a second death is
   * declared while the first one's channels still move. Passes never overlap.
   * The returned promise also waits for the moves the pass started (tests).
   */
  async check(): Promise<void> {
    if (this.opts.isActive?.() === false) return;
    this.checking ??= this.doCheck()
      .catch((err: unknown) => this.deps.telemetry.logger.error({ err }, 'router check failed'))
      .finally(() => (this.checking = null));
    await this.checking;
    await this.settled();
  }

  private async doCheck(): Promise<void> {
    const now = this.now();
    for (const [ch, until] of this.busy) if (until <= now) this.busy.delete(ch);
    const dead = new Map<string, string[]>();
    for (const a of this.assignments.values()) {
      if (this.inflight.has(a.channel) || this.stateOf(a.shard) !== 'dead') continue;
      const list = dead.get(a.shard);
      if (list) list.push(a.channel);
      else dead.set(a.shard, [a.channel]);
    }
    for (const m of this.members.values())
      if (this.stateOf(m.id) === 'dead' && !dead.has(m.id) && !this.deadSince.has(m.id)) dead.set(m.id, []);
    for (const [shard, chs] of dead) {
      if (this.deadSince.has(shard)) continue;
      this.deadSince.set(shard, now);
      this.m.deaths.add(1);
      this.abandonRequests(shard);
      this.deps.telemetry.logger.warn(
        { shard, channels: chs.length, lastSeenMs: this.members.get(shard)?.lastSeenMs ?? null, declaredDeadAtMs: now },
        'router: shard declared dead (missed its heartbeats); moving its channels',
      );
    }
    const retry = [...this.unplaced].filter((ch) => !this.inflight.has(ch));
    if (dead.size > 0 || retry.length > 0) {
      if (this.live().length === 0) return; // nobody to take them; the next pass tries again
      for (const [shard, chs] of dead) if (chs.length > 0) this.track(this.failover(chs, shard));
      if (retry.length > 0) {
        for (const ch of retry) this.unplaced.delete(ch);
        this.track(this.failover(retry, undefined));
      }
      return;
    }
    const rate = this.opts.rebalanceMovesPerS ?? 0;
    if (rate <= 0 || this.rebalancing) return;
    // First joins being placed spread themselves (planPlacement); a rebalance now would work from counts about to change
    // and fight them, moving the same channels back and forth.
    if (this.queued.size > 0 || this.assignPlacing > 0) return;
    const owned = new Map<string, string[]>();
    for (const m of this.live()) owned.set(m.id, []);
    let unsettled = false;
    for (const a of this.assignments.values()) {
      const list = owned.get(a.shard);
      if (list) list.push(a.channel);
      else if (this.stateOf(a.shard) !== 'dead') unsettled = true; // a draining or not yet heard-from owner: wait for it
    }
    if (unsettled) return;
    const skip = new Set([...this.inflight.keys(), ...this.busy.keys()]);
    const wanted = planMoves(owned, Math.max(1, rate), skip);
    const n = this.budget.take(wanted.length, now);
    // In the background: a move waits on its owner's handoff (up to ROUTER_BATCH_TIMEOUT_MS when the owner just died), and
    // the next check must still be able to declare that owner dead.
    const moves = wanted.slice(0, n).filter((mv) => !this.inflight.has(mv.channel));
    if (moves.length === 0) return;
    this.rebalancing = true;
    this.track(this.rebalance(moves).finally(() => (this.rebalancing = false)));
  }

  /**
   * Places the channels of a dead shard (or ones an earlier move left unplaced: `shard` undefined) on live
   * shards, in one batch; what no shard takes is retried by the next check.
   */
  private async failover(channels: string[], shard: string | undefined, reason: Reason = 'failover'): Promise<void> {
    const { telemetry } = this.deps;
    let outcome: Map<string, Promise<Assignment>>;
    try {
      outcome = this.placeExclusive(channels, { wait: false, reason, exclude: shard });
    } catch (err) {
      for (const ch of channels) this.unplaced.add(ch);
      throw err;
    }
    let moved = 0;
    let failed = 0;
    await Promise.all(
      [...outcome].map(async ([ch, p]) => {
        try {
          const a = await p;
          if (a.shard !== shard) moved++;
        } catch (err) {
          failed++;
          if (isCrowdplayError(err, 'CP_ERR_CHANNEL_UNKNOWN') || isCrowdplayError(err, 'CP_ERR_CHANNEL_MIGRATED')) {
            this.announce([{ channel: ch, shard: null, epoch: 0 }]);
          } else this.unplaced.add(ch);
        }
      }),
    );
    if (moved > 0) this.m.moved.add(moved, { reason });
    if (failed > 0) this.m.moved.add(failed, { reason: 'failed' });
    const since = shard === undefined ? undefined : this.deadSince.get(shard);
    const moveMs = since === undefined ? undefined : this.now() - since;
    if (moveMs !== undefined && moved > 0) this.m.failoverMs.record(moveMs);
    telemetry.logger.info({ shard: shard ?? null, reason, moved, failed, moveMs }, 'router: channels moved');
  }

  /**
   * After a shard process (re)starts: channels the router believes it owns but
   * whose Postgres row says otherwise (the new process disowned them) are
   * placed again now, like a failover.
   */
  private async reconcileRestart(shard: string): Promise<void> {
    const mine = new Set((await this.deps.store.channels.listOwned(shard)).map((r) => r.id));
    const lost = [...this.assignments.values()]
      .filter((a) => a.shard === shard && !mine.has(a.channel) && !this.inflight.has(a.channel))
      .map((a) => a.channel);
    if (lost.length === 0) return;
    this.deps.telemetry.logger.warn({ shard, channels: lost.length }, 'router: a shard restarted; assigning its channels again');
    for (const ch of lost) this.assignments.delete(ch);
    await this.failover(lost, undefined, 'restart');
  }

  /**
   * One reconciler pass (every ROUTER_RECONCILE_MS): reads every owned
   * channel from Postgres and asks each live shard that speaks v2 which
   * channels it holds. A channel whose recorded owner is dead, or is live but
   * does not hold it in two passes in a row (so an acquire in flight is not
   * mistaken for a lost one), is placed again at a new epoch; the router's own
   * assignments follow Postgres. Passes never overlap.
   */
  reconcile(): Promise<void> {
    if (this.opts.isActive?.() === false) return Promise.resolve();
    this.reconciling ??= this.doReconcile()
      .catch((err: unknown) => this.deps.telemetry.logger.error({ err }, 'router reconcile failed'))
      .finally(() => (this.reconciling = null));
    return this.reconciling.then(() => this.settled());
  }

  private async doReconcile(): Promise<void> {
    const rows = await this.deps.store.channels.listAssigned();
    const byOwner = new Map<string, string[]>();
    for (const r of rows) {
      if (r.owner === null || r.migratedTo !== null) continue;
      const known = this.assignments.get(r.id);
      if (!this.inflight.has(r.id) && (!known || known.epoch < r.epoch))
        this.assignments.set(r.id, { channel: r.id, shard: r.owner, epoch: r.epoch });
      const list = byOwner.get(r.owner);
      if (list) list.push(r.id);
      else byOwner.set(r.owner, [r.id]);
    }
    const missing = new Set<string>();
    await Promise.all(
      [...byOwner].map(async ([owner, chs]) => {
        const m = this.members.get(owner);
        if (!m || this.stateOf(owner) !== 'live' || m.v < 2) return; // dead owners: the check moves them
        const r = await this.request(owner, { v: CONTROL_VERSION, op: 'owned' }, this.opts.requestTimeoutMs);
        if (!r.ok || !r.owned) return;
        const held = new Set(r.owned);
        for (const ch of chs) if (!held.has(ch) && !this.inflight.has(ch)) missing.add(ch);
      }),
    );
    const lost = [...missing].filter((ch) => this.suspects.has(ch));
    this.suspects = new Set([...missing].filter((ch) => !this.suspects.has(ch)));
    if (lost.length === 0) return;
    this.m.reconciled.add(lost.length, { reason: 'not_held' });
    this.deps.telemetry.logger.warn({ channels: lost.length }, 'router: channels their recorded owner does not hold; placing them again');
    for (const ch of lost) this.assignments.delete(ch);
    await this.failover(lost, undefined, 'reconcile');
  }

  /**
   * Moves a check's planned channels between live shards like a drain's move, open rounds included: the
   * channels of one owner in one {@link moveMany} (one handoff request, one placement, one forget per owner),
   * owner after owner. A channel whose owner or plan changed meanwhile is left out; one whose owner could not
   * hand it off stays where it is, left alone for BUSY_CHECKS checks; one that moved stays put for
   * ROUTER_REBALANCE_COOLDOWN_MS. No other rebalance starts until it ends: its handed-off channels are out of the
   * counts a plan works from until they are placed.
   */
  private async rebalance(moves: readonly PlannedMove[]): Promise<void> {
    const bySource = new Map<string, string[]>();
    for (const mv of moves) {
      const known = this.assignments.get(mv.channel);
      if (!known || known.shard !== mv.from || this.stateOf(mv.to) !== 'live') continue;
      const list = bySource.get(mv.from);
      if (list) list.push(mv.channel);
      else bySource.set(mv.from, [mv.channel]);
    }
    for (const [from, planned] of bySource) {
      if (this.closed) return;
      // Taken in flight since the plan (an assign's move, a drain): theirs, not the rebalance's.
      const channels = planned.filter((ch) => !this.inflight.has(ch));
      if (channels.length === 0) continue;
      let results: Array<MoveOutcome>;
      try {
        results = await this.moveMany(channels, from, 'rebalance');
      } catch (err) {
        this.deps.telemetry.logger.warn({ err, from, channels: channels.length }, 'rebalance: the move failed; the next check plans again');
        continue;
      }
      const now = this.now();
      const refused: string[] = [];
      for (const m of results) {
        // Left where it is for a while: the next rebalance picks another channel (planMoves takes the lowest id it may move).
        if (m.moved) this.busy.set(m.channel, now + (this.opts.rebalanceCooldownMs ?? REBALANCE_COOLDOWN_MS));
        else if (m.handoffRefused) {
          refused.push(m.channel);
          this.busy.set(m.channel, now + BUSY_CHECKS * (this.opts.checkMs ?? 500));
        }
      }
      if (refused.length > 0) {
        this.m.moved.add(refused.length, { reason: 'refused' });
        this.deps.telemetry.logger.info(
          { from, channels: refused.length, first: refused[0], code: results.find((m) => m.handoffRefused)?.code },
          'rebalance: the owner could not hand channels off',
        );
      }
    }
  }

  async lookup(channel: string): Promise<Assignment | null> {
    const known = this.assignments.get(channel);
    if (known) return known;
    const row = await this.deps.store.channels.get(channel);
    return row?.owner ? { channel, shard: row.owner, epoch: row.epoch } : null;
  }

  async release(channel: string): Promise<void> {
    const a = await this.lookup(channel);
    if (!a) return;
    const { bus, subjects } = this.deps;
    await bus.request(subjects.shardCtl(a.shard), encodeJson({ op: 'release', channel }), { timeoutMs: this.opts.requestTimeoutMs });
    this.announce([{ channel, shard: null, epoch: a.epoch }]);
  }

  migrate(from: string, to: string): Promise<Migration> {
    // One move per old channel at a time (the old group's migrate_to and the supergroup's migrate_from can arrive together).
    let p = this.migrating.get(from);
    if (!p) {
      p = this.doMigrate(from, to).finally(() => this.migrating.delete(from));
      this.migrating.set(from, p);
    }
    return p;
  }

  private async doMigrate(from: string, to: string): Promise<Migration> {
    const { store, bus, subjects, telemetry } = this.deps;
    let begun;
    try {
      begun = await store.channels.beginMigration(from, to);
    } catch (err) {
      if (isCrowdplayError(err)) {
        this.m.migrations.add(1, { outcome: 'refused' });
        telemetry.refusals.refuse('router', err.code, { from, to });
      }
      throw err;
    }
    if (begun === 'none' || begun === 'done') {
      this.m.migrations.add(1, { outcome: begun });
      return { from, to, outcome: begun, absorbed: null };
    }
    try {
      // 1. The old channel's owner stops serving it and writes its final snapshot at its epoch.
      if (this.assignments.has(from)) this.announce([{ channel: from, shard: null, epoch: this.assignments.get(from)!.epoch }]);
      const row = await store.channels.get(from);
      if (row?.owner) {
        await bus
          .request(subjects.shardCtl(row.owner), encodeJson({ op: 'release', channel: from }), { timeoutMs: this.opts.requestTimeoutMs })
          .catch((err: unknown) =>
            // A dead owner: its last snapshot is the final state (changes since then are lost), and the fence below cuts it off.
            telemetry.logger.warn({ err, channel: from, shard: row.owner }, 'migrate: the old owner did not answer the release'),
          );
      }
      // 2. Nothing can write the old channel any more (not even an owner that acquired it just before the move was recorded).
      await store.channels.fence(from);
      // 3. The new channel's owner merges the final state into its game and snapshots it at its own epoch.
      const snap = await store.channels.loadSnapshot(from);
      let absorbed: Migration['absorbed'] = null;
      if (snap) {
        const a = await this.assign(to);
        const msg = await bus.request(subjects.channelCtl(to), encodeJson({ op: 'absorb', from, state: snap.state }), {
          timeoutMs: this.opts.requestTimeoutMs,
        });
        const reply = decodeJson<{ ok: boolean; code?: ErrorCode; message?: string; absorbed?: Migration['absorbed'] }>(msg.data);
        if (!reply.ok) throw new CrowdplayError(reply.code ?? 'CP_ERR_CHANNEL_UNAVAILABLE', [from, reply.message ?? to]);
        absorbed = reply.absorbed ?? null;
        telemetry.logger.info({ from, to, shard: a.shard, absorbed }, 'channel state moved');
      }
      // 4. Finished: a re-delivered request is a no-op from now on.
      await store.channels.finishMigration(from);
      this.m.migrations.add(1, { outcome: 'moved' });
      return { from, to, outcome: 'moved', absorbed };
    } catch (err) {
      // The move stays recorded (the old channel is not served); the next request resumes it.
      this.m.migrations.add(1, { outcome: 'failed' });
      throw err;
    }
  }

  /**
   * Moves channels off shard `from` (a drain, a rebalance), open rounds
   * included: `from` hands them off in batches (release with `handoff`:
   * in-flight stakes commit, open rounds' books written at its epoch), the
   * handed-off ones are placed on other live shards in one placement and resume their rounds at a new epoch, then `from`
   * drops their subscriptions (`forget`, batched). A channel `from` could not
   * hand off stays where it is; one that no shard took stays unowned, its
   * rounds durable, and every check tries it again.
   * @param handedOff called once `from` has answered the handoff (before the placement); a drain hands off its next
   *   batch then
   * @returns one Move per channel (moved or not, with the owner it has)
   */
  private async moveMany(channels: readonly string[], from: string, reason: Reason, handedOff?: () => void): Promise<Array<MoveOutcome>> {
    // A channel another move or placement holds in flight is moved once that ends, from where it left it (the rows are
    // read afresh): two movers never hand off and place the same channel, bumping its epoch twice.
    for (let busy = channels.filter((ch) => this.inflight.has(ch)); busy.length > 0; busy = channels.filter((ch) => this.inflight.has(ch)))
      await Promise.all(busy.map((ch) => this.inflight.get(ch)!.catch(() => undefined)));
    // Assigns of these channels wait for the move.
    const done: Array<() => void> = [];
    for (const ch of channels) {
      const p = new Promise<Assignment>((resolve, reject) =>
        done.push(() => {
          const a = this.assignments.get(ch);
          if (a) resolve(a);
          else reject(new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [ch]));
        }),
      );
      void p.catch(() => undefined);
      this.inflight.set(ch, p);
      void p.finally(() => this.inflight.get(ch) === p && this.inflight.delete(ch)).catch(() => undefined);
    }
    try {
      return await this.doMoveMany(channels, from, reason, handedOff);
    } finally {
      for (const f of done) f();
    }
  }

  private async doMoveMany(channels: readonly string[], from: string, reason: Reason, handedOff?: () => void): Promise<Array<MoveOutcome>> {
    const { store, telemetry } = this.deps;
    const rows = await store.channels.getMany(channels);
    const result = new Map<string, MoveOutcome>();
    const mine: string[] = [];
    for (const ch of channels) {
      const row = rows.get(ch);
      if (!row) result.set(ch, { channel: ch, moved: false, shard: null, epoch: 0 });
      else if (row.owner !== from) result.set(ch, { channel: ch, moved: false, shard: row.owner, epoch: row.epoch });
      else mine.push(ch);
    }
    const others = this.live().filter((m) => m.id !== from);
    if (mine.length > 0 && others.length === 0) {
      telemetry.logger.warn({ shard: from, channels: mine.length }, 'move: no other live shard');
      for (const ch of mine) result.set(ch, { channel: ch, moved: false, shard: from, epoch: rows.get(ch)!.epoch });
      return channels.map((ch) => result.get(ch)!);
    }
    // 1. The owner hands the channels off: open rounds' books written at its epoch, owners cleared.
    const member = this.members.get(from);
    const handed: string[] = [];
    const handoffs =
      member && member.v >= 2
        ? await this.batched(
            mine,
            (ch) => ch,
            (chunk) => this.request(from, { v: CONTROL_VERSION, op: 'release', channels: chunk, handoff: true }, this.batchTimeoutMs()),
          )
        : await Promise.all(
            mine.map(async (channel) => {
              const r = await this.request(from, { op: 'release', channel, handoff: true }, this.opts.requestTimeoutMs);
              return r.ok ? { channel, ok: true } : { channel, ok: false, code: r.code, message: r.message };
            }),
          );
    for (const r of handoffs) {
      if (r.ok) handed.push(r.channel);
      else
        result.set(r.channel, {
          channel: r.channel,
          moved: false,
          shard: from,
          epoch: rows.get(r.channel)!.epoch,
          handoffRefused: true,
          code: r.code,
        });
    }
    if (member) member.channels = Math.max(0, member.channels - handed.length);
    for (const ch of handed) this.assignments.delete(ch);
    handedOff?.();
    // 2. Other shards acquire them at new epochs and resume the rounds; `to` first when it is named (a rebalance).
    const placed = handed.length === 0 ? new Map<string, Assignment | CrowdplayError>() : await this.placeMoved(handed, from, reason);
    const forget: string[] = [];
    for (const ch of handed) {
      const a = placed.get(ch);
      if (a && !(a instanceof Error)) {
        result.set(ch, { channel: ch, moved: true, shard: a.shard, epoch: a.epoch });
        forget.push(ch);
      } else {
        this.unplaced.add(ch);
        result.set(ch, {
          channel: ch,
          moved: false,
          shard: null,
          epoch: rows.get(ch)!.epoch,
          code: a?.code ?? 'CP_ERR_CHANNEL_UNAVAILABLE',
        });
      }
    }
    const moved = forget.length;
    if (moved > 0) this.m.moved.add(moved, { reason });
    if (handed.length > moved) this.m.moved.add(handed.length - moved, { reason: 'failed' });
    // 3. The old owner stops refusing (its subscriptions go).
    if (forget.length > 0) {
      const answers =
        member && member.v >= 2
          ? await this.batched(
              forget,
              (ch) => ch,
              (chunk) => this.request(from, { v: CONTROL_VERSION, op: 'forget', channels: chunk }, this.opts.requestTimeoutMs),
            )
          : await Promise.all(
              forget.map(async (channel) => ({
                channel,
                ok: (await this.request(from, { op: 'forget', channel }, this.opts.requestTimeoutMs)).ok,
              })),
            );
      const unanswered = answers.filter((r) => !r.ok).length;
      if (unanswered > 0) telemetry.logger.warn({ shard: from, channels: unanswered }, 'move: the old owner did not answer forget');
    }
    if (mine.length > 0)
      telemetry.logger.info(
        mine.length === 1
          ? { channel: mine[0], from, to: result.get(mine[0]!)?.shard, reason }
          : { from, reason, channels: mine.length, moved },
        mine.length === 1 ? 'channel moved' : 'channels moved',
      );
    return channels.map((ch) => result.get(ch)!);
  }

  /**
   * Places handed-off channels over the live shards but `from` (the load spread picks the emptiest, which is a
   * rebalance's `to`). The caller holds them in flight.
   */
  private async placeMoved(handed: string[], from: string, reason: Reason): Promise<Map<string, Assignment | CrowdplayError>> {
    try {
      return await this.place(handed, { wait: true, reason, exclude: from });
    } catch (err) {
      const e = new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', ['*'], { cause: err });
      return new Map(handed.map((ch) => [ch, e]));
    }
  }

  /**
   * Runs a v2 batch request per CONTROL_BATCH_MAX items; a failed request, or a reply without one result per item,
   * fails each of its channels with the reply's code.
   * @returns one result per item, in order
   */
  private async batched<T>(
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

  /**
   * Moves `channel` from its owner (which must be `from` when given) to
   * another live shard, open rounds included (see {@link moveMany}). Not
   * moved (nothing changes) when no other live shard exists or `from` is not
   * the owner.
   * @throws CrowdplayError CP_ERR_CHANNEL_UNKNOWN; CP_ERR_CHANNEL_UNAVAILABLE
   *   or the owner's code when the handoff failed (the owner still serves
   *   it) or no shard acquired it (the channel is then unowned, its rounds
   *   durable: every check tries to place it again)
   */
  async move(channel: string, from?: string): Promise<Move> {
    const row = await this.deps.store.channels.get(channel);
    if (!row) throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [channel]);
    if (row.owner === null || (from !== undefined && row.owner !== from))
      return { channel, moved: false, shard: row.owner, epoch: row.epoch };
    const [m] = await this.moveMany([channel], row.owner, 'drain');
    if (!m) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [channel]);
    if (m.handoffRefused) throw new CrowdplayError((m.code as ErrorCode | undefined) ?? 'CP_ERR_CHANNEL_UNAVAILABLE', [channel]);
    if (!m.moved && m.shard === null)
      throw new CrowdplayError((m.code as ErrorCode | undefined) ?? 'CP_ERR_CHANNEL_UNAVAILABLE', [channel]);
    return { channel: m.channel, moved: m.moved, shard: m.shard, epoch: m.epoch };
  }

  /**
   * Moves every channel of `shard` (a drain: it is leaving) to other live shards, ROUTER_DRAIN_BATCH_CHANNELS at a
   * time (see {@link moveMany}): the shard hands off one batch after the other, each as soon as the previous one is
   * handed off, and each batch is placed as soon as it is handed off. So a channel is refused (moving) only while its
   * own batch moves, and the shard has handed everything off about as soon as it would have in one go (a drain past
   * SHUTDOWN_DEADLINE_MS must not leave channels with open ticks behind). The shard refunds what did not move.
   * @returns one Move per channel it owned
   */
  async drain(shard: string): Promise<Move[]> {
    const owned = new Set((await this.deps.store.channels.listOwned(shard)).map((r) => r.id));
    for (const a of this.assignments.values()) if (a.shard === shard) owned.add(a.channel);
    const list = [...owned];
    const per = drainBatchOf(this.opts.drainBatchChannels);
    const batches: Array<Promise<Move[]>> = [];
    for (let i = 0; i < list.length; i += per) {
      let handed!: () => void;
      const handedOff = new Promise<void>((resolve) => (handed = resolve));
      const batch = this.moveMany(list.slice(i, i + per), shard, 'drain', handed);
      batches.push(batch);
      await Promise.race([
        handedOff,
        batch.then(
          () => undefined,
          () => undefined,
        ),
      ]);
    }
    const moves: Move[] = [];
    for (const batch of await Promise.all(batches))
      for (const { channel, moved, shard: s, epoch } of batch) moves.push({ channel, moved, shard: s, epoch });
    return moves;
  }

  membership(): Promise<ShardInfo[]> {
    return Promise.resolve(this.live().map(({ id, channels, intentsPerS, lastSeenMs }) => ({ id, channels, intentsPerS, lastSeenMs })));
  }

  private async onCtl(msg: BusMessage): Promise<void> {
    let reply: RouterReply;
    // Standing down: the active router answers (or nobody, and the caller's timeout says so, retryable).
    if (this.opts.isActive?.() === false) return;
    try {
      const req = decodeControl(RouterControl, msg.data);
      switch (req.op) {
        case 'assign':
          reply =
            'channels' in req
              ? { ok: true, assigned: await this.assignBatch(req.channels) }
              : { ok: true, assignment: await this.assign(req.channel) };
          break;
        case 'lookup':
          reply = { ok: true, assignment: await this.lookup(req.channel) };
          break;
        case 'release':
          await this.release(req.channel);
          reply = { ok: true };
          break;
        case 'membership':
          reply = { ok: true, shards: await this.membership() };
          break;
        case 'migrate':
          reply = { ok: true, migration: await this.migrate(req.from, req.to) };
          break;
        case 'move':
          reply = { ok: true, move: await this.move(req.channel, req.from) };
          break;
        case 'drain':
          reply = { ok: true, moves: await this.drain(req.shard) };
          break;
      }
    } catch (err) {
      if (isCrowdplayError(err)) {
        reply = { ok: false, code: err.code, message: err.message };
        if (err.code.startsWith('CP_ERR_PROTO_')) this.deps.telemetry.refusals.refuse('router', err.code, { subject: msg.subject });
      } else {
        this.deps.telemetry.logger.error({ err }, 'router request failed');
        reply = { ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'router error' };
      }
    }
    msg.respond(encodeJson(reply));
  }

  /** Stops answering; waits for the checks and moves in flight. Safe to call twice. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.checkTimer) clearInterval(this.checkTimer);
    if (this.reconcileTimer) clearInterval(this.reconcileTimer);
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.checkTimer = null;
    this.reconcileTimer = null;
    this.flushTimer = null;
    for (const [ch, waiters] of this.queued) for (const w of waiters) w.reject(new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [ch]));
    this.queued = new Map();
    for (const s of this.subs.splice(0)) s.unsubscribe();
    await this.checking;
    await this.reconciling;
    await this.settled();
  }
}
