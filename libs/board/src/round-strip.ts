/**
 * The texts of a round's strip on the board (render.ts draws them): a first
 * line with the question and the round's state, a second with the figures
 * (pool: points staked per outcome and their share; market: each outcome's
 * price as a percentage) or the result (the winner, or the refund).
 */
import type { BoardRound } from './model.ts';

/** What one round strip says. */
export interface RoundStripText {
  /** The question (or the kind when it has none). */
  readonly title: string;
  /** The state, right-aligned on the first line. */
  readonly state: string;
  /** The figures or the result. */
  readonly figures: string;
}

const STATE_TEXT: Record<BoardRound['state'], string> = {
  open: 'betting open',
  locked: 'betting closed',
  settled: 'result',
  cancelled: 'cancelled',
};

/** The texts of round `r`'s strip (labels as given; render.ts cleans and fits them). */
export function roundStripText(r: BoardRound): RoundStripText {
  const title = r.title !== '' ? r.title : r.kind === 'market' ? 'Market' : 'Pool';
  const total = r.kind === 'pool' ? r.outcomes.reduce((a, o) => a + o.value, 0) : 0;
  let figures: string;
  if (r.state === 'cancelled') figures = 'Cancelled: every stake refunded';
  else if (r.state === 'settled' && r.winner !== undefined) {
    figures = `Winner: ${r.outcomes[r.winner]!.label}`;
    if (r.kind === 'pool') figures += ` · ${total} points staked`;
  } else if (r.kind === 'pool') {
    figures = r.outcomes.map((o) => `${o.label} ${o.value}${total > 0 ? ` (${Math.round((o.value / total) * 100)}%)` : ''}`).join(' · ');
  } else figures = r.outcomes.map((o) => `${o.label} ${Math.round(o.value * 100)}%`).join(' · ');
  return { title, state: STATE_TEXT[r.state], figures };
}
