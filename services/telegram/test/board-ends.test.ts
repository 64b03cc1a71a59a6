/**
 * Board ends across processes: the render worker and the gateway holding the chats are apart (the cluster), and
 * what became of each board travels over Redis (board-renderer RedisBoardEnds). Against the Bot API stub on one
 * fake clock, with the in-process render and send queues standing in for the BullMQ ones; the scheduler's confirm
 * timeout is off, so only a heard end can hand a board on again.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { InProcessBus, encodeJson, subjects } from '@crowdplay/bus';
import type { Board, RenderPool } from '@crowdplay/board';
import { MemoryRenderQueue, RedisBoardEnds, publishingHooks, startRenderWorker, type BoardEnd } from '@crowdplay/board-renderer';
import { ManualClock, MemorySendQueue, renderQueueKeys } from '@crowdplay/sendq';
import { TelegramClient, telegramChannelId, type BotCall } from '@crowdplay/telegram';
import { createTelemetry } from '@crowdplay/telemetry';
import { until } from '@crowdplay/testing';
import { TelegramStub } from '@crowdplay/telegram/testing';
import { ChatBoards } from '../src/chat-boards.ts';
import { TITLE, fakePng, shaOf, stateOf, type Players } from './board-fixtures.ts';
import { RefreshScheduler } from '../src/scheduler.ts';

const telemetry = createTelemetry({ service: 'board-ends-test', level: 'silent', refusalLogIntervalMs: 60_000 });
const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const TOKEN = '4243:ends-test';
const TICK_MS = 250;
let seq = 0;
const uniquePrefix = (): string => `t_ends_${process.pid}_${Date.now().toString(36)}_${seq++}`;

/** The worker side (render worker, send queue, client) and the gateway side (ChatBoards, scheduler), joined only by Redis. */
async function rig() {
  const prefix = uniquePrefix();
  const clock = new ManualClock();
  const now = (): number => clock.now();
  const stub = new TelegramStub({ limits: false, now });
  const url = await stub.listen();
  const queue = new MemorySendQueue<BotCall>({
    limits: { botRatePerS: 1000, groupRatePerMin: 60_000, chatRatePerS: 1000 },
    clock,
    maxRequeues: 2,
    maxRetries: 2,
    onError: () => {},
  });
  // As in the cluster: the queue retries a board that failed (no hand-back to a scheduler it cannot see).
  const client = new TelegramClient({ token: TOKEN, apiRoot: url, queue, now, avatars: { concurrency: 1, cacheBytes: 0, ttlMs: 1000 } });
  queue.start(client.sender());
  const workerEnds = await RedisBoardEnds.open({ redisUrl: REDIS_URL, prefix, metrics: telemetry.metrics, onError: () => {} });
  const gatewayEnds = await RedisBoardEnds.open({ redisUrl: REDIS_URL, prefix, metrics: telemetry.metrics, onError: () => {} });
  let rendering = 0;
  const drawn: number[] = [];
  const pool = {
    admission: () => 'queued',
    render: async (chatId: string, version: number, board: Board) => {
      rendering++;
      await Promise.resolve();
      rendering--;
      drawn.push(Number(chatId));
      return { status: 'rendered', version, png: fakePng(board) };
    },
    stats: () => ({ queued: 0 }),
  } as unknown as RenderPool;
  const renders = new MemoryRenderQueue();
  // Ends published and not heard yet, and boards on the send queue not ended yet.
  let published = 0;
  let heard = 0;
  let unsettled = 0;
  const hooks = publishingHooks({
    kind: 'redis',
    publish: (end) => {
      published++;
      workerEnds.publish(end);
    },
    subscribe: () => {},
    close: () => Promise.resolve(),
  });
  startRenderWorker(renders, pool, client, {
    onQueued: (chatId, version, r) => {
      if (r.status === 'queued') {
        unsettled++;
        void r.result.finally(() => unsettled--);
      }
      hooks.onQueued(chatId, version, r);
    },
    onFailed: hooks.onFailed,
  });
  const scheduler = new RefreshScheduler({
    renderBudgetMsPerS: 1000,
    sendBudgetPerS: 100,
    pacing: { groupRatePerMin: 20, groupBurst: 1, chatRatePerS: 1 },
    costMs: () => 5,
  });
  const bus = new InProcessBus();
  const subj = subjects('ends-test');
  const boards = new ChatBoards({ bus, subjects: subj, client, renders, scheduler, telemetry, now });
  const heardEnds: BoardEnd[] = [];
  gatewayEnds.subscribe((end) => {
    heard++;
    heardEnds.push(end);
    boards.heard(end);
  });
  await gatewayEnds.ready();
  const evs = new Map<number, number>();
  return {
    prefix,
    clock,
    stub,
    port: Number(new URL(url).port),
    boards,
    scheduler,
    drawn,
    heardEnds,
    publish(chatId: number, players: Players): void {
      const ev = (evs.get(chatId) ?? 0) + 1;
      evs.set(chatId, ev);
      bus.publish(
        subj.channelOut(telegramChannelId(chatId)),
        encodeJson({ t: 'update', channel: 'x', ev, at: 0, actions: [], tally: {}, game: stateOf(players) }),
      );
    },
    /** One scheduler tick after TICK_MS of fake time, then until what it handed on has ended and its ends were heard. */
    async tick(): Promise<void> {
      clock.advance(TICK_MS);
      await new Promise<void>((res) => setImmediate(res));
      await boards.tick();
      await until(
        'the boards handed on to end, and their ends to be heard',
        () => {
          if (rendering === 0 && renders.stats().queued === 0 && unsettled === 0 && heard === published) return true;
          clock.advance(1);
          return false;
        },
        { intervalMs: 1, timeoutMs: 10_000 },
      );
    },
    async close(): Promise<void> {
      boards.close();
      await renders.close();
      await queue.close(1_000);
      await stub.close();
      await workerEnds.close();
      await gatewayEnds.close();
    },
  };
}

void test('board ends - a board rendered and sent elsewhere that failed is handed on again by the gateway holding the chat', async () => {
  const r = await rig();
  const S = -1001000000031;
  let latest: Players = { 'tg:7': ['g....'] };
  const right = (): boolean => r.stub.board(S)?.sha256 === shaOf(latest);
  try {
    r.boards.watch(S, TITLE);
    r.publish(S, latest);
    await r.tick();
    assert.ok(right(), 'the first board is posted');
    assert.ok(
      r.heardEnds.some((e) => e.chatId === S && e.outcome === 'sent'),
      'its end reached the gateway over Redis',
    );

    // Telegram answers 502 to every call while the chat changes once: that board's retries run out.
    r.stub.inject({ kind: 'error', code: 502, description: 'Bad Gateway', times: Infinity });
    latest = { 'tg:7': ['g....', 'gy...'] };
    r.publish(S, latest);
    for (let i = 0; i < 40 && !r.heardEnds.some((e) => e.outcome === 'failed'); i++) await r.tick();
    assert.ok(
      r.heardEnds.some((e) => e.chatId === S && e.outcome === 'failed'),
      'the failed board was heard',
    );
    assert.ok(!right(), 'nothing got through');

    // Telegram answers again; the chat does not change any more: only the heard end makes it due again.
    r.stub.clearFaults();
    const backAt = r.clock.now();
    while (!right() && r.clock.now() - backAt < 30_000) await r.tick();
    assert.ok(right(), 'the chat shows its latest state');
    assert.ok(r.stub.board(S)!.atMs - backAt <= r.scheduler.intervalMs + TICK_MS, 'within one interval of Telegram answering');
    assert.equal(r.stub.board(S)!.posts, 1, 'posted once');
  } finally {
    await r.close();
  }
});

void test('board ends - a malformed message on the channel is counted and applied to nothing', async (t) => {
  const prefix = uniquePrefix();
  const ends = await RedisBoardEnds.open({ redisUrl: REDIS_URL, prefix, onError: () => {} });
  const raw = new Redis(REDIS_URL);
  t.after(async () => {
    await ends.close();
    raw.disconnect();
  });
  const got: BoardEnd[] = [];
  ends.subscribe((e) => got.push(e));
  await ends.ready();
  const channel = renderQueueKeys(prefix).ends;
  for (const bad of ['nope', '[1,2]', '[0,1,"sent"]', '[1.5,1,"sent"]', '[-5,1,"exploded"]', '{"chatId":-5}'])
    await raw.publish(channel, bad);
  ends.publish({ chatId: -5, version: 3, outcome: 'sent' });
  await until('the good end heard', () => got.length > 0, { timeoutMs: 5_000 });
  assert.deepEqual(got, [{ chatId: -5, version: 3, outcome: 'sent' }], 'only the well-formed end is applied');
});
