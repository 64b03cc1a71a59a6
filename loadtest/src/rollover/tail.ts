/**
 * What the slowest chats' final boards waited for: the rollover's staleness
 * p95 is set by its slowest 5 %, and each of them is one of three kinds
 * (decision 0041), which call for different fixes.
 */

/** Why a chat's final board came late. */
export type TailKind =
  /** A board drawn before the chat's last change went after it: the final board waited out the spacing after that one. */
  | 'staleSend'
  /** No board before the final one: the chat waited for its turn. */
  | 'firstBoard'
  /** The previous board went before the last change: the final board waited out the spacing after it, then the pipeline. */
  | 'afterBoard';

/** One chat's final board: its last change, the final board's send and the chat's earlier board sends, ms since epoch. */
export interface FinalBoard {
  lastChangeMs: number;
  finalMs: number;
  sendsMs: readonly number[];
}

/** Counts of {@link tailKinds}. */
export interface TailSummary {
  /** The share of chats taken, slowest first. */
  share: number;
  /** Chats in the tail: ceil(share × chats). */
  chats: number;
  staleSend: number;
  firstBoard: number;
  afterBoard: number;
}

/**
 * The kind of one chat's final board (see {@link TailKind}); sends from `finalMs` on are ignored.
 * @throws RangeError when a time is not a finite number or `finalMs` is before `lastChangeMs`
 */
export function tailKind(b: FinalBoard): TailKind {
  for (const t of [b.lastChangeMs, b.finalMs, ...b.sendsMs])
    if (!Number.isFinite(t)) throw new RangeError(`a time must be a finite number, got ${t}`);
  if (b.finalMs < b.lastChangeMs)
    throw new RangeError(`the final board (${b.finalMs}) cannot go before the last change (${b.lastChangeMs})`);
  const before = b.sendsMs.filter((t) => t < b.finalMs);
  if (before.length === 0) return 'firstBoard';
  return before.some((t) => t > b.lastChangeMs) ? 'staleSend' : 'afterBoard';
}

/**
 * The kinds of the slowest `share` of the chats (by final board − last change; ties in input order).
 * @param share the tail's share of the chats, in (0, 1]. @defaultValue 0.05
 * @throws RangeError when `share` is not in (0, 1], or as {@link tailKind}
 */
export function tailKinds(boards: readonly FinalBoard[], share = 0.05): TailSummary {
  if (!(share > 0 && share <= 1)) throw new RangeError(`share must be in (0, 1], got ${share}`);
  const kinds = boards.map((b) => ({ stale: b.finalMs - b.lastChangeMs, kind: tailKind(b) }));
  const n = Math.ceil(share * kinds.length);
  const tail = kinds
    .map((k, i) => ({ ...k, i }))
    .sort((a, b) => b.stale - a.stale || a.i - b.i)
    .slice(0, n);
  const count = (kind: TailKind): number => tail.filter((t) => t.kind === kind).length;
  return { share, chats: n, staleSend: count('staleSend'), firstBoard: count('firstBoard'), afterBoard: count('afterBoard') };
}
