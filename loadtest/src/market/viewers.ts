/**
 * The market scenario's viewers, in this process: N funded viewer
 * connections, each trading in a CLOSED LOOP (its next trade is sent when
 * the previous one's ack arrived, as a human clicks, and not sooner than
 * 1 / ratePerViewer after its previous send), until T trades have been sent
 * in all. Each viewer keeps its own book (points, positions, stakes) from its
 * acks and checks every ok ack against it.
 *
 * The trade mix (`MIX_PCT`): buy with a budget of 10–200 points, buy 10–300
 * whole shares with a maxCost from the last prices seen (+5 %), sell 20–60 %
 * of a position it holds with a minProceeds (−5 %), stake 10–200 points on
 * the pool round. Each trade carries a fresh idempotency key.
 */
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { isCrowdplayError, type ActAck, type BalanceFrame, type ChannelUpdate } from '@crowdplay/protocol';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import { newHistogram, recordUs, summarize, type Histogram, type LatencySummary } from '../hist.ts';
import { TRADE_KINDS, type CheckResult, type TradeCounts, type TradeKind } from './report.ts';

/** Percent of trades of each kind; a sell drawn by a viewer holding no shares becomes a budget buy. */
export const MIX_PCT: Readonly<Record<TradeKind, number>> = Object.freeze({ budgetBuy: 35, sharesBuy: 20, sell: 20, stake: 25 });

/**
 * Refusal codes that are a legitimate answer to a trade in this scenario (the
 * price moved past the limit, a budget too small, not enough shares or
 * points); any other refusal code is `unexpected`.
 */
export const LEGIT_REFUSALS: ReadonlySet<string> = new Set([
  'CP_ERR_MARKET_SLIPPAGE',
  'CP_ERR_MARKET_INSUFFICIENT_SHARES',
  'CP_ERR_MARKET_BUDGET_TOO_SMALL',
  'CP_ERR_MARKET_INSUFFICIENT_FUNDS',
  'CP_ERR_ROUND_INSUFFICIENT_FUNDS',
]);

/** Slack on the limits derived from the last prices seen: maxCost +5 % (+1), minProceeds −5 % (−1). */
const SLIPPAGE = 0.05;
const MAX_SAMPLES = 10;

/** The rounds of one channel. */
export interface ChannelRounds {
  channel: string;
  market: string;
  pool: string;
}

export interface CrowdConfig {
  /** Gateway base URL. */
  url: string;
  /** One entry per viewer: its id (JWT `sub`), token and channel index into `rounds`. */
  viewers: Array<{ id: string; token: string; channel: number }>;
  rounds: ChannelRounds[];
  outcomes: string[];
  /** Points each viewer was granted (its balance before trading). */
  grantPoints: number;
  /** LMSR liquidity b of the market rounds (for limit estimates before the first update). */
  liquidity: number;
  /** Trades to send in all. */
  trades: number;
  /** Most trades per second one viewer sends (0 = no pacing). */
  ratePerViewer: number;
  /** A trade without an ack this long after its send is `failed`, ms. */
  ackTimeoutMs: number;
  welcomeDeadlineMs: number;
  /** Uniform [0, 1) source (tests). @defaultValue Math.random */
  random?: () => number;
}

interface Pending {
  kind: TradeKind;
  outcome: number;
  sentAt: number;
  /** budgetBuy: budget; sharesBuy: maxCost; sell: minProceeds; stake: points. */
  limit: number;
  /** sharesBuy, sell: shares asked for. */
  shares: number;
}

interface MarketView {
  ev: number;
  b: number;
  q: number[];
}

interface Viewer {
  id: string;
  channel: number;
  token: string;
  client: ViewerClient | null;
  connected: boolean;
  closedByUs: boolean;
  /** Expected available points: grant − costs + proceeds (before payouts). */
  points: number;
  /** Market shares held per outcome, from our own arithmetic on the acks. */
  position: number[];
  /** Points staked in the pool round per outcome. */
  staked: number[];
  /** A trade failed (no ack in time, socket closed): the book is no longer known; skipped by the balance check. */
  uncertain: boolean;
  lastSendAt: number;
  nextKey: number;
  /** Balance frames received (payouts, refunds, joins). */
  frames: BalanceFrame[];
  joinPoints: number | null;
}

/** Points moved by ok trades: paid for buys, received for sells, staked. */
export interface Volume {
  buyPoints: number;
  sellPoints: number;
  stakePoints: number;
}

/** Totals of a finished trading phase. */
export interface CrowdResult {
  counts: TradeCounts;
  byKind: Record<TradeKind, TradeCounts>;
  unexpected: number;
  failedByCode: Record<string, number>;
  late: number;
  volume: Volume;
  ack: LatencySummary;
  ackByKind: Record<TradeKind, LatencySummary>;
  /** performance.now() of the first send and of the last answer (ack or failure). */
  firstSendAt: number | null;
  lastAnswerAt: number | null;
  acks: CheckResult;
}

function emptyCounts(): TradeCounts {
  return { sent: 0, acked: 0, ok: 0, refused: {}, failed: 0 };
}

function bump(map: Record<string, number>, key: string, n = 1): void {
  map[key] = (map[key] ?? 0) + n;
}

function codeOf(err: unknown): string {
  if (!isCrowdplayError(err)) return err instanceof Error ? err.name : 'unknown';
  return err.code;
}

/** LMSR cost function b·ln Σ exp(q_i / b), computed stably. */
function lmsrCost(b: number, q: number[]): number {
  const m = Math.max(...q.map((x) => x / b));
  return b * (m + Math.log(q.reduce((s, x) => s + Math.exp(x / b - m), 0)));
}

/** Points to buy `shares` of outcome `i` at `q` (positive), or received for selling them (negative shares). */
function lmsrDelta(b: number, q: number[], i: number, shares: number): number {
  const after = q.map((x, j) => (j === i ? x + shares : x));
  return lmsrCost(b, after) - lmsrCost(b, q);
}

/**
 * The viewers of one run. Life: `connectAll()` → `trade()` (resolves when T
 * trades were sent and each answered or failed) → the coordinator settles →
 * `waitForPayouts()` → `checkBalances()` → `close()`.
 */
export class MarketCrowd {
  readonly viewers: Viewer[];
  readonly counts: TradeCounts = emptyCounts();
  readonly byKind: Record<TradeKind, TradeCounts>;
  readonly failedByCode: Record<string, number> = {};
  readonly connectFailedByCode: Record<string, number> = {};
  readonly droppedByCode: Record<string, number> = {};
  readonly errorsByCode: Record<string, number> = {};
  unexpected = 0;
  late = 0;
  readonly volume: Volume = { buyPoints: 0, sellPoints: 0, stakePoints: 0 };
  connected = 0;
  connectFailed = 0;
  dropped = 0;
  readonly ack: Histogram = newHistogram();
  readonly ackByKind: Record<TradeKind, Histogram>;
  readonly connect: Histogram = newHistogram();
  readonly ackCheck: CheckResult = { checked: 0, mismatches: 0, samples: [] };
  firstSendAt: number | null = null;
  lastAnswerAt: number | null = null;
  #issued = 0;
  #stop = false;
  readonly #markets: Array<MarketView | null>;
  readonly #random: () => number;

  constructor(readonly cfg: CrowdConfig) {
    this.#random = cfg.random ?? Math.random;
    const n = cfg.outcomes.length;
    this.viewers = cfg.viewers.map((v) => ({
      id: v.id,
      channel: v.channel,
      token: v.token,
      client: null,
      connected: false,
      closedByUs: false,
      points: cfg.grantPoints,
      position: new Array<number>(n).fill(0),
      staked: new Array<number>(n).fill(0),
      uncertain: false,
      lastSendAt: -Infinity,
      nextKey: 0,
      frames: [],
      joinPoints: null,
    }));
    this.byKind = Object.fromEntries(TRADE_KINDS.map((k) => [k, emptyCounts()])) as Record<TradeKind, TradeCounts>;
    this.ackByKind = Object.fromEntries(TRADE_KINDS.map((k) => [k, newHistogram()])) as Record<TradeKind, Histogram>;
    this.#markets = cfg.rounds.map(() => null);
  }

  /** Trades sent so far. */
  get issued(): number {
    return this.#issued;
  }

  /** Stops issuing new trades (the budget ran out); trades in flight are still answered. */
  stop(): void {
    this.#stop = true;
  }

  #mismatch(what: string): void {
    this.ackCheck.mismatches++;
    if (this.ackCheck.samples.length < MAX_SAMPLES) this.ackCheck.samples.push(what);
  }

  /**
   * Connects every viewer, `concurrency` at a time; resolves when each has a
   * welcome or has failed. Failures are counted (`connectFailed`, by code), not thrown.
   */
  async connectAll(concurrency = 50): Promise<void> {
    let next = 0;
    const one = async (): Promise<void> => {
      while (next < this.viewers.length) {
        const v = this.viewers[next++]!;
        await this.#connectOne(v);
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, this.viewers.length) }, one));
  }

  async #connectOne(v: Viewer): Promise<void> {
    const rounds = this.cfg.rounds[v.channel]!;
    let client: ViewerClient;
    try {
      client = new ViewerClient({
        url: this.cfg.url,
        channel: rounds.channel,
        token: v.token,
        WebSocket,
        autoReconnect: false,
        welcomeDeadlineMs: this.cfg.welcomeDeadlineMs,
        closeDeadlineMs: 3_000,
        wsOptions: { perMessageDeflate: false, handshakeTimeout: this.cfg.welcomeDeadlineMs },
      });
    } catch (err) {
      this.connectFailed++;
      bump(this.connectFailedByCode, codeOf(err));
      return;
    }
    v.client = client;
    client.on('update', (u) => this.#onUpdate(v.channel, u));
    client.on('balance', (f) => {
      if (f.reason === 'join') {
        v.joinPoints = f.points;
        this.ackCheck.checked++;
        if (f.points !== this.cfg.grantPoints) this.#mismatch(`${v.id}: join balance ${f.points}, granted ${this.cfg.grantPoints}`);
      } else v.frames.push(f);
    });
    client.on('error', (e) => bump(this.errorsByCode, e.code));
    client.on('close', (code) => {
      if (v.connected && !v.closedByUs) {
        v.connected = false;
        this.dropped++;
        bump(this.droppedByCode, String(code));
      }
    });
    const t = performance.now();
    try {
      await client.connect();
      this.connected++;
      v.connected = true;
      recordUs(this.connect, (performance.now() - t) * 1000);
    } catch (err) {
      this.connectFailed++;
      bump(this.connectFailedByCode, codeOf(err));
    }
  }

  #onUpdate(channel: number, u: ChannelUpdate): void {
    const cur = this.#markets[channel];
    if (cur && cur.ev >= u.ev) return;
    const id = this.cfg.rounds[channel]!.market;
    const r = u.rounds?.find((x) => x.id === id);
    if (r?.q && typeof r.b === 'number') this.#markets[channel] = { ev: u.ev, b: r.b, q: [...r.q] };
  }

  /**
   * Runs the closed loops until `trades` trades were sent (or `stop()`), and
   * every sent trade was answered or failed. Viewer i starts at a random
   * point of its first pacing interval, so the crowd does not start in step.
   */
  async trade(): Promise<void> {
    const gapMs = this.cfg.ratePerViewer > 0 ? 1000 / this.cfg.ratePerViewer : 0;
    const loops = this.viewers
      .filter((v) => v.connected)
      .map(async (v) => {
        await sleep(this.#random() * Math.max(gapMs, 10));
        for (;;) {
          const wait = v.lastSendAt + gapMs - performance.now();
          if (wait > 0) await sleep(wait);
          if (this.#stop || this.#issued >= this.cfg.trades || !v.connected) return;
          this.#issued++;
          await this.#tradeOnce(v);
        }
      });
    await Promise.all(loops);
  }

  #pick(): TradeKind {
    let x = this.#random() * 100;
    for (const k of TRADE_KINDS) {
      x -= MIX_PCT[k];
      if (x < 0) return k;
    }
    return 'stake';
  }

  #int(lo: number, hi: number): number {
    return lo + Math.floor(this.#random() * (hi - lo + 1));
  }

  async #tradeOnce(v: Viewer): Promise<void> {
    const client = v.client!;
    const rounds = this.cfg.rounds[v.channel]!;
    const n = this.cfg.outcomes.length;
    const view = this.#markets[v.channel] ?? { ev: 0, b: this.cfg.liquidity, q: new Array<number>(n).fill(0) };
    let kind = this.#pick();
    let outcome = this.#int(0, n - 1);
    if (kind === 'sell') {
      const held = v.position.map((s, i) => (s > 0 ? i : -1)).filter((i) => i >= 0);
      if (held.length === 0) kind = 'budgetBuy';
      else outcome = held[this.#int(0, held.length - 1)]!;
    }
    const name = this.cfg.outcomes[outcome]!;
    const key = `t${++v.nextKey}`;
    const p: Pending = { kind, outcome, sentAt: 0, limit: 0, shares: 0 };
    let promise: Promise<ActAck>;
    try {
      switch (kind) {
        case 'budgetBuy':
          p.limit = this.#int(10, 200);
          promise = client.buy(rounds.market, name, { budget: p.limit }, { key });
          break;
        case 'sharesBuy':
          p.shares = this.#int(10, 300);
          p.limit = Math.ceil(lmsrDelta(view.b, view.q, outcome, p.shares) * (1 + SLIPPAGE)) + 1;
          promise = client.buy(rounds.market, name, { shares: p.shares, maxCost: p.limit }, { key });
          break;
        case 'sell': {
          const held = v.position[outcome]!;
          p.shares = Math.max(1, Math.round(held * (0.2 + 0.4 * this.#random())));
          p.limit = Math.max(0, Math.floor(-lmsrDelta(view.b, view.q, outcome, -p.shares) * (1 - SLIPPAGE)) - 1);
          promise = client.sell(rounds.market, name, p.shares, p.limit, { key });
          break;
        }
        case 'stake':
          p.limit = this.#int(10, 200);
          promise = client.stake(rounds.pool, name, p.limit, { key });
          break;
      }
    } catch (err) {
      // the SDK validates synchronously in a promise; this is for safety only
      promise = Promise.reject(err);
    }
    p.sentAt = performance.now();
    v.lastSendAt = p.sentAt;
    this.firstSendAt ??= p.sentAt;
    this.counts.sent++;
    this.byKind[kind].sent++;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let timedOut = false;
    const timeout = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => {
        timedOut = true;
        resolve('timeout');
      }, this.cfg.ackTimeoutMs);
    });
    const answer = await Promise.race([
      promise.then(
        (ack) => {
          if (timedOut) this.late++;
          return ack;
        },
        (err: unknown) => err as Error,
      ),
      timeout,
    ]);
    clearTimeout(timer);
    this.lastAnswerAt = performance.now();
    if (answer === 'timeout' || answer instanceof Error) {
      v.uncertain = true;
      this.counts.failed++;
      this.byKind[kind].failed++;
      bump(this.failedByCode, answer === 'timeout' ? 'timeout' : codeOf(answer));
      return;
    }
    const ack = answer;
    const us = (this.lastAnswerAt - p.sentAt) * 1000;
    recordUs(this.ack, us);
    recordUs(this.ackByKind[kind], us);
    this.counts.acked++;
    this.byKind[kind].acked++;
    if (!ack.ok) {
      const code = ack.code ?? 'no-code';
      bump(this.counts.refused, code);
      bump(this.byKind[kind].refused, code);
      if (!LEGIT_REFUSALS.has(code)) this.unexpected++;
      return;
    }
    this.counts.ok++;
    this.byKind[kind].ok++;
    this.#book(v, p, ack);
  }

  /** Applies an ok ack to the viewer's book, checking it field by field. */
  #book(v: Viewer, p: Pending, ack: ActAck): void {
    this.ackCheck.checked++;
    const wrong: string[] = [];
    const before = v.points;
    const pos = v.position[p.outcome]!;
    const cost = ack.cost ?? 0;
    if (p.kind === 'stake') {
      if (cost !== p.limit) wrong.push(`cost ${ack.cost} ≠ points ${p.limit}`);
      v.points -= p.limit;
      v.staked[p.outcome]! += p.limit;
      this.volume.stakePoints += p.limit;
    } else if (p.kind === 'budgetBuy' || p.kind === 'sharesBuy') {
      const shares = ack.shares;
      if (typeof shares !== 'number' || !Number.isInteger(shares) || shares < 1) wrong.push(`shares ${shares}`);
      else if (p.kind === 'sharesBuy' && shares !== p.shares) wrong.push(`shares ${shares} ≠ asked ${p.shares}`);
      if (!Number.isInteger(cost) || cost < 1 || cost > p.limit) {
        wrong.push(`cost ${ack.cost} outside [1, ${p.limit}] (${p.kind === 'budgetBuy' ? 'budget' : 'maxCost'})`);
      }
      v.points -= cost;
      v.position[p.outcome] = pos + (shares ?? 0);
      this.volume.buyPoints += cost;
    } else {
      const proceeds = ack.proceeds;
      if (ack.shares !== p.shares) wrong.push(`shares ${ack.shares} ≠ asked ${p.shares}`);
      if (typeof proceeds !== 'number' || !Number.isInteger(proceeds) || proceeds < p.limit) {
        wrong.push(`proceeds ${proceeds} below minProceeds ${p.limit}`);
      }
      if (cost !== 0) wrong.push(`cost ${cost} on a sell`);
      v.points += (proceeds ?? 0) - cost;
      v.position[p.outcome] = pos - p.shares;
      this.volume.sellPoints += proceeds ?? 0;
    }
    if (p.kind !== 'stake' && ack.position !== v.position[p.outcome]) {
      wrong.push(`position ${ack.position} ≠ ${pos} ${p.kind === 'sell' ? '−' : '+'} shares = ${v.position[p.outcome]}`);
    }
    if (ack.balance !== v.points) wrong.push(`balance ${ack.balance} ≠ ${before} → ${v.points}`);
    if (wrong.length > 0) this.#mismatch(`${v.id} ${p.kind} ${this.cfg.outcomes[p.outcome]} seq ${ack.seq}: ${wrong.join('; ')}`);
    // Follow the server where it answered, so one wrong field is reported once and not again at every later ack.
    if (typeof ack.position === 'number' && p.kind !== 'stake') v.position[p.outcome] = ack.position;
  }

  /** Per channel: the market payout each viewer is owed if `winner` wins (shares held of it). */
  marketPayoutsOwed(winner: number): Map<Viewer, number> {
    const owed = new Map<Viewer, number>();
    for (const v of this.viewers) if ((v.position[winner] ?? 0) > 0) owed.set(v, v.position[winner]!);
    return owed;
  }

  /**
   * Waits (up to `deadlineMs`) for the payout frames of the settled rounds:
   * one `payout` frame per viewer holding winning shares, and one `payout` or
   * `refund` frame per viewer who staked in a pool that has winning stakes
   * (every staker, when it has none).
   */
  async waitForPayouts(marketWinner: number, poolWinner: number, deadlineMs: number): Promise<void> {
    const poolHasWinners = this.cfg.rounds.map((_, c) => this.viewers.some((w) => w.channel === c && (w.staked[poolWinner] ?? 0) > 0));
    const expecting = (): number => {
      let missing = 0;
      for (const v of this.viewers) {
        if (!v.connected) continue;
        const r = this.cfg.rounds[v.channel]!;
        if ((v.position[marketWinner] ?? 0) > 0 && !v.frames.some((f) => f.round === r.market)) missing++;
        const owed = poolHasWinners[v.channel] ? (v.staked[poolWinner] ?? 0) > 0 : v.staked.some((s) => s > 0);
        if (owed && !v.frames.some((f) => f.round === r.pool)) missing++;
      }
      return missing;
    };
    const until = performance.now() + deadlineMs;
    while (expecting() > 0 && performance.now() < until) await sleep(50);
  }

  /** Market payouts: expected (winning shares held) and paid (balance frames), in points and viewers. */
  marketPayouts(winner: number): { expected: number; paid: number; viewersExpected: number; viewersPaid: number } {
    let expected = 0;
    let paid = 0;
    let viewersExpected = 0;
    let viewersPaid = 0;
    for (const v of this.viewers) {
      const r = this.cfg.rounds[v.channel]!;
      const owed = v.position[winner] ?? 0;
      if (owed > 0) {
        expected += owed;
        viewersExpected++;
      }
      const got = v.frames.filter((f) => f.round === r.market).reduce((s, f) => s + (f.delta ?? 0), 0);
      if (got !== 0) viewersPaid++;
      paid += got;
    }
    return { expected, paid, viewersExpected, viewersPaid };
  }

  /** Pool: points staked (ok acks) and paid back (payout or refund frames). */
  poolPayouts(): { staked: number; paid: number; viewersPaid: number } {
    let staked = 0;
    let paid = 0;
    let viewersPaid = 0;
    for (const v of this.viewers) {
      const r = this.cfg.rounds[v.channel]!;
      staked += v.staked.reduce((a, b) => a + b, 0);
      const got = v.frames.filter((f) => f.round === r.pool).reduce((s, f) => s + (f.delta ?? 0), 0);
      if (got !== 0) viewersPaid++;
      paid += got;
    }
    return { staked, paid, viewersPaid };
  }

  /**
   * Compares each viewer's wallet as the server reports it (`balanceOf`)
   * with grant − costs + proceeds + winning shares (market) + pool payout
   * frames. Viewers with a failed trade are skipped.
   */
  async checkBalances(
    marketWinner: number,
    balanceOf: (viewer: string) => Promise<number>,
    concurrency = 16,
  ): Promise<CheckResult & { skipped: number }> {
    const res: CheckResult & { skipped: number } = { checked: 0, mismatches: 0, samples: [], skipped: 0 };
    const todo = this.viewers.filter((v) => {
      const ok = v.client !== null && v.joinPoints !== null && !v.uncertain;
      if (!ok) res.skipped++;
      return ok;
    });
    let next = 0;
    const one = async (): Promise<void> => {
      while (next < todo.length) {
        const v = todo[next++]!;
        const r = this.cfg.rounds[v.channel]!;
        const pool = v.frames.filter((f) => f.round === r.pool).reduce((s, f) => s + (f.delta ?? 0), 0);
        const expected = v.points + (v.position[marketWinner] ?? 0) + pool;
        const got = await balanceOf(v.id);
        res.checked++;
        if (got !== expected) {
          res.mismatches++;
          if (res.samples.length < MAX_SAMPLES) {
            res.samples.push(
              `${v.id}: server ${got}, expected ${expected} (after trades ${v.points}, market payout ${v.position[marketWinner] ?? 0}, pool ${pool})`,
            );
          }
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, todo.length) }, one));
    return res;
  }

  /** The trading phase's totals (histograms summarised). */
  result(): CrowdResult {
    return {
      counts: this.counts,
      byKind: this.byKind,
      unexpected: this.unexpected,
      failedByCode: this.failedByCode,
      late: this.late,
      volume: { ...this.volume },
      ack: summarize(this.ack),
      ackByKind: Object.fromEntries(TRADE_KINDS.map((k) => [k, summarize(this.ackByKind[k])])) as Record<TradeKind, LatencySummary>,
      firstSendAt: this.firstSendAt,
      lastAnswerAt: this.lastAnswerAt,
      acks: this.ackCheck,
    };
  }

  /** Closes every socket (bounded by the SDK's close deadline) and frees the histograms. */
  async close(): Promise<void> {
    for (const v of this.viewers) v.closedByUs = true;
    await Promise.allSettled(this.viewers.flatMap((v) => (v.client ? [v.client.close()] : [])));
    this.ack.destroy();
    this.connect.destroy();
    for (const k of TRADE_KINDS) this.ackByKind[k].destroy();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
