/**
 * The `chatrounds` load scenario, a sibling of `rollover`: the product in
 * standalone as its own process with the word puzzle's round of the day on
 * (PUZZLE_ROUND), the Telegram Bot API stub in this process, N chats started
 * through the webhook, and P players per chat playing the round in the Mini
 * App (signed initData): stakes or trades, then one solve per chat, which
 * makes the game settle the round. Checks the acks, the results and payouts
 * (each player's balance = grant + net; `crowdplay ledger verify`), every
 * chat's final board (the stub's last photo = the board of the chat's last
 * state, its settled round drawn), one result message per chat, and no 429.
 * Every field is defined in loadtest/README.md ("chatrounds").
 */
import { createHash, randomBytes } from 'node:crypto';
import os from 'node:os';
import { RenderPool } from '@crowdplay/board';
import { defaultConfig } from '@crowdplay/config';
import { answerFor, fiveLetterWords, puzzleNumber } from '@crowdplay/crowd-engine';
import type { RoundView } from '@crowdplay/protocol';
import { signInitData } from '@crowdplay/telegram';
import { boardOf } from '@crowdplay/telegram-service';
import { machineInfo } from '../crowd/scenario.ts';
import { summarize, type LatencySummary } from '../hist.ts';
import { ledgerVerify } from '../market/server-api.ts';
import { StubThread } from '../telegram-stub/thread.ts';
import { dropSchema, pinProcess, purgeSendqKeys, startProduct, tasksetPath, type Product } from '../rollover/product.ts';
import { DEFAULT_DATABASE_URL, DEFAULT_REDIS_URL } from '../rollover/scenario.ts';
import { RoundCrowdStats, runRoundPlayers, type ChatState, type RoundPlayerSpec } from './players.ts';

/** Chat ids: -100… like Telegram supergroups (apart from the rollover's). */
export const CHAT_ID_BASE = -1_008_000_000_000;
/** Player k (chat i, player j: k = i × players + j) is Telegram user PLAYER_ID_BASE + k. */
export const PLAYER_ID_BASE = 6_000_000;
/** Most players in this one process. */
export const MAX_SOCKETS = 15_000;
const BOT_USERNAME = 'cp_rounds_bot';
const WELCOME_GRANT = 100;

export interface ChatRoundsOptions {
  chats: number;
  players: number;
  /** The round's kind (PUZZLE_ROUND). @defaultValue 'pool' */
  kind?: 'pool' | 'market';
  databaseUrl?: string;
  redisUrl?: string;
  /** Connects in flight at once. @defaultValue 200 */
  connectConcurrency?: number;
  /** Pin the product to CPU 0 and this process to CPU 1. @defaultValue true */
  pin?: boolean;
  onProgress?: (line: string) => void;
  command?: string;
}

/** The scenario's report (loadtest/README.md "chatrounds"). */
export interface ChatRoundsReport {
  scenario: 'chatrounds';
  command: string;
  startedAt: string;
  machine: ReturnType<typeof machineInfo>;
  config: {
    chats: number;
    players: number;
    kind: 'pool' | 'market';
    welcomeGrant: number;
    productCpus: string | null;
    databaseSchema: string;
  };
  players: { requested: number; connected: number; failed: number; failedByCode: Record<string, number> };
  trades: {
    sent: number;
    acked: number;
    refused: number;
    refusedByCode: Record<string, number>;
    failed: number;
    failedByCode: Record<string, number>;
  };
  tradeAckMs: LatencySummary;
  rounds: { settledYes: number; otherResults: number; resultsReceived: number; resultsExpected: number };
  payouts: { checked: number; balanceMismatches: number; poolMismatches: number; samples: string[] };
  ledgerVerify: string;
  boards: { chats: number; finalCorrect: number; samples: string[] };
  resultMessages: { chatsWithOne: number; missing: number; duplicates: number };
  telegram: { calls: number; rejected429: number; byMethod: Record<string, number> };
  elapsedS: number;
  complete: boolean;
  warnings: string[];
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Runs the scenario once and returns its report.
 * @throws Error on a failed setup (the product does not start, a /start reply never comes)
 */
/**
 * The puzzle period (PUZZLE_PERIOD_MS) of a run starting at `nowMs`: a day, the product's default, unless its
 * rollover (midnight UTC) is less than `marginMs` away; then the fewest whole days whose next rollover is not (a
 * period of k days rolls over at the midnights whose day number since the epoch is a multiple of k).
 * @param nowMs ms since the epoch
 * @param marginMs the time the run needs before a rollover, ms (default 15 min; at most a day)
 * @returns the period, ms: a whole number of days
 * @throws RangeError for a margin outside 0…1 day
 */
export function runPeriodMs(nowMs: number, marginMs = 15 * 60_000): number {
  const day = 86_400_000;
  if (!(marginMs >= 0 && marginMs <= day)) throw new RangeError(`marginMs must be 0…${day}, got ${marginMs}`);
  for (let days = 1; ; days++) {
    const p = days * day;
    if (p - (nowMs % p) >= marginMs) return p;
  }
}

export async function runChatRoundsScenario(o: ChatRoundsOptions): Promise<ChatRoundsReport> {
  const started = Date.now();
  const log = o.onProgress ?? ((): void => {});
  const warnings: string[] = [];
  const kind = o.kind ?? 'pool';
  if (!Number.isInteger(o.chats) || o.chats < 1) throw new RangeError(`chats must be a positive integer, got ${o.chats}`);
  if (!Number.isInteger(o.players) || o.players < 1) throw new RangeError(`players must be a positive integer, got ${o.players}`);
  const total = o.chats * o.players;
  if (total > MAX_SOCKETS) throw new RangeError(`chats × players = ${total} > ${MAX_SOCKETS} sockets in one process`);
  const databaseUrl = o.databaseUrl ?? DEFAULT_DATABASE_URL;
  const redisUrl = o.redisUrl ?? DEFAULT_REDIS_URL;
  // The run must not straddle the puzzle's rollover (the round would be cut and the answer change).
  const periodMs = runPeriodMs(Date.now());
  let productCpus: string | null = null;
  if (o.pin !== false && tasksetPath() && os.availableParallelism() >= 2) {
    productCpus = '0';
    if (!pinProcess(process.pid, '1')) warnings.push('could not pin the generator to CPU 1');
  } else if (o.pin !== false) warnings.push('taskset missing or one CPU: the product ran unpinned');

  const run = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
  const schema = `chatrounds_${run}`;
  const token = `${710_000_000 + (randomBytes(2).readUInt16BE(0) % 10_000)}:chatrounds-${randomBytes(12).toString('hex')}`;
  const hookSecret = randomBytes(16).toString('hex');
  const puzzleSecret = `chatrounds-${randomBytes(8).toString('hex')}`;
  const sendqPrefix = `chatrounds:${run}`;
  const stub = await StubThread.start({ tokens: [token], avatars: { mode: 'none', playerIdBase: PLAYER_ID_BASE, pool: 1 } });
  const titles = Array.from({ length: o.chats }, (_, i) => `Round chat ${i}`);
  const chatId = (i: number): number => CHAT_ID_BASE - i;
  let product: Product | null = null;
  let report: ChatRoundsReport | null = null;
  try {
    product = await startProduct(
      {
        DATABASE_URL: databaseUrl,
        DATABASE_SCHEMA: schema,
        REDIS_URL: redisUrl,
        NATS_URL: '',
        BUS_SUBJECT_PREFIX: `chatrounds_${run}`,
        DEMO_ENABLED: 'false',
        TELEGRAM_BOT_TOKEN: token,
        TELEGRAM_WEBHOOK_SECRET: hookSecret,
        TELEGRAM_API_ROOT: stub.apiRoot,
        TELEGRAM_BOT_USERNAME: BOT_USERNAME,
        PUZZLE_PERIOD_MS: String(periodMs),
        PUZZLE_SECRET: puzzleSecret,
        PUZZLE_ROUND: kind,
        PUZZLE_ROUND_MS: String(10 * 60_000),
        PUZZLE_ROUND_GUESSES: '4',
        PUZZLE_WELCOME_GRANT: String(WELCOME_GRANT),
        TELEGRAM_SENDQ_PREFIX: sendqPrefix,
        BOARD_RENDER_PREFIX: `${sendqPrefix}:render`,
      },
      productCpus,
    );
    const prod = product;
    log(`stub on ${stub.apiRoot}; product pid ${prod.pids()[0]?.pid} on ${prod.url} (schema ${schema}, ${kind} rounds)`);

    // 1. /start in every chat; the Mini App links from the bot's replies.
    const links = await startChats(prod.url, hookSecret, o.chats, chatId, titles, stub, log);

    // 2. Every player opens the app, plays the round; player 0 of each chat solves once the others are answered.
    const puzzle = puzzleNumber(Date.now(), periodMs);
    const answer = answerFor(puzzle, fiveLetterWords().answers, puzzleSecret);
    const chats: ChatState[] = Array.from({ length: o.chats }, () => ({ answered: 0, solved: false, last: null, wake: [], results: [] }));
    const specs: RoundPlayerSpec[] = [];
    for (let i = 0; i < o.chats; i++) {
      const startParam = new URL(links[i]!).searchParams.get('startapp') ?? '';
      for (let j = 0; j < o.players; j++) {
        const userId = PLAYER_ID_BASE + i * o.players + j;
        specs.push({
          chat: i,
          index: j,
          userId,
          initData: signInitData(
            { user: { id: userId, first_name: `p${j} c${i}` }, chat_type: 'supergroup', start_param: startParam },
            { botToken: token },
          ),
          localAddress: `127.0.0.${2 + Math.floor((i * o.players + j) / 2_000)}`,
        });
      }
    }
    const stats = new RoundCrowdStats();
    const seqBefore = (await stub.calls()).reduce((m, c) => Math.max(m, c.seq), 0);
    const progress = setInterval(
      () => log(`connected ${stats.connected}/${total}, trades acked ${stats.tradesAcked}/${stats.tradesSent}, results ${stats.results}`),
      2_000,
    );
    try {
      await runRoundPlayers(specs, {
        wsBase: prod.url.replace(/^http/, 'ws'),
        kind,
        answer,
        players: o.players,
        connectConcurrency: o.connectConcurrency ?? 200,
        chats,
        stats,
      });
    } finally {
      clearInterval(progress);
    }
    log(`players done: ${stats.tradesAcked} trades acked, ${stats.results} results`);

    // 3. Results and payouts: each player's balance is the grant plus its net; a pool pays out what it took (less the house take).
    let settledYes = 0;
    let otherResults = 0;
    let balanceMismatches = 0;
    let poolMismatches = 0;
    let checked = 0;
    const paySamples: string[] = [];
    const takeBps = defaultConfig().ledger.houseTakeBps;
    chats.forEach((c, i) => {
      let staked = 0;
      let paid = 0;
      for (const r of c.results) {
        if (!r.result) continue;
        checked++;
        if (r.result.state === 'settled' && r.result.winner === 'yes') settledYes++;
        else otherResults++;
        staked += r.result.staked;
        paid += r.result.paid;
        if (r.balance !== WELCOME_GRANT + r.result.net) {
          balanceMismatches++;
          if (paySamples.length < 5) paySamples.push(`chat ${i}: balance ${r.balance}, expected ${WELCOME_GRANT} + ${r.result.net}`);
        }
      }
      // A pool pays the whole pot, less the house take (floored), to the winners (when anyone picked the winner).
      if (kind === 'pool' && staked > 0 && paid !== staked - Math.floor((staked * takeBps) / 10_000)) {
        poolMismatches++;
        if (paySamples.length < 5) paySamples.push(`chat ${i}: paid ${paid} of a pool of ${staked}`);
      }
    });
    log('running ledger verify');
    const verify = await ledgerVerify(databaseUrl, schema);

    // 4. The final boards: the board of each chat's last update (its settled round drawn) vs the stub's last photo.
    const expected = new Map<number, string>();
    const pool = new RenderPool({ concurrency: 1, maxQueue: o.chats });
    try {
      await Promise.all(
        chats.map(async (c, i) => {
          const g = c.last?.game as
            { puzzle: number; players: Record<string, { marks: string[]; solved: boolean; name?: string }> } | undefined;
          if (!g) return;
          const out = await pool.render(String(i), 1, boardOf(titles[i]!, g, c.last!.rounds as RoundView[]));
          if (out.status === 'rendered') expected.set(i, createHash('sha256').update(out.png).digest('hex'));
        }),
      );
    } finally {
      await pool.close();
    }
    const ids = Array.from({ length: o.chats }, (_, i) => i);
    const deadline = Date.now() + 30_000 + (o.chats / 24) * 2_000;
    let finalCorrect = 0;
    for (;;) {
      const views = await stub.boards(ids.map(chatId));
      finalCorrect = ids.filter((i) => expected.has(i) && views[i]?.sha256 === expected.get(i)).length;
      if (finalCorrect === o.chats || Date.now() >= deadline || prod.exited()) break;
      await sleep(500);
    }
    const views = await stub.boards(ids.map(chatId));
    const boardSamples = ids
      .filter((i) => views[i]?.sha256 !== expected.get(i))
      .slice(0, 5)
      .map(
        (i) =>
          `chat ${i}: shown ${views[i]?.sha256.slice(0, 12) ?? 'none'}, expected ${expected.get(i)?.slice(0, 12) ?? 'none (no state)'}`,
      );

    // 5. The result messages and Telegram's answers.
    const msgs = await stub.messages(ids.map(chatId));
    const counts = msgs.map(
      (m) => m.filter((x) => x.fromBot && x.kind === 'text' && /^Round (result|cancelled)/.test(x.text ?? '')).length,
    );
    const calls = (await stub.calls(seqBefore)).filter((c) => c.method !== 'file');
    const byMethod: Record<string, number> = {};
    for (const c of calls) byMethod[c.method] = (byMethod[c.method] ?? 0) + 1;
    const st = await stub.stats();
    const exit = prod.exited();
    await prod.stop();
    const errorLines = prod.errorLines();
    if (errorLines.length > 0) warnings.push(`${errorLines.length} error log lines; first: ${errorLines[0]!.slice(0, 300)}`);
    report = {
      scenario: 'chatrounds',
      command: o.command ?? `runChatRoundsScenario(${JSON.stringify({ chats: o.chats, players: o.players, kind })})`,
      startedAt: new Date(started).toISOString(),
      machine: machineInfo(),
      config: { chats: o.chats, players: o.players, kind, welcomeGrant: WELCOME_GRANT, productCpus, databaseSchema: schema },
      players: { requested: total, connected: stats.connected, failed: stats.connectFailed, failedByCode: stats.connectFailedByCode },
      trades: {
        sent: stats.tradesSent,
        acked: stats.tradesAcked,
        refused: stats.tradesRefused,
        refusedByCode: stats.refusedByCode,
        failed: stats.failed,
        failedByCode: stats.failedByCode,
      },
      tradeAckMs: summarize(stats.tradeUs),
      rounds: { settledYes, otherResults, resultsReceived: stats.results, resultsExpected: total },
      payouts: { checked, balanceMismatches, poolMismatches, samples: paySamples },
      ledgerVerify: verify.result,
      boards: { chats: o.chats, finalCorrect, samples: boardSamples },
      resultMessages: {
        chatsWithOne: counts.filter((n) => n === 1).length,
        missing: counts.filter((n) => n === 0).length,
        duplicates: counts.filter((n) => n > 1).length,
      },
      telegram: { calls: calls.length, rejected429: st.rejected429, byMethod },
      elapsedS: 0,
      complete:
        exit === null &&
        stats.connectFailed === 0 &&
        stats.failed === 0 &&
        stats.tradesAcked === stats.tradesSent &&
        settledYes === total &&
        balanceMismatches === 0 &&
        poolMismatches === 0 &&
        verify.result === 'ok' &&
        finalCorrect === o.chats &&
        counts.every((n) => n === 1) &&
        st.rejected429 === 0,
      warnings,
    };
  } finally {
    if (product && product.exited() === null) await product.stop().catch(() => undefined);
    await stub.close().catch(() => undefined);
    await dropSchema(databaseUrl, schema).catch((err: unknown) =>
      warnings.push(`could not drop schema ${schema}: ${(err as Error).message}`),
    );
    if (purgeSendqKeys(redisUrl, `${sendqPrefix}:render`) === null || purgeSendqKeys(redisUrl, sendqPrefix) === null)
      warnings.push(`redis-cli failed or missing: the run's send queue keys {${sendqPrefix}}* were not removed`);
  }
  report.elapsedS = Math.round((Date.now() - started) / 100) / 10;
  log(`done in ${report.elapsedS} s`);
  return report;
}

/** Sends /start to every chat through the webhook and returns each chat's Mini App link from the bot's reply. */
async function startChats(
  url: string,
  hookSecret: string,
  n: number,
  chatId: (i: number) => number,
  titles: string[],
  stub: StubThread,
  log: (line: string) => void,
): Promise<string[]> {
  let next = 0;
  const send = async (): Promise<void> => {
    for (let i = next++; i < n; i = next++) {
      const res = await fetch(`${url}/v1/telegram/webhook`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-telegram-bot-api-secret-token': hookSecret },
        body: JSON.stringify({
          update_id: i + 1,
          message: {
            message_id: 1,
            date: Math.floor(Date.now() / 1000),
            chat: { id: chatId(i), type: 'supergroup', title: titles[i] },
            from: { id: 1, is_bot: false, first_name: 'Admin' },
            text: `/start@${BOT_USERNAME}`,
          },
        }),
      });
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`webhook answered ${res.status} for chat ${i}`);
    }
  };
  await Promise.all(Array.from({ length: 16 }, send));
  const links: string[] = new Array<string>(n);
  const deadline = Date.now() + 30_000 + (n / 30) * 2_000;
  for (;;) {
    const missing = Array.from({ length: n }, (_, i) => i).filter((i) => links[i] === undefined);
    if (missing.length === 0) break;
    const msgs = await stub.messages(missing.map(chatId));
    missing.forEach((i, k) => {
      const m = msgs[k]!.find((x) => x.fromBot && x.kind === 'text' && x.markup.includes('startapp='));
      const link = m && /"url":"([^"]+)"/.exec(m.markup)?.[1];
      if (link) links[i] = link;
    });
    if (Date.now() > deadline) throw new Error(`only ${n - missing.length} of ${n} /start replies arrived`);
    await sleep(250);
  }
  log(`/start answered in ${n} chats`);
  return links;
}
