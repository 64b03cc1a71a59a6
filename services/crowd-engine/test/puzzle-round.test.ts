import { after, before, describe, it, test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '@crowdplay/config';
import { verifyLedger } from '@crowdplay/ledger';
import type { BusAck, BusTrade, RoundView } from '@crowdplay/protocol';
import { puzzleRound, puzzleRoundStep, wordPuzzle, type PuzzleView } from '../src/index.ts';
import { startHarness, type Harness } from './harness.ts';

function view(id: string, state: RoundView['state'], deadline = 10_000): RoundView {
  return { id, kind: 'pool', outcomes: ['yes', 'no'], state, openedAt: 0, deadline, entries: 0 };
}
const puzzle = (over: Partial<PuzzleView> = {}): PuzzleView => ({ number: 7, endsAt: 100_000, firstSolveAt: null, ...over });

test('puzzle round - opens one round per puzzle, cut at the puzzle end, never when the answer is known', () => {
  const step = puzzleRoundStep({ kind: 'pool', durationMs: 30_000, guesses: 4, minDurationMs: 1_000 });
  const [open] = step(80_000, [], puzzle());
  assert.equal(open?.op, 'open');
  assert.ok(open?.op === 'open');
  assert.deepEqual(
    [open.request.round, open.request.kind, open.request.outcomes, open.request.durationMs],
    ['puzzle-7', 'pool', ['yes', 'no'], 20_000],
    'the betting window ends with the puzzle',
  );
  assert.match(open.request.title ?? '', /4 guesses or fewer/);
  assert.deepEqual(open.request.labels, { yes: 'Yes, in 4 or fewer', no: 'No' });
  assert.deepEqual(step(80_100, [], puzzle()), [], 'no second open while the first is in flight');
  assert.deepEqual(step(80_200, [view('puzzle-7', 'open', 100_000)], puzzle()), []);
  assert.deepEqual(step(90_000, [], puzzle()), [], 'a round seen once (then dropped from the list) is never reopened');
  // A new game instance (another shard) mid-puzzle: not once a player solved in time, not in the puzzle's last second.
  assert.deepEqual(
    puzzleRoundStep({ kind: 'pool', durationMs: 30_000, guesses: 4, minDurationMs: 1_000 })(1, [], puzzle({ firstSolveAt: 0 })),
    [],
  );
  assert.deepEqual(puzzleRoundStep({ kind: 'pool', durationMs: 30_000, guesses: 4, minDurationMs: 1_000 })(99_500, [], puzzle()), []);
});

test('puzzle round - settles yes on a quick solve before the deadline (even while open), no once locked without one', () => {
  const step = puzzleRoundStep({ kind: 'market', durationMs: 30_000, guesses: 4, minDurationMs: 1_000, liquidity: 50 });
  const [open] = step(0, [], puzzle());
  assert.ok(open?.op === 'open');
  assert.deepEqual([open.request.kind, open.request.liquidity], ['market', 50]);
  assert.deepEqual(step(100, [view('puzzle-7', 'open')], puzzle()), [], 'open, no solve: nothing to do');
  assert.deepEqual(step(200, [view('puzzle-7', 'open')], puzzle({ firstSolveAt: 150 })), [
    { op: 'settle', round: 'puzzle-7', outcome: 'yes' },
  ]);
  assert.deepEqual(step(300, [view('puzzle-7', 'open')], puzzle({ firstSolveAt: 150 })), [], 'settle is sent once');
  assert.deepEqual(
    step(5_400, [view('puzzle-7', 'open')], puzzle({ firstSolveAt: 150 })),
    [{ op: 'settle', round: 'puzzle-7', outcome: 'yes' }],
    'sent again when unanswered for 5 s',
  );

  const late = puzzleRoundStep({ kind: 'pool', durationMs: 30_000, guesses: 4, minDurationMs: 1_000 });
  assert.deepEqual(
    late(10_050, [view('puzzle-7', 'locked')], puzzle({ firstSolveAt: 10_020 })),
    [{ op: 'settle', round: 'puzzle-7', outcome: 'no' }],
    'a solve after the deadline does not count',
  );
  // The previous puzzle's round, still locked just after the rollover: settled by that puzzle's solves.
  const after = puzzleRoundStep({ kind: 'pool', durationMs: 30_000, guesses: 4, minDurationMs: 1_000 });
  assert.deepEqual(
    after(10_100, [view('puzzle-6', 'locked'), view('puzzle-7', 'open')], puzzle({ previous: { number: 6, firstSolveAt: 9_990 } })),
    [{ op: 'settle', round: 'puzzle-6', outcome: 'yes' }],
    'a quick solve in the last moment of the previous puzzle counts for its round',
  );
  // A locked round of an earlier puzzle (the shard restarted across midnight) is settled too, and rounds of others are left alone.
  assert.deepEqual(late(10_100, [view('puzzle-6', 'locked'), view('ext', 'locked'), view('puzzle-7', 'locked')], puzzle()), [
    { op: 'settle', round: 'puzzle-6', outcome: 'no' },
  ]);
});

test('puzzle round - off by default; the settings turn it on with a welcome grant', () => {
  assert.deepEqual(puzzleRound(defaultConfig()), {});
  const on = puzzleRound(defaultConfig({ puzzle: { round: 'market', roundMs: 5_000, roundGuesses: 3, welcomeGrant: 40 } }));
  assert.deepEqual(on, { round: { kind: 'market', durationMs: 5_000, guesses: 3, minDurationMs: 1_000 }, welcomeGrant: 40 });
  const g = wordPuzzle({ periodMs: 60_000, answers: ['hello'], dictionary: new Set(['hello']), key: 'k', ...on });
  assert.equal(g.welcomeGrant, 40);
  assert.equal(wordPuzzle({ periodMs: 60_000, answers: ['hello'], dictionary: new Set(['hello']), key: 'k' }).rounds, undefined);
});

test('puzzle round - the word puzzle settles the round it opened from its own solves, across the rollover', () => {
  const g = wordPuzzle({
    periodMs: 60_000,
    answers: ['hello'],
    dictionary: new Set(['hello', 'crane']),
    key: 'k',
    now: () => 60_000,
    round: { kind: 'pool', durationMs: 120_000, guesses: 2, minDurationMs: 1_000 },
  });
  g.init(null);
  const [open] = g.rounds!(60_000, []);
  assert.ok(open?.op === 'open');
  assert.deepEqual([open.request.round, open.request.durationMs], ['puzzle-1', 60_000], 'cut at the puzzle end');
  const round = (state: RoundView['state']): RoundView => ({ ...view('puzzle-1', state, 120_000), openedAt: 60_000 });
  assert.equal(g.guess!('tg:1', 'crane', 119_800).solved, false);
  assert.deepEqual(g.rounds!(119_850, [round('open')]), [], 'one guess, not solved');
  assert.equal(g.guess!('tg:1', 'hello', 119_900).solved, true, 'solved in 2, 100 ms before the deadline');
  // The next tick is already in puzzle 2: the locked round of puzzle 1 is settled yes, and puzzle 2 gets its own round.
  const cmds = g.rounds!(120_100, [round('locked')]);
  assert.deepEqual(cmds[0], { op: 'settle', round: 'puzzle-1', outcome: 'yes' });
  assert.ok(cmds[1]?.op === 'open' && cmds[1].request.round === 'puzzle-2');
});

describe('puzzle round in the shard', () => {
  let h: Harness;
  let clock = 10 * 60_000 + 5;
  const now = (): number => clock;
  before(async () => {
    const game = (kind: 'pool' | 'market') =>
      wordPuzzle({
        periodMs: 60_000,
        answers: ['hello'],
        dictionary: new Set(['hello', 'lolly', 'crane']),
        key: 'k',
        now,
        round: { kind, durationMs: 20_000, guesses: 2, minDurationMs: 50 },
        welcomeGrant: 100,
      });
    const games = { chatp: game('pool'), chatm: game('market') };
    h = await startHarness({ ledger: true, gameFor: (c) => games[c as keyof typeof games], now, rounds: { walletReloadMs: 0 } });
    for (const c of Object.keys(games)) {
      await h.store.channels.ensure(c, 'acme');
      await h.router.assign(c);
    }
  });
  after(() => h.close());

  let seq = 0;
  async function send(channel: string, viewer: string, f: { guess?: string; trade?: BusTrade }): Promise<BusAck> {
    const s = ++seq;
    h.send(channel, [{ action: '', viewer, seq: s, conn: s, ...f }]);
    return h.waitFor(() => h.acks.find((a) => a.seq === s));
  }
  const roundOf = (channel: string, state: string) =>
    h.waitFor(() => h.updates.find((u) => u.channel === channel && u.rounds?.some((r) => r.id === 'puzzle-10' && r.state === state)));

  it('pool: opened at the puzzle start, staked with the welcome grant, settled yes by a solve in time', async () => {
    const u = await roundOf('chatp', 'open');
    const r = u.rounds!.find((x) => x.id === 'puzzle-10')!;
    assert.deepEqual([r.kind, r.outcomes, r.deadline - r.openedAt], ['pool', ['yes', 'no'], 20_000]);
    h.join('chatp', [
      { conn: 1, viewer: 'tg:1' },
      { conn: 2, viewer: 'tg:2' },
    ]);
    await h.waitFor(() => h.balances.filter((b) => b.frame.reason === 'welcome').length === 2);
    assert.equal((await send('chatp', 'tg:1', { trade: { k: 'stake', round: 'puzzle-10', outcome: 'yes', points: 30 } })).ok, true);
    assert.equal((await send('chatp', 'tg:2', { trade: { k: 'stake', round: 'puzzle-10', outcome: 'no', points: 10 } })).ok, true);
    assert.equal((await send('chatp', 'tg:2', { guess: 'lolly' })).ok, true);
    const win = await send('chatp', 'tg:2', { guess: 'hello' });
    assert.deepEqual([win.ok, win.solved], [true, true]);
    const settled = await roundOf('chatp', 'settled');
    assert.equal(settled.rounds!.find((x) => x.id === 'puzzle-10')!.winner, 'yes');
    const results = await h.waitFor(() => {
      const got = h.wallets.filter((w) => w.frame.t === 'roundResult' && w.frame.channel === 'chatp');
      return got.length === 2 ? got : false;
    });
    assert.deepEqual(results.map((w) => (w.frame.t === 'roundResult' ? [w.viewer, w.frame.winner, w.frame.net] : [])).sort(), [
      ['tg:1', 'yes', 10],
      ['tg:2', 'yes', -10],
    ]);
    // A stake after the settle is refused and changes nothing.
    const late = await send('chatp', 'tg:1', { trade: { k: 'stake', round: 'puzzle-10', outcome: 'no', points: 5 } });
    assert.equal(late.ok, false);
    assert.deepEqual((await verifyLedger(h.store.db)).failures, []);
  });

  it('market: nobody solves in time, the round locks at its deadline and settles no; the next puzzle opens its own', async () => {
    await roundOf('chatm', 'open');
    h.join('chatm', [{ conn: 3, viewer: 'tg:3' }]);
    await h.waitFor(() => h.balances.some((b) => b.conn === 3 && b.frame.reason === 'welcome'));
    const buy = await send('chatm', 'tg:3', { trade: { k: 'buy', round: 'puzzle-10', outcome: 'yes', shares: 10, maxCost: 50 } });
    assert.equal(buy.ok, true);
    assert.equal((await send('chatm', 'tg:3', { guess: 'crane' })).ok, true);
    clock += 20_000;
    const settled = await roundOf('chatm', 'settled');
    assert.equal(settled.rounds!.find((x) => x.id === 'puzzle-10')!.winner, 'no');
    const result = await h.waitFor(() => h.wallets.find((w) => w.frame.t === 'roundResult' && w.frame.channel === 'chatm'));
    assert.ok(result.frame.t === 'roundResult' && result.frame.net < 0, 'the yes shares lost');
    clock += 40_000;
    await h.waitFor(() =>
      h.updates.find((u) => u.channel === 'chatm' && u.rounds?.some((r) => r.id === 'puzzle-11' && r.state === 'open')),
    );
    assert.deepEqual((await verifyLedger(h.store.db)).failures, []);
  });
});
