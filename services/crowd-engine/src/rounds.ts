/**
 * A channel's rounds inside its shard: pool (parimutuel) and market (LMSR)
 * rounds, their stakes and trades, written through to the durable ledger.
 * `ChannelRounds` is the façade the shard calls; it composes the parts:
 *
 * - round-state.ts: the pure state machine (states, deadline, checks);
 * - round-view.ts: rounds as `RoundView`s;
 * - round-context.ts: the state and dependencies the parts share;
 * - round-ledger.ts: the transfers (escrow, payouts, refunds) and their ids;
 * - round-lifecycle.ts: open, lock, settle, cancel, expiry and drain;
 * - round-intake.ts: stakes, trades, joins and paid actions;
 * - round-handoff.ts, round-recovery.ts: moving a channel, acquiring it.
 *
 * ## Life of a round (docs/architecture.md "Rounds")
 *
 * open (row inserted, market subsidy committed) → locked (at the deadline by
 * this shard's clock: no stake or trade is accepted from then on; once none
 * is in flight the final book is written to the round's row) → settled
 * (winner written to the row first, then payouts) or cancelled (everyone's
 * net refunded from the ledger's own transfers) → paid (every payout or
 * refund committed). A round still locked ROUND_UNSETTLED_MAX_MS after its
 * deadline is cancelled.
 */
import type { BusIntent, BusTrade, RoundView } from '@crowdplay/protocol';
import type { RoundRow } from '@crowdplay/store';
import { RoundsContext, type ChannelRoundsDeps } from './round-context.ts';
import { handOffRounds, writeBookTo, type HandoffWrite } from './round-handoff.ts';
import { RoundIntake } from './round-intake.ts';
import { RoundLedger } from './round-ledger.ts';
import { RoundLifecycle } from './round-lifecycle.ts';
import { RoundRecovery, recoveredNone, type CommittedTransfers } from './round-recovery.ts';
import type { OpenRoundRequest } from './round-state.ts';
import { roundViews } from './round-view.ts';

/** The parts a channel's rounds run on, built together. */
interface Parts {
  s: RoundsContext;
  life: RoundLifecycle;
  intake: RoundIntake;
  recovery: RoundRecovery;
}

/**
 * One channel's rounds. See the module comment. The parts are built on first use (a round opened or recovered,
 * a stake, a join, a handoff, a drain): a bulk acquire starts thousands of channels, most with no round, and
 * each would otherwise carry them (about 2 KB) from the start.
 */
export class ChannelRounds {
  private parts: Parts | null = null;
  private grant = 0;
  private closed = false;

  constructor(private readonly d: ChannelRoundsDeps) {}

  private get p(): Parts {
    if (this.parts) return this.parts;
    const s = new RoundsContext(this.d);
    s.closed = this.closed;
    const ledger = new RoundLedger(s);
    const life = new RoundLifecycle(s, ledger);
    const intake = new RoundIntake(s, ledger);
    intake.welcomeGrant = this.grant;
    this.parts = { s, life, intake, recovery: new RoundRecovery(s, life) };
    return this.parts;
  }

  /** Points granted once per viewer on join (the game's declare.welcomeGrant). */
  get welcomeGrant(): number {
    return this.parts ? this.parts.intake.welcomeGrant : this.grant;
  }

  set welcomeGrant(points: number) {
    if (this.parts) this.parts.intake.welcomeGrant = points;
    else this.grant = points;
  }

  /** Views of the open and locked rounds, then the newest finished ones (ROUND_RECENT_SHOWN). */
  views(): RoundView[] {
    return this.parts ? roundViews(this.parts.s.rounds.values(), this.d.config.rounds.recentShown) : [];
  }

  /** Rounds not settled or cancelled. */
  get unfinished(): number {
    return this.parts?.s.unfinished ?? 0;
  }

  /** Whether `tick` has work: a round not yet final, or final with its payments still to retry. */
  get needsTick(): boolean {
    return this.parts?.s.needsTick ?? false;
  }

  /**
   * Opens a round: inserts its row, funds a market's subsidy ceil(b·ln n)
   * from the tenant's treasury, then takes stakes or trades until
   * now + durationMs.
   * @throws CrowdplayError CP_ERR_AUTH_FORBIDDEN_CHANNEL (another tenant),
   *   CP_ERR_ROUND_EXISTS, CP_ERR_ROUND_TOO_MANY (ROUND_MAX_OPEN),
   *   CP_ERR_ROUND_INVALID (duration or liquidity out of range),
   *   CP_ERR_CHANNEL_UNAVAILABLE (draining), ledger and store errors
   */
  open(tenant: string, req: OpenRoundRequest): Promise<RoundView> {
    return this.p.life.open(tenant, req);
  }

  /**
   * Locks the round (if open), waits for its in-flight stakes and trades,
   * records the winner, then pays. Idempotent: settling again with the same
   * outcome returns the round; another outcome is refused.
   * @throws CrowdplayError CP_ERR_AUTH_FORBIDDEN_CHANNEL, CP_ERR_ROUND_UNKNOWN,
   *   CP_ERR_ROUND_UNKNOWN_OUTCOME, CP_ERR_ROUND_ALREADY_FINAL
   */
  settle(tenant: string, roundId: string, outcome: string): Promise<RoundView> {
    return this.p.life.settle(tenant, roundId, outcome);
  }

  /**
   * Cancels the round and refunds every viewer's net exactly (from the
   * ledger's transfers). Idempotent.
   * @throws CrowdplayError CP_ERR_AUTH_FORBIDDEN_CHANNEL, CP_ERR_ROUND_UNKNOWN,
   *   CP_ERR_ROUND_ALREADY_FINAL (settled)
   */
  cancel(tenant: string, roundId: string): Promise<RoundView> {
    return this.p.life.cancel(tenant, roundId);
  }

  /**
   * Takes one stake or trade: queued behind the viewer's previous one in the
   * same round, then executed; its ack is sent to `gw` after the commit (or
   * the refusal). Never rejects.
   */
  take(gw: string, it: BusIntent & { trade: BusTrade }): void {
    this.p.intake.take(gw, it);
  }

  /**
   * Answers viewers that joined: pays the welcome grant once per (channel,
   * viewer) when the game declared one, and sends each its balance. Never rejects.
   */
  join(gw: string, joins: Array<{ conn: number; viewer: string }>): Promise<void> {
    return this.p.intake.join(gw, joins);
  }

  /**
   * Charges a paid action (ActionSpec.cost, points): wallet → house, kind
   * `action`, acked after the commit.
   * @throws CrowdplayError CP_ERR_INTENT_INSUFFICIENT_FUNDS, ledger errors
   */
  chargeAction(viewer: string, cost: number, idempotencyKey: string): Promise<void> {
    return this.p.intake.chargeAction(viewer, cost, idempotencyKey);
  }

  /** Locks rounds past their deadline and cancels locked ones past ROUND_UNSETTLED_MAX_MS. Call every tick. */
  tick(now: number): void {
    this.parts?.life.tick(now);
  }

  /**
   * Restores the channel's unfinished rounds after an acquire (round-recovery.ts)
   * and finishes what a crash interrupted. Resolves when the rounds that must
   * be paid or refunded are.
   * @param preloaded the channel's unfinished rounds, read by a bulk acquire (else read here)
   * @param committed the committed transfers of its handed-off open rounds by round uid, read by a bulk acquire
   *   (else each is read when it resumes)
   */
  recover(preloaded?: readonly RoundRow[], committed?: CommittedTransfers): Promise<void> {
    // Nothing to recover and no parts yet: what recover does with an empty list, without building them.
    if (!this.parts && preloaded?.length === 0) {
      recoveredNone(this.d);
      return Promise.resolve();
    }
    return this.p.recovery.recover(preloaded, committed);
  }

  /** Resolves once the refunds and payouts that {@link recover} started have finished (tests, drain). Never rejects. */
  recovered(): Promise<void> {
    return this.parts ? this.parts.recovery.recovered() : Promise.resolve();
  }

  /**
   * Handoff before the channel moves to another shard: new stakes, trades
   * and opens are refused with CP_ERR_CHANNEL_UNAVAILABLE (retryable; trades
   * queued behind a viewer's in-flight one too), the opens and trades in
   * flight finish (commit or are refused by the ledger), then each open
   * round's live book (a pool's stakes in order with their ids, a market's
   * trades) is written to its row at the channel's epoch; the row stays
   * `open` and the next owner resumes it (recover). Locked rounds finish
   * their step in progress first; settled and cancelled ones' payouts are not
   * waited for (the next owner pays what the row says is unpaid).
   * @param write writes one round's book at the epoch (a bulk handoff coalesces them into one statement,
   *   {@link HandoffWrite}); resolves false when the row was not written (stale or no longer open).
   *   Default: one UPDATE per round (a row no longer open is skipped).
   * @returns the number of open rounds handed off
   * @throws the store's error (CP_ERR_CHANNEL_STALE_EPOCH: the channel moved
   *   already); the caller may call {@link resumeServing} and go on
   */
  handoff(write: HandoffWrite = writeBookTo(this.d.store)): Promise<number> {
    const p = this.p;
    return handOffRounds(p.s, p.life.openJobs, write);
  }

  /** After a failed handoff: takes stakes, trades and opens again (the channel stays here). */
  resumeServing(): void {
    if (this.parts) this.parts.s.moving = false;
  }

  /**
   * Drain: refuses new stakes and trades, cancels and refunds every open or
   * locked round, and waits for every payout or refund in progress.
   */
  drain(): Promise<void> {
    return this.p.life.drain();
  }

  /** Stops taking anything; in-flight work finishes on its own (its retries stop). */
  close(): void {
    this.closed = true;
    if (this.parts) this.parts.s.closed = true;
  }
}
