/**
 * Channels put back on live shards after a fault: a dead shard's channels (failover), the channels a restarted
 * shard process disowned, and the reconciler's pass (channels whose recorded owner is dead or does not hold them).
 */
import { CONTROL_VERSION, isCrowdplayError } from '@crowdplay/protocol';
import type { Assignment } from './api.ts';
import type { Placement } from './placement.ts';
import type { Reason, RouterState } from './router-state.ts';

export class Recovery {
  /** Channels a reconcile pass found not held by their recorded owner, placed if the next pass finds the same. */
  private suspects = new Set<string>();

  constructor(
    private readonly s: RouterState,
    private readonly placement: Placement,
  ) {}

  /**
   * Places the channels of a dead shard (or ones an earlier move left unplaced: `shard` undefined) on live
   * shards, in one batch; what no shard takes is retried by the next check.
   */
  async failover(channels: string[], shard: string | undefined, reason: Reason = 'failover'): Promise<void> {
    const { telemetry } = this.s.deps;
    let outcome: Map<string, Promise<Assignment>>;
    try {
      outcome = this.placement.placeExclusive(channels, { wait: false, reason, exclude: shard });
    } catch (err) {
      for (const ch of channels) this.s.unplaced.add(ch);
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
            this.s.announce([{ channel: ch, shard: null, epoch: 0 }]);
          } else this.s.unplaced.add(ch);
        }
      }),
    );
    if (moved > 0) this.s.m.moved.add(moved, { reason });
    if (failed > 0) this.s.m.moved.add(failed, { reason: 'failed' });
    const since = shard === undefined ? undefined : this.s.deadSince.get(shard);
    const moveMs = since === undefined ? undefined : this.s.now() - since;
    if (moveMs !== undefined && moved > 0) this.s.m.failoverMs.record(moveMs);
    telemetry.logger.info({ shard: shard ?? null, reason, moved, failed, moveMs }, 'router: channels moved');
  }

  /**
   * After a shard process (re)starts: channels the router believes it owns but
   * whose Postgres row says otherwise (the new process disowned them) are
   * placed again now, like a failover.
   */
  async reconcileRestart(shard: string): Promise<void> {
    const mine = new Set((await this.s.deps.store.channels.listOwned(shard)).map((r) => r.id));
    const lost = [...this.s.assignments.values()]
      .filter((a) => a.shard === shard && !mine.has(a.channel) && !this.s.inflight.has(a.channel))
      .map((a) => a.channel);
    if (lost.length === 0) return;
    this.s.deps.telemetry.logger.warn({ shard, channels: lost.length }, 'router: a shard restarted; assigning its channels again');
    for (const ch of lost) this.s.assignments.delete(ch);
    await this.failover(lost, undefined, 'restart');
  }

  /**
   * One reconciler pass (see Router.reconcile): channels whose recorded owner is live but does not hold them in two
   * passes in a row are placed again at a new epoch.
   */
  async reconcilePass(): Promise<void> {
    const rows = await this.s.deps.store.channels.listAssigned();
    const byOwner = new Map<string, string[]>();
    for (const r of rows) {
      if (r.owner === null || r.migratedTo !== null) continue;
      const known = this.s.assignments.get(r.id);
      if (!this.s.inflight.has(r.id) && (!known || known.epoch < r.epoch))
        this.s.assignments.set(r.id, { channel: r.id, shard: r.owner, epoch: r.epoch });
      const list = byOwner.get(r.owner);
      if (list) list.push(r.id);
      else byOwner.set(r.owner, [r.id]);
    }
    const missing = new Set<string>();
    await Promise.all(
      [...byOwner].map(async ([owner, chs]) => {
        const m = this.s.members.get(owner);
        if (!m || this.s.stateOf(owner) !== 'live' || m.v < 2) return; // dead owners: the check moves them
        const r = await this.s.request(owner, { v: CONTROL_VERSION, op: 'owned' }, this.s.opts.requestTimeoutMs);
        if (!r.ok || !r.owned) return;
        const held = new Set(r.owned);
        for (const ch of chs) if (!held.has(ch) && !this.s.inflight.has(ch)) missing.add(ch);
      }),
    );
    const lost = [...missing].filter((ch) => this.suspects.has(ch));
    this.suspects = new Set([...missing].filter((ch) => !this.suspects.has(ch)));
    if (lost.length === 0) return;
    this.s.m.reconciled.add(lost.length, { reason: 'not_held' });
    this.s.deps.telemetry.logger.warn({ channels: lost.length }, 'router: channels their recorded owner does not hold; placing them again');
    for (const ch of lost) this.s.assignments.delete(ch);
    await this.failover(lost, undefined, 'reconcile');
  }
}
