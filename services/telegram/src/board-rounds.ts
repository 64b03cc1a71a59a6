/**
 * The rounds a chat's board shows, from its channel's `update.rounds`: the
 * live one (open, or locked waiting for its result; the soonest deadline
 * first) and the last finished one (settled or cancelled; the latest
 * deadline), at most one of each, in that order.
 */
import { BOARD_MAX_OUTCOMES, type BoardRound } from '@crowdplay/board';
import type { RoundView } from '@crowdplay/protocol';

/** The board rounds of a channel's rounds (absent or malformed ones: none). */
export function boardRounds(list: readonly RoundView[] | undefined): BoardRound[] {
  const valid = Array.isArray(list)
    ? list.filter((r) => r && typeof r.id === 'string' && Array.isArray(r.outcomes) && r.outcomes.length > 0)
    : [];
  const live = valid.filter((r) => r.state === 'open' || r.state === 'locked').sort((a, b) => a.deadline - b.deadline)[0];
  const last = valid.filter((r) => r.state === 'settled' || r.state === 'cancelled').sort((a, b) => b.deadline - a.deadline)[0];
  return [live, last].filter((r): r is RoundView => r !== undefined).map(boardRound);
}

/** One round as the board draws it: labels for ids, pool points or market prices (at most BOARD_MAX_OUTCOMES outcomes). */
export function boardRound(r: RoundView): BoardRound {
  const outcomes = r.outcomes.slice(0, BOARD_MAX_OUTCOMES).map((o, i) => {
    const figure = r.kind === 'pool' ? r.pool?.[i] : r.prices?.[i];
    return { label: r.labels?.[o] ?? o, value: typeof figure === 'number' && Number.isFinite(figure) && figure >= 0 ? figure : 0 };
  });
  const winner = r.state === 'settled' && r.winner !== undefined ? r.outcomes.indexOf(r.winner) : -1;
  return {
    title: r.title ?? '',
    kind: r.kind,
    state: r.state,
    outcomes,
    ...(winner >= 0 && winner < outcomes.length ? { winner } : {}),
  };
}
