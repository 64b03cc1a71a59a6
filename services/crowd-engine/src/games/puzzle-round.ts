/**
 * The word puzzle's round of the day: one round per puzzle and chat on
 * "will someone here solve today's word within N guesses before betting
 * closes?" (outcomes `yes`, `no`), opened by the built-in game, locked at
 * its deadline by the shard, and settled by the game from the puzzle:
 *
 * - opened at the first tick of a puzzle in the chat (its start, or the
 *   first tick after the chat's channel was acquired), open for
 *   `durationMs` or until the puzzle ends, whichever is sooner; not opened
 *   when the answer is already known (someone solved within N guesses) or
 *   when less than `minDurationMs` of the puzzle is left;
 * - settled `yes` as soon as a player solves within N guesses before the
 *   deadline (the round is locked by the settle, so nobody stakes on a
 *   known answer), `no` once it locked with no such solve.
 *
 * The round id is `puzzle-<n>` (n = puzzle number): a shard that takes the
 * chat over mid-puzzle finds the round in the channel's rounds and never
 * opens a second one (the store refuses a duplicate id).
 */
import type { Config } from '@crowdplay/config';
import type { RoundView } from '@crowdplay/protocol';
import type { RoundCommand } from './game-module.ts';

/** Ids of the rounds the word puzzle opens (`puzzle-<puzzle number>`); it settles only those. */
export const PUZZLE_ROUND_PREFIX = 'puzzle-';

/** Outcomes of a puzzle round. */
export const PUZZLE_OUTCOMES = ['yes', 'no'] as const;

/** Options of the word puzzle's round (PUZZLE_ROUND_* settings). */
export interface PuzzleRoundOptions {
  /** `pool` (parimutuel stakes) or `market` (LMSR, buy and cash out). */
  kind: 'pool' | 'market';
  /** Betting window from the round's opening (ms), cut at the puzzle's end. */
  durationMs: number;
  /** A player solving in at most this many guesses makes the round `yes`. */
  guesses: number;
  /** Shortest round worth opening (ms; ROUND_MIN_DURATION_MS). */
  minDurationMs: number;
  /** Market liquidity b (market only; absent = the channel's default). */
  liquidity?: number;
}

/** What the round logic reads of the current puzzle. */
export interface PuzzleView {
  /** The puzzle number. */
  number: number;
  /** When the puzzle ends (ms since epoch). */
  endsAt: number;
  /** When a player first solved this puzzle within the round's guesses (ms since epoch), or null. */
  firstSolveAt: number | null;
  /** The same of the puzzle before (its round may still wait for its settle right after the rollover), or null. */
  previous?: { number: number; firstSolveAt: number | null } | null;
}

/** The title of a puzzle round asking about `guesses` guesses. */
export function puzzleRoundTitle(guesses: number): string {
  return `Will someone here solve today's word in ${guesses} guesses or fewer before betting closes?`;
}

/**
 * The round step of the word puzzle (GameModule.rounds): returns the open
 * and settle commands due at `now` for the chat's `rounds`. A command not
 * answered (its round not in `rounds`) within 5 s is sent again, up to 3
 * opens per puzzle.
 */
export function puzzleRoundStep(opts: PuzzleRoundOptions): (now: number, rounds: RoundView[], puzzle: PuzzleView) => RoundCommand[] {
  /** Command key (`o:<id>` open, `s:<id>` settle) → when it was sent (ms). */
  const inFlight = new Map<string, number>();
  let opens = 0;
  let opensFor = -1;
  /** The puzzle whose round this game saw in the channel's rounds (a finished one may leave the list: never reopened). */
  let seenFor = -1;
  return (now, rounds, p) => {
    for (const [k, at] of inFlight) if (now - at > 5_000) inFlight.delete(k);
    const id = `${PUZZLE_ROUND_PREFIX}${p.number}`;
    const out: RoundCommand[] = [];
    const mine = rounds.find((r) => r.id === id);
    // Settle any of this game's unsettled rounds (an earlier puzzle's still locked after a restart settles on its own deadline).
    for (const r of rounds) {
      if (!r.id.startsWith(PUZZLE_ROUND_PREFIX) || (r.state !== 'open' && r.state !== 'locked')) continue;
      if (inFlight.has(`s:${r.id}`)) continue;
      const n = Number(r.id.slice(PUZZLE_ROUND_PREFIX.length));
      const at = n === p.number ? p.firstSolveAt : n === p.previous?.number ? p.previous.firstSolveAt : null;
      const solvedInTime = at !== null && at < r.deadline;
      if (r.state === 'open' && !solvedInTime) continue;
      inFlight.set(`s:${r.id}`, now);
      out.push({ op: 'settle', round: r.id, outcome: solvedInTime ? 'yes' : 'no' });
    }
    if (mine) {
      inFlight.delete(`o:${id}`);
      seenFor = p.number;
      return out;
    }
    if (seenFor === p.number) return out;
    if (opensFor !== p.number) {
      opensFor = p.number;
      opens = 0;
    }
    const durationMs = Math.min(opts.durationMs, p.endsAt - now);
    if (inFlight.has(`o:${id}`) || opens >= 3 || p.firstSolveAt !== null || durationMs < opts.minDurationMs) return out;
    opens++;
    inFlight.set(`o:${id}`, now);
    out.push({
      op: 'open',
      request: {
        round: id,
        kind: opts.kind,
        outcomes: [...PUZZLE_OUTCOMES],
        title: puzzleRoundTitle(opts.guesses),
        labels: { yes: `Yes, in ${opts.guesses} or fewer`, no: 'No' },
        durationMs,
        ...(opts.kind === 'market' && opts.liquidity !== undefined ? { liquidity: opts.liquidity } : {}),
      },
    });
    return out;
  };
}

/**
 * The word puzzle's round and welcome grant from the settings (PUZZLE_ROUND,
 * PUZZLE_ROUND_MS, PUZZLE_ROUND_GUESSES, PUZZLE_WELCOME_GRANT): empty when
 * PUZZLE_ROUND is off, so the puzzle opens no rounds and grants nothing.
 */
export function puzzleRound(config: Config): { round?: PuzzleRoundOptions; welcomeGrant?: number } {
  const p = config.puzzle;
  if (p.round === 'off') return {};
  return {
    round: { kind: p.round, durationMs: p.roundMs, guesses: p.roundGuesses, minDurationMs: config.rounds.minDurationMs },
    welcomeGrant: p.welcomeGrant,
  };
}
