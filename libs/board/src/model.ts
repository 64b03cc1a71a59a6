/**
 * The board model: what a chat's live board shows, as plain data that can be
 * structured-cloned to a render thread.
 *
 * A board is a chat's title and puzzle id plus one card per player: the
 * player's avatar (PNG or JPEG bytes, or none: a coloured initial), display
 * name, and the rows of coloured squares of a Wordle grid (up to 6 rows of 5).
 * Letters are never part of the model: the public board shows colours only.
 * Below the title bar a board may show the chat's rounds: the one taking
 * stakes (or locked, waiting for its result) and the last one finished.
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

/** Most rounds on a board: the live one and the last one finished. */
export const BOARD_MAX_ROUNDS = 2;
/** Most outcomes drawn of one round. */
export const BOARD_MAX_OUTCOMES = 8;

/** One outcome of a round on the board. */
export interface BoardOutcome {
  /** The outcome's display label (truncated by width when drawn). */
  readonly label: string;
  /** Pool: points staked on it; market: its price in [0, 1]. */
  readonly value: number;
}

/** A round as the board shows it (no countdown: the picture is not redrawn by the second). */
export interface BoardRound {
  /** The question (truncated by width when drawn). */
  readonly title: string;
  readonly kind: 'pool' | 'market';
  readonly state: 'open' | 'locked' | 'settled' | 'cancelled';
  /** The outcomes in the round's order, at most BOARD_MAX_OUTCOMES. */
  readonly outcomes: readonly BoardOutcome[];
  /** Settled: the index of the winning outcome. */
  readonly winner?: number;
}

/** A chat's board. */
export interface Board {
  /** The chat's title (truncated by width when drawn). */
  readonly title: string;
  /** The puzzle's id as shown (e.g. `#412` or `2026-11-30`). */
  readonly puzzle: string;
  /** One card per player, in the order they are drawn (the caller sorts). Past BOARD_MAX_CARDS the rest are counted, not drawn. */
  readonly cards: readonly Card[];
  /** The chat's rounds, drawn in this order below the title bar (at most BOARD_MAX_ROUNDS); absent or empty: none. */
  readonly rounds?: readonly BoardRound[];
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
  if (board.rounds !== undefined) validateRounds(board.rounds);
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

const KINDS: ReadonlySet<string> = new Set(['pool', 'market']);
const STATES: ReadonlySet<string> = new Set(['open', 'locked', 'settled', 'cancelled']);

/** Checks `board.rounds` (see {@link validateBoard}). @throws TypeError naming the first offending field */
function validateRounds(rounds: readonly BoardRound[]): void {
  if (!Array.isArray(rounds)) throw new TypeError('board.rounds: not an array');
  if (rounds.length > BOARD_MAX_ROUNDS) throw new TypeError(`board.rounds: ${rounds.length} rounds, at most ${BOARD_MAX_ROUNDS}`);
  rounds.forEach((r: BoardRound, i) => {
    const at = `board.rounds[${i}]`;
    if (typeof r !== 'object' || r === null) throw new TypeError(`${at}: not an object`);
    if (typeof r.title !== 'string') throw new TypeError(`${at}.title: not a string`);
    if (!KINDS.has(r.kind)) throw new TypeError(`${at}.kind: ${JSON.stringify(r.kind)} is not pool or market`);
    if (!STATES.has(r.state)) throw new TypeError(`${at}.state: ${JSON.stringify(r.state)} is not open, locked, settled or cancelled`);
    if (!Array.isArray(r.outcomes) || r.outcomes.length === 0 || r.outcomes.length > BOARD_MAX_OUTCOMES)
      throw new TypeError(`${at}.outcomes: not an array of 1 to ${BOARD_MAX_OUTCOMES} outcomes`);
    r.outcomes.forEach((o: BoardOutcome, j) => {
      if (typeof o?.label !== 'string') throw new TypeError(`${at}.outcomes[${j}].label: not a string`);
      if (typeof o.value !== 'number' || !Number.isFinite(o.value) || o.value < 0)
        throw new TypeError(`${at}.outcomes[${j}].value: not a finite number ≥ 0`);
    });
    if (r.winner !== undefined && !(Number.isInteger(r.winner) && r.winner >= 0 && r.winner < r.outcomes.length))
      throw new TypeError(`${at}.winner: not an outcome index`);
  });
}
