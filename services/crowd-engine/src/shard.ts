/**
 * The crowd-engine shard: owns channels given to it by the router (acquire /
 * release at an epoch), takes their intents from the bus, acks them, closes a
 * batch per channel every tick, and publishes viewer updates on change at
 * most every CHANNEL_UPDATE_MS. SHARD_TURN_BUDGET_MS bounds how long it holds
 * the event loop: a tick yields to I/O after that much work, and updates due
 * beyond it go out in the next turns.
 */
import { decodeJson, encodeJson, hedgedRequest, type BusMessage, type Subscription } from '@crowdplay/bus';
import {
  CONTROL_BATCH_MAX,
  CONTROL_VERSION,
  CrowdplayError,
  decodeAssignments,
  decodeControl,
  isCrowdplayError,
  formatMessage,
  ShardControl,
  type ShardControlReply,
  type Heartbeat,
  type ErrorCode,
  type RoundView,
  type WalletCredit,
} from '@crowdplay/protocol';
import type { AbsorbCounts, ChannelCtlReply, ChannelCtlRequest } from './api.ts';
import type { ChannelSnapshotState } from './channel.ts';
import { release as releaseExternal, takeOver, type ExternalGameDeps } from './external-game.ts';
import type { IdBlock } from './ids.ts';
import { Intake } from './intake.ts';
import { Ownership } from './ownership.ts';
import { ShardState, type AcquireResult, type Owned, type ShardDeps } from './shard-state.ts';
import { Ticker } from './ticker.ts';
import { UpdatePublisher } from './updates.ts';

/**
 * Re-sends of one lease at most. NATS hands each request to a random member of the queue group, so with two
 * sequencers and one of them hung every send reaches the hung one with probability 1/2: one re-send would leave a
 * quarter of the leases waiting the whole timeout, two leave an eighth, for at most 2 × SEQUENCER_LEASE_HEDGE_MS.
 */
export const LEASE_HEDGES = 2;

export { REPEAT_HEADER } from './ownership.ts';
export type { AcquireResult, ChargeFn, ShardDeps } from './shard-state.ts';

/**
 * A crowd-engine shard: the façade over its parts, which share one {@link ShardState}: {@link Ownership}
 * (acquire, release, handoff, snapshots), {@link Intake} (intents and acks), {@link Ticker} (batches) and
 * {@link UpdatePublisher} (viewer updates). It runs the loops, answers the control subjects and drains.
 */
export class Shard {
  readonly id: string;
  private readonly s: ShardState;
  private readonly updates: UpdatePublisher;
  private readonly intake: Intake;
  private readonly ticker: Ticker;
  private readonly own: Ownership;
  /** What a game's takeover or release of a channel needs (external-game.ts). */
  private readonly extDeps: ExternalGameDeps;
  private tickTimer: NodeJS.Timeout | null = null;
  private snapshotTimer: NodeJS.Timeout | null = null;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private ctlSub: Subscription | null = null;
  private assignmentsSub: Subscription | null = null;
  /** When the last heartbeat was sent (ms): the heartbeat's intents/s (ShardState.intentsSinceBeat). */
  private lastBeatMs = 0;
  /** This process's incarnation of the shard id: the router notices a restart when it changes. */
  private readonly instance = `${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
  private creditSub: Subscription | null = null;

  private readonly leaseHedges: { add(n: number): void };

  constructor(deps: ShardDeps) {
    this.leaseHedges = deps.telemetry.metrics.counter('crowdplay_sequencer_lease_hedges_total');
    this.s = new ShardState(deps, () => this.leaseBlock());
    this.id = this.s.id;
    this.updates = new UpdatePublisher(this.s);
    this.intake = new Intake(this.s);
    this.ticker = new Ticker(this.s, this.intake, this.updates);
    this.extDeps = { s: this.s, scheduleUpdate: (o) => this.updates.scheduleUpdate(o) };
    this.own = new Ownership(this.s, this.intake, this.ticker, this.updates, (o, msg) => this.onChannelCtl(o, msg));
  }

  /** Channels this shard owns. */
  get channels(): string[] {
    return [...this.s.owned.keys()];
  }

  /** Ticks this shard has finished since it started. */
  get ticks(): number {
    return this.s.ticks;
  }

  /** Channels the next tick visits; the others rest until an intent, a round or their game wakes them. */
  get ticking(): string[] {
    return [...this.s.ticking].map((o) => o.rt.id);
  }

  /** Starts the tick, snapshot and heartbeat loops and answers `shard.<id>.ctl`. */
  async start(): Promise<void> {
    const { config, bus, subjects, store } = this.s.deps;
    // A restarted shard (same SHARD_ID) owns nothing yet: the router assigns its predecessor's channels again (it sees a new `instance`).
    const held = await store.channels.disown(this.id);
    if (held > 0)
      this.s.deps.telemetry.logger.info({ shard: this.id, channels: held }, 'channels of a previous process of this shard disowned');
    this.ctlSub = bus.subscribe(subjects.shardCtl(this.id), (msg) => void this.onShardCtl(msg));
    // The router moved a channel this shard still serves (it was cut off, or paused): stop at once; the epoch fences its writes anyway.
    this.assignmentsSub = bus.subscribe(subjects.routerAssignments(), (msg) => {
      try {
        for (const c of decodeAssignments(msg.data)) {
          const o = this.s.owned.get(c.channel);
          if (o && c.shard !== null && c.shard !== this.id && c.epoch > o.epoch) {
            this.s.deps.telemetry.logger.warn(
              { channel: c.channel, epoch: o.epoch, owner: c.shard, ownerEpoch: c.epoch },
              'channel moved away: dropping it',
            );
            this.s.stopServing(o, true);
          }
        }
      } catch {
        this.s.deps.telemetry.refusals.refuse('engine', 'CP_ERR_PROTO_MALFORMED', { subject: 'router.assignments' });
      }
    });
    if (this.s.wallets) {
      const wallets = this.s.wallets;
      // Grants through the tenant API reach the mirror at once (a stake right after the grant's 200 sees them).
      this.creditSub = bus.subscribe(subjects.walletCredits(), (msg) => {
        try {
          const c = decodeJson<WalletCredit>(msg.data);
          if (typeof c.points === 'number' && typeof c.balance === 'number') wallets.credited(c.tenant, c.viewer, c.points, c.balance);
        } catch {
          this.s.deps.telemetry.refusals.refuse('engine', 'CP_ERR_PROTO_MALFORMED', { subject: 'wallet.credit' });
        }
      });
    }
    this.tickTimer = setInterval(() => void this.ticker.tick(), config.engine.tickMs);
    this.snapshotTimer = setInterval(() => void this.own.snapshotAll(), config.engine.snapshotIntervalMs);
    this.lastBeatMs = this.s.now();
    this.heartbeat();
    this.heartbeatTimer = setInterval(() => this.heartbeat(), config.engine.heartbeatMs);
    await bus.flush();
  }

  /** Tells the router this shard is alive, with its load: channels owned and intents/s since the last beat (SHARD_HEARTBEAT_MS). */
  private heartbeat(): void {
    const { bus, subjects } = this.s.deps;
    const now = this.s.now();
    const intentsPerS = now > this.lastBeatMs ? Math.round((this.s.intentsSinceBeat * 1000) / (now - this.lastBeatMs)) : 0;
    this.s.intentsSinceBeat = 0;
    this.lastBeatMs = now;
    bus.publish(
      subjects.shardHeartbeat(),
      encodeJson({
        v: CONTROL_VERSION,
        id: this.id,
        instance: this.instance,
        channels: this.s.owned.size,
        intentsPerS,
        draining: this.s.draining,
        atMs: now,
      } satisfies Heartbeat),
    );
  }

  /**
   * Leases a block from the sequencers' queue group. Hedged: a lease unanswered after SEQUENCER_LEASE_HEDGE_MS is
   * sent again, at most {@link LEASE_HEDGES} times that far apart, within the one BUS_REQUEST_TIMEOUT_MS (a hung
   * sequencer still gets its share of the requests). The first answer wins and the other blocks are never used:
   * ids may be skipped, and IdAllocator keeps them rising whatever order the answers come in.
   */
  private async leaseBlock(): Promise<IdBlock> {
    const { bus, subjects, config } = this.s.deps;
    const msg = await hedgedRequest(bus, subjects.sequencerLease(), encodeJson({ size: config.sequencer.blockSize }), {
      timeoutMs: config.bus.requestTimeoutMs,
      hedgeAfterMs: config.sequencer.leaseHedgeMs,
      maxHedges: LEASE_HEDGES,
      onHedge: () => this.leaseHedges.add(1),
    });
    const r = decodeJson<{ ok: boolean; first?: number; last?: number; message?: string }>(msg.data);
    if (!r.ok || r.first === undefined || r.last === undefined) throw new Error(`sequencer refused a lease: ${r.message ?? 'no reason'}`);
    return { first: r.first, last: r.last };
  }

  /**
   * Answers `shard.<id>.ctl`: a v2 batch (acquire, release, forget, owned) with one result per channel, or a v1
   * single-channel request as before. A message that does not decode (malformed, oversized, unknown version) is
   * refused with its code, counted, and changes nothing.
   */
  private async onShardCtl(msg: BusMessage): Promise<void> {
    let reply: ShardControlReply;
    let req: ShardControl;
    try {
      req = decodeControl(ShardControl, msg.data);
    } catch (err) {
      const r = toErrorReply(err);
      this.s.deps.telemetry.refusals.refuse('engine', r.code, { subject: 'shard.ctl' });
      msg.respond(encodeJson({ v: CONTROL_VERSION, ...r } satisfies ShardControlReply));
      return;
    }
    try {
      if ('channels' in req || req.op === 'owned') {
        let results: AcquireResult[] | undefined;
        if (req.op === 'acquire') results = await this.acquireMany(req.channels);
        else if (req.op === 'release' && req.handoff) results = await this.handOffMany(req.channels);
        else if (req.op === 'release') results = await this.releaseMany(req.channels, req.ifIdle === true);
        else if (req.op === 'forget') results = req.channels.map((channel) => (this.own.forget(channel), { channel, ok: true }));
        reply =
          req.op === 'owned'
            ? { v: CONTROL_VERSION, ok: true, channels: this.s.owned.size, owned: [...this.s.owned.keys()] }
            : { v: CONTROL_VERSION, ok: true, channels: this.s.owned.size, results: results! };
      } else {
        if (req.op === 'acquire') await this.acquire(req.channel, req.epoch);
        else if (req.op === 'release' && req.handoff) await this.handOff(req.channel);
        else if (req.op === 'release') {
          const [r] = await this.releaseMany([req.channel], req.ifIdle === true);
          if (r && !r.ok) throw new CrowdplayError(r.code, [req.channel]);
        } else this.own.forget(req.channel);
        reply = { ok: true, channels: this.s.owned.size };
      }
    } catch (err) {
      reply = toErrorReply(err);
      if (reply.code === 'CP_ERR_INTERNAL') this.s.deps.telemetry.logger.error({ err }, 'shard control request failed');
    }
    msg.respond(encodeJson(reply));
  }

  /**
   * Takes ownership of `channel` at `epoch` (the router bumped it in Postgres); {@link acquireMany} of one.
   * @throws CrowdplayError the channel's refusal code (CP_ERR_CHANNEL_UNAVAILABLE when draining or full,
   *   CP_ERR_CHANNEL_STALE_EPOCH, CP_ERR_CHANNEL_UNKNOWN, CP_ERR_CHANNEL_MIGRATED); the sequencer/store error
   *   when they are unreachable
   */
  async acquire(channel: string, epoch: number): Promise<void> {
    const [r] = await this.acquireMany([{ channel, epoch }]);
    if (r && !r.ok) throw new CrowdplayError(r.code, [channel, epoch], { cause: r.message });
  }

  /**
   * Takes ownership of a batch of channels, each at the epoch the router wrote for this shard in Postgres
   * (see {@link Ownership.acquireMany}).
   * @param items at most one per channel (a duplicate is refused as CP_ERR_PROTO_INVALID)
   * @returns one result per item, in order
   * @throws the sequencer's or the store's error when they are unreachable (nothing acquired)
   */
  acquireMany(items: ReadonlyArray<{ channel: string; epoch: number }>): Promise<AcquireResult[]> {
    return this.own.acquireMany(items);
  }

  /**
   * Snapshots `channel` (with its built-in game's latest state), stops serving it and clears its owner in Postgres
   * (only if this shard still owns it at its epoch). No-op for a channel not owned. {@link releaseMany} of one.
   * @throws the store's error
   */
  async release(channel: string): Promise<void> {
    await this.releaseMany([channel], false);
  }

  /**
   * Releases a batch of channels (see {@link Ownership.releaseMany}); with `ifIdle` (a rebalance) a channel
   * with unfinished rounds is refused CP_ERR_CHANNEL_UNAVAILABLE and stays.
   * @returns one result per channel, in order
   * @throws the store's error (the channels are not served here any more; their owner rows stay, and the
   *   router's reconciler places them again)
   */
  releaseMany(channels: readonly string[], ifIdle: boolean): Promise<AcquireResult[]> {
    return this.own.releaseMany(channels, ifIdle);
  }

  /**
   * Hands `channel` off for a move; {@link handOffMany} of one.
   * @throws CrowdplayError the channel's refusal; the store's error: the handoff failed, the channel is served here as before
   */
  async handOff(channel: string): Promise<void> {
    const [r] = await this.handOffMany([channel]);
    if (r && !r.ok) throw new CrowdplayError(r.code, [channel], { cause: r.message });
  }

  /**
   * Hands a batch of channels off for a move (the router's `move`, a drain; see {@link Ownership.handOffMany}):
   * they refuse new intents and game requests as retryable until `forget`.
   * @returns one result per channel: a channel whose rounds could not be handed off is refused with the
   *   store's code and served here as before; the others go ahead
   * @throws the store's error writing the snapshots or the owners (those channels stay handed off and
   *   refusing; the router's reconciler places them)
   */
  handOffMany(channels: readonly string[]): Promise<AcquireResult[]> {
    return this.own.handOffMany(channels);
  }

  /** Drops the subscriptions of a channel handed off from here (its move finished). No-op otherwise. */
  forget(channel: string): void {
    this.own.forget(channel);
  }

  // ------------------------------------------------------------------ game control

  private async onChannelCtl(o: Owned, msg: BusMessage): Promise<void> {
    let reply: ChannelCtlReply;
    try {
      const req = decodeJson<ChannelCtlRequest>(msg.data);
      const now = this.s.now();
      if (o.moving) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [o.rt.id]);
      if (req.op === 'snapshot') reply = { ok: true, update: o.rt.currentUpdate() };
      else if (req.op === 'round.open' || req.op === 'round.settle' || req.op === 'round.cancel') {
        // A built-in game's rounds are its own (as its actions are): a tenant key must not settle what viewers staked on.
        if (o.game) throw new CrowdplayError('CP_ERR_ROUND_FORBIDDEN', [o.rt.id]);
        if (!o.rounds) throw new CrowdplayError('CP_ERR_ROUND_INVALID', ['this shard has no ledger']);
        let round: RoundView;
        if (req.op === 'round.open') {
          const { round: id, kind, outcomes, durationMs, liquidity, title, labels } = req;
          round = await o.rounds.open(req.tenant, {
            round: id,
            kind,
            outcomes,
            durationMs,
            ...(liquidity === undefined ? {} : { liquidity }),
            ...(title === undefined ? {} : { title }),
            ...(labels === undefined ? {} : { labels }),
          });
        } else if (req.op === 'round.settle') round = await o.rounds.settle(req.tenant, req.round, req.outcome);
        else round = await o.rounds.cancel(req.tenant, req.round);
        if (o.roundsDirty) {
          o.roundsDirty = false;
          try {
            o.rt.setRounds(o.rounds.views(), await this.s.eventIdFor(o), this.s.now());
            this.updates.scheduleUpdate(o);
          } catch {
            // Done all the same (the round is durable): no event id right now (sequencer restarting), so a later tick sends the update.
            o.roundsDirty = true;
            this.s.wake(o);
          }
        }
        reply = { ok: true, round };
      } else if (req.op === 'declare') {
        if (o.game && !o.game.yieldsToGame) throw new CrowdplayError('CP_ERR_GAME_INVALID_DECLARE', ['this channel runs a built-in game']);
        const names = new Set(req.actions.map((a) => a.name));
        if (names.size !== req.actions.length) throw new CrowdplayError('CP_ERR_GAME_INVALID_DECLARE', ['duplicate action name']);
        const grant = req.welcomeGrant ?? 0;
        const maxGrant = this.s.deps.config.rounds.welcomeGrantMax;
        if (!Number.isSafeInteger(grant) || grant < 0 || grant > maxGrant) {
          throw new CrowdplayError('CP_ERR_GAME_INVALID_DECLARE', [
            `welcomeGrant must be an integer in [0, ${maxGrant}] (WELCOME_GRANT_MAX_POINTS)`,
          ]);
        }
        const ev = await this.s.eventIdFor(o);
        this.stillServing(o);
        // A Telegram chat's word puzzle yields to the tenant's own game (external-game.ts).
        if (o.game) await takeOver(this.extDeps, o, ev);
        this.stillServing(o);
        if (o.rounds) o.rounds.welcomeGrant = grant;
        o.rt.welcomeGrant = grant;
        const pending = o.rt.pendingIntents;
        o.rt.declare(req.actions, ev, now);
        this.s.pendingIntents -= pending - o.rt.pendingIntents; // a new declaration drops the open tick
        this.updates.scheduleUpdate(o);
        // Durable before the answer: a later owner (after a crash as after a handoff) restores the declaration.
        if (!(await this.own.saveSnapshot(o))) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [o.rt.id]);
        reply = { ok: true };
      } else if (req.op === 'state') {
        const size = Buffer.byteLength(JSON.stringify(req.state));
        const max = this.s.deps.config.engine.maxGameStateBytes;
        if (size > max) {
          this.s.deps.telemetry.refusals.refuse('engine', 'CP_ERR_GAME_STATE_TOO_BIG', { channel: o.rt.id, size });
          throw new CrowdplayError('CP_ERR_GAME_STATE_TOO_BIG', [max]);
        }
        const ev = await this.s.eventIdFor(o);
        this.stillServing(o);
        o.rt.setGameState(req.state, ev, now);
        this.updates.scheduleUpdate(o);
        reply = { ok: true };
      } else if (req.op === 'release') {
        if (await releaseExternal(this.extDeps, o, () => this.s.eventIdFor(o))) {
          this.stillServing(o);
          if (!(await this.own.saveSnapshot(o))) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [o.rt.id]);
        }
        reply = { ok: true };
      } else if (req.op === 'absorb') {
        reply = { ok: true, absorbed: await this.absorb(o, req.from, req.state) };
      } else throw new CrowdplayError('CP_ERR_PROTO_UNKNOWN_TYPE', ['?', 'game']);
    } catch (err) {
      reply = toErrorReply(err);
    }
    msg.respond(encodeJson(reply));
  }

  /**
   * A game request that awaited (an event id) re-checks before it changes the channel: a handoff or release
   * begun meanwhile has taken, or will take, its snapshot without it.
   * @throws CrowdplayError CP_ERR_CHANNEL_UNAVAILABLE (retryable: the gateway sends it again to the new owner)
   */
  private stillServing(o: Owned): void {
    if (o.moving || this.s.owned.get(o.rt.id) !== o) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [o.rt.id]);
  }

  /**
   * Merges the final snapshot of channel `from` (its chat became this one)
   * into this channel's built-in game, and snapshots this channel at its
   * epoch before answering, so the router may then mark the move finished.
   * Idempotent when the game's `absorb` is (the word puzzle's is). A channel an external game holds takes
   * nothing (its game is not the puzzle) and answers zero counts.
   * @throws CrowdplayError CP_ERR_CHANNEL_MIGRATION_INVALID (no built-in game
   *   that can absorb, or a snapshot that is not a channel's),
   *   CP_ERR_CHANNEL_UNAVAILABLE (the snapshot write failed; the router retries)
   */
  private async absorb(o: Owned, from: string, state: unknown): Promise<AbsorbCounts> {
    if (o.rt.external) {
      // The tenant's game holds this chat (external-game.ts): the old chat's puzzle has nothing to merge into.
      if (!(await this.own.saveSnapshot(o))) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [o.rt.id]);
      return { added: 0, replaced: 0, kept: 0, stale: false };
    }
    const game = o.game;
    if (!game?.absorb)
      throw new CrowdplayError('CP_ERR_CHANNEL_MIGRATION_INVALID', [from, `${o.rt.id} runs no game that can take its state`]);
    const snap = state as Partial<ChannelSnapshotState> | null;
    if (snap !== null && (typeof snap !== 'object' || snap.v !== 1))
      throw new CrowdplayError('CP_ERR_CHANNEL_MIGRATION_INVALID', [from, 'its snapshot is not a channel snapshot']);
    const r = game.absorb(snap?.game ?? null, this.s.now());
    for (const [result, n] of [
      ['added', r.added],
      ['replaced', r.replaced],
      ['kept', r.kept],
    ] as const)
      if (n > 0) this.s.m.absorbed.add(n, { result });
    if (r.stale) this.s.m.absorbed.add(1, { result: 'stale' });
    if (r.added + r.replaced > 0) {
      const ev = await this.s.eventIdFor(o);
      this.stillServing(o);
      o.rt.setGameState(r.state, ev, this.s.now());
      this.updates.scheduleUpdate(o);
    }
    if (!(await this.own.saveSnapshot(o))) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [o.rt.id]);
    this.s.deps.telemetry.logger.info({ channel: o.rt.id, from, ...r, state: undefined }, 'channel absorbed a moved chat');
    return { added: r.added, replaced: r.replaced, kept: r.kept, stale: r.stale };
  }

  /**
   * Ordered shutdown: stop taking channels, move them to other shards, close
   * the open ticks of those left (so accepted intents reach their game), flush
   * updates, snapshot and release every channel, then stop the loops. The
   * moves get SHUTDOWN_DEADLINE_MS − SHARD_DRAIN_FINAL_MS: past it the channels
   * not moved yet close their ticks and write their snapshots as they are
   * (Ownership.closeUnmoved), within the process's deadline, and the router
   * places them once it declares this shard dead. Safe to call twice.
   */
  async drain(): Promise<void> {
    if (this.s.draining) return;
    this.s.draining = true;
    this.heartbeat();
    const { config, telemetry } = this.s.deps;
    // Move every channel, open rounds included, to another shard (one request: the router moves them in batches);
    // what no shard can take is refunded below.
    const budgetMs = Math.max(0, config.gateway.shutdownMs - config.engine.drainFinalMs);
    let budget: NodeJS.Timeout | undefined;
    const inTime = await Promise.race([
      this.moveAllAway().then(() => true),
      new Promise<false>((resolve) => {
        budget = setTimeout(() => resolve(false), budgetMs);
      }),
    ]);
    clearTimeout(budget);
    if (!inTime) {
      const n = this.s.owned.size;
      telemetry.logger.warn(
        { channels: n, budgetMs },
        'drain: channels not moved in time; closing their ticks for the router to place them',
      );
      this.s.m.drainUnmoved.add(n);
      await this.own.closeUnmoved();
      await this.close();
      return;
    }
    // Refund every open round left through the ledger before the channels are released (the ledger drains after the shard).
    await Promise.all([...this.s.owned.values()].map((o) => o.rounds?.drain()));
    await this.ticker.tickSettled(); // a tick in flight would make this one a no-op
    await this.ticker.tick();
    for (const o of this.s.owned.values()) if (o.rt.dirty) this.updates.sendUpdate(o);
    // What no shard took is released in batches: one snapshot statement, one owner statement and one assignments
    // message per CONTROL_BATCH_MAX channels, not one each (thousands of channels when the whole cluster stops).
    const left = [...this.s.owned.keys()];
    for (let i = 0; i < left.length; i += CONTROL_BATCH_MAX) {
      const chunk = left.slice(i, i + CONTROL_BATCH_MAX);
      await this.releaseMany(chunk, false).catch((err: unknown) =>
        this.s.deps.telemetry.logger.error({ err, channels: chunk.length, first: chunk[0] }, 'release failed'),
      );
    }
    await this.close();
  }

  /**
   * Asks the router to move every channel of this shard to other live shards (`drain`: it has this shard hand
   * them off in batches, then others acquire them). A router that speaks only v1 is asked channel by channel
   * (`move`). Never rejects: what did not move (no other shard, no answer) stays here and drain refunds its rounds.
   */
  private async moveAllAway(): Promise<void> {
    const { bus, subjects, config, telemetry } = this.s.deps;
    if (this.s.owned.size === 0) return;
    let r: { ok: boolean; moves?: Array<{ channel: string; moved: boolean; shard: string | null }>; code?: string; message?: string };
    try {
      // The router moves ROUTER_DRAIN_BATCH_CHANNELS at a time, each batch a handoff here and acquires elsewhere with
      // their own timeouts: the answer may take a batch timeout per batch.
      const batches = Math.ceil(this.s.owned.size / Math.max(1, config.router.drainBatchChannels));
      const msg = await bus.request(subjects.routerCtl(), encodeJson({ v: CONTROL_VERSION, op: 'drain', shard: this.id }), {
        timeoutMs: (2 + batches) * config.router.batchTimeoutMs,
      });
      r = decodeJson(msg.data);
    } catch (err) {
      telemetry.logger.warn({ err, channels: this.s.owned.size }, 'drain: no answer from the router to move the channels');
      return;
    }
    if (!r.ok && r.code === 'CP_ERR_PROTO_INVALID') {
      await Promise.all([...this.s.owned.keys()].map((ch) => this.moveAway(ch)));
      return;
    }
    if (!r.ok) {
      telemetry.logger.warn({ code: r.code, message: r.message }, 'drain: the router could not move the channels');
      return;
    }
    let moved = 0;
    for (const m of r.moves ?? []) {
      if (!m.moved) continue;
      moved++;
      this.own.forget(m.channel);
    }
    telemetry.logger.info({ moved, left: this.s.owned.size }, 'drain: channels moved');
  }

  /**
   * Asks a v1 router to move `channel` to another live shard (`move`). Never rejects.
   * @returns true when the channel moved
   */
  private async moveAway(channel: string): Promise<boolean> {
    const { bus, subjects, config, telemetry } = this.s.deps;
    try {
      const msg = await bus.request(subjects.routerCtl(), encodeJson({ op: 'move', channel, from: this.id }), {
        timeoutMs: 3 * config.bus.requestTimeoutMs,
      });
      const r = decodeJson<{ ok: boolean; move?: { moved: boolean; shard: string | null }; code?: string; message?: string }>(msg.data);
      if (r.ok && r.move?.moved) {
        this.own.forget(channel);
        return true;
      }
      if (!r.ok) telemetry.logger.warn({ channel, code: r.code, message: r.message }, 'drain: the router could not move the channel');
    } catch (err) {
      telemetry.logger.warn({ err, channel }, 'drain: no answer from the router to move the channel');
    }
    return false;
  }

  /** Stops every loop and subscription at once (no snapshot). Safe to call twice. */
  async close(): Promise<void> {
    if (this.s.closed) return;
    this.s.closed = true;
    for (const t of [this.tickTimer, this.snapshotTimer, this.heartbeatTimer]) if (t) clearInterval(t);
    this.ctlSub?.unsubscribe();
    this.assignmentsSub?.unsubscribe();
    this.creditSub?.unsubscribe();
    for (const o of [...this.s.owned.values()]) this.s.stopServing(o);
    for (const ch of [...this.s.moved.keys()]) this.own.forget(ch);
    this.updates.close();
    this.ticker.close();
    await this.s.deps.bus.flush();
  }
}

function toErrorReply(err: unknown): { ok: false; code: ErrorCode; message: string } {
  if (isCrowdplayError(err)) return { ok: false, code: err.code, message: err.message };
  return { ok: false, code: 'CP_ERR_INTERNAL', message: formatMessage('CP_ERR_INTERNAL', []) };
}
