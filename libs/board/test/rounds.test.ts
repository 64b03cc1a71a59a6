import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Canvas } from '@napi-rs/canvas';
import {
  GEOMETRY as G,
  RENDER_COST_MODEL,
  cardOrigin,
  drawBoard,
  layout,
  renderCost,
  roundOrigin,
  roundStripText,
  sampleBoard,
  validateBoard,
  type Board,
  type BoardRound,
} from '../src/index.ts';

const POOL: BoardRound = {
  title: "Will someone here solve today's word in 4 guesses or fewer before betting closes?",
  kind: 'pool',
  state: 'open',
  outcomes: [
    { label: 'Yes, in 4 or fewer', value: 30 },
    { label: 'No', value: 10 },
  ],
};

/** The pixels of a rectangle as one string (equal strings: identical pixels). */
function region(canvas: Canvas, r: { x: number; y: number; w: number; h: number }): string {
  const d = canvas.getContext('2d').getImageData(r.x, r.y, r.w, r.h).data;
  return Buffer.from(d).toString('base64');
}

test('board rounds - the strip says the question, the state and the figures or the result', () => {
  assert.deepEqual(roundStripText(POOL), {
    title: POOL.title,
    state: 'betting open',
    figures: 'Yes, in 4 or fewer 30 (75%) · No 10 (25%)',
  });
  const market: BoardRound = {
    ...POOL,
    kind: 'market',
    state: 'locked',
    outcomes: [
      { label: 'Yes', value: 0.625 },
      { label: 'No', value: 0.375 },
    ],
  };
  assert.deepEqual(roundStripText(market), { title: POOL.title, state: 'betting closed', figures: 'Yes 63% · No 38%' });
  assert.equal(roundStripText({ ...POOL, state: 'settled', winner: 0 }).figures, 'Winner: Yes, in 4 or fewer · 40 points staked');
  assert.equal(roundStripText({ ...market, state: 'settled', winner: 1 }).figures, 'Winner: No');
  assert.equal(roundStripText({ ...POOL, state: 'cancelled' }).figures, 'Cancelled: every stake refunded');
  assert.equal(roundStripText({ ...POOL, title: '', outcomes: [{ label: 'a', value: 0 }] }).figures, 'a 0', 'no share of an empty pool');
});

test('board rounds - each strip adds ROUND_H of height and moves the cards down; the cost model follows the area', () => {
  for (const n of [0, 4, 40]) {
    const base = layout(n);
    for (const r of [1, 2]) {
      const l = layout(n, r);
      assert.deepEqual([l.width, l.height, l.rounds], [base.width, base.height + r * G.ROUND_H, r]);
      assert.equal(cardOrigin(l, 0).y, cardOrigin(base, 0).y + r * G.ROUND_H);
      const c = renderCost(n, r);
      assert.equal(c.ms, (RENDER_COST_MODEL.msPerMpx * l.width * l.height) / 1e6 + RENDER_COST_MODEL.msBase);
      assert.equal(c.bytes, renderCost(n).bytes + r * RENDER_COST_MODEL.bytesPerRound);
      assert.ok(c.ms > renderCost(n).ms);
    }
  }
  assert.equal(roundOrigin(1).y, G.MARGIN + G.HEADER_H + G.ROUND_H);
  assert.throws(() => layout(4, 3), RangeError);
  assert.throws(() => renderCost(4, -1), RangeError);
});

test('board rounds - the strip is drawn above the cards, which look the same as without it', () => {
  const cards = sampleBoard(4, { avatarShare: 0 });
  const plain = drawBoard(cards, true);
  const withRound = drawBoard({ ...cards, rounds: [POOL, { ...POOL, state: 'settled', winner: 0 }] }, true);
  assert.equal(withRound.layout.height, plain.layout.height + 2 * G.ROUND_H);
  const card = (l: typeof plain.layout) => ({ ...cardOrigin(l, 3), w: G.CARD_W, h: G.CARD_H });
  assert.equal(region(withRound.canvas, card(withRound.layout)), region(plain.canvas, card(plain.layout)), 'the last card is unchanged');
  const strip = { ...roundOrigin(0), w: plain.layout.width - 2 * G.MARGIN, h: G.ROUND_H - G.ROUND_GAP };
  const other = drawBoard({ ...cards, rounds: [{ ...POOL, outcomes: [POOL.outcomes[0]!, { label: 'No', value: 11 }] }] }, true);
  assert.notEqual(region(withRound.canvas, strip), region(other.canvas, strip), 'the figures are drawn');
});

test('board rounds - a malformed round is refused with the field named', () => {
  const b = (rounds: unknown): Board => ({ ...sampleBoard(1), rounds: rounds as BoardRound[] });
  assert.throws(() => validateBoard(b([POOL, POOL, POOL])), { name: 'TypeError', message: /board\.rounds: 3 rounds, at most 2/ });
  assert.throws(() => validateBoard(b([{ ...POOL, kind: 'dice' }])), { name: 'TypeError', message: /board\.rounds\[0\]\.kind/ });
  assert.throws(() => validateBoard(b([{ ...POOL, state: 'paid' }])), { name: 'TypeError', message: /rounds\[0\]\.state/ });
  assert.throws(() => validateBoard(b([{ ...POOL, outcomes: [] }])), { name: 'TypeError', message: /rounds\[0\]\.outcomes/ });
  assert.throws(() => validateBoard(b([{ ...POOL, outcomes: [{ label: 'x', value: -1 }] }])), {
    name: 'TypeError',
    message: /outcomes\[0\]\.value/,
  });
  assert.throws(() => validateBoard(b([{ ...POOL, winner: 2 }])), { name: 'TypeError', message: /rounds\[0\]\.winner/ });
  validateBoard(b([POOL]));
});
