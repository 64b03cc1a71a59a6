/**
 * The board model: what a chat's live board shows, as plain data that can be
 * structured-cloned to a render thread.
 *
 * A board is a chat's title and puzzle id plus one card per player: the
 * player's avatar (PNG or JPEG bytes, or none: a coloured initial), display
 * name, and the rows of coloured squares of a Wordle grid (up to 6 rows of 5).
 * Letters are never part of the model: the public board shows colours only.
 */

/** One square of a guess: the usual Wordle scoring, or `empty` (not guessed yet). */
export type Square = 'green' | 'yellow' | 'grey' | 'empty';

/** Squares in a row (the word length). */
export const ROW_SQUARES = 5;
/** Rows on a card (guesses allowed). */
export const CARD_ROWS = 6;

/** One player's card. */
export interface Card {
  /** Stable player id (the Telegram user id as a string): picks the initial's colour, so it does not change with the name. */
  readonly id: string;
  /** Display name as the player set it (any script, any length: truncated by width when drawn). */
  readonly name: string;
  /** Avatar image bytes (PNG or JPEG, any size: drawn as a 24 px circle), or none for a coloured initial. */
  readonly avatar?: Uint8Array | null;
  /** The guesses so far, oldest first: at most CARD_ROWS rows of exactly ROW_SQUARES squares. Missing rows are drawn empty. */
  readonly rows: readonly (readonly Square[])[];
}

/** A chat's board. */
export interface Board {
  /** The chat's title (truncated by width when drawn). */
  readonly title: string;
  /** The puzzle's id as shown (e.g. `#412` or `2026-11-30`). */
  readonly puzzle: string;
  /** One card per player, in the order they are drawn (the caller sorts). Past BOARD_MAX_CARDS the rest are counted, not drawn. */
  readonly cards: readonly Card[];
}

const SQUARES: ReadonlySet<string> = new Set<Square>(['green', 'yellow', 'grey', 'empty']);

/**
 * Checks a board's shape: strings where strings are due, at most CARD_ROWS
 * rows of exactly ROW_SQUARES squares per card, avatars as bytes.
 * A board is built by the game module, never by a player, so a bad one is a
 * programming error.
 * @throws TypeError naming the first offending field (`cards[3].rows[1]: …`)
 */
export function validateBoard(board: Board): void {
  if (typeof board !== 'object' || board === null) throw new TypeError('board: not an object');
  if (typeof board.title !== 'string') throw new TypeError('board.title: not a string');
  if (typeof board.puzzle !== 'string') throw new TypeError('board.puzzle: not a string');
  if (!Array.isArray(board.cards)) throw new TypeError('board.cards: not an array');
  board.cards.forEach((card: Card, i) => {
    const at = `board.cards[${i}]`;
    if (typeof card !== 'object' || card === null) throw new TypeError(`${at}: not an object`);
    if (typeof card.id !== 'string') throw new TypeError(`${at}.id: not a string`);
    if (typeof card.name !== 'string') throw new TypeError(`${at}.name: not a string`);
    if (card.avatar !== undefined && card.avatar !== null && !(card.avatar instanceof Uint8Array)) {
      throw new TypeError(`${at}.avatar: not a Uint8Array`);
    }
    if (!Array.isArray(card.rows)) throw new TypeError(`${at}.rows: not an array`);
    if (card.rows.length > CARD_ROWS) throw new TypeError(`${at}.rows: ${card.rows.length} rows, at most ${CARD_ROWS}`);
    card.rows.forEach((row, r) => {
      if (!Array.isArray(row) || row.length !== ROW_SQUARES) {
        throw new TypeError(`${at}.rows[${r}]: not an array of ${ROW_SQUARES} squares`);
      }
      for (const sq of row) {
        if (!SQUARES.has(sq as string)) {
          throw new TypeError(`${at}.rows[${r}]: ${JSON.stringify(sq)} is not green, yellow, grey or empty`);
        }
      }
    });
  });
}
