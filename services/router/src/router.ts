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
 *
 * Router holds membership, the checks and the control API; its parts share a
 * RouterState (router-state.ts): Placement (placement.ts), the first joins'
 * PlacementQueue (placement-queue.ts), Moves (moves.ts: drain, move,
 * rebalance) and Recovery (recovery.ts: failover, restarts, reconciler).
 */
import { decodeJson, encodeJson, type BusMessage, type Subscription } from '@crowdplay/bus';
import {
  CrowdplayError,
  decodeAssignments,
  decodeControl,
  Heartbeat,
  isCrowdplayError,
  RouterControl,
  type ErrorCode,
} from '@crowdplay/protocol';
import type { Assignment, AssignmentChange, Migration, Move, RouterApi, RouterReply, ShardInfo } from './api.ts';
import { MoveBudget, planMoves } from './balance.ts';
import { Moves } from './moves.ts';
import { Placement } from './placement.ts';
import { PlacementQueue } from './placement-queue.ts';
import { Recovery } from './recovery.ts';
import { RouterState, type RouterDeps, type RouterOptions } from './router-state.ts';

export { DRAIN_BATCH_CHANNELS, drainBatchOf, type RouterOptions } from './router-state.ts';

export class Router implements RouterApi {
  private readonly s: RouterState;
  private readonly placement: Placement;
  private readonly queue: PlacementQueue;
  private readonly moves: Moves;
  private readonly recovery: Recovery;
  private readonly migrating = new Map<string, Promise<Migration>>();
  private readonly subs: Subscription[] = [];
  private checkTimer: NodeJS.Timeout | null = null;
  private reconcileTimer: NodeJS.Timeout | null = null;
  private checking: Promise<void> | null = null;
  private reconciling: Promise<void> | null = null;
  private readonly budget: MoveBudget;
  /** The process behind each shard id, from its heartbeats. */
  private readonly instances = new Map<string, string>();

  constructor(deps: RouterDeps, opts: RouterOptions) {
    this.s = new RouterState(deps, opts);
    this.placement = new Placement(this.s);
    this.queue = new PlacementQueue(this.s, this.placement);
    this.moves = new Moves(this.s, this.placement);
    this.recovery = new Recovery(this.s, this.placement);
    this.budget = new MoveBudget(opts.rebalanceMovesPerS ?? 0, this.s.now());
    const mx = deps.telemetry.metrics;
    mx.gauge('crowdplay_router_live_shards', () => this.s.live().length);
    mx.gauge('crowdplay_router_placement_queue', () => this.queue.size);
    mx.gauge('crowdplay_router_unplaced_channels', () => this.s.unplaced.size);
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
    const { bus, subjects, store, telemetry } = this.s.deps;
    this.s.startedAtMs = this.s.now();
    for (const row of await store.channels.listAssigned()) {
      if (row.owner !== null && row.migratedTo === null)
        this.s.assignments.set(row.id, { channel: row.id, shard: row.owner, epoch: row.epoch });
    }
    if (this.s.assignments.size > 0)
      telemetry.logger.info({ channels: this.s.assignments.size }, 'router: assignments rebuilt from Postgres');
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
          const known = this.s.assignments.get(c.channel);
          if (c.shard === null && known && known.epoch <= c.epoch && !this.s.inflight.has(c.channel)) this.s.assignments.delete(c.channel);
        }
      }),
    );
    await bus.flush();
    if (this.s.opts.checkMs) this.checkTimer = setInterval(() => void this.check(), this.s.opts.checkMs);
    if (this.s.opts.reconcileMs) this.reconcileTimer = setInterval(() => void this.reconcile(), this.s.opts.reconcileMs);
  }

  private onHeartbeat(msg: BusMessage): void {
    if (this.s.opts.isActive?.() === false) return;
    let hb: Heartbeat;
    try {
      hb = decodeControl(Heartbeat, msg.data);
    } catch (err) {
      this.s.deps.telemetry.refusals.refuse('router', isCrowdplayError(err) ? err.code : 'CP_ERR_PROTO_MALFORMED', {
        subject: msg.subject,
      });
      return;
    }
    const prev = this.instances.get(hb.id);
    if (typeof hb.instance === 'string' && prev !== hb.instance) {
      this.instances.set(hb.id, hb.instance);
      // A new process behind this shard id (a restart, or the first beat this router hears): what Postgres no longer
      // records as its own was its predecessor's and is assigned again.
      this.s.track(this.recovery.reconcileRestart(hb.id));
    }
    // Updated in place: a placement in flight holds this object and counts its channels in it.
    const m = this.s.members.get(hb.id) ?? { id: hb.id, channels: 0, intentsPerS: 0, lastSeenMs: 0, draining: false, v: 1, placing: 0 };
    if (m.placing === 0) m.channels = hb.channels;
    m.intentsPerS = hb.intentsPerS ?? 0;
    m.lastSeenMs = this.s.now();
    m.draining = hb.draining === true;
    m.v = hb.v ?? 1;
    this.s.members.set(hb.id, m);
    if (this.s.deadSince.delete(hb.id)) this.s.deps.telemetry.logger.info({ shard: hb.id }, 'router: a shard declared dead beats again');
    const w = this.s.memberWaiters;
    this.s.memberWaiters = [];
    for (const f of w) f();
  }

  /** Resolves once the background moves started so far have finished. */
  settled(): Promise<void> {
    return this.s.settled();
  }

  /** The channel's owner, placing it first when it has none: see PlacementQueue.assign. */
  assign(channel: string): Promise<Assignment> {
    return this.queue.assign(channel);
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
    if (this.s.opts.isActive?.() === false) return;
    this.checking ??= this.doCheck()
      .catch((err: unknown) => this.s.deps.telemetry.logger.error({ err }, 'router check failed'))
      .finally(() => (this.checking = null));
    await this.checking;
    await this.s.settled();
  }

  private async doCheck(): Promise<void> {
    const now = this.s.now();
    for (const [ch, until] of this.s.busy) if (until <= now) this.s.busy.delete(ch);
    const dead = new Map<string, string[]>();
    for (const a of this.s.assignments.values()) {
      if (this.s.inflight.has(a.channel) || this.s.stateOf(a.shard) !== 'dead') continue;
      const list = dead.get(a.shard);
      if (list) list.push(a.channel);
      else dead.set(a.shard, [a.channel]);
    }
    for (const m of this.s.members.values())
      if (this.s.stateOf(m.id) === 'dead' && !dead.has(m.id) && !this.s.deadSince.has(m.id)) dead.set(m.id, []);
    for (const [shard, chs] of dead) {
      if (this.s.deadSince.has(shard)) continue;
      this.s.deadSince.set(shard, now);
      this.s.m.deaths.add(1);
      this.s.abandonRequests(shard);
      this.s.deps.telemetry.logger.warn(
        { shard, channels: chs.length, lastSeenMs: this.s.members.get(shard)?.lastSeenMs ?? null, declaredDeadAtMs: now },
        'router: shard declared dead (missed its heartbeats); moving its channels',
      );
    }
    const retry = [...this.s.unplaced].filter((ch) => !this.s.inflight.has(ch));
    if (dead.size > 0 || retry.length > 0) {
      if (this.s.live().length === 0) return; // nobody to take them; the next pass tries again
      for (const [shard, chs] of dead) if (chs.length > 0) this.s.track(this.recovery.failover(chs, shard));
      if (retry.length > 0) {
        for (const ch of retry) this.s.unplaced.delete(ch);
        this.s.track(this.recovery.failover(retry, undefined));
      }
      return;
    }
    const rate = this.s.opts.rebalanceMovesPerS ?? 0;
    if (rate <= 0 || this.moves.rebalancing) return;
    // First joins being placed spread themselves (planPlacement); a rebalance now would work from counts about to change
    // and fight them, moving the same channels back and forth.
    if (this.queue.size > 0 || this.queue.placing > 0) return;
    const owned = new Map<string, string[]>();
    for (const m of this.s.live()) owned.set(m.id, []);
    let unsettled = false;
    for (const a of this.s.assignments.values()) {
      const list = owned.get(a.shard);
      if (list) list.push(a.channel);
      else if (this.s.stateOf(a.shard) !== 'dead') unsettled = true; // a draining or not yet heard-from owner: wait for it
    }
    if (unsettled) return;
    const skip = new Set([...this.s.inflight.keys(), ...this.s.busy.keys()]);
    const wanted = planMoves(owned, Math.max(1, rate), skip);
    const n = this.budget.take(wanted.length, now);
    // In the background: a move waits on its owner's handoff (up to ROUTER_BATCH_TIMEOUT_MS when the owner just died), and
    // the next check must still be able to declare that owner dead.
    const moves = wanted.slice(0, n).filter((mv) => !this.s.inflight.has(mv.channel));
    if (moves.length === 0) return;
    this.s.track(this.moves.rebalance(moves));
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
    if (this.s.opts.isActive?.() === false) return Promise.resolve();
    this.reconciling ??= this.recovery
      .reconcilePass()
      .catch((err: unknown) => this.s.deps.telemetry.logger.error({ err }, 'router reconcile failed'))
      .finally(() => (this.reconciling = null));
    return this.reconciling.then(() => this.s.settled());
  }

  async lookup(channel: string): Promise<Assignment | null> {
    const known = this.s.assignments.get(channel);
    if (known) return known;
    const row = await this.s.deps.store.channels.get(channel);
    return row?.owner ? { channel, shard: row.owner, epoch: row.epoch } : null;
  }

  async release(channel: string): Promise<void> {
    const a = await this.lookup(channel);
    if (!a) return;
    const { bus, subjects } = this.s.deps;
    await bus.request(subjects.shardCtl(a.shard), encodeJson({ op: 'release', channel }), { timeoutMs: this.s.opts.requestTimeoutMs });
    this.s.announce([{ channel, shard: null, epoch: a.epoch }]);
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
    const { store, bus, subjects, telemetry } = this.s.deps;
    let begun;
    try {
      begun = await store.channels.beginMigration(from, to);
    } catch (err) {
      if (isCrowdplayError(err)) {
        this.s.m.migrations.add(1, { outcome: 'refused' });
        telemetry.refusals.refuse('router', err.code, { from, to });
      }
      throw err;
    }
    if (begun === 'none' || begun === 'done') {
      this.s.m.migrations.add(1, { outcome: begun });
      return { from, to, outcome: begun, absorbed: null };
    }
    try {
      // 1. The old channel's owner stops serving it and writes its final snapshot at its epoch.
      if (this.s.assignments.has(from)) this.s.announce([{ channel: from, shard: null, epoch: this.s.assignments.get(from)!.epoch }]);
      const row = await store.channels.get(from);
      if (row?.owner) {
        await bus
          .request(subjects.shardCtl(row.owner), encodeJson({ op: 'release', channel: from }), { timeoutMs: this.s.opts.requestTimeoutMs })
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
          timeoutMs: this.s.opts.requestTimeoutMs,
        });
        const reply = decodeJson<{ ok: boolean; code?: ErrorCode; message?: string; absorbed?: Migration['absorbed'] }>(msg.data);
        if (!reply.ok) throw new CrowdplayError(reply.code ?? 'CP_ERR_CHANNEL_UNAVAILABLE', [from, reply.message ?? to]);
        absorbed = reply.absorbed ?? null;
        telemetry.logger.info({ from, to, shard: a.shard, absorbed }, 'channel state moved');
      }
      // 4. Finished: a re-delivered request is a no-op from now on.
      await store.channels.finishMigration(from);
      this.s.m.migrations.add(1, { outcome: 'moved' });
      return { from, to, outcome: 'moved', absorbed };
    } catch (err) {
      // The move stays recorded (the old channel is not served); the next request resumes it.
      this.s.m.migrations.add(1, { outcome: 'failed' });
      throw err;
    }
  }

  /** Moves `channel` off its owner: see Moves.move. */
  move(channel: string, from?: string): Promise<Move> {
    return this.moves.move(channel, from);
  }

  /** Moves every channel of `shard` to other live shards: see Moves.drain. */
  drain(shard: string): Promise<Move[]> {
    return this.moves.drain(shard);
  }

  membership(): Promise<ShardInfo[]> {
    return Promise.resolve(this.s.live().map(({ id, channels, intentsPerS, lastSeenMs }) => ({ id, channels, intentsPerS, lastSeenMs })));
  }

  private async onCtl(msg: BusMessage): Promise<void> {
    let reply: RouterReply;
    // Standing down: the active router answers (or nobody, and the caller's timeout says so, retryable).
    if (this.s.opts.isActive?.() === false) return;
    try {
      const req = decodeControl(RouterControl, msg.data);
      switch (req.op) {
        case 'assign':
          reply =
            'channels' in req
              ? { ok: true, assigned: await this.queue.assignBatch(req.channels) }
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
        if (err.code.startsWith('CP_ERR_PROTO_')) this.s.deps.telemetry.refusals.refuse('router', err.code, { subject: msg.subject });
      } else {
        this.s.deps.telemetry.logger.error({ err }, 'router request failed');
        reply = { ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'router error' };
      }
    }
    msg.respond(encodeJson(reply));
  }

  /** Stops answering; waits for the checks and moves in flight. Safe to call twice. */
  async close(): Promise<void> {
    this.s.closed = true;
    if (this.checkTimer) clearInterval(this.checkTimer);
    if (this.reconcileTimer) clearInterval(this.reconcileTimer);
    this.checkTimer = null;
    this.reconcileTimer = null;
    this.queue.close();
    for (const s of this.subs.splice(0)) s.unsubscribe();
    await this.checking;
    await this.reconciling;
    await this.s.settled();
  }
}
