/**
 * One round's LMSR book (Hanson 2003) with integer points at the edge: the
 * shard's own trade path (validation, idempotency, delta-form cost, rounding,
 * reservation against a wallet).
 *
 * Units and representation:
 * - **shares** are whole numbers (a trade is `k ≥ 1` whole shares); `q` and
 *   every position are integers held in float64, exact because they stay
 *   ≤ {@link MAX_QUANTITY} (1e15 < 2^53). Integer shares make `q` exactly the
 *   sum of the positions, so a winning share pays exactly 1 point.
 * - **points** are integers. Charges round **up** (never past k points for k
 *   shares, what they can ever pay) and proceeds round **down**
 *   after a rounding guard ({@link roundingGuard}: 1e-9 + 1e-12·(k + b +
 *   spread of q), over 100× the float error) is added to a charge and taken
 *   from proceeds, so float noise never rounds in the trader's favour. Hence
 *   every charge ≥ the true C(q + k·e_i) − C(q) and all proceeds ≤ the true
 *   C(q) − C(q − k·e_i), and no sequence of trades extracts points: the
 *   maker's income covers C(q) − C(0) ≥ q_w − b·ln n for every outcome w.
 *
 * Money flow: the maker account starts at {@link Market.subsidy} =
 * ceil(b·ln n) points, which the caller funds (from the tenant treasury)
 * when it opens the round. A buy reserves the charge from the viewer's
 * wallet into the maker account; a sell (cash-out) moves the proceeds from
 * the maker account to the wallet; settle pays 1 point per winning share from
 * the maker account. Points are conserved: Σ wallets + maker account is
 * constant. The maker account never goes below zero before cancel: its
 * balance is subsidy + income with income ≥ C(q) − C(0) ≥ max_j q_j − b·ln n
 * ≥ −b·ln n (every q_j ≥ 0), and after settle it holds subsidy + P&L, where
 * P&L ≥ C(q) − C(0) − q_w ≥ −b·ln n (Hanson's bound), so it is ≥ 0.
 */
import { CrowdplayError } from '@crowdplay/protocol';
import {
  MAX_QUANTITY,
  buyCostFromTerms,
  chargePoints,
  lnRestSlow,
  proceedsPoints,
  roundingGuard,
  sellProceedsFromTerms,
  sharesForBudgetFromTerms,
  validateLiquidity,
  validateOutcome,
  validateOutcomeCount,
  worstCaseLoss,
} from './lmsr.ts';

/**
 * The cached weights w_j = exp((q_j − ref)/b) are re-based on the current max
 * (ref = max q, so the largest weight is 1) when the largest weight leaves
 * [W_LOW, W_HIGH]: they never overflow, the leading weight stays a normal
 * float, and |(q_j − ref)/b| ≤ ~345 keeps exp's relative error ≤ ~1e-13.
 */
const W_HIGH = 1e150;
const W_LOW = 1e-150;
// Below this a sum of weights may be subnormal (lost bits): use log space.
const REST_NORMAL = 1e-290;

/** Longest trade id accepted (characters). */
export const MAX_TRADE_ID_LENGTH = 128;
/** Longest viewer id accepted (characters). */
export const MAX_VIEWER_ID_LENGTH = 256;

/**
 * Where a viewer's points come from and go to. The market calls it
 * synchronously inside a trade.
 */
export interface Wallet {
  /**
   * Takes `points` (an integer ≥ 0) from the viewer's available balance.
   * @returns false, changing nothing, when the viewer has fewer than `points`
   */
  reserve(viewer: string, points: number): boolean;
  /** Adds `points` (an integer ≥ 0) to the viewer's available balance. */
  credit(viewer: string, points: number): void;
}

/**
 * A {@link Wallet} in memory: viewer → available integer points, never below
 * zero. For tests and benchmarks (the shard uses the durable ledger).
 */
export class InMemoryWallet implements Wallet {
  readonly #balances = new Map<string, number>();

  /**
   * Grants `points` to a viewer (same as {@link credit}).
   * @throws CrowdplayError `CP_ERR_MARKET_INVALID_QUANTITY` for a non-integer or negative amount
   */
  fund(viewer: string, points: number): void {
    this.credit(viewer, points);
  }

  /** The viewer's available points (0 for an unknown viewer). */
  balance(viewer: string): number {
    return this.#balances.get(viewer) ?? 0;
  }

  /** Sum of every balance (points). */
  total(): number {
    let t = 0;
    for (const v of this.#balances.values()) t += v;
    return t;
  }

  /** Every (viewer, balance) pair, sorted by viewer. */
  balances(): Array<[string, number]> {
    return [...this.#balances.entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }

  /**
   * {@inheritDoc Wallet.reserve}
   * @throws CrowdplayError `CP_ERR_MARKET_INVALID_QUANTITY` for a non-integer or negative amount
   */
  reserve(viewer: string, points: number): boolean {
    checkPoints('points', points);
    const have = this.#balances.get(viewer) ?? 0;
    if (have < points) return false;
    this.#balances.set(viewer, have - points);
    return true;
  }

  /**
   * {@inheritDoc Wallet.credit}
   * @throws CrowdplayError `CP_ERR_MARKET_INVALID_QUANTITY` for a non-integer or negative amount
   */
  credit(viewer: string, points: number): void {
    checkPoints('points', points);
    this.#balances.set(viewer, (this.#balances.get(viewer) ?? 0) + points);
  }
}

/** `open` → (`locked`) → `settled` or `cancelled`. Trades only while `open`. */
export type MarketState = 'open' | 'locked' | 'settled' | 'cancelled';

/** `buy` (k shares, maxCost), `sell` (cash-out: k shares, minProceeds), `budget` (whole shares a budget buys). */
export type TradeKind = 'buy' | 'sell' | 'budget';

/**
 * The outcome of one trade; also what a replay of its id returns. Do not
 * mutate: the market keeps it for idempotent replays.
 */
export interface TradeResult {
  readonly id: string;
  readonly kind: TradeKind;
  readonly viewer: string;
  readonly outcome: number;
  /** What was asked: shares (`buy`, `sell`) or the budget in points (`budget`). */
  readonly requested: number;
  /** The slippage limit: maxCost (`buy`), minProceeds (`sell`), the budget (`budget`); points. */
  readonly limit: number;
  /** Whole shares bought or sold. */
  readonly shares: number;
  /** Integer points charged (`buy`, `budget`) or paid to the viewer (`sell`). */
  readonly points: number;
  /** The viewer's shares of `outcome` after the trade. */
  readonly position: number;
}

/** One viewer's points moved by settle or cancel. */
export interface ViewerPoints {
  readonly viewer: string;
  /** Integer points: paid out (settle), refunded (> 0) or clawed back (< 0) by cancel. */
  readonly points: number;
}

/** What {@link Market.settle} paid. */
export interface SettleResult {
  readonly winner: number;
  /** Per viewer holding winning shares: 1 point per share; sorted by viewer. */
  readonly payouts: readonly ViewerPoints[];
  /** Σ payouts (= q of the winner). */
  readonly totalPayout: number;
  /** Maker's profit (may be negative, ≥ −subsidy): Σ charges − Σ proceeds − totalPayout. */
  readonly makerPnl: number;
  /** What the maker account holds after paying (subsidy + makerPnl ≥ 0), for the treasury. */
  readonly makerBalance: number;
}

/** What {@link Market.cancel} moved. */
export interface CancelResult {
  /**
   * Per viewer with a non-zero net: net paid = Σ charges − Σ proceeds, refunded
   * when > 0, clawed back (wallet.reserve) when < 0 (a profitable cash-out);
   * sorted by viewer.
   */
  readonly refunds: readonly ViewerPoints[];
  /**
   * Claw-backs the viewer's wallet could not cover (all-or-nothing per viewer):
   * the viewer keeps them and the maker account bears them. Points are still
   * conserved; the maker account may then end below its subsidy.
   */
  readonly unrecovered: readonly ViewerPoints[];
  /** What the maker account holds after the refunds, for the treasury. */
  readonly makerBalance: number;
}

/** One viewer's book: shares per outcome and what the market charged and paid. */
export interface ViewerPosition {
  readonly shares: readonly number[];
  /** Σ charges (points). */
  readonly charged: number;
  /** Σ proceeds of sells (points). */
  readonly proceeds: number;
}

/** A deep, plain copy of a market's state (viewers sorted), for tests and persistence. */
export interface MarketSnapshot {
  readonly b: number;
  readonly outcomes: number;
  readonly subsidy: number;
  readonly state: MarketState;
  readonly makerBalance: number;
  readonly q: readonly number[];
  readonly viewers: ReadonlyArray<{ readonly viewer: string } & ViewerPosition>;
  readonly tradeIds: number;
}

/**
 * What an open market needs to continue exactly in another process
 * ({@link Market.handoff} / {@link Market.restore}): its recorded trades in
 * the order they were made, and the reference point of its cached weights.
 * q, every position, charged / proceeds and the maker account are integer
 * sums of the trades, and each weight is exp((q_j − ref)/b) computed from q
 * and ref alone, so the restored market prices the next trade bit for bit as
 * this one would have. Plain JSON.
 */
export interface MarketHandoff {
  readonly v: 1;
  /** The weights' reference point (an integer: a past max of q). */
  readonly ref: number;
  readonly trades: readonly TradeResult[];
}

/** Options of {@link Market}. */
export interface MarketOptions {
  /** Liquidity parameter b (shares), in [1e-6, 1e12]; the maker risks at most b·ln n. */
  readonly b: number;
  /** Number of outcomes n, 2..10. */
  readonly outcomes: number;
  /** Viewers' funds. */
  readonly wallet: Wallet;
}

interface Book {
  readonly shares: Float64Array;
  charged: number;
  proceeds: number;
}

/** Checks an integer point amount (0..MAX_SAFE_INTEGER). */
function checkPoints(what: string, x: number): void {
  if (!Number.isSafeInteger(x) || x < 0) {
    throw new CrowdplayError('CP_ERR_MARKET_INVALID_QUANTITY', [what, String(x), 'a whole number of points ≥ 0']);
  }
}

/** Checks a whole share count or budget (1..MAX_QUANTITY). */
function checkCount(what: string, x: number): void {
  if (!Number.isSafeInteger(x) || x < 1 || x > MAX_QUANTITY) {
    throw new CrowdplayError('CP_ERR_MARKET_INVALID_QUANTITY', [what, String(x), `a whole number in [1, ${MAX_QUANTITY}]`]);
  }
}

function checkId(id: string): void {
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_TRADE_ID_LENGTH) {
    throw new CrowdplayError('CP_ERR_MARKET_INVALID_TRADE', [`the trade id must be a string of 1..${MAX_TRADE_ID_LENGTH} characters`]);
  }
}

function checkViewer(viewer: string): void {
  if (typeof viewer !== 'string' || viewer.length === 0 || viewer.length > MAX_VIEWER_ID_LENGTH) {
    throw new CrowdplayError('CP_ERR_MARKET_INVALID_TRADE', [`the viewer id must be a string of 1..${MAX_VIEWER_ID_LENGTH} characters`]);
  }
}

function byViewer(a: { viewer: string }, b: { viewer: string }): number {
  return a.viewer < b.viewer ? -1 : a.viewer > b.viewer ? 1 : 0;
}

/**
 * One round's LMSR market maker: whole-share trades priced by Hanson's LMSR,
 * charged and paid in integer points through a {@link Wallet}.
 *
 * Every trade carries an idempotency id (1..128 characters, unique within the
 * market): the same id with the same fields returns the original
 * {@link TradeResult} and changes nothing (also after lock, settle or cancel);
 * the same id with other fields throws `CP_ERR_MARKET_DUPLICATE_ID`. A refused
 * trade (bad input, slippage, funds, shares, closed market) changes nothing
 * and does not consume its id, so it may be retried.
 *
 * Errors (`CrowdplayError` codes): `CP_ERR_MARKET_INVALID_TRADE` (ids),
 * `CP_ERR_MARKET_INVALID_QUANTITY`, `CP_ERR_MARKET_UNKNOWN_OUTCOME`,
 * `CP_ERR_MARKET_SLIPPAGE`, `CP_ERR_MARKET_INSUFFICIENT_FUNDS`,
 * `CP_ERR_MARKET_INSUFFICIENT_SHARES`, `CP_ERR_MARKET_BUDGET_TOO_SMALL`,
 * `CP_ERR_MARKET_DUPLICATE_ID`, `CP_ERR_MARKET_CLOSED`,
 * `CP_ERR_MARKET_ALREADY_FINAL`, `CP_ERR_MARKET_INVALID_BOOK` (constructor).
 */
export class Market {
  /** Liquidity parameter (shares). */
  readonly b: number;
  /** Number of outcomes. */
  readonly outcomes: number;
  /** Points the maker account starts with: ceil(b·ln n), the worst-case loss rounded up. */
  readonly subsidy: number;

  readonly #wallet: Wallet;
  readonly #q: Float64Array;
  /** w_j = exp((q_j − #ref)/b): only the traded outcome's weight changes per trade (one exp, not n). */
  readonly #w: Float64Array;
  #ref = 0;
  readonly #books = new Map<string, Book>();
  readonly #trades = new Map<string, TradeResult>();
  readonly #terms = new Float64Array(4);
  #maker: number;
  #state: MarketState = 'open';
  #settled: SettleResult | undefined;
  #cancelled: CancelResult | undefined;

  /**
   * Opens a market with q = 0 (every price 1/n). The caller funds
   * {@link subsidy} points (see {@link Market.subsidyFor}) when it opens the round.
   * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK` for a bad b or outcome count
   */
  constructor(options: MarketOptions) {
    validateLiquidity(options.b);
    validateOutcomeCount(options.outcomes);
    this.b = options.b;
    this.outcomes = options.outcomes;
    this.subsidy = Market.subsidyFor(options.b, options.outcomes);
    this.#wallet = options.wallet;
    this.#q = new Float64Array(options.outcomes);
    this.#w = new Float64Array(options.outcomes).fill(1);
    this.#maker = this.subsidy;
  }

  /**
   * The subsidy (integer points) a market with liquidity `b` and `n` outcomes
   * needs: ceil(b·ln n), Hanson's worst-case maker loss rounded up.
   * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK`
   */
  static subsidyFor(b: number, n: number): number {
    return Math.ceil(worstCaseLoss(b, n));
  }

  /** The market's state. */
  get state(): MarketState {
    return this.#state;
  }

  /** Points in the maker account (subsidy + charges − proceeds − payouts ± refunds). */
  get makerBalance(): number {
    return this.#maker;
  }

  /** Number of recorded (successful) trades. */
  get tradeCount(): number {
    return this.#trades.size;
  }

  /** Outstanding shares per outcome (a copy). */
  quantities(): number[] {
    return Array.from(this.#q);
  }

  /** Current prices p_i (softmax of q/b), each in [0, 1], summing to 1. */
  prices(): number[] {
    const out = new Array<number>(this.outcomes);
    for (let i = 0; i < this.outcomes; i++) {
      this.#prepare(i);
      out[i] = this.#terms[0]!;
    }
    return out;
  }

  /** The viewer's shares of `outcome` (0 when none). */
  position(viewer: string, outcome: number): number {
    return this.#books.get(viewer)?.shares[outcome] ?? 0;
  }

  /** A copy of the viewer's book, or undefined when the viewer never traded. */
  viewer(viewer: string): ViewerPosition | undefined {
    const book = this.#books.get(viewer);
    return book === undefined ? undefined : { shares: Array.from(book.shares), charged: book.charged, proceeds: book.proceeds };
  }

  /** A deep copy of the whole state. */
  snapshot(): MarketSnapshot {
    const viewers = [...this.#books.entries()]
      .map(([viewer, book]) => ({ viewer, shares: Array.from(book.shares), charged: book.charged, proceeds: book.proceeds }))
      .sort(byViewer);
    return {
      b: this.b,
      outcomes: this.outcomes,
      subsidy: this.subsidy,
      state: this.#state,
      makerBalance: this.#maker,
      q: Array.from(this.#q),
      viewers,
      tradeIds: this.#trades.size,
    };
  }

  /**
   * The state an open market continues from in another process (see
   * {@link MarketHandoff}). Only while open.
   * @throws CrowdplayError `CP_ERR_MARKET_CLOSED` when locked, settled or cancelled
   */
  handoff(): MarketHandoff {
    if (this.#state !== 'open') throw new CrowdplayError('CP_ERR_MARKET_CLOSED', [this.#state]);
    return { v: 1, ref: this.#ref, trades: [...this.#trades.values()].map((t) => ({ ...t })) };
  }

  /**
   * An open market rebuilt from {@link Market.handoff}'s output: same q,
   * positions, maker account, trade ids (a trade sent again is a replay) and
   * prices. The wallet is not touched (the trades' points moved when they
   * were made).
   * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK` for a state that is
   *   not one a market of these options can be in (nothing is built)
   */
  static restore(options: MarketOptions, state: MarketHandoff): Market {
    const m = new Market(options);
    const bad = (why: string): never => {
      throw new CrowdplayError('CP_ERR_MARKET_INVALID_BOOK', [`handoff: ${why}`]);
    };
    if (state?.v !== 1 || !Array.isArray(state.trades) || !Number.isSafeInteger(state.ref) || state.ref < 0) bad('not a v1 handoff');
    for (const t of state.trades) {
      if (typeof t !== 'object' || t === null || m.#trades.has(t.id)) bad('a trade is malformed or repeated');
      checkId(t.id);
      checkViewer(t.viewer);
      if (!Number.isInteger(t.outcome) || t.outcome < 0 || t.outcome >= m.outcomes) bad(`trade ${t.id}: outcome out of range`);
      if (!Number.isSafeInteger(t.shares) || t.shares < 1 || !Number.isSafeInteger(t.points) || t.points < 0) bad(`trade ${t.id}: amounts`);
      let book = m.#books.get(t.viewer);
      if (book === undefined) {
        book = { shares: new Float64Array(m.outcomes), charged: 0, proceeds: 0 };
        m.#books.set(t.viewer, book);
      }
      const o = t.outcome;
      if (t.kind === 'sell') {
        if (book.shares[o]! < t.shares) bad(`trade ${t.id}: sells shares not held`);
        book.shares[o] = book.shares[o]! - t.shares;
        m.#q[o] = m.#q[o]! - t.shares;
        book.proceeds += t.points;
        m.#maker -= t.points;
      } else if (t.kind === 'buy' || t.kind === 'budget') {
        book.shares[o] = book.shares[o]! + t.shares;
        m.#q[o] = m.#q[o]! + t.shares;
        if (m.#q[o]! > MAX_QUANTITY) bad(`trade ${t.id}: q over ${MAX_QUANTITY}`);
        book.charged += t.points;
        m.#maker += t.points;
      } else bad(`trade ${t.id}: unknown kind`);
      m.#trades.set(t.id, Object.freeze({ ...t }));
    }
    m.#ref = state.ref;
    for (let j = 0; j < m.outcomes; j++) m.#w[j] = Math.exp((m.#q[j]! - m.#ref) / m.b);
    return m;
  }

  /** The trade recorded under `id`, if any. */
  trade(id: string): TradeResult | undefined {
    return this.#trades.get(id);
  }

  /**
   * The integer charge (points) of buying `shares` whole shares of `outcome`
   * now, without trading.
   * @throws CrowdplayError `CP_ERR_MARKET_UNKNOWN_OUTCOME`, `CP_ERR_MARKET_INVALID_QUANTITY`
   */
  quoteBuy(outcome: number, shares: number): number {
    validateOutcome(outcome, this.outcomes);
    checkCount('shares', shares);
    return this.#charge(outcome, shares);
  }

  /**
   * The integer proceeds (points) of selling `shares` whole shares of
   * `outcome` now, without trading. No viewer's holdings are checked, only
   * that at most the outstanding shares of `outcome` are sold.
   * @throws CrowdplayError `CP_ERR_MARKET_UNKNOWN_OUTCOME`, `CP_ERR_MARKET_INVALID_QUANTITY`,
   *   `CP_ERR_MARKET_INSUFFICIENT_SHARES` (more than the outstanding shares)
   */
  quoteSell(outcome: number, shares: number): number {
    validateOutcome(outcome, this.outcomes);
    checkCount('shares', shares);
    if (shares > this.#q[outcome]!) {
      throw new CrowdplayError('CP_ERR_MARKET_INSUFFICIENT_SHARES', [this.#q[outcome]!, outcome, shares]);
    }
    return this.#proceeds(outcome, shares);
  }

  /**
   * Buys `shares` whole shares of `outcome` for the viewer, charging
   * min(ceil(cost + guard), shares) points through `wallet.reserve`.
   *
   * @param id idempotency id
   * @param maxCost slippage guard: the most points the viewer accepts to pay
   * @throws CrowdplayError `CP_ERR_MARKET_SLIPPAGE` when the charge exceeds
   *   `maxCost`, `CP_ERR_MARKET_INSUFFICIENT_FUNDS` when the wallet refuses,
   *   `CP_ERR_MARKET_INVALID_QUANTITY` (shares not in 1..1e15, q would pass
   *   1e15, maxCost not an integer ≥ 0), and the class's other codes
   */
  buy(id: string, viewer: string, outcome: number, shares: number, maxCost: number): TradeResult {
    const prior = this.#trades.get(id);
    if (prior !== undefined) return replay(prior, 'buy', viewer, outcome, shares, maxCost);
    this.#checkTrade(id, viewer, outcome);
    checkCount('shares', shares);
    checkPoints('maxCost', maxCost);
    this.#checkRoom(outcome, shares);
    const charge = this.#charge(outcome, shares);
    if (charge > maxCost) throw new CrowdplayError('CP_ERR_MARKET_SLIPPAGE', ['cost', charge, maxCost]);
    return this.#applyBuy(id, 'buy', viewer, outcome, shares, maxCost, shares, charge);
  }

  /**
   * Buys the most whole shares of `outcome` whose charge fits in `budget`
   * points (the closed-form inverse of the cost, then checked against the
   * rounded charge).
   *
   * @param budget integer points ≥ 1: the most the viewer pays
   * @throws CrowdplayError `CP_ERR_MARKET_BUDGET_TOO_SMALL` when not one share
   *   fits (only when the outcome is full: one share never costs over 1 point), `CP_ERR_MARKET_INSUFFICIENT_FUNDS`, `CP_ERR_MARKET_INVALID_QUANTITY`,
   *   and the class's other codes
   */
  buyForBudget(id: string, viewer: string, outcome: number, budget: number): TradeResult {
    const prior = this.#trades.get(id);
    if (prior !== undefined) return replay(prior, 'budget', viewer, outcome, budget, budget);
    this.#checkTrade(id, viewer, outcome);
    checkCount('budget', budget);
    const room = MAX_QUANTITY - this.#q[outcome]!;
    const b = this.b;
    const t = this.#terms;
    this.#prepare(outcome); // q does not change below: every probe reuses these terms
    // First estimate, then aim below the budget by the guard the charge will add.
    const rough = sharesForBudgetFromTerms(b, t[0]!, t[1]!, budget);
    const aim = budget - roundingGuard(rough, b, t[3]!);
    let k = Math.min(room, Math.floor(aim > 0 ? sharesForBudgetFromTerms(b, t[0]!, t[1]!, aim) : 0));
    let charge = k > 0 ? this.#chargeAt(k) : 0;
    // The estimate is exact to ~1e-12 relative: at most a step or two to fix.
    for (let step = 0; k > 0 && charge > budget; step++) {
      if (step >= 4) {
        [k, charge] = this.#searchBudget(0, k - 1, budget);
        break;
      }
      k--;
      charge = k > 0 ? this.#chargeAt(k) : 0;
    }
    for (let step = 0; step < 4 && k < room; step++) {
      const next = this.#chargeAt(k + 1);
      if (next > budget) break;
      k++;
      charge = next;
    }
    if (k === 0) throw new CrowdplayError('CP_ERR_MARKET_BUDGET_TOO_SMALL', [budget, outcome]);
    return this.#applyBuy(id, 'budget', viewer, outcome, budget, budget, k, charge);
  }

  /**
   * Sells (cashes out) `shares` whole shares of `outcome` the viewer holds,
   * paying floor(proceeds − guard) points through `wallet.credit`.
   *
   * @param minProceeds slippage guard: the fewest points the viewer accepts
   * @throws CrowdplayError `CP_ERR_MARKET_INSUFFICIENT_SHARES` when the viewer
   *   holds fewer shares, `CP_ERR_MARKET_SLIPPAGE` when the proceeds are below
   *   `minProceeds`, `CP_ERR_MARKET_INVALID_QUANTITY`, and the class's other codes
   */
  sell(id: string, viewer: string, outcome: number, shares: number, minProceeds: number): TradeResult {
    const prior = this.#trades.get(id);
    if (prior !== undefined) return replay(prior, 'sell', viewer, outcome, shares, minProceeds);
    this.#checkTrade(id, viewer, outcome);
    checkCount('shares', shares);
    checkPoints('minProceeds', minProceeds);
    const book = this.#books.get(viewer);
    const held = book === undefined ? 0 : book.shares[outcome]!;
    if (book === undefined || held < shares) {
      throw new CrowdplayError('CP_ERR_MARKET_INSUFFICIENT_SHARES', [held, outcome, shares]);
    }
    const paid = this.#proceeds(outcome, shares);
    if (paid < minProceeds) throw new CrowdplayError('CP_ERR_MARKET_SLIPPAGE', ['pay', paid, minProceeds]);
    this.#wallet.credit(viewer, paid);
    this.#q[outcome] = this.#q[outcome]! - shares;
    this.#w[outcome] = Math.exp((this.#q[outcome]! - this.#ref) / this.b);
    const position = held - shares;
    book.shares[outcome] = position;
    book.proceeds += paid;
    this.#maker -= paid;
    const result: TradeResult = {
      id,
      kind: 'sell',
      viewer,
      outcome,
      requested: shares,
      limit: minProceeds,
      shares,
      points: paid,
      position,
    };
    this.#trades.set(id, result);
    return result;
  }

  /**
   * Undoes a recorded trade in the book: q, the viewer's position, charged or
   * proceeds, and the maker account go back by exactly what the trade moved,
   * and its id is forgotten (it may be used again). The wallet is NOT
   * touched: the caller moves the points back (it is the caller whose
   * durable write of the trade failed, so it knows where they are). Only
   * while the market is open.
   *
   * Other trades priced after this one keep their prices: undoing a buy of
   * outcome i after others traded is like selling it back at its original
   * charge, so the maker's bound b·ln n may be off by the price move since;
   * callers undo only trades their ledger refused (rare), never as a feature.
   *
   * @returns the undone trade, or undefined when no trade has this id
   * @throws CrowdplayError `CP_ERR_MARKET_CLOSED` when not open;
   *   `CP_ERR_MARKET_INSUFFICIENT_SHARES` when undoing a buy whose shares the
   *   viewer has sold since (nothing changes)
   */
  revert(id: string): TradeResult | undefined {
    const t = this.#trades.get(id);
    if (t === undefined) return undefined;
    if (this.#state !== 'open') throw new CrowdplayError('CP_ERR_MARKET_CLOSED', [this.#state]);
    const book = this.#books.get(t.viewer)!;
    const o = t.outcome;
    if (t.kind === 'sell') {
      this.#q[o] = this.#q[o]! + t.shares;
      book.shares[o] = book.shares[o]! + t.shares;
      book.proceeds -= t.points;
      this.#maker += t.points;
    } else {
      if (book.shares[o]! < t.shares) throw new CrowdplayError('CP_ERR_MARKET_INSUFFICIENT_SHARES', [book.shares[o]!, o, t.shares]);
      this.#q[o] = this.#q[o]! - t.shares;
      book.shares[o] = book.shares[o]! - t.shares;
      book.charged -= t.points;
      this.#maker -= t.points;
    }
    this.#w[o] = Math.exp((this.#q[o]! - this.#ref) / this.b);
    this.#trades.delete(id);
    return t;
  }

  /**
   * Stops trading (at the round's deadline); settle or cancel follow. Calling
   * it again, or after settle/cancel, does nothing.
   */
  lock(): void {
    if (this.#state === 'open') this.#state = 'locked';
  }

  /**
   * Locks the market, then pays each viewer 1 point per share of `winner`
   * (wallet.credit) from the maker account. Idempotent: settling again with
   * the same winner returns the first result and pays nothing.
   *
   * @throws CrowdplayError `CP_ERR_MARKET_UNKNOWN_OUTCOME`,
   *   `CP_ERR_MARKET_ALREADY_FINAL` when already cancelled or settled with
   *   another winner (nothing changes)
   */
  settle(winner: number): SettleResult {
    validateOutcome(winner, this.outcomes);
    if (this.#settled !== undefined) {
      if (this.#settled.winner === winner) return this.#settled;
      throw new CrowdplayError('CP_ERR_MARKET_ALREADY_FINAL', [`settled with outcome ${this.#settled.winner}`]);
    }
    if (this.#cancelled !== undefined) throw new CrowdplayError('CP_ERR_MARKET_ALREADY_FINAL', ['cancelled']);
    this.#state = 'locked';
    const payouts: ViewerPoints[] = [];
    let totalPayout = 0;
    for (const [viewer, book] of this.#books) {
      const points = book.shares[winner]!;
      if (points > 0) {
        payouts.push({ viewer, points });
        totalPayout += points;
      }
    }
    payouts.sort(byViewer);
    for (const p of payouts) this.#wallet.credit(p.viewer, p.points);
    const makerPnl = this.#maker - this.subsidy - totalPayout;
    this.#maker -= totalPayout;
    this.#state = 'settled';
    this.#settled = Object.freeze({ winner, payouts: Object.freeze(payouts), totalPayout, makerPnl, makerBalance: this.#maker });
    return this.#settled;
  }

  /**
   * Cancels the round: every viewer gets back their net paid (Σ charges −
   * Σ proceeds), so everyone is exactly where they started. A viewer whose
   * net is negative (cashed out at a profit) has it clawed back with
   * `wallet.reserve`; if the wallet no longer holds it the viewer keeps it and
   * it is listed in `unrecovered` (no wallet ever goes negative). Positions
   * stay recorded. Idempotent: a second cancel returns the first result.
   *
   * @throws CrowdplayError `CP_ERR_MARKET_ALREADY_FINAL` when already settled
   */
  cancel(): CancelResult {
    if (this.#cancelled !== undefined) return this.#cancelled;
    if (this.#settled !== undefined)
      throw new CrowdplayError('CP_ERR_MARKET_ALREADY_FINAL', [`settled with outcome ${this.#settled.winner}`]);
    this.#state = 'locked';
    const nets: ViewerPoints[] = [];
    for (const [viewer, book] of this.#books) {
      const net = book.charged - book.proceeds;
      if (net !== 0) nets.push({ viewer, points: net });
    }
    nets.sort(byViewer);
    const refunds: ViewerPoints[] = [];
    const unrecovered: ViewerPoints[] = [];
    for (const r of nets) {
      if (r.points > 0) {
        this.#wallet.credit(r.viewer, r.points);
        this.#maker -= r.points;
        refunds.push(r);
      } else if (this.#wallet.reserve(r.viewer, -r.points)) {
        this.#maker -= r.points;
        refunds.push(r);
      } else {
        unrecovered.push(r);
      }
    }
    this.#state = 'cancelled';
    this.#cancelled = Object.freeze({
      refunds: Object.freeze(refunds),
      unrecovered: Object.freeze(unrecovered),
      makerBalance: this.#maker,
    });
    return this.#cancelled;
  }

  #checkTrade(id: string, viewer: string, outcome: number): void {
    checkId(id);
    checkViewer(viewer);
    if (this.#state !== 'open') throw new CrowdplayError('CP_ERR_MARKET_CLOSED', [this.#state]);
    validateOutcome(outcome, this.outcomes);
  }

  #checkRoom(outcome: number, shares: number): void {
    const room = MAX_QUANTITY - this.#q[outcome]!;
    if (shares > room) {
      throw new CrowdplayError('CP_ERR_MARKET_INVALID_QUANTITY', [
        'shares',
        shares,
        `at most ${room} (outcome ${outcome} is near ${MAX_QUANTITY} shares)`,
      ]);
    }
  }

  /**
   * Fills #terms for outcome i like `outcomeTerms` (p_i, ln p_i, ln(1 − p_i),
   * spread of q), from the cached weights: n additions and two logs, no exp
   * unless the weights need re-basing.
   */
  #prepare(i: number): void {
    const q = this.#q;
    const w = this.#w;
    const n = this.outcomes;
    let sum = 0;
    let rest = 0;
    let wmax = 0;
    let qmax = q[0]!;
    let qmin = qmax;
    for (let j = 0; j < n; j++) {
      const x = w[j]!;
      sum += x;
      if (j !== i) rest += x;
      if (x > wmax) wmax = x;
      const y = q[j]!;
      if (y > qmax) qmax = y;
      else if (y < qmin) qmin = y;
    }
    if (!(wmax <= W_HIGH && wmax >= W_LOW)) {
      this.#ref = qmax;
      sum = 0;
      rest = 0;
      for (let j = 0; j < n; j++) {
        const x = Math.exp((q[j]! - qmax) / this.b);
        w[j] = x;
        sum += x;
        if (j !== i) rest += x;
      }
    }
    const lnSum = Math.log(sum);
    const t = this.#terms;
    t[0] = w[i]! / sum;
    t[1] = (q[i]! - this.#ref) / this.b - lnSum;
    t[2] = (rest >= REST_NORMAL ? Math.log(rest) : lnRestSlow(q, this.b, i, this.#ref)) - lnSum;
    t[3] = qmax - qmin;
  }

  /** Integer charge of buying k shares of `outcome` at the current q. */
  #charge(outcome: number, k: number): number {
    this.#prepare(outcome);
    return this.#chargeAt(k);
  }

  /** Integer charge of buying k shares of the outcome #terms was prepared for. */
  #chargeAt(k: number): number {
    const t = this.#terms;
    const amount = buyCostFromTerms(this.b, t[0]!, t[1]!, k);
    return chargePoints(amount, roundingGuard(k, this.b, t[3]!), k);
  }

  /** Integer proceeds of selling k shares of `outcome` at the current q. */
  #proceeds(outcome: number, k: number): number {
    this.#prepare(outcome);
    const t = this.#terms;
    const amount = sellProceedsFromTerms(this.b, t[0]!, t[1]!, t[2]!, k);
    return proceedsPoints(amount, roundingGuard(k, this.b, t[3]!));
  }

  /** Largest k in [lo, hi] with charge(k) ≤ budget (charge is increasing in k; #terms prepared); [0, 0] if none. */
  #searchBudget(lo: number, hi: number, budget: number): [number, number] {
    let bestK = 0;
    let bestCharge = 0;
    while (lo <= hi) {
      const mid = Math.floor((lo + hi) / 2);
      const c = mid > 0 ? this.#chargeAt(mid) : 0;
      if (c <= budget) {
        bestK = mid;
        bestCharge = c;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return [bestK, bestCharge];
  }

  #applyBuy(
    id: string,
    kind: TradeKind,
    viewer: string,
    outcome: number,
    requested: number,
    limit: number,
    shares: number,
    charge: number,
  ): TradeResult {
    if (!this.#wallet.reserve(viewer, charge)) throw new CrowdplayError('CP_ERR_MARKET_INSUFFICIENT_FUNDS', [charge]);
    let book = this.#books.get(viewer);
    if (book === undefined) {
      book = { shares: new Float64Array(this.outcomes), charged: 0, proceeds: 0 };
      this.#books.set(viewer, book);
    }
    this.#q[outcome] = this.#q[outcome]! + shares;
    this.#w[outcome] = Math.exp((this.#q[outcome]! - this.#ref) / this.b);
    const position = book.shares[outcome]! + shares;
    book.shares[outcome] = position;
    book.charged += charge;
    this.#maker += charge;
    const result: TradeResult = { id, kind, viewer, outcome, requested, limit, shares, points: charge, position };
    this.#trades.set(id, result);
    return result;
  }
}

/** The recorded result when the fields match, else `CP_ERR_MARKET_DUPLICATE_ID`. */
function replay(prior: TradeResult, kind: TradeKind, viewer: string, outcome: number, requested: number, limit: number): TradeResult {
  if (
    prior.kind === kind &&
    prior.viewer === viewer &&
    prior.outcome === outcome &&
    prior.requested === requested &&
    prior.limit === limit
  ) {
    return prior;
  }
  throw new CrowdplayError('CP_ERR_MARKET_DUPLICATE_ID', [prior.id]);
}
