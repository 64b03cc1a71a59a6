/**
 * The router: pins channels to shards. It keeps membership from shard
 * heartbeats (with their load), assigns an unowned channel to the least
 * loaded live shard, and makes ownership durable by bumping the channel's
 * epoch in Postgres before telling the shard to acquire it.
 *
 * Every `checkMs` it moves the channels of a shard that missed its
 * heartbeats to live shards (failover, without waiting for a gateway to ask)
 * and moves a bounded number of channels per second from the fullest to the
 * emptiest live shard (a new shard takes its fair share). It keeps no state
 * of its own: on start it rebuilds its assignments from the channels table
 * (owner + epoch), so it can restart without losing them. Every change is
 * published on `router.assignments` for the caches of gateways and shards.
 *
 * With one shard (standalone) this is trivial, but the operations are the
 * ones the cluster uses.
 */
import { decodeJson, encodeJson, type Bus, type BusMessage, type Subjects, type Subscription } from '@crowdplay/bus';
import { CrowdplayError, isCrowdplayError, type ErrorCode } from '@crowdplay/protocol';
import type { Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import type { Assignment, AssignmentChange, Migration, Move, RouterApi, RouterReply, RouterRequest, ShardInfo } from './api.ts';
import { MoveBudget, pickLeastLoaded, planMoves, shardState, type MemberLoad, type PlannedMove, type ShardState } from './balance.ts';

export interface RouterOptions {
  /** A shard not heard from for this long is not assigned new channels, ms. */
  shardTimeoutMs: number;
  /** How long `assign` waits for a first live shard, ms. */
  waitForShardMs: number;
  /** Timeout of the acquire request to a shard, ms. */
  requestTimeoutMs: number;
  /** Period of the failover and rebalance check, ms (ROUTER_CHECK_MS); unset: no background check (call `check()`). */
  checkMs?: number;
  /** Channels moved per second to even out the spread (ROUTER_REBALANCE_MOVES_PER_S); 0 or unset: never. */
  rebalanceMovesPerS?: number;
  /** Channels of a dead shard reassigned at once (ROUTER_FAILOVER_CONCURRENCY); default 8. */
  failoverConcurrency?: number;
  /** Intents/s that weigh as much as one channel in a shard's load (ROUTER_INTENTS_PER_CHANNEL); default 200. */
  intentsPerChannel?: number;
  /** Acquires a move tries after the hand-off (ROUTER_MOVE_ACQUIRE_ATTEMPTS); default 3. */
  moveAcquireAttempts?: number;
  now?: () => number;
}

type Counter = ReturnType<Telemetry['metrics']['counter']>;

type Member = MemberLoad;

/** How long a channel whose owner could not hand it off is left alone by the rebalance, in checks. */
const BUSY_CHECKS = 20;
/** Acquires a move tries (100 ms × attempt apart) after the owner handed the channel off, unless set (ROUTER_MOVE_ACQUIRE_ATTEMPTS). */
const MOVE_ACQUIRE_ATTEMPTS = 3;

export class Router implements RouterApi {
  private readonly members = new Map<string, Member>();
  private readonly assignments = new Map<string, Assignment>();
  private readonly inflight = new Map<string, Promise<Assignment>>();
  private readonly migrating = new Map<string, Promise<Migration>>();
  private readonly migrations: Counter;
  private readonly subs: Subscription[] = [];
  private readonly now: () => number;
  private memberWaiters: Array<() => void> = [];
  private startedAtMs = 0;
  private checkTimer: NodeJS.Timeout | null = null;
  private checking: Promise<void> | null = null;
  private readonly budget: MoveBudget;
  /** Channels whose owner refused a rebalance release, until ms. */
  private readonly busy = new Map<string, number>();
  private readonly moved: Counter;
  /** The process behind each shard id, from its heartbeats. */
  private readonly instances = new Map<string, string>();
  private readonly moveRetries: Counter;

  constructor(
    private readonly deps: { bus: Bus; subjects: Subjects; store: Store; telemetry: Telemetry },
    private readonly opts: RouterOptions,
  ) {
    this.now = opts.now ?? Date.now;
    this.budget = new MoveBudget(opts.rebalanceMovesPerS ?? 0, this.now());
    this.moved = deps.telemetry.metrics.counter(
      'crowdplay_router_moves_total',
      'Channels the router moved between shards, by reason: failover (the owner missed its heartbeats), rebalance (ROUTER_REBALANCE_MOVES_PER_S), refused (the owner could not hand the channel off), failed',
    );
    this.moveRetries = deps.telemetry.metrics.counter(
      'crowdplay_router_move_acquire_retries_total',
      'Acquires a move tried again after the new owner refused or did not answer (ROUTER_MOVE_ACQUIRE_ATTEMPTS bounds them per move)',
    );
    this.migrations = deps.telemetry.metrics.counter(
      'crowdplay_channel_migrations_total',
      'Channel moves (a Telegram group upgraded to a supergroup) asked of the router, by outcome: moved, done (finished before: a re-delivered update), none (the old chat never played), refused (bad request), failed (resumed by the next request)',
    );
    deps.telemetry.metrics.gauge('crowdplay_router_live_shards', 'Shards heard from within the shard timeout', () => this.live().length);
  }

  /**
   * Rebuilds the assignments from the channels table (owner + epoch), then
   * starts taking heartbeats, answering `router.ctl` and (with `checkMs`)
   * checking for dead shards and imbalance. Owners not heard from get one
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
    this.subs.push(bus.subscribe(subjects.routerCtl(), (msg) => void this.onCtl(msg), { queue: 'router' }));
    // A shard that releases a channel on its own (drain) says so here: the channel has no owner until assigned again.
    this.subs.push(
      bus.subscribe(subjects.routerAssignments(), (msg) => {
        try {
          const c = decodeJson<AssignmentChange>(msg.data);
          const known = this.assignments.get(c.channel);
          if (c.shard === null && known && known.epoch <= c.epoch && !this.inflight.has(c.channel)) this.assignments.delete(c.channel);
        } catch {
          telemetry.refusals.refuse('router', 'CP_ERR_PROTO_MALFORMED', { subject: msg.subject });
        }
      }),
    );
    await bus.flush();
    if (this.opts.checkMs) this.checkTimer = setInterval(() => void this.check(), this.opts.checkMs);
  }

  private onHeartbeat(msg: BusMessage): void {
    try {
      const hb = decodeJson<{ id: string; instance?: string; channels: number; intentsPerS?: number; draining?: boolean }>(msg.data);
      if (typeof hb.id !== 'string' || typeof hb.channels !== 'number') throw new TypeError('bad heartbeat');
      const prev = this.instances.get(hb.id);
      if (typeof hb.instance === 'string' && prev !== hb.instance) {
        this.instances.set(hb.id, hb.instance);
        // A new process behind this shard id (a restart, or the first beat this router hears): what Postgres no longer
        // records as its own was its predecessor's and is assigned again.
        void this.reconcile(hb.id);
      }
      // Updated in place: an acquire in flight holds this object and sets its channel count from the shard's reply
      // (NATS keeps one connection's messages in order, so a beat sent before that reply is also read before it).
      const m = this.members.get(hb.id) ?? { id: hb.id, channels: 0, intentsPerS: 0, lastSeenMs: 0, draining: false };
      m.channels = hb.channels;
      m.intentsPerS = typeof hb.intentsPerS === 'number' && hb.intentsPerS >= 0 ? hb.intentsPerS : 0;
      m.lastSeenMs = this.now();
      m.draining = hb.draining === true;
      this.members.set(hb.id, m);
      const w = this.memberWaiters;
      this.memberWaiters = [];
      for (const f of w) f();
    } catch {
      this.deps.telemetry.refusals.refuse('router', 'CP_ERR_PROTO_MALFORMED', { subject: msg.subject });
    }
  }

  private live(): Member[] {
    return [...this.members.values()].filter((m) => this.stateOf(m.id) === 'live');
  }

  private stateOf(shard: string): ShardState {
    return shardState(this.members.get(shard), this.now(), this.opts.shardTimeoutMs, this.startedAtMs);
  }

  /**
   * The least-loaded live shard (channels and intents/s, not a hash), other
   * than `exclude`; waits up to waitForShardMs for one when `wait`.
   */
  private async pickShard(wait = true, exclude?: string): Promise<Member> {
    const deadline = this.now() + (wait ? this.opts.waitForShardMs : 0);
    for (;;) {
      const best = pickLeastLoaded(
        this.live().filter((m) => m.id !== exclude),
        this.opts.intentsPerChannel ?? 200,
      );
      if (best) {
        // Counted at once, before its acquire answers: assigns in flight together (a burst of new channels) would
        // otherwise all pick the same shard until its next heartbeat. acquireOn gives it back when the acquire fails.
        best.channels++;
        return best;
      }
      const left = deadline - this.now();
      if (left <= 0) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', ['*']);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.memberWaiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** A known owner that keeps its channels: live, or not heard from yet since this router started. */
  private keeps(shard: string): boolean {
    const st = this.stateOf(shard);
    return st === 'live' || st === 'unknown';
  }

  assign(channel: string): Promise<Assignment> {
    // One acquire or move per channel at a time; concurrent callers share it.
    const p = this.inflight.get(channel);
    if (p) return p;
    const known = this.assignments.get(channel);
    if (known && this.keeps(known.shard)) return Promise.resolve(known);
    return this.exclusive(channel, () => this.doAssign(channel, true));
  }

  private exclusive(channel: string, f: () => Promise<Assignment>): Promise<Assignment> {
    const p = f().finally(() => this.inflight.delete(channel));
    this.inflight.set(channel, p);
    return p;
  }

  /** Records an assignment and tells the caches (gateways, shards) on `router.assignments`. */
  private announce(change: AssignmentChange): void {
    if (change.shard === null) this.assignments.delete(change.channel);
    else this.assignments.set(change.channel, { channel: change.channel, shard: change.shard, epoch: change.epoch });
    const { bus, subjects } = this.deps;
    bus.publish(subjects.routerAssignments(), encodeJson(change));
  }

  private async doAssign(channel: string, wait: boolean, exclude?: string): Promise<Assignment> {
    const { store, telemetry } = this.deps;
    const row = await store.channels.get(channel);
    if (!row) throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [channel]);
    if (row.migratedTo !== null) {
      telemetry.refusals.refuse('router', 'CP_ERR_CHANNEL_MIGRATED', { channel });
      throw new CrowdplayError('CP_ERR_CHANNEL_MIGRATED', [channel, row.migratedTo]);
    }
    // An owner recorded in Postgres that is alive (or may be: this router just started) keeps the channel at its epoch.
    if (row.owner !== null && row.owner !== exclude && this.keeps(row.owner)) {
      const a: Assignment = { channel, shard: row.owner, epoch: row.epoch };
      this.assignments.set(channel, a);
      return a;
    }
    const shard = await this.pickShard(wait, exclude);
    return this.acquireOn(channel, shard);
  }

  /**
   * Bumps the epoch for `shard` in Postgres and makes it acquire the channel.
   * The caller has already counted the channel in `shard.channels`; a failed acquire takes it back.
   * @throws CrowdplayError when the shard refuses or does not answer; the store's error
   */
  private async acquireOn(channel: string, shard: Member): Promise<Assignment> {
    const { store, bus, subjects, telemetry } = this.deps;
    const unreserve = (): void => void (shard.channels = Math.max(0, shard.channels - 1));
    let epoch: number;
    try {
      epoch = await store.channels.acquire(channel, shard.id);
    } catch (err) {
      unreserve();
      throw err;
    }
    let reply: { ok: boolean; code?: ErrorCode; message?: string; channels?: number };
    try {
      const msg = await bus.request(subjects.shardCtl(shard.id), encodeJson({ op: 'acquire', channel, epoch }), {
        timeoutMs: this.opts.requestTimeoutMs,
      });
      reply = decodeJson(msg.data);
    } catch (err) {
      reply = { ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: String(err) };
    }
    if (!reply.ok) {
      unreserve();
      // The shard did not take it: clear the owner (at this epoch only) so nobody believes it is served.
      await store.channels.release(channel, shard.id, epoch);
      throw new CrowdplayError(reply.code ?? 'CP_ERR_CHANNEL_UNAVAILABLE', [channel], { cause: reply.message });
    }
    const a: Assignment = { channel, shard: shard.id, epoch };
    this.announce(a);
    telemetry.logger.info(a, 'channel assigned');
    return a;
  }

  /**
   * One pass of the background work (every `checkMs`; tests call it with a
   * fake clock): every channel of a dead shard is reassigned to live shards
   * (ROUTER_FAILOVER_CONCURRENCY at a time); then, if no shard is dead, up
   * to the rebalance budget of channels move from the fullest to the
   * emptiest live shard. Passes never overlap (a call during one returns it).
   */
  check(): Promise<void> {
    this.checking ??= this.doCheck()
      .catch((err: unknown) => this.deps.telemetry.logger.error({ err }, 'router check failed'))
      .finally(() => (this.checking = null));
    return this.checking;
  }

  private async doCheck(): Promise<void> {
    const now = this.now();
    for (const [ch, until] of this.busy) if (until <= now) this.busy.delete(ch);
    const orphans: string[] = [];
    for (const a of this.assignments.values())
      if (this.stateOf(a.shard) === 'dead' && !this.inflight.has(a.channel)) orphans.push(a.channel);
    if (orphans.length > 0) {
      if (this.live().length === 0) return; // nobody to take them; the next pass tries again
      await this.failover(orphans);
      return;
    }
    const rate = this.opts.rebalanceMovesPerS ?? 0;
    if (rate <= 0) return;
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
    for (const mv of wanted.slice(0, n)) {
      if (this.inflight.has(mv.channel)) continue;
      await this.exclusive(mv.channel, () => this.rebalanceMove(mv)).catch(() => undefined);
    }
  }

  /**
   * After a shard process (re)starts: channels the router believes it owns but
   * whose Postgres row says otherwise (the new process disowned them) are
   * reassigned now, like a failover.
   */
  private async reconcile(shard: string): Promise<void> {
    try {
      const mine = new Set((await this.deps.store.channels.listOwned(shard)).map((r) => r.id));
      const lost = [...this.assignments.values()]
        .filter((a) => a.shard === shard && !mine.has(a.channel) && !this.inflight.has(a.channel))
        .map((a) => a.channel);
      if (lost.length === 0) return;
      this.deps.telemetry.logger.warn({ shard, channels: lost.length }, 'router: a shard restarted; assigning its channels again');
      for (const ch of lost) this.assignments.delete(ch);
      await this.failover(lost);
    } catch (err) {
      this.deps.telemetry.logger.error({ err, shard }, 'router: reconcile after a shard restart failed');
    }
  }

  /** Reassigns the channels of dead shards, a bounded number at once. */
  private async failover(channels: string[]): Promise<void> {
    const { telemetry } = this.deps;
    telemetry.logger.warn({ channels: channels.length }, 'router: shard(s) missed their heartbeats; moving their channels');
    const queue = [...channels];
    const worker = async (): Promise<void> => {
      for (let ch = queue.shift(); ch !== undefined; ch = queue.shift()) {
        if (this.inflight.has(ch)) continue;
        const from = this.assignments.get(ch)?.shard;
        try {
          const a = await this.exclusive(ch, () => this.doAssign(ch, false));
          if (a.shard !== from) this.moved.add(1, { reason: 'failover' });
        } catch (err) {
          this.moved.add(1, { reason: 'failed' });
          if (isCrowdplayError(err, 'CP_ERR_CHANNEL_UNKNOWN') || isCrowdplayError(err, 'CP_ERR_CHANNEL_MIGRATED')) {
            this.announce({ channel: ch, shard: null, epoch: 0 });
          }
          telemetry.logger.warn({ err, channel: ch }, 'failover of a channel failed (the next check retries)');
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(queue.length, this.opts.failoverConcurrency ?? 8) }, worker));
  }

  /**
   * Moves a channel between two live shards like a drain's `move`, open
   * rounds included: the owner hands it off (release with `handoff`: in-flight
   * stakes commit, open rounds' books written at its epoch), the new shard
   * acquires it at a new epoch and resumes the rounds, then the old owner drops
   * its subscriptions (`forget`). A failed handoff leaves the channel where it
   * is (left alone for BUSY_CHECKS checks). If the new shard fails, the
   * channel goes to whichever live shard takes it.
   */
  private async rebalanceMove(mv: PlannedMove): Promise<Assignment> {
    const { bus, subjects, telemetry } = this.deps;
    const known = this.assignments.get(mv.channel);
    if (!known || known.shard !== mv.from) return known ?? this.doAssign(mv.channel, false);
    const to = this.members.get(mv.to);
    if (!to || this.stateOf(mv.to) !== 'live') return known;
    let reply: { ok: boolean; code?: ErrorCode; message?: string; channels?: number };
    try {
      const msg = await bus.request(subjects.shardCtl(mv.from), encodeJson({ op: 'release', channel: mv.channel, handoff: true }), {
        timeoutMs: this.opts.requestTimeoutMs,
      });
      reply = decodeJson(msg.data);
    } catch (err) {
      reply = { ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: String(err) };
    }
    if (!reply.ok) {
      this.moved.add(1, { reason: 'refused' });
      this.busy.set(mv.channel, this.now() + BUSY_CHECKS * (this.opts.checkMs ?? 500));
      telemetry.logger.info({ ...mv, code: reply.code }, 'rebalance: the owner could not hand the channel off');
      return known;
    }
    const from = this.members.get(mv.from);
    if (from) from.channels = Math.max(0, from.channels - 1);
    let a: Assignment | null = null;
    try {
      to.channels++;
      a = await this.acquireOn(mv.channel, to);
      this.moved.add(1, { reason: 'rebalance' });
      telemetry.logger.info({ ...mv, epoch: a.epoch }, 'rebalance: channel moved');
    } catch (err) {
      telemetry.logger.warn({ err, ...mv }, 'rebalance: the new shard did not take the channel; assigning it anew');
      this.assignments.delete(mv.channel);
      a = await this.doAssign(mv.channel, true).catch(() => null);
    } finally {
      // The old owner stops refusing (unless it took the channel back): its queue-group subscriptions would otherwise keep
      // a share of the channel's messages from the new owner.
      if (a?.shard !== mv.from)
        await bus
          .request(subjects.shardCtl(mv.from), encodeJson({ op: 'forget', channel: mv.channel }), { timeoutMs: this.opts.requestTimeoutMs })
          .catch((err: unknown) => telemetry.logger.warn({ err, ...mv }, 'rebalance: the old owner did not answer forget'));
    }
    if (!a) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [mv.channel]);
    return a;
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
    this.announce({ channel, shard: null, epoch: a.epoch });
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
        this.migrations.add(1, { outcome: 'refused' });
        telemetry.refusals.refuse('router', err.code, { from, to });
      }
      throw err;
    }
    if (begun === 'none' || begun === 'done') {
      this.migrations.add(1, { outcome: begun });
      return { from, to, outcome: begun, absorbed: null };
    }
    try {
      // 1. The old channel's owner stops serving it and writes its final snapshot at its epoch.
      if (this.assignments.has(from)) this.announce({ channel: from, shard: null, epoch: this.assignments.get(from)!.epoch });
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
      this.migrations.add(1, { outcome: 'moved' });
      return { from, to, outcome: 'moved', absorbed };
    } catch (err) {
      // The move stays recorded (the old channel is not served); the next request resumes it.
      this.migrations.add(1, { outcome: 'failed' });
      throw err;
    }
  }

  /**
   * Moves `channel` from its owner (which must be `from` when given) to the
   * live shard with the fewest channels among the others, open rounds
   * included: the owner hands it off (release with `handoff`: in-flight
   * stakes commit, open rounds' books written at its epoch), the new owner
   * acquires it at a new epoch and resumes the rounds, then the old owner
   * drops its subscriptions (`forget`). Not moved (nothing changes) when no
   * other live shard exists or `from` is not the owner.
   * @throws CrowdplayError CP_ERR_CHANNEL_UNKNOWN; CP_ERR_CHANNEL_UNAVAILABLE
   *   or the owner's code when the handoff failed (the owner still serves
   *   it) or the new owner's acquire failed (the channel is then unowned, its
   *   rounds durable: the next assign resumes them)
   */
  move(channel: string, from?: string): Promise<Move> {
    // After any assign of the channel in progress; assigns that arrive meanwhile wait for the move.
    const before = this.inflight.get(channel) ?? Promise.resolve(null);
    const p = before.catch(() => null).then(() => this.doMove(channel, from));
    const asAssign = p.then((m) => {
      if (m.shard === null) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [channel]);
      return { channel, shard: m.shard, epoch: m.epoch };
    });
    void asAssign.catch(() => undefined).finally(() => this.inflight.get(channel) === asAssign && this.inflight.delete(channel));
    this.inflight.set(channel, asAssign);
    return p;
  }

  private async doMove(channel: string, from?: string): Promise<Move> {
    const { store, bus, subjects, telemetry } = this.deps;
    const row = await store.channels.get(channel);
    if (!row) throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [channel]);
    const source = row.owner;
    const stay: Move = { channel, moved: false, shard: source, epoch: row.epoch };
    if (source === null || (from !== undefined && source !== from)) return stay;
    if (!this.live().some((m) => m.id !== source)) {
      telemetry.logger.warn({ channel, shard: source }, 'move: no other live shard');
      return stay;
    }
    // 1. The owner hands the channel off: open rounds' books written at its epoch, owner cleared.
    const msg = await bus.request(subjects.shardCtl(source), encodeJson({ op: 'release', channel, handoff: true }), {
      timeoutMs: this.opts.requestTimeoutMs,
    });
    const rel = decodeJson<{ ok: boolean; code?: ErrorCode; message?: string }>(msg.data);
    if (!rel.ok) throw new CrowdplayError(rel.code ?? 'CP_ERR_CHANNEL_UNAVAILABLE', [channel], { cause: rel.message });
    this.assignments.delete(channel);
    // 2. Another shard acquires it at a new epoch and resumes the rounds. Retried: an acquire can fail on its own (the new
    // owner's sequencer lease timed out, say), and once handed off the channel has no owner until someone assigns it again.
    let a: Assignment;
    for (let attempt = 1; ; attempt++) {
      try {
        a = await this.doAssign(channel, true, source);
        break;
      } catch (err) {
        if (
          attempt >= (this.opts.moveAcquireAttempts ?? MOVE_ACQUIRE_ATTEMPTS) ||
          isCrowdplayError(err, 'CP_ERR_CHANNEL_UNKNOWN') ||
          isCrowdplayError(err, 'CP_ERR_CHANNEL_MIGRATED')
        )
          throw err;
        this.moveRetries.add(1);
        telemetry.logger.warn({ err, channel, attempt }, 'move: the new owner did not acquire the channel; trying again');
        await new Promise((r) => setTimeout(r, 100 * attempt));
      }
    }
    // 3. The old owner stops refusing (its subscriptions go).
    await bus
      .request(subjects.shardCtl(source), encodeJson({ op: 'forget', channel }), { timeoutMs: this.opts.requestTimeoutMs })
      .catch((err: unknown) => telemetry.logger.warn({ err, channel, shard: source }, 'move: the old owner did not answer forget'));
    telemetry.logger.info({ channel, from: source, to: a.shard, epoch: a.epoch }, 'channel moved');
    return { channel, moved: true, shard: a.shard, epoch: a.epoch };
  }

  membership(): Promise<ShardInfo[]> {
    return Promise.resolve(this.live().map(({ id, channels, intentsPerS, lastSeenMs }) => ({ id, channels, intentsPerS, lastSeenMs })));
  }

  private async onCtl(msg: BusMessage): Promise<void> {
    let reply: RouterReply;
    try {
      const req = decodeJson<RouterRequest>(msg.data);
      switch (req.op) {
        case 'assign':
          reply = { ok: true, assignment: await this.assign(req.channel) };
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
        default:
          throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['unknown router op']);
      }
    } catch (err) {
      if (isCrowdplayError(err)) reply = { ok: false, code: err.code, message: err.message };
      else {
        this.deps.telemetry.logger.error({ err }, 'router request failed');
        reply = { ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'router error' };
      }
    }
    msg.respond(encodeJson(reply));
  }

  /** Stops answering. Safe to call twice. */
  async close(): Promise<void> {
    if (this.checkTimer) clearInterval(this.checkTimer);
    this.checkTimer = null;
    for (const s of this.subs.splice(0)) s.unsubscribe();
    await this.checking;
  }
}
