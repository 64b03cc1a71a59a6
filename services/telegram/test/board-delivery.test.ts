/**
 * Boards end to end against the Bot API stub (@crowdplay/telegram/testing), on one fake clock: the live boards,
 * the scheduler, the in-process render queue (a fake render pool: a board's "PNG" is its content), the
 * production render worker (start.ts `startRenderWorker`), the send queue and the Bot API client.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessBus, encodeJson, subjects } from '@crowdplay/bus';
import type { Board, RenderPool } from '@crowdplay/board';
import { LocalBoardEnds, MemoryRenderQueue, publishingHooks, startRenderWorker } from '@crowdplay/board-renderer';
import { ManualClock, MemorySendQueue } from '@crowdplay/sendq';
import { TelegramClient, telegramChannelId, type BotCall } from '@crowdplay/telegram';
import { createTelemetry } from '@crowdplay/telemetry';
import { until } from '@crowdplay/testing';
import { TelegramStub } from '@crowdplay/telegram/testing';
import { ChatBoards } from '../src/chat-boards.ts';
import { TITLE, fakePng, shaOf, stateOf, type Players } from './board-fixtures.ts';
import { RefreshScheduler } from '../src/scheduler.ts';

const telemetry = createTelemetry({ service: 'board-delivery-test', level: 'silent', refusalLogIntervalMs: 60_000 });
const TOKEN = '4242:delivery-test';
const TICK_MS = 250;

async function rig() {
  const clock = new ManualClock();
  const now = (): number => clock.now();
  const stub = new TelegramStub({ limits: false, now });
  const url = await stub.listen();
  const queue = new MemorySendQueue<BotCall>({
    limits: { botRatePerS: 1000, groupRatePerMin: 60_000, chatRatePerS: 1000 },
    clock,
    maxRequeues: 6,
    onError: () => {},
  });
  let boards: ChatBoards | null = null;
  const client = new TelegramClient({
    token: TOKEN,
    apiRoot: url,
    queue,
    now,
    boardsHandedBack: true,
    hooks: { onDeactivate: (chatId) => boards?.deactivated(chatId) },
    avatars: { concurrency: 1, cacheBytes: 0, ttlMs: 1000 },
  });
  queue.start(client.sender());
  // The render pool: renders at once, counting what it drew.
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
  let unsettled = 0;
  // As one process wires it (bot-runtime.ts): the worker's board ends reach the live boards' `heard`.
  const ends = new LocalBoardEnds();
  ends.subscribe((end) => boards?.heard(end));
  const hooks = publishingHooks(ends);
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
    confirmTimeoutMs: 60_000,
  });
  const bus = new InProcessBus();
  const subj = subjects('delivery-test');
  boards = new ChatBoards({ bus, subjects: subj, client, renders, scheduler, telemetry, now });
  const b = boards;
  const evs = new Map<number, number>();
  return {
    clock,
    stub,
    port: Number(new URL(url).port),
    boards: b,
    scheduler,
    client,
    drawn,
    /** A new state of the chat's game on its channel. */
    publish(chatId: number, players: Players): void {
      const ev = (evs.get(chatId) ?? 0) + 1;
      evs.set(chatId, ev);
      bus.publish(
        subj.channelOut(telegramChannelId(chatId)),
        encodeJson({ t: 'update', channel: 'x', ev, at: 0, actions: [], tally: {}, game: stateOf(players) }),
      );
    },
    /** One scheduler tick after `TICK_MS` of fake time, then until what it handed on has ended (fake time creeps 1 ms a poll for the bucket). */
    async tick(): Promise<void> {
      clock.advance(TICK_MS);
      await new Promise<void>((res) => setImmediate(res)); // the bus delivers the updates published
      await b.tick();
      await until(
        'the boards handed on to end',
        () => {
          if (rendering === 0 && renders.stats().queued === 0 && unsettled === 0) return true;
          clock.advance(1);
          return false;
        },
        { intervalMs: 1 },
      );
    },
    async close(): Promise<void> {
      b.close();
      await renders.close();
      await queue.close(1_000);
      await stub.close();
    },
  };
}

void test('boards - after a minute of outage (refused connections, then 5xx) every board shows its latest state within one interval of Telegram answering, posted once', async () => {
  const r = await rig();
  const S1 = -1001000000011;
  const S2 = -1001000000012;
  const G = -4011; // a basic group
  const chats = [S1, S2, G];
  const latest = new Map<number, Players>();
  const change = (chatId: number, players: Players): void => {
    latest.set(chatId, players);
    r.publish(chatId, players);
  };
  const right = (chatId: number): boolean => r.stub.board(chatId)?.sha256 === shaOf(latest.get(chatId)!);
  try {
    for (const c of chats) {
      r.boards.watch(c, TITLE);
      change(c, { 'tg:7': ['g....'] });
    }
    await r.tick();
    assert.ok(chats.every(right), 'the first boards are posted');

    // The outage: first Telegram refuses connections…
    await r.stub.close();
    const outageAt = r.clock.now();
    change(S1, { 'tg:7': ['g....', 'gy...'] }); // S1 and G change once, early, and never again
    change(G, { 'tg:7': ['g....', 'y....'], 'tg:8': ['.....'] });
    let s2 = 1;
    while (r.clock.now() - outageAt < 30_000) {
      await r.tick();
      if (r.clock.now() - outageAt >= 20_000 * s2 && s2 < 3) change(S2, { 'tg:7': Array<string>(++s2).fill('g....') });
    }
    // … then answers 502 to every call.
    await r.stub.listen(r.port);
    r.stub.inject({ kind: 'error', code: 502, description: 'Bad Gateway', times: Infinity });
    while (r.clock.now() - outageAt < 60_000) {
      await r.tick();
      if (r.clock.now() - outageAt >= 20_000 * s2 && s2 < 3) change(S2, { 'tg:7': Array<string>(++s2).fill('g....') });
    }
    assert.equal(s2, 3, 'S2 changed during the outage too');
    assert.ok(!chats.some(right), 'nothing got through during the outage');
    assert.ok(r.client.stats().boards.unreachable > chats.length, 'the boards were handed on again during the outage');

    // Telegram answers again.
    r.stub.clearFaults();
    const backAt = r.clock.now();
    while (!chats.every(right) && r.clock.now() - backAt < 30_000) await r.tick();
    for (const c of chats) {
      assert.ok(right(c), `chat ${c} shows its latest state`);
      const board = r.stub.board(c)!;
      assert.ok(
        board.atMs - backAt <= r.scheduler.intervalMs + TICK_MS,
        `chat ${c}: right ${board.atMs - backAt} ms after Telegram answered (interval ${r.scheduler.intervalMs} ms)`,
      );
      assert.equal(board.posts, 1, `chat ${c}: posted once`);
      assert.equal(board.photoMessages, 1, `chat ${c}: one board`);
    }
    // And then nothing more: the chats are clean.
    const drawn = r.drawn.length;
    for (let i = 0; i < 20; i++) await r.tick();
    assert.equal(r.drawn.length, drawn, 'no board drawn once every chat shows its latest state');
  } finally {
    await r.close();
  }
});

void test('boards - a chat that removed the bot (403 kicked) is dropped from the scheduler: no more renders', async () => {
  const r = await rig();
  const S = -1001000000021;
  const other = -1001000000022;
  try {
    for (const c of [S, other]) {
      r.boards.watch(c, TITLE);
      r.publish(c, { 'tg:7': ['g....'] });
    }
    await r.tick();
    assert.equal(r.scheduler.size, 2);
    r.stub.kick(S);
    r.publish(S, { 'tg:7': ['g....', 'gg...'] });
    for (let i = 0; i < 13; i++) await r.tick();
    assert.deepEqual(r.boards.watching, [other], "the kicked chat's board stopped");
    assert.equal(r.scheduler.size, 1);
    const drawn = r.drawn.filter((c) => c === S).length;
    r.publish(S, { 'tg:7': ['g....', 'gg...', 'ggg..'] });
    r.publish(other, { 'tg:7': ['g....', 'y....'] });
    for (let i = 0; i < 13; i++) await r.tick();
    assert.equal(r.drawn.filter((c) => c === S).length, drawn, 'nothing of the kicked chat is rendered');
    assert.equal(r.stub.board(other)!.edits, 1, 'the other chat goes on');
    assert.equal(r.stub.calls().filter((c) => c.chatId === S && c.status === 403).length, 1, 'one call learned it');
  } finally {
    await r.close();
  }
});
