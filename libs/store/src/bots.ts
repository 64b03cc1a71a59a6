/**
 * A tenant's own Telegram bots (`tenant_bots`): registered by `crowdplay tenant
 * bot set`, read by each gateway's bot registry. The token and the webhook
 * secret arrive here already encrypted (libs/telegram `BotSecretBox`): this
 * repository never sees them in clear. The number of bots a tenant holds is
 * its `bots` quota (TENANT_MAX_BOTS or its override), checked exactly under a
 * per-tenant advisory lock, as the channels quota is.
 */
import { CrowdplayError } from '@crowdplay/protocol';
import type { Db } from './db.ts';
import { TenantQuotaError } from './quotas.ts';

/** The advisory lock class of a tenant's bot registrations (pg_advisory_xact_lock(class, hashtext(tenant))). */
export const BOT_QUOTA_LOCK = 0x63_70_71_62; // 'cpqb'

/** A registered bot as stored (secrets encrypted). */
export interface TenantBotRow {
  /** Telegram's id of the bot (getMe `id`, the token's number before the colon). */
  botId: number;
  tenantId: string;
  /** The bot's username without @ (getMe `username`). */
  username: string;
  /** The token, encrypted (`BotSecretBox.seal`). */
  tokenEnc: string;
  /** The webhook's secret_token, encrypted. */
  webhookSecretEnc: string;
  createdAt: Date;
  updatedAt: Date;
}

interface Row {
  bot_id: string;
  tenant_id: string;
  username: string;
  token_enc: string;
  webhook_secret_enc: string;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = 'bot_id, tenant_id, username, token_enc, webhook_secret_enc, created_at, updated_at';

function fromRow(r: Row): TenantBotRow {
  return {
    botId: Number(r.bot_id),
    tenantId: r.tenant_id,
    username: r.username,
    tokenEnc: r.token_enc,
    webhookSecretEnc: r.webhook_secret_enc,
    createdAt: new Date(r.created_at),
    updatedAt: new Date(r.updated_at),
  };
}

/** True when `id` is a Telegram bot id: a positive safe integer. */
export function isBotId(id: unknown): id is number {
  return typeof id === 'number' && Number.isSafeInteger(id) && id > 0;
}

/** The tenants' bots. */
export class BotRepository {
  constructor(private readonly db: Db) {}

  /**
   * Registers a bot for `tenantId`, or replaces its token, secret and username when the tenant has it already
   * (a token rotated at @BotFather keeps the bot id). A new bot counts against the tenant's `bots` quota (its
   * override, else `defaultMax`). One transaction: nothing changes when it throws.
   * @returns the row as stored and whether it was new
   * @throws CrowdplayError CP_ERR_TENANT_UNKNOWN, CP_ERR_TELEGRAM_BOT_TAKEN (another tenant's bot),
   *   TenantQuotaError CP_ERR_TENANT_QUOTA (a new bot past the quota), CP_ERR_PROTO_INVALID (a bad bot id)
   */
  async register(
    tenantId: string,
    bot: { botId: number; username: string; tokenEnc: string; webhookSecretEnc: string },
    defaultMax: number,
  ): Promise<{ row: TenantBotRow; created: boolean }> {
    if (!isBotId(bot.botId))
      throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`bot id must be a positive integer, got ${String(bot.botId)}`]);
    return this.db.tx(async (q) => {
      const t = await q.query('SELECT 1 FROM tenants WHERE id = $1', [tenantId]);
      if (t.rows.length === 0) throw new CrowdplayError('CP_ERR_TENANT_UNKNOWN', [tenantId]);
      await q.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [BOT_QUOTA_LOCK, tenantId]);
      const held = await q.query<{ tenant_id: string }>('SELECT tenant_id FROM tenant_bots WHERE bot_id = $1 FOR UPDATE', [bot.botId]);
      const owner = held.rows[0]?.tenant_id;
      if (owner !== undefined && owner !== tenantId) throw new CrowdplayError('CP_ERR_TELEGRAM_BOT_TAKEN', [bot.botId, 'another tenant']);
      if (owner === undefined) {
        const { rows } = await q.query<{ n: string; lim: string }>(
          `SELECT (SELECT count(*) FROM tenant_bots WHERE tenant_id = $1) AS n,
                  COALESCE((SELECT max_bots FROM tenant_quotas WHERE tenant_id = $1), $2::bigint) AS lim`,
          [tenantId, defaultMax],
        );
        const limit = Number(rows[0]!.lim);
        if (Number(rows[0]!.n) >= limit) throw new TenantQuotaError(tenantId, 'bots', limit);
      }
      const { rows } = await q.query<Row>(
        `INSERT INTO tenant_bots (bot_id, tenant_id, username, token_enc, webhook_secret_enc)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (bot_id) DO UPDATE SET username = EXCLUDED.username, token_enc = EXCLUDED.token_enc,
           webhook_secret_enc = EXCLUDED.webhook_secret_enc, updated_at = now()
         RETURNING ${COLUMNS}`,
        [bot.botId, tenantId, bot.username, bot.tokenEnc, bot.webhookSecretEnc],
      );
      return { row: fromRow(rows[0]!), created: owner === undefined };
    });
  }

  /** The bot with this id, or null. */
  async get(botId: number): Promise<TenantBotRow | null> {
    if (!isBotId(botId)) return null;
    const { rows } = await this.db.query<Row>(`SELECT ${COLUMNS} FROM tenant_bots WHERE bot_id = $1`, [botId]);
    return rows[0] ? fromRow(rows[0]) : null;
  }

  /** The tenant's bots (every tenant's when `tenantId` is absent), by bot id. */
  async list(tenantId?: string): Promise<TenantBotRow[]> {
    const { rows } =
      tenantId === undefined
        ? await this.db.query<Row>(`SELECT ${COLUMNS} FROM tenant_bots ORDER BY bot_id`)
        : await this.db.query<Row>(`SELECT ${COLUMNS} FROM tenant_bots WHERE tenant_id = $1 ORDER BY bot_id`, [tenantId]);
    return rows.map(fromRow);
  }

  /**
   * Removes the tenant's bot (its chats' channels and wallets stay, as the tenant's).
   * @throws CrowdplayError CP_ERR_TELEGRAM_BOT_UNKNOWN when the tenant has no such bot (nothing changes)
   */
  async remove(tenantId: string, botId: number): Promise<void> {
    const r = await this.db.query('DELETE FROM tenant_bots WHERE tenant_id = $1 AND bot_id = $2', [tenantId, isBotId(botId) ? botId : 0]);
    if ((r.rowCount ?? 0) === 0) throw new CrowdplayError('CP_ERR_TELEGRAM_BOT_UNKNOWN', [botId]);
  }
}
