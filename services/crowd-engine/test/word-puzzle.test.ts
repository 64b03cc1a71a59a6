import { after, before, describe, it, test } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError } from '@crowdplay/protocol';
import { ChatPuzzle, MAX_GUESSES, answerFor, puzzleNumber, score, wordPuzzle } from '../src/games/word-puzzle.ts';
import { startHarness, type Harness } from './harness.ts';
import { fiveLetterWords } from '../src/games/words.ts';

test('word puzzle - scoring: greens first, then yellows only as often as the letter is left in the answer', () => {
  // Hand-checked (see the module comment for the rule).
  const cases: Array<[guess: string, answer: string, marks: string]> = [
    ['crane', 'crane', 'ggggg'],
    ['react', 'crane', 'yygy.'],
    ['abbey', 'kebab', 'yygy.'], // the green b uses one b of kebab; the other b is yellow
    ['speed', 'abide', '..y.y'], // one e in abide: the first e is yellow, the second grey
    ['eerie', 'elder', 'gyy..'], // e green, then one e left: yellow once, grey after
    ['lolly', 'hello', '.ygg.'], // both l of hello are green: the first l is grey
    ['zzzzz', 'crane', '.....'],
  ];
  for (const [guess, answer, marks] of cases) assert.equal(score(guess, answer), marks, `${guess} vs ${answer}`);
});

test('word puzzle - the puzzle number and its answer are the same everywhere and change each period', () => {
  const answers = ['crane', 'hello', 'elder', 'kebab', 'abide'];
  assert.equal(puzzleNumber(86_400_000 * 3 + 5, 86_400_000), 3);
  assert.equal(puzzleNumber(86_400_000 * 3 - 1, 86_400_000), 2);
  assert.equal(answerFor(7, answers, 'k'), answerFor(7, answers, 'k'));
  const seen = new Set(Array.from({ length: 50 }, (_, n) => answerFor(n, answers, 'k')));
  assert.ok(seen.size >= 4, 'answers vary across puzzles');
  const other = Array.from({ length: 20 }, (_, n) => answerFor(n, answers, 'other-key')).join();
  assert.notEqual(other, Array.from({ length: 20 }, (_, n) => answerFor(n, answers, 'k')).join(), 'the key changes the sequence');
  assert.throws(() => answerFor(1, [], 'k'), RangeError);
});

test('word puzzle - a player gets six guesses, a solved game is over, bad words change nothing', () => {
  const dict = new Set(['crane', 'hello', 'react', 'lolly', 'speed', 'abide', 'elder']);
  const p = new ChatPuzzle(1, 'hello', dict);
  const code = (fn: () => unknown): string | undefined => {
    try {
      fn();
      return undefined;
    } catch (err) {
      return isCrowdplayError(err) ? err.code : 'not a CrowdplayError';
    }
  };
  for (const bad of ['hell', 'helloo', 'h3llo', 'zzzzz', '', 'HÉLLO'])
    assert.equal(
      code(() => p.guess('ann', bad)),
      'CP_ERR_PUZZLE_INVALID_WORD',
      bad,
    );
  assert.equal(p.version, 0, 'refused guesses do not change the board');
  assert.equal(p.players.size, 0);
  assert.deepEqual(p.guess('ann', 'LOLLY'), { marks: '.ygg.', solved: false, left: 5 });
  assert.deepEqual(p.guess('ann', 'hello'), { marks: 'ggggg', solved: true, left: 4 });
  assert.equal(
    code(() => p.guess('ann', 'crane')),
    'CP_ERR_PUZZLE_OVER',
  );
  for (let i = 0; i < MAX_GUESSES; i++) p.guess('bob', 'crane');
  assert.equal(
    code(() => p.guess('bob', 'crane')),
    'CP_ERR_PUZZLE_OVER',
  );
  assert.deepEqual(p.players.get('ann'), { marks: ['.ygg.', 'ggggg'], solved: true });
  assert.equal(p.version, 2 + MAX_GUESSES);
});

describe('word puzzle in the shard', () => {
  let h: Harness;
  let clock = 10 * 60_000 + 5;
  const now = (): number => clock;
  before(async () => {
    const module = wordPuzzle({
      periodMs: 60_000,
      answers: ['hello'],
      dictionary: new Set(['hello', 'lolly', 'crane']),
      key: 'k',
      now,
    });
    h = await startHarness({ gameFor: (c) => (c === 'chat1' ? module : undefined), now });
    for (const c of ['chat1', 'plain']) {
      await h.store.channels.ensure(c, 'acme');
      await h.router.assign(c);
    }
  });
  after(() => h.close());

  let seq = 0;
  async function guess(channel: string, viewer: string, word: string) {
    const s = ++seq;
    h.send(channel, [{ action: '', viewer, seq: s, conn: s, guess: word }]);
    return h.waitFor(() => h.acks.find((a) => a.seq === s));
  }

  it('a guess is scored in its ack; the board state shows marks, never letters; bad words are refused', async () => {
    const a = await guess('chat1', 'tg:1', 'lolly');
    assert.deepEqual([a.ok, a.marks, a.solved, a.left], [true, '.ygg.', false, 5]);
    const bad = await guess('chat1', 'tg:1', 'zzzzz');
    assert.deepEqual([bad.ok, bad.code], [false, 'CP_ERR_PUZZLE_INVALID_WORD']);
    const win = await guess('chat1', 'tg:2', 'HELLO');
    assert.deepEqual([win.ok, win.marks, win.solved], [true, 'ggggg', true]);
    const u = await h.waitFor(() =>
      h.updates.find((x) => x.channel === 'chat1' && Object.keys((x.game as { players?: object } | undefined)?.players ?? {}).length === 2),
    );
    assert.deepEqual(u.game, {
      puzzle: 10,
      players: { 'tg:1': { marks: ['.ygg.'], solved: false }, 'tg:2': { marks: ['ggggg'], solved: true } },
    });
    assert.ok(!JSON.stringify(u).includes('lolly') && !JSON.stringify(u).includes('hello'), 'no letters on the board');
    const none = await guess('plain', 'tg:1', 'hello');
    assert.deepEqual([none.ok, none.code], [false, 'CP_ERR_INTENT_UNKNOWN_ACTION']);
    // A scored guess is an act ack like any intent's: in crowdplay_act_ack_ms (the two accepted ones, not the refusals).
    const count = /^crowdplay_act_ack_ms_count\{[^}]*\} (\d+)$/m.exec(await h.telemetry.metrics.prometheusText());
    assert.equal(Number(count?.[1]), 2);
  });

  it('the puzzle rolls over at the period boundary: a new empty board, and a finished player can play again', async () => {
    const over = await guess('chat1', 'tg:2', 'crane');
    assert.deepEqual([over.ok, over.code], [false, 'CP_ERR_PUZZLE_OVER']);
    clock += 60_000;
    const u = await h.waitFor(() =>
      h.updates.find((x) => x.channel === 'chat1' && (x.game as { puzzle?: number } | undefined)?.puzzle === 11),
    );
    assert.deepEqual(u.game, { puzzle: 11, players: {} });
    const again = await guess('chat1', 'tg:2', 'crane');
    assert.deepEqual([again.ok, again.marks, again.left], [true, '....y', 5]);
  });
});

test('word puzzle - the words come from the word-list package: thousands of five-letter words, common ones included', () => {
  const { answers, dictionary } = fiveLetterWords();
  assert.ok(answers.length > 5_000, `${answers.length} five-letter words`);
  for (const w of ['crane', 'hello', 'world', 'about']) assert.ok(dictionary.has(w), w);
  assert.ok(answers.every((w) => /^[a-z]{5}$/.test(w)));
  assert.equal(dictionary.size, answers.length);
});
