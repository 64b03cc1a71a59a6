import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sampleBoard } from '@crowdplay/board';
import { MemoryRenderQueue, decodeBoardJob, encodeBoardJob } from '../src/index.ts';
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
