/**
 * One bot's runtime in a gateway process: its send queue and token bucket
 * (in-process, or BullMQ + the Redis Lua bucket with REDIS_URL), the Bot API
 * client every call passes, its render queue and worker with a render pool
 * (unless a board-renderer service renders), its refresh scheduler and board
 * budget, its live boards, the webhook's shared updates and the bot that
 * handles them. The deployment's bot (TELEGRAM_BOT_TOKEN) and each tenant's
 * own bot get one each (bot-registry.ts): nothing here is shared between two
 * bots, so one bot's 429 pause, backlog or outage never slows another's.
 *
 * A tenant bot's Redis state lives under `<TELEGRAM_SENDQ_PREFIX>:bot:<id>`
 * and `<BOARD_RENDER_PREFIX>:bot:<id>`, its chats are the channels
 * `tb<id>_<chat>`, its board ops go on `tg.boards.<id>`, and its metrics carry
 * the label `bot="<id>"`; the deployment's bot keeps the names it always had.
 */
import { hostname } from 'node:os';
import type { Bus, Subjects } from '@crowdplay/bus';
import { renderCost, type RenderPool, type RenderPoolOptions } from '@crowdplay/board';
import { newRenderPool, openBoardEnds, openRenders, publishingHooks, startRenderWorker, type RenderQueue } from '@crowdplay/board-renderer';
import type { Config } from '@crowdplay/config';
import type { SendQueue } from '@crowdplay/sendq';
import { RedisUpdates, startParamSecret, type BotCall, type SharedUpdates, type TelegramClient } from '@crowdplay/telegram';
import { openBot, type QueuePrefixes } from '@crowdplay/telegram-sender';
import { labelledTelemetry, type Telemetry } from '@crowdplay/telemetry';
import { TelegramBot, type TelegramBotDeps } from './bot-ingress.ts';
import { ChatBoards } from './chat-boards.ts';
import { RedisBoardBudget } from './budget-redis.ts';
import { RefreshScheduler } from './scheduler.ts';
import { RoundResults } from './round-results.ts';

/** The Redis key prefix of a bot's shared webhook updates and board budget, derived from its send queue's. */
export function clusterPrefix(config: Config, prefixes: QueuePrefixes, what: 'updates' | 'budget'): string {
  return `${prefixes.sendq ?? config.telegram.sendPrefix}:${what}`;
}

/**
 * A board handed on and not known delivered or undelivered after this long is handed on again (an end not heard:
 * in the cluster ends travel over Redis pub/sub, which may drop them), ms. Generous: a board waiting in a backlog
 * is only superseded by the new one.
 */
export const BOARD_CONFIRM_TIMEOUT_MS = 60_000;

/** Which bot a runtime runs. */
export interface BotSpec {
  /** A tenant's own bot: its Telegram id. Absent: the deployment's bot (TELEGRAM_BOT_TOKEN). */
  botId?: number;
  /** The tenant its chats' channels and players' wallets belong to. */
  tenantId: string;
  /** Its Bot API token (never logged). */
  token: string;
  /** Its webhook's secret_token. */
  webhookSecret: string;
  /** Its username, without @ (commands addressed to another bot are ignored; the Mini App link). */
  username: string;
}

/** A tenant bot's Redis key prefixes: its own send queue, bucket, updates, budget and render queue. */
export function tenantBotPrefixes(config: Config, botId: number, base: QueuePrefixes = {}): QueuePrefixes {
  return {
    sendq: `${base.sendq ?? config.telegram.sendPrefix}:bot:${botId}`,
    render: `${base.render ?? config.board.renderPrefix}:bot:${botId}`,
  };
}

/** What a running bot is made of. */
export interface TelegramPart {
  /** Which bot (its token included: never log this object). */
  spec: BotSpec;
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
   * shares it under `<its send queue prefix>:updates`), or null (in-process: this gateway alone).
   */
  updates: SharedUpdates | null;
  close(): Promise<void>;
}

/** What a bot runtime needs from the process. */
export interface BotRuntimeDeps {
  config: Config;
  bus: Bus;
  subjects: Subjects;
  telemetry: Telemetry;
  /** Creates a chat's channel for the bot's tenant (store.channels.ensure with the channels quota). */
  ensureChannel: (channel: string, tenantId: string) => Promise<void>;
  /** The router's `migrate(from, to)`: a chat's game state follows it to its supergroup. */
  moveChannel: TelegramBotDeps['moveChannel'];
  /** Also make the Bot API calls (run the send queue's worker). @defaultValue true */
  send?: boolean;
  /** Also render the boards (run the render queue's worker); without REDIS_URL this process always renders. @defaultValue true */
  render?: boolean;
  /** Redis key prefixes of the deployment's bot (tests); a tenant bot's are derived from them. */
  prefixes?: QueuePrefixes;
  /** This gateway's id among the bot's gateways (REDIS_URL: ChatBoards cluster mode). @defaultValue `<host>-<pid>` */
  gatewayId?: string;
}

/**
 * Starts one bot's runtime (see the module doc).
 * @throws the queues' error when Redis is unreachable (what was opened is closed first)
 */
export async function startBotRuntime(deps: BotRuntimeDeps, spec: BotSpec): Promise<TelegramPart> {
  const { config } = deps;
  const t = config.telegram;
  const botId = spec.botId;
  const telemetry = botId === undefined ? deps.telemetry : labelledTelemetry(deps.telemetry, { bot: String(botId) });
  const prefixes = botId === undefined ? (deps.prefixes ?? {}) : tenantBotPrefixes(config, botId, deps.prefixes);
  // Closed in this order (what is open of it when a start fails): boards, updates, budget, renders, pool, then the
  // send queue, so renders in flight still find it, then the board ends.
  const open: Partial<Record<'boards' | 'updates' | 'budget' | 'renders' | 'pool' | 'queue' | 'ends', { close(): unknown }>> = {};
  const closeAll = async (): Promise<void> => {
    open.boards?.close();
    await open.updates?.close();
    await open.budget?.close();
    await open.renders?.close();
    await open.pool?.close();
    await (open.queue as SendQueue<BotCall> | undefined)?.close(5_000);
    await open.ends?.close();
  };
  try {
    // Render threads only where boards are drawn: none with boards off (BOARDS_ENABLED=false; the threads are
    // most of an idle process's memory), none in a gateway that only submits to board-renderer services.
    // A render here draws its chat's newest state when this gateway holds the chat's board (ChatBoards, created below).
    let boardsHere: ChatBoards | null = null;
    const latest: RenderPoolOptions['latest'] = (chatId, version) => boardsHere?.latest(chatId, version) ?? null;
    // A tenant bot renders in the gateways (the board-renderer services serve the deployment's bot's queue).
    const renderHere = !config.redis.url || deps.render !== false || botId !== undefined;
    const pool = config.board.enabled && renderHere ? newRenderPool(config, telemetry, latest) : null;
    if (pool) open.pool = pool;
    // Without REDIS_URL every board's end is seen here (in-process render and send queues): a board that was not
    // delivered goes back to the scheduler, which hands it on again, instead of waiting in the queue's retries.
    // In the cluster a board may be rendered and sent in other processes: the queue retries it, and its end reaches
    // the gateway holding the chat over Redis (board ends) once the retries are over.
    const oneProcess = !config.redis.url;
    const { queue, client } = await openBot(config, telemetry, prefixes, pool ? (bytes) => pool.thumbnail(bytes) : undefined, {
      // A chat that stopped accepting the bot stops its board here (no more renders for it).
      hooks: { onDeactivate: (chatId) => boardsHere?.deactivated(chatId) },
      boardsHandedBack: oneProcess,
      token: spec.token,
    });
    open.queue = queue;
    // A tenant bot's calls are made by the gateways (the telegram-sender service sends for the deployment's bot).
    if (deps.send !== false || botId !== undefined) queue.start(client.sender());
    const renders = await openRenders(config, telemetry, prefixes);
    open.renders = renders;
    // What became of each board (late binding, delivered or not, the chat deactivated) reaches the gateway that holds
    // its chat: this one directly in one process, any one over Redis in the cluster (a tenant bot's under its own
    // render prefix).
    const ends = await openBoardEnds(config, telemetry, prefixes);
    open.ends = ends;
    ends.subscribe((end) => boardsHere?.heard(end));
    if (pool) startRenderWorker(renders, pool, client, publishingHooks(ends), config.board.renderJobsInFlight);
    const scheduler = new RefreshScheduler({
      renderBudgetMsPerS: config.board.renderBudgetMsPerS,
      sendBudgetPerS: config.board.sendBudgetPerS,
      // Each chat's boards as the bucket grants them: its chat interval and its group's burst and rate.
      pacing: { groupRatePerMin: t.groupRatePerMin, groupBurst: t.groupBurst, chatRatePerS: t.chatRatePerS },
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
          prefix: clusterPrefix(config, prefixes, 'budget'),
          sendBudgetPerS: config.board.sendBudgetPerS,
          renderBudgetMsPerS: config.board.renderBudgetMsPerS,
        })
      : null;
    if (budget) open.budget = budget;
    const boards = new ChatBoards({
      bus: deps.bus,
      subjects: deps.subjects,
      client,
      renders,
      scheduler,
      // Boards handed on and not sent yet: waiting to render, and in the send queue's board lane (both bot-wide on Redis).
      backlog: async () => {
        const [rendering, depth] = await Promise.all([renders.backlog(), queue.depth()]);
        return { rendering, sending: depth.board };
      },
      ...(budget ? { budget } : {}),
      // With REDIS_URL several gateways take the webhook: one of them holds each chat's board (docs/telegram.md).
      ...(config.redis.url ? { cluster: { gatewayId: deps.gatewayId ?? `${hostname()}-${process.pid}` } } : {}),
      telemetry,
      enabled: config.board.enabled,
      // The result message of each round that finishes in a chat held here (transactional lane).
      rounds: new RoundResults(client, telemetry),
      ...(botId !== undefined ? { bot: botId } : {}),
    });
    boardsHere = boards;
    boards.start();
    open.boards = boards;
    const updates = config.redis.url
      ? await RedisUpdates.open({
          redisUrl: config.redis.url,
          prefix: clusterPrefix(config, prefixes, 'updates'),
          dedupeTtlMs: t.webhookDedupeTtlMs,
          leaseMs: t.chatLeaseMs,
        })
      : null;
    if (updates) open.updates = updates;
    const bot = new TelegramBot({
      client,
      queue,
      boards,
      ensureChannel: (channel) => deps.ensureChannel(channel, spec.tenantId),
      moveChannel: deps.moveChannel,
      botUsername: spec.username,
      appName: t.appName,
      startSecret: startParamSecret(spec.token),
      telemetry,
      ...(botId !== undefined ? { bot: botId } : {}),
    });
    telemetry.logger.info(
      {
        tenant: spec.tenantId,
        queue: queue.kind,
        bucket: queue.bucket.kind,
        renders: renders.kind,
        renderHere: pool !== null,
        apiRoot: t.apiRoot,
      },
      botId === undefined ? 'Telegram is on' : `tenant bot @${spec.username} is on`,
    );
    return { spec, bot, boards, client, queue, renders, pool, updates, close: closeAll };
  } catch (err) {
    await closeAll().catch(() => undefined);
    throw err;
  }
}
