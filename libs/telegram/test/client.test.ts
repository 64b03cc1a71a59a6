/**
 * The Bot API client against the Telegram stub (@crowdplay/telegram/testing)
 * through grammY with the send-queue transformer and the in-process queue:
 * each outcome of docs/telegram.md, end to end over HTTP.
 */
import { test } from 'node:test';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import assert from 'node:assert/strict';
import { GrammyError } from 'grammy';
import { isCrowdplayError } from '@crowdplay/protocol';
import { deferred, until, within, type Deferred } from '@crowdplay/testing';
import { ManualClock, MemorySendQueue, type JobResult, type SendQueueOptions } from '@crowdplay/sendq';
import { TelegramStub, NOT_MODIFIED, EDIT_NOT_FOUND, TELEGRAM_LIMITS, type StubOptions } from '../src/testing/index.ts';
import { TelegramClient, MemoryBoardStore, BOT_LEVEL_CHAT_ID, type BoardDelivery, type BotCall } from '../src/index.ts';
import { Avatars, Gate, type AvatarApi } from '../src/index.ts';

const TOKEN = '4242:test-token';
const A = -1001000000001;
const B = -1001000000002;

function png(fill: number, width = 400, height = 300): Uint8Array {
  const b = Buffer.alloc(128, fill);
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52]).copy(b, 0);
  b.writeUInt32BE(width, 16);
  b.writeUInt32BE(height, 20);
  return new Uint8Array(b);
}

interface Rig {
  stub: TelegramStub;
  queue: MemorySendQueue<BotCall>;
  client: TelegramClient;
  deactivated: Array<[number, string]>;
  migrated: Array<[number, number]>;
  boards: BoardDelivery[];
  close(): Promise<void>;
}

async function rig(
  o: {
    stub?: StubOptions;
    queue?: Partial<SendQueueOptions>;
    start?: boolean;
    avatars?: { concurrency?: number; cacheBytes?: number; ttlMs?: number; shrink?: (b: Uint8Array) => Promise<Uint8Array | null> };
    now?: () => number;
  } = {},
): Promise<Rig> {
  const stub = new TelegramStub({ limits: false, ...o.stub });
  await stub.listen();
  const queue = new MemorySendQueue<BotCall>({
    limits: { botRatePerS: 1000, groupRatePerMin: 60_000, chatRatePerS: 1000 },
    retryBaseMs: 10,
    retryMaxMs: 50,
    maxRequeues: 6,
    onError: () => {},
    ...o.queue,
  });
  const deactivated: Array<[number, string]> = [];
  const migrated: Array<[number, number]> = [];
  const boards: BoardDelivery[] = [];
  const client = new TelegramClient({
    token: TOKEN,
    apiRoot: stub.url,
    queue,
    avatars: { concurrency: 2, cacheBytes: 1 << 20, ttlMs: 86_400_000, ...o.avatars },
    timeoutSeconds: 5,
    ...(o.now ? { now: o.now } : {}),
    hooks: {
      onDeactivate: (c, r) => deactivated.push([c, r]),
      onMigrate: (a, b) => migrated.push([a, b]),
      onBoard: (d) => boards.push(d),
    },
  });
  if (o.start !== false) queue.start(client.sender());
  return {
    stub,
    queue,
    client,
    deactivated,
    migrated,
    boards,
    async close() {
      await queue.close(1_000);
      await stub.close();
    },
  };
}

/** Waits for the enqueue and then for the job's end. */
async function result(r: Promise<import('@crowdplay/sendq').EnqueueResult>): Promise<JobResult> {
  const e = await r;
  assert.equal(e.status, 'queued');
  if (e.status !== 'queued') throw new Error('refused');
  return e.result;
}

const photoMessages = (stub: TelegramStub, chat: number): number => stub.messages(chat).filter((m) => m.kind === 'photo').length;

void test('every api call passes the send queue; avatar reads do not', async () => {
  const r = await rig({ start: false });
  try {
    const sent = r.client.api.sendMessage(A, 'hello');
    const hook = r.client.api.setWebhook('https://example.org/hook');
    const me = r.client.api.getMe(); // a method without parameters: grammY binds its payload
    // Nothing reached Telegram: all three wait in the queue.
    await until('three calls in the queue', async () => (await r.queue.depth()).tx === 3);
    assert.equal(r.stub.stats().calls, 0);
    assert.deepEqual(await r.queue.depth(), { tx: 3, board: 0 });
    assert.equal(await r.queue.chatDepth(A), 1);
    assert.equal(await r.queue.chatDepth(BOT_LEVEL_CHAT_ID), 2);
    // Avatar reads are exempt: answered while the queue is stopped.
    const photos = await r.client.api.getUserProfilePhotos(7);
    assert.equal(photos.total_count, 1);
    r.queue.start(r.client.sender());
    const msg = await sent;
    assert.equal(msg.text, 'hello');
    assert.equal(msg.chat.id, A);
    assert.equal(await hook, true);
    assert.equal((await me).is_bot, true);
    assert.equal(r.stub.calls()[0]!.method, 'getUserProfilePhotos');
    assert.deepEqual(
      r.stub
        .calls()
        .map((c) => c.method)
        .sort(),
      ['getMe', 'getUserProfilePhotos', 'sendMessage', 'setWebhook'],
    );
    assert.deepEqual(r.queue.stats().sends.tx.ok, 3);
    const s = r.client.stats();
    assert.deepEqual(s.enqueued, { getMe: 1, sendMessage: 1, setWebhook: 1 });
    assert.deepEqual(s.sent, { getMe: 1, sendMessage: 1, setWebhook: 1 });
  } finally {
    await r.close();
  }
});

void test("sending does not turn on Node's promise hook (an AsyncLocalStorage run would: every await in the process pays)", async () => {
  // Its own process: the test runner turns the hook on in this one.
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--import', 'tsx', new URL('fixtures/promise-hook.ts', import.meta.url).pathname],
    {
      timeout: 30_000,
    },
  );
  const out = JSON.parse(stdout) as { asyncId: number; sent: Record<string, number> };
  assert.deepEqual(out.sent, { sendMessage: 1, getMe: 1, sendPhoto: 1 });
  assert.equal(out.asyncId, 0);
});

void test("a caller's own AbortSignal is no grant: its call is queued like any other", async () => {
  const r = await rig({ start: false });
  try {
    const own = new AbortController();
    const sent = r.client.api.sendMessage(A, 'mine', undefined, own.signal as unknown as Parameters<typeof r.client.api.sendMessage>[3]);
    await until("the call in chat A's queue", async () => (await r.queue.chatDepth(A)) === 1);
    assert.equal(r.stub.stats().calls, 0);
    r.queue.start(r.client.sender());
    assert.equal((await sent).text, 'mine');
    assert.deepEqual(r.client.stats().sent, { sendMessage: 1 });
  } finally {
    await r.close();
  }
});

void test('"message is not modified" is success (board and raw edit)', async () => {
  const r = await rig();
  try {
    const v1 = await result(r.client.enqueueBoard(A, { version: 1, png: png(1), caption: 'board' }));
    assert.equal(v1.status, 'sent', JSON.stringify(v1));
    // The same picture again as version 2: Telegram answers "not modified", the job is sent.
    const v2 = await result(r.client.enqueueBoard(A, { version: 2, png: png(1), caption: 'board' }));
    assert.deepEqual(v2, { status: 'sent', value: { chatId: A, version: 2, messageId: 1, action: 'unchanged' } });
    assert.deepEqual(
      r.stub.calls().map((c) => [c.method, c.status, c.description ?? '']),
      [
        ['sendPhoto', 200, ''],
        ['editMessageMedia', 400, NOT_MODIFIED],
      ],
    );
    const m = await r.client.api.sendMessage(B, 'text');
    assert.equal(await r.client.api.editMessageText(B, m.message_id, 'text'), true);
    assert.equal(r.stub.messages(B)[0]!.edits, 0);
  } finally {
    await r.close();
  }
});

void test('"message to edit not found" reposts once per chat, not once per queued job', async () => {
  const r = await rig();
  try {
    await result(r.client.enqueueBoard(A, { version: 1, png: png(1) }));
    await result(r.client.enqueueBoard(B, { version: 1, png: png(1) }));
    // An admin deletes both boards.
    for (const chat of [A, B]) {
      const res = await fetch(`${r.stub.url}/bot${TOKEN}/deleteMessage?chat_id=${chat}&message_id=1`);
      assert.equal(res.status, 200);
    }
    assert.equal(photoMessages(r.stub, A), 0);
    // Several board jobs per chat are queued at once (as across processes, or with one in flight and one queued).
    await r.queue.close(); // stop the first queue; a fresh one is loaded before it starts
    const queue = new MemorySendQueue<BotCall>({
      limits: { botRatePerS: 1000, groupRatePerMin: 60_000, chatRatePerS: 1000 },
      maxRequeues: 6,
      onError: () => {},
    });
    const client = new TelegramClient({
      token: TOKEN,
      apiRoot: r.stub.url,
      queue,
      boards: r.client.boards,
      avatars: { concurrency: 2, cacheBytes: 0, ttlMs: 1000 },
    });
    const jobs: Array<Promise<JobResult>> = [];
    for (const chat of [A, B])
      for (const v of [2, 3, 4]) {
        const e = await queue.enqueue({
          chatId: chat,
          lane: 'board',
          payload: { kind: 'board', version: v, photo: Buffer.from(png(v)).toString('base64') },
        });
        assert.equal(e.status, 'queued');
        if (e.status === 'queued') jobs.push(e.result);
      }
    queue.start(client.sender());
    const results = await Promise.all(jobs);
    assert.ok(results.every((x) => x.status === 'sent'));
    for (const chat of [A, B]) {
      const calls = r.stub.calls().filter((c) => c.chatId === chat && c.method === 'sendPhoto');
      assert.equal(calls.length, 2, `chat ${chat}: the first post and exactly one repost`);
      assert.equal(photoMessages(r.stub, chat), 1);
      const board = r.stub.board(chat)!;
      assert.equal(board.messageId, 2);
      assert.equal(board.sha256.length, 64);
      assert.equal(
        r.stub.calls().filter((c) => c.chatId === chat && c.description === EDIT_NOT_FOUND).length,
        1,
        'one failed edit per chat',
      );
    }
    // The last version is the one shown.
    const st = await client.boards.get(A);
    assert.equal(st.version, 4);
    assert.equal(st.messageId, 2);
    assert.equal(client.stats().boards.missing, 2);
    assert.equal(client.stats().boards.posted, 2);
    await queue.close();
  } finally {
    await r.stub.close();
  }
});

void test('two senders sharing one board store: one post per chat (the post claim), the other job edits it', async () => {
  const stub = new TelegramStub({ limits: false });
  await stub.listen();
  const boards = new MemoryBoardStore();
  const senders = [0, 1].map(() => {
    const queue = new MemorySendQueue<BotCall>({
      limits: { botRatePerS: 1000, groupRatePerMin: 60_000, chatRatePerS: 1000 },
      retryBaseMs: 20,
      retryMaxMs: 100,
      maxRetries: 10,
      onError: () => {},
    });
    const client = new TelegramClient({
      token: TOKEN,
      apiRoot: stub.url,
      queue,
      boards,
      avatars: { concurrency: 1, cacheBytes: 0, ttlMs: 1000 },
    });
    queue.start(client.sender());
    return { queue, client };
  });
  try {
    stub.inject({ kind: 'slow', delayMs: 150, method: 'sendPhoto', times: Infinity });
    const results = await Promise.all([
      result(senders[0]!.client.enqueueBoard(A, { version: 1, png: png(1) })),
      result(senders[1]!.client.enqueueBoard(A, { version: 2, png: png(2) })),
    ]);
    assert.ok(
      results.every((x) => x.status === 'sent'),
      JSON.stringify(results),
    );
    assert.equal(stub.calls().filter((c) => c.method === 'sendPhoto').length, 1);
    assert.equal(photoMessages(stub, A), 1);
    assert.ok(
      senders.some((x) => x.queue.stats().sends.board.retry > 0),
      'the second job waited for the claim',
    );
  } finally {
    for (const x of senders) await x.queue.close();
    await stub.close();
  }
});

void test('403 (bot kicked) deactivates the chat: its queued jobs are purged, new ones refused, other chats unaffected', async () => {
  const r = await rig({ start: false });
  try {
    r.stub.kick(A);
    const queued = await r.client.enqueueBoard(A, { version: 1, png: png(1) });
    assert.equal(queued.status, 'queued');
    const board = queued.status === 'queued' ? queued.result : undefined;
    const reply = r.client.api.sendMessage(A, 'hi').catch((e: unknown) => e);
    const other = r.client.api.sendMessage(B, 'still here');
    await until('both replies in the queue', async () => (await r.queue.depth()).tx >= 2);
    // The tx lane goes first in chat A: the reply meets the 403, the board behind it is purged.
    r.queue.start(r.client.sender());
    const err = await reply;
    assert.ok(err instanceof GrammyError, `got ${String(err)}`);
    assert.equal(err.error_code, 403);
    assert.equal(err.description, 'Forbidden: bot was kicked from the supergroup chat');
    assert.deepEqual(await board, { status: 'purged' });
    assert.deepEqual(r.deactivated, [[A, 'kicked']]);
    assert.equal(await r.queue.isActive(A), false);
    assert.deepEqual(await r.client.enqueueBoard(A, { version: 2, png: png(2) }), { status: 'refused', reason: 'deactivated' });
    await assert.rejects(r.client.api.sendMessage(A, 'again'), (e: unknown) => isCrowdplayError(e, 'CP_ERR_TELEGRAM_REFUSED'));
    assert.equal((await other).text, 'still here');
    // One call reached Telegram for A: the one that learned the bot was kicked.
    assert.equal(r.stub.calls().filter((c) => c.chatId === A).length, 1);
    // Re-added: accepted again.
    r.stub.readd(A);
    await r.queue.reactivate(A);
    assert.equal((await result(r.client.enqueueBoard(A, { version: 3, png: png(3) }))).status, 'sent');
  } finally {
    await r.close();
  }
});

void test('"chat not found" deactivates too; a group upgraded to a supergroup moves its jobs', async () => {
  const r = await rig();
  try {
    r.stub.forget(B);
    assert.equal((await result(r.client.enqueueBoard(B, { version: 1, png: png(1) }))).status, 'deactivated');
    assert.deepEqual(r.deactivated, [[B, 'chat_not_found']]);
    const group = -4242;
    const superGroup = -1004242;
    r.stub.migrate(group, superGroup);
    const res = await result(r.client.enqueueBoard(group, { version: 1, png: png(1) }));
    assert.deepEqual(res, { status: 'sent', value: { chatId: superGroup, version: 1, messageId: 1, action: 'posted' } });
    assert.deepEqual(r.migrated, [[group, superGroup]]);
    assert.equal(photoMessages(r.stub, superGroup), 1);
    // Later calls for the old id go to the new one.
    const msg = await r.client.api.sendMessage(group, 'moved');
    assert.equal(msg.chat.id, superGroup);
  } finally {
    await r.close();
  }
});

void test('429: a bot-wide pause for retry_after, then the call goes through', async () => {
  const r = await rig();
  try {
    r.stub.inject({ kind: '429', retryAfterS: 1, chatId: A, method: 'sendMessage' });
    const first = r.client.api.sendMessage(A, 'one');
    // Let A's call meet the 429 before B's call is queued: B must then wait for the pause too.
    await until("A's call to meet the 429", () => r.queue.stats().rateLimited > 0);
    const second = r.client.api.sendMessage(B, 'two');
    assert.equal((await first).text, 'one');
    assert.equal((await second).text, 'two');
    const calls = r.stub.calls();
    assert.deepEqual(
      calls.map((c) => [c.method, c.chatId, c.status]).sort(),
      [
        ['sendMessage', A, 200],
        ['sendMessage', A, 429],
        ['sendMessage', B, 200],
      ].sort(),
    );
    assert.equal(calls[0]!.status, 429);
    const t429 = calls[0]!.atMs;
    for (const c of calls.slice(1))
      assert.ok(c.atMs - t429 >= 990, `call for ${c.chatId} ${c.atMs - t429} ms after the 429: inside the pause`);
    const s = r.queue.stats();
    assert.equal(s.rateLimited, 1);
    assert.equal(s.pauseMs, 1000);
  } finally {
    await r.close();
  }
});

void test('a dropped connection after the post was applied: no duplicate board, the lost post is found and edited', async () => {
  const r = await rig();
  try {
    await r.client.api.sendMessage(A, '/start reply'); // message 1: the highest id the sender knows
    r.stub.inject({ kind: 'drop-after-apply', chatId: A, method: 'sendPhoto' });
    const v1 = await result(r.client.enqueueBoard(A, { version: 1, png: png(1), caption: 'v1' }));
    assert.deepEqual(v1, { status: 'sent', value: { chatId: A, version: 1, messageId: 2, action: 'recovered' } });
    assert.equal(photoMessages(r.stub, A), 1);
    assert.equal(r.stub.calls().filter((c) => c.method === 'sendPhoto').length, 1, 'posted once');
    const v2 = await result(r.client.enqueueBoard(A, { version: 2, png: png(2), caption: 'v2' }));
    assert.deepEqual(v2, { status: 'sent', value: { chatId: A, version: 2, messageId: 2, action: 'edited' } });
    assert.equal(photoMessages(r.stub, A), 1);
    assert.equal(r.stub.board(A)!.caption, 'v2');
    assert.equal(r.client.stats().boards.ambiguousPosts, 1);

    // With people talking in between: the lost post is the first bot message after the last id known.
    await r.client.api.sendMessage(B, 'known'); // 1
    r.stub.inject({ kind: 'drop-after-apply', chatId: B, method: 'sendPhoto' });
    r.stub.userMessage(B); // 2
    const pending = r.client.enqueueBoard(B, { version: 1, png: png(1) }); // the lost post becomes 3
    const res = await result(pending);
    assert.equal(res.status, 'sent');
    assert.equal(photoMessages(r.stub, B), 1);
    assert.equal(r.stub.board(B)!.messageId, (res as { value: BoardDelivery }).value.messageId);
  } finally {
    await r.close();
  }
});

void test('a dropped connection before the post was applied: probed, not found, posted once', async () => {
  const r = await rig();
  try {
    await r.client.api.sendMessage(A, 'reply'); // 1
    r.stub.inject({ kind: 'drop-before-apply', chatId: A, method: 'sendPhoto' });
    const v1 = await result(r.client.enqueueBoard(A, { version: 1, png: png(1) }));
    assert.deepEqual(v1, { status: 'sent', value: { chatId: A, version: 1, messageId: 2, action: 'posted' } });
    assert.deepEqual(
      r.stub.calls().map((c) => [c.method, c.outcome]),
      [
        ['sendMessage', 'ok'],
        ['sendPhoto', 'dropped'],
        ['editMessageMedia', 'error'], // probe of id 2: "message to edit not found"
        ['sendPhoto', 'ok'],
      ],
    );
    assert.equal(photoMessages(r.stub, A), 1);
  } finally {
    await r.close();
  }
});

void test('5xx: an edit is retried; a sendMessage that may have been applied is not repeated', async () => {
  const r = await rig();
  try {
    await result(r.client.enqueueBoard(A, { version: 1, png: png(1) }));
    r.stub.inject({ kind: 'error', code: 500, description: 'Internal Server Error', method: 'editMessageMedia', chatId: A });
    const v2 = await result(r.client.enqueueBoard(A, { version: 2, png: png(2) }));
    assert.deepEqual(v2, { status: 'sent', value: { chatId: A, version: 2, messageId: 1, action: 'edited' } });
    r.stub.inject({ kind: 'http', status: 502, body: '<html>Bad Gateway</html>', method: 'sendMessage' });
    await assert.rejects(
      r.client.api.sendMessage(A, 'once'),
      (e: unknown) => isCrowdplayError(e, 'CP_ERR_TELEGRAM_FAILED') && /ambiguous/.test(e.message),
    );
    assert.equal(r.stub.calls().filter((c) => c.method === 'sendMessage').length, 1, 'not repeated');
    // A connection that was never made is retried even for a send, past the queue's retries, until its deadline.
    const dead = new TelegramStub();
    const deadUrl = await dead.listen();
    await dead.close();
    const q = new MemorySendQueue<BotCall>({
      limits: { botRatePerS: 1000, groupRatePerMin: 60_000, chatRatePerS: 1000 },
      retryBaseMs: 5,
      retryMaxMs: 5,
      maxRetries: 2,
      onError: () => {},
    });
    const c = new TelegramClient({
      token: TOKEN,
      apiRoot: deadUrl,
      queue: q,
      queueMaxRetries: 2,
      txUnreachedDeadlineMs: 100,
      avatars: { concurrency: 1, cacheBytes: 0, ttlMs: 1000 },
    });
    q.start(c.sender());
    await assert.rejects(
      c.api.sendMessage(A, 'x'),
      (e: unknown) => isCrowdplayError(e, 'CP_ERR_TELEGRAM_FAILED') && /never reached Telegram in 100 ms/.test(e.message),
    );
    assert.ok(c.stats().sent.sendMessage! > 3, `tried past the queue's 2 retries: ${c.stats().sent.sendMessage} calls`);
    await q.close();
  } finally {
    await r.close();
  }
});

void test('avatars: collapsed per user, capped in concurrency, cached by bytes with a TTL', async () => {
  let now = 1_000_000;
  const r = await rig({ avatars: { concurrency: 2, cacheBytes: 3 * 2_048, ttlMs: 60_000 }, now: () => now });
  try {
    const c = r.client;
    const userIds = [1, 2, 3, 4, 5];
    // 20 concurrent requests for one user: one read.
    const same = await Promise.all(Array.from({ length: 20 }, () => c.avatars.get(1)));
    assert.ok(same.every((b) => b !== null && b.length === 2_048));
    assert.deepEqual(r.stub.stats().byMethod, { getUserProfilePhotos: 1, getFile: 1, file: 1 });
    assert.equal(c.avatars.stats().collapsed, 19);
    // Slow Telegram: 5 users at once never have more than 2 avatar requests open.
    r.stub.inject({ kind: 'slow', delayMs: 40, method: 'getUserProfilePhotos', times: Infinity });
    await Promise.all(userIds.slice(1).map((u) => c.avatars.get(u)));
    const s = r.stub.stats();
    assert.ok((s.peakInFlight.getUserProfilePhotos ?? 0) <= 2, `peak ${s.peakInFlight.getUserProfilePhotos}`);
    assert.equal(c.avatars.stats().queued, 2, 'users 4 and 5 waited for a read slot');
    assert.equal(c.avatars.stats().waiting, 0);
    assert.ok(c.avatars.stats().peakInFlight <= 2);
    // The byte budget holds 3 avatars of 2,048 bytes: user 1 (least recently used) was evicted.
    assert.equal(c.avatars.stats().cacheEntries, 3);
    assert.equal(c.avatars.stats().cacheBytes, 3 * 2_048);
    r.stub.clearFaults();
    const before = r.stub.stats().byMethod.getUserProfilePhotos;
    await c.avatars.get(5);
    assert.equal(r.stub.stats().byMethod.getUserProfilePhotos, before, 'user 5: from the cache');
    await c.avatars.get(1);
    assert.equal(r.stub.stats().byMethod.getUserProfilePhotos, before! + 1, 'user 1: read again');
    // After the TTL, read again.
    now += 60_001;
    await c.avatars.get(1);
    assert.equal(r.stub.stats().byMethod.getUserProfilePhotos, before! + 2);
    // No queue involvement at all.
    assert.deepEqual(r.queue.stats().sends.tx.ok, 0);
  } finally {
    await r.close();
  }
});

void test('avatars: reads waiting for a slot have made no Bot API call, and start oldest first as slots free', async () => {
  // A fake Bot API whose getUserProfilePhotos answers only when the test says so.
  const started: number[] = [];
  const answer = new Map<number, () => void>();
  const startedRead = new Map<number, Deferred>();
  /** Resolves when the read of `userId` has started (its getUserProfilePhotos call). */
  const readStarted = (userId: number): Promise<void> => {
    if (!startedRead.has(userId)) startedRead.set(userId, deferred());
    return within(startedRead.get(userId)!.promise, `the read of ${userId}`);
  };
  const microtasksRun = (): Promise<void> => new Promise((res) => setImmediate(res));
  const api: AvatarApi = {
    getUserProfilePhotos: (userId) =>
      new Promise((res) => {
        started.push(userId);
        answer.set(userId, () => res({ total_count: 1, photos: [[{ file_id: `f${userId}`, width: 160, height: 160 }]] }));
        if (!startedRead.has(userId)) startedRead.set(userId, deferred());
        startedRead.get(userId)!.resolve();
      }),
    getFile: (fileId) => Promise.resolve({ file_id: fileId, file_path: `p/${fileId}` }),
  };
  const gate = new Gate(2);
  const avatars = new Avatars({ api, gate, cacheBytes: 1 << 20, ttlMs: 60_000, download: () => Promise.resolve(new Uint8Array(10)) });
  const all = Array.from({ length: 50 }, (_, i) => avatars.get(100 + i));
  await new Promise((res) => setImmediate(res));
  assert.deepEqual(started, [100, 101], 'two reads started; the 48 others are entries in the FIFO, not calls waiting in the gate');
  assert.equal(avatars.stats().waiting, 48);
  assert.equal(avatars.pending, 50);
  // Answer in the order 101, 100: the freed slots go to 102, then 103 (oldest first), one per read finished.
  // The hand-over is promise-driven: once the next read started and the microtasks ran, nothing else will start.
  answer.get(101)!();
  await readStarted(102);
  await microtasksRun();
  assert.deepEqual(started, [100, 101, 102]);
  answer.get(100)!();
  await readStarted(103);
  await microtasksRun();
  assert.deepEqual(started, [100, 101, 102, 103]);
  for (let i = 102; i < 150; i++) {
    await readStarted(i);
    answer.get(i)!();
  }
  const bytes = await Promise.all(all);
  assert.ok(bytes.every((b) => b?.length === 10));
  assert.deepEqual(
    started,
    Array.from({ length: 50 }, (_, i) => 100 + i),
  );
  assert.deepEqual(
    { queued: avatars.stats().queued, waiting: avatars.stats().waiting, gateWaits: avatars.stats().gateWaits, pending: avatars.pending },
    { queued: 48, waiting: 0, gateWaits: 0, pending: 0 },
  );
  // Collapsed while waiting: a second request for a queued user joins its read.
  const gate1 = new Avatars({ api, gate: new Gate(1), cacheBytes: 0, ttlMs: 1, download: () => Promise.resolve(new Uint8Array(3)) });
  const first = gate1.get(500);
  const queuedTwice = [gate1.get(501), gate1.get(501)];
  await new Promise((res) => setImmediate(res));
  assert.equal(gate1.stats().collapsed, 1);
  assert.equal(gate1.stats().waiting, 1);
  answer.get(500)!();
  await first;
  await readStarted(501);
  answer.get(501)!();
  const [x, y] = await Promise.all(queuedTwice);
  assert.equal(x, y);
});

void test('avatars: a read that finished is not kept alive by the FIFO (its bytes are collectable once the caller drops them)', async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const refs: Array<WeakRef<Uint8Array>> = [];
  const api: AvatarApi = {
    getUserProfilePhotos: () => Promise.resolve({ total_count: 1, photos: [[{ file_id: 'f', width: 160, height: 160 }]] }),
    getFile: (fileId) => Promise.resolve({ file_id: fileId, file_path: `p/${fileId}` }),
  };
  const download = (): Promise<Uint8Array> => {
    const bytes = new Uint8Array(100_000);
    refs.push(new WeakRef(bytes));
    return Promise.resolve(bytes);
  };
  const avatars = new Avatars({ api, gate: new Gate(1), cacheBytes: 0, ttlMs: 1, download });
  let got = 0;
  await Promise.all(Array.from({ length: 20 }, (_, i) => avatars.get(1_000 + i).then((b) => void (got += b ? 1 : 0))));
  assert.equal(got, 20);
  assert.equal(avatars.stats().queued, 19, '19 reads waited in the FIFO');
  await new Promise((res) => setImmediate(res));
  gc();
  await new Promise((res) => setImmediate(res));
  assert.equal(refs.filter((r) => r.deref() !== undefined).length, 0, 'no finished read is held');
});

/** Avatar options of the shrink tests: 2 slots, a cache that holds everything. */
const SHRINK_AVATARS = { concurrency: 2, cacheBytes: 1 << 20, ttlMs: 60_000 } as const;

void test('avatars: a shrink is applied once per read and its result is what is cached; a shrink that throws is a failed read', async () => {
  let shrinks = 0;
  const r = await rig({
    avatars: {
      ...SHRINK_AVATARS,
      shrink: (b) => {
        shrinks++;
        if (shrinks === 3) return Promise.reject(new Error('not an image'));
        return Promise.resolve(b.subarray(0, 100));
      },
    },
  });
  try {
    const c = r.client;
    const [a, b] = await Promise.all([c.avatars.get(1), c.avatars.get(1)]);
    assert.equal(a?.length, 100);
    assert.equal(b, a, 'collapsed: one read, one shrink');
    assert.equal((await c.avatars.get(1))?.length, 100, 'the cache holds the shrunk bytes');
    assert.equal(c.avatars.stats().cacheBytes, 100);
    assert.equal((await c.avatars.get(2))?.length, 100);
    assert.equal(shrinks, 2);
    assert.equal(await c.avatars.get(3), null, 'the third shrink threw');
    assert.equal(c.avatars.stats().failures, 1);
  } finally {
    await r.close();
  }
});

void test('avatars: a user without a photo is cached as null', async () => {
  const r = await rig({ stub: { limits: false, avatarFor: (u) => (u === 9 ? null : new Uint8Array(100)) } });
  try {
    assert.equal(await r.client.avatars.get(9), null);
    assert.equal(await r.client.avatars.get(9), null);
    assert.equal(r.stub.stats().byMethod.getUserProfilePhotos, 1);
    assert.equal(r.stub.stats().byMethod.getFile, undefined);
    assert.equal((await r.client.avatars.get(8))?.length, 100);
  } finally {
    await r.close();
  }
});

void test("the queue at Telegram's rates never meets the stub's ceilings (30/s bot, 1/s chat)", async () => {
  // 50 ms of tolerance for arrival jitter (two cores shared with other suites); the group ceiling is
  // covered by the stub's own test and the queue's suite (it needs a minute of real time).
  const stub = new TelegramStub({ limits: { ...TELEGRAM_LIMITS, toleranceMs: 50 } });
  await stub.listen();
  const queue = new MemorySendQueue<BotCall>({ limits: { botRatePerS: 30, groupRatePerMin: 20, chatRatePerS: 1 }, onError: () => {} });
  const client = new TelegramClient({ token: TOKEN, apiRoot: stub.url, queue, avatars: { concurrency: 1, cacheBytes: 0, ttlMs: 1000 } });
  queue.start(client.sender());
  try {
    // One each into 40 private chats (over 30/s), two into one chat (over 1/s).
    const calls: Array<Promise<unknown>> = [];
    for (let i = 0; i < 40; i++) calls.push(client.api.sendMessage(1_000 + i, `p${i}`));
    for (let i = 0; i < 2; i++) calls.push(client.api.sendMessage(2_000, `c${i}`));
    await Promise.all(calls);
    const s = stub.stats();
    assert.equal(s.rejected429, 0);
    assert.equal(s.ok, 42);
    assert.ok(queue.stats().bucketWaits.bot > 0, 'the bucket held calls back');
    const two = stub.calls().filter((c) => c.chatId === 2_000);
    assert.ok(two[1]!.atMs - two[0]!.atMs >= 950, 'one chat: a second apart');
  } finally {
    await queue.close();
    await stub.close();
  }
});

void test('metrics - running totals exported as counters, current avatar values as a gauge', async () => {
  const { Metrics } = await import('@crowdplay/telemetry');
  const r = await rig();
  const metrics = new Metrics({ service: 'telegram-test' });
  try {
    r.client.exportMetrics(metrics);
    await result(r.client.enqueueBoard(A, { version: 1, png: png(1) }));
    await r.client.avatars.get(5);
    const text = await metrics.prometheusText();
    assert.match(text, /^# TYPE crowdplay_telegram_boards_total counter$/m);
    assert.match(text, /crowdplay_telegram_boards_total\{action="posted"[^}]*\} 1\n/);
    assert.match(text, /^# TYPE crowdplay_telegram_avatar_total counter$/m);
    assert.match(text, /crowdplay_telegram_avatar_total\{stat="reads"[^}]*\} 1\n/);
    assert.match(text, /^# TYPE crowdplay_telegram_avatar gauge$/m);
    assert.match(text, /crowdplay_telegram_avatar\{stat="cacheEntries"[^}]*\} 1\n/);
    assert.doesNotMatch(text, /crowdplay_telegram_avatar\{stat="reads"/, 'a running total is no gauge series');
    assert.doesNotMatch(text, /crowdplay_telegram_avatar_total\{stat="cacheEntries"/, 'a current value is no counter series');
  } finally {
    await metrics.close();
    await r.close();
  }
});

void test('avatars: a download keeps its slot until its shrink answered: never more shrinks pending than the cap', async () => {
  let pending = 0;
  let peak = 0;
  const release: Array<() => void> = [];
  let answerAtOnce = false;
  const r = await rig({
    avatars: {
      ...SHRINK_AVATARS,
      // A render thread that answers only when the test lets it.
      shrink: (b) => {
        pending++;
        peak = Math.max(peak, pending);
        return new Promise((resolve) => {
          const answer = (): void => {
            pending--;
            resolve(b.subarray(0, 10));
          };
          if (answerAtOnce) queueMicrotask(answer);
          else release.push(answer);
        });
      },
    },
  });
  try {
    const c = r.client;
    const all = Promise.all([1, 2, 3, 4, 5, 6].map((u) => c.avatars.get(u)));
    // Every read gets as far as it can while no shrink answers: two wait for a shrink, four for a slot.
    await until('two shrinks and four reads waiting for a slot', () => pending === 2 && c.avatars.stats().waiting === 4);
    assert.equal(pending, 2, 'two photos wait for a shrink, the other four for a slot');
    assert.equal(r.stub.stats().byMethod.file, 2, 'no photo is downloaded while both slots wait for their shrinks');
    // From now on every shrink is answered as it arrives, and the two waiting ones at once.
    answerAtOnce = true;
    for (const answer of release.splice(0)) answer();
    const got = await within(all, 'every read');
    assert.ok(got.every((b) => b?.length === 10));
    assert.equal(peak, 2);
    assert.equal(r.stub.stats().byMethod.file, 6);
  } finally {
    await r.close();
  }
});

/**
 * Moves `clock` on in 250 ms steps, each once no call is in flight (every call made has its outcome), until
 * `done()` or `untilMs`: the queue's backoffs and deadlines run on it, the calls in real time.
 */
async function runClock(
  clock: ManualClock,
  r: { queue: MemorySendQueue<BotCall>; client: TelegramClient },
  done: () => boolean,
  what: string,
  untilMs = Infinity,
): Promise<void> {
  const calls = (): number => Object.values(r.client.stats().sent).reduce((a, b) => a + b, 0);
  const outcomes = (): number => Object.values(r.queue.stats().sends.tx).reduce((a, b) => a + b, 0);
  await until(
    what,
    () => {
      if (done() || clock.now() >= untilMs) return true;
      if (calls() === outcomes()) clock.advance(Math.min(250, untilMs - clock.now()));
      return false;
    },
    { intervalMs: 5, timeoutMs: 30_000 },
  );
}

void test('a command reply queued during a minute of refused connections is delivered once Telegram answers; past the deadline it is given up', async () => {
  const clock = new ManualClock();
  const stub = new TelegramStub({ limits: false, now: () => clock.now() });
  const url = await stub.listen();
  const port = Number(new URL(url).port);
  await stub.close(); // Telegram unreachable: every connection refused
  // The queue's own retries (3, backoff 1, 2, 4 s) on the same fake clock as the client.
  const queue = new MemorySendQueue<BotCall>({
    limits: { botRatePerS: 1000, groupRatePerMin: 60_000, chatRatePerS: 1000 },
    clock,
    onError: () => {},
  });
  const client = new TelegramClient({
    token: TOKEN,
    apiRoot: url,
    queue,
    txUnreachedDeadlineMs: 300_000,
    resultTimeoutMs: 400_000, // the caller waits past the outage (its own deadline: below)
    now: () => clock.now(),
    avatars: { concurrency: 1, cacheBytes: 0, ttlMs: 1000 },
  });
  queue.start(client.sender());
  try {
    let settled = false;
    const reply = client.api.sendMessage(A, 'welcome').finally(() => (settled = true));
    const t0 = clock.now();
    await runClock(clock, { queue, client }, () => settled, 'the outage', t0 + 60_000);
    assert.equal(settled, false, 'still trying after a minute');
    const tries = client.stats().sent.sendMessage!;
    assert.ok(tries > 4, `tried past the queue's 3 retries: ${tries} calls`);
    // Telegram answers again.
    await stub.listen(port);
    const back = clock.now();
    await runClock(clock, { queue, client }, () => settled, 'the reply');
    const msg = await reply;
    assert.equal(msg.text, 'welcome');
    assert.deepEqual(
      stub.messages(A).map((m) => m.text),
      ['welcome'],
      'delivered once',
    );
    assert.ok(clock.now() - back <= 4_000, `delivered ${clock.now() - back} ms after Telegram answered again`);

    // Past the deadline a reply that never reached Telegram is given up (a port nothing listens on, so no
    // kept-alive connection of the first part is reused).
    const dead = new TelegramStub();
    const deadUrl = await dead.listen();
    await dead.close();
    const q2 = new MemorySendQueue<BotCall>({
      limits: { botRatePerS: 1000, groupRatePerMin: 60_000, chatRatePerS: 1000 },
      clock,
      onError: () => {},
    });
    const c2 = new TelegramClient({
      token: TOKEN,
      apiRoot: deadUrl,
      queue: q2,
      txUnreachedDeadlineMs: 300_000,
      resultTimeoutMs: 400_000,
      now: () => clock.now(),
      avatars: { concurrency: 1, cacheBytes: 0, ttlMs: 1000 },
    });
    q2.start(c2.sender());
    let failed = false;
    const late = c2.api.sendMessage(A, 'too late').catch((e: unknown) => {
      failed = true;
      return e;
    });
    const lateAt = clock.now();
    await runClock(clock, { queue: q2, client: c2 }, () => failed, 'the deadline');
    const err = await late;
    assert.ok(isCrowdplayError(err, 'CP_ERR_TELEGRAM_FAILED') && /never reached Telegram in 300000 ms/.test(err.message), String(err));
    assert.ok(clock.now() - lateAt >= 300_000, 'given up at the deadline, not before');
    assert.ok(c2.stats().sent.sendMessage! > 20, `tried all along: ${c2.stats().sent.sendMessage} calls`);
    await q2.close(1_000);

    // A reply its caller waits for only 90 s is not sent after that, even within TELEGRAM_TX_UNREACHED_DEADLINE_MS.
    const q3 = new MemorySendQueue<BotCall>({
      limits: { botRatePerS: 1000, groupRatePerMin: 60_000, chatRatePerS: 1000 },
      clock,
      onError: () => {},
    });
    const c3 = new TelegramClient({
      token: TOKEN,
      apiRoot: deadUrl,
      queue: q3,
      txUnreachedDeadlineMs: 300_000,
      resultTimeoutMs: 90_000,
      now: () => clock.now(),
      avatars: { concurrency: 1, cacheBytes: 0, ttlMs: 1000 },
    });
    q3.start(c3.sender());
    let ended = false;
    const short = c3.api.sendMessage(A, 'short wait').catch((e: unknown) => {
      ended = true;
      return e;
    });
    const shortAt = clock.now();
    await runClock(clock, { queue: q3, client: c3 }, () => ended, 'the caller deadline', shortAt + 200_000);
    assert.ok(ended, 'given up within its own deadline');
    const e3 = await short;
    assert.ok(isCrowdplayError(e3, 'CP_ERR_TELEGRAM_FAILED') && /deadline/.test(e3.message), String(e3));
    assert.ok(clock.now() - shortAt <= 95_000, `given up ${clock.now() - shortAt} ms after it was queued`);
    await q3.close(1_000);
  } finally {
    await queue.close(1_000);
    await stub.close();
  }
});

void test('an ambiguous first post in a supergroup with many messages in between is found, not posted twice', async () => {
  const r = await rig();
  try {
    await r.client.api.sendMessage(A, '/start reply'); // 1: the highest id the sender knows
    for (let i = 0; i < 5; i++) r.stub.userMessage(A); // 2…6: people talking, unseen by the bot (privacy mode)
    r.stub.inject({ kind: 'drop-after-apply', chatId: A, method: 'sendPhoto' }); // lands as 7, the answer is lost
    const v1 = await result(r.client.enqueueBoard(A, { version: 1, png: png(1) }));
    assert.deepEqual(v1, { status: 'sent', value: { chatId: A, version: 1, messageId: 7, action: 'recovered' } });
    assert.equal(photoMessages(r.stub, A), 1);
    assert.equal(r.stub.calls().filter((c) => c.method === 'sendPhoto').length, 1, 'posted once');
  } finally {
    await r.close();
  }
});

void test("an ambiguous first post in a basic group whose next id went to another chat: one photo, the other chat's message untouched", async () => {
  const r = await rig({ stub: { limits: false, messageIds: 'telegram' } });
  const G = -4001; // a basic group: its ids are the bot's, shared with private chats and other basic groups
  const X = 555_001; // a private chat
  try {
    await r.client.api.sendMessage(G, '/start reply'); // 1
    r.stub.userMessage(X, 'elsewhere'); // 2: another chat's message, which the bot has not seen yet
    r.stub.inject({ kind: 'drop-after-apply', chatId: G, method: 'sendPhoto' }); // lands as 3, the answer is lost
    const v1 = await result(r.client.enqueueBoard(G, { version: 1, png: png(1) }));
    assert.equal(v1.status, 'sent', JSON.stringify(v1));
    assert.equal(photoMessages(r.stub, G), 1, 'exactly one photo in the group');
    assert.equal(r.stub.board(G)!.messageId, (v1 as { value: BoardDelivery }).value.messageId);
    assert.deepEqual(
      r.stub.messages(X).map((m) => [m.message_id, m.text, m.edits]),
      [[2, 'elsewhere', 0]],
    );
    assert.equal(r.client.stats().boards.reconciled, 1, 'the lost post was found and deleted');
    // The next board edits the one board.
    const v2 = await result(r.client.enqueueBoard(G, { version: 2, png: png(2) }));
    assert.equal((v2 as { value: BoardDelivery }).value.action, 'edited');
    assert.equal(photoMessages(r.stub, G), 1);

    // A post that did not land (dropped before): posted once, nothing deleted.
    const G2 = -4002;
    await r.client.noteMessageId(X, 2); // the bot saw the other chat's message by now
    r.stub.inject({ kind: 'drop-before-apply', chatId: G2, method: 'sendPhoto' });
    const w1 = await result(r.client.enqueueBoard(G2, { version: 1, png: png(3) }));
    assert.equal((w1 as { value: BoardDelivery }).value.action, 'posted');
    assert.equal(photoMessages(r.stub, G2), 1);
    assert.equal(r.client.stats().boards.reconciled, 1);
  } finally {
    await r.close();
  }
});

void test("an edit's answer does not bound a lost post in the bot-wide numbering (its id is the edited message's, not a new one)", async () => {
  const r = await rig({ stub: { limits: false, messageIds: 'telegram' } });
  const G = -4101;
  const X = 555_101;
  try {
    await r.client.api.sendMessage(X, 'reply'); // 1, in X
    await r.client.api.sendMessage(G, '/start reply'); // 2, in G
    // A board post in G that landed as 3 while its answer was lost (made here without the client) …
    const lost = await fetch(`${r.stub.url}/bot${TOKEN}/sendPhoto`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ chat_id: G, photo: 'https://example.org/board.png' }),
    });
    assert.equal(((await lost.json()) as { result: { message_id: number } }).result.message_id, 3);
    await r.client.boards.patch(G, { unconfirmed: { afterId: 2, next: 3, version: 1, shared: { failedAtMs: Date.now() - 1_000 } } });
    // … then an edit in X, after the failure: it answers with message 1.
    await r.client.api.editMessageText(X, 1, 'edited');
    const v1 = await result(r.client.enqueueBoard(G, { version: 1, png: png(1) }));
    assert.equal(v1.status, 'sent', JSON.stringify(v1));
    assert.equal(photoMessages(r.stub, G), 1, 'one board: the lost post was looked for above the edit, not below it');
  } finally {
    await r.close();
  }
});
