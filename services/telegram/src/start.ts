/**
 * The Telegram part of a process (gateway side): the deployment's bot
 * (TELEGRAM_BOT_TOKEN, the default tenant's: TELEGRAM_TENANT_ID) as one bot
 * runtime (bot-runtime.ts). Off (null) without TELEGRAM_BOT_TOKEN. Tenants'
 * own bots run beside it in the bot registry (bot-registry.ts). The
 * `telegram-sender` and `board-renderer` services are packages of their own.
 */
import type { Bus, Subjects } from '@crowdplay/bus';
import { defaultConfig, type Config } from '@crowdplay/config';
import { CrowdplayError } from '@crowdplay/protocol';
import type { QueuePrefixes } from '@crowdplay/telegram-sender';
import type { Telemetry } from '@crowdplay/telemetry';
import type { TelegramBotDeps } from './bot-ingress.ts';
import { startBotRuntime, type TelegramPart } from './bot-runtime.ts';

export { BOARD_CONFIRM_TIMEOUT_MS, clusterPrefix, type TelegramPart } from './bot-runtime.ts';

/**
 * Starts the deployment's bot, or returns null (and logs it) when TELEGRAM_BOT_TOKEN is empty.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID when the token is set without TELEGRAM_WEBHOOK_SECRET
 */
export async function startTelegram(deps: {
  config: Config;
  bus: Bus;
  subjects: Subjects;
  telemetry: Telemetry;
  /** Creates a chat's channel for TELEGRAM_TENANT_ID. */
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
  const part = await startBotRuntime(
    {
      ...deps,
      ensureChannel: (channel) => deps.ensureChannel(channel),
    },
    { tenantId: t.tenantId, token: t.botToken, webhookSecret: t.webhookSecret, username: t.botUsername },
  );
  // The daily answers are keyed by PUZZLE_SECRET: with the published default anyone can compute them.
  if (config.puzzle.secret === defaultConfig().puzzle.secret) {
    telemetry.logger.warn('PUZZLE_SECRET is its published default: anyone can compute the daily answers; set your own');
  }
  return part;
}
