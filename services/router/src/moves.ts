/**
 * Moves between live shards, open rounds included: a drain (every channel of a leaving shard, in batches), an
 * operator's move of one channel, and the rebalance's paced moves. The owner hands a batch off, the handed-off
 * channels are placed elsewhere at a new epoch, and the owner forgets them.
 */
import { CONTROL_VERSION, CrowdplayError, type ErrorCode } from '@crowdplay/protocol';
import type { Assignment, Move } from './api.ts';
import type { PlannedMove } from './balance.ts';
import type { Placement } from './placement.ts';
import { drainBatchOf, type MoveOutcome, type Reason, type RouterState } from './router-state.ts';

/** How long a channel whose owner could not hand it off is left alone by the rebalance, in checks. */
const BUSY_CHECKS = 20;
/** Default of RouterOptions.rebalanceCooldownMs, ms. */
const REBALANCE_COOLDOWN_MS = 60_000;

export class Moves {
  private rebalances = 0;

  constructor(
    private readonly s: RouterState,
    private readonly placement: Placement,
  ) {}

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
    const row = await this.s.deps.store.channels.get(channel);
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
    const owned = new Set((await this.s.deps.store.channels.listOwned(shard)).map((r) => r.id));
    for (const a of this.s.assignments.values()) if (a.shard === shard) owned.add(a.channel);
    const list = [...owned];
    const per = drainBatchOf(this.s.opts.drainBatchChannels);
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

  /**
   * Moves a check's planned channels between live shards like a drain's move, open rounds included: the
   * channels of one owner in one {@link moveMany} (one handoff request, one placement, one forget per owner),
   * owner after owner. A channel whose owner or plan changed meanwhile is left out; one whose owner could not
   * hand it off stays where it is, left alone for BUSY_CHECKS checks; one that moved stays put for
   * ROUTER_REBALANCE_COOLDOWN_MS. No other rebalance starts until it ends: its handed-off channels are out of the
   * counts a plan works from until they are placed.
   */
  async rebalance(moves: readonly PlannedMove[]): Promise<void> {
    this.rebalances++;
    try {
      await this.rebalanceOwners(moves);
    } finally {
      this.rebalances--;
    }
  }

  /** A rebalance's moves are in flight: the next one waits (their channels are out of the counts until placed). */
  get rebalancing(): boolean {
    return this.rebalances > 0;
  }

  private async rebalanceOwners(moves: readonly PlannedMove[]): Promise<void> {
    const bySource = new Map<string, string[]>();
    for (const mv of moves) {
      const known = this.s.assignments.get(mv.channel);
      if (!known || known.shard !== mv.from || this.s.stateOf(mv.to) !== 'live') continue;
      const list = bySource.get(mv.from);
      if (list) list.push(mv.channel);
      else bySource.set(mv.from, [mv.channel]);
    }
    for (const [from, planned] of bySource) {
      if (this.s.closed) return;
      // Taken in flight since the plan (an assign's move, a drain): theirs, not the rebalance's.
      const channels = planned.filter((ch) => !this.s.inflight.has(ch));
      if (channels.length === 0) continue;
      let results: Array<MoveOutcome>;
      try {
        results = await this.moveMany(channels, from, 'rebalance');
      } catch (err) {
        this.s.deps.telemetry.logger.warn(
          { err, from, channels: channels.length },
          'rebalance: the move failed; the next check plans again',
        );
        continue;
      }
      const now = this.s.now();
      const refused: string[] = [];
      for (const m of results) {
        // Left where it is for a while: the next rebalance picks another channel (planMoves takes the lowest id it may move).
        if (m.moved) this.s.busy.set(m.channel, now + (this.s.opts.rebalanceCooldownMs ?? REBALANCE_COOLDOWN_MS));
        else if (m.handoffRefused) {
          refused.push(m.channel);
          this.s.busy.set(m.channel, now + BUSY_CHECKS * (this.s.opts.checkMs ?? 500));
        }
      }
      if (refused.length > 0) {
        this.s.m.moved.add(refused.length, { reason: 'refused' });
        this.s.deps.telemetry.logger.info(
          { from, channels: refused.length, first: refused[0], code: results.find((m) => m.handoffRefused)?.code },
          'rebalance: the owner could not hand channels off',
        );
      }
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
    const held = (): Array<Promise<unknown>> => channels.flatMap((ch) => this.s.inflight.get(ch) ?? []);
    for (let busy = held(); busy.length > 0; busy = held()) await Promise.all(busy.map((p) => p.catch(() => undefined)));
    // Assigns of these channels wait for the move.
    const done: Array<() => void> = [];
    for (const ch of channels) {
      const p = new Promise<Assignment>((resolve, reject) =>
        done.push(() => {
          const a = this.s.assignments.get(ch);
          if (a) resolve(a);
          else reject(new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [ch]));
        }),
      );
      void p.catch(() => undefined);
      this.s.inflight.set(ch, p);
      void p.finally(() => this.s.inflight.get(ch) === p && this.s.inflight.delete(ch)).catch(() => undefined);
    }
    try {
      return await this.doMoveMany(channels, from, reason, handedOff);
    } finally {
      for (const f of done) f();
    }
  }

  private async doMoveMany(channels: readonly string[], from: string, reason: Reason, handedOff?: () => void): Promise<Array<MoveOutcome>> {
    const { store, telemetry } = this.s.deps;
    const rows = await store.channels.getMany(channels);
    const result = new Map<string, MoveOutcome>();
    const mine: string[] = [];
    for (const ch of channels) {
      const row = rows.get(ch);
      if (!row) result.set(ch, { channel: ch, moved: false, shard: null, epoch: 0 });
      else if (row.owner !== from) result.set(ch, { channel: ch, moved: false, shard: row.owner, epoch: row.epoch });
      else mine.push(ch);
    }
    const others = this.s.live().filter((m) => m.id !== from);
    if (mine.length > 0 && others.length === 0) {
      // With a single shard ever heard from (standalone), every stop ends here: worth a warning only in a cluster.
      const level = this.s.members.size > 1 ? 'warn' : 'info';
      telemetry.logger[level]({ shard: from, channels: mine.length }, 'move: no other live shard');
      for (const ch of mine) result.set(ch, { channel: ch, moved: false, shard: from, epoch: rows.get(ch)!.epoch });
      return channels.map((ch) => result.get(ch)!);
    }
    // 1. The owner hands the channels off: open rounds' books written at its epoch, owners cleared.
    const member = this.s.members.get(from);
    const handed: string[] = [];
    const handoffs =
      member && member.v >= 2
        ? await this.s.batched(
            mine,
            (ch) => ch,
            (chunk) => this.s.request(from, { v: CONTROL_VERSION, op: 'release', channels: chunk, handoff: true }, this.s.batchTimeoutMs()),
          )
        : await Promise.all(
            mine.map(async (channel) => {
              const r = await this.s.request(from, { op: 'release', channel, handoff: true }, this.s.opts.requestTimeoutMs);
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
    for (const ch of handed) this.s.assignments.delete(ch);
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
        this.s.unplaced.add(ch);
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
    if (moved > 0) this.s.m.moved.add(moved, { reason });
    if (handed.length > moved) this.s.m.moved.add(handed.length - moved, { reason: 'failed' });
    // 3. The old owner stops refusing (its subscriptions go).
    if (forget.length > 0) {
      const answers =
        member && member.v >= 2
          ? await this.s.batched(
              forget,
              (ch) => ch,
              (chunk) => this.s.request(from, { v: CONTROL_VERSION, op: 'forget', channels: chunk }, this.s.opts.requestTimeoutMs),
            )
          : await Promise.all(
              forget.map(async (channel) => ({
                channel,
                ok: (await this.s.request(from, { op: 'forget', channel }, this.s.opts.requestTimeoutMs)).ok,
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
      return await this.placement.place(handed, { wait: true, reason, exclude: from });
    } catch (err) {
      const e = new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', ['*'], { cause: err });
      return new Map(handed.map((ch) => [ch, e]));
    }
  }
}
