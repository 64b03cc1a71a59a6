/**
 * `crowdplay tenant bot set <tenant> --token TOKEN --webhook-secret SECRET`: registers a tenant's own Telegram bot
 * (or replaces the token and secret of one it has); `tenant bot list <tenant>`; `tenant bot remove <tenant> <bot id>`.
 *
 * `set` refuses, before it stores anything: a token or secret of the wrong shape (CP_ERR_PROTO_INVALID), no
 * TELEGRAM_BOT_SECRETS_KEY outside dev (CP_ERR_CONFIG_INVALID), an unknown tenant (CP_ERR_TENANT_UNKNOWN), a token
 * Telegram's getMe does not accept (CP_ERR_TELEGRAM_BOT_REJECTED, asked through TELEGRAM_API_ROOT; no answer from it:
 * CP_ERR_TELEGRAM_UNREACHABLE, retryable), the
 * deployment's own bot or another tenant's (CP_ERR_TELEGRAM_BOT_TAKEN), a new bot past the tenant's `bots` quota
 * (CP_ERR_TENANT_QUOTA). The token and the secret are stored encrypted and never printed.
 */
import type { Config } from '@crowdplay/config';
import { CrowdplayError } from '@crowdplay/protocol';
import { isBotId, type Store } from '@crowdplay/store';
import { botIdOfToken, fetchBotIdentity, WEBHOOK_SECRET_RE } from '@crowdplay/telegram';
import { tenantBotWebhookPath } from '@crowdplay/gateway';
import { botSecretBox } from './tenant-bots.ts';

/** What `tenant bot set` was given. */
export interface BotSetInput {
  token: string | undefined;
  webhookSecret: string | undefined;
}

/**
 * Checks `set`'s flags before anything is opened or asked.
 * @throws CrowdplayError CP_ERR_PROTO_INVALID naming the flag (never echoing the token)
 */
export function parseBotSetFlags(input: BotSetInput): { token: string; webhookSecret: string } {
  if (input.token === undefined || botIdOfToken(input.token) === null)
    throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['--token must be the bot token @BotFather gave (<digits>:<letters>)']);
  if (input.webhookSecret === undefined || !WEBHOOK_SECRET_RE.test(input.webhookSecret))
    throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['--webhook-secret must be 1-256 characters of A-Z a-z 0-9 _ -']);
  return { token: input.token, webhookSecret: input.webhookSecret };
}

/**
 * `tenant bot set`: checks the token with getMe, then stores the bot (secrets sealed) within the tenant's quota.
 * @param opts.fetch the fetch getMe goes through (tests) @defaultValue globalThis.fetch
 * @returns the lines to print
 * @throws CrowdplayError (see the module doc); nothing is stored when it throws
 */
export async function tenantBotSet(
  store: Store,
  config: Config,
  tenant: string,
  input: { token: string; webhookSecret: string },
  opts: { fetch?: typeof globalThis.fetch } = {},
): Promise<string> {
  const { box, dev } = botSecretBox(config);
  if (!(await store.tenants.get(tenant))) throw new CrowdplayError('CP_ERR_TENANT_UNKNOWN', [tenant]);
  const me = await fetchBotIdentity(config.telegram.apiRoot, input.token, opts.fetch ? { fetch: opts.fetch } : {});
  if (config.telegram.botToken && botIdOfToken(config.telegram.botToken) === me.id)
    throw new CrowdplayError('CP_ERR_TELEGRAM_BOT_TAKEN', [me.id, "this deployment (it is TELEGRAM_BOT_TOKEN's bot)"]);
  const { row, created } = await store.bots.register(
    tenant,
    {
      botId: me.id,
      username: me.username,
      tokenEnc: box.seal(me.id, input.token),
      webhookSecretEnc: box.seal(me.id, input.webhookSecret),
    },
    config.quota.bots,
  );
  return (
    `tenant:       ${row.tenantId}\nbot:          @${row.username} (id ${row.botId}) ${created ? 'registered' : 'updated'}\n` +
    `webhook path: ${tenantBotWebhookPath(row.botId)}\n` +
    `(give Telegram https://<public host>${tenantBotWebhookPath(row.botId)} with this secret_token: setWebhook, docs/guides/telegram-bot.md)\n` +
    (dev ? 'warning: TELEGRAM_BOT_SECRETS_KEY is unset: the secrets are sealed with the published dev key\n' : '')
  );
}

/** `tenant bot list`: one line per bot of the tenant (never a secret). */
export async function tenantBotList(store: Store, tenant: string): Promise<string> {
  if (!(await store.tenants.get(tenant))) throw new CrowdplayError('CP_ERR_TENANT_UNKNOWN', [tenant]);
  const bots = await store.bots.list(tenant);
  if (bots.length === 0) return `(tenant ${tenant} has no bots)\n`;
  return bots.map((b) => `${b.botId}\t@${b.username}\t${tenantBotWebhookPath(b.botId)}\t${b.updatedAt.toISOString()}\n`).join('');
}

/**
 * A bot id as the command line gives it (`tenant bot remove <tenant> <bot id>`).
 * @throws CrowdplayError CP_ERR_PROTO_INVALID when it is not a positive integer of at most 16 digits
 */
export function parseBotId(raw: string): number {
  const botId = /^\d{1,16}$/.test(raw) ? Number(raw) : NaN;
  if (!isBotId(botId)) throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`a bot id is a positive integer, got "${raw.slice(0, 32)}"`]);
  return botId;
}

/**
 * `tenant bot remove`: the bot's webhook is refused from then on (within TELEGRAM_BOTS_CACHE_MS); its chats'
 * channels and players' wallets stay the tenant's.
 * @throws CrowdplayError CP_ERR_PROTO_INVALID (not a bot id), CP_ERR_TELEGRAM_BOT_UNKNOWN (the tenant has no such bot)
 */
export async function tenantBotRemove(store: Store, tenant: string, rawBotId: string): Promise<string> {
  const botId = parseBotId(rawBotId);
  await store.bots.remove(tenant, botId);
  return `tenant: ${tenant}\nbot:    ${botId} removed\n`;
}
