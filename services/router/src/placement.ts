/**
 * Placement: channels put on live shards in batches. One Postgres statement bumps the epochs and sets the owners,
 * one `acquire` control message per target shard (at most CONTROL_BATCH_MAX channels) is answered per channel, and
 * one `router.assignments` message tells the caches. What a shard refuses is released at its epoch and tried on
 * another, up to ROUTER_MOVE_ACQUIRE_ATTEMPTS placements.
 */
import { CONTROL_VERSION, CrowdplayError, type ChannelResult, type ErrorCode } from '@crowdplay/protocol';
import type { Assignment, AssignmentChange } from './api.ts';
import { planPlacement } from './balance.ts';
import type { Member, Reason, RouterState } from './router-state.ts';

/** Default of RouterOptions.moveAcquireAttempts. */
const MOVE_ACQUIRE_ATTEMPTS = 3;

export class Placement {
  constructor(private readonly s: RouterState) {}

  /**
   * {@link place} for channels not in flight, each marked in flight until its outcome is known (a channel in
   * flight already shares that one).
   */
  placeExclusive(channels: readonly string[], opts: { wait: boolean; reason: Reason; exclude?: string }): Map<string, Promise<Assignment>> {
    const out = new Map<string, Promise<Assignment>>();
    const todo: string[] = [];
    for (const ch of channels) {
      const p = this.s.inflight.get(ch);
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
      const tracked = p.finally(() => this.s.inflight.get(ch) === tracked && this.s.inflight.delete(ch));
      void tracked.catch(() => undefined);
      this.s.inflight.set(ch, tracked);
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
  async place(
    channels: readonly string[],
    opts: { wait: boolean; reason: Reason; exclude?: string },
  ): Promise<Map<string, Assignment | CrowdplayError>> {
    const { store, telemetry } = this.s.deps;
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
      } else if (row.owner !== null && row.owner !== opts.exclude && opts.reason !== 'reconcile' && this.s.keeps(row.owner)) {
        // An owner recorded in Postgres that is alive or draining (or may be alive: this router just started) keeps the
        // channel at its epoch; not when the reconciler found that it does not hold it (a router that died between the
        // epoch bump and the acquire).
        const a: Assignment = { channel: ch, shard: row.owner, epoch: row.epoch };
        this.s.assignments.set(ch, a);
        out.set(ch, a);
      } else todo.push(ch);
    }
    const attempts = this.s.opts.moveAcquireAttempts ?? MOVE_ACQUIRE_ATTEMPTS;
    const refusedBy = new Map<string, Set<string>>();
    const placedChanges: AssignmentChange[] = [];
    const ipc = this.s.opts.intentsPerChannel ?? 200;
    for (let attempt = 1; todo.length > 0 && attempt <= attempts && !this.s.closed; attempt++) {
      if (attempt > 1) {
        this.s.m.moveRetries.add(todo.length);
        await new Promise((r) => setTimeout(r, 100 * (attempt - 1)));
      }
      let live = this.s.live().filter((m) => m.id !== opts.exclude);
      if (live.length === 0 && opts.wait) {
        await this.s.waitForMember();
        live = this.s.live().filter((m) => m.id !== opts.exclude);
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
        const member = this.s.members.get(shard)!;
        member.channels += chs.length;
        member.placing += chs.length;
      }
      const tWrite = performance.now();
      let epochs: Map<string, number>;
      try {
        epochs = await store.channels.acquireMany([...plan].flatMap(([shard, chs]) => chs.map((channel) => ({ channel, shard }))));
      } catch (err) {
        for (const [shard, chs] of plan) {
          const member = this.s.members.get(shard)!;
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
          const member = this.s.members.get(shard)!;
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
              this.s.assignments.set(channel, a);
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
      this.s.announce(placedChanges);
      this.s.m.placements.add(1, { reason: opts.reason });
      const ms = Math.round(performance.now() - t0);
      this.s.m.placeMs.record(ms);
      telemetry.logger.info(
        placedChanges.length === 1
          ? { ...placedChanges[0], reason: opts.reason, ms }
          : { channels: placedChanges.length, reason: opts.reason, ms, ...phase },
        placedChanges.length === 1 ? 'channel assigned' : 'channels assigned',
      );
    }
    return out;
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
          const r = await this.s.request(member.id, { op: 'acquire', channel, epoch }, this.s.opts.requestTimeoutMs);
          return r.ok ? { channel, ok: true } : { channel, ok: false, code: r.code, message: r.message };
        }),
      );
    return this.s.batched(
      items,
      (it) => it.channel,
      (chunk) => this.s.request(member.id, { v: CONTROL_VERSION, op: 'acquire', channels: chunk }, this.s.batchTimeoutMs()),
    );
  }
}
