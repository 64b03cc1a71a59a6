/**
 * Hanson's logarithmic market scoring rule (LMSR) as pure functions on plain
 * float64 numbers.
 *
 * Source: R. Hanson, "Combinatorial Information Market Design", Information
 * Systems Frontiers 5(1), 2003, and "Logarithmic Market Scoring Rules for
 * Modular Combinatorial Information Aggregation", J. Prediction Markets 1(1),
 * 2007. With liquidity `b > 0` and outstanding shares `q` (one entry per
 * outcome):
 *
 *     C(q)    = b · ln Σ_j exp(q_j / b)                  (cost function)
 *     p_i(q)  = exp(q_i / b) / Σ_j exp(q_j / b)          (price = softmax)
 *     buy k of i:   C(q + k·e_i) − C(q)
 *     sell k of i:  C(q) − C(q − k·e_i)
 *     maker's worst-case loss: b · ln n
 *
 * Every trade amount here is computed in **delta form** from the price of the
 * traded outcome, never as the difference of two absolute costs (which are
 * huge when `q/b` is huge and would cancel):
 *
 *     C(q + k·e_i) − C(q) = b · ln(1 − p_i + p_i·e^{k/b}) = b · log1p(p_i · expm1(k/b))
 *     C(q) − C(q − k·e_i) = −b · ln(1 − p_i + p_i·e^{−k/b})
 *
 * with stable branches (log space) where `expm1` would overflow or `p_i`
 * underflows. Units: shares and points are the same unit (a winning share pays
 * 1 point); these functions return real numbers, and the integer edge
 * (charges round up, proceeds round down) is {@link chargePoints} /
 * {@link proceedsPoints}.
 *
 * Input limits (checked; {@link CrowdplayError} `CP_ERR_MARKET_INVALID_BOOK` /
 * `CP_ERR_MARKET_INVALID_QUANTITY` / `CP_ERR_MARKET_UNKNOWN_OUTCOME`):
 * 2 ≤ n ≤ {@link MAX_OUTCOMES} outcomes, {@link MIN_LIQUIDITY} ≤ b ≤
 * {@link MAX_LIQUIDITY}, |q_i| ≤ {@link MAX_QUANTITY}, 0 ≤ k ≤
 * {@link MAX_QUANTITY}. Inside them every result is finite (no NaN, no
 * Infinity): `k/b ≤ 1e21`, far from float64's 1.8e308.
 */
import { CrowdplayError } from '@crowdplay/protocol';

/** Fewest outcomes a market may have. */
export const MIN_OUTCOMES = 2;
/** Most outcomes a market may have (a round has 2–10 outcomes). */
export const MAX_OUTCOMES = 10;
/**
 * Largest share count or point amount accepted (1e15). Below 2^53 ≈ 9.007e15,
 * so whole-share quantities and integer points stay exact in float64.
 */
export const MAX_QUANTITY = 1e15;
/** Smallest liquidity parameter `b` accepted (shares). */
export const MIN_LIQUIDITY = 1e-6;
/** Largest liquidity parameter `b` accepted (shares). */
export const MAX_LIQUIDITY = 1e12;

/**
 * Absolute part of the rounding guard (points): see {@link roundingGuard}.
 */
export const GUARD_ABS = 1e-9;
/**
 * Relative part of the rounding guard (per unit of {@link roundingGuard}'s
 * scale). float64 carries ~1.1e-16 relative error per operation and the kernels
 * here do fewer than ~20 dependent operations whose error scales with
 * `k + b + spread(q)`, so 1e-12 is over 100× the worst float error.
 */
export const GUARD_REL = 1e-12;

// exp() overflows above ~709.78; stay clear of it on the fast paths.
const EXP_SAFE = 700;
// Smallest price used on the fast paths: a normal float64 (subnormals lose bits).
const P_NORMAL = 1e-300;

/** log(1 + e^t) without overflow (softplus). */
function softplus(t: number): number {
  return t > 0 ? t + Math.log1p(Math.exp(-t)) : Math.log1p(Math.exp(t));
}

/** log(e^x − 1) for x ≥ 0 without overflow; −Infinity at x = 0. */
function logExpm1(x: number): number {
  return x > 36 ? x + Math.log1p(-Math.exp(-x)) : Math.log(Math.expm1(x));
}

/** log(e^a + e^c) for a, c ≤ +∞ where at most one is −Infinity. */
function logAddExp(a: number, c: number): number {
  if (a === -Infinity) return c;
  if (c === -Infinity) return a;
  return a > c ? a + Math.log1p(Math.exp(c - a)) : c + Math.log1p(Math.exp(a - c));
}

/**
 * Numerically stable log-sum-exp: ln Σ_j exp(x_j) = m + ln Σ_j exp(x_j − m)
 * with m = max_j x_j, so no term overflows and the largest term is exactly 1.
 *
 * @param xs finite numbers (at least one)
 * @returns the log of the sum of exponentials (finite for finite input)
 * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK` for an empty list or a
 *   non-finite entry
 */
export function logSumExp(xs: ArrayLike<number>): number {
  if (xs.length === 0) throw new CrowdplayError('CP_ERR_MARKET_INVALID_BOOK', ['logSumExp of an empty list']);
  let m = -Infinity;
  for (let j = 0; j < xs.length; j++) {
    const x = xs[j]!;
    if (!Number.isFinite(x)) throw new CrowdplayError('CP_ERR_MARKET_INVALID_BOOK', [`entry ${j} is ${x}`]);
    if (x > m) m = x;
  }
  let s = 0;
  for (let j = 0; j < xs.length; j++) s += Math.exp(xs[j]! - m);
  return m + Math.log(s);
}

/**
 * Checks a market book: `b` within [{@link MIN_LIQUIDITY}, {@link MAX_LIQUIDITY}],
 * 2..{@link MAX_OUTCOMES} outcomes, each `|q_i| ≤ MAX_QUANTITY`.
 *
 * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK` naming the bad field
 */
export function validateBook(q: ArrayLike<number>, b: number): void {
  validateLiquidity(b);
  validateOutcomeCount(q.length);
  for (let j = 0; j < q.length; j++) {
    const x = q[j];
    if (typeof x !== 'number' || !Number.isFinite(x) || Math.abs(x) > MAX_QUANTITY) {
      throw new CrowdplayError('CP_ERR_MARKET_INVALID_BOOK', [
        `q[${j}] must be a finite number with |q| ≤ ${MAX_QUANTITY}, got ${String(x)}`,
      ]);
    }
  }
}

/**
 * Checks the liquidity parameter `b` (shares).
 * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK`
 */
export function validateLiquidity(b: number): void {
  if (typeof b !== 'number' || !Number.isFinite(b) || b < MIN_LIQUIDITY || b > MAX_LIQUIDITY) {
    throw new CrowdplayError('CP_ERR_MARKET_INVALID_BOOK', [
      `b must be a finite number in [${MIN_LIQUIDITY}, ${MAX_LIQUIDITY}], got ${String(b)}`,
    ]);
  }
}

/**
 * Checks an outcome count.
 * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK`
 */
export function validateOutcomeCount(n: number): void {
  if (!Number.isInteger(n) || n < MIN_OUTCOMES || n > MAX_OUTCOMES) {
    throw new CrowdplayError('CP_ERR_MARKET_INVALID_BOOK', [`a market has ${MIN_OUTCOMES}..${MAX_OUTCOMES} outcomes, got ${String(n)}`]);
  }
}

/**
 * Checks an outcome index against `n` outcomes.
 * @throws CrowdplayError `CP_ERR_MARKET_UNKNOWN_OUTCOME`
 */
export function validateOutcome(outcome: number, n: number): void {
  if (!Number.isInteger(outcome) || outcome < 0 || outcome >= n) {
    throw new CrowdplayError('CP_ERR_MARKET_UNKNOWN_OUTCOME', [String(outcome), n]);
  }
}

/**
 * Checks a share count or point amount: finite, 0 ≤ x ≤ {@link MAX_QUANTITY}.
 * @param what the field name used in the error message
 * @throws CrowdplayError `CP_ERR_MARKET_INVALID_QUANTITY`
 */
export function validateQuantity(what: string, x: number): void {
  if (typeof x !== 'number' || !Number.isFinite(x) || x < 0 || x > MAX_QUANTITY) {
    throw new CrowdplayError('CP_ERR_MARKET_INVALID_QUANTITY', [what, String(x), `a finite number in [0, ${MAX_QUANTITY}]`]);
  }
}

/**
 * The terms of one outcome that every trade formula needs, written into `out`
 * (no allocation): `out[0] = p_i`, `out[1] = ln p_i`, `out[2] = ln(1 − p_i)`
 * (in log space even when 1 − p_i underflows to 0), `out[3] =
 * max_j q_j − min_j q_j` (the spread, for {@link roundingGuard}).
 *
 * Computed from the max-shifted weights w_j = exp((q_j − max q)/b) (so the
 * largest is 1 and the sum S is in [1, n]): p_i = w_i / S,
 * ln p_i = (q_i − max q)/b − ln S, ln(1 − p_i) = ln Σ_{j≠i} w_j − ln S (summed
 * directly, so 1 − p_i does not cancel when p_i is near 1; when those
 * weights underflow, their log-sum-exp is taken with their own max).
 *
 * Does not validate (the callers do): `q` must satisfy {@link validateBook}
 * and `i` must be an outcome of it.
 */
export function outcomeTerms(q: ArrayLike<number>, b: number, i: number, out: Float64Array): void {
  const n = q.length;
  let max = q[0]!;
  let min = max;
  for (let j = 1; j < n; j++) {
    const x = q[j]!;
    if (x > max) max = x;
    else if (x < min) min = x;
  }
  let sum = 0;
  let rest = 0;
  let wi = 0;
  for (let j = 0; j < n; j++) {
    const w = Math.exp((q[j]! - max) / b);
    sum += w;
    if (j === i) wi = w;
    else rest += w;
  }
  const lnSum = Math.log(sum);
  out[0] = wi / sum;
  out[1] = (q[i]! - max) / b - lnSum;
  out[2] = rest >= P_NORMAL ? Math.log(rest) - lnSum : lnRestSlow(q, b, i, max) - lnSum;
  out[3] = max - min;
}

/**
 * ln Σ_{j≠i} exp((q_j − ref)/b) for when those weights underflow (outcome i
 * leads every other by more than ~690·b): the log-sum-exp of the others,
 * shifted by their own max. Rare, so kept off the hot path.
 */
export function lnRestSlow(q: ArrayLike<number>, b: number, i: number, ref: number): number {
  let restMax = -Infinity;
  for (let j = 0; j < q.length; j++) {
    const x = q[j]!;
    if (j !== i && x > restMax) restMax = x;
  }
  let s = 0;
  for (let j = 0; j < q.length; j++) if (j !== i) s += Math.exp((q[j]! - restMax) / b);
  return (restMax - ref) / b + Math.log(s);
}

/**
 * Cost of buying `k ≥ 0` shares of an outcome whose price is `p` (= p_i, with
 * `lnP` = ln p_i), in delta form (Hanson 2003):
 * C(q + k·e_i) − C(q) = b · log1p(p · expm1(k/b)).
 * When `k/b > 700` (expm1 would overflow) or `p < 1e-300` (subnormal), the
 * same quantity in log space: b · softplus(ln p + ln(e^{k/b} − 1)), which for
 * large k is k + b·ln p + b·ln(1 + (1 − p)/(p·e^{k/b})) — about `k` when the
 * outcome dominates. Result in [0, k] (points).
 */
export function buyCostFromTerms(b: number, p: number, lnP: number, k: number): number {
  if (k === 0) return 0;
  const x = k / b;
  if (x <= EXP_SAFE && p >= P_NORMAL) return b * Math.log1p(p * Math.expm1(x));
  return b * softplus(lnP + logExpm1(x));
}

/**
 * Proceeds of selling `k ≥ 0` shares of an outcome with price `p`
 * (`lnP` = ln p, `lnRest` = ln(1 − p)), in delta form (Hanson 2003):
 * C(q) − C(q − k·e_i) = −b · ln(1 − p + p·e^{−k/b}).
 * With d = p·(1 − e^{−k/b}) (from expm1): −b·log1p(−d) while d ≤ 1/2 (no
 * cancellation), else −b · logaddexp(ln(1 − p), ln p − k/b) so that a price
 * near 1 and a large k keep their precision (the result tends to k).
 * Result in [0, k] (points).
 */
export function sellProceedsFromTerms(b: number, p: number, lnP: number, lnRest: number, k: number): number {
  if (k === 0) return 0;
  const x = k / b;
  const d = -p * Math.expm1(-x);
  if (d <= 0.5) return -b * Math.log1p(-d);
  return Math.max(0, -b * logAddExp(lnRest, lnP - x));
}

/**
 * Shares (real, not rounded) that a budget of `budget ≥ 0` points buys of an
 * outcome with price `p` (`lnP` = ln p): the inverse of
 * {@link buyCostFromTerms}, solving budget = b·ln(1 + p·(e^{k/b} − 1)) for k:
 * k = b · log1p(expm1(budget/b) / p); in log space
 * k = b · softplus(ln(e^{budget/b} − 1) − ln p) when that would overflow.
 */
export function sharesForBudgetFromTerms(b: number, p: number, lnP: number, budget: number): number {
  if (budget === 0) return 0;
  const y = budget / b;
  if (y <= EXP_SAFE && p >= P_NORMAL) {
    const z = Math.expm1(y) / p;
    if (z < Infinity) return b * Math.log1p(z);
  }
  return b * softplus(logExpm1(y) - lnP);
}

const scratch = new Float64Array(4);

/** Validates a book, an outcome and one amount, then fills `scratch`. */
function prepare(q: ArrayLike<number>, b: number, outcome: number, what: string, amount: number): void {
  validateBook(q, b);
  validateOutcome(outcome, q.length);
  validateQuantity(what, amount);
  outcomeTerms(q, b, outcome, scratch);
}

/**
 * The LMSR cost function C(q) = b · ln Σ_j exp(q_j/b) (Hanson 2003), computed
 * as max q + b · ln Σ_j exp((q_j − max q)/b). Absolute, so large for large q:
 * use {@link buyCost} / {@link sellProceeds} for trade amounts.
 *
 * @returns points (finite for a valid book)
 * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK`
 */
export function cost(q: ArrayLike<number>, b: number): number {
  validateBook(q, b);
  let max = -Infinity;
  for (let j = 0; j < q.length; j++) if (q[j]! > max) max = q[j]!;
  let s = 0;
  for (let j = 0; j < q.length; j++) s += Math.exp((q[j]! - max) / b);
  return max + b * Math.log(s);
}

/**
 * Instantaneous prices p_i = exp(q_i/b) / Σ_j exp(q_j/b) (Hanson 2003), the
 * softmax of q/b computed with the max subtracted: each in [0, 1], summing to
 * 1 within float rounding.
 *
 * @returns a new array of n prices
 * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK`
 */
export function prices(q: ArrayLike<number>, b: number): number[] {
  validateBook(q, b);
  let max = -Infinity;
  for (let j = 0; j < q.length; j++) if (q[j]! > max) max = q[j]!;
  const w = new Array<number>(q.length);
  let s = 0;
  for (let j = 0; j < q.length; j++) {
    const x = Math.exp((q[j]! - max) / b);
    w[j] = x;
    s += x;
  }
  for (let j = 0; j < q.length; j++) w[j] = w[j]! / s;
  return w;
}

/**
 * Cost (points, real) of buying `k` shares of `outcome`:
 * C(q + k·e_i) − C(q), in delta form (see {@link buyCostFromTerms}).
 * In [0, k]; about k when the outcome's price is about 1.
 *
 * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK`, `CP_ERR_MARKET_UNKNOWN_OUTCOME`,
 *   `CP_ERR_MARKET_INVALID_QUANTITY` (k not finite, negative or over MAX_QUANTITY)
 */
export function buyCost(q: ArrayLike<number>, b: number, outcome: number, k: number): number {
  prepare(q, b, outcome, 'shares', k);
  return buyCostFromTerms(b, scratch[0]!, scratch[1]!, k);
}

/**
 * Proceeds (points, real) of selling `k` shares of `outcome`:
 * C(q) − C(q − k·e_i), in delta form (see {@link sellProceedsFromTerms}).
 * In [0, k]. The pure function does not check holdings (the `Market` does).
 *
 * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK`, `CP_ERR_MARKET_UNKNOWN_OUTCOME`,
 *   `CP_ERR_MARKET_INVALID_QUANTITY`
 */
export function sellProceeds(q: ArrayLike<number>, b: number, outcome: number, k: number): number {
  prepare(q, b, outcome, 'shares', k);
  return sellProceedsFromTerms(b, scratch[0]!, scratch[1]!, scratch[2]!, k);
}

/**
 * Shares (real) that `budget` points buy of `outcome`: the k with
 * C(q + k·e_i) − C(q) = budget, closed form
 * k = b · ln(1 + (exp(budget/b) − 1)/p_i) in stable form
 * (see {@link sharesForBudgetFromTerms}).
 *
 * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK`, `CP_ERR_MARKET_UNKNOWN_OUTCOME`,
 *   `CP_ERR_MARKET_INVALID_QUANTITY` (budget not finite, negative or over MAX_QUANTITY)
 */
export function sharesForBudget(q: ArrayLike<number>, b: number, outcome: number, budget: number): number {
  prepare(q, b, outcome, 'budget', budget);
  return sharesForBudgetFromTerms(b, scratch[0]!, scratch[1]!, budget);
}

/**
 * The market maker's worst-case loss, b · ln n (Hanson 2003, 2007): what the
 * maker pays out at most beyond what traders paid it, whatever the trades
 * and the winner.
 *
 * @returns points (real)
 * @throws CrowdplayError `CP_ERR_MARKET_INVALID_BOOK`
 */
export function worstCaseLoss(b: number, n: number): number {
  validateLiquidity(b);
  validateOutcomeCount(n);
  return b * Math.log(n);
}

/**
 * The rounding guard (points) for an amount computed from a trade of `k`
 * shares with liquidity `b` on a book whose q spread (max − min) is `spread`:
 * GUARD_ABS + GUARD_REL · (k + b + spread). The float error of every kernel
 * above is below ~20 ulps of these magnitudes, so the guard is over 100× the
 * error: adding it before a ceil (charges) and subtracting it before a floor
 * (proceeds) means float noise can never round in the trader's favour. The
 * price is that an amount within the guard below an integer rounds one
 * point further in the maker's favour.
 */
export function roundingGuard(k: number, b: number, spread: number): number {
  return GUARD_ABS + GUARD_REL * (k + b + spread);
}

/**
 * A charge in integer points, rounded **up** (in the maker's favour):
 * min(ceil(amount + guard), shares). Always ≥ 1, even for an amount of 0: a
 * cost that underflowed to 0 is still a positive cost, so shares are never
 * free (the `Market` refuses zero-share trades before it charges). Never more
 * than `shares`, the most those shares can ever pay (1 point each): the true
 * cost of k shares is below k, so the clamp still charges at least the true
 * cost, and only the guard (at a price near 1, where the cost is within the
 * guard below k) would otherwise charge k + 1.
 * @param amount a real cost from {@link buyCost} (points)
 * @param guard from {@link roundingGuard}
 * @param shares the shares bought (k): the payout bound is max(1, ceil(k)) points (k itself for whole shares)
 */
export function chargePoints(amount: number, guard: number, shares: number): number {
  const up = Math.ceil(amount + guard);
  const bound = shares > 1 ? Math.ceil(shares) : 1;
  return up < bound ? up : bound;
}

/**
 * Proceeds in integer points, rounded **down** (in the maker's favour):
 * max(0, floor(amount − guard)).
 * @param amount real proceeds from {@link sellProceeds} (points)
 * @param guard from {@link roundingGuard}
 */
export function proceedsPoints(amount: number, guard: number): number {
  const v = Math.floor(amount - guard);
  return v > 0 ? v : 0;
}
