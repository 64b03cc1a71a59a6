/**
 * The Telegram part of a process (gateway side): the send queue (in-process,
 * or BullMQ + the Redis Lua bucket with REDIS_URL), the Bot API client every
 * call passes, the render queue (in-process, or BullMQ with REDIS_URL) and
 * its worker with the render pool (unless a board-renderer service renders),
 * the refresh scheduler, the live boards and the bot that handles the
 * webhook's updates. Off (null) without TELEGRAM_BOT_TOKEN. The
 * `telegram-sender` and `board-renderer` services are packages of their own.
 */
import { hostname } from 'node:os';
import type { Bus, Subjects } from '@crowdplay/bus';
import { renderCost, type RenderPool, type RenderPoolOptions } from '@crowdplay/board';
import { newRenderPool, openBoardEnds, openRenders, publishingHooks, startRenderWorker, type RenderQueue } from '@crowdplay/board-renderer';
import { defaultConfig, type Config } from '@crowdplay/config';
import { CrowdplayError } from '@crowdplay/protocol';
import type { SendQueue } from '@crowdplay/sendq';
import { RedisUpdates, startParamSecret, type BotCall, type SharedUpdates, type TelegramClient } from '@crowdplay/telegram';
import { openBot, type QueuePrefixes } from '@crowdplay/telegram-sender';
import type { Telemetry } from '@crowdplay/telemetry';
import { TelegramBot, type TelegramBotDeps } from './bot-ingress.ts';
import { ChatBoards } from './chat-boards.ts';
import { RedisBoardBudget } from './budget-redis.ts';
import { RefreshScheduler } from './scheduler.ts';
import { RoundResults } from './round-results.ts';

/** The Redis key prefix of the bot's shared webhook updates and board budget, derived from the send queue's. */
export function clusterPrefix(config: Config, prefixes: QueuePrefixes, what: 'updates' | 'budget'): string {
  return `${prefixes.sendq ?? config.telegram.sendPrefix}:${what}`;
}

/** Telegram's pacing of one group: 20 sends a minute → one every 3 s. */
export const GROUP_MIN_INTERVAL_MS = 3_000;

/**
 * A board handed on and not known delivered or undelivered after this long is handed on again (an end not heard:
 * in the cluster ends travel over Redis pub/sub, which may drop them), ms. Generous: a board waiting in a backlog
 * is only superseded by the new one.
 */
export const BOARD_CONFIRM_TIMEOUT_MS = 60_000;

export interface TelegramPart {
  bot: TelegramBot;
  boards: ChatBoards;
  client: TelegramClient;
  queue: SendQueue<BotCall>;
  /** Where the live boards submit renders. */
  renders: RenderQueue;
  /** This process's render pool, or null when boards are off or a board-renderer service renders (BullMQ, BOARD_RENDER_IN_PROCESS=false). */
  pool: RenderPool | null;
  /**
   * The webhook's shared de-duplication and per-chat order (REDIS_URL: every gateway of the bot
   * shares it under `<TELEGRAM_SENDQ_PREFIX>:updates`), or null (in-process: this gateway alone).
   */
  updates: SharedUpdates | null;
  close(): Promise<void>;
}

/**
 * Starts the Telegram part, or returns null (and logs it) when TELEGRAM_BOT_TOKEN is empty.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID when the token is set without TELEGRAM_WEBHOOK_SECRET
 */
export async function startTelegram(deps: {
  config: Config;
  bus: Bus;
  subjects: Subjects;
  telemetry: Telemetry;
  ensureChannel: (channel: string) => Promise<void>;
  /** The router's `migrate(from, to)`: a chat's game state follows it to its supergroup. */
  moveChannel: TelegramBotDeps['moveChannel'];
  /**
   * Also make the Bot API calls (run the send queue's worker). Standalone:
   * true. A gateway beside a separate `telegram-sender` service (BullMQ on
   * REDIS_URL): false — it only enqueues. @defaultValue true
   */
  send?: boolean;
  /**
   * Also render the boards (run the render queue's worker). Standalone: true.
   * A gateway beside `board-renderer` services (BullMQ on REDIS_URL, and
   * BOARD_RENDER_IN_PROCESS=false): false — it only submits. Without REDIS_URL
   * the render queue is in-process and this process always renders.
   * @defaultValue true
   */
  render?: boolean;
  /** Redis key prefixes (tests). */
  prefixes?: QueuePrefixes;
  /** This gateway's id among the bot's gateways (REDIS_URL: ChatBoards cluster mode). @defaultValue `<host>-<pid>` */
  gatewayId?: string;
}): Promise<TelegramPart | null> {
  const { config, telemetry } = deps;
  const t = config.telegram;
  if (!t.botToken) {
    telemetry.logger.info('Telegram is off: TELEGRAM_BOT_TOKEN is not set');
    return null;
  }
  if (!t.webhookSecret) {
    throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [
      'TELEGRAM_WEBHOOK_SECRET: required when TELEGRAM_BOT_TOKEN is set (the webhook checks it)',
    ]);
  }
  // Render threads only where boards are drawn: none with boards off (BOARDS_ENABLED=false; the threads are
  // most of an idle process's memory), none in a gateway that only submits to board-renderer services.
  // A render here draws its chat's newest state when this gateway holds the chat's board (ChatBoards, created below).
  let boardsHere: ChatBoards | null = null;
  const latest: RenderPoolOptions['latest'] = (chatId, version) => boardsHere?.latest(chatId, version) ?? null;
  const pool = config.board.enabled && (!config.redis.url || deps.render !== false) ? newRenderPool(config, telemetry, latest) : null;
  // Avatars are kept as the 24 px thumbnails a card draws, shrunk on a render thread (a gateway without
  // render threads keeps the photos as Telegram serves them).
  // Without REDIS_URL every board's end is seen here (in-process render and send queues): a board that was not
  // delivered goes back to the scheduler, which hands it on again, instead of waiting in the queue's retries.
  // In the cluster a board may be rendered and sent in other processes: the queue retries it, and its end reaches
  // the gateway holding the chat over Redis (board ends) once the retries are over.
  const oneProcess = !config.redis.url;
  const { queue, client } = await openBot(config, telemetry, deps.prefixes, pool ? (bytes) => pool.thumbnail(bytes) : undefined, {
    // A chat that stopped accepting the bot stops its board here (no more renders for it).
    hooks: { onDeactivate: (chatId) => boardsHere?.deactivated(chatId) },
    boardsHandedBack: oneProcess,
  });
  if (deps.send !== false) queue.start(client.sender());
  const renders = await openRenders(config, telemetry, deps.prefixes);
  // What became of each board (late binding, delivered or not, the chat deactivated) reaches the gateway that holds
  // its chat: this one directly in one process, any one over Redis in the cluster.
  const ends = await openBoardEnds(config, telemetry, deps.prefixes);
  ends.subscribe((end) => boardsHere?.heard(end));
  if (pool) startRenderWorker(renders, pool, client, publishingHooks(ends), config.board.renderJobsInFlight);
  const scheduler = new RefreshScheduler({
    renderBudgetMsPerS: config.board.renderBudgetMsPerS,
    sendBudgetPerS: config.board.sendBudgetPerS,
    minIntervalMs: GROUP_MIN_INTERVAL_MS,
    costMs: (cards, rounds) => renderCost(cards, rounds).ms,
    maxBacklog: config.board.maxBacklog,
    // The send budget is a floor: boards also take the slots replies leave idle, kept BOARD_SEND_AHEAD_MS ahead.
    aheadMs: config.board.sendAheadMs,
    botRatePerS: t.botRatePerS,
    // A board whose end is never heard (pub/sub delivers at most once) is handed on again.
    confirmTimeoutMs: BOARD_CONFIRM_TIMEOUT_MS,
  });
  // With REDIS_URL the send and render budgets are the bot's, shared by every gateway (docs/telegram.md).
  const budget = config.redis.url
    ? await RedisBoardBudget.open({
        redisUrl: config.redis.url,
        prefix: clusterPrefix(config, deps.prefixes ?? {}, 'budget'),
        sendBudgetPerS: config.board.sendBudgetPerS,
        renderBudgetMsPerS: config.board.renderBudgetMsPerS,
      })
    : null;
  const boards = new ChatBoards({
    bus: deps.bus,
    subjects: deps.subjects,
    client,
    renders,
    scheduler,
    // Boards handed on and not sent yet: waiting to render, and in the send queue's board lane (both bot-wide on Redis).
    backlog: async () => renders.stats().queued + (await queue.depth()).board,
    ...(budget ? { budget } : {}),
    // With REDIS_URL several gateways take the webhook: one of them holds each chat's board (docs/telegram.md).
    ...(config.redis.url ? { cluster: { gatewayId: deps.gatewayId ?? `${hostname()}-${process.pid}` } } : {}),
    telemetry,
    enabled: config.board.enabled,
    // The result message of each round that finishes in a chat held here (transactional lane).
    rounds: new RoundResults(client, telemetry),
  });
  boardsHere = boards;
  boards.start();
  const updates = config.redis.url
    ? await RedisUpdates.open({
        redisUrl: config.redis.url,
        prefix: clusterPrefix(config, deps.prefixes ?? {}, 'updates'),
        dedupeTtlMs: t.webhookDedupeTtlMs,
        leaseMs: t.chatLeaseMs,
      })
    : null;
  const bot = new TelegramBot({
    client,
    queue,
    boards,
    ensureChannel: deps.ensureChannel,
    moveChannel: deps.moveChannel,
    botUsername: t.botUsername,
    appName: t.appName,
    startSecret: startParamSecret(t.botToken),
    telemetry,
  });
  telemetry.logger.info(
    { queue: queue.kind, bucket: queue.bucket.kind, renders: renders.kind, renderHere: pool !== null, apiRoot: t.apiRoot },
    'Telegram is on',
  );
  // The daily answers are keyed by PUZZLE_SECRET: with the published default anyone can compute them.
  if (config.puzzle.secret === defaultConfig().puzzle.secret) {
    telemetry.logger.warn('PUZZLE_SECRET is its published default: anyone can compute the daily answers; set your own');
  }
  return {
    bot,
    boards,
    client,
    queue,
    renders,
    pool,
    updates,
    async close() {
      boards.close();
      await updates?.close();
      await budget?.close();
      await renders.close();
      await pool?.close();
      await queue.close(5_000);
      await ends.close();
    },
  };
}
