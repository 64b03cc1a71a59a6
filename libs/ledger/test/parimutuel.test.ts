import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { isCrowdplayError } from '@crowdplay/protocol';
import { settlePool, type PoolStake } from '../src/index.ts';

const s = (viewer: string, outcome: number, amount: number): PoolStake => ({ viewer, outcome, amount });
const amounts = (r: ReturnType<typeof settlePool>): number[] => r.payouts.map((p) => p.amount);

describe('parimutuel - exact payouts', () => {
  it('divides evenly when the shares are whole', () => {
    const r = settlePool([s('a', 0, 100), s('b', 1, 300), s('c', 0, 300)], 0);
    assert.deepEqual([r.total, r.winningPool, r.take, r.pool, r.refunded], [700, 400, 0, 700, false]);
    // a: 100 × 700 / 400 = 175, c: 300 × 700 / 400 = 525
    assert.deepEqual(r.payouts, [
      { stakeIndex: 0, viewer: 'a', amount: 175 },
      { stakeIndex: 2, viewer: 'c', amount: 525 },
    ]);
  });

  it('a single winner takes the whole pool', () => {
    const r = settlePool([s('a', 0, 5), s('b', 1, 7), s('c', 2, 11)], 1);
    assert.deepEqual(r.payouts, [{ stakeIndex: 1, viewer: 'b', amount: 23 }]);
  });

  it('leftover points go by largest remainder', () => {
    // pool 10, winners 3 and 4 (winning pool 7): exact 30/7 = 4.285…, 40/7 = 5.714…
    // floors 4 + 5 = 9, one leftover point to the larger remainder (40 mod 7 = 5 > 30 mod 7 = 2): b.
    const r = settlePool([s('a', 0, 3), s('b', 0, 4), s('c', 1, 3)], 0);
    assert.deepEqual(amounts(r), [4, 6]);
    assert.equal(r.pool, 10);
  });

  it('equal remainders: the earlier stake gets the leftover point first', () => {
    // pool 10 shared by three equal stakes: 3.33… each, floors 9, one point left; all remainders equal → the first stake.
    const r = settlePool([s('a', 0, 1), s('b', 0, 1), s('c', 0, 1), s('d', 1, 7)], 0);
    assert.deepEqual(amounts(r), [4, 3, 3]);
    // Two points left (pool 11): the first two stakes.
    const r2 = settlePool([s('a', 0, 1), s('b', 0, 1), s('c', 0, 1), s('d', 1, 8)], 0);
    assert.deepEqual(amounts(r2), [4, 4, 3]);
    // Order is the stake order, not the viewer name.
    const r3 = settlePool([s('z', 0, 1), s('y', 0, 1), s('x', 0, 1), s('d', 1, 7)], 0);
    assert.deepEqual(
      r3.payouts.map((p) => [p.viewer, p.amount]),
      [
        ['z', 4],
        ['y', 3],
        ['x', 3],
      ],
    );
  });

  it('largest remainder beats stake order', () => {
    // pool 100, winners 1, 2, 4 (winning pool 7): exact 14.28…, 28.57…, 57.14…; floors 14 + 28 + 57 = 99.
    // remainders 100 mod 7 = 2, 200 mod 7 = 4, 400 mod 7 = 1 → the leftover goes to the stake of 2 (the 2nd stake).
    const r = settlePool([s('a', 0, 1), s('b', 0, 2), s('c', 0, 4), s('d', 1, 93)], 0);
    assert.deepEqual(amounts(r), [14, 29, 57]);
  });

  it('nobody on the winning side: everyone is refunded in full and nothing is taken', () => {
    const r = settlePool([s('a', 0, 10), s('b', 1, 20), s('a', 1, 5)], 2, 500);
    assert.deepEqual([r.refunded, r.take, r.pool, r.winningPool], [true, 0, 35, 0]);
    assert.deepEqual(
      r.payouts.map((p) => [p.stakeIndex, p.viewer, p.amount]),
      [
        [0, 'a', 10],
        [1, 'b', 20],
        [2, 'a', 5],
      ],
    );
  });

  it('no stakes at all: nothing to pay', () => {
    const r = settlePool([], 0, 1_000);
    assert.deepEqual([r.total, r.pool, r.take, r.payouts.length, r.refunded], [0, 0, 0, 0, true]);
  });

  it('house take is floor(total × bps / 10_000) and comes out before the pool is shared', () => {
    // total 1_001, 2.5 % = 25.025 → take 25, pool 976; winners 1 and 2 of 3 winning: 325.33…, 650.66…
    // floors 325 + 650 = 975, leftover 1 → larger remainder (1952 mod 3 = 2 > 976 mod 3 = 1): the 2.
    const r = settlePool([s('a', 0, 1), s('b', 0, 2), s('c', 1, 998)], 0, 250);
    assert.deepEqual([r.total, r.take, r.pool], [1_001, 25, 976]);
    assert.deepEqual(amounts(r), [325, 651]);
    // 100 % take: winners get nothing, payouts still sum to the pool (0).
    const all = settlePool([s('a', 0, 10), s('b', 1, 10)], 0, 10_000);
    assert.deepEqual([all.take, all.pool, amounts(all)], [20, 0, [0]]);
  });

  it('huge stakes: the product is exact (BigInt)', () => {
    const big = Number.MAX_SAFE_INTEGER - 10; // 9_007_199_254_740_981
    const r = settlePool([s('a', 0, big), s('b', 1, 7), s('c', 0, 3)], 0);
    assert.equal(r.total, Number.MAX_SAFE_INTEGER);
    // pool = 2^53 - 1, winning = big + 3; a's exact share = big × pool / (big + 3)
    const pool = BigInt(Number.MAX_SAFE_INTEGER);
    const win = BigInt(big + 3);
    const fa = (BigInt(big) * pool) / win;
    const fc2 = (3n * pool) / win;
    const ra = (BigInt(big) * pool) % win;
    const rc = (3n * pool) % win;
    const leftover = pool - fa - fc2;
    assert.equal(leftover, 1n);
    const expected = ra >= rc ? [fa + 1n, fc2] : [fa, fc2 + 1n];
    assert.deepEqual(amounts(r).map(BigInt), expected);
    assert.equal(
      amounts(r).reduce((a, b) => a + b, 0),
      Number.MAX_SAFE_INTEGER,
    );
  });

  it('bad input is refused with CP_ERR_LEDGER_INVALID_AMOUNT', () => {
    const bad = (fn: () => unknown): void => assert.throws(fn, (e) => isCrowdplayError(e, 'CP_ERR_LEDGER_INVALID_AMOUNT'));
    for (const amount of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 60]) bad(() => settlePool([s('a', 0, amount)], 0));
    bad(() => settlePool([s('a', 0, Number.MAX_SAFE_INTEGER), s('b', 0, 1)], 0)); // total past 2^53 - 1
    for (const bps of [-1, 10_001, 0.5, Number.NaN]) bad(() => settlePool([s('a', 0, 1)], 0, bps));
  });
});

describe('parimutuel - properties (10_000 runs each)', () => {
  const stakeArb = fc.record({
    viewer: fc.constantFrom('a', 'b', 'c', 'd'),
    outcome: fc.integer({ min: 0, max: 3 }),
    amount: fc.integer({ min: 1, max: 1_000_000_000 }),
  });
  const input = fc.record({
    stakes: fc.array(stakeArb, { minLength: 0, maxLength: 40 }),
    winner: fc.integer({ min: 0, max: 3 }),
    takeBps: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 10_000 })),
  });

  it('payouts sum exactly to the pool, are never negative, and the take + pool is the total', () => {
    fc.assert(
      fc.property(input, ({ stakes, winner, takeBps }) => {
        const r = settlePool(stakes, winner, takeBps);
        const sum = r.payouts.reduce((a, p) => a + p.amount, 0);
        assert.equal(sum, r.pool);
        assert.equal(r.pool + r.take, r.total);
        for (const p of r.payouts) assert.ok(p.amount >= 0 && Number.isSafeInteger(p.amount));
      }),
      { numRuns: 10_000 },
    );
  });

  it("each winner's payout is within one point of the exact share (floor or floor + 1)", () => {
    fc.assert(
      fc.property(input, ({ stakes, winner, takeBps }) => {
        const r = settlePool(stakes, winner, takeBps);
        if (r.refunded) {
          assert.deepEqual(
            r.payouts.map((p) => p.amount),
            stakes.map((x) => x.amount),
          );
          return;
        }
        for (const p of r.payouts) {
          const stake = BigInt(stakes[p.stakeIndex]!.amount);
          const floor = (stake * BigInt(r.pool)) / BigInt(r.winningPool);
          const got = BigInt(p.amount);
          assert.ok(got === floor || got === floor + 1n, `payout ${got} vs exact floor ${floor}`);
          assert.equal(stakes[p.stakeIndex]!.outcome, winner);
        }
      }),
      { numRuns: 10_000 },
    );
  });

  it('a bigger stake on the winner never gets less than a smaller one', () => {
    fc.assert(
      fc.property(input, ({ stakes, winner, takeBps }) => {
        const r = settlePool(stakes, winner, takeBps);
        if (r.refunded) return;
        const byStake = r.payouts.map((p) => [stakes[p.stakeIndex]!.amount, p.amount] as const);
        for (const [sa, pa] of byStake) for (const [sb, pb] of byStake) if (sa > sb) assert.ok(pa >= pb);
      }),
      { numRuns: 10_000 },
    );
  });
});
