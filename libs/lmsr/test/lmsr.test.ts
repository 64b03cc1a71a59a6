import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError } from '@crowdplay/protocol';
import {
  MAX_QUANTITY,
  buyCost,
  chargePoints,
  cost,
  logSumExp,
  prices,
  proceedsPoints,
  roundingGuard,
  sellProceeds,
  sharesForBudget,
  worstCaseLoss,
} from '../src/index.ts';

// Reference values computed with mpmath at 60 significant digits from the
// definitions C(q) = b·ln Σ exp(q_j/b), p_i = softmax(q/b), buy = C(q + k·e_i) − C(q),
// sell = C(q) − C(q − k·e_i), budget inverse k = b·ln(1 + (exp(c/b) − 1)/p_i),
// written here as the nearest float64; checked to 1e-12 relative (1e-12 absolute below 1).

/** |actual − expected| ≤ tol · max(1, |expected|). */
function near(actual: number, expected: number, tol = 1e-12): void {
  assert.ok(Number.isFinite(actual), `not finite: ${actual}`);
  const err = Math.abs(actual - expected);
  assert.ok(err <= tol * Math.max(1, Math.abs(expected)), `expected ${expected}, got ${actual} (error ${err})`);
}

void test('lmsr - two outcomes at q = 0', () => {
  const q = [0, 0];
  assert.deepEqual(prices(q, 100), [0.5, 0.5]);
  near(cost(q, 100), 69.31471805599453);
  near(buyCost(q, 100, 0, 10), 5.124947951362558);
  near(sellProceeds([10, 0], 100, 0, 10), 5.124947951362558);
  near(worstCaseLoss(100, 2), 69.31471805599453);
  assert.equal(buyCost(q, 100, 1, 0), 0);
  assert.equal(sellProceeds(q, 100, 1, 0), 0);
  assert.equal(sharesForBudget(q, 100, 1, 0), 0);
});

void test('lmsr - three outcomes, mixed signs', () => {
  const q = [30, -20, 5];
  const b = 50;
  const p = prices(q, b);
  near(p[0]!, 0.506480391055654);
  near(p[1]!, 0.1863237232258476);
  near(p[2]!, 0.3071958857184984);
  near(cost(q, b), 64.01348353208672);
  near(buyCost(q, b, 1, 25), 5.7053549387954305);
  near(buyCost(q, b, 1, 1), 0.1878461403655517);
  near(sellProceeds(q, b, 0, 12), 5.718314215910209);
  near(sharesForBudget(q, b, 2, 40), 80.3662287782497);
  // The inverse: buying the shares a budget buys costs the budget.
  near(buyCost(q, b, 2, sharesForBudget(q, b, 2, 40)), 40);
});

void test('lmsr - ten outcomes', () => {
  const q = Array.from({ length: 10 }, (_, i) => 100 * i);
  const b = 1000;
  const expected = [
    0.06120702456008912, 0.0676442235257524, 0.07475842861647011, 0.08262084118795704, 0.09131015090787677, 0.10091332330848408,
    0.11152647016690201, 0.12325581142409142, 0.136218738269722, 0.15054498803265504,
  ];
  const p = prices(q, b);
  expected.forEach((e, i) => near(p[i]!, e));
  near(buyCost(q, b, 0, 500), 38.938268219845945);
  near(sellProceeds(q, b, 9, 900), 93.58343131279068);
  near(buyCost(q, b, 9, 1), 0.15060894352744153);
  near(worstCaseLoss(1000, 10), 2302.5850929940457);
});

void test('lmsr - overflow-sized quantities stay finite and exact (q = 1e6·b, k = 1e9)', () => {
  const b = 1000;
  const q = [1e9, 0];
  // Absolute costs are huge but finite.
  near(cost(q, b), 1e9, 1e-15);
  assert.deepEqual(prices(q, b), [1, 0]);
  // One outcome dominates: buying k more of it costs k.
  near(buyCost(q, b, 0, 1e9), 1e9, 1e-15);
  // Buying the other outcome up to a tie costs b·ln 2 (C([1e9,1e9]) − C([1e9,0])).
  near(buyCost(q, b, 1, 1e9), 693.1471805599454, 1e-12);
  // Selling every share of the dominant outcome returns k − b·ln 2.
  near(sellProceeds(q, b, 0, 1e9), 999999306.8528194, 1e-15);
  near(sellProceeds(q, b, 0, 1), 1, 1e-12);
  // Worthless outcome: buying one share costs ~e^{-1e6}: 0, never NaN or negative.
  assert.equal(buyCost(q, b, 1, 1), 0);
  near(sharesForBudget(q, b, 1, 693), 999999999.7056172, 1e-15);
  near(sharesForBudget(q, b, 0, 1e12), 1e12, 1e-15);
  // At the quantity limit, with the smallest b: still finite.
  const extreme = [MAX_QUANTITY, -MAX_QUANTITY, 0];
  for (const i of [0, 1, 2]) {
    for (const f of [buyCost, sellProceeds, sharesForBudget]) {
      const v = f(extreme, 1e-6, i, MAX_QUANTITY);
      assert.ok(Number.isFinite(v) && v >= 0, `${f.name}(${i}) = ${v}`);
    }
  }
  near(buyCost(extreme, 1e-6, 1, MAX_QUANTITY), 0, 1e-9);
  near(buyCost(extreme, 1e-6, 0, MAX_QUANTITY), MAX_QUANTITY, 1e-15);
});

void test('lmsr - price near 1: selling keeps its precision', () => {
  const q = [50_000, 0, -100];
  near(sellProceeds(q, 100, 0, 40_000), 40_000, 1e-15);
  near(buyCost(q, 100, 2, 49_000), 0.0016701561318393959, 1e-12);
  near(buyCost(q, 100, 0, 1), 1, 1e-12);
  assert.ok(sellProceeds(q, 100, 1, 5) < 1e-200);
});

void test('lmsr - tiny k/b (b = 1e12, one share) keeps relative precision', () => {
  near(buyCost([0, 0], 1e12, 0, 1), 0.500000000000125, 1e-13);
  near(sellProceeds([1, 0], 1e12, 0, 1), 0.500000000000125, 1e-13);
});

void test('lmsr - logSumExp is stable', () => {
  near(logSumExp([1000, 1000]), 1000 + Math.LN2, 1e-15);
  near(logSumExp([-1000, -1000]), -1000 + Math.LN2, 1e-15);
  near(logSumExp([0]), 0);
  near(logSumExp([1e300, 0]), 1e300, 1e-15);
});

void test('lmsr - rounding: charges up, proceeds down, guard in the maker favour', () => {
  const g = roundingGuard(10, 100, 0);
  assert.ok(g > 1e-9 && g < 1e-8);
  assert.equal(chargePoints(5.1249, g, 10), 6);
  assert.equal(chargePoints(5, g, 10), 6); // an exact integer cost is nudged up, never down
  assert.equal(chargePoints(0, g, 10), 1); // shares are never free
  assert.equal(chargePoints(4.99999, g, 10), 5);
  assert.equal(chargePoints(4.9999999999999, g, 10), 6); // within the guard below 5: up
  // Clamped at the payout bound: k shares never cost more than the k points they can pay.
  assert.equal(chargePoints(4.9999999999999, g, 5), 5);
  assert.equal(chargePoints(5, g, 5), 5);
  assert.equal(chargePoints(0, g, 1), 1);
  assert.equal(proceedsPoints(5.1249, g), 5);
  assert.equal(proceedsPoints(5, g), 4);
  assert.equal(proceedsPoints(5.0000000000001, g), 4); // within the guard: down
  assert.equal(proceedsPoints(0, g), 0);
  // The guard grows with the magnitudes the float error scales with.
  assert.ok(roundingGuard(1e15, 1, 0) >= 1000);
});

void test('lmsr - bad input throws a documented code', () => {
  const cases: Array<[() => unknown, string]> = [
    [() => prices([0], 1), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => prices(new Array<number>(11).fill(0), 1), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => prices([0, Number.NaN], 1), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => prices([0, Infinity], 1), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => prices([0, 2e15], 1), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => prices([0, 0], 0), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => prices([0, 0], -1), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => prices([0, 0], Number.NaN), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => cost([0, 0], Infinity), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => buyCost([0, 0], 1, 2, 1), 'CP_ERR_MARKET_UNKNOWN_OUTCOME'],
    [() => buyCost([0, 0], 1, -1, 1), 'CP_ERR_MARKET_UNKNOWN_OUTCOME'],
    [() => buyCost([0, 0], 1, 0.5, 1), 'CP_ERR_MARKET_UNKNOWN_OUTCOME'],
    [() => buyCost([0, 0], 1, 0, -1), 'CP_ERR_MARKET_INVALID_QUANTITY'],
    [() => buyCost([0, 0], 1, 0, Number.NaN), 'CP_ERR_MARKET_INVALID_QUANTITY'],
    [() => buyCost([0, 0], 1, 0, Infinity), 'CP_ERR_MARKET_INVALID_QUANTITY'],
    [() => buyCost([0, 0], 1, 0, 1e16), 'CP_ERR_MARKET_INVALID_QUANTITY'],
    [() => sellProceeds([0, 0], 1, 0, -0.5), 'CP_ERR_MARKET_INVALID_QUANTITY'],
    [() => sharesForBudget([0, 0], 1, 0, Number.NaN), 'CP_ERR_MARKET_INVALID_QUANTITY'],
    [() => worstCaseLoss(1, 1), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => worstCaseLoss(0, 2), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => logSumExp([]), 'CP_ERR_MARKET_INVALID_BOOK'],
    [() => logSumExp([Number.NaN]), 'CP_ERR_MARKET_INVALID_BOOK'],
  ];
  for (const [fn, code] of cases) {
    assert.throws(fn, (err: unknown) => isCrowdplayError(err) && err.code === code, `${fn.toString()} should throw ${code}`);
  }
  // Pure functions never change their input.
  const q = [1, 2];
  assert.throws(() => buyCost(q, 1, 0, -1));
  buyCost(q, 1, 0, 5);
  assert.deepEqual(q, [1, 2]);
});
