/**
 * A shard's viewer updates: a changed channel's update goes out on `ch.C.out` at most every
 * CHANNEL_UPDATE_MS, and updates that fall due together past SHARD_TURN_BUDGET_MS of an event-loop
 * turn go out in the next turns.
 */
import { TurnBudget } from '@crowdplay/ratelimit';
import type { Owned, ShardState } from './shard-state.ts';

/** Publishes the owned channels' viewer updates on change, paced per channel and per event-loop turn. */
export class UpdatePublisher {
  private dueDrain: NodeJS.Immediate | null = null;
  /**
   * The event-loop time updates may take per turn, and the time a tick may (SHARD_TURN_BUDGET_MS each, on
   * the shard's now()). Separate: a drain of deferred updates runs before a yielded tick's next turn, and one
   * budget spent by the drain would leave the tick one channel a turn while updates wait (a rollover).
   */
  private readonly updateBudget: TurnBudget;

  constructor(private readonly s: ShardState) {
    this.updateBudget = new TurnBudget(s.deps.config.engine.turnBudgetMs, () => s.now());
  }

  /** Sends the channel's update now if the per-channel interval allows, else once it does (both through {@link UpdatePublisher.updateDue}). */
  scheduleUpdate(o: Owned): void {
    // Not for a channel dropped while its change awaited an event id: the next owner's ids are above it.
    if (!o.rt.dirty || o.updateTimer || this.s.due.has(o) || this.s.owned.get(o.rt.id) !== o) return;
    const wait = o.lastUpdateMs + this.s.deps.config.engine.updateIntervalMs - this.s.now();
    if (wait <= 0) this.updateDue(o);
    else {
      o.updateTimer = setTimeout(() => {
        o.updateTimer = null;
        if (this.s.owned.get(o.rt.id) === o) this.updateDue(o);
      }, wait);
    }
  }

  /**
   * A channel's update is due: published now while this event-loop turn has
   * spent less than SHARD_TURN_BUDGET_MS (ms, the shard's now()) since its
   * first update, else queued behind the updates already deferred and
   * published in a later turn (setImmediate, so the I/O polled in between,
   * acks among it, is not held up). Channels whose timers fall due together
   * (every chat's puzzle rolls over at once) thus cost the loop at most the
   * budget per turn instead of one pass over all of them.
   */
  private updateDue(o: Owned): void {
    if (this.s.due.size > 0 || this.updateBudget.spent()) {
      if (!this.s.due.has(o)) {
        this.s.due.add(o);
        this.s.m.updatesDeferred.add(1);
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
      for (const o of this.s.due) {
        if (this.s.closed || this.updateBudget.spent()) break;
        this.s.due.delete(o);
        if (this.s.owned.get(o.rt.id) !== o) continue;
        try {
          this.sendUpdate(o);
        } catch (err) {
          // One update that cannot be published (the bus refused it) must not stop the others.
          this.s.deps.telemetry.logger.error({ err, channel: o.rt.id }, 'viewer update not published');
        }
        await Promise.resolve();
      }
    } finally {
      this.dueDrain = this.s.due.size > 0 && !this.s.closed ? setImmediate(() => void this.drainDue()) : null;
    }
  }

  sendUpdate(o: Owned): void {
    this.s.due.delete(o);
    if (!o.rt.dirty) return;
    const text = o.rt.takeUpdate();
    const bytes = Buffer.from(text);
    o.lastUpdateMs = this.s.now();
    this.s.m.updates.add(1);
    this.s.m.updateBytes.record(bytes.length);
    this.s.deps.bus.publish(this.s.deps.subjects.channelOut(o.rt.id), bytes);
  }

  /** Stops the deferred updates (`Shard.close`): the due ones are dropped. */
  close(): void {
    this.s.due.clear();
    if (this.dueDrain) clearImmediate(this.dueDrain);
    this.dueDrain = null;
    this.updateBudget.close();
  }
}
