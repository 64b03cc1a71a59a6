/**
 * Tenants' own bots' webhooks: `POST /v1/telegram/webhook/<bot id>` (the bot
 * id is Telegram's, the number before the token's colon), each checked
 * against its own bot's secret and queued in its own intake
 * (telegram-webhook.ts `webhookIntake`: its own de-duplication, queue and
 * shared order). A path naming no registered bot is answered 404
 * CP_ERR_TELEGRAM_BOT_UNKNOWN, a request with another bot's secret 401
 * CP_ERR_AUTH_INVALID; both are counted and nothing is queued. The
 * deployment's bot keeps `POST /v1/telegram/webhook`.
 */
import type { FastifyInstance } from 'fastify';
import { isCrowdplayError } from '@crowdplay/protocol';
import { labelledTelemetry, type Telemetry } from '@crowdplay/telemetry';
import { TELEGRAM_WEBHOOK_PATH, webhookIntake, type TelegramWebhookOptions, type WebhookIntake } from './telegram-webhook.ts';

/** A tenant bot's webhook as its runtime serves it: the same object while the bot is unchanged. */
export interface TenantBotWebhook {
  /** The bot's webhook secret_token. */
  secret: string;
  handle: TelegramWebhookOptions['handle'];
  /** REDIS_URL: the bot's shared de-duplication and per-chat order. */
  shared?: TelegramWebhookOptions['shared'];
}

/** The tenants' bots as the gateway sees them (services/telegram's BotRegistry, wired in services/cli compose.ts). */
export interface TenantBots {
  /**
   * The bot's webhook (its runtime started on first use).
   * @throws CrowdplayError CP_ERR_TELEGRAM_BOT_UNKNOWN when no bot has this id; any other error is answered 500
   */
  webhook(botId: number): Promise<TenantBotWebhook>;
  /** Every tenant bot that may have signed a Mini App's initData: id, tenant and token. */
  miniAppBots(): Promise<ReadonlyArray<{ botId: number; tenantId: string; token: string }>>;
}

/** The path of a tenant bot's webhook (what its setWebhook URL ends with). */
export function tenantBotWebhookPath(botId: number): string {
  return `${TELEGRAM_WEBHOOK_PATH}/${botId}`;
}

/**
 * Registers `POST /v1/telegram/webhook/:bot`.
 * @param opts.limits the intake limits every bot gets (TELEGRAM_WEBHOOK_MAX_QUEUED, _DEDUPE_SIZE: each per bot)
 * @returns `drain()`: every bot's intake drained (see {@link WebhookIntake.drain})
 */
export function registerTenantBotWebhooks(
  app: FastifyInstance,
  opts: {
    bots: TenantBots;
    telemetry: Telemetry;
    maxQueued?: number;
    dedupeSize?: number;
    bodyLimitBytes?: number;
  },
): { drain(): Promise<void> } {
  const { telemetry } = opts;
  const intakes = new Map<number, { hook: TenantBotWebhook; intake: WebhookIntake }>();
  const retired = new Set<WebhookIntake>();
  const unknown = (reply: import('fastify').FastifyReply, bot: string): import('fastify').FastifyReply => {
    telemetry.refusals.refuse('telegram', 'CP_ERR_TELEGRAM_BOT_UNKNOWN', { route: 'webhook', bot: bot.slice(0, 32) });
    return reply
      .status(404)
      .send({ code: 'CP_ERR_TELEGRAM_BOT_UNKNOWN', message: `no Telegram bot ${bot.slice(0, 32)} is registered here` });
  };
  app.post<{ Params: { bot: string } }>(
    `${TELEGRAM_WEBHOOK_PATH}/:bot`,
    { bodyLimit: opts.bodyLimitBytes ?? 1_048_576 },
    async (req, reply) => {
      const raw = req.params.bot;
      const botId = /^[1-9]\d{0,15}$/.test(raw) ? Number(raw) : null;
      if (botId === null || !Number.isSafeInteger(botId)) return unknown(reply, raw);
      let hook: TenantBotWebhook;
      try {
        hook = await opts.bots.webhook(botId);
      } catch (err) {
        if (isCrowdplayError(err, 'CP_ERR_TELEGRAM_BOT_UNKNOWN')) return unknown(reply, raw);
        telemetry.logger.error({ err, bot: botId }, 'tenant bot webhook: the bot could not be started (Telegram re-delivers)');
        return reply.status(500).send({ code: 'CP_ERR_INTERNAL', message: 'update not taken' });
      }
      let entry = intakes.get(botId);
      if (entry?.hook !== hook) {
        // A new or changed bot (its secret or token): a new intake; the old one finishes what it queued.
        if (entry) {
          const old = entry.intake;
          retired.add(old);
          void old.drain().finally(() => retired.delete(old));
        }
        entry = {
          hook,
          intake: webhookIntake({
            secret: hook.secret,
            handle: hook.handle,
            telemetry: labelledTelemetry(telemetry, { bot: String(botId) }),
            ...(opts.maxQueued !== undefined ? { maxQueued: opts.maxQueued } : {}),
            ...(opts.dedupeSize !== undefined ? { dedupeSize: opts.dedupeSize } : {}),
            ...(hook.shared ? { shared: hook.shared } : {}),
          }),
        };
        intakes.set(botId, entry);
      }
      return entry.intake.accept(req, reply);
    },
  );
  return {
    async drain() {
      await Promise.all([...[...intakes.values()].map((e) => e.intake.drain()), ...[...retired].map((i) => i.drain())]);
    },
  };
}
