/**
 * The `rollover` load scenario: the product in
 * standalone as its own process (pinned with taskset, on the machine's real
 * PostgreSQL and Redis), the Telegram Bot API stub in this process, N chats
 * started through the webhook, and at the puzzle rollover every player opens
 * the Mini App (signed initData) and guesses. Reports the rollover's figures;
 * every field is defined in loadtest/README.md ("rollover").
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import os from 'node:os';
import { RenderPool, sampleAvatar } from '@crowdplay/board';
import { signInitData } from '@crowdplay/telegram';
import { boardOf } from '@crowdplay/telegram-service';
import { machineInfo } from '../crowd/scenario.ts';
import { summarize } from '../hist.ts';
import { UNLIMITED_METHODS, type BoardView, type CallRecord } from '@crowdplay/telegram/testing';
import { StubThread } from '../telegram-stub/thread.ts';
import { allowedSends, idealStaleness, slotLagMs } from './bucket-model.ts';
import { avatarsAfterLastChange } from './avatar-lag.ts';
import { startContention, type ContendingLoad, type Contention } from './contend.ts';
import { tailKinds, type FinalBoard } from './tail.ts';
import { answerFor, fiveLetterWords } from '@crowdplay/crowd-engine';
import { CrowdStats, playerWords, runPlayers, type ChatOutcome, type PlayerSpec } from './players.ts';
import {
  ACT_ACK_WITHIN_MS,
  ProductSampler,
  dropSchema,
  pinProcess,
  purgeSendqKeys,
  startClusterProduct,
  startProduct,
  tasksetPath,
  type ActAckCounts,
  type Product,
} from './product.ts';
import { boardPipelineSummary, type MsSummary, type RolloverReport, type RolloverTarget } from './report.ts';

/** Default PostgreSQL (the machine's; libs/testing uses the same). */
export const DEFAULT_DATABASE_URL = 'postgresql://postgres@127.0.0.1:5432/test';
export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';
export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';
/** Players per local source address: inside the gateway's CONN_BURST (2,000 per address). */
export const DEFAULT_PLAYERS_PER_ADDRESS = 2_000;
/** Most players in this one process (a process here may open 20,000 files). */
export const MAX_ROLLOVER_SOCKETS = 15_000;
/** Chat ids: -100… like Telegram supergroups. */
export const CHAT_ID_BASE = -1_009_000_000_000;
/** Player k (chat i, player j: k = i × players + j) is Telegram user PLAYER_ID_BASE + k. */
export const PLAYER_ID_BASE = 5_000_000;
/** Distinct avatar images (user u gets image u mod AVATAR_POOL); the product still reads one per user. */
export const AVATAR_POOL = 64;
const BOT_USERNAME = 'cp_load_bot';
const APP_NAME = 'play';

export interface RolloverOptions {
  chats: number;
  players: number;
  /** PUZZLE_PERIOD_MS ÷ 1000. @defaultValue 30 up to 100 chats, else 30 + chats ÷ 10 (the final boards of all chats need chats ÷ 24 s at the send budget) */
  periodS?: number;
  /** Live boards on (default). Off: the product runs with BOARDS_ENABLED=false (everything else the same). */
  boards?: boolean;
  /**
   * Players' profile photos on the stub: `photo` (default) — one of
   * {@link AVATAR_POOL} distinct JPEGs (libs/board `sampleAvatar`, 160 × 160,
   * ~10 KB) per user, so boards draw real avatars; `none` — no user has one.
   */
  avatars?: 'photo' | 'none';
  databaseUrl?: string;
  redisUrl?: string;
  /** Connects in flight at once. @defaultValue 200 */
  connectConcurrency?: number;
  /** Think time before each guess, uniform in [lo, hi] ms. @defaultValue [200, 800] */
  thinkMs?: [number, number];
  /** @defaultValue 10,000 */
  ackTimeoutMs?: number;
  /** @defaultValue DEFAULT_PLAYERS_PER_ADDRESS */
  playersPerAddress?: number;
  /** Pin the product to CPU 0 and this process to CPU 1 (when taskset exists and there are ≥ 2 CPUs). @defaultValue true */
  pin?: boolean;
  /**
   * Run the product as `crowdplay cluster` (sequencer, router, `shards` shards, `gateways` gateways; NATS, Redis and
   * Postgres; the run's own subject prefix) instead of `crowdplay start`. Webhook updates and players are spread
   * over the gateways (player k on gateway k mod G, so a chat's players span them).
   */
  cluster?: { gateways: number; shards: number };
  /** Write everything the product printed (first 4 MB) to this file after the run. */
  productLog?: string;
  /**
   * Write each chat's accepted changes and the board calls the stub saw for it to this file after the run (JSON:
   * `[{chat, changesMs, finalAtMs, sends: [{atMs, method, outcome}]}]`), for {@link idealStaleness} and the like.
   */
  boardTrace?: string;
  /** Write a V8 CPU profile of the product (node --cpu-prof) into this directory when it stops; not with `cluster`. */
  productCpuProf?: string;
  /** NATS for a cluster run (default nats://127.0.0.1:4222). */
  natsUrl?: string;
  /**
   * A competing load on the product's CPU for the whole run (contend.ts): busy `busyMs`, idle `idleMs`, over and over.
   * Needs the product pinned. @defaultValue none
   */
  contend?: Contention;
  /** Extra environment of the product (e.g. BOARD_SEND_BUDGET_PER_S). */
  productEnv?: Record<string, string>;
  onProgress?: (line: string) => void;
  command?: string;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Nearest-rank percentiles of ms samples. */
export function msSummary(xs: number[]): MsSummary {
  if (xs.length === 0) return { count: 0, p50: null, p95: null, p99: null, max: null };
  const s = [...xs].sort((a, b) => a - b);
  const at = (p: number): number => s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
  return { count: s.length, p50: at(50), p95: at(95), p99: at(99), max: s[s.length - 1]! };
}

/**
 * The product's act acks between two scrapes of its `crowdplay_act_ack_ms` (cumulative counts): how many,
 * and the share within ACT_ACK_WITHIN_MS (1 when there were none; null figures when either scrape is missing).
 * @throws RangeError when a count went back (the product restarted between the scrapes)
 */
export function actAckShare(from: ActAckCounts | null, to: ActAckCounts | null): RolloverReport['actAck'] {
  if (!from || !to) return { withinMs: ACT_ACK_WITHIN_MS, count: null, shareWithin: null };
  const count = to.count - from.count;
  const within = to.within - from.within;
  if (count < 0 || within < 0 || within > count) throw new RangeError(`act ack counts went back: ${JSON.stringify({ from, to })}`);
  return { withinMs: ACT_ACK_WITHIN_MS, count, shareWithin: count === 0 ? 1 : within / count };
}

/** Calls matching `pick` per whole second after `fromMs` (index 0 = [fromMs, fromMs + 1 s)). */
function perSecond(calls: readonly CallRecord[], fromMs: number, pick: (c: CallRecord) => boolean): number[] {
  const out: number[] = [];
  for (const c of calls) {
    if (!pick(c) || c.atMs < fromMs) continue;
    const i = Math.floor((c.atMs - fromMs) / 1000);
    while (out.length <= i) out.push(0);
    out[i]!++;
  }
  return out;
}

/** One board call of the trace (`boardTrace`). */
interface BoardSend {
  atMs: number;
  method: string;
  outcome: CallRecord['outcome'];
}

const BOARD_METHODS = new Set(['sendPhoto', 'editMessageMedia']);

/**
 * Runs the scenario once and returns its report (README "rollover").
 * @throws Error on a failed setup (the product does not start, a /start reply never comes)
 */
export async function runRolloverScenario(o: RolloverOptions): Promise<RolloverReport> {
  const started = Date.now();
  const log = o.onProgress ?? ((): void => {});
  const warnings: string[] = [];
  /** Writes a side file of the run (its folder made); one that cannot be written is a warning, never the run's end. */
  const writeAside = (path: string, data: string, what: string): void => {
    try {
      mkdirSync(dirname(resolve(path)), { recursive: true });
      writeFileSync(path, data);
      log(`${what} written to ${path}`);
    } catch (err) {
      warnings.push(`the ${what} could not be written to ${path}: ${err instanceof Error ? err.message : String(err)}`);
    }
  };
  if (!Number.isInteger(o.chats) || o.chats < 1) throw new RangeError(`chats must be a positive integer, got ${o.chats}`);
  if (!Number.isInteger(o.players) || o.players < 1) throw new RangeError(`players must be a positive integer, got ${o.players}`);
  const total = o.chats * o.players;
  if (o.cluster)
    for (const k of ['gateways', 'shards'] as const)
      if (!Number.isInteger(o.cluster[k]) || o.cluster[k] < 1 || o.cluster[k] > 32)
        throw new RangeError(`cluster ${k} must be an integer in 1…32, got ${o.cluster[k]}`);
  if (total > MAX_ROLLOVER_SOCKETS) throw new RangeError(`chats × players = ${total} > ${MAX_ROLLOVER_SOCKETS} sockets in one process`);
  const boardsOn = o.boards ?? true;
  const periodS = o.periodS ?? (o.chats <= 100 ? 30 : 30 + Math.ceil(o.chats / 10));
  const periodMs = Math.round(periodS * 1000);
  const databaseUrl = o.databaseUrl ?? DEFAULT_DATABASE_URL;
  const redisUrl = o.redisUrl ?? DEFAULT_REDIS_URL;
  const connectConcurrency = o.connectConcurrency ?? 200;
  const thinkMs = o.thinkMs ?? [200, 800];
  const perAddress = o.playersPerAddress ?? DEFAULT_PLAYERS_PER_ADDRESS;
  const addresses = Array.from({ length: Math.ceil(total / perAddress) }, (_, i) => `127.0.0.${2 + i}`);

  // CPUs: the product on 0, this process (players + stub) on 1.
  const cpuCount = os.availableParallelism();
  let productCpus: string | null = null;
  let generatorCpus: string | null = null;
  if (o.pin !== false) {
    if (!tasksetPath()) warnings.push('taskset not found: the product ran unpinned');
    else if (cpuCount < 2) warnings.push(`only ${cpuCount} CPU: the product ran unpinned`);
    else {
      productCpus = '0';
      if (pinProcess(process.pid, '1')) generatorCpus = '1';
      else warnings.push('could not pin the generator to CPU 1');
    }
  }

  if (o.contend !== undefined && productCpus === null)
    throw new Error('--contend needs the product pinned (taskset, two CPUs, no --no-pin)');

  const run = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
  const schema = `rollover_${run}`;
  const token = `${700_000_000 + (randomBytes(2).readUInt16BE(0) % 10_000)}:rollover-${randomBytes(12).toString('hex')}`;
  const hookSecret = randomBytes(16).toString('hex');
  const puzzleSecret = `rollover-${randomBytes(8).toString('hex')}`;

  // The run's own send queue and bucket (TELEGRAM_SENDQ_PREFIX): runs and tests on one Redis never share them.
  const sendqPrefix = `rollover:${run}`;

  const avatarMode = o.avatars ?? 'photo';
  const avatarImages = avatarMode === 'photo' ? Array.from({ length: AVATAR_POOL }, (_, i) => sampleAvatar(i + 1)) : [];
  const avatarOf = (userId: number): Uint8Array | null =>
    avatarMode === 'photo' && userId >= PLAYER_ID_BASE ? avatarImages[userId % AVATAR_POOL]! : null;
  // The stub on a thread of its own: the generator's event-loop stalls do not bunch the calls it timestamps.
  const stub = await StubThread.start({ tokens: [token], avatars: { mode: avatarMode, playerIdBase: PLAYER_ID_BASE, pool: AVATAR_POOL } });
  const apiRoot = stub.apiRoot;
  log(
    `stub on ${apiRoot}; starting the product (schema ${schema}, period ${periodS} s${productCpus ? `, taskset -c ${productCpus}` : ', unpinned'})`,
  );
  let product: Product | null = null;
  let sampler: ProductSampler | null = null;
  let stoppedByUs = false;
  const stats = new CrowdStats();
  const chats: ChatOutcome[] = Array.from({ length: o.chats }, () => ({
    players: new Map(),
    lastChangeMs: null,
    firstChangeMs: null,
    changesMs: [],
    unknown: false,
  }));
  const titles = Array.from({ length: o.chats }, (_, i) => `Load chat ${i}`);
  const chatId = (i: number): number => CHAT_ID_BASE - i;
  let puzzle: number | null = null;
  let rolloverAt: number | null = null;
  let report: RolloverReport | null = null;
  let progress: NodeJS.Timeout | null = null;
  // The run's competing load, for at most half an hour whatever becomes of this process.
  const contention: ContendingLoad | null = o.contend ? startContention(o.contend, productCpus!, 1_800_000) : null;
  if (o.contend) log(`a competing load on CPU ${productCpus}: busy ${o.contend.busyMs} ms, idle ${o.contend.idleMs} ms`);
  try {
    const productEnv: Record<string, string> = {
      DATABASE_URL: databaseUrl,
      DATABASE_SCHEMA: schema,
      REDIS_URL: redisUrl,
      NATS_URL: o.cluster ? (o.natsUrl ?? DEFAULT_NATS_URL) : '',
      BUS_SUBJECT_PREFIX: `rollover_${run}`,
      DEMO_ENABLED: 'false',
      TELEGRAM_BOT_TOKEN: token,
      TELEGRAM_WEBHOOK_SECRET: hookSecret,
      TELEGRAM_API_ROOT: apiRoot,
      TELEGRAM_BOT_USERNAME: BOT_USERNAME,
      TELEGRAM_APP_NAME: APP_NAME,
      PUZZLE_PERIOD_MS: String(periodMs),
      PUZZLE_SECRET: puzzleSecret,
      TELEGRAM_SENDQ_PREFIX: sendqPrefix,
      BOARD_RENDER_PREFIX: `${sendqPrefix}:render`,
      BOARDS_ENABLED: boardsOn ? 'true' : 'false',
      ...o.productEnv,
    };
    product = o.cluster
      ? await startClusterProduct(productEnv, o.cluster, productCpus)
      : await startProduct(productEnv, productCpus, o.productCpuProf);
    const prod = product;
    log(
      `product ${prod
        .pids()
        .map((p) => `${p.name} pid ${p.pid}`)
        .join(', ')} on ${prod.urls.join(', ')}`,
    );
    sampler = new ProductSampler(prod);
    sampler.start();

    // 1. /start in every chat, the Mini App links from the bot's replies.
    const links: string[] = new Array<string>(o.chats);
    {
      let next = 0;
      const send = async (): Promise<void> => {
        for (let i = next++; i < o.chats; i = next++) {
          const res = await fetch(`${prod.urls[i % prod.urls.length]}/v1/telegram/webhook`, {
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
      const deadline = Date.now() + 30_000 + (o.chats / 30) * 2_000;
      let have = 0;
      while (have < o.chats) {
        have = 0;
        const missing = Array.from({ length: o.chats }, (_, i) => i).filter((i) => links[i] === undefined);
        const msgs = await stub.messages(missing.map(chatId));
        missing.forEach((i, k) => {
          const m = msgs[k]!.find((x) => x.fromBot && x.kind === 'text' && x.markup.includes('startapp='));
          const url = m && /"url":"([^"]+)"/.exec(m.markup)?.[1];
          if (url) links[i] = url;
        });
        for (let i = 0; i < o.chats; i++) if (links[i] !== undefined) have++;
        if (have === o.chats) break;
        if (Date.now() > deadline)
          throw new Error(
            `only ${have} of ${o.chats} /start replies arrived; the product's last error lines:\n${prod.errorLines().slice(-5).join('\n')}`,
          );
        await sleep(250);
      }
      log(`/start answered in ${o.chats} chats (${((Date.now() - started) / 1000).toFixed(1)} s since start)`);
    }

    // 2. Wait for the next rollover (at least 3 s ahead, for signing).
    let boundary = (Math.floor(Date.now() / periodMs) + 1) * periodMs;
    if (boundary - Date.now() < 3_000) boundary += periodMs;
    puzzle = boundary / periodMs;
    rolloverAt = boundary;
    const nextBoundary = boundary + periodMs;
    const words = fiveLetterWords();
    const answer = answerFor(puzzle, words.answers, puzzleSecret);
    const specs: PlayerSpec[] = [];
    for (let i = 0; i < o.chats; i++) {
      const startParam = new URL(links[i]!).searchParams.get('startapp') ?? '';
      for (let j = 0; j < o.players; j++) {
        const k = i * o.players + j;
        const userId = PLAYER_ID_BASE + k;
        const name = `p${j} c${i}`;
        specs.push({
          chat: i,
          wsBase: prod.urls[k % prod.urls.length]!.replace(/^http/, 'ws'),
          userId,
          name,
          initData: signInitData(
            { user: { id: userId, first_name: name }, chat_type: 'supergroup', start_param: startParam },
            { botToken: token },
          ),
          localAddress: addresses[Math.floor(k / perAddress)]!,
          words: playerWords(answer, words.answers),
        });
      }
    }
    const seqBefore = (await stub.calls()).reduce((m, c) => Math.max(m, c.seq), 0);
    log(`puzzle ${puzzle} starts at ${new Date(boundary).toISOString()} (in ${((boundary - Date.now()) / 1000).toFixed(1)} s)`);
    await sleep(Math.max(0, boundary - Date.now() - 1_000));
    // Setup (start-up, /start) ends here: the loop-stall figure covers the rollover onwards.
    await sampler.openWindow();
    await sleep(Math.max(0, boundary - Date.now() + 100));

    // 3. Every player opens the app and guesses.
    let withBoard = 0;
    progress = setInterval(() => {
      if (boardsOn)
        void stub.boards(chats.map((_, i) => chatId(i))).then(
          (b) => (withBoard = chats.filter((c, i) => c.lastChangeMs !== null && b[i] !== null).length),
          () => undefined,
        );
      const ok = withBoard;
      log(
        `connected ${stats.connected}/${total}, failed ${stats.connectFailed}, sent ${stats.sent}, served ${stats.served}, refused ${stats.refused}, failed ${stats.failed}, done ${stats.done}, chats with a board ${ok}, rss ${sampler?.peakRssMb?.toFixed(0) ?? '–'} MB, stall ${sampler?.maxLoopStallMs?.toFixed(0) ?? '–'} ms, board backlog ${sampler?.backlogLast ?? '–'} drain ${sampler?.drainLast ?? '–'}/s interval ${sampler?.intervalLast ?? '–'} ms`,
      );
    }, 2_000);
    const wsBase = prod.url.replace(/^http/, 'ws');
    await runPlayers(specs, {
      wsBase,
      answer,
      connectConcurrency,
      thinkMs,
      ackTimeoutMs: o.ackTimeoutMs ?? 10_000,
      stopSendingAtMs: nextBoundary - 1_000,
      chats,
      stats,
    });
    log(`guessing done: ${stats.served} served, ${stats.refused} refused, ${stats.failed} failed`);

    // 4. The boards: the render of each chat's final state, then wait until the stub shows it (or the deadline).
    const expected = new Map<number, string>();
    const finalAt = new Map<number, number>();
    const shown = new Map<number, BoardView | undefined>();
    /** Per chat, the last board the stub applied before the next rollover (calls in order; its sha256 prefix): what the chat showed then. */
    const lastPhoto = new Map<number, { photo: string; atMs: number }>();
    const calls: CallRecord[] = [];
    if (boardsOn) {
      // Rendered on one render thread (libs/board RenderPool), not on this event loop: the stub answering
      // the product's calls lives here, and 1,000 renders in a row would hold its answers back by seconds.
      const pool = new RenderPool({ concurrency: 1, maxQueue: o.chats });
      const puzzleNow = puzzle;
      try {
        await Promise.all(
          chats.map(async (c, i) => {
            if (c.lastChangeMs === null || c.unknown) return;
            const state = {
              puzzle: puzzleNow,
              players: Object.fromEntries([...c.players].map(([v, p]) => [v, { marks: p.marks, solved: p.solved, name: p.name }])),
            };
            const board = boardOf(titles[i]!, state);
            const withAvatars = {
              ...board,
              cards: board.cards.map((card) => ({ ...card, avatar: avatarOf(Number(card.id)) ?? undefined })),
            };
            const out = await pool.render(String(i), 1, withAvatars);
            if (out.status !== 'rendered') throw new Error(`the expected board of chat ${i} was not rendered: ${out.status}`);
            expected.set(i, createHash('sha256').update(out.png).digest('hex'));
          }),
        );
      } finally {
        await pool.close();
      }
      const deadline = Math.min(nextBoundary - 500, Date.now() + 30_000 + (o.chats / 24) * 1_000 * 2);
      for (;;) {
        let ok = 0;
        const ids = [...expected.keys()];
        const now = await stub.boards(ids.map(chatId));
        ids.forEach((i, k) => {
          if (now[k]?.sha256 === expected.get(i)) ok++;
        });
        if (ok === expected.size || Date.now() >= deadline || prod.exited()) break;
        await sleep(250);
      }
      // What each chat showed when the wait ended (before the next rollover, whose new puzzle posts fresh boards).
      const views = await stub.boards(Array.from({ length: o.chats }, (_, i) => chatId(i)));
      for (let i = 0; i < o.chats; i++) shown.set(i, views[i] ?? undefined);
      calls.push(...(await stub.calls(seqBefore)).filter((c) => c.atMs < nextBoundary));
      for (const c of calls) {
        if (!BOARD_METHODS.has(c.method) || c.outcome !== 'ok' || c.chatId === undefined || !c.photo) continue;
        const i = CHAT_ID_BASE - c.chatId;
        lastPhoto.set(i, { photo: c.photo, atMs: c.atMs });
        const sha = expected.get(i);
        if (sha?.startsWith(c.photo) && !finalAt.has(i)) {
          finalAt.set(i, c.atMs);
        }
      }
    } else {
      await sleep(2_000);
      calls.push(...(await stub.calls(seqBefore)));
    }
    if (o.boardTrace) {
      const trace = chats.map((c, i) => ({ chat: i, changesMs: c.changesMs, finalAtMs: finalAt.get(i) ?? null, sends: [] as BoardSend[] }));
      for (const c of calls)
        if (BOARD_METHODS.has(c.method) && c.chatId !== undefined)
          trace[CHAT_ID_BASE - c.chatId]?.sends.push({ atMs: c.atMs, method: c.method, outcome: c.outcome });
      writeAside(o.boardTrace, JSON.stringify(trace), 'board trace');
    }
    const boardCallsOff = boardsOn ? 0 : calls.filter((c) => BOARD_METHODS.has(c.method)).length;
    if (boardCallsOff > 0) warnings.push(`BOARDS_ENABLED=false, yet ${boardCallsOff} board calls reached the stub`);
    const evaluatedAt = Date.now();
    if (progress) clearInterval(progress);
    progress = null;

    // 5. Score it.
    let delivered = 0;
    let finalCorrect = 0;
    let duplicates = 0;
    let unverifiable = 0;
    let chatsWithChanges = 0;
    const staleness: number[] = [];
    const slotLag: number[] = [];
    let staleSends = 0;
    const finals: FinalBoard[] = [];
    const boardSendsMs = new Map<number, number[]>();
    for (const c of calls)
      if (BOARD_METHODS.has(c.method) && c.outcome === 'ok' && c.chatId !== undefined) {
        const i = CHAT_ID_BASE - c.chatId;
        const list = boardSendsMs.get(i);
        if (list) list.push(c.atMs);
        else boardSendsMs.set(i, [c.atMs]);
      }
    const changed: Array<{ changesMs: readonly number[] }> = [];
    const samples: string[] = [];
    const pending: Array<[number, number]> = [];
    for (let i = 0; i < o.chats; i++) {
      const c = chats[i]!;
      if (c.lastChangeMs === null) continue;
      chatsWithChanges++;
      if (!boardsOn) continue;
      const b = boardsOn ? shown.get(i) : undefined;
      if (b) delivered++;
      if (b && b.photoMessages > 1) duplicates++;
      if (c.unknown) {
        unverifiable++;
        continue;
      }
      const sha = expected.get(i)!;
      const fin = finalAt.get(i);
      changed.push(c);
      const last = lastPhoto.get(i);
      if (last !== undefined && sha.startsWith(last.photo)) {
        finalCorrect++;
        if (fin !== undefined) {
          const lastMs = c.lastChangeMs;
          staleness.push(fin - lastMs);
          const sends = boardSendsMs.get(i) ?? [];
          if (sends.some((at) => at > lastMs && at < fin)) staleSends++;
          finals.push({ lastChangeMs: lastMs, finalMs: fin, sendsMs: sends });
          slotLag.push(slotLagMs(lastMs, fin, sends));
        }
      } else if (samples.length < 10) {
        samples.push(
          `chat ${i} (${chatId(i)}): ${last ? `last board before the next rollover ${last.photo.slice(0, 12)} at +${last.atMs - c.lastChangeMs} ms after the last change, expected ${sha.slice(0, 12)}` : 'no board before the next rollover'}`,
        );
      }
      pending.push([c.firstChangeMs!, fin ?? evaluatedAt]);
    }
    const idealMs = msSummary(idealStaleness(changed));
    const avatarLag = msSummary(
      avatarsAfterLastChange(
        chats.map((c) => ({
          lastChangeMs: c.unknown ? null : c.lastChangeMs,
          userIds: [...c.players.keys()].map((k) => Number(k.slice(3))),
        })),
        calls.flatMap((c) =>
          c.method === 'file' && c.outcome === 'ok' && c.userId !== undefined ? [{ userId: c.userId, atMs: c.atMs }] : [],
        ),
      ),
    );
    const ideal = { summary: idealMs, floorMs: Math.ceil(idealMs.p95 ?? 0) };
    const sends = (from: number, to: number): number =>
      calls.filter((c) => c.outcome === 'ok' && !UNLIMITED_METHODS.has(c.method) && c.method !== 'file' && c.atMs >= from && c.atMs <= to)
        .length;
    let utilisation: number | null = null;
    let busyWindowMs: number | null = null;
    let allowed: number | null = null;
    if (boardsOn && pending.length > 0) {
      const from = Math.min(...pending.map((p) => p[0]));
      const to = Math.max(...pending.map((p) => p[1]));
      busyWindowMs = to - from;
      allowed = allowedSends(pending);
      utilisation = allowed > 0 ? Math.round((sends(from, to) / allowed) * 1000) / 1000 : null;
    }

    await sampler.stop();
    const st = await stub.stats();
    const rejected = (await stub.calls()).filter((c) => c.outcome === '429').slice(0, 10);
    const stubLag = await stub.lag(rejected.map((c) => c.atMs));
    const duringRun = prod.exited() !== null;
    const exit = prod.exited();
    stoppedByUs = true;
    await prod.stop();
    const errorLines = prod.errorLines();
    if (o.productLog) writeAside(o.productLog, prod.output(), 'product output');
    const byMethod: Record<string, number> = {};
    for (const c of calls) byMethod[c.method] = (byMethod[c.method] ?? 0) + 1;
    const boardsComplete = !boardsOn || (unverifiable === 0 && finalCorrect === chatsWithChanges);
    if (stats.skipped > 0)
      warnings.push(`${stats.skipped} guesses were not sent: the next rollover was less than 1 s away (raise --period-s)`);
    if (boardsOn && sampler.intervalMax === null) warnings.push('crowdplay_board_interval_ms was not found in /metrics');
    if (sampler.maxLoopStallMs === null) warnings.push('crowdplay_event_loop_lag_ms{quantile="max"} was not found in /metrics');
    if (sampler.scrapeErrors > 0) warnings.push(`${sampler.scrapeErrors} /metrics scrapes failed`);
    const targetsOf = (): Record<string, RolloverTarget> => {
      const t = (value: number | null, limit: string, ok: (v: number) => boolean): RolloverTarget => ({
        value,
        limit,
        ok: value !== null && ok(value),
      });
      const stale = msSummary(staleness).p95;
      const interval = sampler!.intervalMax;
      const floorMs = ideal.floorMs;
      return {
        crashes: t(duringRun ? 1 : 0, '= 0', (v) => v === 0),
        telegram429: t(st.rejected429, '= 0', (v) => v === 0),
        finalBoardsWrong: t(chatsWithChanges - finalCorrect, '= 0', (v) => v === 0),
        stalenessP95OverIntervalMs: t(
          stale === null || interval === null ? null : stale - interval,
          `≤ 0 (staleness p95 − the largest crowdplay_board_interval_ms, ${interval ?? '–'} ms)`,
          (v) => v <= 0,
        ),
        stalenessP95OverFloor: t(
          stale === null || floorMs === 0 ? null : Math.round((stale / floorMs) * 1000) / 1000,
          `≤ 1.25 (staleness p95 ÷ boards.stalenessFloorMs, ${floorMs} ms)`,
          (v) => v <= 1.25,
        ),
        utilisation: t(utilisation, '≥ 0.9', (v) => v >= 0.9),
        peakRssMb: t(sampler!.peakRssMb, '≤ 300', (v) => v <= 300),
        maxLoopStallMs: t(sampler!.maxLoopStallMs, '≤ 100', (v) => v <= 100),
        refusedConnections: t(stats.connectFailed, '= 0', (v) => v === 0),
        guessP99Ms: t(summarize(stats.guessUs).p99, '≤ 100', (v) => v <= 100),
      };
    };
    report = {
      scenario: 'rollover',
      command: o.command ?? `runRolloverScenario(${JSON.stringify({ chats: o.chats, players: o.players, periodS, boards: boardsOn })})`,
      startedAt: new Date(started).toISOString(),
      machine: machineInfo(),
      config: {
        chats: o.chats,
        players: o.players,
        periodMs,
        boards: boardsOn,
        noBoardsMode: boardsOn ? null : 'BOARDS_ENABLED=false',
        avatars: avatarMode,
        connectConcurrency,
        thinkMs,
        playersPerAddress: perAddress,
        sourceAddresses: addresses,
        productCpus,
        contend: o.contend ?? null,
        generatorCpus,
        databaseSchema: schema,
        redis: redisUrl.replace(/\/\/[^@]*@/, '//***@'),
        puzzle,
        rolloverAt: new Date(rolloverAt).toISOString(),
      },
      requests: {
        sent: stats.sent,
        served: stats.served,
        refused: stats.refused,
        refusedByCode: stats.refusedByCode,
        failed: stats.failed,
        failedByCode: stats.failedByCode,
      },
      guessesSkipped: stats.skipped,
      marksMismatches: stats.marksMismatches,
      players: {
        requested: total,
        connected: stats.connected,
        failed: stats.connectFailed,
        failedByCode: stats.connectFailedByCode,
        dropped: stats.dropped,
      },
      guessMs: summarize(stats.guessUs),
      actAck: actAckShare(sampler.actAckAtWindow, sampler.actAckLast),
      connectMs: summarize(stats.connectUs),
      guessingS:
        stats.firstOpenMs !== null && stats.lastAnswerMs !== null ? Math.round(stats.lastAnswerMs - stats.firstOpenMs) / 1000 : null,
      peakRssMb: sampler.peakRssMb === null ? null : Math.round(sampler.peakRssMb * 10) / 10,
      memoryPeakMb: { ...sampler.memoryPeakMb },
      rssCluster:
        prod.mode === 'cluster'
          ? {
              peakProcess: sampler.peakRssProcess,
              peakSumMb: sampler.peakRssSumMb === null ? null : Math.round(sampler.peakRssSumMb * 10) / 10,
              byProcess: Object.fromEntries([...sampler.peakRssByProcess].map(([k, v]) => [k, Math.round(v * 10) / 10])),
            }
          : null,
      product: { mode: prod.mode, gateways: prod.shape?.gateways ?? 1, shards: prod.shape?.shards ?? 1 },
      maxLoopStallMs: sampler.maxLoopStallMs === null ? null : Math.round(sampler.maxLoopStallMs * 10) / 10,
      setupLoopStallMs: sampler.setupLoopStallMs === null ? null : Math.round(sampler.setupLoopStallMs * 10) / 10,
      rssAtRolloverMb: sampler.rssAtWindowMb === null ? null : Math.round(sampler.rssAtWindowMb * 10) / 10,
      telegram: {
        calls: st.calls,
        sends: calls.filter((c) => c.outcome === 'ok' && !UNLIMITED_METHODS.has(c.method) && c.method !== 'file').length,
        rejected429: st.rejected429,
        rejected429ByScope: st.rejected429ByScope,
        rejected429Calls: rejected.map((c, k) => ({
          method: c.method,
          chatId: c.chatId ?? null,
          scope: c.scope ?? null,
          atMsAfterRollover: c.atMs - rolloverAt!,
          stubLoopLagMs: stubLag.around[k]!,
        })),
        stubLoopMaxLagMs: stubLag.max,
        sendsPerSecond: perSecond(calls, rolloverAt, (c) => c.outcome === 'ok' && !UNLIMITED_METHODS.has(c.method) && c.method !== 'file'),
        errors: st.errors,
        byMethod,
        utilisation,
        busyWindowMs,
        allowedInWindow: allowed === null ? null : Math.round(allowed * 10) / 10,
      },
      boards: {
        chats: chatsWithChanges,
        delivered,
        finalCorrect,
        unverifiable,
        duplicates,
        stalenessMs: msSummary(staleness),
        stalenessFloorMs: ideal.floorMs,
        idealStalenessMs: ideal.summary,
        avatarAfterLastChangeMs: avatarLag,
        intervalMs: { last: sampler.intervalLast, max: sampler.intervalMax },
        staleSends,
        tail: tailKinds(finals),
        slotLagMs: msSummary(slotLag),
        pipeline: sampler.pipelineLast ? boardPipelineSummary(sampler.pipelineLast) : null,
        samples,
      },
      errorLogLines: errorLines.length,
      targets: boardsOn ? targetsOf() : null,
      errorLogSamples: errorLines.slice(0, 10).map((l) => l.slice(0, 400)),
      productExit: { code: exit?.code ?? null, signal: exit?.signal ?? null, duringRun },
      elapsedS: 0,
      complete:
        !duringRun &&
        stats.failed === 0 &&
        stats.connectFailed === 0 &&
        stats.skipped === 0 &&
        stats.served + stats.refused === stats.sent &&
        boardsComplete,
      warnings,
    };
  } finally {
    contention?.stop();
    if (progress) clearInterval(progress);
    if (sampler) await sampler.stop().catch(() => undefined);
    if (product && !stoppedByUs) await product.stop().catch(() => undefined);
    await stub.close().catch(() => undefined);
    await dropSchema(databaseUrl, schema).catch((err: unknown) => {
      const m = `could not drop schema ${schema}: ${(err as Error).message}`;
      if (report) report.warnings.push(m);
      else log(m);
    });
    if (purgeSendqKeys(redisUrl, `${sendqPrefix}:render`) === null || purgeSendqKeys(redisUrl, sendqPrefix) === null)
      warnings.push(`redis-cli failed or missing: the run's send queue keys {${sendqPrefix}}* were not removed`);
  }
  report.elapsedS = Math.round((Date.now() - started) / 100) / 10;
  log(`done in ${report.elapsedS} s`);
  return report;
}
