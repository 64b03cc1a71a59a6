/**
 * The router: pins channels to shards. It keeps membership from shard
 * heartbeats, assigns an unowned channel to the live shard with the fewest
 * channels, and makes ownership durable by bumping the channel's epoch in
 * Postgres before telling the shard to acquire it.
 *
 * With one shard (standalone) this is trivial, but the operations are the
 * ones the cluster uses.
 */
import { decodeJson, encodeJson, type Bus, type BusMessage, type Subjects, type Subscription } from '@crowdplay/bus';
import { CrowdplayError, isCrowdplayError, type ErrorCode } from '@crowdplay/protocol';
import type { Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import type { Assignment, Migration, Move, RouterApi, RouterReply, RouterRequest, ShardInfo } from './api.ts';

export interface RouterOptions {
  /** A shard not heard from for this long is not assigned new channels, ms. */
  shardTimeoutMs: number;
  /** How long `assign` waits for a first live shard, ms. */
  waitForShardMs: number;
  /** Timeout of the acquire request to a shard, ms. */
  requestTimeoutMs: number;
  now?: () => number;
}

type Counter = ReturnType<Telemetry['metrics']['counter']>;

interface Member extends ShardInfo {
  draining: boolean;
}

export class Router implements RouterApi {
  private readonly members = new Map<string, Member>();
  private readonly assignments = new Map<string, Assignment>();
  private readonly inflight = new Map<string, Promise<Assignment>>();
  private readonly migrating = new Map<string, Promise<Migration>>();
  private readonly migrations: Counter;
  private readonly subs: Subscription[] = [];
  private readonly now: () => number;
  private memberWaiters: Array<() => void> = [];

  constructor(
    private readonly deps: { bus: Bus; subjects: Subjects; store: Store; telemetry: Telemetry },
    private readonly opts: RouterOptions,
  ) {
    this.now = opts.now ?? Date.now;
    this.migrations = deps.telemetry.metrics.counter(
      'crowdplay_channel_migrations_total',
      'Channel moves (a Telegram group upgraded to a supergroup) asked of the router, by outcome: moved, done (finished before: a re-delivered update), none (the old chat never played), refused (bad request), failed (resumed by the next request)',
    );
    deps.telemetry.metrics.gauge('crowdplay_router_live_shards', 'Shards heard from within the shard timeout', () => this.live().length);
  }

  /** Starts taking heartbeats and answering `router.ctl`. */
  async start(): Promise<void> {
    const { bus, subjects } = this.deps;
    this.subs.push(bus.subscribe(subjects.shardHeartbeat(), (msg) => this.onHeartbeat(msg)));
    this.subs.push(bus.subscribe(subjects.routerCtl(), (msg) => void this.onCtl(msg), { queue: 'router' }));
    await bus.flush();
  }

  private onHeartbeat(msg: BusMessage): void {
    try {
      const hb = decodeJson<{ id: string; channels: number; draining?: boolean }>(msg.data);
      this.members.set(hb.id, { id: hb.id, channels: hb.channels, lastSeenMs: this.now(), draining: hb.draining === true });
      const w = this.memberWaiters;
      this.memberWaiters = [];
      for (const f of w) f();
    } catch {
      this.deps.telemetry.refusals.refuse('router', 'CP_ERR_PROTO_MALFORMED', { subject: msg.subject });
    }
  }

  private live(): Member[] {
    const cutoff = this.now() - this.opts.shardTimeoutMs;
    return [...this.members.values()].filter((m) => m.lastSeenMs >= cutoff && !m.draining);
  }

  private isLive(shard: string): boolean {
    return this.live().some((m) => m.id === shard);
  }

  private async pickShard(exclude?: string): Promise<Member> {
    const deadline = this.now() + this.opts.waitForShardMs;
    for (;;) {
      const live = this.live().filter((m) => m.id !== exclude);
      if (live.length > 0) {
        // Fewest channels first (load, not a hash); ties by id for determinism.
        live.sort((a, b) => a.channels - b.channels || a.id.localeCompare(b.id));
        return live[0]!;
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

  assign(channel: string): Promise<Assignment> {
    const known = this.assignments.get(channel);
    if (known && this.isLive(known.shard)) return Promise.resolve(known);
    // One acquire per channel at a time; concurrent callers share it.
    let p = this.inflight.get(channel);
    if (!p) {
      p = this.doAssign(channel).finally(() => this.inflight.delete(channel));
      this.inflight.set(channel, p);
    }
    return p;
  }

  private async doAssign(channel: string, exclude?: string): Promise<Assignment> {
    const { store, bus, subjects, telemetry } = this.deps;
    const row = await store.channels.get(channel);
    if (!row) throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [channel]);
    if (row.migratedTo !== null) {
      telemetry.refusals.refuse('router', 'CP_ERR_CHANNEL_MIGRATED', { channel });
      throw new CrowdplayError('CP_ERR_CHANNEL_MIGRATED', [channel, row.migratedTo]);
    }
    const shard = await this.pickShard(exclude);
    const epoch = await store.channels.acquire(channel, shard.id);
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
      // The shard did not take it: clear the owner (at this epoch only) so nobody believes it is served.
      await store.channels.release(channel, shard.id, epoch);
      throw new CrowdplayError(reply.code ?? 'CP_ERR_CHANNEL_UNAVAILABLE', [channel], { cause: reply.message });
    }
    shard.channels = reply.channels ?? shard.channels + 1;
    const a: Assignment = { channel, shard: shard.id, epoch };
    this.assignments.set(channel, a);
    telemetry.logger.info(a, 'channel assigned');
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
    this.assignments.delete(channel);
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
      this.assignments.delete(from);
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
    // 2. Another shard acquires it at a new epoch and resumes the rounds.
    const a = await this.doAssign(channel, source);
    // 3. The old owner stops refusing (its subscriptions go).
    await bus
      .request(subjects.shardCtl(source), encodeJson({ op: 'forget', channel }), { timeoutMs: this.opts.requestTimeoutMs })
      .catch((err: unknown) => telemetry.logger.warn({ err, channel, shard: source }, 'move: the old owner did not answer forget'));
    telemetry.logger.info({ channel, from: source, to: a.shard, epoch: a.epoch }, 'channel moved');
    return { channel, moved: true, shard: a.shard, epoch: a.epoch };
  }

  membership(): Promise<ShardInfo[]> {
    return Promise.resolve(this.live().map(({ id, channels, lastSeenMs }) => ({ id, channels, lastSeenMs })));
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
  close(): Promise<void> {
    for (const s of this.subs.splice(0)) s.unsubscribe();
    return Promise.resolve();
  }
}
