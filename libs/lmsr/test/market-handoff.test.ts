import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError } from '@crowdplay/protocol';
import { InMemoryWallet, Market, type MarketHandoff } from '../src/index.ts';

function funded(): InMemoryWallet {
  const w = new InMemoryWallet();
  for (const v of ['a', 'b', 'c']) w.fund(v, 1_000_000);
  return w;
}

/** Runs the same trades on a market; `pause` is called half-way and may swap the market. */
function run(m0: Market, pause: (m: Market) => Market): Market {
  let m = m0;
  m.buy('t1', 'a', 0, 40, 1_000);
  m.buyForBudget('t2', 'b', 1, 333);
  m.sell('t3', 'a', 0, 15, 0);
  m.buy('t4', 'c', 2, 40_000, 1_000_000); // moves q far: the weights re-base on the next trade
  m.buy('t5', 'c', 2, 700, 1_000_000);
  m.buy('t9', 'a', 1, 5, 1_000);
  m.revert('t9');
  m = pause(m);
  m.buy('t6', 'a', 1, 25, 10_000);
  m.sell('t7', 'b', 1, 3, 0);
  m.buyForBudget('t8', 'c', 0, 97);
  return m;
}

test('market handoff - a restored market continues exactly as the original would have', () => {
  const plain = run(new Market({ b: 100, outcomes: 3, wallet: funded() }), (m) => m);
  let handed: MarketHandoff | undefined;
  const moved = run(new Market({ b: 100, outcomes: 3, wallet: funded() }), (m) => {
    handed = JSON.parse(JSON.stringify(m.handoff())) as MarketHandoff;
    const r = Market.restore({ b: 100, outcomes: 3, wallet: funded() }, handed);
    assert.deepEqual(r.snapshot(), m.snapshot(), 'same q, positions, maker account, trade count');
    assert.deepEqual(r.prices(), m.prices(), 'same prices, bit for bit');
    assert.equal(r.quoteBuy(1, 17), m.quoteBuy(1, 17));
    assert.deepEqual(r.trade('t2'), m.trade('t2'));
    assert.equal(r.trade('t9'), undefined, 'a reverted trade stays forgotten');
    return r;
  });
  assert.ok(handed && handed.trades.length === 5 && handed.ref > 0, 'five trades kept, weights re-based');
  assert.deepEqual(moved.snapshot(), plain.snapshot());
  for (const id of ['t6', 't7', 't8']) assert.deepEqual(moved.trade(id), plain.trade(id));
  // A trade id sent again after the move is a replay; with other fields it is a conflict.
  assert.deepEqual(moved.buy('t1', 'a', 0, 40, 1_000), plain.trade('t1'));
  assert.throws(
    () => moved.buy('t1', 'a', 0, 41, 1_000),
    (e) => isCrowdplayError(e, 'CP_ERR_MARKET_DUPLICATE_ID'),
  );
  assert.deepEqual(moved.settle(2), plain.settle(2));
});

test('market handoff - a state no market could be in is refused', () => {
  const opts = { b: 10, outcomes: 2, wallet: new InMemoryWallet() };
  const sell = { id: 's', kind: 'sell', viewer: 'a', outcome: 0, requested: 1, limit: 0, shares: 1, points: 0, position: 0 } as const;
  const buy = { ...sell, id: 'b', kind: 'buy', points: 6, position: 1 } as const;
  for (const bad of [
    { v: 2, ref: 0, trades: [] },
    { v: 1, ref: -1, trades: [] },
    { v: 1, ref: 0, trades: [sell] }, // sells what nobody holds
    { v: 1, ref: 0, trades: [buy, buy] }, // a repeated id
    { v: 1, ref: 0, trades: [{ ...buy, outcome: 2 }] },
    { v: 1, ref: 0, trades: [{ ...buy, kind: 'gift' }] },
  ]) {
    assert.throws(
      () => Market.restore(opts, bad as unknown as MarketHandoff),
      (e) => isCrowdplayError(e, 'CP_ERR_MARKET_INVALID_BOOK'),
      JSON.stringify(bad),
    );
  }
  const m = new Market(opts);
  m.lock();
  assert.throws(
    () => m.handoff(),
    (e) => isCrowdplayError(e, 'CP_ERR_MARKET_CLOSED'),
  );
});
