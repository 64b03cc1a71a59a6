/**
 * The Telegram part of a process (gateway side): the send queue (in-process,
 * or BullMQ + the Redis Lua bucket with REDIS_URL), the Bot API client every
 * call passes, the render queue (in-process, or BullMQ with REDIS_URL) and
 * its worker with the render pool (unless a board-renderer service renders),
 * the refresh scheduler, the live boards and the bot that handles the
 * webhook's updates. Off (null) without TELEGRAM_BOT_TOKEN. Also the
 * `telegram-sender` and `board-renderer` services.
 */
import { hostname } from 'node:os';
import type { Bus, Subjects } from '@crowdplay/bus';
import { RenderPool, renderCost, type RenderPoolOptions } from '@crowdplay/board';
import type { Config } from '@crowdplay/config';
import { CrowdplayError } from '@crowdplay/protocol';
import { openSendQueue, type EnqueueResult, type SendQueue } from '@crowdplay/sendq';
import { RedisUpdates, TelegramClient, startParamSecret, type BotCall, type SharedUpdates, type TelegramHooks } from '@crowdplay/telegram';
import type { Telemetry } from '@crowdplay/telemetry';
import { TelegramBot, type TelegramBotDeps } from './bot.ts';
import { ChatBoards } from './chat-boards.ts';
import { openRenderQueue } from './render-queue-open.ts';
import type { RenderQueue } from './render-queue.ts';
import { RedisBoardBudget } from './budget-redis.ts';
import { RefreshScheduler } from './scheduler.ts';

/**
 * The bot's send queue (in-process, or BullMQ + the Redis Lua bucket with
 * REDIS_URL) and the Bot API client whose every call passes it.
 */
async function openBot(
  config: Config,
  telemetry: Telemetry,
  prefixes: QueuePrefixes = {},
  shrinkAvatar?: (bytes: Uint8Array) => Promise<Uint8Array | null>,
  extra: { hooks?: TelegramHooks; boardsHandedBack?: boolean } = {},
): Promise<{ queue: SendQueue<BotCall>; client: TelegramClient }> {
  const t = config.telegram;
  const queue = await openSendQueue<BotCall>({
    redisUrl: config.redis.url,
    prefix: prefixes.sendq ?? t.sendPrefix,
    limits: { botRatePerS: t.botRatePerS, groupRatePerMin: t.groupRatePerMin, chatRatePerS: t.chatRatePerS },
    concurrency: t.sendConcurrency,
    botBookMs: t.sendBookMs,
    maxQueued: t.sendMaxQueued,
    // A lost post is looked for by probing message ids after a repost: more than the default 3 requeues (libs/telegram docs).
    maxRequeues: 6,
    metrics: telemetry.metrics,
    refusals: telemetry.refusals,
    logger: telemetry.logger,
    pauseErrorAfterMs: t.sendPauseErrorAfterS * 1000,
    onError: (err, context) => telemetry.logger.error({ err, context }, 'send queue error'),
  });
  const client = new TelegramClient({
    token: t.botToken,
    apiRoot: t.apiRoot.replace(/\/$/, ''),
    queue,
    avatars: {
      concurrency: t.avatarConcurrency,
      cacheBytes: t.avatarCacheBytes,
      ttlMs: t.avatarTtlMs,
      ...(shrinkAvatar ? { shrink: shrinkAvatar } : {}),
    },
    txUnreachedDeadlineMs: t.txUnreachedDeadlineMs,
    ...(extra.hooks ? { hooks: extra.hooks } : {}),
    ...(extra.boardsHandedBack ? { boardsHandedBack: true } : {}),
    onError: (err) => telemetry.logger.error({ err }, 'telegram client error'),
    callMs: telemetry.metrics.histogram('crowdplay_telegram_call_ms'),
  });
  client.exportMetrics(telemetry.metrics);
  return { queue, client };
}

/** Redis key prefixes of the queues (tests isolate themselves with them). @defaultValue each queue's default */
export interface QueuePrefixes {
  /** The send queue's (libs/sendq DEFAULT_PREFIX). */
  sendq?: string;
  /** The render queue's (DEFAULT_RENDER_PREFIX). */
  render?: string;
}

/** The Redis key prefix of the bot's shared webhook updates and board budget, derived from the send queue's. */
export function clusterPrefix(config: Config, prefixes: QueuePrefixes, what: 'updates' | 'budget'): string {
  return `${prefixes.sendq ?? config.telegram.sendPrefix}:${what}`;
}

/** The render queue chosen by REDIS_URL (in-process, or BullMQ), not started. */
function openRenders(config: Config, telemetry: Telemetry, prefixes: QueuePrefixes = {}): Promise<RenderQueue> {
  return openRenderQueue({
    redisUrl: config.redis.url,
    prefix: prefixes.render ?? config.board.renderPrefix,
    maxQueue: config.board.renderMaxQueue,
    maxJobBytes: config.board.renderMaxJobBytes,
    metrics: telemetry.metrics,
    refusals: telemetry.refusals,
    onError: (err, context) => telemetry.logger.error({ err, context }, 'board render queue error'),
  });
}

/**
 * Starts the render worker on `renders`: a RenderPool (BOARD_RENDER_CONCURRENCY
 * threads behind its semaphore) whose PNGs go to the send queue through
 * `client.enqueueBoard` (lane `board`, a newer board superseding a queued one).
 * @param hooks.onQueued the send queue's answer for each board (a gateway's `ChatBoards.queued`: late binding,
 *   and whether the board was delivered); `hooks.onFailed`: a board not handed on (its render threw)
 * @param jobConcurrency BOARD_RENDER_JOBS_IN_FLIGHT (BullMQ) @defaultValue the pool's concurrency
 */
export function startRenderWorker(
  renders: RenderQueue,
  pool: RenderPool,
  client: TelegramClient,
  hooks: {
    onQueued?: (chatId: number, version: number, r: EnqueueResult) => void;
    onFailed?: (chatId: number, version: number) => void;
  } = {},
  jobConcurrency?: number,
): void {
  const { onQueued, onFailed } = hooks;
  renders.start({
    pool,
    ...(jobConcurrency !== undefined ? { jobConcurrency } : {}),
    ...(onFailed ? { onFailed } : {}),
    onRendered: async (chatId, version, png) => {
      const r = await client.enqueueBoard(chatId, { version, png });
      onQueued?.(chatId, version, r);
      return r;
    },
  });
}

/**
 * A RenderPool of BOARD_RENDER_CONCURRENCY threads at BOARD_RENDER_NICE (BOARD_MAX_PNG_BYTES, BOARD_RENDER_MAX_QUEUE).
 * @param latest the pool's late binding (a gateway's ChatBoards.latest: a render draws its chat's newest state)
 */
function newRenderPool(config: Config, telemetry: Telemetry, latest?: RenderPoolOptions['latest']): RenderPool {
  return new RenderPool({
    ...(latest ? { latest } : {}),
    ...(config.board.renderConcurrency > 0 ? { concurrency: config.board.renderConcurrency } : {}),
    threadNice: config.board.renderNice,
    maxPngBytes: config.board.maxPngBytes,
    maxQueue: config.board.renderMaxQueue,
    metrics: telemetry.metrics,
    refusals: telemetry.refusals,
  });
}

/** Telegram's pacing of one group: 20 sends a minute → one every 3 s. */
export const GROUP_MIN_INTERVAL_MS = 3_000;

/**
 * In one process (no REDIS_URL), a board handed on and not known delivered or undelivered after this long is
 * handed on again (an end not heard), ms. Generous: a board waiting in a backlog is
 * only superseded by the new one.
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
  // In the cluster a board may be rendered and sent in other processes: the queue keeps retrying it.
  const oneProcess = !config.redis.url;
  const { queue, client } = await openBot(config, telemetry, deps.prefixes, pool ? (bytes) => pool.thumbnail(bytes) : undefined, {
    // A chat that stopped accepting the bot stops its board here (no more renders for it).
    hooks: { onDeactivate: (chatId) => boardsHere?.deactivated(chatId) },
    boardsHandedBack: oneProcess,
  });
  if (deps.send !== false) queue.start(client.sender());
  const renders = await openRenders(config, telemetry, deps.prefixes);
  // Each board's send-queue answer tells this gateway's scheduler: late binding (drawn newer than handed on),
  // delivered or not, or the chat deactivated.
  if (pool)
    startRenderWorker(
      renders,
      pool,
      client,
      {
        onQueued: (chatId, version, r) => boardsHere?.queued(chatId, version, r),
        onFailed: (chatId, version) => boardsHere?.notHandedOn(chatId, version),
      },
      config.board.renderJobsInFlight,
    );
  const scheduler = new RefreshScheduler({
    renderBudgetMsPerS: config.board.renderBudgetMsPerS,
    sendBudgetPerS: config.board.sendBudgetPerS,
    minIntervalMs: GROUP_MIN_INTERVAL_MS,
    costMs: (cards) => renderCost(cards).ms,
    maxBacklog: config.board.maxBacklog,
    confirmTimeoutMs: oneProcess ? BOARD_CONFIRM_TIMEOUT_MS : 0,
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
    },
  };
}

/**
 * The `telegram-sender` service: the send queue's worker alone (BullMQ on
 * REDIS_URL, the Redis Lua bucket): it makes every Bot API call the gateways
 * enqueue.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID without TELEGRAM_BOT_TOKEN or REDIS_URL
 */
export async function startTelegramSender(deps: { config: Config; telemetry: Telemetry }): Promise<{ close(): Promise<void> }> {
  const { config, telemetry } = deps;
  const t = config.telegram;
  if (!t.botToken) throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['TELEGRAM_BOT_TOKEN: the telegram-sender needs the bot token']);
  if (!config.redis.url) {
    throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['REDIS_URL: the telegram-sender takes its jobs from the BullMQ queue on Redis']);
  }
  const { queue, client } = await openBot(config, telemetry);
  queue.start(client.sender());
  telemetry.logger.info({ queue: queue.kind, bucket: queue.bucket.kind }, 'telegram-sender is sending');
  return { close: () => queue.close(5_000) };
}

/**
 * The `board-renderer` service: the render queue's worker alone (BullMQ on
 * REDIS_URL): it takes the render jobs the gateways submit, renders them in
 * its RenderPool (BOARD_RENDER_CONCURRENCY threads behind the semaphore) and
 * queues each PNG on the bot's send queue (BullMQ; a `telegram-sender` or a
 * gateway sends it).
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID without TELEGRAM_BOT_TOKEN or REDIS_URL
 */
export async function startBoardRenderer(deps: {
  config: Config;
  telemetry: Telemetry;
  /** Redis key prefixes (tests). */
  prefixes?: QueuePrefixes;
}): Promise<{ renders: RenderQueue; pool: RenderPool; close(): Promise<void> }> {
  const { config, telemetry } = deps;
  if (!config.telegram.botToken) {
    throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['TELEGRAM_BOT_TOKEN: the board-renderer queues the boards for the bot']);
  }
  if (!config.redis.url) {
    throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [
      'REDIS_URL: the board-renderer takes its jobs from the BullMQ render queue on Redis',
    ]);
  }
  const { queue, client } = await openBot(config, telemetry, deps.prefixes);
  let renders: RenderQueue;
  try {
    renders = await openRenders(config, telemetry, deps.prefixes);
  } catch (err) {
    await queue.close(1_000);
    throw err;
  }
  const pool = newRenderPool(config, telemetry);
  startRenderWorker(renders, pool, client, {}, config.board.renderJobsInFlight);
  telemetry.logger.info({ renders: renders.kind, concurrency: pool.concurrency, queue: queue.kind }, 'board-renderer is rendering');
  return {
    renders,
    pool,
    async close() {
      await renders.close();
      await pool.close();
      await queue.close(5_000);
    },
  };
}
