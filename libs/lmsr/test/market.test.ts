import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError } from '@crowdplay/protocol';
import type { ErrorCode } from '@crowdplay/protocol';
import { InMemoryWallet, MAX_QUANTITY, Market } from '../src/index.ts';

function setup(
  b = 100,
  outcomes = 2,
  funds: Record<string, number> = { alice: 1_000, bob: 1_000 },
): { market: Market; wallet: InMemoryWallet } {
  const wallet = new InMemoryWallet();
  for (const [v, p] of Object.entries(funds)) wallet.fund(v, p);
  return { market: new Market({ b, outcomes, wallet }), wallet };
}

/** Asserts `fn` throws `code` and that neither the market nor the wallet changed. */
function refuses(market: Market, wallet: InMemoryWallet, code: ErrorCode, fn: () => unknown): void {
  const before = market.snapshot();
  const balances = wallet.balances();
  assert.throws(fn, (err: unknown) => isCrowdplayError(err) && err.code === code, `expected ${code}`);
  assert.deepEqual(market.snapshot(), before, 'the market changed');
  assert.deepEqual(wallet.balances(), balances, 'a wallet changed');
}

void test('market - opens with subsidy ceil(b·ln n) and uniform prices', () => {
  const { market } = setup(100, 2);
  assert.equal(market.subsidy, 70); // 100·ln 2 = 69.31…
  assert.equal(market.makerBalance, 70);
  assert.deepEqual(market.prices(), [0.5, 0.5]);
  assert.equal(Market.subsidyFor(1000, 10), 2303); // 1000·ln 10 = 2302.58…
  assert.equal(market.state, 'open');
});

void test('market - buy charges rounded up, sell pays rounded down', () => {
  const { market, wallet } = setup();
  // C([10,0]) − C([0,0]) = 5.1249… → 6 points.
  const r = market.buy('t1', 'alice', 0, 10, 6);
  assert.deepEqual(r, { id: 't1', kind: 'buy', viewer: 'alice', outcome: 0, requested: 10, limit: 6, shares: 10, points: 6, position: 10 });
  assert.equal(wallet.balance('alice'), 994);
  assert.equal(market.makerBalance, 76);
  assert.deepEqual(market.quantities(), [10, 0]);
  // Selling them back: 5.1249… → 5 points.
  const s = market.sell('t2', 'alice', 0, 10, 5);
  assert.equal(s.points, 5);
  assert.equal(s.position, 0);
  assert.equal(wallet.balance('alice'), 999);
  assert.equal(market.makerBalance, 71);
  assert.deepEqual(market.viewer('alice'), { shares: [0, 0], charged: 6, proceeds: 5 });
  assert.equal(market.quoteBuy(0, 10), 6);
});

void test('market - idempotent replays return the original result and change nothing', () => {
  const { market, wallet } = setup();
  const r = market.buy('t1', 'alice', 1, 20, 20);
  const snap = market.snapshot();
  const balances = wallet.balances();
  assert.equal(market.buy('t1', 'alice', 1, 20, 20), r);
  assert.deepEqual(market.snapshot(), snap);
  assert.deepEqual(wallet.balances(), balances);
  // Same id, other fields: refused, nothing changes.
  refuses(market, wallet, 'CP_ERR_MARKET_DUPLICATE_ID', () => market.buy('t1', 'alice', 1, 21, 20));
  refuses(market, wallet, 'CP_ERR_MARKET_DUPLICATE_ID', () => market.buy('t1', 'bob', 1, 20, 20));
  refuses(market, wallet, 'CP_ERR_MARKET_DUPLICATE_ID', () => market.buy('t1', 'alice', 0, 20, 20));
  refuses(market, wallet, 'CP_ERR_MARKET_DUPLICATE_ID', () => market.buy('t1', 'alice', 1, 20, 21));
  refuses(market, wallet, 'CP_ERR_MARKET_DUPLICATE_ID', () => market.sell('t1', 'alice', 1, 20, 20));
  refuses(market, wallet, 'CP_ERR_MARKET_DUPLICATE_ID', () => market.buyForBudget('t1', 'alice', 1, 20));
  // A replay still answers after the market closed.
  market.settle(1);
  assert.equal(market.buy('t1', 'alice', 1, 20, 20), r);
});

void test('market - a refused trade does not consume its id', () => {
  const { market, wallet } = setup(100, 2, { alice: 3 });
  refuses(market, wallet, 'CP_ERR_MARKET_INSUFFICIENT_FUNDS', () => market.buy('t1', 'alice', 0, 10, 100));
  wallet.fund('alice', 100);
  assert.equal(market.buy('t1', 'alice', 0, 10, 100).points, 6);
});

void test('market - slippage guards', () => {
  const { market, wallet } = setup();
  refuses(market, wallet, 'CP_ERR_MARKET_SLIPPAGE', () => market.buy('t1', 'alice', 0, 10, 5));
  market.buy('t2', 'alice', 0, 10, 6);
  refuses(market, wallet, 'CP_ERR_MARKET_SLIPPAGE', () => market.sell('t3', 'alice', 0, 10, 6));
  assert.equal(market.sell('t3', 'alice', 0, 10, 5).points, 5);
});

void test('market - shares and funds are checked', () => {
  const { market, wallet } = setup(100, 3, { alice: 1_000, bob: 2 });
  market.buy('t1', 'alice', 2, 50, 1_000);
  refuses(market, wallet, 'CP_ERR_MARKET_INSUFFICIENT_SHARES', () => market.sell('t2', 'alice', 2, 51, 0));
  refuses(market, wallet, 'CP_ERR_MARKET_INSUFFICIENT_SHARES', () => market.sell('t2', 'alice', 1, 1, 0));
  refuses(market, wallet, 'CP_ERR_MARKET_INSUFFICIENT_SHARES', () => market.sell('t2', 'bob', 2, 1, 0));
  refuses(market, wallet, 'CP_ERR_MARKET_INSUFFICIENT_FUNDS', () => market.buy('t2', 'bob', 2, 10, 1_000));
  refuses(market, wallet, 'CP_ERR_MARKET_INSUFFICIENT_FUNDS', () => market.buy('t2', 'carol', 0, 1, 1_000));
  refuses(market, wallet, 'CP_ERR_MARKET_INSUFFICIENT_FUNDS', () => market.buyForBudget('t2', 'bob', 0, 100));
});

void test('market - bad input: documented code, nothing changes', () => {
  const { market, wallet } = setup(100, 2);
  market.buy('t0', 'alice', 0, 5, 100);
  const bad: Array<[ErrorCode, () => unknown]> = [
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buy('x', 'alice', 0, 0, 100)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buy('x', 'alice', 0, -3, 100)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buy('x', 'alice', 0, 1.5, 100)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buy('x', 'alice', 0, Number.NaN, 100)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buy('x', 'alice', 0, Infinity, 100)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buy('x', 'alice', 0, 1e16, 1e15)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buy('x', 'alice', 0, 1, -1)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buy('x', 'alice', 0, 1, 2.5)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buy('x', 'alice', 0, 1, Number.NaN)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.sell('x', 'alice', 0, 0, 0)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.sell('x', 'alice', 0, 1, -1)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buyForBudget('x', 'alice', 0, 0)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buyForBudget('x', 'alice', 0, 0.5)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.buyForBudget('x', 'alice', 0, Number.NaN)],
    ['CP_ERR_MARKET_UNKNOWN_OUTCOME', () => market.buy('x', 'alice', 2, 1, 100)],
    ['CP_ERR_MARKET_UNKNOWN_OUTCOME', () => market.buy('x', 'alice', -1, 1, 100)],
    ['CP_ERR_MARKET_UNKNOWN_OUTCOME', () => market.sell('x', 'alice', 0.5, 1, 0)],
    ['CP_ERR_MARKET_UNKNOWN_OUTCOME', () => market.buyForBudget('x', 'alice', Number.NaN, 10)],
    ['CP_ERR_MARKET_INVALID_TRADE', () => market.buy('', 'alice', 0, 1, 100)],
    ['CP_ERR_MARKET_INVALID_TRADE', () => market.buy('y'.repeat(129), 'alice', 0, 1, 100)],
    ['CP_ERR_MARKET_INVALID_TRADE', () => market.buy('x', '', 0, 1, 100)],
    ['CP_ERR_MARKET_UNKNOWN_OUTCOME', () => market.settle(2)],
    ['CP_ERR_MARKET_UNKNOWN_OUTCOME', () => market.quoteBuy(5, 1)],
    ['CP_ERR_MARKET_INVALID_QUANTITY', () => market.quoteSell(0, 0)],
    ['CP_ERR_MARKET_INSUFFICIENT_SHARES', () => market.quoteSell(0, 6)],
  ];
  for (const [code, fn] of bad) refuses(market, wallet, code, fn);
  for (const [b, n] of [
    [0, 2],
    [-1, 2],
    [Number.NaN, 2],
    [Infinity, 2],
    [100, 1],
    [100, 11],
    [100, 2.5],
  ] as const) {
    assert.throws(
      () => new Market({ b, outcomes: n, wallet }),
      (err: unknown) => isCrowdplayError(err, 'CP_ERR_MARKET_INVALID_BOOK'),
    );
  }
  assert.throws(
    () => wallet.fund('x', -1),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_MARKET_INVALID_QUANTITY'),
  );
  assert.throws(
    () => wallet.reserve('x', 0.5),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_MARKET_INVALID_QUANTITY'),
  );
});

void test('market - buyForBudget buys the most whole shares that fit', () => {
  const { market, wallet } = setup(100, 2);
  // 10 shares cost 5.12 → 6 points; 11 shares cost 5.66 → 6; 12 cost 6.18 → 7.
  assert.equal(market.quoteBuy(0, 11), 6);
  assert.equal(market.quoteBuy(0, 12), 7);
  const r = market.buyForBudget('t1', 'alice', 0, 6);
  assert.equal(r.shares, 11);
  assert.equal(r.points, 6);
  assert.equal(wallet.balance('alice'), 994);
  // Outcome 1 is now cheaper than 0.5: two shares cost 0.95 → 1 point, three cost 1.4 → 2.
  assert.equal(market.quoteBuy(1, 2), 1);
  assert.equal(market.quoteBuy(1, 3), 2);
  assert.equal(market.buyForBudget('t2', 'bob', 1, 1).shares, 2);
  // A price near 1: a budget of 1 point buys one whole share (a share never costs more than the point it can pay).
  const { market: m2, wallet: w2 } = setup(1, 2);
  m2.buy('a', 'alice', 0, 40, 1_000);
  const one = m2.buyForBudget('b', 'bob', 0, 1);
  assert.deepEqual([one.shares, one.points, w2.balance('bob')], [1, 1, 999]);
  // Each budget: the charge fits and one more share would not.
  for (const budget of [1, 2, 3, 7, 50, 333, 999]) {
    const { market: m } = setup(37, 4, { v: 10_000 });
    m.buy('pre', 'v', 1, 25, 10_000);
    const res = m.buyForBudget('b', 'v', 3, budget);
    assert.ok(res.points <= budget);
    assert.ok(m.quoteBuy(3, 1) >= 1);
    const { market: fresh } = setup(37, 4, { v: 10_000 });
    fresh.buy('pre', 'v', 1, 25, 10_000);
    assert.equal(fresh.quoteBuy(3, res.shares), res.points);
    assert.ok(fresh.quoteBuy(3, res.shares + 1) > budget, `budget ${budget}: ${res.shares + 1} shares also fit`);
  }
});

void test('market - settle pays 1 point per winning share, once', () => {
  const { market, wallet } = setup(100, 3, { alice: 1_000, bob: 1_000, carol: 1_000 });
  market.buy('1', 'alice', 0, 100, 1_000);
  market.buy('2', 'bob', 1, 30, 1_000);
  market.buy('3', 'carol', 0, 10, 1_000);
  market.sell('4', 'alice', 0, 40, 0);
  const total = wallet.total() + market.makerBalance;
  const before = market.makerBalance;
  const res = market.settle(0);
  assert.deepEqual(res.payouts, [
    { viewer: 'alice', points: 60 },
    { viewer: 'carol', points: 10 },
  ]);
  assert.equal(res.totalPayout, 70);
  assert.equal(res.makerPnl, before - market.subsidy - 70);
  assert.equal(res.makerBalance, market.makerBalance);
  assert.ok(res.makerBalance >= 0);
  assert.equal(wallet.total() + market.makerBalance, total);
  assert.equal(market.state, 'settled');
  // Same winner: no-op; other winner or cancel: refused, nothing changes.
  assert.equal(market.settle(0), res);
  refuses(market, wallet, 'CP_ERR_MARKET_ALREADY_FINAL', () => market.settle(1));
  refuses(market, wallet, 'CP_ERR_MARKET_ALREADY_FINAL', () => market.cancel());
  refuses(market, wallet, 'CP_ERR_MARKET_CLOSED', () => market.buy('5', 'bob', 0, 1, 10));
  refuses(market, wallet, 'CP_ERR_MARKET_CLOSED', () => market.sell('5', 'bob', 1, 1, 0));
});

void test('market - lock stops trading; settle still pays', () => {
  const { market, wallet } = setup();
  market.buy('1', 'alice', 1, 10, 100);
  market.lock();
  assert.equal(market.state, 'locked');
  refuses(market, wallet, 'CP_ERR_MARKET_CLOSED', () => market.buy('2', 'bob', 0, 1, 10));
  refuses(market, wallet, 'CP_ERR_MARKET_CLOSED', () => market.buyForBudget('2', 'bob', 0, 10));
  assert.equal(market.settle(1).totalPayout, 10);
});

void test('market - cancel returns everyone to where they started, including a profitable cash-out', () => {
  const { market, wallet } = setup(10, 2, { alice: 1_000, bob: 1_000 });
  const start = wallet.balances();
  market.buy('1', 'alice', 0, 20, 1_000); // cheap
  market.buy('2', 'bob', 0, 200, 1_000); // drives the price up
  const sold = market.sell('3', 'alice', 0, 20, 0); // alice cashes out at a profit
  assert.ok(sold.points > market.viewer('alice')!.charged);
  const res = market.cancel();
  assert.deepEqual(wallet.balances(), start);
  assert.equal(market.makerBalance, market.subsidy);
  assert.deepEqual(res.unrecovered, []);
  assert.ok(res.refunds.some((r) => r.viewer === 'alice' && r.points < 0));
  assert.equal(market.cancel(), res);
  assert.equal(market.state, 'cancelled');
  refuses(market, wallet, 'CP_ERR_MARKET_ALREADY_FINAL', () => market.settle(0));
});

void test('market - cancel: a claw-back the wallet cannot cover stays with the viewer, no wallet goes negative', () => {
  const { market, wallet } = setup(10, 2, { alice: 1_000, bob: 1_000 });
  market.buy('1', 'alice', 0, 20, 1_000);
  market.buy('2', 'bob', 0, 200, 1_000);
  market.sell('3', 'alice', 0, 20, 0);
  const profit = -(market.viewer('alice')!.charged - market.viewer('alice')!.proceeds);
  wallet.reserve('alice', wallet.balance('alice') - profit + 1); // alice spent it elsewhere
  const total = wallet.total() + market.makerBalance;
  const res = market.cancel();
  assert.deepEqual(res.unrecovered, [{ viewer: 'alice', points: -profit }]);
  assert.equal(wallet.balance('alice'), profit - 1);
  assert.equal(wallet.total() + market.makerBalance, total);
  assert.equal(market.makerBalance, market.subsidy - profit);
});

void test('market - at a price near 1, k shares cost k points, not k + 1: a limit of k is met, a budget of k buys k', () => {
  const { market, wallet } = setup(1, 2, { whale: 1_000, alice: 100 });
  market.buy('w', 'whale', 0, 60, 1_000); // outcome 0 at a price of 1 − e^-60
  assert.ok(market.prices()[0]! > 1 - 1e-12);
  for (const k of [1, 2, 5, 50]) assert.equal(market.quoteBuy(0, k), k, `${k} shares`);
  const bought = market.buy('a1', 'alice', 0, 5, 5);
  assert.deepEqual([bought.shares, bought.points, wallet.balance('alice')], [5, 5, 95]);
  const budget = market.buyForBudget('a2', 'alice', 0, 7);
  assert.deepEqual([budget.shares, budget.points, wallet.balance('alice')], [7, 7, 88]);
  // A limit below k is still refused, and changes nothing.
  refuses(market, wallet, 'CP_ERR_MARKET_SLIPPAGE', () => market.buy('a3', 'alice', 0, 5, 4));
  // Settled on that outcome, alice's 12 shares pay exactly the 12 points she paid: no trade lost more than it can win.
  market.settle(0);
  assert.equal(wallet.balance('alice'), 100);
});

void test('market - overflow-sized positions: a dominant outcome costs and pays ~1 point per share', () => {
  const { market, wallet } = setup(1_000, 2, { whale: 3e12, minnow: 10_000 });
  const big = market.buy('1', 'whale', 0, 1e12, 2e12);
  assert.ok(big.points >= 1e12 - 1_000 * Math.LN2 && big.points <= 1e12, `charged ${big.points}`);
  const more = market.buy('2', 'whale', 0, 1e9, 2e9);
  // The real cost is 1e9 (to e^-1e9); the rounding guard at this scale (1e-12 × (k + b + spread) ≈ 1.001) would add 2:
  // the charge stops at the 1e9 points the shares can pay.
  assert.equal(more.points, 1e9);
  assert.equal(market.quoteBuy(1, 1), 1); // a worthless share is never free, and one share never costs over 1 point
  const sold = market.sell('3', 'whale', 0, 1e9, 0);
  assert.ok(sold.points <= 1e9 && sold.points >= 1e9 - 2, `paid ${sold.points}`);
  refuses(market, wallet, 'CP_ERR_MARKET_INVALID_QUANTITY', () => market.buy('4', 'whale', 0, MAX_QUANTITY, MAX_QUANTITY));
  const total = wallet.total() + market.makerBalance;
  const res = market.settle(0);
  assert.ok(res.makerPnl >= -market.subsidy);
  assert.equal(wallet.total() + market.makerBalance, total);
});

void test('market - revert undoes a buy or a sell exactly in the book, not in the wallet', () => {
  const { market, wallet } = setup();
  const before = market.snapshot();
  const prices = market.prices();
  const buy = market.buy('t1', 'alice', 0, 10, 6);
  assert.equal(market.revert('t1'), buy);
  assert.deepEqual(market.prices(), prices);
  assert.deepEqual(
    { ...market.snapshot(), viewers: [] },
    { ...before, viewers: [] },
    'q, maker balance and trade count are back where they were',
  );
  assert.deepEqual(market.viewer('alice'), { shares: [0, 0], charged: 0, proceeds: 0 });
  assert.equal(wallet.balance('alice'), 994, 'the wallet is the caller’s to restore');
  assert.equal(market.trade('t1'), undefined, 'the id is forgotten');

  market.buy('t2', 'bob', 1, 20, 1_000);
  const afterBuy = market.snapshot();
  const sell = market.sell('t3', 'bob', 1, 5, 0);
  assert.equal(market.revert('t3'), sell);
  assert.deepEqual(market.snapshot(), afterBuy);
  assert.equal(market.revert('nope'), undefined);
});

void test('market - revert refuses a buy whose shares were sold since, and any revert once locked', () => {
  const { market, wallet } = setup();
  market.buy('t1', 'alice', 0, 10, 1_000);
  market.sell('t2', 'alice', 0, 10, 0);
  refuses(market, wallet, 'CP_ERR_MARKET_INSUFFICIENT_SHARES', () => market.revert('t1'));
  market.lock();
  refuses(market, wallet, 'CP_ERR_MARKET_CLOSED', () => market.revert('t2'));
});
