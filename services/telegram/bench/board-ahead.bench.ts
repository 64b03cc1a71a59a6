/**
 * `npm run bench -- board-ahead [--json FILE]`: how much of the bucket the
 * boards use when the board scheduler's send budget is a ceiling
 * (BOARD_SEND_AHEAD_MS=0) and when it is a floor with the look-ahead
 * (BOARD_SEND_AHEAD_MS=1000, the default).
 *
 * A simulation on a manual clock (no waiting, the same figures on any
 * machine): the product's scheduler (RefreshScheduler at the default
 * budgets, ticking every 250 ms, backlog = the board lane's depth) hands
 * boards to the in-process send queue (MemorySendQueue on MemoryBucket at
 * the default TELEGRAM_BOT_RATE_PER_S, 20/min per group, 1/s per chat;
 * calls answer at once) while replies arrive at 0.5/s (a quiet transactional
 * lane, as after a rollover's guessing) and at 3/s (the rate the budget's
 * 25 − 22 was meant to leave them). 1,000 group chats are dirty at t = 0 (a
 * rollover's final boards), with no further change.
 *
 * Figures per case: the time until the last board is sent, the floor (the
 * time the bucket needs to send those boards beside the replies:
 * 1,000 ÷ (bot rate − reply rate)), the utilisation of the bucket over that
 * time ((calls − 1) ÷ (bot rate × span)), the boards sent ahead of the
 * budget, and the replies' wait from enqueue to call (p50 / p99 / max).
 */
import { writeFileSync } from 'node:fs';
import { defaultConfig } from '@crowdplay/config';
import { renderCost } from '@crowdplay/board';
import { ManualClock, MemorySendQueue } from '@crowdplay/sendq';
import { RefreshScheduler } from '../src/scheduler.ts';

interface Case {
  aheadMs: number;
  repliesPerS: number;
  boards: number;
  lastBoardS: number;
  floorS: number;
  overFloor: number;
  utilisation: number;
  boardsAhead: number;
  replies: number;
  replyWaitMs: { p50: number; p99: number; max: number };
}

const CHATS = 1_000;
const TICK_MS = 250;
const CARDS = 10;

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? Number.NaN;
}

const flush = async (): Promise<void> => {
  for (let i = 0; i < 4; i++) await new Promise((r) => setImmediate(r));
};

async function simulate(aheadMs: number, repliesPerS: number): Promise<Case> {
  const cfg = defaultConfig();
  const botRatePerS = cfg.telegram.botRatePerS;
  const clock = new ManualClock(1_000_000);
  const t0 = clock.now();
  const queue = new MemorySendQueue<{ n: number }>({
    limits: {
      botRatePerS,
      groupRatePerMin: cfg.telegram.groupRatePerMin,
      groupBurst: cfg.telegram.groupBurst,
      chatRatePerS: cfg.telegram.chatRatePerS,
    },
    clock,
    concurrency: cfg.telegram.sendConcurrency,
  });
  const scheduler = new RefreshScheduler({
    renderBudgetMsPerS: cfg.board.renderBudgetMsPerS,
    sendBudgetPerS: cfg.board.sendBudgetPerS,
    pacing: { groupRatePerMin: cfg.telegram.groupRatePerMin, groupBurst: cfg.telegram.groupBurst, chatRatePerS: cfg.telegram.chatRatePerS },
    costMs: (cards) => renderCost(cards).ms,
    aheadMs,
    botRatePerS,
  });
  const calls: Array<{ lane: string; atMs: number }> = [];
  const replyWaits: number[] = [];
  const enqueuedAt = new Map<number, number>();
  queue.start((job) => {
    calls.push({ lane: job.lane, atMs: clock.now() });
    if (job.lane === 'tx') replyWaits.push(clock.now() - enqueuedAt.get(job.payload.n)!);
    return Promise.resolve({ ok: true });
  });
  for (let c = 1; c <= CHATS; c++) scheduler.changed(-c, 1, CARDS, t0);
  let boardsSent = 0;
  let boardsAhead = 0;
  let lastBoardMs = t0;
  let nextTick = t0;
  let nextReply = t0;
  let reply = 0;
  while (boardsSent < CHATS && clock.now() - t0 < 600_000) {
    const at = Math.min(nextTick, nextReply, clock.nextTimerAt() ?? Infinity);
    clock.set(at);
    await flush();
    if (clock.now() >= nextReply) {
      const n = ++reply;
      enqueuedAt.set(n, clock.now());
      await queue.enqueue({ chatId: 1_000_000 + n, lane: 'tx', payload: { n } });
      nextReply += 1000 / repliesPerS;
    }
    if (clock.now() >= nextTick) {
      scheduler.setBacklog((await queue.depth()).board, clock.now());
      const due = scheduler.due(clock.now());
      boardsAhead += scheduler.ahead;
      for (const d of due) {
        scheduler.sent(d.chatId, d.version, clock.now());
        const e = await queue.enqueue({ chatId: d.chatId, lane: 'board', key: `board:${d.chatId}`, version: d.version, payload: { n: 0 } });
        if (e.status !== 'queued') continue;
        void e.result.then((r) => {
          if (r.status !== 'sent') return;
          scheduler.delivered(d.chatId, d.version);
          boardsSent++;
          lastBoardMs = clock.now();
        });
      }
      nextTick += TICK_MS;
    }
    await flush();
  }
  await queue.close();
  const spanMs = lastBoardMs - t0;
  const inSpan = calls.filter((c) => c.atMs <= lastBoardMs).length;
  const floorS = CHATS / (botRatePerS - repliesPerS);
  const replies = replyWaits.length;
  return {
    aheadMs,
    repliesPerS,
    boards: boardsSent,
    lastBoardS: +(spanMs / 1000).toFixed(2),
    floorS: +floorS.toFixed(2),
    overFloor: +(spanMs / 1000 / floorS).toFixed(3),
    utilisation: +((inSpan - 1) / ((botRatePerS * spanMs) / 1000)).toFixed(3),
    boardsAhead,
    replies,
    replyWaitMs: { p50: Math.round(pct(replyWaits, 50)), p99: Math.round(pct(replyWaits, 99)), max: Math.round(Math.max(...replyWaits)) },
  };
}

/** Runs both cases, prints them, writes `--json FILE`. @returns the exit code */
export async function main(args: readonly string[]): Promise<number> {
  const jsonAt = args.indexOf('--json');
  const cases: Case[] = [];
  for (const repliesPerS of [0.5, 3])
    for (const aheadMs of [0, defaultConfig().board.sendAheadMs]) cases.push(await simulate(aheadMs, repliesPerS));
  console.log(`board-ahead bench (simulated: ${CHATS} dirty group chats of ${CARDS} cards, default budgets)`);
  for (const c of cases) {
    console.log(
      `  replies ${c.repliesPerS}/s, BOARD_SEND_AHEAD_MS=${c.aheadMs}: last board at ${c.lastBoardS} s (floor ${c.floorS} s, ×${c.overFloor}), utilisation ${c.utilisation}, ${c.boardsAhead} boards ahead of the budget; reply wait p50 ${c.replyWaitMs.p50} / p99 ${c.replyWaitMs.p99} / max ${c.replyWaitMs.max} ms (${c.replies} replies)`,
    );
  }
  const result = { chats: CHATS, cards: CARDS, tickMs: TICK_MS, cases };
  if (jsonAt >= 0 && args[jsonAt + 1]) writeFileSync(args[jsonAt + 1]!, JSON.stringify(result, null, 2));
  return 0;
}
