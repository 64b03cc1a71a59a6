/**
 * Rounds as viewers and games see them: a round's {@link RoundView} (state,
 * deadline, a pool's totals or a market's quantities and prices) and the
 * list a channel's updates carry.
 */
import { prices as lmsrPrices } from '@crowdplay/lmsr';
import type { RoundView } from '@crowdplay/protocol';
import type { Round } from './round-state.ts';

/** A round's view: a pool's totals (points per outcome), or a market's b, quantities and prices (from its book once locked). */
export function roundView(round: Round): RoundView {
  const r = round.row;
  const v: RoundView = {
    id: r.id,
    kind: r.kind,
    outcomes: r.outcomes,
    state: round.state,
    openedAt: r.openedAt,
    deadline: r.deadlineAt,
    entries: round.entries,
  };
  if (r.kind === 'pool') v.pool = [...round.totals];
  else {
    const b = r.liquidity ?? 1;
    v.b = b;
    if (round.market) {
      v.q = round.market.quantities();
      v.prices = round.market.prices();
    } else {
      v.q = round.book?.kind === 'market' ? [...round.book.q] : r.outcomes.map(() => 0);
      v.prices = lmsrPrices(v.q, b);
    }
  }
  if (r.title !== null) v.title = r.title;
  if (r.labels !== null) v.labels = r.labels;
  if (round.winner !== null) v.winner = r.outcomes[round.winner]!;
  return v;
}

/** Views of the open and locked rounds, then the newest `recentShown` finished ones (ROUND_RECENT_SHOWN). */
export function roundViews(rounds: Iterable<Round>, recentShown: number): RoundView[] {
  const live: RoundView[] = [];
  const done: RoundView[] = [];
  for (const r of rounds) (r.final ? done : live).push(roundView(r));
  return [...live, ...done.slice(-recentShown)];
}
