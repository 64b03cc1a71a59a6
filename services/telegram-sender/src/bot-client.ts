/**
 * The bot's send queue and Bot API client, built from TELEGRAM_* settings:
 * opened by the telegram-sender (which runs the queue's worker), by each
 * gateway (which enqueues, and sends in one process) and by each
 * board-renderer (which enqueues boards).
 */
import type { Config } from '@crowdplay/config';
import { openSendQueue, type SendQueue } from '@crowdplay/sendq';
import { TelegramClient, type BotCall, type TelegramHooks } from '@crowdplay/telegram';
import type { Telemetry } from '@crowdplay/telemetry';

/** Redis key prefixes of the queues (tests isolate themselves with them). @defaultValue each queue's default */
export interface QueuePrefixes {
  /** The send queue's (libs/sendq DEFAULT_PREFIX). */
  sendq?: string;
  /** The render queue's (DEFAULT_RENDER_PREFIX). */
  render?: string;
}

/**
 * The bot's send queue (in-process, or BullMQ + the Redis Lua bucket with
 * REDIS_URL) and the Bot API client whose every call passes it: what the
 * sender runs, and what a gateway and a board-renderer enqueue on.
 * @param prefixes.sendq the send queue's Redis key prefix (tests) @defaultValue TELEGRAM_SENDQ_PREFIX
 * @param shrinkAvatar a render thread's avatar thumbnailer (where one runs)
 * @param extra.hooks the client's chat lifecycle hooks; `extra.boardsHandedBack`: an undelivered board is handed back to
 *   the scheduler (one process) instead of retried in the queue; `extra.token`: a tenant's own bot's token
 *   (its queue is then under its own `prefixes.sendq`) @defaultValue TELEGRAM_BOT_TOKEN
 * @throws the queue's error when Redis is unreachable
 */
export async function openBot(
  config: Config,
  telemetry: Telemetry,
  prefixes: QueuePrefixes = {},
  shrinkAvatar?: (bytes: Uint8Array) => Promise<Uint8Array | null>,
  extra: { hooks?: TelegramHooks; boardsHandedBack?: boolean; token?: string } = {},
): Promise<{ queue: SendQueue<BotCall>; client: TelegramClient }> {
  const t = config.telegram;
  const queue = await openSendQueue<BotCall>({
    redisUrl: config.redis.url,
    prefix: prefixes.sendq ?? t.sendPrefix,
    limits: { botRatePerS: t.botRatePerS, groupRatePerMin: t.groupRatePerMin, groupBurst: t.groupBurst, chatRatePerS: t.chatRatePerS },
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
    token: extra.token ?? t.botToken,
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
