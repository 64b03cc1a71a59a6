/**
 * A chat plays the tenant's game when one is attached, the word puzzle otherwise: an external declare takes over a
 * channel whose built-in game yields (GameModule.yieldsToGame), `release` gives it back, and the choice moves with
 * the channel (its snapshot) to another shard.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ChannelUpdate } from '@crowdplay/protocol';
import type { GameModule, Shard } from '../src/index.ts';
import { wordPuzzle } from '../src/games/word-puzzle.ts';
import { startHarness, type Harness } from './harness.ts';

const VOTE = [{ name: 'vote', maxPerTick: 10, options: ['a', 'b'] }];

describe('external game on a chat channel', () => {
  let h: Harness;
  let s2: Shard;
  let seq = 0;
  const now = (): number => 10 * 60_000 + 5;
  const puzzle = (): GameModule =>
    wordPuzzle({ periodMs: 60_000, answers: ['hello'], dictionary: new Set(['hello', 'lolly']), key: 'k', now });
  // A built-in game that does not yield (as the demo's tug-of-war).
  const fixed: GameModule = {
    name: 'fixed',
    actions: () => [{ name: 'pull', maxPerTick: 10 }],
    init: () => ({ fixed: true }),
    onBatch: () => null,
  };
  const gameFor = (c: string): GameModule | undefined => (c === 'chat1' ? puzzle() : c === 'fixed' ? fixed : undefined);

  before(async () => {
    h = await startHarness({ gameFor, now });
    s2 = await h.newShard('s2', { gameFor, now });
    for (const c of ['chat1', 'fixed']) {
      await h.store.channels.ensure(c, 'acme');
      await h.shard.acquire(c, await h.store.channels.acquire(c, h.shard.id));
    }
  });
  after(() => h.close());

  async function send(channel: string, intent: { action: string; option?: string; guess?: string }) {
    const s = ++seq;
    h.send(channel, [{ ...intent, viewer: `tg:${s}`, seq: s, conn: s }]);
    return h.waitFor(() => h.acks.find((a) => a.seq === s));
  }
  function actionsOf(u: string | undefined): string[] {
    return (JSON.parse(u ?? '{}') as ChannelUpdate).actions.map((a) => a.name);
  }
  async function snapshotActions(channel: string): Promise<string[]> {
    return actionsOf((await h.ctl(channel, { op: 'snapshot' })).update);
  }
  async function move(channel: string, from: Shard, to: Shard): Promise<void> {
    await from.handOff(channel);
    from.forget(channel);
    await to.acquire(channel, await h.store.channels.acquire(channel, to.id));
  }

  it('the puzzle runs until a game declares; then the chat plays the game: its actions, its batches, no guesses', async () => {
    assert.deepEqual(await snapshotActions('chat1'), []); // the puzzle takes guesses, it declares no action
    assert.equal((await send('chat1', { action: '', guess: 'lolly' })).ok, true);
    assert.deepEqual(await h.ctl('chat1', { op: 'declare', actions: VOTE }), { ok: true });
    const u = JSON.parse((await h.ctl('chat1', { op: 'snapshot' })).update ?? '{}') as ChannelUpdate;
    assert.deepEqual(
      u.actions.map((a) => a.name),
      ['vote'],
    );
    assert.deepEqual(u.game, {}, "the puzzle's board is gone from the chat's update");
    const g = await send('chat1', { action: '', guess: 'hello' });
    assert.deepEqual([g.ok, g.code], [false, 'CP_ERR_INTENT_UNKNOWN_ACTION']);
    assert.equal((await send('chat1', { action: 'vote', option: 'a' })).ok, true);
    const b = await h.waitFor(() => h.batches.find((x) => x.channel === 'chat1' && x.actions.vote?.tally.a === 1));
    assert.equal(b.actions.vote?.intents.length, 1, "the game gets the chat's batch");
  });

  it('a move to another shard keeps the game (the choice is in the snapshot); release brings the puzzle back there', async () => {
    await move('chat1', h.shard, s2);
    assert.deepEqual(await snapshotActions('chat1'), ['vote']);
    // A chat that moved (group → supergroup) into this one: nothing to merge into the game, the move completes.
    const absorbed = await h.ctl('chat1', {
      op: 'absorb',
      from: 'chat0',
      state: { v: 1, actions: [], tally: {}, game: { puzzle: 10, players: {} }, tick: 0 },
    });
    assert.deepEqual(absorbed, { ok: true, absorbed: { added: 0, replaced: 0, kept: 0, stale: false } });
    const g = await send('chat1', { action: '', guess: 'hello' });
    assert.deepEqual([g.ok, g.code], [false, 'CP_ERR_INTENT_UNKNOWN_ACTION'], 'the new owner did not start the puzzle');
    assert.deepEqual(await h.ctl('chat1', { op: 'release' }), { ok: true });
    assert.deepEqual(await snapshotActions('chat1'), []);
    const again = await send('chat1', { action: '', guess: 'hello' });
    assert.deepEqual([again.ok, again.solved], [true, true], 'the puzzle is back');
    const v = await send('chat1', { action: 'vote', option: 'a' });
    assert.deepEqual([v.ok, v.code], [false, 'CP_ERR_INTENT_NO_GAME'], 'the puzzle declares no action');
    await move('chat1', s2, h.shard);
    assert.equal((await send('chat1', { action: '', guess: 'lolly' })).ok, true, 'and stays after the next move');
  });

  it('bad input - a built-in game that does not yield refuses a declare; a release with no game attached changes nothing', async () => {
    const before = await h.ctl('fixed', { op: 'snapshot' });
    const r = await h.ctl('fixed', { op: 'declare', actions: VOTE });
    assert.deepEqual([r.ok, r.code], [false, 'CP_ERR_GAME_INVALID_DECLARE']);
    assert.deepEqual(await h.ctl('fixed', { op: 'release' }), { ok: true });
    const after = await h.ctl('fixed', { op: 'snapshot' });
    assert.equal(after.update, before.update, 'nothing changed');
    assert.equal((await send('fixed', { action: 'pull' })).ok, true);
  });
});

describe('external game on a chat channel - rounds', () => {
  let h: Harness;
  let seq = 50_000;
  let opened = false;
  // A built-in game that yields and runs a round of its own, once.
  const roundy: GameModule = {
    name: 'roundy',
    yieldsToGame: true,
    actions: () => [{ name: 'pull', maxPerTick: 10 }],
    init: () => ({ roundy: true }),
    onBatch: () => null,
    rounds: () => {
      if (opened) return [];
      opened = true;
      return [{ op: 'open', request: { round: 'b1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 } }];
    },
  };
  before(async () => {
    h = await startHarness({ ledger: true, gameFor: (c) => (c === 'chat2' ? roundy : undefined), rounds: { walletReloadMs: 0 } });
    await h.store.tenants.create('evil', 'Evil');
    await h.store.channels.ensure('chat2', 'acme');
    await h.router.assign('chat2');
  });
  after(() => h.close());

  const bal = (viewer: string): Promise<number> => h.ledger!.balance('acme', { kind: 'wallet', owner: viewer });
  async function stake(round: string, viewer: string, points: number) {
    const s = ++seq;
    h.send('chat2', [{ action: '', viewer, seq: s, conn: s, trade: { k: 'stake', round, outcome: 'x', points } }]);
    return h.waitFor(() => h.acks.find((a) => a.seq === s));
  }
  const stateOf = async (round: string): Promise<string | undefined> => (await h.store.rounds.get('chat2', round))?.state;
  /** Polls an async condition every 10 ms (fails after 5 s): a balance settles after its ledger commit. */
  async function eventually(cond: () => Promise<boolean>, what: string): Promise<void> {
    const deadline = Date.now() + 5_000;
    while (!(await cond())) {
      if (Date.now() > deadline) throw new Error(`${what} not met in time`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  it("a takeover refunds the built-in game's round; a release refunds the game's; another tenant touches neither", async () => {
    await h.ledger!.grant('acme', 'p1', 100, 'grant-p1');
    // A viewer learns of a round from an update; the row is committed a moment before the shard takes stakes.
    await h.waitFor(() => h.updates.some((u) => u.channel === 'chat2' && u.rounds?.some((r) => r.id === 'b1' && r.state === 'open')));
    assert.equal(await stateOf('b1'), 'open');
    const staked = await stake('b1', 'p1', 30);
    assert.deepEqual([staked.ok, staked.code], [true, undefined]);
    assert.equal(await bal('p1'), 70);
    // The game's round requests are refused while the built-in game runs the channel.
    const early = await h.ctl('chat2', {
      op: 'round.open',
      tenant: 'acme',
      round: 'e0',
      kind: 'pool',
      outcomes: ['x', 'y'],
      durationMs: 60_000,
    });
    assert.deepEqual([early.ok, early.code], [false, 'CP_ERR_ROUND_FORBIDDEN']);
    assert.deepEqual(await h.ctl('chat2', { op: 'declare', actions: VOTE }), { ok: true });
    assert.equal(await stateOf('b1'), 'cancelled');
    const frame = await h.waitFor(() => h.roundFrames.find((f) => f.round.id === 'b1' && f.round.state === 'cancelled'));
    assert.equal(frame.channel, 'chat2', 'a round frame names its channel');
    await eventually(async () => (await bal('p1')) === 100, 'the stake refunded');
    const open = await h.ctl('chat2', {
      op: 'round.open',
      tenant: 'acme',
      round: 'e1',
      kind: 'pool',
      outcomes: ['x', 'y'],
      durationMs: 60_000,
    });
    assert.equal(open.ok, true);
    assert.equal((await stake('e1', 'p1', 20)).ok, true);
    const forged = await h.ctl('chat2', { op: 'round.settle', tenant: 'evil', round: 'e1', outcome: 'x' });
    assert.deepEqual([forged.ok, forged.code], [false, 'CP_ERR_AUTH_FORBIDDEN_CHANNEL']);
    assert.equal(await stateOf('e1'), 'open', 'nothing changed');
    assert.deepEqual(await h.ctl('chat2', { op: 'release' }), { ok: true });
    assert.equal(await stateOf('e1'), 'cancelled');
    await eventually(async () => (await bal('p1')) === 100, "the game's stake refunded");
  });
});
