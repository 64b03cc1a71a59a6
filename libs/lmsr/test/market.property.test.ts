import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { isCrowdplayError } from '@crowdplay/protocol';
import {
  InMemoryWallet,
  MAX_OUTCOMES,
  MIN_OUTCOMES,
  Market,
  buyCost,
  chargePoints,
  proceedsPoints,
  roundingGuard,
  sellProceeds,
} from '../src/index.ts';
import type { TradeResult } from '../src/index.ts';

const RUNS = { numRuns: 10_000 };
const VIEWERS = ['v0', 'v1', 'v2', 'v3', 'v4'];

type Op =
  | { t: 'buy'; v: number; i: number; k: number; limit: number }
  | { t: 'sell'; v: number; i: number; frac: number; limit: number }
  | { t: 'budget'; v: number; i: number; budget: number }
  | { t: 'replay'; j: number }
  | { t: 'conflict'; j: number }
  | { t: 'bad'; v: number; i: number; k: number };

const viewerArb = fc.nat({ max: VIEWERS.length - 1 });
const outcomeArb = fc.nat({ max: MAX_OUTCOMES - 1 }); // taken modulo n
const sharesArb = fc.oneof(fc.integer({ min: 1, max: 50 }), fc.integer({ min: 1, max: 5_000 }), fc.integer({ min: 1, max: 1e9 }));
const limitArb = fc.oneof(fc.constant(Number.MAX_SAFE_INTEGER), fc.nat({ max: 3_000 }));
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ t: fc.constant('buy' as const), v: viewerArb, i: outcomeArb, k: sharesArb, limit: limitArb }) },
  {
    weight: 4,
    arbitrary: fc.record({
      t: fc.constant('sell' as const),
      v: viewerArb,
      i: outcomeArb,
      frac: fc.double({ min: 0, max: 1.2, noNaN: true }),
      limit: fc.oneof(fc.constant(0), fc.nat({ max: 3_000 })),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ t: fc.constant('budget' as const), v: viewerArb, i: outcomeArb, budget: fc.integer({ min: 1, max: 20_000 }) }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('replay' as const), j: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('conflict' as const), j: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('bad' as const),
      v: viewerArb,
      i: fc.integer({ min: -2, max: 12 }),
      k: fc.constantFrom(0, -1, 1.5, Number.NaN, Infinity, 1e16),
    }),
  },
);
const scenarioArb = fc.record({
  n: fc.integer({ min: MIN_OUTCOMES, max: MAX_OUTCOMES }),
  b: fc.oneof(fc.integer({ min: 1, max: 1_000 }), fc.double({ min: 0.05, max: 1e5, noNaN: true })),
  funds: fc.array(fc.oneof(fc.nat({ max: 20_000 }), fc.constant(1e12)), { minLength: VIEWERS.length, maxLength: VIEWERS.length }),
  ops: fc.array(opArb, { maxLength: 25 }),
  end: fc.oneof(
    fc.record({ settle: fc.constant(true as const), winner: fc.nat({ max: MAX_OUTCOMES - 1 }) }),
    fc.record({ settle: fc.constant(false as const) }),
  ),
});
type Scenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

interface Run {
  market: Market;
  wallet: InMemoryWallet;
  initial: Array<[string, number]>;
  total: number;
}

/** Points are conserved and no account is negative. */
function checkBooks(r: Run): void {
  assert.equal(r.wallet.total() + r.market.makerBalance, r.total, 'points created or destroyed');
  for (const [v, p] of r.wallet.balances()) assert.ok(p >= 0 && Number.isSafeInteger(p), `${v} holds ${p}`);
  assert.ok(r.market.makerBalance >= 0 || r.market.state === 'cancelled', `maker holds ${r.market.makerBalance}`);
}

/** Runs one op; a refusal must leave the market and every wallet unchanged; a replay must change nothing. */
function step(r: Run, op: Op, n: number, done: TradeResult[], seq: number): void {
  const { market, wallet } = r;
  const id = `t${seq}`;
  const before = market.snapshot();
  const balances = wallet.balances();
  const unchanged = (why: string): void => {
    assert.deepEqual(market.snapshot(), before, `${why}: the market changed`);
    assert.deepEqual(wallet.balances(), balances, `${why}: a wallet changed`);
  };
  if (op.t === 'replay' || op.t === 'conflict') {
    if (done.length === 0) return;
    const prior = done[op.j % done.length]!;
    const again = (limit: number): TradeResult =>
      prior.kind === 'buy'
        ? market.buy(prior.id, prior.viewer, prior.outcome, prior.requested, limit)
        : prior.kind === 'sell'
          ? market.sell(prior.id, prior.viewer, prior.outcome, prior.requested, limit)
          : market.buyForBudget(prior.id, prior.viewer, prior.outcome, limit);
    if (op.t === 'replay') {
      assert.equal(again(prior.limit), prior);
      unchanged('replay');
    } else {
      assert.throws(
        () => again(prior.limit + 1),
        (e: unknown) => isCrowdplayError(e, 'CP_ERR_MARKET_DUPLICATE_ID'),
      );
      unchanged('conflicting replay');
    }
    return;
  }
  const viewer = VIEWERS[op.v]!;
  try {
    let res: TradeResult;
    if (op.t === 'buy') res = market.buy(id, viewer, op.i % n, op.k, op.limit);
    else if (op.t === 'budget') res = market.buyForBudget(id, viewer, op.i % n, op.budget);
    else if (op.t === 'sell') {
      const held = market.position(viewer, op.i % n);
      res = market.sell(id, viewer, op.i % n, Math.max(1, Math.round(held * op.frac)), op.limit);
    } else {
      res = market.buy(id, viewer, op.i, op.k, 1e9);
      assert.fail('bad input was accepted');
    }
    done.push(res);
    if (res.kind === 'budget') assert.ok(res.points <= res.limit, 'budget overspent');
    if (res.kind === 'buy') assert.ok(res.points <= res.limit && res.points >= 1, 'charge past maxCost');
    if (res.kind === 'sell') assert.ok(res.points >= res.limit, 'proceeds under minProceeds');
  } catch (err) {
    if (!isCrowdplayError(err)) throw err;
    unchanged(err.code);
  }
}

function open(s: Scenario): Run {
  const wallet = new InMemoryWallet();
  s.funds.forEach((p, j) => wallet.fund(VIEWERS[j]!, p));
  const market = new Market({ b: s.b, outcomes: s.n, wallet });
  return { market, wallet, initial: wallet.balances(), total: wallet.total() + market.subsidy };
}

void test('market property - random trades by several viewers: points conserved, no wallet negative, refusals and replays change nothing', () => {
  fc.assert(
    fc.property(scenarioArb, (s) => {
      const r = open(s);
      const done: TradeResult[] = [];
      s.ops.forEach((op, seq) => {
        step(r, op, s.n, done, seq);
        checkBooks(r);
      });
      if (s.end.settle) {
        const winner = s.end.winner % s.n;
        const quantities = r.market.quantities();
        const res = r.market.settle(winner);
        assert.equal(res.totalPayout, quantities[winner]);
        for (const p of res.payouts) assert.equal(p.points, r.market.position(p.viewer, winner));
        checkBooks(r);
      } else {
        const res = r.market.cancel();
        checkBooks(r);
        if (res.unrecovered.length === 0) {
          assert.deepEqual(r.wallet.balances(), r.initial, 'cancel did not return everyone to the start');
          assert.equal(r.market.makerBalance, r.market.subsidy);
        }
      }
    }),
    RUNS,
  );
});

void test('market property - the maker never loses more than its subsidy (random trades, then a random settle)', () => {
  fc.assert(
    fc.property(scenarioArb, fc.nat({ max: MAX_OUTCOMES - 1 }), (s, w) => {
      const r = open(s);
      const done: TradeResult[] = [];
      s.ops.forEach((op, seq) => step(r, op, s.n, done, seq));
      const income = r.market.makerBalance - r.market.subsidy; // Σ charges − Σ proceeds
      const res = r.market.settle(w % s.n);
      assert.ok(res.totalPayout - income <= r.market.subsidy, `payout ${res.totalPayout} − income ${income} > subsidy ${r.market.subsidy}`);
      assert.equal(res.makerPnl, income - res.totalPayout);
      assert.ok(res.makerBalance >= 0);
    }),
    RUNS,
  );
});

void test('market property - buy then sell back never profits the trader', () => {
  fc.assert(
    fc.property(scenarioArb, viewerArb, outcomeArb, sharesArb, (s, _v, i, k) => {
      const r = open(s);
      const done: TradeResult[] = [];
      s.ops.forEach((op, seq) => step(r, op, s.n, done, seq));
      fc.pre(r.market.state === 'open');
      const trader = 'trader';
      r.wallet.fund(trader, 1e12);
      const start = r.wallet.balance(trader);
      const bought = r.market.buy('buy', trader, i % s.n, k, Number.MAX_SAFE_INTEGER);
      const sold = r.market.sell('sell', trader, i % s.n, k, 0);
      assert.ok(sold.points <= bought.points, `bought for ${bought.points}, sold for ${sold.points}`);
      assert.ok(r.wallet.balance(trader) <= start);
    }),
    RUNS,
  );
});

void test('market property - the market (cached weights) charges and pays what the pure functions compute', () => {
  fc.assert(
    fc.property(scenarioArb, outcomeArb, sharesArb, (s, i, k) => {
      const r = open(s);
      const done: TradeResult[] = [];
      s.ops.forEach((op, seq) => step(r, op, s.n, done, seq));
      const o = i % s.n;
      const q = r.market.quantities();
      const spread = Math.max(...q) - Math.min(...q);
      const g = roundingGuard(k, s.b, spread);
      const amounts: Array<[number, number, (x: number, g: number) => number]> = [
        [r.market.quoteBuy(o, k), buyCost(q, s.b, o, k), (x, g) => chargePoints(x, g, k)],
      ];
      if (q[o]! >= k) amounts.push([r.market.quoteSell(o, k), sellProceeds(q, s.b, o, k), proceedsPoints]);
      for (const [market, real, round] of amounts) {
        const pure = round(real, g);
        // Equal unless the real amount sits within 1e-9 of a rounding boundary (the two paths differ by ~1e-13).
        const edge = Math.abs(real + g - Math.round(real + g)) < 1e-9 || Math.abs(real - g - Math.round(real - g)) < 1e-9;
        if (edge) assert.ok(Math.abs(market - pure) <= 1, `market ${market}, pure ${pure}`);
        else assert.equal(market, pure, `real amount ${real}`);
      }
    }),
    RUNS,
  );
});
