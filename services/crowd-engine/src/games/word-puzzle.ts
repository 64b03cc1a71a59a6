/**
 * The daily word puzzle of a Telegram group: pure rules, no I/O.
 *
 * - A puzzle is one secret five-letter word per period (PUZZLE_PERIOD_MS, a
 *   day by default): puzzle number n = floor(now / period); its word is
 *   picked from the answer list by a keyed hash of n, so every shard and
 *   every restart agrees on it without storing it, and the sequence is not
 *   guessable from the list order.
 * - A player has up to six guesses; each guess must be a five-letter word of
 *   the guess list; it is scored with the usual rules: a letter in the right
 *   place is green, a letter elsewhere in the word is yellow, else grey — and
 *   a letter repeated in the guess is yellow only as many times as it occurs
 *   in the answer beyond its greens (greens are assigned first, then yellows
 *   left to right).
 * - A chat's state: per player, the marks of their guesses (the public board
 *   shows colours only, never letters) and whether they solved it.
 */
import { createHmac } from 'node:crypto';
import { CrowdplayError } from '@crowdplay/protocol';
import type { AbsorbResult, GameModule } from './game-module.ts';
import { puzzleRoundStep, type PuzzleRoundOptions } from './puzzle-round.ts';

/** Letters in a word. */
export const WORD_LENGTH = 5;
/** Guesses a player has per puzzle. */
export const MAX_GUESSES = 6;

/** The mark of one letter: green (right place), yellow (elsewhere in the word), grey (not in it). */
export type Mark = 'g' | 'y' | '.';

/**
 * Scores a guess against the answer (both lower-case, WORD_LENGTH letters).
 * @returns one mark per letter, e.g. 'gy..g'
 */
export function score(guess: string, answer: string): string {
  const marks: Mark[] = new Array<Mark>(WORD_LENGTH).fill('.');
  const left = new Map<string, number>();
  for (let i = 0; i < WORD_LENGTH; i++) {
    if (guess[i] === answer[i]) marks[i] = 'g';
    else left.set(answer[i]!, (left.get(answer[i]!) ?? 0) + 1);
  }
  for (let i = 0; i < WORD_LENGTH; i++) {
    if (marks[i] === 'g') continue;
    const n = left.get(guess[i]!) ?? 0;
    if (n > 0) {
      marks[i] = 'y';
      left.set(guess[i]!, n - 1);
    }
  }
  return marks.join('');
}

/** The puzzle number at `nowMs` for a period of `periodMs` (ms since the Unix epoch ÷ period, floored). */
export function puzzleNumber(nowMs: number, periodMs: number): number {
  return Math.floor(nowMs / periodMs);
}

/**
 * The answer of puzzle `n`: answers[HMAC-SHA256(key, n) mod answers.length].
 * @param key a server secret, so the sequence cannot be computed from the public word list
 */
export function answerFor(n: number, answers: readonly string[], key: string): string {
  if (answers.length === 0) throw new RangeError('no answers');
  const h = createHmac('sha256', key).update(String(n)).digest();
  return answers[h.readUInt32BE(0) % answers.length]!;
}

/** One player's game in one puzzle. */
export interface PlayerGame {
  /** Marks of each guess so far, in order (e.g. ['..y.g', 'ggggg']). */
  marks: string[];
  solved: boolean;
  /** Display name for the board (when the gateway knows it). */
  name?: string;
}

/** The outcome of a guess. */
export interface GuessResult {
  marks: string;
  solved: boolean;
  /** Guesses left after this one. */
  left: number;
}

/**
 * A chat's puzzle: the answer and every player's guesses. Guesses are
 * validated (shape, dictionary, guesses left, not yet solved).
 */
export class ChatPuzzle {
  readonly players = new Map<string, PlayerGame>();
  /** Bumped on every accepted guess (the board's version). */
  version = 0;

  constructor(
    readonly number: number,
    private readonly answer: string,
    private readonly dictionary: ReadonlySet<string>,
  ) {}

  /**
   * Scores `word` for `player`.
   * @throws CrowdplayError CP_ERR_PUZZLE_INVALID_WORD (not five letters a–z, or
   *   not in the dictionary), CP_ERR_PUZZLE_OVER (solved, or six guesses used)
   */
  guess(player: string, word: string, name?: string): GuessResult {
    const w = typeof word === 'string' ? word.toLowerCase() : '';
    if (!/^[a-z]{5}$/.test(w) || !this.dictionary.has(w))
      throw new CrowdplayError('CP_ERR_PUZZLE_INVALID_WORD', [String(word).slice(0, 16)]);
    let g = this.players.get(player);
    if (!g) this.players.set(player, (g = { marks: [], solved: false }));
    if (g.solved || g.marks.length >= MAX_GUESSES) throw new CrowdplayError('CP_ERR_PUZZLE_OVER', [g.solved ? 'solved' : 'out of guesses']);
    const marks = score(w, this.answer);
    if (name !== undefined && name !== '') g.name = name.slice(0, 128);
    g.marks.push(marks);
    g.solved = marks === 'ggggg';
    this.version++;
    return { marks, solved: g.solved, left: MAX_GUESSES - g.marks.length };
  }
}

/** Options of {@link wordPuzzle}. */
export interface WordPuzzleOptions {
  /** PUZZLE_PERIOD_MS: a new puzzle every period. */
  periodMs: number;
  /** Possible answers (lower-case five-letter words). */
  answers: readonly string[];
  /** Accepted guesses (must include the answers). */
  dictionary: ReadonlySet<string>;
  /** Server secret keying the answer sequence. */
  key: string;
  /** Clock for `init` (ms since epoch; the shard's clock drives the rest). @defaultValue Date.now */
  now?: () => number;
  /** The round of the day (puzzle-round.ts); absent: the puzzle opens no rounds. */
  round?: PuzzleRoundOptions;
  /** Points each player is granted on first joining the chat (0 = none; only useful with `round`). */
  welcomeGrant?: number;
}

/** The broadcast state: the puzzle number and every player's marks (colours only, never letters). */
export interface WordPuzzleState extends Record<string, unknown> {
  puzzle: number;
  players: Record<string, PlayerGame>;
}

/**
 * The word puzzle as a built-in game module of a chat's channel: `guess`
 * frames are scored at once (the ack carries the marks), the state (puzzle
 * number and every player's marks) is broadcast on change, and the puzzle
 * rolls over at each period boundary (a player's game of the previous puzzle
 * is then over). With `round`, it also opens and settles one round per
 * puzzle (puzzle-round.ts) and grants `welcomeGrant` points to each new player.
 */
export function wordPuzzle(opts: WordPuzzleOptions): GameModule {
  let current: ChatPuzzle | null = null;
  let sentVersion = -1;
  let sentNumber = -1;
  /** When a player first solved the current puzzle within the round's guesses (ms since epoch; 0 = before this game held the chat). */
  let firstSolveAt: number | null = null;
  /** The previous puzzle's number and first quick solve (its round may be settled just after the rollover). */
  let previous: { number: number; firstSolveAt: number | null } | null = null;
  const quick = (g: PlayerGame): boolean => opts.round !== undefined && g.solved && g.marks.length <= opts.round.guesses;
  const at = (nowMs: number): ChatPuzzle => {
    const n = puzzleNumber(nowMs, opts.periodMs);
    if (current?.number !== n) {
      previous = current ? { number: current.number, firstSolveAt } : null;
      current = new ChatPuzzle(n, answerFor(n, opts.answers, opts.key), opts.dictionary);
      firstSolveAt = null;
    }
    return current;
  };
  /** Players restored or absorbed: a quick solve among them counts as made before any deadline. */
  const noteRestored = (p: ChatPuzzle): void => {
    if (firstSolveAt === null && [...p.players.values()].some(quick)) firstSolveAt = 0;
  };
  const step = opts.round ? puzzleRoundStep(opts.round) : null;
  const state = (p: ChatPuzzle): WordPuzzleState => ({
    puzzle: p.number,
    players: Object.fromEntries(
      [...p.players].map(([v, g]) => [v, { marks: [...g.marks], solved: g.solved, ...(g.name ? { name: g.name } : {}) }]),
    ),
  });
  return {
    name: 'word-puzzle',
    welcomeGrant: opts.welcomeGrant ?? 0,
    // A tenant's own game may take a chat over (attach); the puzzle comes back when it lets go.
    yieldsToGame: true,
    actions: () => [],
    init(restored) {
      const p = at((opts.now ?? Date.now)());
      for (const [v, g] of playersOf(restored, p.number) ?? []) p.players.set(v, g);
      noteRestored(p);
      sentVersion = p.version;
      sentNumber = p.number;
      return state(p);
    },
    onBatch: () => null,
    guess(viewer, word, nowMs, name) {
      const p = at(nowMs);
      const r = p.guess(viewer, word, name);
      if (firstSolveAt === null && quick(p.players.get(viewer)!)) firstSolveAt = nowMs;
      return r;
    },
    rounds: step
      ? (nowMs, rounds) => {
          const p = at(nowMs);
          return step(nowMs, rounds, { number: p.number, endsAt: (p.number + 1) * opts.periodMs, firstSolveAt, previous });
        }
      : undefined,
    tick(nowMs) {
      const p = at(nowMs);
      if (p.number === sentNumber && p.version === sentVersion) return null;
      sentNumber = p.number;
      sentVersion = p.version;
      return state(p);
    },
    absorb(from, nowMs) {
      const p = at(nowMs);
      const theirs = playersOf(from, p.number);
      const r: AbsorbResult = { state: state(p), added: 0, replaced: 0, kept: 0, stale: theirs === null && from !== null };
      for (const [v, g] of theirs ?? []) {
        const mine = p.players.get(v);
        if (!mine) {
          p.players.set(v, g);
          r.added++;
        } else if (furtherAlong(g, mine)) {
          p.players.set(v, mine.name !== undefined && g.name === undefined ? { ...g, name: mine.name } : g);
          r.replaced++;
        } else r.kept++;
      }
      if (r.added + r.replaced > 0) {
        // The board's version moves on, so the next tick() sends the merged state too.
        noteRestored(p);
        p.version++;
        r.state = state(p);
      }
      return r;
    },
  };
}

/**
 * The players of a snapshotted puzzle state when it is of puzzle `number`
 * (each game checked: marks of five g/y/. letters, at most MAX_GUESSES; a
 * malformed one is skipped), or null for another puzzle or no state.
 */
function playersOf(restored: Record<string, unknown> | null, number: number): Array<[string, PlayerGame]> | null {
  const r = restored as Partial<WordPuzzleState> | null;
  if (!r || r.puzzle !== number || !r.players || typeof r.players !== 'object') return null;
  const out: Array<[string, PlayerGame]> = [];
  for (const [v, g] of Object.entries(r.players)) {
    if (Array.isArray(g?.marks) && g.marks.every((m) => typeof m === 'string' && /^[gy.]{5}$/.test(m))) {
      const marks = [...g.marks].slice(0, MAX_GUESSES);
      const game: PlayerGame = { marks, solved: marks.includes('ggggg') };
      if (typeof g.name === 'string') game.name = g.name.slice(0, 128);
      out.push([v, game]);
    }
  }
  return out;
}

/**
 * A player's game in two chats (moved state vs the new chat's own): the one
 * further along wins — solved beats unsolved, else more guesses; a tie keeps
 * the new chat's (so absorbing twice changes nothing).
 */
function furtherAlong(a: PlayerGame, b: PlayerGame): boolean {
  if (a.solved !== b.solved) return a.solved;
  return a.marks.length > b.marks.length;
}
