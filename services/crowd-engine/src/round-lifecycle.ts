/**
 * Runs the round state machine (round-state.ts) against the store and the
 * ledger: game requests (open, settle, cancel), the lock at the deadline and
 * the expiry cancel (`tick`), payouts and refunds through the ledger writer
 * (round-ledger.ts), and the drain. Each transition is written to the
 * round's row first, then applied in memory; a round's steps run one after
 * another (`RoundsContext.serial`).
 */
import { TransferKinds } from '@crowdplay/ledger';
import { Market } from '@crowdplay/lmsr';
import { CrowdplayError, type RoundResultFrame, type RoundView } from '@crowdplay/protocol';
import type { RoundRow } from '@crowdplay/store';
import type { RoundsContext } from './round-context.ts';
import type { RoundLedger, WalletFrames } from './round-ledger.ts';
import {
  Round,
  alreadyCancelled,
  alreadySettled,
  dueToExpire,
  dueToLock,
  outcomeIndex,
  validateOpen,
  type OpenRoundRequest,
} from './round-state.ts';
import { roundView } from './round-view.ts';

/** One channel's round lifecycle. */
export class RoundLifecycle {
  /** Round ids being opened (not in `rounds` yet). */
  private readonly opening = new Set<string>();
  /** open() calls in progress (a handoff waits for them). */
  readonly openJobs = new Set<Promise<unknown>>();

  constructor(
    private readonly s: RoundsContext,
    private readonly ledger: RoundLedger,
  ) {}

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
    const p = this.doOpen(tenant, req);
    this.openJobs.add(p);
    void p.catch(() => undefined).finally(() => this.openJobs.delete(p));
    return p;
  }

  private async doOpen(tenant: string, req: OpenRoundRequest): Promise<RoundView> {
    const s = this.s;
    const d = s.d;
    s.checkTenant(tenant);
    const cfg = d.config.rounds;
    if (s.draining || s.closed || s.moving) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [d.channel]);
    if (s.rounds.has(req.round) || this.opening.has(req.round)) throw new CrowdplayError('CP_ERR_ROUND_EXISTS', [req.round]);
    if (s.unfinished + this.opening.size >= cfg.maxOpen) {
      d.telemetry.refusals.refuse('rounds', 'CP_ERR_ROUND_TOO_MANY', { channel: d.channel, limit: 'ROUND_MAX_OPEN' });
      throw new CrowdplayError('CP_ERR_ROUND_TOO_MANY', [cfg.maxOpen]);
    }
    const { outcomes, b } = validateOpen(cfg, req);
    const now = d.now();
    const row: RoundRow = {
      channelId: d.channel,
      id: req.round,
      uid: s.uid(req.round),
      tenantId: d.tenant,
      kind: req.kind,
      title: req.title ?? null,
      outcomes,
      labels: req.labels ?? null,
      liquidity: b,
      takeBps: req.kind === 'pool' ? d.config.ledger.houseTakeBps : 0,
      openedAt: now,
      deadlineAt: now + req.durationMs,
      state: 'open',
      winner: null,
      book: null,
      paid: false,
      epoch: d.epoch(),
    };
    this.opening.add(req.round);
    try {
      await d.store.rounds.insert(row);
      const r = new Round(row);
      if (req.kind === 'market') {
        r.market = new Market({ b: b!, outcomes: outcomes.length, wallet: s.wallet });
        try {
          await this.ledger.fundMaker(r);
        } catch (err) {
          // The row exists: finish it as cancelled (the maker's balance, if any, goes back).
          s.rounds.set(r.id, r);
          r.markCancelled();
          r.op = this.finishCancel(r, 'open_failed').catch((e: unknown) => s.logFail(r, e));
          throw err;
        }
      }
      s.rounds.set(r.id, r);
      d.metrics.roundEvents.add(1, { kind: req.kind, event: 'opened' });
      d.changed();
      return roundView(r);
    } finally {
      this.opening.delete(req.round);
    }
  }

  /**
   * Locks the round (if open), waits for its in-flight stakes and trades,
   * records the winner, then pays. Idempotent: settling again with the same
   * outcome returns the round; another outcome is refused.
   * @throws CrowdplayError CP_ERR_AUTH_FORBIDDEN_CHANNEL, CP_ERR_ROUND_UNKNOWN,
   *   CP_ERR_ROUND_UNKNOWN_OUTCOME, CP_ERR_ROUND_ALREADY_FINAL
   */
  async settle(tenant: string, roundId: string, outcome: string): Promise<RoundView> {
    const s = this.s;
    const d = s.d;
    s.checkTenant(tenant);
    const r = await this.find(roundId);
    const w = outcomeIndex(r, outcome);
    return s.serial(r, async () => {
      if (alreadySettled(r, w)) {
        if (!r.paid) await this.pay(r); // an earlier settle's payments failed: the same settle finishes them
        return roundView(r);
      }
      await this.lock(r);
      await d.store.rounds.update(d.channel, r.id, d.epoch(), { state: 'settled', winner: w });
      r.markSettled(w);
      d.metrics.roundEvents.add(1, { kind: r.row.kind, event: 'settled' });
      d.changed();
      await this.pay(r);
      d.sendRound(roundView(r));
      s.forgetOld();
      return roundView(r);
    });
  }

  /**
   * Cancels the round and refunds every viewer's net exactly (from the
   * ledger's transfers). Idempotent.
   * @throws CrowdplayError CP_ERR_AUTH_FORBIDDEN_CHANNEL, CP_ERR_ROUND_UNKNOWN,
   *   CP_ERR_ROUND_ALREADY_FINAL (settled)
   */
  async cancel(tenant: string, roundId: string): Promise<RoundView> {
    this.s.checkTenant(tenant);
    const r = await this.find(roundId);
    return this.cancelRound(r, 'cancelled');
  }

  /**
   * Cancels a round (after its step in progress): locks it, waits for its in-flight stakes and
   * trades, writes `cancelled`, refunds and marks it paid.
   * @param event the round event counted and logged
   * @throws CrowdplayError CP_ERR_ROUND_ALREADY_FINAL (settled), store and ledger errors
   */
  cancelRound(r: Round, event: 'cancelled' | 'expired' | 'drained'): Promise<RoundView> {
    const s = this.s;
    const d = s.d;
    return s.serial(r, async () => {
      if (alreadyCancelled(r)) {
        if (!r.paid) await this.finishCancel(r, event); // an earlier cancel's refunds failed: finish them
        return roundView(r);
      }
      if (r.closeEntries()) d.changed();
      await r.idle();
      r.market?.lock();
      await d.store.rounds.update(d.channel, r.id, d.epoch(), { state: 'cancelled' });
      r.markCancelled();
      d.metrics.roundEvents.add(1, { kind: r.row.kind, event });
      d.changed();
      await this.finishCancel(r, event);
      d.sendRound(roundView(r));
      s.forgetOld();
      return roundView(r);
    });
  }

  /** The round in memory, or a finished one from the store. */
  private async find(roundId: string): Promise<Round> {
    const s = this.s;
    const r = s.rounds.get(roundId);
    if (r) return r;
    const row = await s.d.store.rounds.get(s.d.channel, roundId);
    if (!row) throw new CrowdplayError('CP_ERR_ROUND_UNKNOWN', [roundId]);
    // Finished long ago (dropped from memory) or being recovered: answer from its row.
    return s.rounds.get(roundId) ?? new Round(row);
  }

  /** Stops new stakes and trades, waits for in-flight ones, writes the final book. */
  private async lock(r: Round): Promise<void> {
    const d = this.s.d;
    if (r.closeEntries()) d.changed();
    await r.idle();
    if (r.lockPersisted) return;
    r.market?.lock();
    r.book = r.bookNow();
    await d.store.rounds.update(d.channel, r.id, d.epoch(), { state: 'locked', book: r.book });
    r.lockPersisted = true;
    d.metrics.roundEvents.add(1, { kind: r.row.kind, event: 'locked' });
    d.sendRound(roundView(r));
  }

  /** Pays a settled round from its book (again after a crash: replays are no-ops), then marks it paid. */
  async pay(r: Round): Promise<void> {
    await this.markPaid(r, await this.ledger.payOut(r));
  }

  /** Refunds every viewer's net from the ledger's transfers of the round, then marks it paid. */
  async finishCancel(r: Round, why: string): Promise<void> {
    await this.markPaid(r, await this.ledger.refundAll(r, why));
  }

  private async markPaid(r: Round, wallet: WalletFrames): Promise<void> {
    const d = this.s.d;
    await d.store.rounds.update(d.channel, r.id, d.epoch(), { state: r.state, paid: true });
    r.paid = true;
    for (const e of wallet) {
      const now = d.wallets.available(d.tenant, e.viewer);
      if (now !== undefined) e.frame.points = now;
    }
    const frames: Array<WalletFrames[number] | { viewer: string; frame: RoundResultFrame }> = [...wallet];
    for (const result of await this.results(r)) frames.push(result);
    for (let i = 0; i < frames.length; i += 1_000) d.sendWallet(frames.slice(i, i + 1_000));
  }

  /**
   * Each participant's result in a round that is paid (one ledger read); none when the read fails, since the
   * round is paid all the same and the figures stay readable in the round history.
   */
  private async results(r: Round): Promise<Array<{ viewer: string; frame: RoundResultFrame }>> {
    const d = this.s.d;
    const state = r.state === 'settled' ? 'settled' : 'cancelled';
    try {
      const flows = await d.ledger.roundFlows(d.tenant, r.row.uid, [TransferKinds.stake, TransferKinds.buy]);
      return flows
        .filter(([, staked]) => staked > 0)
        .map(([viewer, staked, paid]) => {
          const frame: RoundResultFrame = { t: 'roundResult', channel: d.channel, round: r.id, state, staked, paid, net: paid - staked };
          if (state === 'settled' && r.winner !== null) frame.winner = r.row.outcomes[r.winner]!;
          return { viewer, frame };
        });
    } catch (err) {
      d.telemetry.logger.warn({ err, channel: d.channel, round: r.id }, 'round results not sent: the ledger read failed');
      return [];
    }
  }

  /** Locks rounds past their deadline and cancels locked ones past ROUND_UNSETTLED_MAX_MS. Call every tick (`now` in ms since epoch). */
  tick(now: number): void {
    const s = this.s;
    if (s.moving) return;
    const maxUnsettled = s.d.config.rounds.unsettledMaxMs;
    for (const r of s.rounds.values()) {
      if (dueToLock(r, now)) {
        r.closeEntries();
        s.d.changed();
        void s.serial(r, () => this.lock(r)).catch((err: unknown) => s.logFail(r, err));
      } else if (dueToExpire(r, now, maxUnsettled) && !s.draining) {
        r.expiring = true;
        void this.cancelRound(r, 'expired').catch((err: unknown) => {
          r.expiring = false; // tried again at a later tick (or, once cancelled, paid by the retry below)
          s.logFail(r, err);
        });
      } else if (r.final && !r.paid && !r.paying && now >= r.payRetryAt) this.retryPayments(r, now);
    }
  }

  /**
   * Pays or refunds again a settled or cancelled round whose payments failed (a ledger or store error after the
   * round's state was written): transfer ids are deterministic, so what committed before is a replay. Tried once
   * per ROUND_PAY_RETRY_MS until the round is marked paid; counted in crowdplay_round_pay_retries_total.
   */
  private retryPayments(r: Round, now: number): void {
    const s = this.s;
    r.paying = true;
    s.d.metrics.payRetries.add(1, { kind: r.row.kind });
    void s
      .serial(r, () => (r.paid ? Promise.resolve() : r.state === 'settled' ? this.pay(r) : this.finishCancel(r, 'retried')))
      .catch((err: unknown) => s.logFail(r, err))
      .finally(() => {
        r.paying = false;
        r.payRetryAt = now + s.d.config.rounds.payRetryMs;
      });
  }

  /**
   * Drain: refuses new stakes and trades, cancels and refunds every open or
   * locked round, and waits for every payout or refund in progress. Never rejects.
   */
  async drain(): Promise<void> {
    const s = this.s;
    s.draining = true;
    const jobs: Array<Promise<unknown>> = [];
    for (const r of s.rounds.values()) {
      if (!r.final) jobs.push(this.cancelRound(r, 'drained'));
      else if (!r.paid)
        jobs.push(s.serial(r, () => (r.paid ? Promise.resolve() : r.state === 'settled' ? this.pay(r) : this.finishCancel(r, 'drained'))));
      else jobs.push(r.op);
    }
    const results = await Promise.allSettled(jobs);
    for (const x of results)
      if (x.status === 'rejected') s.d.telemetry.logger.error({ err: x.reason, channel: s.d.channel }, 'drain: round refund failed');
  }
}
