/**
 * Tenants' own Telegram bots in a gateway process: the bot registry
 * (services/telegram `BotRegistry`) reading `tenant_bots` (libs/store) and
 * opening the secrets with TELEGRAM_BOT_SECRETS_KEY, and the view the gateway
 * takes of it (its webhooks at /v1/telegram/webhook/<bot id>, its Mini App
 * sessions).
 */
import type { Config } from '@crowdplay/config';
import type { TenantBots, TenantBotWebhook } from '@crowdplay/gateway';
import type { Store, TenantBotRow } from '@crowdplay/store';
import { BotSecretBox, botSecretsKey } from '@crowdplay/telegram';
import { BotRegistry, type BotRuntimeDeps, type TelegramPart, type TenantBotSpec } from '@crowdplay/telegram-service';

/**
 * The box that seals and opens bot secrets with TELEGRAM_BOT_SECRETS_KEY (the published dev key in a dev deployment).
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID when the key is unset outside dev (or malformed)
 */
export function botSecretBox(config: Config): { box: BotSecretBox; dev: boolean } {
  const { key, dev } = botSecretsKey(config.telegram.botSecretsKey, {
    mode: config.mode,
    host: config.http.host,
    databaseUrl: config.db.url,
  });
  return { box: new BotSecretBox(key), dev };
}

/**
 * A stored bot with its secrets opened.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID (no key outside dev, or secrets that do not open with it)
 */
export function openTenantBot(config: Config, row: TenantBotRow): TenantBotSpec {
  const { box } = botSecretBox(config);
  return {
    botId: row.botId,
    tenantId: row.tenantId,
    username: row.username,
    token: box.open(row.botId, row.tokenEnc),
    webhookSecret: box.open(row.botId, row.webhookSecretEnc),
  };
}

/** The registry of this gateway's tenant bots and the gateway's view of it. */
export function tenantBotRegistry(
  store: Store,
  deps: Omit<BotRuntimeDeps, 'ensureChannel'>,
): { registry: BotRegistry; gatewayView: TenantBots } {
  const { config } = deps;
  const registry = new BotRegistry({
    ...deps,
    ensureChannel: async (channel, tenantId) => void (await store.channels.ensure(channel, tenantId, config.quota.channels)),
    read: async (botId) => {
      const row = await store.bots.get(botId);
      return row ? openTenantBot(config, row) : null;
    },
    readAll: async () => {
      const rows = await store.bots.list();
      return rows.length === 0 ? [] : rows.map((r) => openTenantBot(config, r));
    },
    readIds: async () => new Set((await store.bots.list()).map((r) => r.botId)),
    cacheMs: config.telegram.botsCacheMs,
  });
  // One webhook object per runtime: the gateway starts a new intake when it changes (a new secret or token).
  const hooks = new WeakMap<TelegramPart, TenantBotWebhook>();
  const gatewayView: TenantBots = {
    async webhook(botId) {
      const part = await registry.get(botId);
      let hook = hooks.get(part);
      if (!hook) {
        const bot = part.bot;
        hook = { secret: part.spec.webhookSecret, handle: (u) => bot.handle(u), ...(part.updates ? { shared: part.updates } : {}) };
        hooks.set(part, hook);
      }
      return hook;
    },
    async miniAppBots() {
      return (await registry.specs()).map((s) => ({ botId: s.botId, tenantId: s.tenantId, token: s.token }));
    },
  };
  return { registry, gatewayView };
}
