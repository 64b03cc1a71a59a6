/**
 * A shard's ownership of channels: taking them at an epoch (acquire), giving them up (release) or
 * handing them to another shard for a move (handoff, then forget), and their durable snapshots.
 */
import { encodeJson, type BusMessage } from '@crowdplay/bus';
import {
  CONTROL_BATCH_MAX,
  CONTROL_VERSION,
  isCrowdplayError,
  type AssignmentChange,
  type ErrorCode,
  type RoundFrame,
  type WalletBatch,
} from '@crowdplay/protocol';
import { TransferKinds } from '@crowdplay/ledger';
import type { RoundRow, Snapshot, Store } from '@crowdplay/store';
import { ChannelRuntime, type ChannelSnapshotState } from './channel.ts';
import type { Intake } from './intake.ts';
import type { HandoffWrite } from './round-handoff.ts';
import { ChannelRounds } from './rounds.ts';
import type { AcquireResult, Owned, ShardState } from './shard-state.ts';
import type { Outbox, Ticker } from './ticker.ts';
import type { UpdatePublisher } from './updates.ts';

/**
 * Bus header on a batch a new owner publishes again (the previous owner's last logged one, see `acquire`): the same
 * bytes as when it was first logged; gateways need no header (they skip batches a game socket has by `ev`), tests and
 * tools that check ids on the bus tell repeats from new batches by it.
 */
export const REPEAT_HEADER = 'crowdplay-repeat';

/** Takes, releases and hands off the shard's channels, and snapshots them. */
export class Ownership {
  /** @param onChannelCtl answers a channel's game requests on `ch.<C>.ctl` (the shard's game control) */
  constructor(
    private readonly s: ShardState,
    private readonly intake: Intake,
    private readonly ticker: Ticker,
    private readonly updates: UpdatePublisher,
    private readonly onChannelCtl: (o: Owned, msg: BusMessage) => Promise<void>,
  ) {}

  /**
   * Takes ownership of a batch of channels, each at the epoch the router
   * wrote for this shard in Postgres, in one go: the rows, the snapshots, the
   * previous owners' last logged batches and the unfinished rounds are read
   * in one query each while one block of event ids is leased (the router
   * bumped the epochs before it asked, so every id this shard uses for them
   * from then on is above any id a previous owner used). Channels at epoch 1
   * never had an owner: they are read for their rows alone, and a batch of
   * only those leases no block while the shard has ids left. Then every channel
   * is started (rounds recovered,
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
    const { config, store, bus, telemetry } = this.s.deps;
    const results = new Map<number, AcquireResult>();
    const refuse = (i: number, code: ErrorCode, message: string): void => {
      results.set(i, { channel: items[i]!.channel, ok: false, code, message });
      telemetry.refusals.refuse('engine', code, { channel: items[i]!.channel, op: 'acquire', reason: message });
    };
    const seen = new Set<string>();
    const todo: number[] = [];
    let room = config.engine.maxChannels - this.s.owned.size;
    for (let i = 0; i < items.length; i++) {
      const { channel, epoch } = items[i]!;
      if (seen.has(channel)) {
        refuse(i, 'CP_ERR_PROTO_INVALID', 'duplicate channel in an acquire batch');
        continue;
      }
      seen.add(channel);
      if (this.s.draining || this.s.closed) {
        refuse(i, 'CP_ERR_CHANNEL_UNAVAILABLE', 'draining');
        continue;
      }
      this.forget(channel); // handed off from here before: it comes back from its durable state
      const existing = this.s.owned.get(channel);
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
      // A channel at epoch 1 never had an owner, and a snapshot, a logged batch or a round is only ever written by an
      // owner at its epoch: only channels that had one are read for them (a cold start's first joins read the rows alone).
      const hadOwner = todo.filter((i) => items[i]!.epoch > 1).map((i) => items[i]!.channel);
      // Ids used from now on must exceed every id the previous owners used. The router fenced them (epoch bump) before
      // it sent this acquire, so a block leased from here on lies above every id they logged: one lease, alongside the
      // reads, covers the batch. A batch of first owners only has no such ids to rise above: the current block serves
      // (a shard that has none yet leases one here all the same, so a built-in game's first ids do not wait for it).
      let tLease = t0;
      const leased =
        hadOwner.length === 0 && this.s.ids.remaining > 0
          ? Promise.resolve()
          : this.s.ids.renew().then(() => {
              tLease = performance.now();
            });
      // Settled even when a read fails first (the read's error is thrown; a lease error with it would go unhandled).
      leased.catch(() => undefined);
      const [rows, snaps, lastBatches, rounds] = await Promise.all([
        store.channels.getMany(ids),
        store.channels.loadSnapshots(hadOwner),
        store.events.latestMany(hadOwner, 'batch'),
        this.s.deps.ledger ? store.rounds.listUnfinishedMany(hadOwner) : Promise.resolve(new Map<string, RoundRow[]>()),
      ]);
      const ready: number[] = [];
      for (const i of todo) {
        const { channel, epoch } = items[i]!;
        const row = rows.get(channel);
        if (!row) refuse(i, 'CP_ERR_CHANNEL_UNKNOWN', 'no such channel');
        // A channel whose chat became another one never runs again (its state moved; see the router's migrate).
        else if (row.migratedTo !== null) refuse(i, 'CP_ERR_CHANNEL_MIGRATED', `moved to ${row.migratedTo}`);
        else if (row.epoch !== epoch || row.owner !== this.s.id)
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
        const ledger = this.s.deps.ledger;
        const committed =
          ledger && handedOff.length > 0
            ? await ledger.roundTransferIdsMany(handedOff, [TransferKinds.stake, TransferKinds.buy, TransferKinds.sell])
            : undefined;
        const tRead = performance.now();
        await leased;
        const tReady = performance.now();
        const started = await Promise.all(
          ready.map(async (i) => {
            const { channel, epoch } = items[i]!;
            try {
              const o = await this.start1(
                channel,
                epoch,
                rows.get(channel)!.tenantId,
                snaps.get(channel),
                rounds.get(channel) ?? [],
                committed,
              );
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
          if (this.s.owned.has(channel) || this.s.draining || this.s.closed) {
            // A concurrent acquire won, or a drain began meanwhile.
            o.rounds?.close();
            if (this.s.owned.has(channel)) results.set(i, { channel, ok: true });
            else refuse(i, 'CP_ERR_CHANNEL_UNAVAILABLE', 'draining');
            continue;
          }
          // A shard logs a batch before it publishes it: one that died in between left a batch in the log that no game
          // got live. The previous owner's last logged batch goes out again before this owner's first (gateways never
          // send a game socket a batch at or below one it was sent, so a game that has it does not get it twice).
          if (last && last.epoch < o.epoch) {
            bus.publish(this.s.deps.subjects.channelGame(channel), Buffer.from(last.body, 'utf8'), { headers: { [REPEAT_HEADER]: '1' } });
            this.s.m.lastBatchRepeats.add(1);
          }
          this.serve(o);
          live.push(o);
          results.set(i, { channel, ok: true });
        }
        await bus.flush();
        for (const o of live) this.updates.scheduleUpdate(o);
        if (live.length > 0) {
          let unfinishedRounds = 0;
          for (const o of live) unfinishedRounds += rounds.get(o.rt.id)?.length ?? 0;
          const ms = {
            unfinishedRounds,
            readMs: Math.round(tRead - t0),
            leaseMs: Math.round(tLease - t0),
            startMs: Math.round(tStart - tReady),
            subscribeMs: Math.round(performance.now() - tStart),
          };
          telemetry.logger.info(
            live.length === 1
              ? { channel: live[0]!.rt.id, epoch: live[0]!.epoch, shard: this.s.id, game: live[0]!.game?.name, ...ms }
              : { channels: live.length, shard: this.s.id, ...ms },
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
    const { config, store, bus, subjects, telemetry } = this.s.deps;
    const rt = new ChannelRuntime(channel);
    if (snap) rt.restore(snap.state as ChannelSnapshotState, snap.eventId);
    const builtin = this.s.deps.gameFor?.(channel);
    // An external game took the channel over before the move (its snapshot says so): the built-in game stays off.
    if (rt.external && !builtin?.yieldsToGame) rt.external = false;
    const game = rt.external ? undefined : builtin;
    const o: Owned = {
      rt,
      epoch,
      game,
      builtin,
      subs: [],
      updateTimer: null,
      lastUpdateMs: 0,
      tenant,
      rounds: null,
      roundsDirty: false,
      pendingState: undefined,
      moving: false,
      tickedAt: 0,
    };
    if (this.s.deps.ledger && this.s.wallets && this.s.rm) {
      o.rounds = new ChannelRounds({
        config,
        ledger: this.s.deps.ledger,
        store,
        telemetry,
        wallets: this.s.wallets,
        metrics: this.s.rm,
        channel,
        tenant,
        epoch: () => o.epoch,
        now: this.s.now,
        sendAcks: (gw, acks, balances) => this.intake.sendAcks(gw, acks, balances),
        sendWallet: (entries) => bus.publish(subjects.channelWallet(channel), encodeJson({ entries } satisfies WalletBatch)),
        sendRound: (round) => bus.publish(subjects.channelGame(channel), encodeJson({ t: 'round', channel, round } satisfies RoundFrame)),
        changed: () => {
          o.roundsDirty = true;
          this.s.wake(o);
        },
      });
      // A built-in game's grant, else the one the game declared to a previous owner (the snapshot carries it across moves).
      o.rounds.welcomeGrant = game?.welcomeGrant ?? rt.welcomeGrant;
      await o.rounds.recover(rounds, committed);
    }
    if (game) {
      const now = this.s.now();
      const restoredGame = snap ? (snap.state as ChannelSnapshotState).game : null;
      if (!rt.declared || !sameActions(rt.snapshot().actions, game.actions())) rt.declare(game.actions(), await this.s.nextEventId(), now);
      rt.setGameState(game.init(restoredGame), await this.s.nextEventId(), now);
    }
    return o;
  }

  /** Starts serving an acquired channel: owned, and its intake and control subjects subscribed (live after a bus flush). */
  private serve(o: Owned): void {
    const { bus, subjects } = this.s.deps;
    const channel = o.rt.id;
    this.s.owned.set(channel, o);
    // Its tick count goes on from the snapshot's; the next tick looks at it once (rounds recovered, a game to tick).
    o.tickedAt = this.s.ticks;
    this.s.wake(o);
    // One queue group: while a move hands the channel over, each message reaches either the old owner (which refuses it,
    // retryable) or the new one, never both.
    o.subs.push(bus.subscribe(subjects.channelIn(channel), (msg) => this.intake.onIntents(o, msg), { queue: 'owner' }));
    o.subs.push(bus.subscribe(subjects.channelCtl(channel), (msg) => void this.onChannelCtl(o, msg), { queue: 'owner' }));
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
    await this.ticker.tickSettled();
    const results: AcquireResult[] = [];
    const leaving: Owned[] = [];
    const seen = new Set<Owned>();
    for (const channel of channels) {
      const o = this.s.owned.get(channel);
      if (o && ifIdle && (o.rounds?.unfinished ?? 0) > 0) {
        results.push({ channel, ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'unfinished rounds' });
        continue;
      }
      results.push({ channel, ok: true });
      if (!o || seen.has(o)) continue;
      this.s.stopServing(o);
      seen.add(o);
      leaving.push(o);
    }
    if (leaving.length === 0) return results;
    await Promise.all(leaving.map((o) => this.settleGameState(o).catch(() => undefined)));
    await this.saveSnapshotsOf(leaving);
    await this.s.deps.store.channels.releaseMany(leaving.map((o) => ({ channel: o.rt.id, shard: this.s.id, epoch: o.epoch })));
    // Caches (the router's, gateways') drop the assignments: the next use assigns the channels again.
    this.announce(leaving.map((o) => ({ channel: o.rt.id, shard: null, epoch: o.epoch })));
    this.s.deps.telemetry.logger.info(
      leaving.length === 1 ? { channel: leaving[0]!.rt.id, epoch: leaving[0]!.epoch } : { channels: leaving.length },
      leaving.length === 1 ? 'channel released' : 'channels released',
    );
    return results;
  }

  /** Publishes assignment changes on `router.assignments`, in v2 batches of at most CONTROL_BATCH_MAX. */
  private announce(changes: AssignmentChange[]): void {
    for (let i = 0; i < changes.length; i += CONTROL_BATCH_MAX)
      this.s.deps.bus.publish(
        this.s.deps.subjects.routerAssignments(),
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
    const state = o.game?.tick?.(this.s.now()) ?? o.pendingState;
    if (state) o.rt.setGameState(state, await this.s.eventIdFor(o), this.s.now());
    o.pendingState = undefined;
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
    const mine = new Set<Owned>();
    for (const ch of channels) {
      const o = this.s.owned.get(ch);
      if (o) {
        o.moving = true;
        mine.add(o);
      }
    }
    // The next tick skips them; one in flight publishes its batches before the handoff closes the open ticks (below).
    // The rounds' handoff does not depend on it: it runs meanwhile.
    const t0 = performance.now();
    let tSettled = t0;
    const settled = this.ticker.tickSettled().then(() => {
      tSettled = performance.now();
    });
    const failed = new Map<string, AcquireResult>();
    const going: Owned[] = [];
    const books = new BookWriter(this.s.deps.store);
    await Promise.all(
      [...mine].map(async (o) => {
        if (this.s.owned.get(o.rt.id) !== o) return; // dropped meanwhile (moved away at a newer epoch): nothing left to hand off
        try {
          await o.rounds?.handoff(books.write);
          going.push(o);
        } catch (err) {
          o.moving = false;
          o.rounds?.resumeServing();
          this.s.wake(o);
          failed.set(o.rt.id, {
            channel: o.rt.id,
            ok: false,
            code: isCrowdplayError(err) ? err.code : 'CP_ERR_CHANNEL_UNAVAILABLE',
            message: String(err),
          });
        }
      }),
    );
    const tRounds = performance.now();
    await settled;
    // The open ticks' intents reach their games before the channels leave: logged (at their epochs, before the release) and
    // published like any tick's batches. A channel the tick in flight dropped (moved away at a newer epoch) has nothing to close.
    const outbox: Outbox = [];
    const tClose = performance.now();
    const here = going.filter((o) => this.s.owned.get(o.rt.id) === o);
    for (const [o, err] of await this.closeTicksOf(here, outbox)) {
      // No event id (sequencer unreachable): the channel stays here, serving.
      o.moving = false;
      o.rounds?.resumeServing();
      this.s.wake(o);
      failed.set(o.rt.id, { channel: o.rt.id, ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: String(err) });
    }
    const leaving = here.filter((o) => !failed.has(o.rt.id));
    await this.ticker.publishBatches(outbox);
    await Promise.all(leaving.map((o) => this.settleGameState(o).catch(() => undefined)));
    for (const o of leaving) {
      if (this.s.owned.get(o.rt.id) !== o) continue;
      if (o.rt.dirty) this.updates.sendUpdate(o);
      const subs = o.subs;
      o.subs = [];
      this.s.stopServing(o);
      o.subs = subs;
      this.s.moved.set(o.rt.id, o);
    }
    if (leaving.length > 0) {
      const tTicks = performance.now();
      await this.saveSnapshotsOf(leaving);
      await this.s.deps.store.channels.releaseMany(leaving.map((o) => ({ channel: o.rt.id, shard: this.s.id, epoch: o.epoch })));
      const ms = {
        tickWaitMs: Math.round(tSettled - t0),
        roundsMs: Math.round(tRounds - t0),
        ticksMs: Math.round(tTicks - tClose),
        releaseMs: Math.round(performance.now() - tTicks),
      };
      this.s.deps.telemetry.logger.info(
        leaving.length === 1 ? { channel: leaving[0]!.rt.id, epoch: leaving[0]!.epoch, ...ms } : { channels: leaving.length, ...ms },
        leaving.length === 1 ? 'channel handed off' : 'channels handed off',
      );
    }
    return channels.map((channel) => failed.get(channel) ?? { channel, ok: true });
  }

  /**
   * Closes the open ticks of channels that take nothing new any more (`moving`) at fresh event ids; their batches
   * go to `outbox` for the caller to log and publish (Ticker.publishBatches).
   * @returns the channels whose tick stays open for want of an event id (sequencer unreachable), with the error
   */
  private async closeTicksOf(os: readonly Owned[], outbox: Outbox): Promise<Map<Owned, unknown>> {
    const failed = new Map<Owned, unknown>();
    const now = this.s.now();
    for (const o of os) {
      try {
        const ev = o.rt.hasOpenIntents ? await this.s.eventIdFor(o) : 0;
        const pending = o.rt.pendingIntents;
        this.s.syncTicks(o);
        const batch = o.rt.closeTick(ev, now);
        this.s.pendingIntents -= pending;
        if (batch) this.ticker.deliverBatch(o, batch, now, outbox);
      } catch (err) {
        failed.set(o, err);
      }
    }
    return failed;
  }

  /**
   * The last step of a drain that ran out of time (SHUTDOWN_DEADLINE_MS − SHARD_DRAIN_FINAL_MS): every channel
   * still served here, those a handoff is moving included, stops taking intents and game requests (refused
   * CP_ERR_CHANNEL_UNAVAILABLE, retryable: gateways send them again), its open tick is closed and the batch
   * logged and published, so every intent acked here reaches its game, and its final snapshot is written. The
   * owners stay recorded: once this process is gone the router declares the shard dead and places the channels
   * as after a crash (the next owner cancels and refunds open rounds not handed off, round-recovery.ts). Clearing
   * them here would leave channels that nothing places until someone uses them, their locked rounds unpaid.
   * @returns the channels closed
   * @throws nothing: a snapshot that fails is logged (the next owner starts from the previous one and the log)
   */
  async closeUnmoved(): Promise<number> {
    const all = [...this.s.owned.values()];
    for (const o of all) o.moving = true;
    const t0 = performance.now();
    await this.ticker.tickSettled();
    const outbox: Outbox = [];
    const failed = await this.closeTicksOf(all, outbox);
    if (failed.size > 0)
      this.s.deps.telemetry.logger.error(
        { channels: failed.size, err: failed.values().next().value },
        'drain: open ticks not closed (no event id); their intents are lost with this process',
      );
    await this.ticker.publishBatches(outbox);
    const here = all.filter((o) => this.s.owned.get(o.rt.id) === o);
    for (const o of here) if (o.rt.dirty) this.updates.sendUpdate(o);
    const tTicks = performance.now();
    await Promise.all(here.map((o) => this.settleGameState(o).catch(() => undefined)));
    await this.saveSnapshotsOf(here).catch((err: unknown) =>
      this.s.deps.telemetry.logger.error({ err, channels: here.length }, 'drain: final snapshots not written'),
    );
    this.s.deps.telemetry.logger.info(
      { channels: all.length, ticksMs: Math.round(tTicks - t0), snapshotsMs: Math.round(performance.now() - tTicks) },
      'drain: unmoved channels closed',
    );
    return all.length;
  }

  /** Drops the subscriptions of a channel handed off from here (its move finished). No-op otherwise. */
  forget(channel: string): void {
    const o = this.s.moved.get(channel);
    if (!o) return;
    this.s.moved.delete(channel);
    for (const s of o.subs) s.unsubscribe();
    o.subs = [];
  }

  // ------------------------------------------------------------------ durability

  async saveSnapshot(o: Owned): Promise<boolean> {
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
      for (const o of chunk) {
        this.s.syncTicks(o);
        o.rt.unsaved = false;
      }
      let stale: string[];
      try {
        stale = await this.s.deps.store.channels.saveSnapshots(
          chunk.map((o) => ({ channel: o.rt.id, epoch: o.epoch, eventId: o.rt.ev, state: o.rt.snapshot() })),
        );
      } catch (err) {
        for (const o of chunk) o.rt.unsaved = true;
        this.s.m.snapshotErrors.add(chunk.length, { reason: 'error' });
        this.s.deps.telemetry.logger.error({ err, channels: chunk.length }, 'snapshot failed');
        continue;
      }
      const refused = new Set(stale);
      for (const o of chunk) {
        if (!refused.has(o.rt.id)) {
          saved.add(o);
          continue;
        }
        // The channel moved: the new owner is authoritative; stop acting for it.
        this.s.m.snapshotErrors.add(1, { reason: 'stale_epoch' });
        this.s.deps.telemetry.logger.warn({ channel: o.rt.id, epoch: o.epoch }, 'snapshot refused: stale epoch, dropping channel');
        if (this.s.owned.get(o.rt.id) === o) this.s.stopServing(o, true);
      }
    }
    return saved;
  }

  async snapshotAll(): Promise<void> {
    await this.saveSnapshotsOf([...this.s.owned.values()]);
  }
}

/**
 * The open rounds' books of one bulk handoff, coalesced: the writes queued in one event-loop turn go out as
 * statements of at most CONTROL_BATCH_MAX rows (rounds that become idle later go in a later statement).
 */
class BookWriter {
  private queue: Array<{ row: Parameters<HandoffWrite>[0]; done: (written: boolean) => void; fail: (err: unknown) => void }> = [];
  private scheduled = false;

  constructor(private readonly store: Store) {}

  /** Queues one round's book. @returns whether its row was written (false: stale or not open) @throws the store's error */
  readonly write: HandoffWrite = (row) =>
    new Promise<boolean>((done, fail) => {
      this.queue.push({ row, done, fail });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => void this.flush());
      }
    });

  private async flush(): Promise<void> {
    this.scheduled = false;
    const queue = this.queue;
    this.queue = [];
    const chunks: Array<typeof queue> = [];
    for (let i = 0; i < queue.length; i += CONTROL_BATCH_MAX) chunks.push(queue.slice(i, i + CONTROL_BATCH_MAX));
    await Promise.all(
      chunks.map(async (chunk) => {
        try {
          const written = await this.store.rounds.handOffMany(chunk.map((x) => x.row));
          for (const x of chunk) x.done(written.has(`${x.row.channelId}/${x.row.id}`));
        } catch (err) {
          for (const x of chunk) x.fail(err);
        }
      }),
    );
  }
}

function sameActions(a: readonly unknown[], b: readonly unknown[]): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
