/**
 * The crowd-engine shard: owns channels given to it by the router (acquire /
 * release at an epoch), takes their intents from the bus, acks them, closes a
 * batch per channel every tick, and publishes viewer updates on change at
 * most every CHANNEL_UPDATE_MS. SHARD_TURN_BUDGET_MS bounds how long it holds
 * the event loop: a tick yields to I/O after that much work, and updates due
 * beyond it go out in the next turns.
 */
import { decodeJson, encodeJson, type Bus, type BusMessage, type Subjects, type Subscription } from '@crowdplay/bus';
import type { Config } from '@crowdplay/config';
import {
  CONTROL_BATCH_MAX,
  CONTROL_VERSION,
  CrowdplayError,
  decodeAssignments,
  decodeControl,
  isCrowdplayError,
  formatMessage,
  ShardControl,
  type AssignmentChange,
  type ChannelResult,
  type ShardControlReply,
  type Heartbeat,
  type AckBatch,
  type Batch,
  type ErrorCode,
  type BalanceFrame,
  type BusAck,
  type BusTrade,
  type IntentBatch,
  type RoundFrame,
  type RoundView,
  type WalletBatch,
  type WalletCredit,
} from '@crowdplay/protocol';
import { TransferKinds, type Ledger } from '@crowdplay/ledger';
import { TurnBudget } from '@crowdplay/ratelimit';
import type { RoundRow, Snapshot, Store } from '@crowdplay/store';
import { tracer, tracingOn, type Telemetry } from '@crowdplay/telemetry';
import { context, SpanKind, trace } from '@opentelemetry/api';
import type { Counter, Histogram } from '@opentelemetry/api';
import type { AbsorbCounts, ChannelCtlReply, ChannelCtlRequest } from './api.ts';
import { ChannelRuntime, type ChannelSnapshotState } from './channel.ts';
import type { GameModule } from './games/game-module.ts';
import { IdAllocator, type IdBlock } from './ids.ts';
import { ChannelRounds, roundMetrics, type RoundMetrics } from './rounds.ts';
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

const noWallet: ChargeFn = () => Promise.resolve({ ok: false, code: 'CP_ERR_INTENT_INSUFFICIENT_FUNDS' });

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

interface Owned {
  rt: ChannelRuntime;
  epoch: number;
  game: GameModule | undefined;
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
}

/**
 * Bus header on a batch a new owner publishes again (the previous owner's last logged one, see `acquire`): the same
 * bytes as when it was first logged; gateways need no header (they skip batches a game socket has by `ev`), tests and
 * tools that check ids on the bus tell repeats from new batches by it.
 */
export const REPEAT_HEADER = 'crowdplay-repeat';

/** One channel's answer to a batch control request (acquire, release, handoff, forget). */
export type AcquireResult = ChannelResult & ({ ok: true } | { ok: false; code: ErrorCode; message: string });

/** A tick's batches for external games, logged then published (publishBatches). */
type Outbox = Array<{ o: Owned; ev: number; text: string }>;

interface EngineMetrics {
  logWrites: Counter;
  intents: Counter;
  actAckMs: Histogram;
  batchLagMs: Histogram;
  batches: Counter;
  updates: Counter;
  updatesDeferred: Counter;
  tickYields: Counter;
  lastBatchRepeats: Counter;
  updateBytes: Histogram;
  snapshotErrors: Counter;
  absorbed: Counter;
}

export class Shard {
  readonly id: string;
  private readonly owned = new Map<string, Owned>();
  /** Channels handed off and released, still subscribed (refusing, retryable) until the router's `forget`. */
  private readonly moved = new Map<string, Owned>();
  private readonly ids: IdAllocator;
  private readonly now: () => number;
  private readonly charge: ChargeFn;
  private readonly m: EngineMetrics;
  private readonly wallets: WalletMirror | null;
  private readonly rm: RoundMetrics | null;
  private tickTimer: NodeJS.Timeout | null = null;
  private snapshotTimer: NodeJS.Timeout | null = null;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private ctlSub: Subscription | null = null;
  private assignmentsSub: Subscription | null = null;
  /** Intents taken since the last heartbeat, and when it was sent (ms): the heartbeat's intents/s. */
  private intentsSinceBeat = 0;
  private lastBeatMs = 0;
  /** This process's incarnation of the shard id: the router notices a restart when it changes. */
  private readonly instance = `${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
  private creditSub: Subscription | null = null;
  /** The tick in flight (closing, logging and publishing batches), if any. */
  private tickRun: Promise<void> | null = null;
  private draining = false;
  private closed = false;
  private pendingIntents = 0;
  /**
   * Channels whose update is due but was deferred past an event-loop turn that had spent its
   * SHARD_TURN_BUDGET_MS, in the order they fell due; drained by {@link Shard.drainDue}.
   */
  private readonly due = new Set<Owned>();
  private dueDrain: NodeJS.Immediate | null = null;
  /**
   * The event-loop time updates may take per turn, and the time a tick may (SHARD_TURN_BUDGET_MS each, on
   * this.now()). Separate: a drain of deferred updates runs before a yielded tick's next turn, and one
   * budget spent by the drain would leave the tick one channel a turn while updates wait (a rollover).
   */
  private readonly updateBudget: TurnBudget;
  private readonly tickBudget: TurnBudget;

  constructor(private readonly deps: ShardDeps) {
    const { config, telemetry } = deps;
    this.id = config.engine.shardId;
    this.now = deps.now ?? Date.now;
    this.updateBudget = new TurnBudget(config.engine.turnBudgetMs, () => this.now());
    this.tickBudget = new TurnBudget(config.engine.turnBudgetMs, () => this.now());
    this.wallets = deps.ledger
      ? new WalletMirror(deps.ledger, { max: config.rounds.walletMirrorMax, reloadMs: config.rounds.walletReloadMs, now: this.now })
      : null;
    this.rm = deps.ledger ? roundMetrics(telemetry) : null;
    this.charge = deps.charge ?? (deps.ledger ? (req) => this.chargeFromWallet(req) : noWallet);
    const blockSize = config.sequencer.blockSize;
    this.ids = new IdAllocator(() => this.leaseBlock(), Math.max(1, Math.floor(blockSize / 5)));
    const mx = telemetry.metrics;
    this.m = {
      intents: mx.counter('crowdplay_intents_total'),
      actAckMs: mx.histogram('crowdplay_act_ack_ms'),
      batchLagMs: mx.histogram('crowdplay_batch_lag_ms'),
      batches: mx.counter('crowdplay_batches_total'),
      logWrites: mx.counter('crowdplay_event_log_writes_total'),
      updates: mx.counter('crowdplay_channel_updates_total'),
      lastBatchRepeats: mx.counter('crowdplay_last_batch_repeats_total'),
      tickYields: mx.counter('crowdplay_tick_yields_total'),
      updatesDeferred: mx.counter('crowdplay_channel_updates_deferred_total'),
      updateBytes: mx.histogram('crowdplay_channel_update_bytes'),
      snapshotErrors: mx.counter('crowdplay_snapshot_errors_total'),
      absorbed: mx.counter('crowdplay_channel_absorbed_total'),
    };
    mx.gauge('crowdplay_shard_channels', () => this.owned.size);
    mx.gauge('crowdplay_shard_pending_intents', () => this.pendingIntents);
    mx.gauge('crowdplay_channel_updates_due', () => this.due.size);
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

  private async chargeFromWallet(req: Parameters<ChargeFn>[0]): Promise<{ ok: true } | { ok: false; code: ErrorCode }> {
    const o = this.owned.get(req.channel);
    if (!o?.rounds) return { ok: false, code: 'CP_ERR_CHANNEL_NOT_OWNED' };
    try {
      await o.rounds.chargeAction(req.viewer, req.cost, req.idempotencyKey);
      return { ok: true };
    } catch (err) {
      return { ok: false, code: isCrowdplayError(err) ? err.code : 'CP_ERR_INTERNAL' };
    }
  }

  /** Channels this shard owns. */
  get channels(): string[] {
    return [...this.owned.keys()];
  }

  /** Starts the tick, snapshot and heartbeat loops and answers `shard.<id>.ctl`. */
  async start(): Promise<void> {
    const { config, bus, subjects, store } = this.deps;
    // A restarted shard (same SHARD_ID) owns nothing yet: the router assigns its predecessor's channels again (it sees a new `instance`).
    const held = await store.channels.disown(this.id);
    if (held > 0)
      this.deps.telemetry.logger.info({ shard: this.id, channels: held }, 'channels of a previous process of this shard disowned');
    this.ctlSub = bus.subscribe(subjects.shardCtl(this.id), (msg) => void this.onShardCtl(msg));
    // The router moved a channel this shard still serves (it was cut off, or paused): stop at once; the epoch fences its writes anyway.
    this.assignmentsSub = bus.subscribe(subjects.routerAssignments(), (msg) => {
      try {
        for (const c of decodeAssignments(msg.data)) {
          const o = this.owned.get(c.channel);
          if (o && c.shard !== null && c.shard !== this.id && c.epoch > o.epoch) {
            this.deps.telemetry.logger.warn(
              { channel: c.channel, epoch: o.epoch, owner: c.shard, ownerEpoch: c.epoch },
              'channel moved away: dropping it',
            );
            this.stopServing(o, true);
          }
        }
      } catch {
        this.deps.telemetry.refusals.refuse('engine', 'CP_ERR_PROTO_MALFORMED', { subject: 'router.assignments' });
      }
    });
    if (this.wallets) {
      const wallets = this.wallets;
      // Grants through the tenant API reach the mirror at once (a stake right after the grant's 200 sees them).
      this.creditSub = bus.subscribe(subjects.walletCredits(), (msg) => {
        try {
          const c = decodeJson<WalletCredit>(msg.data);
          if (typeof c.points === 'number' && typeof c.balance === 'number') wallets.credited(c.tenant, c.viewer, c.points, c.balance);
        } catch {
          this.deps.telemetry.refusals.refuse('engine', 'CP_ERR_PROTO_MALFORMED', { subject: 'wallet.credit' });
        }
      });
    }
    this.tickTimer = setInterval(() => void this.tick(), config.engine.tickMs);
    this.snapshotTimer = setInterval(() => void this.snapshotAll(), config.engine.snapshotIntervalMs);
    this.lastBeatMs = this.now();
    this.heartbeat();
    this.heartbeatTimer = setInterval(() => this.heartbeat(), config.engine.heartbeatMs);
    await bus.flush();
  }

  /** Tells the router this shard is alive, with its load: channels owned and intents/s since the last beat (SHARD_HEARTBEAT_MS). */
  private heartbeat(): void {
    const { bus, subjects } = this.deps;
    const now = this.now();
    const intentsPerS = now > this.lastBeatMs ? Math.round((this.intentsSinceBeat * 1000) / (now - this.lastBeatMs)) : 0;
    this.intentsSinceBeat = 0;
    this.lastBeatMs = now;
    bus.publish(
      subjects.shardHeartbeat(),
      encodeJson({
        v: CONTROL_VERSION,
        id: this.id,
        instance: this.instance,
        channels: this.owned.size,
        intentsPerS,
        draining: this.draining,
        atMs: now,
      } satisfies Heartbeat),
    );
  }

  private async leaseBlock(): Promise<IdBlock> {
    const { bus, subjects, config } = this.deps;
    const msg = await bus.request(subjects.sequencerLease(), encodeJson({ size: config.sequencer.blockSize }), {
      timeoutMs: config.bus.requestTimeoutMs,
    });
    const r = decodeJson<{ ok: boolean; first?: number; last?: number; message?: string }>(msg.data);
    if (!r.ok || r.first === undefined || r.last === undefined) throw new Error(`sequencer refused a lease: ${r.message ?? 'no reason'}`);
    return { first: r.first, last: r.last };
  }

  /**
   * The next id of the shard's leased blocks, waiting for a lease when they are used up.
   * @throws CrowdplayError CP_ERR_CHANNEL_UNAVAILABLE (retryable; cause: the lease error) when the
   *   sequencer does not answer (restarting): a tick tries again on the next one, a game request is refused
   */
  private async nextEventId(channel = '*'): Promise<number> {
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
  private async eventIdFor(o: Owned): Promise<number> {
    for (;;) {
      const id = this.ids.take() ?? (await this.nextEventId(o.rt.id));
      if (id > o.rt.ev) return id;
    }
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
      this.deps.telemetry.refusals.refuse('engine', r.code, { subject: 'shard.ctl' });
      msg.respond(encodeJson({ v: CONTROL_VERSION, ...r } satisfies ShardControlReply));
      return;
    }
    try {
      if ('channels' in req || req.op === 'owned') {
        let results: AcquireResult[] | undefined;
        if (req.op === 'acquire') results = await this.acquireMany(req.channels);
        else if (req.op === 'release' && req.handoff) results = await this.handOffMany(req.channels);
        else if (req.op === 'release') results = await this.releaseMany(req.channels, req.ifIdle === true);
        else if (req.op === 'forget') results = req.channels.map((channel) => (this.forget(channel), { channel, ok: true }));
        reply =
          req.op === 'owned'
            ? { v: CONTROL_VERSION, ok: true, channels: this.owned.size, owned: [...this.owned.keys()] }
            : { v: CONTROL_VERSION, ok: true, channels: this.owned.size, results: results! };
      } else {
        if (req.op === 'acquire') await this.acquire(req.channel, req.epoch);
        else if (req.op === 'release' && req.handoff) await this.handOff(req.channel);
        else if (req.op === 'release') {
          const [r] = await this.releaseMany([req.channel], req.ifIdle === true);
          if (r && !r.ok) throw new CrowdplayError(r.code, [req.channel]);
        } else this.forget(req.channel);
        reply = { ok: true, channels: this.owned.size };
      }
    } catch (err) {
      reply = toErrorReply(err);
      if (reply.code === 'CP_ERR_INTERNAL') this.deps.telemetry.logger.error({ err }, 'shard control request failed');
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
   * Takes ownership of a batch of channels, each at the epoch the router
   * wrote for this shard in Postgres, in one go: the rows, the snapshots, the
   * previous owners' last logged batches and the unfinished rounds are read
   * in one query each; one block of event ids is leased after those reads
   * (every id this shard uses for them from then on is above any id a
   * previous owner used); then every channel is started (rounds recovered,
   * built-in games initialised, subjects subscribed) and one bus flush makes
   * the subscriptions live. Answers per channel: a channel is refused, with
   * the rest going ahead, when this shard is draining or at SHARD_MAX_CHANNELS
   * (CP_ERR_CHANNEL_UNAVAILABLE, retryable elsewhere), when the row's epoch
   * or owner is not the one asked (CP_ERR_CHANNEL_STALE_EPOCH: another
   * placement superseded it), or when it is unknown or migrated. Acquiring an
   * owned channel at a newer epoch adopts the epoch.
   * @param items at most one per channel (a duplicate is refused as CP_ERR_PROTO_INVALID)
   * @returns one result per item, in order
   * @throws the sequencer's or the store's error when they are unreachable (nothing acquired)
   */
  async acquireMany(items: ReadonlyArray<{ channel: string; epoch: number }>): Promise<AcquireResult[]> {
    const { config, store, bus, telemetry } = this.deps;
    const results = new Map<number, AcquireResult>();
    const refuse = (i: number, code: ErrorCode, message: string): void => {
      results.set(i, { channel: items[i]!.channel, ok: false, code, message });
      telemetry.refusals.refuse('engine', code, { channel: items[i]!.channel, op: 'acquire', reason: message });
    };
    const seen = new Set<string>();
    const todo: number[] = [];
    let room = config.engine.maxChannels - this.owned.size;
    for (let i = 0; i < items.length; i++) {
      const { channel, epoch } = items[i]!;
      if (seen.has(channel)) {
        refuse(i, 'CP_ERR_PROTO_INVALID', 'duplicate channel in an acquire batch');
        continue;
      }
      seen.add(channel);
      if (this.draining || this.closed) {
        refuse(i, 'CP_ERR_CHANNEL_UNAVAILABLE', 'draining');
        continue;
      }
      this.forget(channel); // handed off from here before: it comes back from its durable state
      const existing = this.owned.get(channel);
      if (existing) {
        existing.epoch = Math.max(existing.epoch, epoch);
        results.set(i, { channel, ok: true });
        continue;
      }
      if (room <= 0) {
        refuse(i, 'CP_ERR_CHANNEL_UNAVAILABLE', 'SHARD_MAX_CHANNELS');
        continue;
      }
      room--;
      todo.push(i);
    }
    if (todo.length > 0) {
      const t0 = performance.now();
      const ids = todo.map((i) => items[i]!.channel);
      const [rows, snaps, lastBatches, rounds] = await Promise.all([
        store.channels.getMany(ids),
        store.channels.loadSnapshots(ids),
        store.events.latestMany(ids, 'batch'),
        this.deps.ledger ? store.rounds.listUnfinishedMany(ids) : Promise.resolve(new Map<string, RoundRow[]>()),
      ]);
      const ready: number[] = [];
      for (const i of todo) {
        const { channel, epoch } = items[i]!;
        const row = rows.get(channel);
        if (!row) refuse(i, 'CP_ERR_CHANNEL_UNKNOWN', 'no such channel');
        // A channel whose chat became another one never runs again (its state moved; see the router's migrate).
        else if (row.migratedTo !== null) refuse(i, 'CP_ERR_CHANNEL_MIGRATED', `moved to ${row.migratedTo}`);
        else if (row.epoch !== epoch || row.owner !== this.id)
          refuse(i, 'CP_ERR_CHANNEL_STALE_EPOCH', `the row is at epoch ${row.epoch} owned by ${row.owner ?? 'nobody'}`);
        else ready.push(i);
      }
      if (ready.length > 0) {
        // The handed-off open rounds of the batch are checked against the ledger with one query, not one each.
        const handedOff: Array<{ tenantId: string; roundId: string }> = [];
        for (const i of ready)
          for (const r of rounds.get(items[i]!.channel) ?? [])
            if (r.state === 'open' && (r.book as { handoff?: unknown } | null)?.handoff !== undefined)
              handedOff.push({ tenantId: rows.get(items[i]!.channel)!.tenantId, roundId: r.uid });
        const committed =
          this.deps.ledger && handedOff.length > 0
            ? await this.deps.ledger.roundTransferIdsMany(handedOff, [TransferKinds.stake, TransferKinds.buy, TransferKinds.sell])
            : undefined;
        // Ids used from now on must exceed every id the previous owners used: one lease after the reads covers the batch.
        const tRead = performance.now();
        await this.ids.renew();
        const tLease = performance.now();
        const started = await Promise.all(
          ready.map(async (i) => {
            const { channel, epoch } = items[i]!;
            try {
              const o = await this.start1(channel, epoch, rows.get(channel)!.tenantId, snaps.get(channel), rounds.get(channel) ?? [], committed);
              return { i, o, last: lastBatches.get(channel) };
            } catch (err) {
              refuse(i, isCrowdplayError(err) ? err.code : 'CP_ERR_CHANNEL_UNAVAILABLE', String(err));
              return null;
            }
          }),
        );
        const tStart = performance.now();
        const live: Owned[] = [];
        for (const s of started) {
          if (!s) continue;
          const { i, o, last } = s;
          const channel = o.rt.id;
          if (this.owned.has(channel) || this.draining || this.closed) {
            // A concurrent acquire won, or a drain began meanwhile.
            o.rounds?.close();
            if (this.owned.has(channel)) results.set(i, { channel, ok: true });
            else refuse(i, 'CP_ERR_CHANNEL_UNAVAILABLE', 'draining');
            continue;
          }
          // A shard logs a batch before it publishes it: one that died in between left a batch in the log that no game
          // got live. The previous owner's last logged batch goes out again before this owner's first (gateways never
          // send a game socket a batch at or below one it was sent, so a game that has it does not get it twice).
          if (last && last.epoch < o.epoch) {
            bus.publish(this.deps.subjects.channelGame(channel), Buffer.from(last.body, 'utf8'), { headers: { [REPEAT_HEADER]: '1' } });
            this.m.lastBatchRepeats.add(1);
          }
          this.serve(o);
          live.push(o);
          results.set(i, { channel, ok: true });
        }
        await bus.flush();
        for (const o of live) this.scheduleUpdate(o);
        if (live.length > 0) {
          const ms = {
            readMs: Math.round(tRead - t0),
            leaseMs: Math.round(tLease - tRead),
            startMs: Math.round(tStart - tLease),
            subscribeMs: Math.round(performance.now() - tStart),
          };
          telemetry.logger.info(
            live.length === 1
              ? { channel: live[0]!.rt.id, epoch: live[0]!.epoch, shard: this.id, game: live[0]!.game?.name, ...ms }
              : { channels: live.length, shard: this.id, ...ms },
            live.length === 1 ? 'channel acquired' : 'channels acquired',
          );
        }
      }
    }
    return items.map((it, i) => results.get(i) ?? { channel: it.channel, ok: false, code: 'CP_ERR_INTERNAL', message: 'not answered' });
  }

  /**
   * Builds a channel's runtime from what the bulk acquire read: its snapshot restored, its unfinished rounds
   * recovered (paid, refunded or resumed), its built-in game initialised. Does not serve it yet.
   * @throws the sequencer's error (no event id for a built-in game's state), the ledger's from the recovery
   */
  private async start1(
    channel: string,
    epoch: number,
    tenant: string,
    snap: Snapshot | undefined,
    rounds: RoundRow[],
    committed: ReadonlyMap<string, ReadonlyArray<{ id: string; kind: string }>> | undefined,
  ): Promise<Owned> {
    const { config, store, bus, subjects, telemetry } = this.deps;
    const rt = new ChannelRuntime(channel);
    if (snap) rt.restore(snap.state as ChannelSnapshotState, snap.eventId);
    const game = this.deps.gameFor?.(channel);
    const o: Owned = {
      rt,
      epoch,
      game,
      subs: [],
      updateTimer: null,
      lastUpdateMs: 0,
      tenant,
      rounds: null,
      roundsDirty: false,
      pendingState: undefined,
      moving: false,
    };
    if (this.deps.ledger && this.wallets && this.rm) {
      o.rounds = new ChannelRounds({
        config,
        ledger: this.deps.ledger,
        store,
        telemetry,
        wallets: this.wallets,
        metrics: this.rm,
        channel,
        tenant,
        epoch: () => o.epoch,
        now: this.now,
        sendAcks: (gw, acks, balances) => this.sendAcks(gw, acks, balances),
        sendWallet: (entries) => bus.publish(subjects.channelWallet(channel), encodeJson({ entries } satisfies WalletBatch)),
        sendRound: (round) => bus.publish(subjects.channelGame(channel), encodeJson({ t: 'round', round } satisfies RoundFrame)),
        changed: () => {
          o.roundsDirty = true;
        },
      });
      // A built-in game's grant, else the one the game declared to a previous owner (the snapshot carries it across moves).
      o.rounds.welcomeGrant = game?.welcomeGrant ?? rt.welcomeGrant;
      await o.rounds.recover(rounds, committed);
    }
    if (game) {
      const now = this.now();
      const restoredGame = snap ? (snap.state as ChannelSnapshotState).game : null;
      if (!rt.declared || !sameActions(rt.snapshot().actions, game.actions())) rt.declare(game.actions(), await this.nextEventId(), now);
      rt.setGameState(game.init(restoredGame), await this.nextEventId(), now);
    }
    return o;
  }

  /** Starts serving an acquired channel: owned, and its intake and control subjects subscribed (live after a bus flush). */
  private serve(o: Owned): void {
    const { bus, subjects } = this.deps;
    const channel = o.rt.id;
    this.owned.set(channel, o);
    // One queue group: while a move hands the channel over, each message reaches either the old owner (which refuses it,
    // retryable) or the new one, never both.
    o.subs.push(bus.subscribe(subjects.channelIn(channel), (msg) => this.onIntents(o, msg), { queue: 'owner' }));
    o.subs.push(bus.subscribe(subjects.channelCtl(channel), (msg) => void this.onChannelCtl(o, msg), { queue: 'owner' }));
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
   * Releases a batch of channels: each stops being served here, its built-in game's latest state is set, and
   * the final snapshots are written in one statement and the owners cleared in another (each only if this
   * shard still owns the channel at its epoch); one `router.assignments` message tells the caches. A channel
   * not owned answers ok (nothing to do). With `ifIdle` (a rebalance) a channel with unfinished rounds is
   * refused CP_ERR_CHANNEL_UNAVAILABLE and stays.
   * @returns one result per channel, in order
   * @throws the store's error (the channels are not served here any more; their owner rows stay, and the
   *   router's reconciler places them again)
   */
  async releaseMany(channels: readonly string[], ifIdle: boolean): Promise<AcquireResult[]> {
    // A tick in flight may still log and publish a batch of the channels: it goes out before the release, never after the next owner's.
    await this.tickSettled();
    const results: AcquireResult[] = [];
    const leaving: Owned[] = [];
    for (const channel of channels) {
      const o = this.owned.get(channel);
      if (o && ifIdle && (o.rounds?.unfinished ?? 0) > 0) {
        results.push({ channel, ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'unfinished rounds' });
        continue;
      }
      results.push({ channel, ok: true });
      if (!o || leaving.includes(o)) continue;
      this.stopServing(o);
      leaving.push(o);
    }
    if (leaving.length === 0) return results;
    await Promise.all(leaving.map((o) => this.settleGameState(o).catch(() => undefined)));
    await this.saveSnapshotsOf(leaving);
    await this.deps.store.channels.releaseMany(leaving.map((o) => ({ channel: o.rt.id, shard: this.id, epoch: o.epoch })));
    // Caches (the router's, gateways') drop the assignments: the next use assigns the channels again.
    this.announce(leaving.map((o) => ({ channel: o.rt.id, shard: null, epoch: o.epoch })));
    this.deps.telemetry.logger.info(
      leaving.length === 1 ? { channel: leaving[0]!.rt.id, epoch: leaving[0]!.epoch } : { channels: leaving.length },
      leaving.length === 1 ? 'channel released' : 'channels released',
    );
    return results;
  }

  /** Publishes assignment changes on `router.assignments`, in v2 batches of at most CONTROL_BATCH_MAX. */
  private announce(changes: AssignmentChange[]): void {
    for (let i = 0; i < changes.length; i += CONTROL_BATCH_MAX)
      this.deps.bus.publish(
        this.deps.subjects.routerAssignments(),
        encodeJson({ v: CONTROL_VERSION, changes: changes.slice(i, i + CONTROL_BATCH_MAX) }),
      );
  }

  /**
   * Before a channel leaves (release, handOff): a built-in game's changes since
   * the last tick (a guess just scored), or a state a tick parked for want of an
   * event id, set at a fresh id so the final snapshot holds them.
   * @throws CrowdplayError CP_ERR_CHANNEL_UNAVAILABLE when no event id can be had (sequencer unreachable)
   */
  private async settleGameState(o: Owned): Promise<void> {
    const state = o.game?.tick?.(this.now()) ?? o.pendingState;
    if (state) o.rt.setGameState(state, await this.eventIdFor(o), this.now());
    o.pendingState = undefined;
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
   * Hands a batch of channels off for a move (the router's `move`, a drain):
   * their new intents and game requests are refused with
   * CP_ERR_CHANNEL_UNAVAILABLE (retryable), their rounds' in-flight stakes
   * and trades commit and every open round's live book is written at the
   * channel's epoch (ChannelRounds.handoff), the open ticks are closed and
   * their batches logged in one statement and published, the final snapshots
   * are written in one statement and the owners cleared in another. Their
   * subjects stay subscribed, still refusing, until `forget` (the new owner
   * subscribes in the same queue group, so nothing published meanwhile falls
   * between the two). A channel not owned answers ok.
   * @returns one result per channel: a channel whose rounds could not be handed off is refused with the
   *   store's code and served here as before; the others go ahead
   * @throws the store's error writing the snapshots or the owners (those channels stay handed off and
   *   refusing; the router's reconciler places them)
   */
  async handOffMany(channels: readonly string[]): Promise<AcquireResult[]> {
    const mine: Owned[] = [];
    for (const ch of channels) {
      const o = this.owned.get(ch);
      if (o && !mine.includes(o)) {
        o.moving = true;
        mine.push(o);
      }
    }
    // The next tick skips them; one in flight publishes its batches before the handoff closes the open ticks.
    const t0 = performance.now();
    await this.tickSettled();
    const failed = new Map<string, AcquireResult>();
    const going: Owned[] = [];
    await Promise.all(
      mine.map(async (o) => {
        if (this.owned.get(o.rt.id) !== o) return; // dropped meanwhile (moved away at a newer epoch): nothing left to hand off
        try {
          await o.rounds?.handoff();
          going.push(o);
        } catch (err) {
          o.moving = false;
          o.rounds?.resumeServing();
          failed.set(o.rt.id, { channel: o.rt.id, ok: false, code: isCrowdplayError(err) ? err.code : 'CP_ERR_CHANNEL_UNAVAILABLE', message: String(err) });
        }
      }),
    );
    // The open ticks' intents reach their games before the channels leave: logged (at their epochs, before the release) and published like any tick's batches.
    const outbox: Outbox = [];
    const now = this.now();
    for (const o of going) {
      try {
        const ev = o.rt.hasOpenIntents ? await this.eventIdFor(o) : 0;
        const pending = o.rt.pendingIntents;
        const batch = o.rt.closeTick(ev, now);
        this.pendingIntents -= pending;
        if (batch) this.deliverBatch(o, batch, now, outbox);
      } catch (err) {
        // No event id (sequencer unreachable): the channel stays here, serving.
        o.moving = false;
        o.rounds?.resumeServing();
        failed.set(o.rt.id, { channel: o.rt.id, ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: String(err) });
      }
    }
    const leaving = going.filter((o) => !failed.has(o.rt.id));
    const tRounds = performance.now();
    await this.publishBatches(outbox);
    await Promise.all(leaving.map((o) => this.settleGameState(o).catch(() => undefined)));
    for (const o of leaving) {
      if (this.owned.get(o.rt.id) !== o) continue;
      if (o.rt.dirty) this.sendUpdate(o);
      const subs = o.subs;
      o.subs = [];
      this.stopServing(o);
      o.subs = subs;
      this.moved.set(o.rt.id, o);
    }
    if (leaving.length > 0) {
      const tTicks = performance.now();
      await this.saveSnapshotsOf(leaving);
      await this.deps.store.channels.releaseMany(leaving.map((o) => ({ channel: o.rt.id, shard: this.id, epoch: o.epoch })));
      const ms = { roundsMs: Math.round(tRounds - t0), ticksMs: Math.round(tTicks - tRounds), releaseMs: Math.round(performance.now() - tTicks) };
      this.deps.telemetry.logger.info(
        leaving.length === 1 ? { channel: leaving[0]!.rt.id, epoch: leaving[0]!.epoch, ...ms } : { channels: leaving.length, ...ms },
        leaving.length === 1 ? 'channel handed off' : 'channels handed off',
      );
    }
    return channels.map((channel) => failed.get(channel) ?? { channel, ok: true });
  }

  /** Drops the subscriptions of a channel handed off from here (its move finished). No-op otherwise. */
  forget(channel: string): void {
    const o = this.moved.get(channel);
    if (!o) return;
    this.moved.delete(channel);
    for (const s of o.subs) s.unsubscribe();
    o.subs = [];
  }

  /**
   * Stops serving a channel here. `moved`: another shard owns it now at a
   * newer epoch (this one was paused or cut off): its subscriptions are
   * drained, not dropped, so every intent and game request NATS had already
   * routed here (while paused, the queue group still counted this shard) is
   * answered, refused as retryable (CP_ERR_CHANNEL_UNAVAILABLE), instead of
   * vanishing without an ack.
   */
  private stopServing(o: Owned, moved = false): void {
    o.rounds?.close();
    if (moved) {
      o.moving = true;
      for (const s of o.subs) void s.drain();
    } else for (const s of o.subs) s.unsubscribe();
    o.subs = [];
    if (o.updateTimer) clearTimeout(o.updateTimer);
    o.updateTimer = null;
    this.due.delete(o);
    this.owned.delete(o.rt.id);
    this.pendingIntents -= o.rt.pendingIntents;
  }

  // ------------------------------------------------------------------ hot path

  private onIntents(o: Owned, msg: BusMessage): void {
    if (!tracingOn() || trace.getSpan(context.active()) === undefined) {
      this.takeIntents(o, msg);
      return;
    }
    // Traced (the batch carries a traceparent; join-only batches do not): a child of the gateway's batch publish span (the bus runs this handler in the context of the
    // message's traceparent); the AckBatch published inside carries this span's context back to the gateway.
    tracer().startActiveSpan(
      'crowdplay.intent_batch.process',
      { kind: SpanKind.CONSUMER, attributes: { 'crowdplay.channel': o.rt.id, 'crowdplay.shard': this.id, 'crowdplay.epoch': o.epoch } },
      (span) => {
        try {
          this.takeIntents(o, msg);
        } finally {
          span.end();
        }
      },
    );
  }

  private takeIntents(o: Owned, msg: BusMessage): void {
    let batch: IntentBatch;
    try {
      batch = decodeJson<IntentBatch>(msg.data);
    } catch {
      this.deps.telemetry.refusals.refuse('engine', 'CP_ERR_PROTO_MALFORMED', { channel: o.rt.id });
      return;
    }
    const { config, telemetry } = this.deps;
    if (o.moving) {
      // Moving to another shard: nothing is taken here. Each intent goes back with its refusal (and the joins with it), so the
      // gateway publishes them again and the new owner takes them; the viewer sees the refusal only if the move outlasts
      // INTENT_MOVE_RESEND_MS.
      const acks: BusAck[] = batch.intents.map((it) => ({
        conn: it.conn,
        seq: it.seq,
        ok: false,
        code: 'CP_ERR_CHANNEL_UNAVAILABLE',
        resend: it,
      }));
      const joins = batch.joins ?? [];
      if (acks.length > 0) {
        this.m.intents.add(acks.length, { outcome: 'refused', reason: 'CP_ERR_CHANNEL_UNAVAILABLE' });
        telemetry.refusals.refuse('engine', 'CP_ERR_CHANNEL_UNAVAILABLE', { channel: o.rt.id, reason: 'moving' }, acks.length);
      }
      if (acks.length > 0 || joins.length > 0) {
        const back: AckBatch = { acks };
        if (joins.length > 0) back.rejoin = joins;
        this.deps.bus.publish(this.deps.subjects.gatewayAcks(batch.gw), encodeJson(back));
      }
      return;
    }
    this.intentsSinceBeat += batch.intents.length;
    // Joins first: a stake in the same batch waits for the viewer's welcome grant.
    if (batch.joins && batch.joins.length > 0 && o.rounds) void o.rounds.join(batch.gw, batch.joins);
    const maxPending = config.engine.maxPendingIntents;
    const now = this.now();
    const acks: AckBatch['acks'] = [];
    const paid: Array<Promise<void>> = [];
    let listed = 0;
    let dropped = 0;
    for (const it of batch.intents) {
      if (it.guess !== undefined) {
        const g = o.game?.guess;
        if (!g) {
          acks.push({ conn: it.conn, seq: it.seq, ok: false, code: 'CP_ERR_INTENT_UNKNOWN_ACTION' });
          continue;
        }
        try {
          const r = g.call(o.game, it.viewer, it.guess, now, it.name);
          acks.push({ conn: it.conn, seq: it.seq, ok: true, cost: 0, marks: r.marks, solved: r.solved, left: r.left });
          this.m.intents.add(1, { outcome: 'accepted' });
          this.m.actAckMs.record(Math.max(0, now - it.at));
        } catch (err) {
          const code: ErrorCode = isCrowdplayError(err) ? err.code : 'CP_ERR_INTERNAL';
          acks.push({ conn: it.conn, seq: it.seq, ok: false, code });
          this.m.intents.add(1, { outcome: 'refused', reason: code });
          telemetry.refusals.refuse('engine', code, { channel: o.rt.id });
        }
        continue;
      }
      if (it.trade) {
        if (o.rounds) o.rounds.take(batch.gw, it as typeof it & { trade: BusTrade });
        else acks.push({ conn: it.conn, seq: it.seq, ok: false, code: 'CP_ERR_ROUND_UNKNOWN' });
        continue;
      }
      const checked = o.rt.check(it);
      if (!checked.ok) {
        acks.push({ conn: it.conn, seq: it.seq, ok: false, code: checked.code });
        this.m.intents.add(1, { outcome: 'refused', reason: checked.code });
        telemetry.refusals.refuse('engine', checked.code, { channel: o.rt.id });
        continue;
      }
      if (this.pendingIntents >= maxPending) {
        acks.push({ conn: it.conn, seq: it.seq, ok: false, code: 'CP_ERR_INTENT_OVERLOADED' });
        this.m.intents.add(1, { outcome: 'refused', reason: 'CP_ERR_INTENT_OVERLOADED' });
        telemetry.refusals.refuse('engine', 'CP_ERR_INTENT_OVERLOADED', { limit: 'SHARD_MAX_PENDING_INTENTS', value: maxPending });
        continue;
      }
      if (checked.cost > 0) {
        paid.push(this.takePaid(o, batch.gw, it, checked.cost));
        continue;
      }
      if (this.accept(o, it.viewer, it.action, it.option, it.at)) listed++;
      else dropped++;
      acks.push({ conn: it.conn, seq: it.seq, ok: true, cost: 0 });
      this.m.actAckMs.record(Math.max(0, now - it.at));
    }
    this.countIntake(o, listed, dropped);
    if (acks.length > 0) this.deps.bus.publish(this.deps.subjects.gatewayAcks(batch.gw), encodeJson({ acks } satisfies AckBatch));
    if (paid.length > 0) void Promise.all(paid);
  }

  private sendAcks(gw: string, acks: BusAck[], balances?: Array<{ conn: number; frame: BalanceFrame }>): void {
    const msg: AckBatch = { acks };
    if (balances && balances.length > 0) msg.balances = balances;
    this.deps.bus.publish(this.deps.subjects.gatewayAcks(gw), encodeJson(msg));
  }

  /** A paid intent: acked only after the charge is committed (never before). */
  private async takePaid(o: Owned, gw: string, it: IntentBatch['intents'][number], cost: number): Promise<void> {
    let ack: AckBatch['acks'][number];
    try {
      const r = await this.charge({
        channel: o.rt.id,
        epoch: o.epoch,
        viewer: it.viewer,
        action: it.action,
        cost,
        idempotencyKey: `${gw}:${it.conn}:${it.seq}`,
      });
      if (r.ok && this.owned.get(o.rt.id) === o) {
        const isListed = this.accept(o, it.viewer, it.action, it.option, it.at);
        this.countIntake(o, isListed ? 1 : 0, isListed ? 0 : 1);
        ack = { conn: it.conn, seq: it.seq, ok: true, cost };
      } else {
        const code: ErrorCode = r.ok ? 'CP_ERR_CHANNEL_NOT_OWNED' : r.code;
        ack = { conn: it.conn, seq: it.seq, ok: false, code };
        this.m.intents.add(1, { outcome: 'refused', reason: code });
        this.deps.telemetry.refusals.refuse('engine', code, { channel: o.rt.id });
      }
    } catch (err) {
      this.deps.telemetry.logger.error({ err, channel: o.rt.id }, 'charge failed');
      ack = { conn: it.conn, seq: it.seq, ok: false, code: 'CP_ERR_INTERNAL' };
    }
    this.m.actAckMs.record(Math.max(0, this.now() - it.at));
    this.deps.bus.publish(this.deps.subjects.gatewayAcks(gw), encodeJson({ acks: [ack] } satisfies AckBatch));
  }

  /**
   * Adds a checked intent to the open tick.
   * @returns true when listed, false when over maxPerTick (tallied, not listed);
   *   the caller counts both with countIntake (once per batch, not per intent)
   */
  private accept(o: Owned, viewer: string, action: string, option: string | undefined, atMs: number): boolean {
    if (!o.rt.add(viewer, action, option, atMs)) return false;
    this.pendingIntents++;
    return true;
  }

  /** Metrics for a batch's accepted intents, added once per batch: attribute hashing per intent was measurable at 10,000/s. */
  private countIntake(o: Owned, listed: number, dropped: number): void {
    if (listed > 0) this.m.intents.add(listed, { outcome: 'accepted' });
    if (dropped > 0) {
      this.m.intents.add(dropped, { outcome: 'dropped_over_cap' });
      this.deps.telemetry.refusals.refuse('engine', 'CP_ERR_INTENT_OVER_CAP', { channel: o.rt.id }, dropped);
    }
  }

  /** Closes every owned channel's batch. Ticks never overlap: a slow one skips the next (resolves at once). */
  private tick(): Promise<void> {
    if (this.tickRun) return Promise.resolve();
    const run = this.runTick().finally(() => {
      if (this.tickRun === run) this.tickRun = null;
    });
    this.tickRun = run;
    return run;
  }

  /** Resolves once no tick is in flight (its batches are logged and published, or dropped). Never rejects. */
  private async tickSettled(): Promise<void> {
    while (this.tickRun) await this.tickRun;
  }

  private async runTick(): Promise<void> {
    const outbox: Outbox = [];
    let failed = 0;
    let firstErr: unknown;
    for (const o of [...this.owned.values()]) {
      if (this.tickBudget.spent()) {
        // Every chat rolling over at once makes this loop the longest task of the process: let I/O in.
        this.m.tickYields.add(1);
        await new Promise<void>((resolve) => setImmediate(resolve));
        this.tickBudget.spent(); // starts this turn's clock (its reset ran before this continuation: the first ask answers false)
      }
      if (o.moving || this.owned.get(o.rt.id) !== o) continue; // handOff closes its tick; a channel dropped meanwhile is not ticked
      try {
        if (o.game?.botIntents) {
          const now = this.now();
          let listed = 0;
          let dropped = 0;
          for (const b of o.game.botIntents()) {
            if (!o.rt.check(b).ok) continue;
            if (this.accept(o, b.viewer, b.action, b.option, now)) listed++;
            else dropped++;
          }
          this.countIntake(o, listed, dropped);
        }
        if (o.rounds) await this.tickRounds(o);
        if (o.game?.tick) {
          const state = o.game.tick(this.now());
          if (state) o.pendingState = state;
        }
        if (o.pendingState) {
          const state = o.pendingState;
          const ev = await this.eventIdFor(o);
          // A newer state was set meanwhile (a batch: deliverBatch clears pendingState; an absorb or a game
          // request: its id is above this one): this one is older, drop it.
          if (o.pendingState === state) {
            o.pendingState = undefined;
            if (ev > o.rt.ev) {
              o.rt.setGameState(state, ev, this.now());
              this.scheduleUpdate(o);
            }
          }
        }
        const ev = o.rt.hasOpenIntents ? await this.eventIdFor(o) : 0;
        const pending = o.rt.pendingIntents;
        const now = this.now();
        const batch = o.rt.closeTick(ev, now);
        this.pendingIntents -= pending;
        if (!batch) continue;
        this.deliverBatch(o, batch, now, outbox);
        this.scheduleUpdate(o);
      } catch (err) {
        // No event id (sequencer restarting): what the channel has not set yet stays pending (dirty rounds,
        // game state, open intents) for the next tick; the other channels' batches still go out.
        failed++;
        firstErr ??= err;
      }
    }
    if (failed > 0)
      this.deps.telemetry.logger.error({ err: firstErr, channels: failed }, 'tick failed for some channels; they retry next tick');
    try {
      await this.publishBatches(outbox);
    } catch (err) {
      // tickSettled() never rejects: release, handOff and drain await it.
      this.deps.telemetry.logger.error({ err }, 'tick failed publishing its batches');
    }
  }

  /** Round deadlines and expiry, the built-in game's round commands, and the rounds shown to viewers. */
  private async tickRounds(o: Owned): Promise<void> {
    const rounds = o.rounds!;
    const now = this.now();
    rounds.tick(now);
    if (o.game?.rounds && !this.draining) {
      for (const cmd of o.game.rounds(now, rounds.views())) {
        const p =
          cmd.op === 'open'
            ? rounds.open(o.tenant, cmd.request)
            : cmd.op === 'settle'
              ? rounds.settle(o.tenant, cmd.round, cmd.outcome)
              : rounds.cancel(o.tenant, cmd.round);
        p.catch((err: unknown) => this.deps.telemetry.logger.warn({ err, channel: o.rt.id, cmd }, 'built-in game round command failed'));
      }
    }
    if (o.roundsDirty) {
      // Cleared only once the id is taken: without one (sequencer restarting) the next tick tries again.
      const ev = await this.eventIdFor(o);
      o.roundsDirty = false;
      o.rt.setRounds(rounds.views(), ev, this.now());
      this.scheduleUpdate(o);
    }
  }

  private deliverBatch(o: Owned, batch: Batch, now: number, outbox: Outbox): void {
    this.m.batches.add(1);
    for (const a of Object.values(batch.actions)) for (const it of a.intents) this.m.batchLagMs.record(Math.max(0, now - it.at));
    if (o.game) {
      const state = o.game.onBatch(batch);
      if (state) {
        o.pendingState = undefined; // the game's newest state supersedes one waiting for an id
        o.rt.setGameState(state, batch.ev, now);
      }
    } else {
      outbox.push({ o, ev: batch.ev, text: JSON.stringify(batch) });
    }
  }

  /**
   * Logs a tick's batches in the event log (one statement), then publishes
   * them on `ch.<C>.game`: a batch a game received is in the log, so a game
   * that reconnects gets it again (gateway resume). A channel whose epoch is
   * stale (it moved) publishes nothing and is dropped. Any other log failure
   * publishes anyway and raises the channel's floor (a resume from before it
   * resyncs); if that fails too the gap goes unreported (counted: outcome gap_unmarked).
   * A batch of a channel dropped while this was in flight (the router moved it
   * away) is not published (outcome moved): the new owner's ids are above it
   * and may be out already. Release and handOff wait for the tick in flight
   * (tickSettled), so their channel's batches go out before they return.
   */
  private async publishBatches(outbox: Outbox): Promise<void> {
    outbox = this.stillOwned(outbox);
    if (outbox.length === 0) return;
    const { store, bus, subjects, telemetry } = this.deps;
    let stale: Set<string>;
    try {
      stale = new Set(
        await store.events.append(outbox.map((b) => ({ channel: b.o.rt.id, eventId: b.ev, epoch: b.o.epoch, kind: 'batch', body: b.text }))),
      );
    } catch (err) {
      // Postgres refused the statement as a whole: publish anyway with a floor per channel (a resume from before it resyncs).
      telemetry.logger.error({ err, channels: outbox.length }, 'event log write failed; publishing with a floor');
      await Promise.all(
        outbox.map(async (b) => {
          try {
            await store.events.raiseFloor(b.o.rt.id, b.ev);
            this.m.logWrites.add(1, { outcome: 'gap' });
          } catch {
            this.m.logWrites.add(1, { outcome: 'gap_unmarked' });
          }
        }),
      );
      for (const b of this.stillOwned(outbox)) bus.publish(subjects.channelGame(b.o.rt.id), Buffer.from(b.text));
      return;
    }
    if (stale.size > 0) {
      // The channels at fault moved: their rows were dropped by the statement, the others written.
      const dropped = new Set<Owned>();
      for (const b of outbox) if (stale.has(b.o.rt.id)) dropped.add(b.o);
      this.m.logWrites.add(outbox.filter((b) => stale.has(b.o.rt.id)).length, { outcome: 'stale_epoch' });
      for (const o of dropped) {
        telemetry.logger.warn({ channel: o.rt.id, epoch: o.epoch }, 'event log refused: stale epoch, dropping channel');
        if (this.owned.get(o.rt.id) === o) this.stopServing(o, true);
      }
      outbox = outbox.filter((b) => !stale.has(b.o.rt.id));
    }
    const live = this.stillOwned(outbox);
    this.m.logWrites.add(live.length, { outcome: 'ok' });
    for (const b of live) bus.publish(subjects.channelGame(b.o.rt.id), Buffer.from(b.text));
  }

  /** The batches whose channel this shard still serves as the same Owned; the others are counted (outcome moved) and left out. */
  private stillOwned(outbox: Outbox): Outbox {
    const live = outbox.filter((b) => this.owned.get(b.o.rt.id) === b.o);
    if (live.length < outbox.length) this.m.logWrites.add(outbox.length - live.length, { outcome: 'moved' });
    return live;
  }

  /** Sends the channel's update now if the per-channel interval allows, else once it does (both through {@link Shard.updateDue}). */
  private scheduleUpdate(o: Owned): void {
    // Not for a channel dropped while its change awaited an event id: the next owner's ids are above it.
    if (!o.rt.dirty || o.updateTimer || this.due.has(o) || this.owned.get(o.rt.id) !== o) return;
    const wait = o.lastUpdateMs + this.deps.config.engine.updateIntervalMs - this.now();
    if (wait <= 0) this.updateDue(o);
    else {
      o.updateTimer = setTimeout(() => {
        o.updateTimer = null;
        if (this.owned.get(o.rt.id) === o) this.updateDue(o);
      }, wait);
    }
  }

  /**
   * A channel's update is due: published now while this event-loop turn has
   * spent less than SHARD_TURN_BUDGET_MS (ms, this.now()) since its
   * first update, else queued behind the updates already deferred and
   * published in a later turn (setImmediate, so the I/O polled in between,
   * acks among it, is not held up). Channels whose timers fall due together
   * (every chat's puzzle rolls over at once) thus cost the loop at most the
   * budget per turn instead of one pass over all of them.
   */
  private updateDue(o: Owned): void {
    if (this.due.size > 0 || this.updateBudget.spent()) {
      if (!this.due.has(o)) {
        this.due.add(o);
        this.m.updatesDeferred.add(1);
      }
      this.dueDrain ??= setImmediate(() => void this.drainDue());
      return;
    }
    this.sendUpdate(o);
  }

  /**
   * Publishes deferred updates, oldest first, until this turn's budget is spent; the rest wait for the
   * next turn. Yields to the microtask queue after each one: the in-process bus delivers (the gateway's
   * fanout) in a microtask, and the budget is meant to count that work too.
   */
  private async drainDue(): Promise<void> {
    try {
      for (const o of this.due) {
        if (this.closed || this.updateBudget.spent()) break;
        this.due.delete(o);
        if (this.owned.get(o.rt.id) !== o) continue;
        try {
          this.sendUpdate(o);
        } catch (err) {
          // One update that cannot be published (the bus refused it) must not stop the others.
          this.deps.telemetry.logger.error({ err, channel: o.rt.id }, 'viewer update not published');
        }
        await Promise.resolve();
      }
    } finally {
      this.dueDrain = this.due.size > 0 && !this.closed ? setImmediate(() => void this.drainDue()) : null;
    }
  }

  private sendUpdate(o: Owned): void {
    this.due.delete(o);
    if (!o.rt.dirty) return;
    const text = o.rt.takeUpdate();
    const bytes = Buffer.from(text);
    o.lastUpdateMs = this.now();
    this.m.updates.add(1);
    this.m.updateBytes.record(bytes.length);
    this.deps.bus.publish(this.deps.subjects.channelOut(o.rt.id), bytes);
  }

  // ------------------------------------------------------------------ game control

  private async onChannelCtl(o: Owned, msg: BusMessage): Promise<void> {
    let reply: ChannelCtlReply;
    try {
      const req = decodeJson<ChannelCtlRequest>(msg.data);
      const now = this.now();
      if (o.moving) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [o.rt.id]);
      if (req.op === 'snapshot') reply = { ok: true, update: o.rt.currentUpdate() };
      else if (req.op === 'round.open' || req.op === 'round.settle' || req.op === 'round.cancel') {
        if (!o.rounds) throw new CrowdplayError('CP_ERR_ROUND_INVALID', ['this shard has no ledger']);
        let round: RoundView;
        if (req.op === 'round.open') {
          const open = { round: req.round, kind: req.kind, outcomes: req.outcomes, durationMs: req.durationMs };
          round = await o.rounds.open(req.tenant, req.liquidity === undefined ? open : { ...open, liquidity: req.liquidity });
        } else if (req.op === 'round.settle') round = await o.rounds.settle(req.tenant, req.round, req.outcome);
        else round = await o.rounds.cancel(req.tenant, req.round);
        if (o.roundsDirty) {
          o.roundsDirty = false;
          try {
            o.rt.setRounds(o.rounds.views(), await this.eventIdFor(o), this.now());
            this.scheduleUpdate(o);
          } catch {
            // Done all the same (the round is durable): no event id right now (sequencer restarting), so a later tick sends the update.
            o.roundsDirty = true;
          }
        }
        reply = { ok: true, round };
      } else if (req.op === 'declare') {
        if (o.game) throw new CrowdplayError('CP_ERR_GAME_INVALID_DECLARE', ['this channel runs a built-in game']);
        const names = new Set(req.actions.map((a) => a.name));
        if (names.size !== req.actions.length) throw new CrowdplayError('CP_ERR_GAME_INVALID_DECLARE', ['duplicate action name']);
        const grant = req.welcomeGrant ?? 0;
        const maxGrant = this.deps.config.rounds.welcomeGrantMax;
        if (!Number.isSafeInteger(grant) || grant < 0 || grant > maxGrant) {
          throw new CrowdplayError('CP_ERR_GAME_INVALID_DECLARE', [
            `welcomeGrant must be an integer in [0, ${maxGrant}] (WELCOME_GRANT_MAX_POINTS)`,
          ]);
        }
        if (o.rounds) o.rounds.welcomeGrant = grant;
        o.rt.welcomeGrant = grant;
        const ev = await this.eventIdFor(o);
        const pending = o.rt.pendingIntents;
        o.rt.declare(req.actions, ev, now);
        this.pendingIntents -= pending - o.rt.pendingIntents; // a new declaration drops the open tick
        this.scheduleUpdate(o);
        reply = { ok: true };
      } else if (req.op === 'state') {
        const size = Buffer.byteLength(JSON.stringify(req.state));
        const max = this.deps.config.engine.maxGameStateBytes;
        if (size > max) {
          this.deps.telemetry.refusals.refuse('engine', 'CP_ERR_GAME_STATE_TOO_BIG', { channel: o.rt.id, size });
          throw new CrowdplayError('CP_ERR_GAME_STATE_TOO_BIG', [max]);
        }
        o.rt.setGameState(req.state, await this.eventIdFor(o), now);
        this.scheduleUpdate(o);
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
   * Merges the final snapshot of channel `from` (its chat became this one)
   * into this channel's built-in game, and snapshots this channel at its
   * epoch before answering, so the router may then mark the move finished.
   * Idempotent when the game's `absorb` is (the word puzzle's is).
   * @throws CrowdplayError CP_ERR_CHANNEL_MIGRATION_INVALID (no built-in game
   *   that can absorb, or a snapshot that is not a channel's),
   *   CP_ERR_CHANNEL_UNAVAILABLE (the snapshot write failed; the router retries)
   */
  private async absorb(o: Owned, from: string, state: unknown): Promise<AbsorbCounts> {
    const game = o.game;
    if (!game?.absorb)
      throw new CrowdplayError('CP_ERR_CHANNEL_MIGRATION_INVALID', [from, `${o.rt.id} runs no game that can take its state`]);
    const snap = state as Partial<ChannelSnapshotState> | null;
    if (snap !== null && (typeof snap !== 'object' || snap.v !== 1))
      throw new CrowdplayError('CP_ERR_CHANNEL_MIGRATION_INVALID', [from, 'its snapshot is not a channel snapshot']);
    const r = game.absorb(snap?.game ?? null, this.now());
    for (const [result, n] of [
      ['added', r.added],
      ['replaced', r.replaced],
      ['kept', r.kept],
    ] as const)
      if (n > 0) this.m.absorbed.add(n, { result });
    if (r.stale) this.m.absorbed.add(1, { result: 'stale' });
    if (r.added + r.replaced > 0) {
      o.rt.setGameState(r.state, await this.eventIdFor(o), this.now());
      this.scheduleUpdate(o);
    }
    if (!(await this.saveSnapshot(o))) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [o.rt.id]);
    this.deps.telemetry.logger.info({ channel: o.rt.id, from, ...r, state: undefined }, 'channel absorbed a moved chat');
    return { added: r.added, replaced: r.replaced, kept: r.kept, stale: r.stale };
  }

  // ------------------------------------------------------------------ durability

  private async saveSnapshot(o: Owned): Promise<boolean> {
    return (await this.saveSnapshotsOf([o])).has(o);
  }

  /**
   * Writes the snapshots of the channels that changed since their last one, in statements of at most
   * CONTROL_BATCH_MAX channels. A channel whose epoch is stale (it moved) is dropped here; one whose write
   * failed stays unsaved (the next pass retries).
   * @returns the channels whose state is saved (written now, or unchanged)
   */
  private async saveSnapshotsOf(os: readonly Owned[]): Promise<Set<Owned>> {
    const saved = new Set<Owned>();
    const dirty: Owned[] = [];
    for (const o of os) {
      if (o.rt.unsaved) dirty.push(o);
      else saved.add(o);
    }
    for (let i = 0; i < dirty.length; i += CONTROL_BATCH_MAX) {
      const chunk = dirty.slice(i, i + CONTROL_BATCH_MAX);
      for (const o of chunk) o.rt.unsaved = false;
      let stale: string[];
      try {
        stale = await this.deps.store.channels.saveSnapshots(
          chunk.map((o) => ({ channel: o.rt.id, epoch: o.epoch, eventId: o.rt.ev, state: o.rt.snapshot() })),
        );
      } catch (err) {
        for (const o of chunk) o.rt.unsaved = true;
        this.m.snapshotErrors.add(chunk.length, { reason: 'error' });
        this.deps.telemetry.logger.error({ err, channels: chunk.length }, 'snapshot failed');
        continue;
      }
      const refused = new Set(stale);
      for (const o of chunk) {
        if (!refused.has(o.rt.id)) {
          saved.add(o);
          continue;
        }
        // The channel moved: the new owner is authoritative; stop acting for it.
        this.m.snapshotErrors.add(1, { reason: 'stale_epoch' });
        this.deps.telemetry.logger.warn({ channel: o.rt.id, epoch: o.epoch }, 'snapshot refused: stale epoch, dropping channel');
        if (this.owned.get(o.rt.id) === o) this.stopServing(o, true);
      }
    }
    return saved;
  }

  private async snapshotAll(): Promise<void> {
    await this.saveSnapshotsOf([...this.owned.values()]);
  }

  /**
   * Ordered shutdown: stop taking channels, close the open ticks (so accepted
   * intents reach their game), flush updates, snapshot and release every
   * channel, then stop the loops. Safe to call twice.
   */
  async drain(): Promise<void> {
    if (this.draining) return;
    this.draining = true;
    this.heartbeat();
    // Move every channel, open rounds included, to another shard (one request: the router moves them in batches);
    // what no shard can take is refunded below.
    await this.moveAllAway();
    // Refund every open round left through the ledger before the channels are released (the ledger drains after the shard).
    await Promise.all([...this.owned.values()].map((o) => o.rounds?.drain()));
    await this.tickSettled(); // a tick in flight would make this one a no-op
    await this.tick();
    for (const o of this.owned.values()) if (o.rt.dirty) this.sendUpdate(o);
    for (const ch of [...this.owned.keys()])
      await this.release(ch).catch((err: unknown) => this.deps.telemetry.logger.error({ err, channel: ch }, 'release failed'));
    await this.close();
  }

  /**
   * Asks the router to move every channel of this shard to other live shards (`drain`: it has this shard hand
   * them off in batches, then others acquire them). A router that speaks only v1 is asked channel by channel
   * (`move`). Never rejects: what did not move (no other shard, no answer) stays here and drain refunds its rounds.
   */
  private async moveAllAway(): Promise<void> {
    const { bus, subjects, config, telemetry } = this.deps;
    if (this.owned.size === 0) return;
    let r: { ok: boolean; moves?: Array<{ channel: string; moved: boolean; shard: string | null }>; code?: string; message?: string };
    try {
      // The router waits for this shard's handoffs and the new owners' acquires: batch requests with their own timeouts.
      const msg = await bus.request(subjects.routerCtl(), encodeJson({ v: CONTROL_VERSION, op: 'drain', shard: this.id }), {
        timeoutMs: 3 * config.router.batchTimeoutMs,
      });
      r = decodeJson(msg.data);
    } catch (err) {
      telemetry.logger.warn({ err, channels: this.owned.size }, 'drain: no answer from the router to move the channels');
      return;
    }
    if (!r.ok && r.code === 'CP_ERR_PROTO_INVALID') {
      await Promise.all([...this.owned.keys()].map((ch) => this.moveAway(ch)));
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
      this.forget(m.channel);
    }
    telemetry.logger.info({ moved, left: this.owned.size }, 'drain: channels moved');
  }

  /**
   * Asks a v1 router to move `channel` to another live shard (`move`). Never rejects.
   * @returns true when the channel moved
   */
  private async moveAway(channel: string): Promise<boolean> {
    const { bus, subjects, config, telemetry } = this.deps;
    try {
      const msg = await bus.request(subjects.routerCtl(), encodeJson({ op: 'move', channel, from: this.id }), {
        timeoutMs: 3 * config.bus.requestTimeoutMs,
      });
      const r = decodeJson<{ ok: boolean; move?: { moved: boolean; shard: string | null }; code?: string; message?: string }>(msg.data);
      if (r.ok && r.move?.moved) {
        this.forget(channel);
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
    if (this.closed) return;
    this.closed = true;
    for (const t of [this.tickTimer, this.snapshotTimer, this.heartbeatTimer]) if (t) clearInterval(t);
    this.ctlSub?.unsubscribe();
    this.assignmentsSub?.unsubscribe();
    this.creditSub?.unsubscribe();
    for (const o of [...this.owned.values()]) this.stopServing(o);
    for (const ch of [...this.moved.keys()]) this.forget(ch);
    this.due.clear();
    if (this.dueDrain) clearImmediate(this.dueDrain);
    this.dueDrain = null;
    this.updateBudget.close();
    this.tickBudget.close();
    await this.deps.bus.flush();
  }
}

function sameActions(a: readonly unknown[], b: readonly unknown[]): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

function toErrorReply(err: unknown): { ok: false; code: ErrorCode; message: string } {
  if (isCrowdplayError(err)) return { ok: false, code: err.code, message: err.message };
  return { ok: false, code: 'CP_ERR_INTERNAL', message: formatMessage('CP_ERR_INTERNAL', []) };
}
