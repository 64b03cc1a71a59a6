/**
 * A channel's rounds inside its shard: pool (parimutuel) and market (LMSR)
 * rounds, their stakes and trades, written through to the durable ledger.
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
 *
 * ## Stakes and trades
 *
 * A viewer's stakes and trades in one round run one after another (each
 * waits for the previous one's commit; at most ROUND_MAX_PENDING_PER_VIEWER
 * wait). One runs: checks (state, deadline, outcome, idempotency key),
 * reserve the points in the wallet mirror (wallets.ts) and apply to the
 * in-memory book synchronously (so the next trade of anybody is priced on
 * it), send the ledger transfer, and ack after its commit. A transfer the
 * ledger refuses is undone in the book and the mirror; one whose outcome is
 * unknown (CP_ERR_LEDGER_UNAVAILABLE) is sent again with the same id until
 * the ledger answers.
 *
 * ## Transfer ids
 *
 * `<uid>:<letter>:<h>` where uid = `<channel>/<round>` (the ledger's round
 * id) and h = base64url(SHA-256(viewer, key))[0..22): deterministic, so a
 * payout, refund or stake sent twice (after a crash, a retry) is a replay.
 *
 * ## Recovery (on acquire)
 *
 * Rows not `paid`: 'open' with a handed-off book (handoff(): the previous
 * owner moved the channel) → resumes open once the ledger's transfer ids of
 * the round are exactly the book's; 'open' otherwise (a crash: book never
 * written, or a book the ledger disagrees with) → cancelled, refunds from the
 * ledger; 'locked' → resumes (the game may settle it; expiry applies);
 * 'settled' → payouts sent again from the book; 'cancelled' → refunds sent again.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { Counter, Histogram } from '@opentelemetry/api';
import type { Config } from '@crowdplay/config';
import type { Ledger, TransferRequest, TransferResult } from '@crowdplay/ledger';
import { TransferKinds, settlePool } from '@crowdplay/ledger';
import { Market, prices as lmsrPrices, type MarketHandoff, type TradeResult, type Wallet } from '@crowdplay/lmsr';
import {
  CrowdplayError,
  isCrowdplayError,
  type BalanceFrame,
  type BusAck,
  type BusIntent,
  type BusTrade,
  type ErrorCode,
  type RoundView,
} from '@crowdplay/protocol';
import type { RoundRow, RoundState, Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import type { WalletMirror } from './wallets.ts';

/**
 * The book written to the round's row: the final one when it locks, or the
 * live one of an open round handed off to the channel's next owner
 * (`handoff` set; a market's trades in `market`, a stake's `h` = hash of
 * viewer and key, so both continue with their idempotency ids).
 */
export type RoundBook =
  | { v: 1; kind: 'pool'; stakes: Array<[viewer: string, outcome: number, points: number, h?: string]>; handoff?: HandoffMark }
  | {
      v: 1;
      kind: 'market';
      q: number[];
      positions: Array<[viewer: string, shares: number[]]>;
      handoff?: HandoffMark;
      market?: MarketHandoff;
    };

/** When and at which epoch an open round's live book was handed off (ms since epoch). */
export interface HandoffMark {
  epoch: number;
  atMs: number;
}

/** What the game (or the built-in game) asks of a channel's rounds. */
export interface OpenRoundRequest {
  round: string;
  kind: 'pool' | 'market';
  outcomes: string[];
  durationMs: number;
  liquidity?: number;
}

/** Metrics shared by every channel of a shard. */
export interface RoundMetrics {
  roundEvents: Counter;
  trades: Counter;
  tradeAckMs: Histogram;
  ledgerRetries: Counter;
  unrecovered: Counter;
}

/** Creates the shard's round metrics (once per shard). */
export function roundMetrics(telemetry: Telemetry): RoundMetrics {
  const m = telemetry.metrics;
  return {
    roundEvents: m.counter('crowdplay_round_events_total'),
    trades: m.counter('crowdplay_trades_total'),
    tradeAckMs: m.histogram('crowdplay_trade_ack_ms'),
    ledgerRetries: m.counter('crowdplay_round_ledger_retries_total'),
    unrecovered: m.counter('crowdplay_round_unrecovered_points_total'),
  };
}

interface PoolStakeRec {
  viewer: string;
  outcome: number;
  points: number;
  /** hashOf(viewer, key): the stake's idempotency id ('' in a locked book written before handoffs existed). */
  h: string;
  void: boolean;
}

interface Chain {
  tail: Promise<void>;
  waiting: number;
}

/** One round in memory. */
class Round {
  state: RoundState;
  winner: number | null;
  paid: boolean;
  readonly outcomeIdx: Map<string, number>;
  readonly stakes: PoolStakeRec[] = [];
  /** Stakes by h (hash of viewer and key). */
  readonly stakeByKey = new Map<string, PoolStakeRec>();
  readonly totals: number[];
  market: Market | null = null;
  book: RoundBook | null;
  entries = 0;
  inflight = 0;
  private idleWaiters: Array<() => void> = [];
  readonly chains = new Map<string, Chain>();
  /** Stakes and trades with a client key queued or running, by h: a copy sent meanwhile waits for the first's answer. */
  readonly pendingKeys = new Map<string, number>();
  /** Serialises lock, settle, cancel and payouts. */
  op: Promise<unknown> = Promise.resolve();
  lockPersisted: boolean;
  /** An expiry cancel is scheduled. */
  expiring = false;
  /** The live book an open round was handed off with (the row is open, the book not final). */
  readonly handedOff: RoundBook | null;

  constructor(readonly row: RoundRow) {
    this.state = row.state;
    this.winner = row.winner;
    this.paid = row.paid;
    this.outcomeIdx = new Map(row.outcomes.map((o, i) => [o, i]));
    this.totals = row.outcomes.map(() => 0);
    const book = (row.book as RoundBook | null) ?? null;
    this.handedOff = row.state === 'open' && book?.handoff !== undefined ? book : null;
    this.book = this.handedOff ? null : book;
    this.lockPersisted = this.book !== null;
    if (book?.kind === 'pool') {
      for (const [viewer, outcome, points, h] of book.stakes) {
        this.totals[outcome] = (this.totals[outcome] ?? 0) + points;
        this.entries++;
        const rec: PoolStakeRec = { viewer, outcome, points, h: h ?? '', void: false };
        this.stakes.push(rec);
        if (h) this.stakeByKey.set(h, rec);
      }
    } else if (book?.kind === 'market') this.entries = book.market ? book.market.trades.length : book.positions.length;
  }

  get id(): string {
    return this.row.id;
  }

  get final(): boolean {
    return this.state === 'settled' || this.state === 'cancelled';
  }

  begin(): void {
    this.inflight++;
  }

  end(): void {
    if (--this.inflight === 0) {
      const w = this.idleWaiters;
      this.idleWaiters = [];
      for (const f of w) f();
    }
  }

  /** Resolves when no stake or trade of this round is between its reservation and its ledger answer. */
  idle(): Promise<void> {
    return this.inflight === 0 ? Promise.resolve() : new Promise((r) => this.idleWaiters.push(r));
  }

  bookNow(): RoundBook {
    if (this.row.kind === 'pool') {
      return { v: 1, kind: 'pool', stakes: this.stakes.filter((s) => !s.void).map((s) => [s.viewer, s.outcome, s.points]) };
    }
    const snap = this.market!.snapshot();
    return {
      v: 1,
      kind: 'market',
      q: [...snap.q],
      positions: snap.viewers.filter((v) => v.shares.some((x) => x > 0)).map((v) => [v.viewer, [...v.shares]]),
    };
  }

  view(): RoundView {
    const r = this.row;
    const v: RoundView = {
      id: r.id,
      kind: r.kind,
      outcomes: r.outcomes,
      state: this.state,
      openedAt: r.openedAt,
      deadline: r.deadlineAt,
      entries: this.entries,
    };
    if (r.kind === 'pool') v.pool = [...this.totals];
    else {
      const b = r.liquidity ?? 1;
      v.b = b;
      if (this.market) {
        v.q = this.market.quantities();
        v.prices = this.market.prices();
      } else {
        v.q = this.book?.kind === 'market' ? [...this.book.q] : r.outcomes.map(() => 0);
        v.prices = lmsrPrices(v.q, b);
      }
    }
    if (this.winner !== null) v.winner = r.outcomes[this.winner]!;
    return v;
  }
}

/** Wallet port of the LMSR market: reserves in the mirror; credits are applied after their commit. */
class MirrorWallet implements Wallet {
  constructor(
    private readonly wallets: WalletMirror,
    private readonly tenant: string,
  ) {}
  reserve(viewer: string, points: number): boolean {
    return this.wallets.reserve(this.tenant, viewer, points);
  }
  credit(): void {
    // Sell proceeds reach the mirror when their transfer commits (ChannelRounds.execMarket).
  }
}

/** Everything a channel's rounds need from their shard. */
export interface ChannelRoundsDeps {
  config: Config;
  ledger: Ledger;
  store: Store;
  telemetry: Telemetry;
  wallets: WalletMirror;
  metrics: RoundMetrics;
  channel: string;
  tenant: string;
  /** The channel's current epoch (fencing). */
  epoch: () => number;
  now: () => number;
  /** Sends acks and balance frames to a gateway. */
  sendAcks: (gw: string, acks: BusAck[], balances?: Array<{ conn: number; frame: BalanceFrame }>) => void;
  /** Sends balance frames to every socket of these viewers in the channel. */
  sendWallet: (entries: Array<{ viewer: string; frame: BalanceFrame }>) => void;
  /** A round changed state: tell the game. */
  sendRound: (view: RoundView) => void;
  /** Something viewers see changed (the shard sends an update on its next tick). */
  changed: () => void;
}

const TRANSFER_KIND: Record<BusTrade['k'], string> = { stake: TransferKinds.stake, buy: TransferKinds.buy, sell: TransferKinds.sell };

/** Whether the round has taken a stake or trade with this h (a replay is answered from it). */
function knownKey(r: Round, t: BusTrade, h: string): boolean {
  return t.k === 'stake' ? r.stakeByKey.has(h) : r.market?.trade(h) !== undefined;
}

function hashOf(viewer: string, key: string): string {
  return createHash('sha256').update(viewer).update('\u0000').update(key).digest('base64url').slice(0, 22);
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Writes one open round's handed-off book at the channel's epoch; false when the row was not written. */
export type HandoffWrite = (row: { channelId: string; id: string; epoch: number; book: RoundBook }) => Promise<boolean>;

/** One channel's rounds. See the module comment. */
export class ChannelRounds {
  private readonly rounds = new Map<string, Round>();
  /** Round ids being opened (not in `rounds` yet). */
  private readonly opening = new Set<string>();
  private readonly wallet: MirrorWallet;
  private closed = false;
  private draining = false;
  /** Handing off: the channel is moving to another shard (new stakes, trades and opens: CP_ERR_CHANNEL_UNAVAILABLE). */
  private moving = false;
  /** open() calls in progress (a handoff waits for them). */
  private readonly openJobs = new Set<Promise<unknown>>();
  /** The refunds and payouts {@link recover} left running. */
  private recovering: Promise<void> = Promise.resolve();
  /** During {@link recover}: the handed-off rounds' committed transfers, read for the whole acquire batch at once. */
  private committed: ReadonlyMap<string, ReadonlyArray<{ id: string; kind: string }>> | null = null;
  /** Points granted once per viewer on join (the game's declare.welcomeGrant). */
  welcomeGrant = 0;
  /** Joins being answered, per viewer: a stake sent right after joining waits for its welcome grant. */
  private readonly joining = new Map<string, Promise<void>>();

  constructor(private readonly d: ChannelRoundsDeps) {
    this.wallet = new MirrorWallet(d.wallets, d.tenant);
  }

  /** Views of the open and locked rounds, then the newest finished ones. */
  views(): RoundView[] {
    const live: RoundView[] = [];
    const done: RoundView[] = [];
    for (const r of this.rounds.values()) (r.final ? done : live).push(r.view());
    return [...live, ...done.slice(-this.d.config.rounds.recentShown)];
  }

  /** Rounds not settled or cancelled. */
  get unfinished(): number {
    let n = 0;
    for (const r of this.rounds.values()) if (!r.final) n++;
    return n;
  }

  private uid(id: string): string {
    return `${this.d.channel}/${id}`;
  }

  private checkTenant(tenant: string): void {
    if (tenant !== this.d.tenant) throw new CrowdplayError('CP_ERR_AUTH_FORBIDDEN_CHANNEL', [this.d.channel]);
  }

  // ------------------------------------------------------------------ game requests

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
    this.checkTenant(tenant);
    const cfg = this.d.config.rounds;
    if (this.draining || this.closed || this.moving) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [this.d.channel]);
    if (this.rounds.has(req.round) || this.opening.has(req.round)) throw new CrowdplayError('CP_ERR_ROUND_EXISTS', [req.round]);
    if (this.unfinished + this.opening.size >= cfg.maxOpen) {
      this.d.telemetry.refusals.refuse('rounds', 'CP_ERR_ROUND_TOO_MANY', { channel: this.d.channel, limit: 'ROUND_MAX_OPEN' });
      throw new CrowdplayError('CP_ERR_ROUND_TOO_MANY', [cfg.maxOpen]);
    }
    if (req.durationMs < cfg.minDurationMs || req.durationMs > cfg.maxDurationMs) {
      throw new CrowdplayError('CP_ERR_ROUND_INVALID', [`durationMs must be in [${cfg.minDurationMs}, ${cfg.maxDurationMs}]`]);
    }
    const outcomes = [...req.outcomes];
    if (outcomes.length < 2 || outcomes.length > 10 || new Set(outcomes).size !== outcomes.length) {
      throw new CrowdplayError('CP_ERR_ROUND_INVALID', ['2 to 10 distinct outcomes']);
    }
    let b: number | null = null;
    if (req.kind === 'market') {
      b = req.liquidity ?? cfg.defaultLiquidity;
      if (!Number.isSafeInteger(b) || b < 1 || b > cfg.maxLiquidity) {
        throw new CrowdplayError('CP_ERR_ROUND_INVALID', [
          `liquidity must be an integer in [1, ${cfg.maxLiquidity}] (ROUND_MAX_LIQUIDITY)`,
        ]);
      }
    } else if (req.liquidity !== undefined) throw new CrowdplayError('CP_ERR_ROUND_INVALID', ['liquidity is for market rounds']);
    const now = this.d.now();
    const row: RoundRow = {
      channelId: this.d.channel,
      id: req.round,
      uid: this.uid(req.round),
      tenantId: this.d.tenant,
      kind: req.kind,
      outcomes,
      liquidity: b,
      takeBps: req.kind === 'pool' ? this.d.config.ledger.houseTakeBps : 0,
      openedAt: now,
      deadlineAt: now + req.durationMs,
      state: 'open',
      winner: null,
      book: null,
      paid: false,
      epoch: this.d.epoch(),
    };
    this.opening.add(req.round);
    try {
      await this.d.store.rounds.insert(row);
      const r = new Round(row);
      if (req.kind === 'market') {
        r.market = new Market({ b: b!, outcomes: outcomes.length, wallet: this.wallet });
        try {
          await this.send({
            id: `${row.uid}:m`,
            tenantId: this.d.tenant,
            from: { kind: 'treasury', owner: '' },
            to: { kind: 'maker', owner: row.uid },
            amount: r.market.subsidy,
            kind: TransferKinds.subsidy,
            channelId: this.d.channel,
            epoch: this.d.epoch(),
            roundId: row.uid,
          });
        } catch (err) {
          // The row exists: finish it as cancelled (the maker's balance, if any, goes back).
          this.rounds.set(r.id, r);
          r.state = 'cancelled';
          r.op = this.finishCancel(r, 'open_failed').catch((e: unknown) => this.logFail(r, e));
          throw err;
        }
      }
      this.rounds.set(r.id, r);
      this.d.metrics.roundEvents.add(1, { kind: req.kind, event: 'opened' });
      this.d.changed();
      return r.view();
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
    this.checkTenant(tenant);
    const r = await this.find(roundId);
    const w = r.outcomeIdx.get(outcome);
    if (w === undefined) throw new CrowdplayError('CP_ERR_ROUND_UNKNOWN_OUTCOME', [outcome, roundId]);
    return this.serial(r, async () => {
      if (r.state === 'settled') {
        if (r.winner === w) return r.view();
        throw new CrowdplayError('CP_ERR_ROUND_ALREADY_FINAL', [roundId, `settled with ${r.row.outcomes[r.winner!]}`]);
      }
      if (r.state === 'cancelled') throw new CrowdplayError('CP_ERR_ROUND_ALREADY_FINAL', [roundId, 'cancelled']);
      await this.lock(r);
      await this.d.store.rounds.update(this.d.channel, r.id, this.d.epoch(), { state: 'settled', winner: w });
      r.state = 'settled';
      r.winner = w;
      this.d.metrics.roundEvents.add(1, { kind: r.row.kind, event: 'settled' });
      this.d.changed();
      await this.pay(r);
      this.d.sendRound(r.view());
      this.forgetOld();
      return r.view();
    });
  }

  /**
   * Cancels the round and refunds every viewer's net exactly (from the
   * ledger's transfers). Idempotent.
   * @throws CrowdplayError CP_ERR_AUTH_FORBIDDEN_CHANNEL, CP_ERR_ROUND_UNKNOWN,
   *   CP_ERR_ROUND_ALREADY_FINAL (settled)
   */
  async cancel(tenant: string, roundId: string): Promise<RoundView> {
    this.checkTenant(tenant);
    const r = await this.find(roundId);
    return this.cancelRound(r, 'cancelled');
  }

  private cancelRound(r: Round, event: 'cancelled' | 'expired' | 'drained'): Promise<RoundView> {
    return this.serial(r, async () => {
      if (r.state === 'cancelled') return r.view();
      if (r.state === 'settled') {
        throw new CrowdplayError('CP_ERR_ROUND_ALREADY_FINAL', [r.id, `settled with ${r.row.outcomes[r.winner!]}`]);
      }
      if (r.state === 'open') {
        r.state = 'locked';
        this.d.changed();
      }
      await r.idle();
      r.market?.lock();
      await this.d.store.rounds.update(this.d.channel, r.id, this.d.epoch(), { state: 'cancelled' });
      r.state = 'cancelled';
      this.d.metrics.roundEvents.add(1, { kind: r.row.kind, event });
      this.d.changed();
      await this.finishCancel(r, event);
      this.d.sendRound(r.view());
      this.forgetOld();
      return r.view();
    });
  }

  private serial<T>(r: Round, fn: () => Promise<T>): Promise<T> {
    const p = r.op.then(fn, fn);
    r.op = p.catch(() => undefined);
    return p;
  }

  /** The round in memory, or a finished one from the store. */
  private async find(roundId: string): Promise<Round> {
    const r = this.rounds.get(roundId);
    if (r) return r;
    const row = await this.d.store.rounds.get(this.d.channel, roundId);
    if (!row) throw new CrowdplayError('CP_ERR_ROUND_UNKNOWN', [roundId]);
    // Finished long ago (dropped from memory) or being recovered: answer from its row.
    return this.rounds.get(roundId) ?? new Round(row);
  }

  /** Stops new stakes and trades, waits for in-flight ones, writes the final book. */
  private async lock(r: Round): Promise<void> {
    if (r.state === 'open') {
      r.state = 'locked';
      this.d.changed();
    }
    await r.idle();
    if (r.lockPersisted) return;
    r.market?.lock();
    r.book = r.bookNow();
    await this.d.store.rounds.update(this.d.channel, r.id, this.d.epoch(), { state: 'locked', book: r.book });
    r.lockPersisted = true;
    this.d.metrics.roundEvents.add(1, { kind: r.row.kind, event: 'locked' });
    this.d.sendRound(r.view());
  }

  // ------------------------------------------------------------------ money out

  /** Pays a settled round from its book (again after a crash: replays are no-ops), then marks it paid. */
  private async pay(r: Round): Promise<void> {
    const book = r.book!;
    const w = r.winner!;
    const uid = r.row.uid;
    const payouts = new Map<string, number>();
    let reason = 'payout';
    let take = 0;
    if (book.kind === 'pool') {
      const s = settlePool(
        book.stakes.map(([viewer, outcome, amount]) => ({ viewer, outcome, amount })),
        w,
        r.row.takeBps,
      );
      if (s.refunded) reason = 'refund';
      take = s.take;
      for (const p of s.payouts) if (p.amount > 0) payouts.set(p.viewer, (payouts.get(p.viewer) ?? 0) + p.amount);
    } else {
      for (const [viewer, shares] of book.positions) if ((shares[w] ?? 0) > 0) payouts.set(viewer, shares[w]!);
    }
    const from = book.kind === 'pool' ? ({ kind: 'escrow', owner: uid } as const) : ({ kind: 'maker', owner: uid } as const);
    const kind = reason === 'refund' ? TransferKinds.refund : TransferKinds.payout;
    const letter = reason === 'refund' ? 'r' : 'p';
    const jobs: Array<Promise<void>> = [];
    if (take > 0) {
      jobs.push(
        this.send(this.roundTransfer(r, `${uid}:t`, from, { kind: 'house', owner: '' }, take, TransferKinds.take)).then(() => undefined),
      );
    }
    const wallet: Array<{ viewer: string; frame: BalanceFrame }> = [];
    for (const [viewer, amount] of [...payouts].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
      const tr = this.roundTransfer(r, `${uid}:${letter}:${hashOf(viewer, '#')}`, from, { kind: 'wallet', owner: viewer }, amount, kind);
      jobs.push(
        this.send(tr).then((res) => {
          if (!res.replayed) this.d.wallets.credited(this.d.tenant, viewer, amount, res.toBalance);
          wallet.push({ viewer, frame: this.balanceFrame(viewer, reason, amount, r.id, res.toBalance) });
        }),
      );
    }
    await Promise.all(jobs);
    if (book.kind === 'market') await this.closeMaker(r);
    await this.markPaid(r, wallet);
  }

  /** Refunds every viewer's net from the ledger's transfers of the round; a market's maker account is then closed. */
  private async finishCancel(r: Round, why: string): Promise<void> {
    const uid = r.row.uid;
    const isPool = r.row.kind === 'pool';
    const nets = await this.d.ledger.roundNets(
      this.d.tenant,
      uid,
      isPool ? [TransferKinds.stake] : [TransferKinds.buy],
      isPool ? [] : [TransferKinds.sell],
    );
    const from = isPool ? ({ kind: 'escrow', owner: uid } as const) : ({ kind: 'maker', owner: uid } as const);
    const wallet: Array<{ viewer: string; frame: BalanceFrame }> = [];
    const jobs = nets.map(async ([viewer, net]) => {
      const h = hashOf(viewer, '#');
      if (net > 0) {
        const res = await this.send(
          this.roundTransfer(r, `${uid}:r:${h}`, from, { kind: 'wallet', owner: viewer }, net, TransferKinds.refund),
        );
        if (!res.replayed) this.d.wallets.credited(this.d.tenant, viewer, net, res.toBalance);
        wallet.push({ viewer, frame: this.balanceFrame(viewer, 'refund', net, r.id, res.toBalance) });
        return;
      }
      // A profitable cash-out is taken back if the viewer still holds it (through the mirror, which never goes below zero).
      const claw = -net;
      await this.d.wallets.ensure(this.d.tenant, viewer);
      if (!this.d.wallets.reserve(this.d.tenant, viewer, claw)) {
        await this.d.wallets.refreshIfStale(this.d.tenant, viewer);
        if (!this.d.wallets.reserve(this.d.tenant, viewer, claw)) return this.unrecovered(r, viewer, claw);
      }
      try {
        const res = await this.send(
          this.roundTransfer(r, `${uid}:c:${h}`, { kind: 'wallet', owner: viewer }, from, claw, TransferKinds.clawback),
        );
        this.d.wallets.debited(this.d.tenant, viewer, res.fromBalance);
        wallet.push({ viewer, frame: this.balanceFrame(viewer, 'clawback', -claw, r.id, res.fromBalance) });
      } catch (err) {
        this.d.wallets.released(this.d.tenant, viewer, claw, true);
        if (!isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS')) throw err;
        this.unrecovered(r, viewer, claw);
      }
    });
    await Promise.all(jobs);
    if (!isPool) await this.closeMaker(r);
    this.d.telemetry.logger.info({ channel: this.d.channel, round: r.id, why, refunds: nets.length }, 'round cancelled and refunded');
    await this.markPaid(r, wallet);
  }

  private unrecovered(r: Round, viewer: string, points: number): void {
    this.d.metrics.unrecovered.add(points);
    this.d.telemetry.logger.warn(
      { channel: this.d.channel, round: r.id, viewer, points },
      'cancel: a profitable cash-out was already spent; the maker bears it',
    );
  }

  /** Moves what the maker account holds back to the treasury (or covers its loss from it). */
  private async closeMaker(r: Round): Promise<void> {
    const uid = r.row.uid;
    const bal = await this.d.ledger.balance(this.d.tenant, { kind: 'maker', owner: uid });
    if (bal === 0) return;
    const maker = { kind: 'maker', owner: uid } as const;
    const treasury = { kind: 'treasury', owner: '' } as const;
    await this.send(
      bal > 0
        ? this.roundTransfer(r, `${uid}:z`, maker, treasury, bal, TransferKinds.makerClose)
        : this.roundTransfer(r, `${uid}:z`, treasury, maker, -bal, TransferKinds.makerClose),
    );
  }

  private async markPaid(r: Round, wallet: Array<{ viewer: string; frame: BalanceFrame }>): Promise<void> {
    await this.d.store.rounds.update(this.d.channel, r.id, this.d.epoch(), { state: r.state, paid: true });
    r.paid = true;
    for (const e of wallet) {
      const now = this.d.wallets.available(this.d.tenant, e.viewer);
      if (now !== undefined) e.frame.points = now;
    }
    for (let i = 0; i < wallet.length; i += 1_000) this.d.sendWallet(wallet.slice(i, i + 1_000));
  }

  private balanceFrame(viewer: string, reason: string, delta: number, round: string, after: number | null): BalanceFrame {
    const points = this.d.wallets.available(this.d.tenant, viewer) ?? after ?? 0;
    return { t: 'balance', points, reason, delta, round };
  }

  private roundTransfer(
    r: Round,
    id: string,
    from: TransferRequest['from'],
    to: TransferRequest['to'],
    amount: number,
    kind: string,
  ): TransferRequest {
    return { id, tenantId: this.d.tenant, from, to, amount, kind, channelId: this.d.channel, epoch: this.d.epoch(), roundId: r.row.uid };
  }

  /** Drops finished, paid rounds beyond ROUND_RECENT_SHOWN from memory (their rows stay). */
  private forgetOld(): void {
    const done = [...this.rounds.values()].filter((r) => r.final && r.paid);
    for (const r of done.slice(0, Math.max(0, done.length - this.d.config.rounds.recentShown))) this.rounds.delete(r.id);
  }

  /**
   * Sends a transfer; a CP_ERR_LEDGER_UNAVAILABLE answer (the commit may or
   * may not have happened) is retried with the same id, with backoff, until
   * the ledger answers or the channel closes.
   */
  private async send(req: TransferRequest): Promise<TransferResult> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.d.ledger.transfer({ ...req, epoch: req.channelId === undefined ? undefined : this.d.epoch() });
      } catch (err) {
        if (!isCrowdplayError(err, 'CP_ERR_LEDGER_UNAVAILABLE') || this.closed) throw err;
        this.d.metrics.ledgerRetries.add(1);
        if (attempt === 0) this.d.telemetry.logger.warn({ err, id: req.id }, 'ledger unavailable; sending the transfer again');
        await sleep(Math.min(2_000, 50 * 2 ** Math.min(attempt, 6)));
      }
    }
  }

  // ------------------------------------------------------------------ viewers

  /**
   * Takes one stake or trade: queued behind the viewer's previous one in the
   * same round, then executed; its ack is sent to `gw` after the commit (or
   * the refusal). Never rejects.
   */
  take(gw: string, it: BusIntent & { trade: BusTrade }): void {
    const started = it.at;
    const fail = (code: ErrorCode): void => this.ack(gw, it, started, { conn: it.conn, seq: it.seq, ok: false, code });
    const t = it.trade;
    if (this.moving) return fail('CP_ERR_CHANNEL_UNAVAILABLE');
    if (this.draining || this.closed) return fail('CP_ERR_LIMIT_DRAINING');
    const r = this.rounds.get(t.round);
    if (!r) return fail('CP_ERR_ROUND_UNKNOWN');
    const wantPool = t.k === 'stake';
    if (wantPool !== (r.row.kind === 'pool')) return fail('CP_ERR_ROUND_WRONG_KIND');
    if (!r.outcomeIdx.has(t.outcome)) return fail('CP_ERR_ROUND_UNKNOWN_OUTCOME');
    // A key sent again (a retry after a lost ack) while its first send is queued or done gets the first's answer,
    // even once the round closed or the viewer is at its bound: it adds no work, and a refusal would deny a stake
    // that commits.
    const h = t.key === undefined ? undefined : hashOf(it.viewer, t.key);
    const copy = h !== undefined && (r.pendingKeys.has(h) || knownKey(r, t, h));
    if (!copy && (r.state !== 'open' || this.d.now() >= r.row.deadlineAt)) return fail('CP_ERR_ROUND_CLOSED');
    let chain = r.chains.get(it.viewer);
    if (!chain) r.chains.set(it.viewer, (chain = { tail: Promise.resolve(), waiting: 0 }));
    if (!copy && chain.waiting >= this.d.config.rounds.maxPendingPerViewer) {
      this.d.telemetry.refusals.refuse('rounds', 'CP_ERR_ROUND_VIEWER_BUSY', { limit: 'ROUND_MAX_PENDING_PER_VIEWER' });
      return fail('CP_ERR_ROUND_VIEWER_BUSY');
    }
    chain.waiting++;
    if (h !== undefined) r.pendingKeys.set(h, (r.pendingKeys.get(h) ?? 0) + 1);
    const c = chain;
    c.tail = c.tail.then(async () => {
      let ack: BusAck;
      try {
        ack = await this.execute(r, gw, it, t);
      } catch (err) {
        const code: ErrorCode = isCrowdplayError(err) ? err.code : 'CP_ERR_INTERNAL';
        if (code === 'CP_ERR_INTERNAL') this.d.telemetry.logger.error({ err, channel: this.d.channel, round: r.id }, 'trade failed');
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
    const kind = it.trade.k;
    if (ack.ok) this.d.metrics.trades.add(1, { kind, outcome: 'accepted' });
    else {
      this.d.metrics.trades.add(1, { kind, outcome: 'refused', reason: ack.code ?? 'CP_ERR_INTERNAL' });
      this.d.telemetry.refusals.refuse('rounds', (ack.code ?? 'CP_ERR_INTERNAL') as ErrorCode, { channel: this.d.channel });
    }
    this.d.metrics.tradeAckMs.record(Math.max(0, this.d.now() - started));
    this.d.sendAcks(gw, [ack]);
  }

  /**
   * Runs one stake or trade (the viewer's previous one in this round has
   * finished). The round counts it in flight from the first step, so a lock
   * waits for it and the book and market never change under a lock.
   */
  private async execute(r: Round, gw: string, it: BusIntent, t: BusTrade): Promise<BusAck> {
    if (this.moving) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [this.d.channel]);
    // Without a client key a stake is never a replay: a random key (a gateway's conn and seq restart with it).
    const key = t.key ?? `auto:${randomUUID()}`;
    const h = hashOf(it.viewer, key);
    // A replay of a key already taken is answered from the round even when it closed meanwhile.
    if (!(t.key !== undefined && knownKey(r, t, h)) && (r.state !== 'open' || this.d.now() >= r.row.deadlineAt || this.draining))
      throw new CrowdplayError('CP_ERR_ROUND_CLOSED', [r.id, r.state]);
    r.begin();
    try {
      const joined = this.joining.get(it.viewer);
      if (joined) await joined;
      const o = r.outcomeIdx.get(t.outcome)!;
      await this.d.wallets.ensure(this.d.tenant, it.viewer);
      if (t.k === 'stake') return await this.execStake(r, it, t.points, o, key, h);
      return await this.execMarket(r, it, t, o, h);
    } finally {
      r.end();
    }
  }

  private async execStake(r: Round, it: BusIntent, points: number, o: number, key: string, h: string): Promise<BusAck> {
    const viewer = it.viewer;
    const prior = r.stakeByKey.get(h);
    if (prior) {
      if (prior.outcome !== o || prior.points !== points) throw new CrowdplayError('CP_ERR_ROUND_DUPLICATE_ID', [key, r.id]);
      return this.okAck(it, { cost: points });
    }
    this.checkRoom(r);
    if (!(await this.reserve(viewer, points))) {
      throw new CrowdplayError('CP_ERR_ROUND_INSUFFICIENT_FUNDS', [points, this.d.wallets.available(this.d.tenant, viewer) ?? 0]);
    }
    // Re-check after the awaits: the round may have locked meanwhile.
    if (r.state !== 'open') {
      this.d.wallets.released(this.d.tenant, viewer, points);
      throw new CrowdplayError('CP_ERR_ROUND_CLOSED', [r.id, r.state]);
    }
    const rec: PoolStakeRec = { viewer, outcome: o, points, h, void: false };
    r.stakes.push(rec);
    r.stakeByKey.set(h, rec);
    r.totals[o] = r.totals[o]! + points;
    r.entries++;
    this.d.changed();
    try {
      const res = await this.send(
        this.roundTransfer(
          r,
          `${r.row.uid}:s:${h}`,
          { kind: 'wallet', owner: viewer },
          { kind: 'escrow', owner: r.row.uid },
          points,
          TRANSFER_KIND.stake,
        ),
      );
      this.d.wallets.debited(this.d.tenant, viewer, res.replayed ? null : res.fromBalance);
      return this.okAck(it, { cost: points });
    } catch (err) {
      rec.void = true;
      r.stakeByKey.delete(h);
      r.totals[o] = r.totals[o]! - points;
      r.entries--;
      this.d.changed();
      this.d.wallets.released(this.d.tenant, viewer, points, isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS'));
      throw mapLedgerError(err, points);
    }
  }

  private async execMarket(r: Round, it: BusIntent, t: Exclude<BusTrade, { k: 'stake' }>, o: number, h: string): Promise<BusAck> {
    const m = r.market!;
    const viewer = it.viewer;
    const prior = m.trade(h);
    if (prior === undefined) this.checkRoom(r);
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
      if (t.k !== 'sell') this.d.wallets.released(this.d.tenant, viewer, res.points);
      throw new CrowdplayError('CP_ERR_ROUND_CLOSED', [r.id, r.state]);
    }
    r.entries++;
    this.d.changed();
    if (res.points === 0) return this.okAck(it, fields()); // a sell worth 0 points moves no money
    const uid = r.row.uid;
    const wallet = { kind: 'wallet', owner: viewer } as const;
    const maker = { kind: 'maker', owner: uid } as const;
    try {
      if (t.k === 'sell') {
        const done = await this.send(this.roundTransfer(r, `${uid}:x:${h}`, maker, wallet, res.points, TRANSFER_KIND.sell));
        this.d.wallets.credited(this.d.tenant, viewer, res.points, done.replayed ? null : done.toBalance);
      } else {
        const done = await this.send(this.roundTransfer(r, `${uid}:b:${h}`, wallet, maker, res.points, TRANSFER_KIND.buy));
        this.d.wallets.debited(this.d.tenant, viewer, done.replayed ? null : done.fromBalance);
      }
      return this.okAck(it, fields());
    } catch (err) {
      m.revert(h);
      r.entries--;
      this.d.changed();
      if (t.k !== 'sell')
        this.d.wallets.released(this.d.tenant, viewer, res.points, isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS'));
      throw mapLedgerError(err, res.points);
    }
  }

  /** @throws CrowdplayError CP_ERR_ROUND_FULL at ROUND_MAX_ENTRIES stakes or trades */
  private checkRoom(r: Round): void {
    const max = this.d.config.rounds.maxEntries;
    if (r.entries >= max) throw new CrowdplayError('CP_ERR_ROUND_FULL', [r.id, max]);
  }

  /** Runs a synchronous trade that reserves from the mirror; when it lacks funds, reloads a stale mirror once and tries again. */
  private async withFunds<T>(viewer: string, trade: () => T): Promise<T> {
    try {
      return trade();
    } catch (err) {
      if (!isCrowdplayError(err, 'CP_ERR_MARKET_INSUFFICIENT_FUNDS')) throw err;
      if (!(await this.d.wallets.refreshIfStale(this.d.tenant, viewer))) throw err;
      return trade();
    }
  }

  private async reserve(viewer: string, points: number): Promise<boolean> {
    if (this.d.wallets.reserve(this.d.tenant, viewer, points)) return true;
    if (!(await this.d.wallets.refreshIfStale(this.d.tenant, viewer))) return false;
    return this.d.wallets.reserve(this.d.tenant, viewer, points);
  }

  private okAck(it: BusIntent, fields: Partial<BusAck>): BusAck {
    const ack: BusAck = { conn: it.conn, seq: it.seq, ok: true, ...fields };
    const balance = this.d.wallets.available(this.d.tenant, it.viewer);
    if (balance !== undefined) ack.balance = balance;
    return ack;
  }

  /**
   * Answers viewers that joined: pays the welcome grant once per (channel,
   * viewer) when the game declared one, and sends each its balance. Never rejects.
   */
  async join(gw: string, joins: Array<{ conn: number; viewer: string }>): Promise<void> {
    const out: Array<{ conn: number; frame: BalanceFrame }> = [];
    await Promise.all(
      joins.map(async ({ conn, viewer }) => {
        let done!: () => void;
        const p = new Promise<void>((r) => (done = r));
        this.joining.set(viewer, p);
        try {
          let reason = 'join';
          let delta: number | undefined;
          if (this.welcomeGrant > 0 && !this.draining) {
            // Once per (channel, viewer): a grant already paid at another amount (the game changed it) is a conflict, i.e. paid.
            const res = await this.d.ledger
              .grant(this.d.tenant, viewer, this.welcomeGrant, `welcome:${this.d.channel}:${hashOf(viewer, '#')}`)
              .catch((err: unknown) => {
                if (isCrowdplayError(err, 'CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT')) return { replayed: true, toBalance: null };
                throw err;
              });
            if (!res.replayed) {
              reason = 'welcome';
              delta = this.welcomeGrant;
              this.d.wallets.credited(this.d.tenant, viewer, this.welcomeGrant, res.toBalance);
            }
          }
          await this.d.wallets.ensure(this.d.tenant, viewer);
          const frame: BalanceFrame = { t: 'balance', points: this.d.wallets.available(this.d.tenant, viewer) ?? 0, reason };
          if (delta !== undefined) frame.delta = delta;
          out.push({ conn, frame });
        } catch (err) {
          this.d.telemetry.logger.warn({ err, channel: this.d.channel }, 'join: balance or welcome grant failed');
        } finally {
          if (this.joining.get(viewer) === p) this.joining.delete(viewer);
          done();
        }
      }),
    );
    if (out.length > 0) this.d.sendAcks(gw, [], out);
  }

  /**
   * Charges a paid action (ActionSpec.cost): wallet → house, kind `action`,
   * acked after the commit.
   * @throws CrowdplayError CP_ERR_INTENT_INSUFFICIENT_FUNDS, ledger errors
   */
  async chargeAction(viewer: string, cost: number, idempotencyKey: string): Promise<void> {
    await this.d.wallets.ensure(this.d.tenant, viewer);
    if (!(await this.reserve(viewer, cost))) throw new CrowdplayError('CP_ERR_INTENT_INSUFFICIENT_FUNDS', [cost]);
    try {
      const res = await this.send({
        id: `${this.d.channel}:a:${hashOf(viewer, idempotencyKey)}`,
        tenantId: this.d.tenant,
        from: { kind: 'wallet', owner: viewer },
        to: { kind: 'house', owner: '' },
        amount: cost,
        kind: 'action',
        channelId: this.d.channel,
        epoch: this.d.epoch(),
      });
      this.d.wallets.debited(this.d.tenant, viewer, res.replayed ? null : res.fromBalance);
    } catch (err) {
      this.d.wallets.released(this.d.tenant, viewer, cost, isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS'));
      if (isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS')) throw new CrowdplayError('CP_ERR_INTENT_INSUFFICIENT_FUNDS', [cost]);
      throw err;
    }
  }

  // ------------------------------------------------------------------ clock, recovery, drain

  /** Locks rounds past their deadline and cancels locked ones past ROUND_UNSETTLED_MAX_MS. Call every tick. */
  tick(now: number): void {
    if (this.moving) return;
    const maxUnsettled = this.d.config.rounds.unsettledMaxMs;
    for (const r of this.rounds.values()) {
      if (r.state === 'open' && now >= r.row.deadlineAt) {
        r.state = 'locked';
        this.d.changed();
        void this.serial(r, () => this.lock(r)).catch((err: unknown) => this.logFail(r, err));
      } else if (r.state === 'locked' && !r.expiring && now >= r.row.deadlineAt + maxUnsettled && !this.draining) {
        r.expiring = true;
        void this.cancelRound(r, 'expired').catch((err: unknown) => this.logFail(r, err));
      }
    }
  }

  private logFail(r: Round, err: unknown): void {
    if (isCrowdplayError(err, 'CP_ERR_ROUND_ALREADY_FINAL')) return;
    this.d.telemetry.logger.error(
      { err, channel: this.d.channel, round: r.id },
      'round step failed; it is retried on the next tick or at recovery',
    );
  }

  /**
   * Restores the channel's unfinished rounds after an acquire (see the module
   * comment) and finishes what a crash interrupted. Resolves when the rounds
   * that must be paid or refunded are.
   * @param preloaded the channel's unfinished rounds, read by a bulk acquire (else read here)
   * @param committed the committed transfers of its handed-off open rounds by round uid, read by a bulk acquire
   *   (else each is read when it resumes)
   */
  async recover(preloaded?: readonly RoundRow[], committed?: ReadonlyMap<string, ReadonlyArray<{ id: string; kind: string }>>): Promise<void> {
    const rows = preloaded ?? (await this.d.store.rounds.listUnfinished(this.d.channel));
    this.committed = committed ?? null;
    const resumed: Array<Promise<unknown>> = [];
    const finishing: Array<Promise<unknown>> = [];
    const finish = (r: Round, p: Promise<unknown>): void => void finishing.push(p.catch((err: unknown) => this.logFail(r, err)));
    for (const row of rows) {
      const r = new Round(row);
      this.rounds.set(r.id, r);
      this.d.metrics.roundEvents.add(1, { kind: row.kind, event: 'recovered' });
      if (row.state === 'open' && r.handedOff) resumed.push(this.resume(r));
      else if (row.state === 'open') finish(r, this.cancelRound(r, 'cancelled'));
      else if (row.state === 'settled') finish(r, this.serial(r, () => this.pay(r)));
      else if (row.state === 'cancelled') finish(r, this.serial(r, () => this.finishCancel(r, 'recovered')));
      // 'locked' resumes: settle, cancel or expiry finish it.
    }
    // Per channel at debug: a bulk acquire of 1,500 channels would log a line each; its batch line counts the rounds.
    if (rows.length > 0) this.d.telemetry.logger.debug({ channel: this.d.channel, rounds: rows.length }, 'recovering unfinished rounds');
    // A handed-off round is checked before the channel serves (it stays open). Refunds and payouts of what a
    // crashed owner left are written in the background: each round's steps are serialised (`serial`), it
    // refuses stakes once it is not open, and a move of a channel waiting for them would otherwise last as long
    // as every refund of its batch.
    await Promise.all(resumed);
    this.recovering = Promise.all(finishing).then(() => undefined);
    this.committed = null;
    this.forgetOld();
    this.d.changed();
  }

  /** Resolves once the refunds and payouts that {@link recover} started have finished (tests, drain). Never rejects. */
  async recovered(): Promise<void> {
    await this.recovering;
  }


  /**
   * Takes over an open round handed off by the channel's previous owner:
   * rebuilds its book (a market from its trades) and checks it against the
   * ledger: the round's committed stake / buy / sell transfer ids must be
   * exactly the book's. Then the round stays open (same deadline, book and
   * idempotency ids); else (a book the ledger disagrees with, or one that
   * does not rebuild) it is cancelled and refunded from the ledger as a
   * round that was never handed off.
   */
  private async resume(r: Round): Promise<unknown> {
    const book = r.handedOff!;
    const uid = r.row.uid;
    let expected: string[];
    let kinds: string[];
    try {
      if (book.kind === 'pool') {
        expected = book.stakes.map((s) => `${uid}:s:${s[3] ?? '?'}`);
        kinds = [TransferKinds.stake];
      } else {
        if (!book.market) throw new Error('a market handoff without its trades');
        r.market = Market.restore({ b: r.row.liquidity ?? 1, outcomes: r.row.outcomes.length, wallet: this.wallet }, book.market);
        expected = book.market.trades.filter((t) => t.points > 0).map((t) => `${uid}:${t.kind === 'sell' ? 'x' : 'b'}:${t.id}`);
        kinds = [TransferKinds.buy, TransferKinds.sell];
      }
      // A bulk acquire read every handed-off round's transfers in one query (Ledger.roundTransferIdsMany).
      const preread = this.committed;
      const committed = preread
        ? (preread.get(uid) ?? []).filter((t) => kinds.includes(t.kind)).map((t) => t.id)
        : await this.d.ledger.roundTransferIds(this.d.tenant, uid, kinds);
      expected.sort();
      if (committed.length !== expected.length || committed.some((id, i) => id !== expected[i])) {
        throw new Error(`the ledger holds ${committed.length} transfers of the round, the handed-off book ${expected.length}`);
      }
    } catch (err) {
      this.d.metrics.roundEvents.add(1, { kind: r.row.kind, event: 'handoff_mismatch' });
      this.d.telemetry.logger.error(
        { err, channel: this.d.channel, round: r.id },
        'handed-off round does not match the ledger; refunding it',
      );
      r.market = null;
      return this.cancelRound(r, 'cancelled');
    }
    this.d.metrics.roundEvents.add(1, { kind: r.row.kind, event: 'resumed' });
    this.d.telemetry.logger.debug({ channel: this.d.channel, round: r.id, entries: r.entries }, 'handed-off round resumed open');
    return undefined;
  }

  /**
   * Handoff before the channel moves to another shard: new stakes, trades
   * and opens are refused with CP_ERR_CHANNEL_UNAVAILABLE (retryable; trades
   * queued behind a viewer's in-flight one too), the opens and trades in
   * flight finish (commit or are refused by the ledger), then each open
   * round's live book ({@link RoundBook} with `handoff`: a pool's stakes in
   * order with their ids, a market's trades) is written to its row at the
   * channel's epoch; the row stays `open` and the next owner resumes it
   * (recover). Locked and finished rounds finish their step in progress
   * first (their rows are already what the next owner needs).
   * @param write writes one round's book at the epoch (a bulk handoff coalesces them into one statement,
   *   {@link HandoffWrite}); resolves false when the row was not written (stale or no longer open).
   *   Default: one UPDATE per round (a row no longer open is skipped).
   * @returns the number of open rounds handed off
   * @throws the store's error (CP_ERR_CHANNEL_STALE_EPOCH: the channel moved
   *   already); the caller may call {@link resumeServing} and go on
   */
  async handoff(write: HandoffWrite = (row) => this.writeBook(row)): Promise<number> {
    this.moving = true;
    await Promise.allSettled([...this.openJobs]);
    let n = 0;
    const jobs: Array<Promise<void>> = [];
    for (const r of this.rounds.values()) {
      if (r.final) {
        jobs.push(r.op.then(() => undefined));
        continue;
      }
      jobs.push(
        this.serial(r, async () => {
          if (r.state !== 'open') return;
          await r.idle();
          const mark: HandoffMark = { epoch: this.d.epoch(), atMs: this.d.now() };
          const live = r.bookNow();
          const book: RoundBook =
            live.kind === 'pool'
              ? { ...live, stakes: r.stakes.filter((s) => !s.void).map((s) => [s.viewer, s.outcome, s.points, s.h]), handoff: mark }
              : { ...live, handoff: mark, market: r.market!.handoff() };
          const epoch = this.d.epoch();
          if (!(await write({ channelId: this.d.channel, id: r.id, epoch, book })))
            throw new CrowdplayError('CP_ERR_CHANNEL_STALE_EPOCH', [this.d.channel, epoch]);
          this.d.metrics.roundEvents.add(1, { kind: r.row.kind, event: 'handed_off' });
          n++;
        }),
      );
    }
    await Promise.all(jobs);
    return n;
  }

  private async writeBook(row: Parameters<HandoffWrite>[0]): Promise<boolean> {
    await this.d.store.rounds.update(row.channelId, row.id, row.epoch, { state: 'open', book: row.book });
    return true;
  }

  /** After a failed handoff: takes stakes, trades and opens again (the channel stays here). */
  resumeServing(): void {
    this.moving = false;
  }

  /**
   * Drain: refuses new stakes and trades, cancels and refunds every open or
   * locked round, and waits for every payout or refund in progress.
   */
  async drain(): Promise<void> {
    this.draining = true;
    const jobs: Array<Promise<unknown>> = [];
    for (const r of this.rounds.values()) {
      if (!r.final) jobs.push(this.cancelRound(r, 'drained'));
      else jobs.push(r.op);
    }
    const results = await Promise.allSettled(jobs);
    for (const x of results)
      if (x.status === 'rejected') this.d.telemetry.logger.error({ err: x.reason, channel: this.d.channel }, 'drain: round refund failed');
  }

  /** Stops taking anything; in-flight work finishes on its own (its retries stop). */
  close(): void {
    this.closed = true;
  }
}

/** A ledger refusal as the viewer's ack code. */
function mapLedgerError(err: unknown, points: number): unknown {
  if (isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS'))
    return new CrowdplayError('CP_ERR_ROUND_INSUFFICIENT_FUNDS', [points, '?'], { cause: err });
  return err;
}
