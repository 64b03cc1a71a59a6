/** ChannelRuntime (pure): a game declaring again the actions it declared (it reconnected) keeps the open tick and the tally. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ChannelRuntime, sameSpecs } from '../src/channel.ts';

const VOTE = [{ name: 'vote', options: ['a', 'b'], maxPerTick: 100 }];

describe('ChannelRuntime declare', () => {
  it('the same actions again: the open tick’s acked intents reach the next batch and the tally stays', () => {
    const rt = new ChannelRuntime('c');
    rt.declare(VOTE, 1, 1_000);
    rt.add('v1', 'vote', 'a', 1_001);
    assert.equal(rt.closeTick(2, 1_250)?.actions.vote?.intents.length, 1);
    rt.add('v2', 'vote', 'b', 1_300);
    // The game reconnects and declares again (key order as a jsonb snapshot returns it).
    rt.declare([{ maxPerTick: 100, name: 'vote', options: ['a', 'b'] }], 3, 1_310);
    assert.equal(rt.pendingIntents, 1);
    const b = rt.closeTick(4, 1_500);
    assert.deepEqual(b?.actions.vote?.intents, [{ viewer: 'v2', option: 'b', at: 1_300 }]);
    assert.deepEqual(JSON.parse(rt.takeUpdate()).tally, { vote: { a: 1, b: 1 } });
  });

  it('other actions: the open tick is dropped and the tally restarts', () => {
    const rt = new ChannelRuntime('c');
    rt.declare(VOTE, 1, 1_000);
    rt.add('v1', 'vote', 'a', 1_001);
    rt.declare([{ name: 'vote', options: ['a', 'b', 'c'], maxPerTick: 100 }], 2, 1_010);
    assert.equal(rt.pendingIntents, 0);
    assert.equal(rt.closeTick(3, 1_250), null);
    assert.deepEqual(JSON.parse(rt.takeUpdate()).tally, { vote: { a: 0, b: 0, c: 0 } });
  });

  it('sameSpecs: name, maxPerTick, cost (0 = absent) and options in order; key order ignored', () => {
    assert.equal(sameSpecs(VOTE, [{ maxPerTick: 100, options: ['a', 'b'], name: 'vote', cost: 0 }]), true);
    assert.equal(sameSpecs(VOTE, [{ name: 'vote', options: ['b', 'a'], maxPerTick: 100 }]), false);
    assert.equal(sameSpecs(VOTE, [{ name: 'vote', options: ['a', 'b'], maxPerTick: 99 }]), false);
    assert.equal(sameSpecs(VOTE, [{ name: 'vote', options: ['a', 'b'], maxPerTick: 100, cost: 5 }]), false);
    assert.equal(sameSpecs(VOTE, [...VOTE, { name: 'x', maxPerTick: 1 }]), false);
  });
});
