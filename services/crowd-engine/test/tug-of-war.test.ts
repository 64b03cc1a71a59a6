import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Batch, RoundView } from '@crowdplay/protocol';
import { tugOfWar } from '../src/index.ts';

const view = (id: string, state: RoundView['state']): RoundView => ({
  id,
  kind: 'pool',
  outcomes: ['left', 'right'],
  state,
  openedAt: 0,
  deadline: 1,
  entries: 0,
});

function pull(left: number, right: number): Batch {
  return {
    t: 'batch',
    channel: 'demo',
    ev: 1,
    tick: 1,
    closedAt: 0,
    actions: { pull: { tally: { left, right }, intents: [], dropped: 0 } },
  };
}

test('tug-of-war rounds - opens its own rounds one at a time, alternating pool and market, and settles them by the rope', () => {
  const g = tugOfWar({ maxPerTick: 10, motion: false, rounds: { durationMs: 5_000, liquidity: 50 }, welcomeGrant: 7 });
  assert.equal(g.welcomeGrant, 7);
  const first = g.rounds!(36_000, []);
  const asked = { title: 'Which side holds the rope when betting closes?', labels: { left: 'Left', right: 'Right' } };
  assert.deepEqual(first, [
    { op: 'open', request: { round: 'demo-rs0', kind: 'pool', outcomes: ['left', 'right'], ...asked, durationMs: 5_000 } },
  ]);
  assert.deepEqual(g.rounds!(36_100, []), [], 'no second open while the first is in flight');
  assert.deepEqual(g.rounds!(36_200, [view('demo-rs0', 'open')]), []);
  g.onBatch(pull(9, 1)); // the rope moves left
  assert.deepEqual(g.rounds!(41_000, [view('demo-rs0', 'locked')]), [{ op: 'settle', round: 'demo-rs0', outcome: 'left' }]);
  assert.deepEqual(g.rounds!(41_100, [view('demo-rs0', 'locked')]), [], 'settle is sent once');
  const next = g.rounds!(41_200, [view('demo-rs0', 'settled')]);
  assert.deepEqual(next, [
    {
      op: 'open',
      request: {
        round: `demo-${(41_200).toString(36)}`,
        kind: 'market',
        outcomes: ['left', 'right'],
        ...asked,
        durationMs: 5_000,
        liquidity: 50,
      },
    },
  ]);
});

test('tug-of-war rounds - rounds opened by a game process on the demo channel are left alone', () => {
  const g = tugOfWar({ maxPerTick: 10, motion: false, rounds: { durationMs: 5_000 } });
  const cmds = g.rounds!(1_000, [view('ext1', 'locked'), view('ext2', 'open')]);
  assert.equal(cmds.length, 1);
  assert.equal(cmds[0]!.op, 'open', 'the demo opens its own round beside them, and settles none of theirs');
  assert.equal(tugOfWar({ maxPerTick: 1, motion: false }).rounds, undefined, 'no rounds unless asked');
});
