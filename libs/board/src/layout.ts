/**
 * Board geometry at 1x: the canvas is sized to the cards (a 4-card board is a
 * small image, a 40-card one a larger one), never a fixed 1000×1400.
 * Every number is in pixels; docs/board.md draws the same picture.
 *
 * ```
 * ┌──────────────────────────── width ────────────────────────────┐
 * │ MARGIN                                                         │
 * │  title · puzzle                       (HEADER_H)               │
 * │  round: title, outcomes               (ROUND_H each, 0–2)      │
 * │  ┌ CARD_W ┐ GUTTER ┌────────┐ …  up to MAX_COLS cards a row    │
 * │  │(o) name│        │        │                                  │
 * │  │ ▪▪▪▪▪  │CARD_H  │        │                                  │
 * │  │ … 6×   │        │        │                                  │
 * │  └────────┘        └────────┘                                  │
 * │  GUTTER, next row …                          MARGIN            │
 * └────────────────────────────────────────────────────────────────┘
 * ```
 */
import { BOARD_MAX_ROUNDS, CARD_ROWS, ROW_SQUARES, type Card } from './model.ts';

/** Fixed geometry of a board at 1x (px). */
export const GEOMETRY = {
  /** Outer margin on every side. */
  MARGIN: 12,
  /** Title bar height (chat title, puzzle id, "+N more"). */
  HEADER_H: 36,
  /** Space between cards, both ways. */
  GUTTER: 8,
  /** A card's width. */
  CARD_W: 132,
  /** A card's height. */
  CARD_H: 172,
  /** Padding inside a card. */
  CARD_PAD: 8,
  /** Avatar (or initial) diameter, top left of the card. */
  AVATAR: 24,
  /** Space between the avatar and the name. */
  AVATAR_GAP: 6,
  /** A square's side. */
  SQUARE: 18,
  /** Space between squares. */
  SQUARE_GAP: 3,
  /** Space between the avatar row and the grid. */
  GRID_TOP_GAP: 8,
  /** Most cards in a row of cards. */
  MAX_COLS: 8,
  /** Name font size. */
  NAME_PX: 13,
  /** Title font size. */
  TITLE_PX: 16,
  /** Height of one round's strip below the title bar (its box, and the space after it). */
  ROUND_H: 44,
  /** Space below a round's box, inside ROUND_H. */
  ROUND_GAP: 6,
  /** Round text font size. */
  ROUND_PX: 13,
} as const;

/** Most cards drawn on one board (8 columns × 8 rows, 1,136 × 1,492 px); the rest are counted in the title bar as "+N". */
export const BOARD_MAX_CARDS = 64;

/** Width of the name area of a card (px): the card less its padding, the avatar and the gap. */
export const NAME_W = GEOMETRY.CARD_W - 2 * GEOMETRY.CARD_PAD - GEOMETRY.AVATAR - GEOMETRY.AVATAR_GAP;
/** Width of a card's grid of squares (px). */
export const GRID_W = ROW_SQUARES * GEOMETRY.SQUARE + (ROW_SQUARES - 1) * GEOMETRY.SQUARE_GAP;
/** Height of a card's grid of squares (px). */
export const GRID_H = CARD_ROWS * GEOMETRY.SQUARE + (CARD_ROWS - 1) * GEOMETRY.SQUARE_GAP;

/** Where everything goes on one board. */
export interface BoardLayout {
  /** Canvas width (px). */
  readonly width: number;
  /** Canvas height (px). */
  readonly height: number;
  /** Cards per row of cards. */
  readonly cols: number;
  /** Rows of cards. */
  readonly rows: number;
  /** Cards drawn (at most BOARD_MAX_CARDS). */
  readonly shown: number;
  /** Cards counted but not drawn (past BOARD_MAX_CARDS). */
  readonly hidden: number;
  /** Round strips below the title bar. */
  readonly rounds: number;
}

/**
 * Sizes the canvas to the cards. With n = min(cards, BOARD_MAX_CARDS):
 * `rows = max(1, round(sqrt(n / 2)))`, `cols = min(MAX_COLS, ceil(n / rows))`,
 * then `rows = ceil(n / cols)` (landscape, about twice as many columns as
 * rows, as few empty cells as that allows);
 * `width = 2·MARGIN + cols·CARD_W + (cols − 1)·GUTTER`,
 * `height = 2·MARGIN + HEADER_H + rounds·ROUND_H + rows·CARD_H + (rows − 1)·GUTTER`.
 * 0 cards is a title-only board one card wide. Examples: 4 cards 4×1 →
 * 576 × 232 px; 10 cards 5×2 → 716 × 412 px; 40 cards 8×5 → 1,136 × 952 px;
 * each round strip adds 44 px of height.
 * @param cards the cards, or how many
 * @param rounds round strips (0 to BOARD_MAX_ROUNDS)
 * @throws RangeError when a count is not a non-negative safe integer, or rounds is past BOARD_MAX_ROUNDS
 */
export function layout(cards: number | readonly Card[], rounds = 0): BoardLayout {
  const total = typeof cards === 'number' ? cards : cards.length;
  if (!Number.isSafeInteger(total) || total < 0) throw new RangeError(`card count must be a non-negative integer, got ${total}`);
  if (!Number.isInteger(rounds) || rounds < 0 || rounds > BOARD_MAX_ROUNDS)
    throw new RangeError(`round count must be 0 to ${BOARD_MAX_ROUNDS}, got ${rounds}`);
  const n = Math.min(total, BOARD_MAX_CARDS);
  const g = GEOMETRY;
  let rows = Math.max(1, Math.round(Math.sqrt(n / 2)));
  const cols = Math.max(1, Math.min(g.MAX_COLS, Math.ceil(n / rows)));
  rows = Math.max(1, Math.ceil(n / cols));
  return {
    width: 2 * g.MARGIN + cols * g.CARD_W + (cols - 1) * g.GUTTER,
    height: 2 * g.MARGIN + g.HEADER_H + rounds * g.ROUND_H + rows * g.CARD_H + (rows - 1) * g.GUTTER,
    cols,
    rows,
    shown: n,
    hidden: total - n,
    rounds,
  };
}

/** Top-left corner (px) of card `i` (0-based, row-major) in a layout. */
export function cardOrigin(l: BoardLayout, i: number): { x: number; y: number } {
  const g = GEOMETRY;
  const col = i % l.cols;
  const row = Math.floor(i / l.cols);
  return { x: g.MARGIN + col * (g.CARD_W + g.GUTTER), y: g.MARGIN + g.HEADER_H + l.rounds * g.ROUND_H + row * (g.CARD_H + g.GUTTER) };
}

/** Top-left corner (px) of round strip `i` (0-based) in a layout. */
export function roundOrigin(i: number): { x: number; y: number } {
  return { x: GEOMETRY.MARGIN, y: GEOMETRY.MARGIN + GEOMETRY.HEADER_H + i * GEOMETRY.ROUND_H };
}
