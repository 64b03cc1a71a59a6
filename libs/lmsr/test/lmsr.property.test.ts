import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  MAX_LIQUIDITY,
  MAX_OUTCOMES,
  MAX_QUANTITY,
  MIN_LIQUIDITY,
  MIN_OUTCOMES,
  buyCost,
  chargePoints,
  cost,
  logSumExp,
  prices,
  proceedsPoints,
  roundingGuard,
  sellProceeds,
  sharesForBudget,
} from '../src/index.ts';

const RUNS = { numRuns: 10_000 };

/** Liquidity: log-uniform over the whole accepted range, plus the edges. */
const bArb = fc.oneof(
  fc.double({ min: -6, max: 12, noNaN: true }).map((e) => Math.min(MAX_LIQUIDITY, Math.max(MIN_LIQUIDITY, 10 ** e))),
  fc.constantFrom(MIN_LIQUIDITY, 1, 100, MAX_LIQUIDITY),
);
/** A quantity in [−MAX, MAX]: small integers, log-scaled magnitudes, or the edges. */
const qEntryArb = fc.oneof(
  fc.integer({ min: -1000, max: 1000 }),
  fc.tuple(fc.double({ min: -3, max: 15, noNaN: true }), fc.boolean()).map(([e, neg]) => (neg ? -1 : 1) * Math.min(MAX_QUANTITY, 10 ** e)),
  fc.constantFrom(0, MAX_QUANTITY, -MAX_QUANTITY),
);
const kArb = fc.oneof(
  fc.integer({ min: 0, max: 1000 }),
  fc.double({ min: -3, max: 15, noNaN: true }).map((e) => Math.min(MAX_QUANTITY, 10 ** e)),
  fc.constantFrom(0, MAX_QUANTITY),
);
/** A valid book with an outcome index into it. */
const bookArb = fc
  .integer({ min: MIN_OUTCOMES, max: MAX_OUTCOMES })
  .chain((n) => fc.record({ q: fc.array(qEntryArb, { minLength: n, maxLength: n }), b: bArb, i: fc.nat({ max: n - 1 }) }));

function spread(q: readonly number[]): number {
  return Math.max(...q) - Math.min(...q);
}

/** |a − b| ≤ rel · max(|a|, |b|), with an absolute floor for values that underflow. */
function closeRel(a: number, b: number, rel: number): boolean {
  return Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b)) + 1e-250;
}

void test('lmsr property - prices are in [0, 1] and sum to 1', () => {
  fc.assert(
    fc.property(bookArb, ({ q, b }) => {
      const p = prices(q, b);
      let s = 0;
      for (const x of p) {
        assert.ok(x >= 0 && x <= 1, `price ${x}`);
        s += x;
      }
      assert.ok(Math.abs(s - 1) <= 1e-9, `sum ${s}`);
    }),
    RUNS,
  );
});

void test('lmsr property - no NaN or Infinity for any valid input; amounts in [0, k]', () => {
  fc.assert(
    fc.property(bookArb, kArb, ({ q, b, i }, k) => {
      const g = roundingGuard(k, b, spread(q));
      const buy = buyCost(q, b, i, k);
      const sell = sellProceeds(q, b, i, k);
      const shares = sharesForBudget(q, b, i, k);
      for (const v of [buy, sell, shares, cost(q, b), logSumExp(q), ...prices(q, b)]) assert.ok(Number.isFinite(v), `not finite: ${v}`);
      assert.ok(buy >= 0 && buy <= k + g, `buy ${buy} for k ${k}`);
      assert.ok(sell >= 0 && sell <= k + g, `sell ${sell} for k ${k}`);
      assert.ok(shares >= k - g, `a budget of ${k} buys ${shares} shares: at least as many as points`);
    }),
    RUNS,
  );
});

void test('lmsr property - buy then sell never profits the trader (integer points)', () => {
  fc.assert(
    fc.property(bookArb, kArb, ({ q, b, i }, k) => {
      fc.pre(q[i]! + k <= MAX_QUANTITY);
      const charged = chargePoints(buyCost(q, b, i, k), roundingGuard(k, b, spread(q)), k);
      const after = q.slice();
      after[i] = q[i]! + k;
      const paid = proceedsPoints(sellProceeds(after, b, i, k), roundingGuard(k, b, spread(after)));
      assert.ok(charged >= paid, `charged ${charged}, paid ${paid}`);
      assert.ok(charged >= 1);
    }),
    RUNS,
  );
});

void test('lmsr property - k whole shares are charged at least their real cost and never more than the k points they can pay', () => {
  const wholeArb = fc.oneof(
    fc.integer({ min: 1, max: 1000 }),
    fc.double({ min: 0, max: 15, noNaN: true }).map((e) => Math.max(1, Math.min(MAX_QUANTITY, Math.floor(10 ** e)))),
  );
  // Books where the outcome bought dominates (its price near 1) come up often: that is where the guard reached k + 1.
  const dominantArb = bookArb.map(({ q, b, i }) => {
    const d = q.slice();
    d[i] = Math.min(MAX_QUANTITY, Math.max(...q) + 40 * b);
    return { q: d, b, i };
  });
  fc.assert(
    fc.property(fc.oneof(bookArb, dominantArb), wholeArb, ({ q, b, i }, k) => {
      fc.pre(q[i]! + k <= MAX_QUANTITY);
      const real = buyCost(q, b, i, k);
      const charged = chargePoints(real, roundingGuard(k, b, spread(q)), k);
      assert.ok(Number.isInteger(charged) && charged >= 1, `charged ${charged}`);
      assert.ok(charged <= k, `charged ${charged} points for ${k} shares`);
      // The true cost is below k; the float one may sit a few ulps above it (within the guard).
      assert.ok(charged + roundingGuard(k, b, spread(q)) >= real, `charged ${charged} below the real cost ${real}`);
    }),
    RUNS,
  );
});

void test('lmsr property - delta form agrees with the difference of absolute costs where that is accurate', () => {
  // Moderate books (|q|/b ≤ 50, k/b ≤ 50): C(q + k·e_i) − C(q) by subtraction is off by at most
  // ~1e-15·(|C| + b) (b·ln S with S near 1 loses b·ulp), so it can check the delta form to 1e-12·(|C| + b).
  const moderate = fc.integer({ min: MIN_OUTCOMES, max: MAX_OUTCOMES }).chain((n) =>
    fc.record({
      u: fc.array(fc.double({ min: -50, max: 50, noNaN: true }), { minLength: n, maxLength: n }),
      b: fc.double({ min: 0.01, max: 1e6, noNaN: true }),
      i: fc.nat({ max: n - 1 }),
      w: fc.double({ min: 0.5, max: 50, noNaN: true }),
    }),
  );
  fc.assert(
    fc.property(moderate, ({ u, b, i, w }) => {
      const q = u.map((x) => x * b);
      const k = w * b;
      const up = q.slice();
      up[i] = q[i]! + k;
      const naiveBuy = cost(up, b) - cost(q, b);
      const scale = Math.max(Math.abs(cost(up, b)), Math.abs(cost(q, b))) + b;
      assert.ok(Math.abs(buyCost(q, b, i, k) - naiveBuy) <= 1e-12 * scale, `buy ${buyCost(q, b, i, k)} vs ${naiveBuy}`);
      assert.ok(Math.abs(sellProceeds(up, b, i, k) - naiveBuy) <= 1e-12 * scale, `sell ${sellProceeds(up, b, i, k)} vs ${naiveBuy}`);
      // The budget inverse round-trips.
      const c = buyCost(q, b, i, k);
      assert.ok(closeRel(sharesForBudget(q, b, i, c), k, 1e-9), `shares for ${c}: ${sharesForBudget(q, b, i, c)} vs ${k}`);
    }),
    RUNS,
  );
});

void test('lmsr property - shift invariance: adding a constant to every q changes no price and no trade amount', () => {
  const shifted = fc.integer({ min: MIN_OUTCOMES, max: MAX_OUTCOMES }).chain((n) =>
    fc.record({
      u: fc.array(fc.double({ min: -100, max: 100, noNaN: true }), { minLength: n, maxLength: n }),
      b: bArb.filter((b) => b <= 1e9),
      i: fc.nat({ max: n - 1 }),
      w: fc.double({ min: 0, max: 1000, noNaN: true }),
      shift: fc.double({ min: -10_000, max: 10_000, noNaN: true }),
    }),
  );
  fc.assert(
    fc.property(shifted, ({ u, b, i, w, shift }) => {
      const q = u.map((x) => x * b);
      const c = shift * b;
      const qc = q.map((x) => x + c);
      fc.pre(qc.every((x) => Math.abs(x) <= MAX_QUANTITY) && w * b <= MAX_QUANTITY);
      const k = w * b;
      const p1 = prices(q, b);
      const p2 = prices(qc, b);
      p1.forEach((x, j) => assert.ok(Math.abs(x - p2[j]!) <= 1e-9 && closeRel(x, p2[j]!, 1e-9), `price ${j}: ${x} vs ${p2[j]}`));
      for (const f of [buyCost, sellProceeds, sharesForBudget]) {
        const a = f(q, b, i, k);
        const z = f(qc, b, i, k);
        assert.ok(closeRel(a, z, 1e-9), `${f.name}: ${a} vs ${z}`);
      }
    }),
    RUNS,
  );
});

void test('lmsr property - the maker never loses more than b·ln n (real amounts, any buys and sells)', () => {
  const seq = fc.integer({ min: MIN_OUTCOMES, max: MAX_OUTCOMES }).chain((n) =>
    fc.record({
      n: fc.constant(n),
      b: fc.double({ min: 0.01, max: 1e6, noNaN: true }),
      trades: fc.array(fc.record({ i: fc.nat({ max: n - 1 }), w: fc.double({ min: 0, max: 20, noNaN: true }), sell: fc.boolean() }), {
        maxLength: 20,
      }),
      winner: fc.nat({ max: n - 1 }),
    }),
  );
  fc.assert(
    fc.property(seq, ({ n, b, trades, winner }) => {
      const q = new Array<number>(n).fill(0);
      let income = 0;
      for (const t of trades) {
        const k = Math.min(t.w * b, t.sell ? q[t.i]! : Infinity);
        if (t.sell) {
          income -= sellProceeds(q, b, t.i, k);
          q[t.i] = q[t.i]! - k;
        } else {
          income += buyCost(q, b, t.i, k);
          q[t.i] = q[t.i]! + k;
        }
      }
      const loss = q[winner]! - income;
      assert.ok(loss <= b * Math.log(n) * (1 + 1e-9) + 1e-9, `loss ${loss} > b·ln n ${b * Math.log(n)}`);
    }),
    RUNS,
  );
});
