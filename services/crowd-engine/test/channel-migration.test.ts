/**
 * A chat's channel moves (Telegram group → supergroup): the word puzzle's
 * merge of a moved state (pure), and the router's `migrate` through the
 * store, the old channel's owner and the new channel's owner.
 */
import { after, before, describe, it, test } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError, type ChannelUpdate } from '@crowdplay/protocol';
import { wordPuzzle, type WordPuzzleState } from '../src/games/word-puzzle.ts';
import { startHarness, type Harness } from './harness.ts';

const PERIOD = 60_000;
const puzzleOpts = (now: () => number) => ({
  periodMs: PERIOD,
  answers: ['hello'],
  dictionary: new Set(['hello', 'lolly', 'crane', 'world']),
  key: 'k',
  now,
});

test('word puzzle - absorb: players of the moved chat are added, the one further along wins, twice changes nothing', () => {
  const now = 10 * PERIOD + 5;
  const g = wordPuzzle(puzzleOpts(() => now));
  g.init(null);
  g.guess!('tg:1', 'crane', now, 'Ann'); // the new chat's own: one guess
  g.guess!('tg:2', 'crane', now, 'Bob');
  g.guess!('tg:2', 'lolly', now, 'Bob'); // two guesses here
  g.tick!(now);
  const moved: WordPuzzleState = {
    puzzle: 10,
    players: {
      'tg:1': { marks: ['....y', '.ygg.'], solved: false }, // further along in the old group (no name there)
      'tg:2': { marks: ['ggggg'], solved: true }, // solved in the old group
      'tg:3': { marks: ['.ygg.'], solved: false, name: 'Cy' },
      'tg:4': { marks: ['bad'], solved: false }, // malformed: skipped
    },
  };
  const r = g.absorb!(moved, now);
  assert.deepEqual([r.added, r.replaced, r.kept, r.stale], [1, 2, 0, false]);
  assert.deepEqual((r.state as WordPuzzleState).players, {
    'tg:1': { marks: ['....y', '.ygg.'], solved: false, name: 'Ann' },
    'tg:2': { marks: ['ggggg'], solved: true, name: 'Bob' },
    'tg:3': { marks: ['.ygg.'], solved: false, name: 'Cy' },
  });
  assert.deepEqual(g.tick!(now), r.state, 'the next tick sends the merged state');
  const again = g.absorb!(moved, now);
  assert.deepEqual([again.added, again.replaced, again.kept], [0, 0, 3], 'idempotent');
  assert.equal(g.tick!(now), null, 'nothing changed the second time');
  // The player keeps playing where the old group left off.
  assert.deepEqual(g.guess!('tg:1', 'hello', now), { marks: 'ggggg', solved: true, left: 3 });
  // Another puzzle's state (the move came after a rollover) or none: nothing taken.
  const stale = g.absorb!({ puzzle: 9, players: { 'tg:9': { marks: ['ggggg'], solved: true } } }, now);
  assert.deepEqual([stale.added, stale.stale], [0, true]);
  assert.deepEqual([g.absorb!(null, now).added, g.absorb!(null, now).stale], [0, false]);
  assert.equal(g.tick!(now) !== null, true, 'only the guess changed the board');
});

describe('router migrate: the chat, its state, its owner', () => {
  let h: Harness;
  const clock = 10 * PERIOD + 5;
  const now = (): number => clock;
  before(async () => {
    // A puzzle per channel (gameFor runs at each acquire), as services/cli composes it.
    h = await startHarness({ now, gameFor: (c) => (/^tgn?\d+$/.test(c) ? wordPuzzle(puzzleOpts(now)) : undefined) });
  });
  after(() => h.close());

  let seq = 0;
  async function guess(channel: string, viewer: string, word: string) {
    const s = ++seq;
    h.send(channel, [{ action: '', viewer, seq: s, conn: s, guess: word }]);
    return h.waitFor(() => h.acks.find((a) => a.seq === s));
  }
  const playersOf = (u: ChannelUpdate | undefined) => (u?.game as WordPuzzleState | undefined)?.players ?? {};
  const lastUpdate = (channel: string) => h.updates.filter((u) => u.channel === channel).at(-1);

  it('moves the old channel’s players into the new one, stops serving the old one for good, and a second request changes nothing', async () => {
    await h.store.channels.ensure('tgn100', 'acme');
    await h.router.assign('tgn100');
    assert.equal((await guess('tgn100', 'tg:1', 'crane')).ok, true);
    assert.equal((await guess('tgn100', 'tg:2', 'hello')).ok, true);
    await h.waitFor(() => Object.keys(playersOf(lastUpdate('tgn100'))).length === 2);

    const m = await h.router.migrate('tgn100', 'tgn1000100');
    assert.deepEqual(m, { from: 'tgn100', to: 'tgn1000100', outcome: 'moved', absorbed: { added: 2, replaced: 0, kept: 0, stale: false } });
    const u = await h.waitFor(() => (Object.keys(playersOf(lastUpdate('tgn1000100'))).length === 2 ? lastUpdate('tgn1000100') : false));
    assert.deepEqual(playersOf(u), { 'tg:1': { marks: ['....y'], solved: false }, 'tg:2': { marks: ['ggggg'], solved: true } });
    // The new channel's snapshot holds them (written before migrate answered).
    const snap = await h.store.channels.loadSnapshot('tgn1000100');
    assert.equal(Object.keys((snap?.state as { game: WordPuzzleState }).game.players).length, 2);
    // The player goes on in the new channel where they left off.
    const next = await guess('tgn1000100', 'tg:1', 'hello');
    assert.deepEqual([next.ok, next.left], [true, 4]);
    const over = await guess('tgn1000100', 'tg:2', 'crane');
    assert.deepEqual([over.ok, over.code], [false, 'CP_ERR_PUZZLE_OVER'], 'solved in the old group: still solved');

    // The old channel: not served, never again.
    assert.ok(!h.shard.channels.includes('tgn100'));
    assert.equal(await h.router.lookup('tgn100'), null, 'the router assigns it to nobody');
    const old = await h.store.channels.get('tgn100');
    assert.deepEqual([old?.owner, old?.migratedTo, old?.migratedAt instanceof Date], [null, 'tgn1000100', true]);
    await assert.rejects(h.router.assign('tgn100'), (e) => isCrowdplayError(e, 'CP_ERR_CHANNEL_MIGRATED'));
    const shards = h.shard.channels;
    await assert.rejects(
      h.shard.acquire('tgn100', old!.epoch),
      (e) => isCrowdplayError(e, 'CP_ERR_CHANNEL_MIGRATED'),
      'a shard refuses it even if asked directly',
    );
    assert.deepEqual(h.shard.channels, shards);

    // Re-delivered (the supergroup's migrate_from_chat_id, or Telegram retrying): nothing changes.
    const before = await h.store.channels.loadSnapshot('tgn1000100');
    const epochs = [(await h.store.channels.get('tgn100'))!.epoch, (await h.store.channels.get('tgn1000100'))!.epoch];
    assert.deepEqual(await h.router.migrate('tgn100', 'tgn1000100'), { from: 'tgn100', to: 'tgn1000100', outcome: 'done', absorbed: null });
    assert.deepEqual(await h.store.channels.loadSnapshot('tgn1000100'), before);
    assert.deepEqual([(await h.store.channels.get('tgn100'))!.epoch, (await h.store.channels.get('tgn1000100'))!.epoch], epochs);
    const text = await h.telemetry.metrics.prometheusText();
    assert.match(text, /crowdplay_channel_migrations_total\{outcome="moved"[^}]*\} 1/);
    assert.match(text, /crowdplay_channel_migrations_total\{outcome="done"[^}]*\} 1/);
    assert.match(text, /crowdplay_channel_absorbed_total\{result="added"[^}]*\} 2/);
  });

  it('a guess scored just before the move (not yet in a tick) is in the final snapshot and moves too', async () => {
    await h.store.channels.ensure('tgn150', 'acme');
    await h.router.assign('tgn150');
    assert.equal((await guess('tgn150', 'tg:5', 'crane')).ok, true);
    const m = await h.router.migrate('tgn150', 'tgn1000150'); // at once: no tick ran in between, or one did (both must hold)
    assert.equal(m.absorbed?.added, 1);
  });

  it('a new channel that already has state is merged into, never overwritten', async () => {
    for (const c of ['tgn200', 'tgn1000200']) {
      await h.store.channels.ensure(c, 'acme');
      await h.router.assign(c);
    }
    await guess('tgn200', 'tg:1', 'crane');
    await guess('tgn200', 'tg:1', 'lolly'); // further along in the old group
    await guess('tgn200', 'tg:3', 'crane');
    await guess('tgn1000200', 'tg:1', 'world');
    await guess('tgn1000200', 'tg:2', 'hello'); // only in the new one (solved)
    await guess('tgn1000200', 'tg:3', 'world');
    await guess('tgn1000200', 'tg:3', 'crane'); // further along in the new one
    await h.waitFor(() => Object.keys(playersOf(lastUpdate('tgn1000200'))).length === 3);
    const m = await h.router.migrate('tgn200', 'tgn1000200');
    assert.deepEqual(m.absorbed, { added: 0, replaced: 1, kept: 1, stale: false });
    const snap = await h.store.channels.loadSnapshot('tgn1000200');
    assert.deepEqual((snap?.state as { game: WordPuzzleState }).game.players, {
      'tg:1': { marks: ['....y', '.ygg.'], solved: false },
      'tg:2': { marks: ['ggggg'], solved: true },
      'tg:3': { marks: ['.y.g.', '....y'], solved: false },
    });
  });

  it('bad requests are refused and change nothing; a chat that never played moves nothing', async () => {
    await h.store.channels.ensure('tgn300', 'acme');
    await h.store.channels.ensure('plain', 'acme');
    await h.router.assign('tgn300');
    await guess('tgn300', 'tg:1', 'crane');
    const rowBefore = await h.store.channels.get('tgn300');
    const refused = (code: string) => (e: unknown) => isCrowdplayError(e) && e.code === code;
    await assert.rejects(h.router.migrate('tgn300', 'tgn300'), refused('CP_ERR_CHANNEL_MIGRATION_INVALID'));
    await assert.rejects(h.router.migrate('tgn300', 'not a channel'), refused('CP_ERR_CHANNEL_INVALID_ID'));
    assert.deepEqual(await h.store.channels.get('tgn300'), rowBefore, 'still served, unmoved');
    assert.ok(h.shard.channels.includes('tgn300'));
    // Never played: nothing recorded, nothing created.
    assert.deepEqual(await h.router.migrate('tgn404', 'tgn1000404'), { from: 'tgn404', to: 'tgn1000404', outcome: 'none', absorbed: null });
    assert.equal(await h.store.channels.get('tgn1000404'), null);
    // A target whose game cannot take the state: refused by its shard; the move stays recorded (not finished).
    await assert.rejects(h.router.migrate('tgn300', 'plain'), refused('CP_ERR_CHANNEL_MIGRATION_INVALID'));
    assert.equal((await h.store.channels.get('tgn300'))?.migratedAt, null);
    assert.match(await h.telemetry.metrics.prometheusText(), /crowdplay_channel_migrations_total\{outcome="refused"[^}]*\} 2/);
  });
});
