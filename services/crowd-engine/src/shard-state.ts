/**
 * The state a shard's parts share (ownership, intake, ticker, update publisher): the dependencies, the
 * channels owned and handed off, the updates due, the counters, the engine's metrics and the event ids.
 * The `Shard` façade builds one and hands it to each part.
 */
import type { Bus, Subjects, Subscription } from '@crowdplay/bus';
import type { Config } from '@crowdplay/config';
import { CrowdplayError, type ChannelResult, type ErrorCode } from '@crowdplay/protocol';
import type { Ledger } from '@crowdplay/ledger';
import type { Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import type { Counter, Histogram } from '@opentelemetry/api';
import type { ChannelRuntime } from './channel.ts';
import type { GameModule } from './games/game-module.ts';
import { IdAllocator, type IdBlock } from './ids.ts';
import { roundMetrics, type RoundMetrics } from './round-context.ts';
import type { ChannelRounds } from './rounds.ts';
import { WalletMirror } from './wallets.ts';

/**
 * Charges a paid intent. Resolves with the cost charged, or refuses with a
 * code. With a ledger the default charges the viewer's wallet (wallet →
 * house, acked after the commit); without one it refuses every paid intent
 * as CP_ERR_INTENT_INSUFFICIENT_FUNDS.
 */
export type ChargeFn = (req: {
  channel: string;
  epoch: number;
  viewer: string;
  action: string;
  cost: number;
  idempotencyKey: string;
}) => Promise<{ ok: true } | { ok: false; code: ErrorCode }>;

export interface ShardDeps {
  config: Config;
  bus: Bus;
  subjects: Subjects;
  store: Store;
  telemetry: Telemetry;
  /** Built-in game for a channel, if any (the standalone demo). */
  gameFor?: (channel: string) => GameModule | undefined;
  charge?: ChargeFn;
  /**
   * The durable ledger: with it the shard runs rounds (stakes, trades,
   * payouts), welcome grants and paid actions; without it round requests
   * and trades are refused.
   */
  ledger?: Ledger;
  /** Clock, ms since epoch (tests). */
  now?: () => number;
}

/** A channel this shard serves (or served, while a handoff's subscriptions still refuse). */
export interface Owned {
  rt: ChannelRuntime;
  epoch: number;
  /** The built-in game running now: undefined when there is none, or while an external game holds the channel. */
  game: GameModule | undefined;
  /** The channel's built-in game, also while an external game holds the channel in its place (`rt.external`). */
  builtin: GameModule | undefined;
  subs: Subscription[];
  updateTimer: NodeJS.Timeout | null;
  lastUpdateMs: number;
  tenant: string;
  rounds: ChannelRounds | null;
  /** Rounds changed since the last update was built. */
  roundsDirty: boolean;
  /** A built-in game's state from its tick that has no event id yet (sequencer unreachable): the next tick sets it. */
  pendingState: Record<string, unknown> | undefined;
  /** Handed off (or handing off) to another shard: intents and game requests are refused as retryable. */
  moving: boolean;
  /** The shard tick (`ShardState.ticks`) up to which `rt`'s tick count is brought (`ShardState.syncTicks`). */
  tickedAt: number;
}

/** One channel's answer to a batch control request (acquire, release, handoff, forget). */
export type AcquireResult = ChannelResult & ({ ok: true } | { ok: false; code: ErrorCode; message: string });

export interface EngineMetrics {
  logWrites: Counter;
  intents: Counter;
  actAckMs: Histogram;
  batchLagMs: Histogram;
  batches: Counter;
  updates: Counter;
  updatesDeferred: Counter;
  tickYields: Counter;
  lastBatchRepeats: Counter;
  drainUnmoved: Counter;
  updateBytes: Histogram;
  snapshotErrors: Counter;
  absorbed: Counter;
}

/** One shard's shared state; its parts read and change it in place. */
export class ShardState {
  readonly id: string;
  readonly now: () => number;
  readonly owned = new Map<string, Owned>();
  /** Channels handed off and released, still subscribed (refusing, retryable) until the router's `forget`. */
  readonly moved = new Map<string, Owned>();
  /**
   * Channels whose update is due but was deferred past an event-loop turn that had spent its
   * SHARD_TURN_BUDGET_MS, in the order they fell due; drained by `UpdatePublisher.drainDue` (updates.ts).
   */
  readonly due = new Set<Owned>();
  /**
   * The channels the next tick visits: those with open intents, a state or rounds to set, rounds to watch, or a
   * built-in game that ticks. The others rest: a tick costs nothing per idle channel (`wake` puts one back).
   */
  readonly ticking = new Set<Owned>();
  /** Ticks the shard has finished. A channel a tick skipped counts it when next visited or snapshotted (`syncTicks`). */
  ticks = 0;
  readonly ids: IdAllocator;
  readonly m: EngineMetrics;
  readonly wallets: WalletMirror | null;
  readonly rm: RoundMetrics | null;
  /** Intents taken since the last heartbeat: the heartbeat's intents/s. */
  intentsSinceBeat = 0;
  /** Draining (`Shard.drain`): no channel is taken, no built-in game opens a round. */
  draining = false;
  /** Closed (`Shard.close`): every loop and subscription stopped. */
  closed = false;
  /** Intents listed in the open ticks of the owned channels (SHARD_MAX_PENDING_INTENTS bounds it). */
  pendingIntents = 0;

  /** @param leaseBlock leases the next block of event ids from the sequencer */
  constructor(
    readonly deps: ShardDeps,
    leaseBlock: () => Promise<IdBlock>,
  ) {
    const { config, telemetry } = deps;
    this.id = config.engine.shardId;
    this.now = deps.now ?? Date.now;
    this.wallets = deps.ledger
      ? new WalletMirror(deps.ledger, { max: config.rounds.walletMirrorMax, reloadMs: config.rounds.walletReloadMs, now: this.now })
      : null;
    this.rm = deps.ledger ? roundMetrics(telemetry) : null;
    const blockSize = config.sequencer.blockSize;
    this.ids = new IdAllocator(() => leaseBlock(), Math.max(1, Math.floor(blockSize / 5)));
    const mx = telemetry.metrics;
    this.m = {
      intents: mx.counter('crowdplay_intents_total'),
      actAckMs: mx.histogram('crowdplay_act_ack_ms'),
      batchLagMs: mx.histogram('crowdplay_batch_lag_ms'),
      batches: mx.counter('crowdplay_batches_total'),
      logWrites: mx.counter('crowdplay_event_log_writes_total'),
      updates: mx.counter('crowdplay_channel_updates_total'),
      lastBatchRepeats: mx.counter('crowdplay_last_batch_repeats_total'),
      drainUnmoved: mx.counter('crowdplay_drain_unmoved_channels_total'),
      tickYields: mx.counter('crowdplay_tick_yields_total'),
      updatesDeferred: mx.counter('crowdplay_channel_updates_deferred_total'),
      updateBytes: mx.histogram('crowdplay_channel_update_bytes'),
      snapshotErrors: mx.counter('crowdplay_snapshot_errors_total'),
      absorbed: mx.counter('crowdplay_channel_absorbed_total'),
    };
    mx.gauge('crowdplay_shard_channels', () => this.owned.size);
    mx.gauge('crowdplay_shard_pending_intents', () => this.pendingIntents);
    mx.gauge('crowdplay_channel_updates_due', () => this.due.size);
    mx.gauge('crowdplay_shard_channels_ticking', () => this.ticking.size);
    if (this.wallets) {
      const w = this.wallets;
      mx.gauge('crowdplay_wallet_mirror_size', () => w.size);
      mx.observableCounter('crowdplay_wallet_reloads_total', () => w.reloads);
      mx.gauge('crowdplay_rounds_unfinished', () => {
        let n = 0;
        for (const o of this.owned.values()) n += o.rounds?.unfinished ?? 0;
        return n;
      });
    }
  }

  /**
   * The next id of the shard's leased blocks, waiting for a lease when they are used up.
   * @throws CrowdplayError CP_ERR_CHANNEL_UNAVAILABLE (retryable; cause: the lease error) when the
   *   sequencer does not answer (restarting): a tick tries again on the next one, a game request is refused
   */
  async nextEventId(channel = '*'): Promise<number> {
    for (;;) {
      const id = this.ids.take();
      if (id !== null) return id;
      try {
        await this.ids.ready();
      } catch (err) {
        throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [channel], { cause: err });
      }
    }
  }

  /**
   * An event id above the channel's newest one. Ids come from one allocator
   * whose blocks only rise, so this loops only if another change of the same
   * channel took an id while this one waited for a lease.
   */
  async eventIdFor(o: Owned): Promise<number> {
    for (;;) {
      const id = this.ids.take() ?? (await this.nextEventId(o.rt.id));
      if (id > o.rt.ev) return id;
    }
  }

  /** Puts a channel in the next tick: it has intents, rounds or a state to set, or a built-in game that came back. */
  wake(o: Owned): void {
    this.ticking.add(o);
  }

  /**
   * Brings a channel's tick count up to the ticks the shard finished: the ticks that skipped it while it rested
   * closed nothing, and count as they would have had they visited it.
   */
  syncTicks(o: Owned): void {
    if (this.ticks > o.tickedAt) {
      o.rt.skipTicks(this.ticks - o.tickedAt);
      o.tickedAt = this.ticks;
    }
  }

  /**
   * Stops serving a channel here. `moved`: another shard owns it now at a
   * newer epoch (this one was paused or cut off): its subscriptions are
   * drained, not dropped, so every intent and game request NATS had already
   * routed here (while paused, the queue group still counted this shard) is
   * answered, refused as retryable (CP_ERR_CHANNEL_UNAVAILABLE), instead of
   * vanishing without an ack.
   */
  stopServing(o: Owned, moved = false): void {
    o.rounds?.close();
    if (moved) {
      o.moving = true;
      for (const s of o.subs) void s.drain();
    } else for (const s of o.subs) s.unsubscribe();
    o.subs = [];
    if (o.updateTimer) clearTimeout(o.updateTimer);
    o.updateTimer = null;
    this.due.delete(o);
    this.ticking.delete(o);
    this.owned.delete(o.rt.id);
    this.pendingIntents -= o.rt.pendingIntents;
  }
}
