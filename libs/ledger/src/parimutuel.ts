/**
 * Parimutuel (pool) payouts in exact integer arithmetic.
 *
 * Everyone stakes points on one outcome; at settle the pool (all stakes minus
 * the house take) is shared among the stakes on the winning outcome in
 * proportion to their size. Shares are rarely whole points, so:
 *
 * 1. each winning stake gets `floor(stake × pool ÷ winningPool)` (the product
 *    is computed in BigInt, so nothing overflows or rounds);
 * 2. the points left over (fewer than the number of winning stakes) go one
 *    each to the stakes with the largest remainders
 *    `(stake × pool) mod winningPool` — the largest remainder (Hamilton)
 *    method;
 * 3. tie-break between equal remainders: the EARLIER stake first (lower index
 *    in `stakes`, which is the order the stakes were accepted in).
 *
 * The payouts therefore sum exactly to the pool, and each differs from the
 * exact share `stake × pool ÷ winningPool` by less than one point.
 *
 * House take: `floor(total × takeBps ÷ 10_000)` points (LEDGER_HOUSE_TAKE_BPS)
 * are taken before the pool is shared. Nobody on the winning side: every
 * stake is refunded in full and nothing is taken.
 */
import { CrowdplayError } from '@crowdplay/protocol';

/** One accepted stake, in the order stakes were accepted (earlier first). */
export interface PoolStake {
  /** Who staked (carried through to the payout; not interpreted). */
  viewer: string;
  /** The outcome staked on (an index or an outcome key; compared with ===). */
  outcome: number | string;
  /** Points staked: a positive safe integer. */
  amount: number;
}

/** What one stake receives at settle. */
export interface PoolPayout {
  /** Index of the stake in the input array. */
  stakeIndex: number;
  viewer: string;
  /** Points paid (≥ 0; losing stakes are not listed). */
  amount: number;
}

/** The settlement of a pool. */
export interface PoolSettlement {
  /** Sum of every stake, points. */
  total: number;
  /** Sum of the stakes on the winning outcome, points. */
  winningPool: number;
  /** Points to the house account: floor(total × takeBps ÷ 10_000), or 0 when refunded. */
  take: number;
  /** Points shared among the winners: total − take (or total when refunded). */
  pool: number;
  /** True when nobody staked on the winner: `payouts` are full refunds of every stake. */
  refunded: boolean;
  /**
   * One entry per winning stake (or per stake when refunded), in stake
   * order. The amounts sum exactly to `pool`.
   */
  payouts: PoolPayout[];
}

/** Basis points in a whole: a take of 10_000 bps is 100 %. */
export const BPS_PER_WHOLE = 10_000;

function invalid(what: string, value: unknown): CrowdplayError {
  return new CrowdplayError('CP_ERR_LEDGER_INVALID_AMOUNT', [`${what} = ${String(value)}`]);
}

/**
 * Settles a parimutuel pool (see the module doc for the formula and the
 * tie-break).
 *
 * @param stakes accepted stakes, earliest first (this order breaks ties)
 * @param winner the winning outcome (compared with `===` to each stake's outcome)
 * @param takeBps house take in basis points, an integer in [0, 10_000] (LEDGER_HOUSE_TAKE_BPS)
 * @returns payouts summing exactly to `pool`
 * @throws CrowdplayError CP_ERR_LEDGER_INVALID_AMOUNT for a stake that is not a
 *   positive safe integer, a total past Number.MAX_SAFE_INTEGER, or a takeBps
 *   outside [0, 10_000]
 */
export function settlePool(stakes: readonly PoolStake[], winner: number | string, takeBps = 0): PoolSettlement {
  if (!Number.isSafeInteger(takeBps) || takeBps < 0 || takeBps > BPS_PER_WHOLE) throw invalid('takeBps', takeBps);
  let total = 0;
  let winningPool = 0;
  for (let i = 0; i < stakes.length; i++) {
    const s = stakes[i]!;
    if (!Number.isSafeInteger(s.amount) || s.amount <= 0) throw invalid(`stakes[${i}].amount`, s.amount);
    total += s.amount;
    if (s.outcome === winner) winningPool += s.amount;
  }
  if (!Number.isSafeInteger(total)) throw invalid('total of stakes', total);

  if (winningPool === 0) {
    // Nobody on the winning side: everyone gets their stake back, nothing is taken.
    return {
      total,
      winningPool: 0,
      take: 0,
      pool: total,
      refunded: true,
      payouts: stakes.map((s, i) => ({ stakeIndex: i, viewer: s.viewer, amount: s.amount })),
    };
  }

  const take = Number((BigInt(total) * BigInt(takeBps)) / BigInt(BPS_PER_WHOLE));
  const pool = total - take;
  const bigPool = BigInt(pool);
  const bigWinning = BigInt(winningPool);

  const payouts: PoolPayout[] = [];
  const remainders: bigint[] = [];
  let paid = 0;
  for (let i = 0; i < stakes.length; i++) {
    const s = stakes[i]!;
    if (s.outcome !== winner) continue;
    const product = BigInt(s.amount) * bigPool;
    const share = Number(product / bigWinning);
    payouts.push({ stakeIndex: i, viewer: s.viewer, amount: share });
    remainders.push(product % bigWinning);
    paid += share;
  }

  // Each floor lost less than one point, so 0 ≤ leftover < payouts.length.
  const leftover = pool - paid;
  if (leftover > 0) {
    const order = payouts.map((_, j) => j);
    // Largest remainder first; equal remainders: the earlier stake first.
    order.sort((a, b) => {
      const ra = remainders[a]!;
      const rb = remainders[b]!;
      if (ra !== rb) return ra > rb ? -1 : 1;
      return payouts[a]!.stakeIndex - payouts[b]!.stakeIndex;
    });
    for (let j = 0; j < leftover; j++) payouts[order[j]!]!.amount += 1;
  }
  return { total, winningPool, take, pool, refunded: false, payouts };
}
