import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { verifyLedger } from '@crowdplay/ledger';
import type { BusAck, BusTrade, RoundView, WalletCredit } from '@crowdplay/protocol';
import { encodeJson } from '@crowdplay/bus';
import { SequencerService } from '@crowdplay/sequencer';
import { tugOfWar } from '../src/index.ts';
import { startHarness, type Harness } from './harness.ts';

let seq = 10_000;

/** Polls an async condition every 10 ms until it holds (fails after `ms`). */
async function eventually(cond: () => Promise<boolean>, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('rounds', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ ledger: true, rounds: { walletReloadMs: 0, unsettledMaxMs: 1_500, payRetryMs: 100 } });
    await h.store.tenants.create('evil', 'Evil');
  });
  after(() => h.close());

  const T = 'acme';
  const ledger = (): NonNullable<Harness['ledger']> => h.ledger!;

  async function channel(id: string): Promise<void> {
    await h.store.channels.ensure(id, T);
    await h.router.assign(id);
  }
  async function fund(viewer: string, points: number): Promise<void> {
    await ledger().grant(T, viewer, points, `grant-${viewer}-${++seq}`);
  }
  async function bal(viewer: string): Promise<number> {
    return ledger().balance(T, { kind: 'wallet', owner: viewer });
  }
  async function trade(ch: string, viewer: string, t: BusTrade): Promise<BusAck> {
    const s = ++seq;
    h.send(ch, [{ action: '', viewer, seq: s, conn: s, trade: t }]);
    return h.waitFor(() => h.acks.find((a) => a.seq === s));
  }
  async function ctl(ch: string, req: Record<string, unknown>): Promise<{ ok: boolean; code?: string; round?: RoundView }> {
    return (await h.ctl(ch, { tenant: T, ...req })) as { ok: boolean; code?: string; round?: RoundView };
  }
  async function verified(): Promise<void> {
    const v = await verifyLedger(h.store.db);
    assert.deepEqual(v.failures, []);
  }
  function refused(ack: BusAck, code: string): void {
    assert.deepEqual([ack.ok, ack.code], [false, code]);
  }

  it('pool - exact payouts with the leftover point by largest remainder, then idempotent settle', async () => {
    await channel('pool1');
    for (const v of ['pa', 'pb', 'pc', 'pd']) await fund(v, 100);
    const opened = await ctl('pool1', { op: 'round.open', round: 'r1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 });
    assert.equal(opened.ok, true);
    assert.deepEqual([opened.round?.state, opened.round?.pool], ['open', [0, 0]]);
    // total 19, winning pool 14: pa 7·19/14 = 9 r 7, pc 4·19/14 = 5 r 6, pd 3·19/14 = 4 r 1 → the leftover point goes to pa.
    const a = await trade('pool1', 'pa', { k: 'stake', round: 'r1', outcome: 'x', points: 7 });
    assert.deepEqual([a.ok, a.cost, a.balance], [true, 7, 93]);
    assert.equal((await trade('pool1', 'pb', { k: 'stake', round: 'r1', outcome: 'y', points: 5 })).ok, true);
    assert.equal((await trade('pool1', 'pc', { k: 'stake', round: 'r1', outcome: 'x', points: 4 })).ok, true);
    assert.equal((await trade('pool1', 'pd', { k: 'stake', round: 'r1', outcome: 'x', points: 3 })).ok, true);
    assert.equal(await bal('pa'), 93, 'the stake is committed before its ack');
    const update = await h.waitFor(() => h.updates.find((u) => u.channel === 'pool1' && u.rounds?.[0]?.entries === 4));
    assert.deepEqual(update.rounds?.[0]?.pool, [14, 5]);

    const settled = await ctl('pool1', { op: 'round.settle', round: 'r1', outcome: 'x' });
    assert.deepEqual([settled.ok, settled.round?.state, settled.round?.winner], [true, 'settled', 'x']);
    assert.deepEqual(
      [await bal('pa'), await bal('pb'), await bal('pc'), await bal('pd')],
      [103, 95, 101, 101],
      'payouts 10, 5, 4 sum exactly to the pool of 19',
    );
    const balances = (round: string) =>
      h.wallets.flatMap((w) => (w.frame.t === 'balance' && w.frame.round === round ? [[w.viewer, w.frame] as const] : []));
    const pushed = await h.waitFor(() => (balances('r1').length === 3 ? balances('r1') : false));
    assert.deepEqual(pushed.map(([viewer, f]) => [viewer, f.reason, f.delta, f.points]).sort(), [
      ['pa', 'payout', 10, 103],
      ['pc', 'payout', 5, 101],
      ['pd', 'payout', 4, 101],
    ]);
    // Every participant, the loser too, gets its own result: points in, points back, the difference.
    const results = await h.waitFor(() => {
      const got = h.wallets.flatMap((w) => (w.frame.t === 'roundResult' && w.frame.round === 'r1' ? [[w.viewer, w.frame] as const] : []));
      return got.length === 4 ? got : false;
    });
    assert.deepEqual(results.map(([viewer, f]) => [viewer, f.channel, f.state, f.winner, f.staked, f.paid, f.net]).sort(), [
      ['pa', 'pool1', 'settled', 'x', 7, 10, 3],
      ['pb', 'pool1', 'settled', 'x', 5, 0, -5],
      ['pc', 'pool1', 'settled', 'x', 4, 5, 1],
      ['pd', 'pool1', 'settled', 'x', 3, 4, 1],
    ]);
    const row = await h.store.rounds.get('pool1', 'r1');
    assert.deepEqual([row?.state, row?.winner, row?.paid], ['settled', 0, true]);
    assert.ok(h.roundFrames.some((f) => f.round.id === 'r1' && f.round.state === 'settled'));

    // Settle again: same outcome is a no-op, another is refused; nothing moves.
    assert.equal((await ctl('pool1', { op: 'round.settle', round: 'r1', outcome: 'x' })).ok, true);
    assert.equal((await ctl('pool1', { op: 'round.settle', round: 'r1', outcome: 'y' })).code, 'CP_ERR_ROUND_ALREADY_FINAL');
    assert.equal((await ctl('pool1', { op: 'round.cancel', round: 'r1' })).code, 'CP_ERR_ROUND_ALREADY_FINAL');
    assert.deepEqual([await bal('pa'), await bal('pb')], [103, 95]);
    await verified();
  });

  it('pool - nobody on the winning side: everyone is refunded', async () => {
    await channel('pool2');
    await fund('qa', 50);
    await ctl('pool2', { op: 'round.open', round: 'r1', kind: 'pool', outcomes: ['x', 'y', 'z'], durationMs: 60_000 });
    assert.equal((await trade('pool2', 'qa', { k: 'stake', round: 'r1', outcome: 'x', points: 20 })).ok, true);
    assert.equal((await ctl('pool2', { op: 'round.settle', round: 'r1', outcome: 'z' })).ok, true);
    assert.equal(await bal('qa'), 50);
    await verified();
  });

  it('game requests - bad input gets its code and changes nothing', async () => {
    await channel('bad1');
    const open = { op: 'round.open', round: 'b1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 };
    assert.equal((await h.ctl('bad1', { ...open, tenant: 'evil' })).code, 'CP_ERR_AUTH_FORBIDDEN_CHANNEL');
    assert.equal(await h.store.rounds.get('bad1', 'b1'), null);
    assert.equal((await ctl('bad1', { ...open, durationMs: 10 })).code, 'CP_ERR_ROUND_INVALID');
    assert.equal((await ctl('bad1', { ...open, liquidity: 10 })).code, 'CP_ERR_ROUND_INVALID');
    assert.equal((await ctl('bad1', { ...open, kind: 'market', liquidity: 2_000_000_000 })).code, 'CP_ERR_ROUND_INVALID');
    // A control message is checked again at the shard: a label the edge would refuse is refused here too.
    assert.equal((await ctl('bad1', { ...open, title: 'rigged\u202Eniw' })).code, 'CP_ERR_LABEL_INVALID');
    assert.equal((await ctl('bad1', { ...open, labels: { z: 'Zed' } })).code, 'CP_ERR_LABEL_INVALID');
    assert.equal(await h.store.rounds.get('bad1', 'b1'), null);
    assert.equal((await ctl('bad1', open)).ok, true);
    assert.equal((await ctl('bad1', open)).code, 'CP_ERR_ROUND_EXISTS');
    assert.equal((await ctl('bad1', { op: 'round.settle', round: 'nope', outcome: 'x' })).code, 'CP_ERR_ROUND_UNKNOWN');
    assert.equal((await ctl('bad1', { op: 'round.settle', round: 'b1', outcome: 'w' })).code, 'CP_ERR_ROUND_UNKNOWN_OUTCOME');
    assert.equal(
      (await h.ctl('bad1', { op: 'round.settle', round: 'b1', outcome: 'x', tenant: 'evil' })).code,
      'CP_ERR_AUTH_FORBIDDEN_CHANNEL',
    );
    assert.equal((await h.ctl('bad1', { op: 'round.cancel', round: 'b1', tenant: 'evil' })).code, 'CP_ERR_AUTH_FORBIDDEN_CHANNEL');
    assert.equal((await h.store.rounds.get('bad1', 'b1'))?.state, 'open');
  });

  it('stakes - bad input and replays get their code and change no balance', async () => {
    await channel('bad2');
    await fund('ba', 100);
    await ctl('bad2', { op: 'round.open', round: 'p', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 });
    await ctl('bad2', { op: 'round.open', round: 'm', kind: 'market', outcomes: ['x', 'y'], durationMs: 60_000 });
    refused(await trade('bad2', 'ba', { k: 'stake', round: 'p', outcome: 'x', points: 1e12 }), 'CP_ERR_ROUND_INSUFFICIENT_FUNDS');
    refused(await trade('bad2', 'ba', { k: 'stake', round: 'nope', outcome: 'x', points: 1 }), 'CP_ERR_ROUND_UNKNOWN');
    refused(await trade('bad2', 'ba', { k: 'stake', round: 'p', outcome: 'w', points: 1 }), 'CP_ERR_ROUND_UNKNOWN_OUTCOME');
    refused(await trade('bad2', 'ba', { k: 'stake', round: 'm', outcome: 'x', points: 1 }), 'CP_ERR_ROUND_WRONG_KIND');
    refused(await trade('bad2', 'ba', { k: 'buy', round: 'p', outcome: 'x', budget: 5 }), 'CP_ERR_ROUND_WRONG_KIND');
    refused(
      await trade('bad2', 'ba', { k: 'sell', round: 'm', outcome: 'x', shares: 1, minProceeds: 0 }),
      'CP_ERR_MARKET_INSUFFICIENT_SHARES',
    );
    refused(await trade('bad2', 'ba', { k: 'buy', round: 'm', outcome: 'x', shares: 100, maxCost: 1 }), 'CP_ERR_MARKET_SLIPPAGE');
    refused(
      await trade('bad2', 'ba', { k: 'buy', round: 'm', outcome: 'x', shares: 1e6, maxCost: 1e9 }),
      'CP_ERR_MARKET_INSUFFICIENT_FUNDS',
    );
    assert.equal(await bal('ba'), 100);
    // A replayed key: same fields → the first result, charged once; other fields → refused.
    const first = await trade('bad2', 'ba', { k: 'stake', round: 'p', outcome: 'x', points: 10, key: 'k1' });
    const again = await trade('bad2', 'ba', { k: 'stake', round: 'p', outcome: 'x', points: 10, key: 'k1' });
    assert.deepEqual([first.ok, again.ok, again.cost], [true, true, 10]);
    refused(await trade('bad2', 'ba', { k: 'stake', round: 'p', outcome: 'y', points: 10, key: 'k1' }), 'CP_ERR_ROUND_DUPLICATE_ID');
    const buy = await trade('bad2', 'ba', { k: 'buy', round: 'm', outcome: 'x', budget: 20, key: 'k2' });
    const buyAgain = await trade('bad2', 'ba', { k: 'buy', round: 'm', outcome: 'x', budget: 20, key: 'k2' });
    assert.deepEqual([buyAgain.ok, buyAgain.cost, buyAgain.shares], [true, buy.cost, buy.shares]);
    refused(await trade('bad2', 'ba', { k: 'buy', round: 'm', outcome: 'x', budget: 21, key: 'k2' }), 'CP_ERR_ROUND_DUPLICATE_ID');
    assert.equal(await bal('ba'), 100 - 10 - buy.cost!);
    await verified();
  });

  it('stakes - copies of a key sent while the first is queued get its answer, past ROUND_MAX_PENDING_PER_VIEWER and after the close', async () => {
    await channel('copies');
    await fund('kc', 100);
    await ctl('copies', { op: 'round.open', round: 'p', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 });
    await ctl('copies', { op: 'round.open', round: 'm', kind: 'market', outcomes: ['x', 'y'], durationMs: 60_000 });
    // One batch: the first stake and more copies than the viewer's bound (16) behind it.
    const n = h.config.rounds.maxPendingPerViewer + 4;
    const seqs = Array.from({ length: n }, () => ++seq);
    h.send(
      'copies',
      seqs.map((s) => ({
        action: '',
        viewer: 'kc',
        seq: s,
        conn: s,
        trade: { k: 'stake' as const, round: 'p', outcome: 'x', points: 10, key: 'again' },
      })),
    );
    const acks = await Promise.all(seqs.map((s) => h.waitFor(() => h.acks.find((a) => a.seq === s))));
    assert.deepEqual(
      acks.map((a) => [a.ok, a.code, a.cost]),
      seqs.map(() => [true, undefined, 10]),
    );
    assert.equal(await bal('kc'), 90, 'charged once');
    const buy = await trade('copies', 'kc', { k: 'buy', round: 'm', outcome: 'x', budget: 20, key: 'b' });
    assert.equal(buy.ok, true);
    // Closed: a new stake is refused, a copy of a taken key still gets its answer.
    assert.equal((await ctl('copies', { op: 'round.settle', round: 'p', outcome: 'y' })).ok, true);
    assert.equal((await ctl('copies', { op: 'round.settle', round: 'm', outcome: 'y' })).ok, true);
    refused(await trade('copies', 'kc', { k: 'stake', round: 'p', outcome: 'x', points: 10, key: 'new' }), 'CP_ERR_ROUND_CLOSED');
    const late = await trade('copies', 'kc', { k: 'stake', round: 'p', outcome: 'x', points: 10, key: 'again' });
    assert.deepEqual([late.ok, late.cost], [true, 10]);
    const lateBuy = await trade('copies', 'kc', { k: 'buy', round: 'm', outcome: 'x', budget: 20, key: 'b' });
    assert.deepEqual([lateBuy.ok, lateBuy.cost, lateBuy.shares], [true, buy.cost, buy.shares]);
    refused(await trade('copies', 'kc', { k: 'stake', round: 'p', outcome: 'y', points: 10, key: 'again' }), 'CP_ERR_ROUND_DUPLICATE_ID');
    assert.equal(await bal('kc'), 100 - buy.cost!, 'the stake refunded (nobody on the winning side), the buy lost, once each');
    await verified();
  });

  it('market - buy, cash out, settle: winning shares pay 1 point, the maker account closes to the treasury', async () => {
    await channel('mk1');
    await fund('ma', 1_000);
    await fund('mb', 1_000);
    const treasury0 = await ledger().balance(T, { kind: 'treasury', owner: '' });
    const opened = await ctl('mk1', {
      op: 'round.open',
      round: 'm1',
      kind: 'market',
      outcomes: ['yes', 'no'],
      durationMs: 60_000,
      liquidity: 100,
      title: 'Will it rain in Kyōto tomorrow? 🌧',
      labels: { yes: 'Yes, it rains', no: '晴れ' },
    });
    assert.deepEqual([opened.round?.b, opened.round?.prices], [100, [0.5, 0.5]]);
    assert.deepEqual(
      [opened.round?.title, opened.round?.labels],
      ['Will it rain in Kyōto tomorrow? 🌧', { yes: 'Yes, it rains', no: '晴れ' }],
    );
    const stored = await h.store.rounds.get('mk1', 'm1');
    assert.deepEqual([stored?.title, stored?.labels], ['Will it rain in Kyōto tomorrow? 🌧', { yes: 'Yes, it rains', no: '晴れ' }]);
    assert.equal(await ledger().balance(T, { kind: 'maker', owner: 'mk1/m1' }), 70, 'subsidy ceil(100·ln 2) from the treasury');
    const a = await trade('mk1', 'ma', { k: 'buy', round: 'm1', outcome: 'yes', shares: 10, maxCost: 6 });
    assert.deepEqual([a.ok, a.cost, a.shares, a.position, a.balance], [true, 6, 10, 10, 994]);
    const b = await trade('mk1', 'mb', { k: 'buy', round: 'm1', outcome: 'no', budget: 50 });
    assert.equal(b.ok, true);
    assert.ok(b.cost! <= 50 && b.cost! > 40 && b.shares! > 0, `budget buy: ${JSON.stringify(b)}`);
    const s = await trade('mk1', 'ma', { k: 'sell', round: 'm1', outcome: 'yes', shares: 5, minProceeds: 0 });
    assert.deepEqual([s.ok, s.shares, s.position], [true, 5, 5]);
    assert.equal(await bal('ma'), 994 + s.proceeds!, 'proceeds are committed before the ack');
    const settled = await ctl('mk1', { op: 'round.settle', round: 'm1', outcome: 'yes' });
    assert.equal(settled.round?.winner, 'yes');
    assert.equal(await bal('ma'), 994 + s.proceeds! + 5, '5 winning shares pay 5 points');
    assert.equal(await bal('mb'), 1_000 - b.cost!);
    assert.equal(await ledger().balance(T, { kind: 'maker', owner: 'mk1/m1' }), 0);
    const treasury1 = await ledger().balance(T, { kind: 'treasury', owner: '' });
    // The treasury got back the subsidy and the maker's profit: what the traders lost.
    assert.equal(treasury1 - treasury0, 1_000 - (await bal('ma')) + (1_000 - (await bal('mb'))));
    // Results count buys as staked and sale proceeds plus the winning shares' payout as paid.
    const results = await h.waitFor(() => {
      const got = h.wallets.flatMap((w) =>
        w.frame.t === 'roundResult' && w.frame.round === 'm1' && w.frame.channel === 'mk1' ? [[w.viewer, w.frame] as const] : [],
      );
      return got.length === 2 ? got : false;
    });
    assert.deepEqual(results.map(([viewer, f]) => [viewer, f.winner, f.staked, f.paid, f.net]).sort(), [
      ['ma', 'yes', 6, s.proceeds! + 5, s.proceeds! + 5 - 6],
      ['mb', 'yes', b.cost!, 0, -b.cost!],
    ]);
    await verified();
  });

  it('market - at a price near 1 a buy of k shares is charged k points, never k + 1; a limit under k is refused, nothing moves', async () => {
    await channel('mk2');
    await fund('mw', 1_000);
    await fund('mx', 100);
    const open = { op: 'round.open', round: 'm1', kind: 'market', outcomes: ['yes', 'no'], durationMs: 60_000, liquidity: 1 };
    assert.equal((await ctl('mk2', open)).ok, true);
    assert.equal((await trade('mk2', 'mw', { k: 'buy', round: 'm1', outcome: 'yes', shares: 60, maxCost: 1_000 })).ok, true);
    const tooLow = await trade('mk2', 'mx', { k: 'buy', round: 'm1', outcome: 'yes', shares: 5, maxCost: 4 });
    refused(tooLow, 'CP_ERR_MARKET_SLIPPAGE');
    assert.equal(await bal('mx'), 100, 'the refused buy moved nothing');
    const atK = await trade('mk2', 'mx', { k: 'buy', round: 'm1', outcome: 'yes', shares: 5, maxCost: 5 });
    assert.deepEqual([atK.ok, atK.code, atK.cost, atK.shares, atK.balance], [true, undefined, 5, 5, 95]);
    const budget = await trade('mk2', 'mx', { k: 'buy', round: 'm1', outcome: 'yes', budget: 3 });
    assert.deepEqual([budget.ok, budget.cost, budget.shares, budget.balance], [true, 3, 3, 92]);
    assert.equal((await ctl('mk2', { op: 'round.settle', round: 'm1', outcome: 'yes' })).ok, true);
    assert.equal(await bal('mx'), 100, 'a winning buy near certainty pays back exactly what it cost: never a loss of 1 point a trade');
    await verified();
  });

  it('cancel - refunds every net exactly, taking back a profitable cash-out', async () => {
    await channel('cx1');
    await fund('ca', 500);
    await fund('cb', 500);
    await ctl('cx1', { op: 'round.open', round: 'c1', kind: 'market', outcomes: ['yes', 'no'], durationMs: 60_000, liquidity: 50 });
    assert.equal((await trade('cx1', 'ca', { k: 'buy', round: 'c1', outcome: 'yes', shares: 40, maxCost: 1_000 })).ok, true);
    assert.equal((await trade('cx1', 'cb', { k: 'buy', round: 'c1', outcome: 'yes', shares: 80, maxCost: 1_000 })).ok, true);
    const sold = await trade('cx1', 'ca', { k: 'sell', round: 'c1', outcome: 'yes', shares: 40, minProceeds: 0 });
    assert.ok(sold.ok && (await bal('ca')) > 500, 'ca cashed out at a profit');
    await ctl('cx1', { op: 'round.open', round: 'c2', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 });
    assert.equal((await trade('cx1', 'ca', { k: 'stake', round: 'c2', outcome: 'x', points: 33 })).ok, true);
    assert.equal((await ctl('cx1', { op: 'round.cancel', round: 'c1' })).round?.state, 'cancelled');
    assert.equal((await ctl('cx1', { op: 'round.cancel', round: 'c2' })).round?.state, 'cancelled');
    assert.equal((await ctl('cx1', { op: 'round.cancel', round: 'c2' })).ok, true, 'cancel is idempotent');
    assert.deepEqual([await bal('ca'), await bal('cb')], [500, 500]);
    assert.equal(await ledger().balance(T, { kind: 'maker', owner: 'cx1/c1' }), 0);
    const results = await h.waitFor(() => {
      const got = h.wallets.flatMap((w) =>
        w.frame.t === 'roundResult' && w.frame.channel === 'cx1' ? [[w.viewer, w.frame] as const] : [],
      );
      return got.length === 3 ? got : false;
    });
    assert.deepEqual(
      results.map(([viewer, f]) => [f.round, viewer, f.state, f.winner, f.net]).sort(),
      [
        ['c1', 'ca', 'cancelled', undefined, 0],
        ['c1', 'cb', 'cancelled', undefined, 0],
        ['c2', 'ca', 'cancelled', undefined, 0],
      ],
      'a cancel gives everything back, a profitable cash-out included',
    );
    assert.equal((await ctl('cx1', { op: 'round.settle', round: 'c1', outcome: 'yes' })).code, 'CP_ERR_ROUND_ALREADY_FINAL');
    await verified();
  });

  it('deadline - the round locks by server time; a later stake is refused; an unsettled round expires and refunds', async () => {
    await channel('dl1');
    await fund('da', 100);
    await ctl('dl1', { op: 'round.open', round: 'd1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 150 });
    assert.equal((await trade('dl1', 'da', { k: 'stake', round: 'd1', outcome: 'x', points: 40 })).ok, true);
    await h.waitFor(() => h.roundFrames.find((f) => f.round.id === 'd1' && f.round.state === 'locked'));
    refused(await trade('dl1', 'da', { k: 'stake', round: 'd1', outcome: 'x', points: 1 }), 'CP_ERR_ROUND_CLOSED');
    const row = await h.store.rounds.get('dl1', 'd1');
    assert.deepEqual([row?.state, row?.book], ['locked', { v: 1, kind: 'pool', stakes: [['da', 0, 40]] }]);
    assert.equal(await bal('da'), 60);
    // ROUND_UNSETTLED_MAX_MS is 1,500 here: the round is cancelled and refunded.
    await h.waitFor(() => h.roundFrames.find((f) => f.round.id === 'd1' && f.round.state === 'cancelled'), 3_000);
    await eventually(async () => (await bal('da')) === 100);
    await verified();
  });

  it('welcome grant - paid once per viewer and channel on join, with the balance', async () => {
    await channel('wg1');
    const tooBig = await h.ctl('wg1', { op: 'declare', actions: [{ name: 'go', maxPerTick: 5 }], welcomeGrant: 10_000_000 });
    assert.equal(tooBig.code, 'CP_ERR_GAME_INVALID_DECLARE');
    assert.equal((await h.ctl('wg1', { op: 'declare', actions: [{ name: 'go', maxPerTick: 5 }], welcomeGrant: 250 })).ok, true);
    h.join('wg1', [{ conn: 77_001, viewer: 'wv' }]);
    const first = await h.waitFor(() => h.balances.find((b) => b.conn === 77_001));
    assert.deepEqual(first.frame, { t: 'balance', points: 250, reason: 'welcome', delta: 250 });
    h.join('wg1', [{ conn: 77_002, viewer: 'wv' }]);
    const second = await h.waitFor(() => h.balances.find((b) => b.conn === 77_002));
    assert.deepEqual(second.frame, { t: 'balance', points: 250, reason: 'join' });
    assert.equal(await bal('wv'), 250);
    // The game changes its welcome grant: a viewer already paid is not paid again, and still gets its balance.
    assert.equal((await h.ctl('wg1', { op: 'declare', actions: [{ name: 'go', maxPerTick: 5 }], welcomeGrant: 300 })).ok, true);
    h.join('wg1', [{ conn: 77_003, viewer: 'wv' }]);
    const third = await h.waitFor(() => h.balances.find((b) => b.conn === 77_003));
    assert.deepEqual(third.frame, { t: 'balance', points: 250, reason: 'join' });
    assert.equal(await bal('wv'), 250);
  });

  it('ledger refusal - a stake the ledger refuses is undone in the pool and the mirror reloads', async () => {
    await channel('lr1');
    await fund('la', 100);
    await ctl('lr1', { op: 'round.open', round: 'l1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 });
    assert.equal((await trade('lr1', 'la', { k: 'stake', round: 'l1', outcome: 'x', points: 10 })).ok, true);
    // Another writer (another shard, in a cluster) spends the wallet behind this shard's mirror.
    await ledger().transfer({
      id: `spend-${++seq}`,
      tenantId: T,
      from: { kind: 'wallet', owner: 'la' },
      to: { kind: 'house', owner: '' },
      amount: 85,
      kind: 'spend',
    });
    refused(await trade('lr1', 'la', { k: 'stake', round: 'l1', outcome: 'x', points: 50 }), 'CP_ERR_ROUND_INSUFFICIENT_FUNDS');
    const ok = await trade('lr1', 'la', { k: 'stake', round: 'l1', outcome: 'y', points: 5 });
    assert.deepEqual([ok.ok, ok.balance], [true, 0], 'the mirror was reloaded');
    const view = (await ctl('lr1', { op: 'round.settle', round: 'l1', outcome: 'x' })).round;
    assert.deepEqual(view?.pool, [10, 5], 'the refused stake is not in the pool');
    assert.equal(await bal('la'), 15);
    await verified();
  });

  it('payments that failed after the settle are tried again until the round is paid; a failed expiry is tried again', async () => {
    await channel('pr1');
    await fund('ya', 100);
    await fund('yb', 100);
    await ctl('pr1', { op: 'round.open', round: 'p1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 });
    assert.equal((await trade('pr1', 'ya', { k: 'stake', round: 'p1', outcome: 'x', points: 20 })).ok, true);
    assert.equal((await trade('pr1', 'yb', { k: 'stake', round: 'p1', outcome: 'y', points: 20 })).ok, true);
    // The store fails the first two writes of `paid` (a database restarting): the settle's answer is the error.
    const update = h.store.rounds.update.bind(h.store.rounds);
    let failures = 2;
    h.store.rounds.update = async (channelId, id, epoch, change) => {
      if (channelId === 'pr1' && change.paid && failures > 0) {
        failures--;
        throw new Error('connection terminated');
      }
      return update(channelId, id, epoch, change);
    };
    try {
      const settled = await ctl('pr1', { op: 'round.settle', round: 'p1', outcome: 'x' });
      assert.equal(settled.ok, false, 'the settle that could not mark its payments is not answered ok');
      assert.deepEqual([(await h.store.rounds.get('pr1', 'p1'))?.state, (await h.store.rounds.get('pr1', 'p1'))?.paid], ['settled', false]);
      // The shard tries again on its own (ROUND_PAY_RETRY_MS) until the round is marked paid; the payout was made once.
      await eventually(async () => (await h.store.rounds.get('pr1', 'p1'))?.paid === true);
      assert.equal(failures, 0);
      assert.deepEqual([await bal('ya'), await bal('yb')], [120, 80]);
      // The results go out after the round is marked paid and its flows are read: they follow, not precede, `paid`.
      await h.waitFor(() =>
        h.wallets.some((w) => w.viewer === 'ya' && w.frame.t === 'roundResult' && w.frame.round === 'p1' && w.frame.net === 20),
      );
      // The same settle again is answered ok now.
      assert.equal((await ctl('pr1', { op: 'round.settle', round: 'p1', outcome: 'x' })).ok, true);

      // An expiry whose cancel fails is tried again at a later tick (it used to be marked as expiring for good).
      await ctl('pr1', { op: 'round.open', round: 'p2', kind: 'pool', outcomes: ['x', 'y'], durationMs: 100 });
      assert.equal((await trade('pr1', 'ya', { k: 'stake', round: 'p2', outcome: 'x', points: 30 })).ok, true);
      let cancelFailures = 1;
      h.store.rounds.update = async (channelId, id, epoch, change) => {
        if (channelId === 'pr1' && id === 'p2' && change.state === 'cancelled' && !change.paid && cancelFailures > 0) {
          cancelFailures--;
          throw new Error('connection terminated');
        }
        return update(channelId, id, epoch, change);
      };
      await eventually(async () => (await h.store.rounds.get('pr1', 'p2'))?.paid === true, 8_000);
      assert.equal(cancelFailures, 0, 'the first cancel failed');
      assert.equal((await h.store.rounds.get('pr1', 'p2'))?.state, 'cancelled');
      assert.equal(await bal('ya'), 120, 'the expired round refunded its stake');
    } finally {
      h.store.rounds.update = update;
    }
    await verified();
  });

  it('recovery - a channel acquired with no unfinished round publishes no rounds update; its first round does', async () => {
    const updatesOf = (): number => h.updates.filter((u) => u.channel === 'calm').length;
    await channel('calm');
    // The acquire served it and woke it: the ticks that follow visit it, and one that found its rounds changed would
    // publish an update at once (CHANNEL_UPDATE_MS has not run since it never published).
    const from = h.shard.ticks;
    await h.waitFor(() => h.shard.ticks >= from + 5 && !h.shard.ticking.includes('calm'));
    assert.equal(updatesOf(), 0, 'an update for an unchanged, empty list of rounds');
    assert.equal((await ctl('calm', { op: 'round.open', round: 'c1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 })).ok, true);
    const u = await h.waitFor(() => h.updates.find((x) => x.channel === 'calm'));
    assert.deepEqual(
      u.rounds?.map((r) => r.id),
      ['c1'],
    );
  });

  it('recovery - a later owner with no unfinished round publishes the rounds at a fresh event id, replacing the last owner’s', async () => {
    await channel('calm2');
    assert.equal((await ctl('calm2', { op: 'round.open', round: 'g1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 })).ok, true);
    const shown = await h.waitFor(() => h.updates.find((u) => u.channel === 'calm2' && u.rounds?.[0]?.state === 'open'));
    assert.equal((await ctl('calm2', { op: 'round.cancel', round: 'g1' })).ok, true);
    await eventually(async () => (await h.store.rounds.get('calm2', 'g1'))?.paid === true);
    const cancelled = await h.waitFor(() => h.updates.find((u) => u.channel === 'calm2' && u.rounds?.[0]?.state === 'cancelled'));
    // Another shard takes it at the next epoch (as after a crash of this one before its update went out): nothing unfinished.
    const seen = h.updates.length;
    const s3 = await h.newShard('s3');
    const epoch = await h.store.channels.acquire('calm2', 's3');
    await s3.acquire('calm2', epoch);
    const next = await h.waitFor(() => h.updates.slice(seen).find((u) => u.channel === 'calm2'));
    assert.ok(next.ev > cancelled.ev && cancelled.ev > shown.ev, `event ids ${shown.ev}, ${cancelled.ev}, then ${next.ev}`);
    assert.ok(!(next.rounds ?? []).some((r) => r.state === 'open'), JSON.stringify(next.rounds));
  });

  it('recovery - after a crash an open round is refunded, a locked one resumes and can be settled', async () => {
    await channel('rc1');
    await fund('ra', 100);
    await fund('rb', 100);
    await ctl('rc1', { op: 'round.open', round: 'open1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 });
    await ctl('rc1', { op: 'round.open', round: 'lock1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 300 });
    await ctl('rc1', { op: 'round.open', round: 'mk', kind: 'market', outcomes: ['x', 'y'], durationMs: 60_000 });
    assert.equal((await trade('rc1', 'ra', { k: 'stake', round: 'open1', outcome: 'x', points: 30 })).ok, true);
    assert.equal((await trade('rc1', 'ra', { k: 'stake', round: 'lock1', outcome: 'x', points: 20 })).ok, true);
    assert.equal((await trade('rc1', 'rb', { k: 'stake', round: 'lock1', outcome: 'y', points: 10 })).ok, true);
    assert.equal((await trade('rc1', 'rb', { k: 'buy', round: 'mk', outcome: 'y', budget: 40 })).ok, true);
    await eventually(async () => (await h.store.rounds.get('rc1', 'lock1'))?.state === 'locked');
    // Crash: the shard stops without draining; another shard acquires the channel at a new epoch.
    await h.shard.close();
    const s2 = await h.newShard('s2');
    const epoch = await h.store.channels.acquire('rc1', 's2');
    await s2.acquire('rc1', epoch);
    // The acquire serves the channel at once; the crashed owner's open rounds are refunded in the background.
    await eventually(
      async () => (await h.store.rounds.get('rc1', 'open1'))?.paid === true && (await h.store.rounds.get('rc1', 'mk'))?.paid === true,
    );
    assert.deepEqual(
      [(await h.store.rounds.get('rc1', 'open1'))?.state, (await h.store.rounds.get('rc1', 'mk'))?.state],
      ['cancelled', 'cancelled'],
    );
    assert.equal(await bal('ra'), 80, 'the open round refunded, the locked stake still held');
    assert.equal(await bal('rb'), 90);
    // The old owner's epoch is fenced: a write of the round at it is refused and changes nothing.
    await assert.rejects(
      h.store.rounds.update('rc1', 'lock1', epoch - 1, { state: 'cancelled' }),
      (e: { code?: string }) => e.code === 'CP_ERR_CHANNEL_STALE_EPOCH',
    );
    assert.equal((await h.store.rounds.get('rc1', 'lock1'))?.state, 'locked');
    const settled = await ctl('rc1', { op: 'round.settle', round: 'lock1', outcome: 'x' });
    assert.deepEqual([settled.ok, settled.round?.pool], [true, [20, 10]]);
    assert.deepEqual([await bal('ra'), await bal('rb')], [110, 90]);
    await verified();
  });
});

describe('rounds - limits and paid actions', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ ledger: true, rounds: { maxEntries: 2, maxOpen: 1 }, ledgerConfig: { houseTakeBps: 1_000 } });
    await h.store.channels.ensure('lim', 'acme');
    await h.router.assign('lim');
  });
  after(() => h.close());

  async function send(viewer: string, it: { action: string; trade?: BusTrade }): Promise<BusAck> {
    const s = ++seq;
    h.send('lim', [{ ...it, viewer, seq: s, conn: s }]);
    return h.waitFor(() => h.acks.find((a) => a.seq === s));
  }

  it('LEDGER_HOUSE_TAKE_BPS: the take goes to the house before the winners share the pool', async () => {
    await h.store.channels.ensure('take', 'acme');
    await h.router.assign('take');
    for (const v of ['ta', 'tc']) await h.ledger!.grant('acme', v, 100, `g-${v}-${++seq}`);
    const house0 = await h.ledger!.balance('acme', { kind: 'house', owner: '' });
    assert.equal(
      (await h.ctl('take', { op: 'round.open', tenant: 'acme', round: 't1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 })).ok,
      true,
    );
    const stake = async (viewer: string, outcome: string, points: number): Promise<BusAck> => {
      const s = ++seq;
      h.send('take', [{ action: '', viewer, seq: s, conn: s, trade: { k: 'stake', round: 't1', outcome, points } }]);
      return h.waitFor(() => h.acks.find((a) => a.seq === s));
    };
    assert.equal((await stake('ta', 'x', 30)).ok, true);
    assert.equal((await stake('tc', 'y', 51)).ok, true);
    assert.equal((await h.ctl('take', { op: 'round.settle', tenant: 'acme', round: 't1', outcome: 'x' })).ok, true);
    // total 81, take floor(81 × 10 %) = 8, pool 73 to the one winner.
    const bal = (v: string): Promise<number> => h.ledger!.balance('acme', { kind: 'wallet', owner: v });
    assert.deepEqual([await bal('ta'), await bal('tc')], [143, 49]);
    assert.equal((await h.ledger!.balance('acme', { kind: 'house', owner: '' })) - house0, 8);
    assert.deepEqual((await verifyLedger(h.store.db)).failures, []);
  });

  it('ROUND_MAX_OPEN and ROUND_MAX_ENTRIES refuse with their codes and take nothing', async () => {
    await h.ledger!.grant('acme', 'la', 100, `g-la-${++seq}`);
    const open = { op: 'round.open', tenant: 'acme', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 };
    assert.equal((await h.ctl('lim', { ...open, round: 'one' })).ok, true);
    assert.equal((await h.ctl('lim', { ...open, round: 'two' })).code, 'CP_ERR_ROUND_TOO_MANY');
    for (let i = 0; i < 2; i++)
      assert.equal((await send('la', { action: '', trade: { k: 'stake', round: 'one', outcome: 'x', points: 10 } })).ok, true);
    const third = await send('la', { action: '', trade: { k: 'stake', round: 'one', outcome: 'x', points: 10 } });
    assert.deepEqual([third.ok, third.code], [false, 'CP_ERR_ROUND_FULL']);
    assert.equal(await h.ledger!.balance('acme', { kind: 'wallet', owner: 'la' }), 80);
    assert.match(await h.telemetry.metrics.prometheusText(), /crowdplay_refusals_total\{[^}]*reason="CP_ERR_ROUND_FULL"[^}]*\} 1/);
  });

  it('a paid action is charged to the wallet (to the house) before its ack; without points it is refused', async () => {
    assert.equal((await h.ctl('lim', { op: 'declare', actions: [{ name: 'boost', cost: 5, maxPerTick: 10 }] })).ok, true);
    await h.ledger!.grant('acme', 'pb', 12, `g-pb-${++seq}`);
    const house0 = await h.ledger!.balance('acme', { kind: 'house', owner: '' });
    const ok = await send('pb', { action: 'boost' });
    assert.deepEqual([ok.ok, ok.cost], [true, 5]);
    assert.equal(await h.ledger!.balance('acme', { kind: 'wallet', owner: 'pb' }), 7);
    assert.equal((await send('pb', { action: 'boost' })).ok, true);
    const broke = await send('pb', { action: 'boost' });
    assert.deepEqual([broke.ok, broke.code], [false, 'CP_ERR_INTENT_INSUFFICIENT_FUNDS']);
    assert.equal(await h.ledger!.balance('acme', { kind: 'wallet', owner: 'pb' }), 2);
    assert.equal((await h.ledger!.balance('acme', { kind: 'house', owner: '' })) - house0, 10);
    const v = await verifyLedger(h.store.db);
    assert.deepEqual(v.failures, []);
  });
});

describe('rounds - grants made elsewhere', () => {
  let h: Harness;
  const T = 'acme';
  // The default WALLET_RELOAD_MS (1 s): without the credit event the mirror would still say 0.
  before(async () => {
    h = await startHarness({ ledger: true });
  });
  after(() => h.close());
  const ledger = (): NonNullable<Harness['ledger']> => h.ledger!;
  const ctl = (ch: string, req: Record<string, unknown>): Promise<unknown> => h.ctl(ch, { tenant: T, ...req });
  async function trade(ch: string, viewer: string, t: BusTrade): Promise<BusAck> {
    const s = ++seq;
    h.send(ch, [{ action: '', viewer, seq: s, conn: s, trade: t }]);
    return h.waitFor(() => h.acks.find((a) => a.seq === s));
  }
  function refused(ack: BusAck, code: string): void {
    assert.deepEqual([ack.ok, ack.code], [false, code]);
  }

  it('grants through the tenant API reach the mirror at once: a stake right after the grant is accepted', async () => {
    await h.store.channels.ensure('gr1', T);
    await h.router.assign('gr1');
    await ctl('gr1', { op: 'round.open', round: 'g1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 });
    refused(await trade('gr1', 'ga', { k: 'stake', round: 'g1', outcome: 'x', points: 10 }), 'CP_ERR_ROUND_INSUFFICIENT_FUNDS');
    // What the gateway's POST /v1/grants does after the commit, before its 200.
    const r = await ledger().grant(T, 'ga', 40, `grant-ga-${++seq}`);
    h.bus.publish(
      h.subjects.walletCredits(),
      encodeJson({ tenant: T, viewer: 'ga', points: 40, balance: r.toBalance! } satisfies WalletCredit),
    );
    const ok = await trade('gr1', 'ga', { k: 'stake', round: 'g1', outcome: 'x', points: 10 });
    assert.deepEqual([ok.ok, ok.balance], [true, 30]);
  });
});

describe('rounds while the sequencer is unreachable (restarting)', () => {
  let h: Harness;
  let again: SequencerService | undefined;
  before(async () => {
    h = await startHarness({ ledger: true });
  });
  after(async () => {
    await again?.close();
    await h.close();
  });

  it('a game request that needs an event id is refused as retryable; a round op that committed is answered ok, its update follows', async () => {
    await h.store.channels.ensure('seqdown', 'acme');
    await h.router.assign('seqdown');
    await h.sequencer.close();
    // Use up the shard's leased ids (its block and the spare): each game state takes one.
    let refused: { ok: boolean; code?: string } | undefined;
    for (let i = 0; i < 1_000 && !refused; i++) {
      const r = await h.ctl('seqdown', { op: 'state', state: { i } });
      if (!r.ok) refused = r;
    }
    assert.equal(refused?.code, 'CP_ERR_CHANNEL_UNAVAILABLE', 'no id: retryable, not CP_ERR_INTERNAL');
    const opened = (await h.ctl('seqdown', {
      tenant: 'acme',
      op: 'round.open',
      round: 'r1',
      kind: 'pool',
      outcomes: ['x', 'y'],
      durationMs: 60_000,
    })) as { ok: boolean; code?: string; round?: RoundView };
    assert.deepEqual([opened.ok, opened.code, opened.round?.state], [true, undefined, 'open'], 'the round is open: say so');
    assert.equal((await h.store.rounds.get('seqdown', 'r1'))?.state, 'open');
    assert.equal(
      h.updates.some((u) => u.channel === 'seqdown' && u.rounds?.some((r) => r.id === 'r1')),
      false,
      'no update without an event id',
    );
    // Ticks run while the sequencer is still down (each fails to take an id): the update must survive them.
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(
      h.updates.some((u) => u.channel === 'seqdown' && u.rounds?.some((r) => r.id === 'r1')),
      false,
    );
    again = new SequencerService({ bus: h.bus, subjects: h.subjects, store: h.store, telemetry: h.telemetry });
    await again.start();
    const u = await h.waitFor(() => h.updates.find((x) => x.channel === 'seqdown' && x.rounds?.some((r) => r.id === 'r1')), 5_000);
    assert.ok(u.ev > 0);
  });
});

describe("rounds - a built-in game's channel", () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({
      ledger: true,
      gameFor: (c) => (c === 'demo' ? tugOfWar({ maxPerTick: 100, motion: false, rounds: { durationMs: 60_000 } }) : undefined),
    });
    await h.store.channels.ensure('demo', 'acme');
    await h.router.assign('demo');
  });
  after(() => h.close());

  it("the tenant's game cannot open, settle or cancel the built-in game's rounds: CP_ERR_ROUND_FORBIDDEN, nothing moves", async () => {
    const demo = await h.waitFor(() => h.updates.find((u) => u.channel === 'demo' && u.rounds?.[0]?.state === 'open')?.rounds?.[0]);
    await h.ledger!.grant('acme', 'staker', 100, `grant-staker-${++seq}`);
    const s = ++seq;
    h.send('demo', [{ action: '', viewer: 'staker', seq: s, conn: s, trade: { k: 'stake', round: demo.id, outcome: 'left', points: 40 } }]);
    assert.equal((await h.waitFor(() => h.acks.find((a) => a.seq === s))).ok, true);
    const balance = (): Promise<number> => h.ledger!.balance('acme', { kind: 'wallet', owner: 'staker' });
    assert.equal(await balance(), 60);

    const asTenant = (req: Record<string, unknown>): Promise<{ ok: boolean; code?: string }> => h.ctl('demo', { tenant: 'acme', ...req });
    assert.deepEqual(await asTenant({ op: 'round.settle', round: demo.id, outcome: 'left' }), {
      ok: false,
      code: 'CP_ERR_ROUND_FORBIDDEN',
      message: 'channel demo runs a built-in game: only it opens, settles or cancels its rounds',
    });
    assert.equal((await asTenant({ op: 'round.cancel', round: demo.id })).code, 'CP_ERR_ROUND_FORBIDDEN');
    const open = { op: 'round.open', round: 'mine', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 };
    assert.equal((await asTenant(open)).code, 'CP_ERR_ROUND_FORBIDDEN');

    assert.equal((await h.store.rounds.get('demo', demo.id))?.state, 'open', 'the round is still open');
    assert.equal(await h.store.rounds.get('demo', 'mine'), null, 'no round was opened');
    assert.equal(await balance(), 60, 'nothing was paid or refunded');
    const v = await verifyLedger(h.store.db);
    assert.deepEqual(v.failures, []);
  });
});
