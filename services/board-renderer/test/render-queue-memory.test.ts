import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sampleBoard, type Board } from '@crowdplay/board';
import { MemoryRenderQueue, boardJobBytes, decodeBoardJob, encodeBoardJob } from '../src/index.ts';
import { memoryFactory } from './render-queue-harness.ts';
import { renderQueueSuite } from './render-queue-suite.ts';

renderQueueSuite('memory', memoryFactory);

test('memory - submit before start is an error (the in-process queue renders in this process)', async () => {
  const q = new MemoryRenderQueue();
  await assert.rejects(q.submit(1, 1, sampleBoard(1)), /call start\(\) first/);
  assert.equal(q.stats().submitted, 0);
});

test('encodeBoardJob / decodeBoardJob - avatars round-trip as bytes; JSON only', () => {
  const b = sampleBoard(3, { avatarShare: 1 });
  const json = encodeBoardJob(b);
  assert.doesNotThrow(() => JSON.parse(json));
  const back = decodeBoardJob(json);
  assert.equal(back.title, b.title);
  assert.deepEqual(
    back.cards.map((c) => [c.id, c.name, c.rows, c.avatar ? [...c.avatar] : null]),
    b.cards.map((c) => [c.id, c.name, c.rows, c.avatar ? [...c.avatar] : null]),
  );
  assert.throws(() => decodeBoardJob('{"title":1,"puzzle":"p","cards":[]}'), TypeError);
});

test('encodeBoardJob / decodeBoardJob - the rounds ride with the board; a malformed one is refused', () => {
  const rounds: NonNullable<Board['rounds']> = [
    {
      title: 'Q?',
      kind: 'pool',
      state: 'settled',
      winner: 1,
      outcomes: [
        { label: 'Yes', value: 3 },
        { label: 'No', value: 9 },
      ],
    },
  ];
  const b: Board = { ...sampleBoard(2, { avatarShare: 0 }), rounds };
  assert.deepEqual(decodeBoardJob(encodeBoardJob(b)).rounds, rounds);
  assert.equal(boardJobBytes(b), Buffer.byteLength(encodeBoardJob(b)));
  assert.equal(decodeBoardJob(encodeBoardJob(sampleBoard(1))).rounds, undefined);
  assert.throws(() => decodeBoardJob('{"title":"t","puzzle":"p","cards":[],"rounds":[{"title":"q"}]}'), TypeError);
});

test('boardJobBytes - the exact size of the encoded job, without encoding it', () => {
  for (const [cards, share] of [
    [0, 0],
    [1, 1],
    [7, 0.5],
    [40, 1],
  ] as const) {
    const b = { ...sampleBoard(cards, { avatarShare: share }), title: 'Crew «ü» 😀' };
    assert.equal(boardJobBytes(b), Buffer.byteLength(encodeBoardJob(b)), `${cards} cards`);
  }
  for (const n of [1, 2, 3, 4, 5]) {
    const b = { ...sampleBoard(1, { avatarShare: 0 }), cards: [{ id: '1', name: 'x', rows: [], avatar: new Uint8Array(n) }] };
    assert.equal(boardJobBytes(b), Buffer.byteLength(encodeBoardJob(b)), `avatar of ${n} bytes`);
  }
});
