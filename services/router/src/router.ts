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
import type { Assignment, RouterApi, RouterReply, RouterRequest, ShardInfo } from './api.ts';

export interface RouterOptions {
  /** A shard not heard from for this long is not assigned new channels, ms. */
  shardTimeoutMs: number;
  /** How long `assign` waits for a first live shard, ms. */
  waitForShardMs: number;
  /** Timeout of the acquire request to a shard, ms. */
  requestTimeoutMs: number;
  now?: () => number;
}

interface Member extends ShardInfo {
  draining: boolean;
}

export class Router implements RouterApi {
  private readonly members = new Map<string, Member>();
  private readonly assignments = new Map<string, Assignment>();
  private readonly inflight = new Map<string, Promise<Assignment>>();
  private readonly subs: Subscription[] = [];
  private readonly now: () => number;
  private memberWaiters: Array<() => void> = [];

  constructor(
    private readonly deps: { bus: Bus; subjects: Subjects; store: Store; telemetry: Telemetry },
    private readonly opts: RouterOptions,
  ) {
    this.now = opts.now ?? Date.now;
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

  private async pickShard(): Promise<Member> {
    const deadline = this.now() + this.opts.waitForShardMs;
    for (;;) {
      const live = this.live();
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

  private async doAssign(channel: string): Promise<Assignment> {
    const { store, bus, subjects, telemetry } = this.deps;
    const row = await store.channels.get(channel);
    if (!row) throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [channel]);
    const shard = await this.pickShard();
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
