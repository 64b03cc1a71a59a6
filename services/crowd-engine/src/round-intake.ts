/**
 * Viewers' stakes and trades, welcome grants on join and paid actions.
 *
 * A viewer's stakes and trades in one round run one after another (each
 * waits for the previous one's commit; at most ROUND_MAX_PENDING_PER_VIEWER
 * wait). One runs: checks (state, deadline, outcome, idempotency key),
 * reserve the points in the wallet mirror (wallets.ts) and apply to the
 * in-memory book synchronously (so the next trade of anybody is priced on
 * it), send the ledger transfer (round-ledger.ts), and ack after its commit.
 * A transfer the ledger refuses is undone in the book and the mirror; one
 * whose outcome is unknown (CP_ERR_LEDGER_UNAVAILABLE) is sent again with
 * the same id until the ledger answers.
 *
 * A client key's idempotency id is h = hashOf(viewer, key); a key sent
 * again while its first send is queued or done gets the first's answer.
 */
import { randomUUID } from 'node:crypto';
import type { TradeResult } from '@crowdplay/lmsr';
import {
  CrowdplayError,
  isCrowdplayError,
  type BalanceFrame,
  type BusAck,
  type BusIntent,
  type BusTrade,
  type ErrorCode,
} from '@crowdplay/protocol';
import type { RoundsContext } from './round-context.ts';
import { hashOf, type RoundLedger } from './round-ledger.ts';
import { acceptsEntries, checkRoom, knownKey, tradeMismatch, type PoolStakeRec, type Round } from './round-state.ts';

/** Takes one channel's stakes, trades, joins and paid actions. */
export class RoundIntake {
  /** Points granted once per viewer on join (the game's declare.welcomeGrant). */
  welcomeGrant = 0;
  /** Joins being answered, per viewer: a stake sent right after joining waits for its welcome grant. */
  private readonly joining = new Map<string, Promise<void>>();

  constructor(
    private readonly s: RoundsContext,
    private readonly ledger: RoundLedger,
  ) {}

  /**
   * Takes one stake or trade: queued behind the viewer's previous one in the
   * same round, then executed; its ack is sent to `gw` after the commit (or
   * the refusal). Never rejects.
   */
  take(gw: string, it: BusIntent & { trade: BusTrade }): void {
    const s = this.s;
    const d = s.d;
    const started = it.at;
    const fail = (code: ErrorCode): void => this.ack(gw, it, started, { conn: it.conn, seq: it.seq, ok: false, code });
    const t = it.trade;
    if (s.moving) return fail('CP_ERR_CHANNEL_UNAVAILABLE');
    if (s.draining || s.closed) return fail('CP_ERR_LIMIT_DRAINING');
    const r = s.rounds.get(t.round);
    if (!r) return fail('CP_ERR_ROUND_UNKNOWN');
    const mismatch = tradeMismatch(r, t);
    if (mismatch !== null) return fail(mismatch);
    // A key sent again (a retry after a lost ack) while its first send is queued or done gets the first's answer,
    // even once the round closed or the viewer is at its bound: it adds no work, and a refusal would deny a stake
    // that commits.
    const h = t.key === undefined ? undefined : hashOf(it.viewer, t.key);
    const copy = h !== undefined && (r.pendingKeys.has(h) || knownKey(r, t, h));
    if (!copy && !acceptsEntries(r, d.now())) return fail('CP_ERR_ROUND_CLOSED');
    let chain = r.chains.get(it.viewer);
    if (!chain) r.chains.set(it.viewer, (chain = { tail: Promise.resolve(), waiting: 0 }));
    if (!copy && chain.waiting >= d.config.rounds.maxPendingPerViewer) {
      d.telemetry.refusals.refuse('rounds', 'CP_ERR_ROUND_VIEWER_BUSY', { limit: 'ROUND_MAX_PENDING_PER_VIEWER' });
      return fail('CP_ERR_ROUND_VIEWER_BUSY');
    }
    chain.waiting++;
    if (h !== undefined) r.pendingKeys.set(h, (r.pendingKeys.get(h) ?? 0) + 1);
    const c = chain;
    c.tail = c.tail.then(async () => {
      let ack: BusAck;
      try {
        ack = await this.execute(r, it, t);
      } catch (err) {
        const code: ErrorCode = isCrowdplayError(err) ? err.code : 'CP_ERR_INTERNAL';
        if (code === 'CP_ERR_INTERNAL') d.telemetry.logger.error({ err, channel: d.channel, round: r.id }, 'trade failed');
        ack = { conn: it.conn, seq: it.seq, ok: false, code };
      }
      if (h !== undefined) {
        const n = (r.pendingKeys.get(h) ?? 1) - 1;
        if (n === 0) r.pendingKeys.delete(h);
        else r.pendingKeys.set(h, n);
      }
      this.ack(gw, it, started, ack);
      if (--c.waiting === 0 && r.chains.get(it.viewer) === c) r.chains.delete(it.viewer);
    });
  }

  private ack(gw: string, it: BusIntent & { trade: BusTrade }, started: number, ack: BusAck): void {
    const d = this.s.d;
    const kind = it.trade.k;
    if (ack.ok) d.metrics.trades.add(1, { kind, outcome: 'accepted' });
    else {
      d.metrics.trades.add(1, { kind, outcome: 'refused', reason: ack.code ?? 'CP_ERR_INTERNAL' });
      d.telemetry.refusals.refuse('rounds', (ack.code ?? 'CP_ERR_INTERNAL') as ErrorCode, { channel: d.channel });
    }
    d.metrics.tradeAckMs.record(Math.max(0, d.now() - started));
    d.sendAcks(gw, [ack]);
  }

  /**
   * Runs one stake or trade (the viewer's previous one in this round has
   * finished). The round counts it in flight from the first step, so a lock
   * waits for it and the book and market never change under a lock.
   */
  private async execute(r: Round, it: BusIntent, t: BusTrade): Promise<BusAck> {
    const s = this.s;
    const d = s.d;
    if (s.moving) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [d.channel]);
    // Without a client key a stake is never a replay: a random key (a gateway's conn and seq restart with it).
    const key = t.key ?? `auto:${randomUUID()}`;
    const h = hashOf(it.viewer, key);
    // A replay of a key already taken is answered from the round even when it closed meanwhile.
    if (!(t.key !== undefined && knownKey(r, t, h)) && (!acceptsEntries(r, d.now()) || s.draining))
      throw new CrowdplayError('CP_ERR_ROUND_CLOSED', [r.id, r.state]);
    r.begin();
    try {
      const joined = this.joining.get(it.viewer);
      if (joined) await joined;
      const o = r.outcomeIdx.get(t.outcome)!;
      await d.wallets.ensure(d.tenant, it.viewer);
      if (t.k === 'stake') return await this.execStake(r, it, t.points, o, key, h);
      return await this.execMarket(r, it, t, o, h);
    } finally {
      r.end();
    }
  }

  private async execStake(r: Round, it: BusIntent, points: number, o: number, key: string, h: string): Promise<BusAck> {
    const d = this.s.d;
    const viewer = it.viewer;
    const prior = r.stakeByKey.get(h);
    if (prior) {
      if (prior.outcome !== o || prior.points !== points) throw new CrowdplayError('CP_ERR_ROUND_DUPLICATE_ID', [key, r.id]);
      return this.okAck(it, { cost: points });
    }
    checkRoom(r, d.config.rounds.maxEntries);
    if (!(await this.reserve(viewer, points))) {
      throw new CrowdplayError('CP_ERR_ROUND_INSUFFICIENT_FUNDS', [points, d.wallets.available(d.tenant, viewer) ?? 0]);
    }
    // Re-check after the awaits: the round may have locked meanwhile.
    if (r.state !== 'open') {
      d.wallets.released(d.tenant, viewer, points);
      throw new CrowdplayError('CP_ERR_ROUND_CLOSED', [r.id, r.state]);
    }
    const rec: PoolStakeRec = { viewer, outcome: o, points, h, void: false };
    r.stakes.push(rec);
    r.stakeByKey.set(h, rec);
    r.totals[o] = r.totals[o]! + points;
    r.entries++;
    d.changed();
    try {
      const res = await this.ledger.stake(r, viewer, h, points);
      d.wallets.debited(d.tenant, viewer, res.replayed ? null : res.fromBalance);
      return this.okAck(it, { cost: points });
    } catch (err) {
      rec.void = true;
      r.stakeByKey.delete(h);
      r.totals[o] = r.totals[o]! - points;
      r.entries--;
      d.changed();
      d.wallets.released(d.tenant, viewer, points, isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS'));
      throw mapLedgerError(err, points);
    }
  }

  private async execMarket(r: Round, it: BusIntent, t: Exclude<BusTrade, { k: 'stake' }>, o: number, h: string): Promise<BusAck> {
    const d = this.s.d;
    const m = r.market!;
    const viewer = it.viewer;
    const prior = m.trade(h);
    if (prior === undefined) checkRoom(r, d.config.rounds.maxEntries);
    let res: TradeResult;
    try {
      if (t.k === 'sell') res = m.sell(h, viewer, o, t.shares, t.minProceeds);
      else if ('budget' in t) res = await this.withFunds(viewer, () => m.buyForBudget(h, viewer, o, t.budget));
      else res = await this.withFunds(viewer, () => m.buy(h, viewer, o, t.shares, t.maxCost));
    } catch (err) {
      if (isCrowdplayError(err, 'CP_ERR_MARKET_DUPLICATE_ID')) throw new CrowdplayError('CP_ERR_ROUND_DUPLICATE_ID', [t.key ?? h, r.id]);
      if (isCrowdplayError(err, 'CP_ERR_MARKET_CLOSED')) throw new CrowdplayError('CP_ERR_ROUND_CLOSED', [r.id, r.state]);
      throw err;
    }
    const fields = (): Partial<BusAck> =>
      t.k === 'sell'
        ? { cost: 0, shares: res.shares, proceeds: res.points, position: res.position }
        : { cost: res.points, shares: res.shares, position: res.position };
    if (prior !== undefined) return this.okAck(it, fields());
    if (r.state !== 'open') {
      // Locked while this trade waited for the viewer's mirror: undo (the lock waits for this trade, so the market is still open).
      m.revert(h);
      if (t.k !== 'sell') d.wallets.released(d.tenant, viewer, res.points);
      throw new CrowdplayError('CP_ERR_ROUND_CLOSED', [r.id, r.state]);
    }
    r.entries++;
    d.changed();
    if (res.points === 0) return this.okAck(it, fields()); // a sell worth 0 points moves no money
    try {
      if (t.k === 'sell') {
        const done = await this.ledger.trade(r, 'sell', viewer, h, res.points);
        d.wallets.credited(d.tenant, viewer, res.points, done.replayed ? null : done.toBalance);
      } else {
        const done = await this.ledger.trade(r, 'buy', viewer, h, res.points);
        d.wallets.debited(d.tenant, viewer, done.replayed ? null : done.fromBalance);
      }
      return this.okAck(it, fields());
    } catch (err) {
      m.revert(h);
      r.entries--;
      d.changed();
      if (t.k !== 'sell') d.wallets.released(d.tenant, viewer, res.points, isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS'));
      throw mapLedgerError(err, res.points);
    }
  }

  /** Runs a synchronous trade that reserves from the mirror; when it lacks funds, reloads a stale mirror once and tries again. */
  private async withFunds<T>(viewer: string, trade: () => T): Promise<T> {
    const d = this.s.d;
    try {
      return trade();
    } catch (err) {
      if (!isCrowdplayError(err, 'CP_ERR_MARKET_INSUFFICIENT_FUNDS')) throw err;
      if (!(await d.wallets.refreshIfStale(d.tenant, viewer))) throw err;
      return trade();
    }
  }

  private async reserve(viewer: string, points: number): Promise<boolean> {
    const d = this.s.d;
    if (d.wallets.reserve(d.tenant, viewer, points)) return true;
    if (!(await d.wallets.refreshIfStale(d.tenant, viewer))) return false;
    return d.wallets.reserve(d.tenant, viewer, points);
  }

  private okAck(it: BusIntent, fields: Partial<BusAck>): BusAck {
    const d = this.s.d;
    const ack: BusAck = { conn: it.conn, seq: it.seq, ok: true, ...fields };
    const balance = d.wallets.available(d.tenant, it.viewer);
    if (balance !== undefined) ack.balance = balance;
    return ack;
  }

  /**
   * Answers viewers that joined: pays the welcome grant once per (channel,
   * viewer) when the game declared one, and sends each its balance. Never rejects.
   */
  async join(gw: string, joins: Array<{ conn: number; viewer: string }>): Promise<void> {
    const s = this.s;
    const d = s.d;
    const out: Array<{ conn: number; frame: BalanceFrame }> = [];
    await Promise.all(
      joins.map(async ({ conn, viewer }) => {
        let done!: () => void;
        const p = new Promise<void>((r) => (done = r));
        this.joining.set(viewer, p);
        try {
          let reason = 'join';
          let delta: number | undefined;
          if (this.welcomeGrant > 0 && !s.draining) {
            // Once per (channel, viewer): a grant already paid at another amount (the game changed it) is a conflict, i.e. paid.
            // A wallet the grant would take past MAX_POINTS joins without it.
            const res = await d.ledger
              .grant(d.tenant, viewer, this.welcomeGrant, `welcome:${d.channel}:${hashOf(viewer, '#')}`)
              .catch((err: unknown) => {
                if (isCrowdplayError(err, 'CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT') || isCrowdplayError(err, 'CP_ERR_LEDGER_BALANCE_LIMIT'))
                  return { replayed: true, toBalance: null };
                throw err;
              });
            if (!res.replayed) {
              reason = 'welcome';
              delta = this.welcomeGrant;
              d.wallets.credited(d.tenant, viewer, this.welcomeGrant, res.toBalance);
            }
          }
          await d.wallets.ensure(d.tenant, viewer);
          const frame: BalanceFrame = { t: 'balance', points: d.wallets.available(d.tenant, viewer) ?? 0, reason };
          if (delta !== undefined) frame.delta = delta;
          out.push({ conn, frame });
        } catch (err) {
          d.telemetry.logger.warn({ err, channel: d.channel }, 'join: balance or welcome grant failed');
        } finally {
          if (this.joining.get(viewer) === p) this.joining.delete(viewer);
          done();
        }
      }),
    );
    if (out.length > 0) d.sendAcks(gw, [], out);
  }

  /**
   * Charges a paid action (ActionSpec.cost, points): wallet → house, kind `action`,
   * acked after the commit.
   * @throws CrowdplayError CP_ERR_INTENT_INSUFFICIENT_FUNDS, ledger errors
   */
  async chargeAction(viewer: string, cost: number, idempotencyKey: string): Promise<void> {
    const d = this.s.d;
    await d.wallets.ensure(d.tenant, viewer);
    if (!(await this.reserve(viewer, cost))) throw new CrowdplayError('CP_ERR_INTENT_INSUFFICIENT_FUNDS', [cost]);
    try {
      const res = await this.ledger.send({
        id: `${d.channel}:a:${hashOf(viewer, idempotencyKey)}`,
        tenantId: d.tenant,
        from: { kind: 'wallet', owner: viewer },
        to: { kind: 'house', owner: '' },
        amount: cost,
        kind: 'action',
        channelId: d.channel,
        epoch: d.epoch(),
      });
      d.wallets.debited(d.tenant, viewer, res.replayed ? null : res.fromBalance);
    } catch (err) {
      d.wallets.released(d.tenant, viewer, cost, isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS'));
      if (isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS')) throw new CrowdplayError('CP_ERR_INTENT_INSUFFICIENT_FUNDS', [cost]);
      throw err;
    }
  }
}

/** A ledger refusal as the viewer's ack code. */
function mapLedgerError(err: unknown, points: number): unknown {
  if (isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS'))
    return new CrowdplayError('CP_ERR_ROUND_INSUFFICIENT_FUNDS', [points, '?'], { cause: err });
  return err;
}
