/**
 * The measured cost model: what one board render costs, as a function of its
 * card count, so a scheduler can spend a render budget by cost (cards), not by
 * chat count.
 *
 * Render time follows the canvas area (drawing is ~10 % of it; PNG encoding,
 * quantising and deflating every pixel, the rest), and the canvas area follows
 * the cards through `layout()`. PNG bytes follow the cards (names, avatars and
 * guesses are what does not compress; the flat background is nearly free).
 * So: `ms = msBase + msPerMpx × Mpx(cards, rounds)` and
 * `bytes = bytesBase + bytesPerCard × min(cards, BOARD_MAX_CARDS) + bytesPerRound × rounds`, with
 * Mpx(cards, rounds) = layout(cards, rounds).width × height / 10⁶ (a round
 * strip is 44 px of the board's width: its time is its area's), fitted by least squares
 * on 1–64-card sample boards with `npm run bench -- render --fit`
 * (docs/board.md has the table and docs/benchmarks/render-fit.json the run).
 */
import { layout, BOARD_MAX_CARDS } from './layout.ts';

/**
 * The fitted coefficients (2 vCPU AMD EPYC, Node 20.20.2, @napi-rs/canvas 1.1.1;
 * docs/benchmarks/render-fit.json): ms = −0.002 + 24.684 × Mpx (r² 0.992), bytes = 1,967 + 1,081 × cards (r² 1.000),
 * over 16 board sizes from 1 to 64 cards, p50 of 20 renders each.
 */
export const RENDER_COST_MODEL = {
  /** ms of a render at zero area (the fit's intercept, −0.002, is nil). */
  msBase: 0,
  /** ms per million pixels of canvas. */
  msPerMpx: 24.7,
  /** PNG bytes at zero cards (background, title). */
  bytesBase: 1_970,
  /** PNG bytes per card drawn. */
  bytesPerCard: 1_081,
  /**
   * PNG bytes per round strip (two lines of text across the board): the mean of the increase from 0 to 1 and 1 to 2
   * strips on sample boards of 1 to 64 cards, 1.0–3.9 KB (docs/board.md "Rounds on the board").
   */
  bytesPerRound: 2_900,
  /** Where the numbers come from. */
  source: 'npm run bench -- render --fit --json docs/benchmarks/render-fit.json',
} as const;

/** A render's predicted cost. */
export interface RenderCost {
  /** Render time on one thread, drawing and PNG encoding (ms). */
  readonly ms: number;
  /** PNG size (bytes). */
  readonly bytes: number;
}

/**
 * The predicted cost of rendering a board of `cards` cards and `rounds` round
 * strips (see the module comment for the formula and RENDER_COST_MODEL for the numbers).
 * @throws RangeError when `cards` is not a non-negative safe integer or `rounds` not 0 to BOARD_MAX_ROUNDS (layout)
 */
export function renderCost(cards: number, rounds = 0): RenderCost {
  const l = layout(cards, rounds);
  const m = RENDER_COST_MODEL;
  return {
    ms: m.msBase + (m.msPerMpx * (l.width * l.height)) / 1e6,
    bytes: Math.round(m.bytesBase + m.bytesPerCard * Math.min(cards, BOARD_MAX_CARDS) + m.bytesPerRound * rounds),
  };
}

/** Least-squares line y = a + b·x, with r². */
export function fitLine(xs: readonly number[], ys: readonly number[]): { a: number; b: number; r2: number } {
  const n = xs.length;
  if (n < 2 || ys.length !== n) throw new RangeError(`fitLine needs ≥ 2 points of x and y, got ${n} and ${ys.length}`);
  const mx = xs.reduce((s, x) => s + x, 0) / n;
  const my = ys.reduce((s, y) => s + y, 0) / n;
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i]! - mx) * (ys[i]! - my);
    sxx += (xs[i]! - mx) ** 2;
    syy += (ys[i]! - my) ** 2;
  }
  const b = sxx === 0 ? 0 : sxy / sxx;
  const a = my - b * mx;
  return { a, b, r2: syy === 0 ? 1 : (sxy * sxy) / (sxx * syy) };
}
