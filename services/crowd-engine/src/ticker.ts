/**
 * A shard's tick: every TICK_MS each owned channel's open batch is closed at a fresh event id, external
 * games' batches are written to the event log and then published on `ch.C.game`, and built-in games and
 * rounds are stepped. SHARD_TURN_BUDGET_MS bounds how long a tick holds the event loop: it yields to I/O
 * after that much work.
 *
 * A tick visits only the channels in `ShardState.ticking`: a channel with nothing to close, set or watch rests
 * until an intent, a round change or its game wakes it. Thousands of channels with a few viewers each are idle
 * most ticks, and visiting each one every tick cost the shard CPU (cache misses, mostly) in proportion to the
 * channels it holds rather than to their traffic.
 */
import type { Batch } from '@crowdplay/protocol';
import { TurnBudget } from '@crowdplay/ratelimit';
import { ThrottledLog } from '@crowdplay/telemetry';
import type { Intake } from './intake.ts';
import type { Owned, ShardState } from './shard-state.ts';
import type { UpdatePublisher } from './updates.ts';

/** A tick's batches for external games, logged then published (publishBatches). */
export type Outbox = Array<{ o: Owned; ev: number; text: string }>;

/** Closes, logs and publishes the owned channels' batches, one tick at a time. */
export class Ticker {
  /** The tick in flight (closing, logging and publishing batches), if any. */
  private tickRun: Promise<void> | null = null;
  /** The time a tick may take per event-loop turn (SHARD_TURN_BUDGET_MS, on the shard's now()); apart from the updates' (see UpdatePublisher). */
  private readonly tickBudget: TurnBudget;
  /** Failures that repeat every tick while Postgres or the sequencer is down: a line per REFUSAL_LOG_INTERVAL_MS each. */
  private readonly failLog: ThrottledLog;

  constructor(
    private readonly s: ShardState,
    private readonly intake: Intake,
    private readonly updates: UpdatePublisher,
  ) {
    this.tickBudget = new TurnBudget(s.deps.config.engine.turnBudgetMs, () => s.now());
    this.failLog = new ThrottledLog(s.deps.telemetry.logger, s.deps.telemetry.refusals.intervalMs);
  }

  /** Closes every owned channel's batch. Ticks never overlap: a slow one skips the next (resolves at once). */
  tick(): Promise<void> {
    if (this.tickRun) return Promise.resolve();
    const run = this.runTick().finally(() => {
      if (this.tickRun === run) this.tickRun = null;
    });
    this.tickRun = run;
    return run;
  }

  /** Resolves once no tick is in flight (its batches are logged and published, or dropped). Never rejects. */
  async tickSettled(): Promise<void> {
    while (this.tickRun) await this.tickRun;
  }

  private async runTick(): Promise<void> {
    try {
      await this.visit(this.s.ticks + 1);
    } finally {
      this.s.ticks++;
    }
  }

  /** Tick `n`: closes, steps and publishes the channels in the tick set; those left with nothing to do rest. */
  private async visit(n: number): Promise<void> {
    const outbox: Outbox = [];
    let failed = 0;
    let firstErr: unknown;
    for (const o of [...this.s.ticking]) {
      if (this.tickBudget.spent()) {
        // Every chat rolling over at once makes this loop the longest task of the process: let I/O in.
        this.s.m.tickYields.add(1);
        await new Promise<void>((resolve) => setImmediate(resolve));
        this.tickBudget.spent(); // starts this turn's clock (its reset ran before this continuation: the first ask answers false)
      }
      if (this.s.owned.get(o.rt.id) !== o) {
        this.s.ticking.delete(o); // dropped meanwhile: not ticked
        continue;
      }
      if (o.moving) continue; // handOff closes its tick; a failed handoff serves it again
      try {
        if (o.game?.botIntents) {
          const now = this.s.now();
          let listed = 0;
          let dropped = 0;
          for (const b of o.game.botIntents()) {
            if (!o.rt.check(b).ok) continue;
            if (this.intake.accept(o, b.viewer, b.action, b.option, now)) listed++;
            else dropped++;
          }
          this.intake.countIntake(o, listed, dropped);
        }
        if (o.rounds) {
          const wait = this.tickRounds(o);
          if (wait) await wait;
        }
        if (o.game?.tick) {
          const state = o.game.tick(this.s.now());
          if (state) o.pendingState = state;
        }
        if (o.pendingState) {
          const state = o.pendingState;
          const ev = await this.s.eventIdFor(o);
          // A newer state was set meanwhile (a batch: deliverBatch clears pendingState; an absorb or a game
          // request: its id is above this one): this one is older, drop it.
          if (o.pendingState === state) {
            o.pendingState = undefined;
            if (ev > o.rt.ev) {
              o.rt.setGameState(state, ev, this.s.now());
              this.updates.scheduleUpdate(o);
            }
          }
        }
        const ev = o.rt.hasOpenIntents ? await this.s.eventIdFor(o) : 0;
        const pending = o.rt.pendingIntents;
        const now = this.s.now();
        this.s.syncTicks(o); // the ticks before this one that skipped it
        const batch = o.rt.closeTick(ev, now);
        o.tickedAt = n;
        this.s.pendingIntents -= pending;
        if (batch) {
          this.deliverBatch(o, batch, now, outbox);
          this.updates.scheduleUpdate(o);
        }
        if (rests(o)) this.s.ticking.delete(o);
      } catch (err) {
        // No event id (sequencer restarting): what the channel has not set yet stays pending (dirty rounds,
        // game state, open intents) for the next tick; the other channels' batches still go out.
        failed++;
        firstErr ??= err;
      }
    }
    if (failed > 0) this.failLog.error('tick', { err: firstErr, channels: failed }, 'tick failed for some channels; they retry next tick');
    try {
      await this.publishBatches(outbox);
    } catch (err) {
      // tickSettled() never rejects: release, handOff and drain await it.
      this.s.deps.telemetry.logger.error({ err }, 'tick failed publishing its batches');
    }
  }

  /**
   * Round deadlines and expiry, the built-in game's round commands, and the rounds shown to viewers.
   * @returns a promise only when it must wait (an event id for the rounds' update): awaiting a resolved one per
   *   channel would cost every visited channel a turn of the microtask queue
   */
  private tickRounds(o: Owned): Promise<void> | undefined {
    const rounds = o.rounds!;
    const now = this.s.now();
    rounds.tick(now);
    if (o.game?.rounds && !this.s.draining) {
      for (const cmd of o.game.rounds(now, rounds.views())) {
        const p =
          cmd.op === 'open'
            ? rounds.open(o.tenant, cmd.request)
            : cmd.op === 'settle'
              ? rounds.settle(o.tenant, cmd.round, cmd.outcome)
              : rounds.cancel(o.tenant, cmd.round);
        p.catch((err: unknown) => this.s.deps.telemetry.logger.warn({ err, channel: o.rt.id, cmd }, 'built-in game round command failed'));
      }
    }
    if (o.roundsDirty) return this.setRounds(o, rounds);
    return undefined;
  }

  /** The rounds' views at a fresh event id, for the next viewer update. */
  private async setRounds(o: Owned, rounds: NonNullable<Owned['rounds']>): Promise<void> {
    // Cleared only once the id is taken: without one (sequencer restarting) the next tick tries again.
    const ev = await this.s.eventIdFor(o);
    o.roundsDirty = false;
    o.rt.setRounds(rounds.views(), ev, this.s.now());
    this.updates.scheduleUpdate(o);
  }

  deliverBatch(o: Owned, batch: Batch, now: number, outbox: Outbox): void {
    this.s.m.batches.add(1);
    for (const a of Object.values(batch.actions)) for (const it of a.intents) this.s.m.batchLagMs.record(Math.max(0, now - it.at));
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
  async publishBatches(outbox: Outbox): Promise<void> {
    outbox = this.stillOwned(outbox);
    if (outbox.length === 0) return;
    const { store, bus, subjects, telemetry } = this.s.deps;
    let stale: Set<string>;
    try {
      stale = new Set(
        await store.events.append(
          outbox.map((b) => ({ channel: b.o.rt.id, eventId: b.ev, epoch: b.o.epoch, kind: 'batch', body: b.text })),
        ),
      );
    } catch (err) {
      // Postgres refused the statement as a whole: publish anyway with a floor per channel (a resume from before it resyncs).
      this.failLog.error('log', { err, channels: outbox.length }, 'event log write failed; publishing with a floor');
      await Promise.all(
        outbox.map(async (b) => {
          try {
            await store.events.raiseFloor(b.o.rt.id, b.ev);
            this.s.m.logWrites.add(1, { outcome: 'gap' });
          } catch {
            this.s.m.logWrites.add(1, { outcome: 'gap_unmarked' });
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
      this.s.m.logWrites.add(outbox.filter((b) => stale.has(b.o.rt.id)).length, { outcome: 'stale_epoch' });
      for (const o of dropped) {
        telemetry.logger.warn({ channel: o.rt.id, epoch: o.epoch }, 'event log refused: stale epoch, dropping channel');
        if (this.s.owned.get(o.rt.id) === o) this.s.stopServing(o, true);
      }
      outbox = outbox.filter((b) => !stale.has(b.o.rt.id));
    }
    const live = this.stillOwned(outbox);
    this.s.m.logWrites.add(live.length, { outcome: 'ok' });
    for (const b of live) bus.publish(subjects.channelGame(b.o.rt.id), Buffer.from(b.text));
  }

  /** The batches whose channel this shard still serves as the same Owned; the others are counted (outcome moved) and left out. */
  private stillOwned(outbox: Outbox): Outbox {
    const live = outbox.filter((b) => this.s.owned.get(b.o.rt.id) === b.o);
    if (live.length < outbox.length) this.s.m.logWrites.add(outbox.length - live.length, { outcome: 'moved' });
    return live;
  }

  /** Stops the tick's turn budget (`Shard.close`). */
  close(): void {
    this.tickBudget.close();
  }
}

/**
 * Whether a tick may skip the channel until something wakes it (`ShardState.wake`): no open intent, no state or
 * rounds waiting for an event id, no round to lock, expire or pay, and no built-in game that ticks, plays bots or
 * runs rounds.
 */
export function rests(o: Owned): boolean {
  const g = o.game;
  return (
    !o.rt.hasOpenIntents &&
    o.pendingState === undefined &&
    !o.roundsDirty &&
    !(o.rounds?.needsTick ?? false) &&
    (g === undefined || (g.tick === undefined && g.botIntents === undefined && g.rounds === undefined))
  );
}
