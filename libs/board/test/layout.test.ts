import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  BOARD_MAX_CARDS,
  GEOMETRY,
  GRID_H,
  GRID_W,
  NAME_W,
  RENDER_COST_MODEL,
  cardOrigin,
  fitLine,
  layout,
  renderCost,
  sampleBoard,
} from '../src/index.ts';

test('layout sizes the canvas to the cards (exact, documented geometry)', () => {
  assert.deepEqual(layout(4), { width: 576, height: 232, cols: 4, rows: 1, shown: 4, hidden: 0, rounds: 0 });
  assert.deepEqual(layout(10), { width: 716, height: 412, cols: 5, rows: 2, shown: 10, hidden: 0, rounds: 0 });
  assert.deepEqual(layout(40), { width: 1136, height: 952, cols: 8, rows: 5, shown: 40, hidden: 0, rounds: 0 });
  assert.deepEqual(layout(64), { width: 1136, height: 1492, cols: 8, rows: 8, shown: 64, hidden: 0, rounds: 0 });
  assert.deepEqual(layout(1), { width: 156, height: 232, cols: 1, rows: 1, shown: 1, hidden: 0, rounds: 0 });
  assert.deepEqual(layout(0), { width: 156, height: 232, cols: 1, rows: 1, shown: 0, hidden: 0, rounds: 0 });
  assert.deepEqual(layout(3), { width: 436, height: 232, cols: 3, rows: 1, shown: 3, hidden: 0, rounds: 0 });
  assert.deepEqual(layout(16), { width: 856, height: 592, cols: 6, rows: 3, shown: 16, hidden: 0, rounds: 0 });
  // Past the cap: the canvas stops growing, the rest is counted.
  assert.deepEqual(layout(200), { ...layout(64), hidden: 136 });
  assert.equal(BOARD_MAX_CARDS, 64);
  // An array of cards sizes the same as its count.
  assert.deepEqual(layout(sampleBoard(10, { avatarShare: 0 }).cards), layout(10));
});

test('a 4-card board is a small canvas and a 40-card board a larger one', () => {
  const a = layout(4);
  const b = layout(40);
  assert.ok(a.width * a.height < 140_000, `${a.width}×${a.height}`);
  assert.ok(b.width * b.height > 7 * a.width * a.height);
  // Width = margins + cols cards + gutters, height = margins + header + rows cards + gutters.
  const g = GEOMETRY;
  for (const n of [1, 2, 5, 7, 9, 13, 23, 33, 41, 57, 64]) {
    const l = layout(n);
    assert.equal(l.width, 2 * g.MARGIN + l.cols * g.CARD_W + (l.cols - 1) * g.GUTTER, `width of ${n}`);
    assert.equal(l.height, 2 * g.MARGIN + g.HEADER_H + l.rows * g.CARD_H + (l.rows - 1) * g.GUTTER, `height of ${n}`);
    assert.ok(l.cols * l.rows >= n && (l.rows - 1) * l.cols < n, `${n} cards in ${l.cols}×${l.rows}: no empty row`);
    assert.ok(l.cols <= g.MAX_COLS);
  }
});

test('card origins tile the canvas without overlap, inside the margins', () => {
  const l = layout(40);
  const g = GEOMETRY;
  assert.deepEqual(cardOrigin(l, 0), { x: 12, y: 48 });
  assert.deepEqual(cardOrigin(l, 1), { x: 152, y: 48 });
  assert.deepEqual(cardOrigin(l, 8), { x: 12, y: 228 });
  assert.deepEqual(cardOrigin(l, 39), { x: 992, y: 768 });
  const last = cardOrigin(l, 39);
  assert.equal(last.x + g.CARD_W, l.width - g.MARGIN);
  assert.equal(last.y + g.CARD_H, l.height - g.MARGIN);
  // The card's contents fit in it.
  assert.equal(NAME_W, 86);
  assert.equal(GRID_W, 102);
  assert.equal(GRID_H, 123);
  assert.ok(g.CARD_PAD + g.AVATAR + g.GRID_TOP_GAP + GRID_H + g.CARD_PAD <= g.CARD_H);
  assert.ok(GRID_W <= g.CARD_W - 2 * g.CARD_PAD);
});

test('layout refuses a count that is not a non-negative integer', () => {
  for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
    assert.throws(() => layout(bad), RangeError);
  }
});

test('renderCost follows its documented formula and grows with the cards', () => {
  const m = RENDER_COST_MODEL;
  for (const n of [0, 4, 10, 40, 64, 100]) {
    const l = layout(n);
    const c = renderCost(n);
    assert.equal(c.ms, m.msBase + (m.msPerMpx * (l.width * l.height)) / 1e6, `ms of ${n}`);
    assert.equal(c.bytes, Math.round(m.bytesBase + m.bytesPerCard * Math.min(n, BOARD_MAX_CARDS)), `bytes of ${n}`);
  }
  assert.ok(renderCost(40).ms > 4 * renderCost(4).ms, 'a 40-card board costs several 4-card boards');
  assert.deepEqual(renderCost(100), renderCost(64), 'past the cap nothing more is drawn');
  assert.throws(() => renderCost(-1), RangeError);
});

test('fitLine fits exact lines and refuses too few points', () => {
  const f = fitLine([0, 1, 2, 3], [1, 3, 5, 7]);
  assert.equal(f.a, 1);
  assert.equal(f.b, 2);
  assert.equal(f.r2, 1);
  assert.throws(() => fitLine([1], [1]), RangeError);
  assert.throws(() => fitLine([1, 2], [1]), RangeError);
});
