/**
 * The router's decisions, as pure functions of what it knows and a clock
 * (unit-tested with fake clocks): which shards are alive, which live shard
 * takes a new channel, which channels move to even out the spread, and how
 * many moves the rebalance budget allows now.
 */

/** What the router knows of one shard, from its heartbeats. */
export interface MemberLoad {
  id: string;
  /** Channels it owns (its last heartbeat, plus the router's assignments since). */
  channels: number;
  /** Intents it took per second over its last heartbeat interval. */
  intentsPerS: number;
  /** When its last heartbeat arrived, ms since epoch (router clock). */
  lastSeenMs: number;
  draining: boolean;
}

/**
 * - `live`: heard from within the timeout, not draining: takes channels.
 * - `draining`: alive but leaving: takes nothing, its channels move when it releases them.
 * - `dead`: missed its heartbeats (or never heard from since the router started, for longer than the timeout): its channels move.
 * - `unknown`: never heard from, but the router started less than a timeout ago (it restarted): its channels stay.
 */
export type ShardState = 'live' | 'draining' | 'dead' | 'unknown';

/**
 * A shard's state at `nowMs`.
 * @param m what the router knows (undefined: never heard from)
 * @param timeoutMs ROUTER_SHARD_TIMEOUT_MS
 * @param startedAtMs when the router started (its grace period for owners recorded in Postgres)
 */
export function shardState(m: MemberLoad | undefined, nowMs: number, timeoutMs: number, startedAtMs: number): ShardState {
  if (!m) return nowMs - startedAtMs > timeoutMs ? 'dead' : 'unknown';
  if (m.lastSeenMs < nowMs - timeoutMs) return 'dead';
  return m.draining ? 'draining' : 'live';
}

/**
 * A shard's load: channels + intents per second / `intentsPerChannel`
 * (ROUTER_INTENTS_PER_CHANNEL: that many intents/s weigh as much as a channel).
 */
export function shardLoad(m: MemberLoad, intentsPerChannel: number): number {
  return m.channels + m.intentsPerS / intentsPerChannel;
}

/**
 * The least-loaded shard of `live` (ties: fewer channels, then id), or null
 * when `live` is empty.
 */
export function pickLeastLoaded(live: readonly MemberLoad[], intentsPerChannel: number): MemberLoad | null {
  let best: MemberLoad | null = null;
  let bestLoad = Infinity;
  for (const m of live) {
    const l = shardLoad(m, intentsPerChannel);
    if (
      best === null ||
      l < bestLoad ||
      (l === bestLoad && (m.channels < best.channels || (m.channels === best.channels && m.id < best.id)))
    ) {
      best = m;
      bestLoad = l;
    }
  }
  return best;
}

/**
 * Spreads `n` new channels over `live` shards at once (a burst of first
 * joins, a dead shard's channels, a drain): each goes, in turn, to the shard
 * of least load counting the channels planned before it (water-filling), so
 * a batch lands as evenly as one-by-one picks would, without a heartbeat in
 * between. Updates nothing.
 * @returns the shard id of each of the n channels, in order ([] when `live` is empty)
 */
export function planPlacement(live: readonly MemberLoad[], n: number, intentsPerChannel: number): string[] {
  if (live.length === 0 || n <= 0) return [];
  const planned = live.map((m) => ({ ...m }));
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const best = pickLeastLoaded(planned, intentsPerChannel)!;
    best.channels++;
    out.push(best.id);
  }
  return out;
}

/** One planned move of a channel from one live shard to another. */
export interface PlannedMove {
  channel: string;
  from: string;
  to: string;
}

/**
 * Moves that even out channels across live shards: while the fullest shard
 * has at least two more channels than the emptiest, one of its channels
 * (lowest id not in `skip`) moves to the emptiest. At most `max` moves.
 * Every live shard ends with its fair share (⌊n/k⌋ or ⌈n/k⌉ channels) when
 * `max` allows and nothing is skipped.
 * @param owned channels per live shard (the router's assignments; a live shard with none must be present with [])
 * @param skip channels that must not move now (in flight, busy with rounds)
 */
export function planMoves(
  owned: ReadonlyMap<string, readonly string[]>,
  max: number,
  skip: ReadonlySet<string> = new Set(),
): PlannedMove[] {
  const moves: PlannedMove[] = [];
  if (owned.size < 2 || max <= 0) return moves;
  const lists = new Map<string, string[]>();
  for (const [shard, chs] of owned) lists.set(shard, [...chs].filter((c) => !skip.has(c)).sort());
  const counts = new Map<string, number>();
  for (const [shard, chs] of owned) counts.set(shard, chs.length);
  const ids = [...owned.keys()].sort();
  while (moves.length < max) {
    // Fullest shard that still has a movable channel, and the emptiest shard.
    let from: string | undefined;
    let to: string | undefined;
    for (const id of ids) {
      const n = counts.get(id)!;
      if ((lists.get(id)?.length ?? 0) > 0 && (from === undefined || n > counts.get(from)!)) from = id;
      if (to === undefined || n < counts.get(to)!) to = id;
    }
    if (from === undefined || to === undefined || from === to || counts.get(from)! - counts.get(to)! < 2) break;
    const channel = lists.get(from)!.shift()!;
    moves.push({ channel, from, to });
    counts.set(from, counts.get(from)! - 1);
    counts.set(to, counts.get(to)! + 1);
  }
  return moves;
}

/**
 * A token bucket of moves: `perS` tokens per second, holding at most
 * max(1, perS). `take(n, nowMs)` returns how many of `n` moves may start now.
 */
export class MoveBudget {
  private tokens: number;
  private lastMs: number;

  constructor(
    private readonly perS: number,
    nowMs: number,
  ) {
    this.tokens = Math.max(1, perS);
    this.lastMs = nowMs;
  }

  /** Moves allowed now, ≤ n (0 when the rate is 0). */
  take(n: number, nowMs: number): number {
    if (this.perS <= 0) return 0;
    const cap = Math.max(1, this.perS);
    this.tokens = Math.min(cap, this.tokens + ((nowMs - this.lastMs) / 1000) * this.perS);
    this.lastMs = nowMs;
    const k = Math.max(0, Math.min(n, Math.floor(this.tokens)));
    this.tokens -= k;
    return k;
  }
}
