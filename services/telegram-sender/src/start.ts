/**
 * The `telegram-sender` service: the bot's send queue worker on its own,
 * making every Bot API call the gateways and board-renderers enqueue.
 */
import type { Config } from '@crowdplay/config';
import { CrowdplayError } from '@crowdplay/protocol';
import type { Telemetry } from '@crowdplay/telemetry';
import { openBot } from './bot-client.ts';

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
