/**
 * Runs the shared render-queue suite against BullMQ on Redis (REDIS_URL,
 * default redis://127.0.0.1:6379), each test under its own key prefix, deleted
 * afterwards; then what only several processes show. It FAILS, never skips,
 * when Redis is unreachable.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { sampleBoard, type Board } from '@crowdplay/board';
import { renderQueueKeys } from '@crowdplay/sendq';
import { BullmqRenderQueue } from '../src/index.ts';
import { REDIS_URL, bullmqFactory, deleteKeys, uniquePrefix, waitFor, type RQHarness } from './render-queue-harness.ts';
import { renderQueueSuite } from './render-queue-suite.ts';

renderQueueSuite('bullmq', bullmqFactory());

const board = (cards = 2): Board => sampleBoard(cards, { avatarShare: 0 });

void test(
  'bullmq - a version drawn through latest closes the versions up to it: a queued older one is not rendered, a later submit of one is superseded',
  { timeout: 20_000 },
  async (t) => {
    let newer: { version: number; board: Board } | null = null;
    const h = await bullmqFactory()({ concurrency: 1, latest: (_c, v) => (newer && newer.version > v ? newer : null) });
    t.after(() => h.close());
    assert.equal((await h.queue.submit(1, 1, board())).status, 'queued');
    await waitFor('v1 on the thread', () => h.gate.started() === 1);
    assert.equal((await h.queue.submit(2, 1, board())).status, 'queued');
    newer = { version: 9, board: board(3) };
    h.gate.open();
    await waitFor('chat 2 drawn at 9', () => h.versions(2).includes(9));
    assert.deepEqual(await h.queue.submit(2, 8, board()), { status: 'superseded', by: 9 });
    assert.deepEqual(await h.queue.submit(2, 9, board()), { status: 'superseded', by: 9 });
    newer = null;
    assert.equal((await h.queue.submit(2, 10, board())).status, 'queued');
    await waitFor('chat 2 v10', () => h.versions(2).includes(10));
    assert.deepEqual(h.versions(2), [9, 10]);
  },
);

void test('bullmq - a worker closing mid-chat hands the newer version to another process', { timeout: 20_000 }, async (t) => {
  const prefix = uniquePrefix();
  const a = await bullmqFactory(prefix)({ concurrency: 1 });
  const later: { b?: RQHarness } = {};
  t.after(async () => {
    await a.close();
    await later.b?.close();
    await deleteKeys(prefix);
  });
  await a.queue.submit(1, 1, board());
  await waitFor('v1 on a thread of a', () => a.gate.started() === 1);
  await a.queue.submit(1, 2, board());
  const closing = a.queue.close();
  a.gate.open();
  await closing;
  assert.deepEqual(a.versions(1), [1], 'a finished v1 and took nothing more');
  const b = (later.b = await bullmqFactory(prefix)({ concurrency: 1 }));
  b.gate.open();
  await waitFor('v2 rendered by b', () => b.versions(1).includes(2));
  assert.deepEqual(b.versions(1), [2]);
});

void test(
  'bullmq - two producers, two workers, racing versions: each chat in order, ending with its newest, none stuck',
  { timeout: 30_000 },
  async (t) => {
    const prefix = uniquePrefix();
    const a = await bullmqFactory(prefix)({ concurrency: 2 });
    const b = await bullmqFactory(prefix)({ concurrency: 2 });
    t.after(async () => {
      await a.close();
      await b.close();
      await deleteKeys(prefix);
    });
    a.gate.open();
    b.gate.open();
    const chats = [21, 22, 23, 24, 25];
    // Renders take 0-12 ms (the fixture's delay), submits keep coming while they run.
    for (let v = 1; v <= 30; v++) {
      await Promise.all(chats.map((chat) => (v % 2 ? a : b).queue.submit(chat, v, { ...board(v % 3), puzzle: `delay:${(v % 3) * 6}` })));
      await new Promise((r) => setTimeout(r, v % 4));
    }
    // Both processes' deliveries, merged in the order they happened.
    const seen = (chat: number): number[] =>
      [...a.delivered, ...b.delivered]
        .filter((d) => d.chatId === chat)
        .sort((x, y) => x.seq - y.seq)
        .map((d) => d.version);
    await waitFor(
      () => `v30 everywhere: ${JSON.stringify(chats.map(seen))}`,
      () => chats.every((c) => seen(c).includes(30)),
      15_000,
    );
    await new Promise((r) => setTimeout(r, 200));
    for (const chat of chats) {
      const vs = seen(chat);
      assert.ok(
        vs.every((v, i) => i === 0 || v > vs[i - 1]!),
        `chat ${chat} in order, each version once: ${vs.join(',')}`,
      );
      assert.equal(vs.at(-1), 30);
    }
    assert.ok(a.delivered.length > 0 && b.delivered.length > 0, 'both workers rendered');
    // Per chat, one job at a time: after the last render nothing is left waiting, and every chat's job ended.
    const r = new Redis(REDIS_URL);
    try {
      const keys = renderQueueKeys(prefix);
      assert.equal(await r.scard(keys.queued), 0);
      for (const chat of chats) assert.equal(await r.hget(keys.chat(chat), 'run'), '0');
      assert.equal(await r.hget(keys.chat(21), 'b'), null, 'the board is dropped once rendered');
    } finally {
      await r.quit();
    }
  },
);

void test('bullmq - a prefix outside A-Za-z0-9_:.- is refused before connecting', async () => {
  await assert.rejects(BullmqRenderQueue.open({ redisUrl: REDIS_URL, prefix: 'a b' }), RangeError);
});
