import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { availableParallelism, getPriority } from 'node:os';
import { Image } from '@napi-rs/canvas';
import {
  RenderPool,
  SLOTS_PER_THREAD,
  avatarThumbnail,
  defaultRenderConcurrency,
  onDemandFontFiles,
  renderBoard,
  sampleAvatar,
  sampleBoard,
  type Board,
  type BoardMetrics,
  type RenderOutcome,
  type RenderPoolOptions,
} from '../src/index.ts';

const GATE_WORKER = new URL('./fixtures/gate-worker.ts', import.meta.url);
const BOARD = sampleBoard(3, { avatarShare: 0 });

/** A pool whose threads hold every task until `open()`; `s` are the threads' shared counters (see gate-worker.ts). */
function gatePool(opts: RenderPoolOptions = {}) {
  const sab = new SharedArrayBuffer(6 * 4);
  const s = new Int32Array(sab);
  const pool = new RenderPool({ concurrency: 2, ...opts, workerFile: GATE_WORKER, workerData: { sab } });
  return {
    pool,
    s,
    started: () => Atomics.load(s, 2),
    /** Resolves when `n` tasks have started on threads (the worker notifies on every start). */
    startedReach: (n: number, what: string) => startedReach(s, n, what),
    open: () => {
      Atomics.store(s, 3, 1);
      Atomics.notify(s, 3);
    },
  };
}

/** Atomics.waitAsync (Node 20 has it; the ES2022 lib the repository compiles against does not declare it). */
const waitAsync = (
  Atomics as unknown as {
    waitAsync(a: Int32Array, index: number, value: number, timeoutMs: number): { async: boolean; value: Promise<string> | string };
  }
).waitAsync;

async function startedReach(s: Int32Array, n: number, what: string, ms = 8_000): Promise<void> {
  const end = Date.now() + ms;
  for (let seen = Atomics.load(s, 2); seen < n; seen = Atomics.load(s, 2)) {
    const left = end - Date.now();
    if (left <= 0) throw new Error(`timed out after ${ms} ms waiting for ${what}: ${seen} of ${n} tasks started`);
    const w = waitAsync(s, 2, seen, left);
    if (w.async) await w.value;
  }
}

/** Records every metric the pool writes. */
function fakeMetrics() {
  const counters: Record<string, Array<[number, Record<string, string> | undefined]>> = {};
  const histograms: Record<string, number[]> = {};
  const gauges: Record<string, () => number> = {};
  const listGauges: Record<string, () => number | Array<[number, Record<string, string>]>> = {};
  const metrics: BoardMetrics = {
    counter: (name) => ({ add: (v, a) => void (counters[name] ??= []).push([v, a]) }),
    histogram: (name) => ({ record: (v) => void (histograms[name] ??= []).push(v) }),
    gauge: (name, read) => {
      listGauges[name] = read;
      gauges[name] = () => {
        const v = read();
        return typeof v === 'number' ? v : (v[0]?.[0] ?? NaN);
      };
    },
  };
  return { metrics, counters, histograms, gauges, listGauges };
}

const status = (o: RenderOutcome): string => (o.status === 'refused' ? `refused:${o.reason}` : o.status);

/** `track(name, p)` passes `p` through and records `name:status` in `order` as it settles. */
function outcomeOrder() {
  const order: string[] = [];
  const track = (name: string, p: Promise<RenderOutcome>): Promise<RenderOutcome> =>
    p.then((o) => {
      order.push(`${name}:${status(o)}`);
      return o;
    });
  return { order, track };
}

test('never more than `concurrency` renders on threads, and one more job posted to each; queued jobs never reach a thread', async () => {
  const m = fakeMetrics();
  const { pool, s, started, startedReach, open } = gatePool({ concurrency: 2, metrics: m.metrics });
  try {
    assert.equal(pool.slots, 2 * SLOTS_PER_THREAD);
    const jobs = Array.from({ length: 7 }, (_, i) => pool.render(`chat-${i}`, 1, BOARD));
    await startedReach(2, 'two renders on threads');
    // The pool hands a job to piscina synchronously, in render() or as a slot frees (none does here:
    // the gate is shut), so a leaked job would already be in piscina's queue or on a thread.
    assert.equal(started(), 2, 'renders started: one per thread');
    assert.equal(Atomics.load(s, 0), 2, 'in flight on threads');
    const st = pool.stats();
    assert.deepEqual([st.inFlight, st.queued, st.piscinaQueued], [4, 3, 0], 'each thread holds the next job; piscina queues none');
    assert.equal(m.gauges['crowdplay_board_queue_depth']!(), 3);
    assert.equal(m.gauges['crowdplay_board_in_flight']!(), 4);
    open();
    const out = await Promise.all(jobs);
    assert.deepEqual(out.map(status), Array(7).fill('rendered'));
    assert.equal(Atomics.load(s, 1), 2, 'most in flight at once, counted on the threads');
    assert.equal(started(), 7);
    assert.equal(pool.stats().maxInFlight, 4);
    assert.equal(m.histograms['crowdplay_board_render_ms']!.length, 7);
    assert.deepEqual(m.histograms['crowdplay_board_png_bytes'], Array(7).fill(2));
  } finally {
    open();
    await pool.close();
  }
});

test('latest: a job leaving the queue draws its chat newer board; older, none, a throw or a malformed board keep the submitted one', async () => {
  const m = fakeMetrics();
  const newer = new Map<string, { version: number; board: Board } | 'throw'>();
  const latest = (chatId: string, version: number) => {
    const n = newer.get(chatId);
    if (n === 'throw') throw new Error('holder gone');
    return n && n.version > version ? n : null;
  };
  const { pool, startedReach, open } = gatePool({ concurrency: 1, metrics: m.metrics, latest });
  try {
    const first = pool.render('A', 1, BOARD);
    await startedReach(1, 'A on the thread');
    // Z takes the thread's second slot (posted to it, bound now); B–F wait in the queue.
    const staged = pool.render('Z', 1, BOARD);
    assert.deepEqual([pool.stats().inFlight, pool.stats().queued], [2, 0]);
    const jobs = ['B', 'C', 'D', 'E', 'F'].map((c) => pool.render(c, 3, BOARD));
    newer.set('B', { version: 7, board: sampleBoard(5, { avatarShare: 0 }) });
    newer.set('C', { version: 2, board: sampleBoard(5, { avatarShare: 0 }) });
    newer.set('D', 'throw');
    newer.set('E', { version: 8, board: { ...BOARD, cards: [{ ...BOARD.cards[0]!, rows: [['purple' as never]] }] } });
    open();
    const [a, z, b, c, d, e, f] = await Promise.all([first, staged, ...jobs]);
    const drawn = (o: RenderOutcome | undefined) => (o?.status === 'rendered' ? [o.version, o.cards] : [status(o!)]);
    assert.deepEqual(drawn(a), [1, 3], 'A started before any newer board was known');
    assert.deepEqual(drawn(z), [1, 3]);
    assert.deepEqual(drawn(b), [7, 5], 'B drawn at its newer version');
    assert.deepEqual(drawn(c), [3, 3], 'an older version is not taken');
    assert.deepEqual(drawn(d), [3, 3], 'a throw keeps the submitted board');
    assert.deepEqual(drawn(e), [3, 3], 'a malformed board keeps the submitted one');
    assert.deepEqual(drawn(f), [3, 3], 'none');
    assert.deepEqual(pool.stats().latest, { newer: 1, failed: 2 });
    assert.deepEqual(
      m.counters['crowdplay_board_latest_total']!.map(([, a]) => a?.outcome),
      ['newer', 'failed', 'failed'],
    );
  } finally {
    open();
    await pool.close();
  }
});

test('a newer version replaces a queued older one, which resolves superseded and never renders', async () => {
  const m = fakeMetrics();
  const { pool, started, startedReach, open } = gatePool({ concurrency: 1, metrics: m.metrics });
  try {
    const { order, track } = outcomeOrder();
    const a1 = track('A1', pool.render('A', 1, BOARD));
    await startedReach(1, 'A1 on a thread');
    const z = pool.render('Z', 1, BOARD); // the thread's second slot: the jobs below wait in the queue
    const b1 = track('B1', pool.render('B', 1, BOARD));
    const c1 = track('C1', pool.render('C', 1, BOARD));
    const b2 = track('B2', pool.render('B', 2, sampleBoard(5, { avatarShare: 0 })));
    assert.deepEqual(await b1, { status: 'superseded', superseded: true, by: 2 });
    assert.deepEqual(await pool.render('B', 2, BOARD), { status: 'superseded', superseded: true, by: 2 }, 'an equal version');
    assert.deepEqual(await pool.render('B', 1, BOARD), { status: 'superseded', superseded: true, by: 2 }, 'an older version');
    assert.deepEqual(
      await pool.render('A', 1, BOARD),
      { status: 'superseded', superseded: true, by: 1 },
      'not newer than the one rendering',
    );
    assert.deepEqual([pool.stats().queued, started()], [2, 1]);
    open();
    const [ra, rb, rc, rz] = await Promise.all([a1, b2, c1, z]);
    assert.deepEqual([ra, rb, rc, rz].map(status), ['rendered', 'rendered', 'rendered', 'rendered']);
    assert.equal(rb.status === 'rendered' && rb.cards, 5, 'the newer board was rendered');
    assert.equal(started(), 4, 'B1 never reached a thread');
    assert.deepEqual(order, ['B1:superseded', 'A1:rendered', 'B2:rendered', 'C1:rendered'], 'B kept its place ahead of C');
    assert.equal(pool.stats().superseded, 4);
    assert.equal(m.counters['crowdplay_board_superseded_total']!.length, 4);
  } finally {
    open();
    await pool.close();
  }
});

test('queued jobs start lowest rank first, ties in queue order; a replacement keeps its place; a rank that is not a finite number is refused', async () => {
  const { pool, startedReach, open } = gatePool({ concurrency: 1 });
  try {
    const { order, track } = outcomeOrder();
    const a = track('A', pool.render('A', 1, BOARD, 50));
    await startedReach(1, 'A on a thread');
    const z = track('Z', pool.render('Z', 1, BOARD, 60)); // the thread's second slot
    await assert.rejects(pool.render('Z', 1, BOARD, Number.NaN), RangeError);
    assert.equal(pool.stats().queued, 0, 'nothing queued for the refused rank');
    const jobs = [
      track('B', pool.render('B', 1, BOARD, 30)),
      track('C', pool.render('C', 1, BOARD, 10)),
      track('D', pool.render('D', 1, BOARD, 30)),
      track('E', pool.render('E', 1, BOARD)),
    ];
    // C's newer version, ranked later, keeps C's place.
    jobs.push(track('C2', pool.render('C', 2, BOARD, 40)));
    open();
    await Promise.all([a, z, ...jobs]);
    assert.deepEqual(order, ['C:superseded', 'A:rendered', 'Z:rendered', 'E:rendered', 'C2:rendered', 'B:rendered', 'D:rendered']);
  } finally {
    open();
    await pool.close();
  }
});

test("a chat's next version waits for its render on a thread, even with a slot free", async () => {
  const { pool, started, startedReach, open } = gatePool({ concurrency: 2 });
  try {
    const a1 = pool.render('A', 1, BOARD);
    await startedReach(1, 'A1 on a thread');
    const a2 = pool.render('A', 2, BOARD);
    const b1 = pool.render('B', 1, BOARD);
    await startedReach(2, 'a second render on the free slot');
    // The free slot went to B1, submitted after A2: A2 is still queued, B1 is not.
    assert.equal(pool.admission('A', 3), 'replaces', 'A2 waits for A1');
    assert.equal(pool.admission('B', 2), 'queued', 'B1 is on a thread');
    assert.equal(pool.stats().queued, 1);
    open();
    assert.deepEqual((await Promise.all([a1, a2, b1])).map(status), ['rendered', 'rendered', 'rendered']);
    assert.equal(started(), 3);
  } finally {
    open();
    await pool.close();
  }
});

test('a full queue refuses, counted and reported, and changes nothing queued', async () => {
  const m = fakeMetrics();
  const refused: Array<[string, string, Record<string, unknown> | undefined]> = [];
  const { pool, started, startedReach, open } = gatePool({
    concurrency: 1,
    maxQueue: 2,
    metrics: m.metrics,
    refusals: { refuse: (area, reason, detail) => void refused.push([area, reason, detail]) },
  });
  try {
    const a = pool.render('A', 1, BOARD);
    await startedReach(1, 'A on a thread');
    const z = pool.render('Z', 1, BOARD); // the thread's second slot
    const b = pool.render('B', 1, BOARD);
    const c = pool.render('C', 1, BOARD);
    assert.deepEqual(await pool.render('D', 1, BOARD), { status: 'refused', reason: 'queue-full' });
    assert.deepEqual([pool.stats().queued, pool.stats().refused], [2, 1]);
    assert.deepEqual(m.counters['crowdplay_board_refused_total'], [[1, { reason: 'queue-full' }]]);
    assert.deepEqual(refused, [['board', 'CP_ERR_BOARD_QUEUE_FULL', { chatId: 'D', maxQueue: 2 }]]);
    // A newer version of a queued chat needs no new place: accepted.
    const b2 = pool.render('B', 2, BOARD);
    assert.deepEqual(await b, { status: 'superseded', superseded: true, by: 2 });
    assert.equal(pool.stats().queued, 2);
    open();
    assert.deepEqual((await Promise.all([a, b2, c, z])).map(status), ['rendered', 'rendered', 'rendered', 'rendered']);
    assert.equal(started(), 4, 'D never reached a thread');
  } finally {
    open();
    await pool.close();
  }
});

test('close() refuses queued jobs, lets the ones handed to a thread finish, then refuses everything', async () => {
  const { pool, started, startedReach, open } = gatePool({ concurrency: 1 });
  const a = pool.render('A', 1, BOARD);
  await startedReach(1, 'A on a thread');
  const z = pool.render('Z', 1, BOARD); // posted to the thread: it renders too
  const b = pool.render('B', 1, BOARD);
  const c = pool.render('C', 1, BOARD);
  const order: string[] = [];
  const closing = pool.close().then(() => void order.push('closed'));
  void a.then((o) => void order.push(`A:${status(o)}`));
  void z.then((o) => void order.push(`Z:${status(o)}`));
  assert.deepEqual(await b, { status: 'refused', reason: 'closed' });
  assert.deepEqual(await c, { status: 'refused', reason: 'closed' });
  assert.deepEqual(await pool.render('D', 1, BOARD), { status: 'refused', reason: 'closed' });
  assert.deepEqual(order, [], 'close waits for the render on a thread');
  open();
  await closing;
  assert.deepEqual(order, ['A:rendered', 'Z:rendered', 'closed'], 'the jobs on the thread resolved before close did');
  await pool.close(); // twice is fine
  assert.equal(started(), 2);
  assert.equal(pool.stats().refused, 3);
});

test('an avatar sliced from a large buffer reaches the thread without that buffer', async () => {
  const { pool, s, open } = gatePool({ concurrency: 1 });
  try {
    const big = Buffer.alloc(1 << 20, 7);
    const avatar = big.subarray(1000, 1100);
    const board: Board = { ...BOARD, cards: [{ ...BOARD.cards[0]!, avatar }] };
    open();
    assert.equal(status(await pool.render('A', 1, board)), 'rendered');
    assert.equal(Atomics.load(s, 5), 100, 'the thread got a 100-byte buffer, not the 1 MiB one');
    assert.equal(board.cards[0]!.avatar, avatar, "the caller's board is untouched");
  } finally {
    await pool.close();
  }
});

test('a malformed board is refused before it is queued', async () => {
  const { pool, started, open } = gatePool({ concurrency: 1 });
  try {
    const bad = { ...BOARD, cards: [{ ...BOARD.cards[0]!, rows: [['green']] }] } as unknown as Board;
    await assert.rejects(pool.render('A', 1, bad), { name: 'TypeError', message: /rows\[0\]/ });
    assert.deepEqual([pool.stats().queued, pool.stats().inFlight, started()], [0, 0, 0]);
    // The chat is not blocked by the refused board.
    open();
    assert.equal(status(await pool.render('A', 1, BOARD)), 'rendered');
  } finally {
    open();
    await pool.close();
  }
});

test('concurrency 0 means min(3, the cores this process may use); bad options are refused', async () => {
  assert.equal(defaultRenderConcurrency(), Math.min(3, availableParallelism()));
  const { pool, open } = gatePool({ concurrency: 0 });
  assert.equal(pool.concurrency, defaultRenderConcurrency());
  open();
  await pool.close();
  assert.throws(() => new RenderPool({ concurrency: -1, workerFile: GATE_WORKER }), RangeError);
  assert.throws(() => new RenderPool({ concurrency: 1.5, workerFile: GATE_WORKER }), RangeError);
  assert.throws(() => new RenderPool({ maxQueue: -1, workerFile: GATE_WORKER }), RangeError);
  assert.throws(() => new RenderPool({ maxPngBytes: 0, workerFile: GATE_WORKER }), RangeError);
  for (const threadNice of [-1, 20, 2.5]) assert.throws(() => new RenderPool({ threadNice, workerFile: GATE_WORKER }), /threadNice/);
});

test(
  'threadNice - the render threads lower their own priority; the calling thread keeps its own',
  { skip: !existsSync('/proc/thread-self') && 'needs Linux /proc/thread-self' },
  async () => {
    const m = fakeMetrics();
    const before = getPriority();
    // Above this process's own nice value, so the threads must change theirs (a test run under `nice` included).
    const nice = Math.min(19, Math.max(0, before) + 3);
    const pool = new RenderPool({ concurrency: 1, threadNice: nice, metrics: m.metrics });
    try {
      assert.deepEqual(m.listGauges['crowdplay_board_thread_nice']!(), [], 'nothing reported before a render');
      assert.equal(pool.stats().threadNice, null);
      assert.equal((await pool.render('A', 1, sampleBoard(4))).status, 'rendered');
      assert.equal(pool.stats().threadNice, Math.max(nice, before));
      assert.deepEqual(m.listGauges['crowdplay_board_thread_nice']!(), [[Math.max(nice, before), {}]]);
      assert.equal(getPriority(), before, 'this thread is untouched');
    } finally {
      await pool.close();
    }
    const plain = new RenderPool({ concurrency: 1 });
    try {
      assert.equal((await plain.render('A', 1, sampleBoard(4))).status, 'rendered');
      assert.equal(plain.stats().threadNice, before, "threadNice 0: the process's own");
    } finally {
      await plain.close();
    }
  },
);

test('the real render thread renders a board to a PNG', async () => {
  const m = fakeMetrics();
  const pool = new RenderPool({ concurrency: 1, metrics: m.metrics, maxPngBytes: 5_000 });
  try {
    const small = await pool.render('A', 1, sampleBoard(4));
    assert.equal(small.status, 'rendered');
    if (small.status !== 'rendered') return;
    assert.deepEqual([small.width, small.height, small.cards, small.bytes], [576, 232, 4, small.png.length]);
    assert.ok(small.ms > 0 && small.ms === small.drawMs + small.encodeMs);
    assert.equal(small.overBudget, small.bytes > 5_000);
    const img = new Image();
    img.src = small.png;
    assert.deepEqual([img.width, img.height], [576, 232]);
    const big = await pool.render('B', 1, sampleBoard(40));
    assert.equal(big.status === 'rendered' && big.overBudget, true, 'over the (test) budget of 5,000 bytes');
    assert.equal(pool.stats().overBudget, small.status === 'rendered' && small.overBudget ? 2 : 1);
    assert.equal(m.counters['crowdplay_board_png_over_budget_total']!.length, pool.stats().overBudget);
    assert.deepEqual(m.histograms['crowdplay_board_png_bytes'], [small.bytes, big.status === 'rendered' ? big.bytes : -1]);
    // The one thread's V8 heap as it reported after its latest render: a real isolate is megabytes, not zero.
    const heap = m.gauges['crowdplay_board_thread_heap_bytes']!();
    assert.ok(heap > 1_000_000 && heap < 512 * 2 ** 20, `thread heap ${heap} bytes`);
    assert.equal(pool.stats().threadHeapBytes, heap);
  } finally {
    await pool.close();
  }
});

test("render threads share the process's registry of on-demand fonts: a name needing an SC slice registers it once, whichever thread draws it", async () => {
  const pool = new RenderPool({ concurrency: 2 });
  try {
    const before = onDemandFontFiles().registered;
    const base = sampleBoard(2, { avatarShare: 0 });
    // ※ (U+203B): no up-front file has it, an SC slice does, and no sample board's name needs that slice.
    const cjk: Board = { ...base, cards: base.cards.map((c, i) => ({ ...c, name: `\u203B ${i}` })) };
    const out = await Promise.all(['A', 'B', 'C', 'D'].map((chat) => pool.render(chat, 1, cjk)));
    assert.deepEqual(
      out.map((o) => o.status),
      ['rendered', 'rendered', 'rendered', 'rendered'],
    );
    const after = onDemandFontFiles().registered;
    // Counted in this (main) thread's registry: the threads registered through it, not through registries of their own.
    assert.ok(after > before, `on-demand files registered: ${before} → ${after}`);
    await pool.render('E', 1, cjk);
    assert.equal(onDemandFontFiles().registered, after, 'the same characters again register nothing');
  } finally {
    await pool.close();
  }
});

test('avatarThumbnail - a 24 px PNG a fraction of the photo; the board drawn from it is the same picture; not an image: null', () => {
  const photo = sampleAvatar(3);
  const thumb = avatarThumbnail(photo);
  assert.ok(thumb && thumb.length < photo.length / 2, `thumbnail ${thumb?.length} bytes of ${photo.length}`);
  const img = new Image();
  img.src = Buffer.from(thumb);
  assert.deepEqual([img.width, img.height], [24, 24]);
  assert.equal(avatarThumbnail(thumb), thumb, 'already card-sized: itself');
  const board = sampleBoard(6, { avatarShare: 0 });
  const drawn = (avatar: Uint8Array) => renderBoard({ ...board, cards: board.cards.map((c) => ({ ...c, avatar })) }).png;
  assert.deepEqual(Buffer.from(drawn(thumb)), Buffer.from(drawn(photo)));
  assert.notDeepEqual(Buffer.from(drawn(avatarThumbnail(sampleAvatar(4))!)), Buffer.from(drawn(photo)), 'another avatar differs');
  assert.equal(avatarThumbnail(new Uint8Array([1, 2, 3, 4])), null);
  assert.equal(avatarThumbnail(new Uint8Array(0)), null);
});

test('avatarThumbnail - counts the native bytes it leaves for the collector: the decoded photo and the 24 px canvas', () => {
  const photo = sampleAvatar(5);
  const img = new Image();
  img.src = Buffer.from(photo);
  const native = { bytes: 7 };
  assert.ok(avatarThumbnail(photo, native));
  assert.equal(native.bytes, 7 + img.width * img.height * 4 + 24 * 24 * 4);
  const thumb = avatarThumbnail(photo)!;
  const small = { bytes: 0 };
  assert.equal(avatarThumbnail(thumb, small), thumb);
  assert.equal(small.bytes, 24 * 24 * 4, 'already card-sized: only the decode');
  const bad = { bytes: 3 };
  assert.equal(avatarThumbnail(new Uint8Array([1, 2, 3, 4]), bad), null);
  assert.equal(bad.bytes, 3, 'not an image: nothing counted');
});

test('RenderPool.thumbnail - shrinks on a render thread; null for bytes that are not an image and after close', async () => {
  const pool = new RenderPool({ concurrency: 1 });
  const photo = sampleAvatar(5);
  try {
    const thumb = await pool.thumbnail(photo);
    assert.deepEqual(thumb && Buffer.from(thumb), Buffer.from(avatarThumbnail(photo)!));
    assert.equal(await pool.thumbnail(new Uint8Array([7, 7, 7])), null);
  } finally {
    await pool.close();
  }
  assert.equal(await pool.thumbnail(photo), null);
});

test('a task after which its thread collected still answers its own result: renders and thumbnails past several collections', async () => {
  const pool = new RenderPool({ concurrency: 1 });
  try {
    // A 40-card board reads back ~4.3 MB: the thread collects every second render (worker.ts NATIVE_GC_BYTES, 8 MiB),
    // and such a task resolves only after the thread's loop has turned. Each answer must be the board it was given.
    const boards = Array.from({ length: 6 }, (_, i) => sampleBoard(i % 2 === 0 ? 40 : 4, { seed: i + 1, avatarShare: 0 }));
    const outs = await Promise.all(boards.map((b, i) => pool.render(`chat-${i}`, 1, b)));
    for (const [i, o] of outs.entries()) {
      assert.equal(o.status, 'rendered', `render ${i}`);
      if (o.status !== 'rendered') continue;
      assert.deepEqual(Buffer.from(o.png), Buffer.from(renderBoard(boards[i]!).png), `render ${i} is its own board`);
    }
    // ~100 KB of decoded photo each: a collection every ~80 thumbnails.
    const photos = Array.from({ length: 200 }, (_, i) => sampleAvatar(i % 7));
    const thumbs = await Promise.all(photos.map((p) => pool.thumbnail(p)));
    for (const [i, t] of thumbs.entries())
      assert.deepEqual(t && Buffer.from(t), Buffer.from(avatarThumbnail(photos[i]!)!), `thumbnail ${i}`);
  } finally {
    await pool.close();
  }
});
