/**
 * The one behaviour suite every RenderQueue adapter passes (in process, and
 * BullMQ on Redis under a unique prefix): delivery, supersession, in-order per
 * chat, rank order, the pool's semaphore still bounding the threads, a failed render
 * counted and not retried, the bounds (queue, job bytes), bad input, close.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { sampleBoard, type Board } from '@crowdplay/board';
import type { SubmitOutcome } from '../src/index.ts';
import { waitFor, type RQFactory, type RQHarness } from './render-queue-harness.ts';

const TIMEOUT = { timeout: 20_000 };
const board = (cards = 2, title = 'chat'): Board => ({ ...sampleBoard(cards, { avatarShare: 0 }), title });

async function withHarness(
  t: { after(fn: () => Promise<void>): void },
  factory: RQFactory,
  opts: Parameters<RQFactory>[0],
  fn: (h: RQHarness) => Promise<void>,
): Promise<void> {
  const h = await factory(opts);
  t.after(() => h.close());
  await fn(h);
}

export function renderQueueSuite(name: string, factory: RQFactory): void {
  void test(`${name} - a submitted board is rendered in the pool and its PNG handed to the callback`, TIMEOUT, async (t) => {
    await withHarness(t, factory, {}, async (h) => {
      h.gate.open();
      assert.deepEqual(await h.queue.submit(-1001, 1, board(3)), { status: 'queued' });
      assert.deepEqual(await h.queue.submit(7, 1, board(4)), { status: 'queued' });
      await waitFor('two deliveries', () => h.delivered.length === 2);
      const byChat = new Map(h.delivered.map((d) => [d.chatId, d]));
      assert.deepEqual([...byChat.get(-1001)!.png], [0x89, 3, 0]);
      assert.deepEqual([...byChat.get(7)!.png], [0x89, 4, 0]);
      assert.equal(h.queue.stats().rendered, 2);
      assert.equal(h.metrics.histograms['crowdplay_render_queue_job_ms']?.length, 2);
      assert.equal(h.metrics.histograms['crowdplay_render_queue_job_bytes']?.length, 2);
    });
  });

  void test(
    `${name} - a render draws its chat's newer board from the pool's latest option and hands it on at that version`,
    TIMEOUT,
    async (t) => {
      const newer = new Map<number, { version: number; board: Board }>();
      const asked: Array<[string, number]> = [];
      const latest = (chatId: string, version: number) => {
        asked.push([chatId, version]);
        const n = newer.get(Number(chatId));
        return n && n.version > version ? n : null;
      };
      await withHarness(t, factory, { concurrency: 1, latest }, async (h) => {
        assert.equal((await h.queue.submit(1, 1, board(2))).status, 'queued');
        await waitFor('chat 1 on the thread', () => h.gate.started() === 1);
        // Chat 9 takes the thread's second slot (drawn as submitted: asked before anything is newer).
        assert.equal((await h.queue.submit(9, 1, board(2))).status, 'queued');
        await waitFor('chat 9 posted to the thread', () => h.gate.pool.stats().inFlight === 2);
        assert.equal((await h.queue.submit(2, 1, board(2))).status, 'queued');
        assert.equal((await h.queue.submit(3, 4, board(2))).status, 'queued');
        // While they wait: chat 2 moved on to version 5 (4 cards); chat 3's holder has only an older version.
        newer.set(2, { version: 5, board: board(4) });
        newer.set(3, { version: 2, board: board(4) });
        h.gate.open();
        await waitFor('four deliveries', () => h.delivered.length === 4);
        assert.deepEqual(h.versions(2), [5], 'drawn and handed on at the newer version');
        assert.equal(h.delivered.find((d) => d.chatId === 2)!.png[1], 4, 'the newer board was drawn');
        assert.deepEqual(h.versions(3), [4], 'an older one than submitted is not taken');
        assert.equal(h.delivered.find((d) => d.chatId === 3)!.png[1], 2);
        assert.deepEqual(h.versions(1), [1]);
        assert.deepEqual(h.versions(9), [1]);
        assert.deepEqual(asked.map(([c]) => c).sort(), ['1', '2', '3', '9'], 'asked once per render, as it is handed to the thread');
        assert.deepEqual(h.gate.pool.stats().latest, { newer: 1, failed: 0 });
      });
    },
  );

  void test(`${name} - avatars survive the job (bytes in, same bytes at the thread)`, TIMEOUT, async (t) => {
    await withHarness(t, factory, {}, async (h) => {
      h.gate.open();
      const b = sampleBoard(2, { avatarShare: 1 });
      const bytes = b.cards.reduce((a, c) => a + (c.avatar?.byteLength ?? 0), 0);
      assert.ok(bytes > 0);
      await h.queue.submit(5, 1, b);
      await waitFor('a delivery', () => h.delivered.length === 1);
      assert.equal(h.delivered[0]!.png[2], bytes & 0xff);
    });
  });

  void test(`${name} - a newer version replaces a queued older one; an older one is superseded at once`, TIMEOUT, async (t) => {
    await withHarness(t, factory, { concurrency: 1 }, async (h) => {
      assert.equal((await h.queue.submit(1, 1, board())).status, 'queued');
      await waitFor('v1 on a thread', () => h.gate.started() === 1);
      assert.equal((await h.queue.submit(1, 2, board())).status, 'queued');
      assert.equal((await h.queue.submit(1, 3, board())).status, 'queued');
      assert.deepEqual(await h.queue.submit(1, 2, board()), { status: 'superseded', by: 3 });
      assert.deepEqual(await h.queue.submit(1, 3, board()), { status: 'superseded', by: 3 });
      assert.equal((await h.queue.submit(2, 1, board())).status, 'queued');
      h.gate.open();
      await waitFor('chat 1 v3 and chat 2 v1', () => h.versions(1).includes(3) && h.versions(2).length === 1);
      await sleep(100);
      assert.deepEqual(h.versions(1), [1, 3], 'v2 never rendered');
      assert.deepEqual(h.versions(2), [1]);
      assert.equal(h.queue.stats().superseded, 3);
      assert.equal(h.metrics.sum('crowdplay_render_queue_superseded_total'), 3);
      assert.equal(h.gate.started(), 3);
    });
  });

  void test(`${name} - a chat's versions are rendered one at a time, in order, ending with the newest`, TIMEOUT, async (t) => {
    await withHarness(t, factory, { concurrency: 3 }, async (h) => {
      h.gate.open();
      for (let v = 1; v <= 25; v++) {
        for (const chat of [11, 12]) {
          const r = await h.queue.submit(chat, v, board(v % 4));
          assert.notEqual(r.status, 'refused');
        }
        if (v % 5 === 0) await sleep(3);
      }
      await waitFor(
        () => `v25 of both chats: ${JSON.stringify([h.versions(11), h.versions(12)])}`,
        () => h.versions(11).at(-1) === 25 && h.versions(12).at(-1) === 25,
      );
      for (const chat of [11, 12]) {
        const vs = h.versions(chat);
        assert.ok(
          vs.every((v, i) => i === 0 || v > vs[i - 1]!),
          `increasing: ${vs.join(',')}`,
        );
      }
      assert.equal(h.queue.stats().rendered + h.queue.stats().superseded, 50);
    });
  });

  void test(`${name} - the pool's semaphore bounds the threads; waiting jobs never reach one`, TIMEOUT, async (t) => {
    await withHarness(t, factory, { concurrency: 2 }, async (h) => {
      for (let chat = 1; chat <= 8; chat++) assert.equal((await h.queue.submit(chat, 1, board())).status, 'queued');
      await waitFor('two renders on threads', () => h.gate.started() === 2);
      await waitFor('each thread holding its next job', () => h.gate.pool.stats().inFlight === h.gate.pool.slots);
      await sleep(150);
      assert.equal(h.gate.started(), 2, 'no third job started on a thread');
      assert.equal(h.gate.pool.stats().inFlight, 4, 'two drawing, two posted to draw next');
      assert.equal(h.gate.pool.stats().piscinaQueued, 0);
      assert.ok(h.gate.pool.stats().queued <= 4);
      h.gate.open();
      await waitFor('eight deliveries', () => h.delivered.length === 8);
      assert.ok(h.gate.maxInFlight() <= 2, `max in flight ${h.gate.maxInFlight()}`);
      assert.ok(h.gate.pool.stats().maxInFlight <= 4);
    });
  });

  void test(`${name} - backlog() counts every board submitted and not handed on: waiting, and taken by a worker`, TIMEOUT, async (t) => {
    await withHarness(t, factory, { concurrency: 1, jobConcurrency: 8 }, async (h) => {
      assert.equal(await h.queue.backlog(), 0);
      for (let chat = 1; chat <= 5; chat++) assert.equal((await h.queue.submit(chat, 1, board())).status, 'queued');
      await waitFor('chat 1 on the thread', () => h.gate.started() === 1);
      assert.equal(await h.queue.backlog(), 5, 'one drawing, four waiting (for the worker or in the pool)');
      h.gate.open();
      await waitFor('five deliveries', () => h.delivered.length === 5);
      let left = -1;
      for (const end = Date.now() + 5_000; Date.now() < end && left !== 0; await sleep(5)) left = await h.queue.backlog();
      assert.equal(left, 0);
    });
  });

  void test(`${name} - waiting boards render lowest rank first (the scheduler's quietest first)`, TIMEOUT, async (t) => {
    await withHarness(t, factory, { concurrency: 1, jobConcurrency: 8 }, async (h) => {
      assert.equal((await h.queue.submit(1, 1, board(), 500)).status, 'queued');
      await waitFor('chat 1 on the thread', () => h.gate.started() === 1);
      assert.equal((await h.queue.submit(9, 1, board(), 600)).status, 'queued');
      await waitFor('chat 9 posted to the thread', () => h.gate.pool.stats().inFlight === 2);
      // Submitted youngest first: chat 4 has been quiet the longest.
      for (const [chat, rank] of [
        [2, 300],
        [3, 200],
        [4, 100],
      ] as const)
        assert.equal((await h.queue.submit(chat, 1, board(), rank)).status, 'queued');
      await waitFor('three boards waiting for the thread', () => h.gate.pool.stats().queued === 3);
      h.gate.open();
      await waitFor('five deliveries', () => h.delivered.length === 5);
      assert.deepEqual(
        h.delivered.map((d) => d.chatId),
        [1, 9, 4, 3, 2],
      );
    });
  });

  void test(
    `${name} - a render that throws is counted, not retried, told to the consumer, and the chat's next version renders`,
    TIMEOUT,
    async (t) => {
      await withHarness(t, factory, { concurrency: 1 }, async (h) => {
        h.gate.open();
        assert.equal((await h.queue.submit(3, 1, board(2, 'boom'))).status, 'queued');
        await waitFor('the failure counted', () => h.queue.stats().failed === 1);
        assert.equal((await h.queue.submit(3, 2, board())).status, 'queued');
        await waitFor('v2 delivered', () => h.versions(3).includes(2));
        await sleep(300);
        assert.equal(h.gate.threw(), 1, 'the failed render ran once');
        assert.deepEqual(h.versions(3), [2]);
        assert.equal(h.metrics.sum('crowdplay_render_queue_failed_total'), 1);
        assert.ok(h.errors.some(([e]) => e instanceof Error && e.message === 'boom'));
        assert.deepEqual(h.failed, [[3, 1]], 'the consumer heard which board was not handed on');
      });
    },
  );

  void test(`${name} - a full queue refuses a new chat (counted) but a queued chat's newer version still replaces`, TIMEOUT, async (t) => {
    await withHarness(t, factory, { concurrency: 1, maxQueue: 2 }, async (h) => {
      await h.queue.submit(1, 1, board());
      await waitFor('chat 1 on a thread', () => h.gate.started() === 1);
      await h.queue.submit(9, 1, board());
      await waitFor('chat 9 posted to the thread', () => h.gate.pool.stats().inFlight === 2);
      assert.equal((await h.queue.submit(2, 1, board())).status, 'queued');
      assert.equal((await h.queue.submit(3, 1, board())).status, 'queued');
      assert.deepEqual(await h.queue.submit(4, 1, board()), { status: 'refused', reason: 'queue-full' });
      assert.equal((await h.queue.submit(3, 2, board())).status, 'queued');
      assert.equal(h.queue.stats().queued, 2);
      assert.equal(h.queue.stats().refused, 1);
      assert.deepEqual(h.metrics.counters['crowdplay_render_queue_refused_total'], [[1, { reason: 'queue-full' }]]);
      h.gate.open();
      await waitFor('four chats delivered', () => h.delivered.length === 4);
      assert.deepEqual(h.versions(3), [2]);
      assert.deepEqual(h.versions(4), []);
    });
  });

  void test(`${name} - a job over maxJobBytes is refused and counted; a malformed board rejects; nothing is queued`, TIMEOUT, async (t) => {
    await withHarness(t, factory, { maxJobBytes: 2_000 }, async (h) => {
      h.gate.open();
      const big: Board = { ...board(1), cards: [{ ...board(1).cards[0]!, avatar: new Uint8Array(3_000) }] };
      assert.deepEqual(await h.queue.submit(1, 1, big), { status: 'refused', reason: 'too-large' });
      const bad = { title: 't', puzzle: 'p', cards: [{ id: 1, name: 'x', rows: [] }] } as unknown as Board;
      await assert.rejects(h.queue.submit(1, 2, bad), (e: unknown) => e instanceof TypeError && /cards\[0\]\.id/.test(e.message));
      for (const rank of [Number.NaN, Infinity])
        await assert.rejects(h.queue.submit(1, 2, board(), rank), (e: unknown) => e instanceof RangeError && /rankMs/.test(e.message));
      const s = h.queue.stats();
      assert.equal(s.submitted, 0);
      assert.equal(s.tooLarge, 1);
      assert.equal(s.queued, 0);
      assert.deepEqual(h.metrics.counters['crowdplay_render_queue_refused_total'], [[1, { reason: 'too-large' }]]);
      // The chat is not blocked by what was refused.
      assert.equal((await h.queue.submit(1, 3, board())).status, 'queued');
      await waitFor('v3 delivered', () => h.delivered.length === 1);
      await sleep(100);
      assert.deepEqual(h.versions(1), [3]);
    });
  });

  void test(`${name} - close waits for the render in progress to be handed on; a submit after close is refused`, TIMEOUT, async (t) => {
    await withHarness(t, factory, { concurrency: 1 }, async (h) => {
      await h.queue.submit(1, 1, board());
      await waitFor('chat 1 on a thread', () => h.gate.started() === 1);
      const closed = h.queue.close();
      let done = false;
      void closed.then(() => (done = true));
      await sleep(100);
      assert.equal(done, false, 'close waits for the render');
      h.gate.open();
      await closed;
      assert.deepEqual(h.versions(1), [1]);
      const r: SubmitOutcome = await h.queue.submit(2, 1, board());
      assert.deepEqual(r, { status: 'refused', reason: 'closed' });
      await h.queue.close();
    });
  });
}
