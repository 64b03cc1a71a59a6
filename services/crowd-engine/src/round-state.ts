/**
 * The round state machine, pure: a round's in-memory state and book, its
 * transitions (open → locked → settled | cancelled) and the checks of game
 * requests, stakes and trades against that state and the round's deadline.
 * No I/O, no timers, no ledger: the caller (round-lifecycle.ts,
 * round-intake.ts) writes the row and the transfers, then applies the
 * transition here.
 */
import type { Config } from '@crowdplay/config';
import type { Market, MarketHandoff } from '@crowdplay/lmsr';
import { CrowdplayError, checkLabels, type BusTrade, type ErrorCode } from '@crowdplay/protocol';
import type { RoundRow, RoundState } from '@crowdplay/store';
import type { ChannelCtlRequest } from './api.ts';

/**
 * The book written to the round's row: the final one when it locks, or the
 * live one of an open round handed off to the channel's next owner
 * (`handoff` set; a market's trades in `market`, a stake's `h` = hash of
 * viewer and key, so both continue with their idempotency ids).
 */
export type RoundBook =
  | { v: 1; kind: 'pool'; stakes: Array<[viewer: string, outcome: number, points: number, h?: string]>; handoff?: HandoffMark }
  | {
      v: 1;
      kind: 'market';
      q: number[];
      positions: Array<[viewer: string, shares: number[]]>;
      handoff?: HandoffMark;
      market?: MarketHandoff;
    };

/** When and at which epoch an open round's live book was handed off (ms since epoch). */
export interface HandoffMark {
  epoch: number;
  atMs: number;
}

/** What the game (or the built-in game) asks of a channel's rounds: a `round.open` control request without its routing. */
export type OpenRoundRequest = Omit<Extract<ChannelCtlRequest, { op: 'round.open' }>, 'op' | 'tenant'>;

/** One stake of a pool round (points). */
export interface PoolStakeRec {
  viewer: string;
  outcome: number;
  points: number;
  /** hashOf(viewer, key): the stake's idempotency id ('' in a locked book written before handoffs existed). */
  h: string;
  /** Refused by the ledger after it was applied: not in the book. */
  void: boolean;
}

/** A viewer's queue of stakes and trades in one round (round-intake.ts). */
export interface Chain {
  tail: Promise<void>;
  waiting: number;
}

/**
 * One round in memory, rebuilt from its row (and the row's book, if any).
 * Holds the state, the pool's stakes and totals or the market, and the
 * count of stakes and trades in flight that a lock waits for.
 */
export class Round {
  state: RoundState;
  winner: number | null;
  paid: boolean;
  readonly outcomeIdx: Map<string, number>;
  readonly stakes: PoolStakeRec[] = [];
  /** Stakes by h (hash of viewer and key). */
  readonly stakeByKey = new Map<string, PoolStakeRec>();
  readonly totals: number[];
  market: Market | null = null;
  book: RoundBook | null;
  entries = 0;
  inflight = 0;
  private idleWaiters: Array<() => void> = [];
  readonly chains = new Map<string, Chain>();
  /** Stakes and trades with a client key queued or running, by h: a copy sent meanwhile waits for the first's answer. */
  readonly pendingKeys = new Map<string, number>();
  /** Serialises lock, settle, cancel and payouts. */
  op: Promise<unknown> = Promise.resolve();
  lockPersisted: boolean;
  /** An expiry cancel is scheduled. */
  expiring = false;
  /** A retry of a final round's payments is running (round-lifecycle.ts `tick`). */
  paying = false;
  /** Not before this time (ms since epoch) is a final, unpaid round's payment tried again. */
  payRetryAt = 0;
  /** The live book an open round was handed off with (the row is open, the book not final). */
  readonly handedOff: RoundBook | null;

  constructor(readonly row: RoundRow) {
    this.state = row.state;
    this.winner = row.winner;
    this.paid = row.paid;
    this.outcomeIdx = new Map(row.outcomes.map((o, i) => [o, i]));
    this.totals = row.outcomes.map(() => 0);
    const book = (row.book as RoundBook | null) ?? null;
    this.handedOff = row.state === 'open' && book?.handoff !== undefined ? book : null;
    this.book = this.handedOff ? null : book;
    this.lockPersisted = this.book !== null;
    if (book?.kind === 'pool') {
      for (const [viewer, outcome, points, h] of book.stakes) {
        this.totals[outcome] = (this.totals[outcome] ?? 0) + points;
        this.entries++;
        const rec: PoolStakeRec = { viewer, outcome, points, h: h ?? '', void: false };
        this.stakes.push(rec);
        if (h) this.stakeByKey.set(h, rec);
      }
    } else if (book?.kind === 'market') this.entries = book.market ? book.market.trades.length : book.positions.length;
  }

  get id(): string {
    return this.row.id;
  }

  /** Settled or cancelled. */
  get final(): boolean {
    return this.state === 'settled' || this.state === 'cancelled';
  }

  /** open → locked: no stake or trade is accepted from now on. Returns whether the state changed. */
  closeEntries(): boolean {
    if (this.state !== 'open') return false;
    this.state = 'locked';
    return true;
  }

  /** → settled with outcome index `winner` (after its row says so). */
  markSettled(winner: number): void {
    this.state = 'settled';
    this.winner = winner;
  }

  /** → cancelled (after its row says so, or when its opening failed). */
  markCancelled(): void {
    this.state = 'cancelled';
  }

  /** A stake or trade starts: a lock waits for it ({@link idle}). */
  begin(): void {
    this.inflight++;
  }

  /** A stake or trade started by {@link begin} got its ledger answer. */
  end(): void {
    if (--this.inflight === 0) {
      const w = this.idleWaiters;
      this.idleWaiters = [];
      for (const f of w) f();
    }
  }

  /** Resolves when no stake or trade of this round is between its reservation and its ledger answer. */
  idle(): Promise<void> {
    return this.inflight === 0 ? Promise.resolve() : new Promise((r) => this.idleWaiters.push(r));
  }

  /** The book as it stands (a pool's stakes without their ids; a market's positions). */
  bookNow(): RoundBook {
    if (this.row.kind === 'pool') {
      return { v: 1, kind: 'pool', stakes: this.stakes.filter((s) => !s.void).map((s) => [s.viewer, s.outcome, s.points]) };
    }
    const snap = this.market!.snapshot();
    return {
      v: 1,
      kind: 'market',
      q: [...snap.q],
      positions: snap.viewers.filter((v) => v.shares.some((x) => x > 0)).map((v) => [v.viewer, [...v.shares]]),
    };
  }

  /** The live book of an open round for its next owner: a pool's stakes in order with their ids, a market's trades. */
  handoffBook(mark: HandoffMark): RoundBook {
    const live = this.bookNow();
    return live.kind === 'pool'
      ? { ...live, stakes: this.stakes.filter((s) => !s.void).map((s) => [s.viewer, s.outcome, s.points, s.h]), handoff: mark }
      : { ...live, handoff: mark, market: this.market!.handoff() };
  }
}

/** A round request's title and labels, only those present. */
function pick(req: OpenRoundRequest): { title?: string; labels?: Record<string, string> } {
  return { ...(req.title === undefined ? {} : { title: req.title }), ...(req.labels === undefined ? {} : { labels: req.labels }) };
}

/**
 * Checks a round request's duration, outcomes and liquidity against the
 * rounds' settings.
 * @returns the outcomes (a copy) and a market's liquidity b (null for a pool)
 * @throws CrowdplayError CP_ERR_ROUND_INVALID (duration, outcomes or liquidity out of range), CP_ERR_LABEL_INVALID (title or labels)
 */
export function validateOpen(cfg: Config['rounds'], req: OpenRoundRequest): { outcomes: string[]; b: number | null } {
  if (req.durationMs < cfg.minDurationMs || req.durationMs > cfg.maxDurationMs) {
    throw new CrowdplayError('CP_ERR_ROUND_INVALID', [`durationMs must be in [${cfg.minDurationMs}, ${cfg.maxDurationMs}]`]);
  }
  const outcomes = [...req.outcomes];
  if (outcomes.length < 2 || outcomes.length > 10 || new Set(outcomes).size !== outcomes.length) {
    throw new CrowdplayError('CP_ERR_ROUND_INVALID', ['2 to 10 distinct outcomes']);
  }
  let b: number | null = null;
  if (req.kind === 'market') {
    b = req.liquidity ?? cfg.defaultLiquidity;
    if (!Number.isSafeInteger(b) || b < 1 || b > cfg.maxLiquidity) {
      throw new CrowdplayError('CP_ERR_ROUND_INVALID', [`liquidity must be an integer in [1, ${cfg.maxLiquidity}] (ROUND_MAX_LIQUIDITY)`]);
    }
  } else if (req.liquidity !== undefined) throw new CrowdplayError('CP_ERR_ROUND_INVALID', ['liquidity is for market rounds']);
  // The edge checked these already (parseInbound); a built-in game's or a decoded control message's are checked again here.
  checkLabels({ t: 'round.open', round: req.round, kind: req.kind, outcomes, durationMs: req.durationMs, ...pick(req) });
  return { outcomes, b };
}

/**
 * The index of a round's outcome.
 * @throws CrowdplayError CP_ERR_ROUND_UNKNOWN_OUTCOME
 */
export function outcomeIndex(r: Round, outcome: string): number {
  const w = r.outcomeIdx.get(outcome);
  if (w === undefined) throw new CrowdplayError('CP_ERR_ROUND_UNKNOWN_OUTCOME', [outcome, r.id]);
  return w;
}

/**
 * Whether settling with outcome index `w` is already done (settled with it).
 * @throws CrowdplayError CP_ERR_ROUND_ALREADY_FINAL (settled with another outcome, or cancelled)
 */
export function alreadySettled(r: Round, w: number): boolean {
  if (r.state === 'settled') {
    if (r.winner === w) return true;
    throw new CrowdplayError('CP_ERR_ROUND_ALREADY_FINAL', [r.id, `settled with ${r.row.outcomes[r.winner!]}`]);
  }
  if (r.state === 'cancelled') throw new CrowdplayError('CP_ERR_ROUND_ALREADY_FINAL', [r.id, 'cancelled']);
  return false;
}

/**
 * Whether cancelling is already done (cancelled).
 * @throws CrowdplayError CP_ERR_ROUND_ALREADY_FINAL (settled)
 */
export function alreadyCancelled(r: Round): boolean {
  if (r.state === 'cancelled') return true;
  if (r.state === 'settled') throw new CrowdplayError('CP_ERR_ROUND_ALREADY_FINAL', [r.id, `settled with ${r.row.outcomes[r.winner!]}`]);
  return false;
}

/** Whether the round takes new stakes and trades at `now` (ms since epoch): open and before its deadline. */
export function acceptsEntries(r: Round, now: number): boolean {
  return r.state === 'open' && now < r.row.deadlineAt;
}

/** Whether an open round is at or past its deadline at `now` (ms): it locks. */
export function dueToLock(r: Round, now: number): boolean {
  return r.state === 'open' && now >= r.row.deadlineAt;
}

/** Whether a locked round, not yet expiring, is still unsettled `maxUnsettledMs` after its deadline at `now` (ms): it is cancelled. */
export function dueToExpire(r: Round, now: number, maxUnsettledMs: number): boolean {
  return r.state === 'locked' && !r.expiring && now >= r.row.deadlineAt + maxUnsettledMs;
}

/** Why a stake or trade does not fit the round (a stake in a market, a trade in a pool, an unknown outcome), or null. */
export function tradeMismatch(r: Round, t: BusTrade): ErrorCode | null {
  const wantPool = t.k === 'stake';
  if (wantPool !== (r.row.kind === 'pool')) return 'CP_ERR_ROUND_WRONG_KIND';
  if (!r.outcomeIdx.has(t.outcome)) return 'CP_ERR_ROUND_UNKNOWN_OUTCOME';
  return null;
}

/** Whether the round has taken a stake or trade with this h (a replay is answered from it). */
export function knownKey(r: Round, t: BusTrade, h: string): boolean {
  return t.k === 'stake' ? r.stakeByKey.has(h) : r.market?.trade(h) !== undefined;
}

/** @throws CrowdplayError CP_ERR_ROUND_FULL at `max` (ROUND_MAX_ENTRIES) stakes or trades */
export function checkRoom(r: Round, max: number): void {
  if (r.entries >= max) throw new CrowdplayError('CP_ERR_ROUND_FULL', [r.id, max]);
}
