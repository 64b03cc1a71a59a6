import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Db } from './db.ts';

/** A read-only watch token as the store keeps it (the token itself is never stored, only its hash). */
export interface WatchToken {
  /** `wt_` + 16 base64url characters: names the token in the tenant's listing and its revocation. */
  id: string;
  tenantId: string;
  /** The one channel it opens. */
  channel: string;
  /** The tenant's note (e.g. "OBS main scene"), at most 100 characters; '' when none. */
  label: string;
  createdAt: Date;
  expiresAt: Date;
  /** When it was revoked, or null. */
  revokedAt: Date | null;
}

/** A token just minted: the one time its text is visible. */
export interface MintedWatchToken {
  row: WatchToken;
  token: string;
}

/** What a watch token's text starts with (viewer tokens are JWTs, API keys start `cpk_`). */
export const WATCH_TOKEN_PREFIX = 'cpw_';

/** True when `token` has the shape of a watch token (`cpw_` + 43 base64url characters). */
export function isWatchToken(token: string | null | undefined): token is string {
  return typeof token === 'string' && /^cpw_[A-Za-z0-9_-]{43}$/.test(token);
}

/** SHA-256 of a watch token. */
export function hashWatchToken(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

interface Row {
  id: string;
  tenant_id: string;
  channel_id: string;
  label: string;
  created_at: Date;
  expires_at: Date;
  revoked_at: Date | null;
}

const COLS = 'id, tenant_id, channel_id, label, created_at, expires_at, revoked_at';

function toWatchToken(r: Row): WatchToken {
  return {
    id: r.id,
    tenantId: r.tenant_id,
    channel: r.channel_id,
    label: r.label,
    createdAt: new Date(r.created_at),
    expiresAt: new Date(r.expires_at),
    revokedAt: r.revoked_at === null ? null : new Date(r.revoked_at),
  };
}

/** Read-only watch tokens (migrations/…_watch_tokens.sql). Callers check the channel's tenant first. */
export class WatchTokenRepository {
  constructor(private readonly db: Db) {}

  /**
   * Mints a token for `channel` of `tenantId`, valid `ttlS` seconds from now (the database's clock).
   * @throws the pg foreign-key error (23503) for an unknown tenant or channel
   */
  async create(tenantId: string, channel: string, ttlS: number, label = ''): Promise<MintedWatchToken> {
    const token = `${WATCH_TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`;
    const id = `wt_${randomBytes(12).toString('base64url')}`;
    const { rows } = await this.db.query<Row>(
      `INSERT INTO watch_tokens (id, tenant_id, channel_id, label, token_hash, expires_at)
       VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6::bigint)) RETURNING ${COLS}`,
      [id, tenantId, channel, label, hashWatchToken(token), ttlS],
    );
    return { row: toWatchToken(rows[0]!), token };
  }

  /** Tokens of `channel` that are neither revoked nor expired. */
  async countLive(tenantId: string, channel: string): Promise<number> {
    const { rows } = await this.db.query<{ n: string }>(
      `SELECT count(*) AS n FROM watch_tokens
       WHERE tenant_id = $1 AND channel_id = $2 AND revoked_at IS NULL AND expires_at > now()`,
      [tenantId, channel],
    );
    return Number(rows[0]?.n ?? 0);
  }

  /**
   * A page of the tenant's tokens (revoked and expired ones included), by id: those after `after`, at most `limit`.
   * @param channel only this channel's, when given
   */
  async list(tenantId: string, opts: { channel?: string; after?: string; limit: number }): Promise<WatchToken[]> {
    const { rows } = await this.db.query<Row>(
      `SELECT ${COLS} FROM watch_tokens
       WHERE tenant_id = $1 AND ($2::text IS NULL OR channel_id = $2) AND ($3::text IS NULL OR id > $3)
       ORDER BY id LIMIT $4`,
      [tenantId, opts.channel ?? null, opts.after ?? null, opts.limit],
    );
    return rows.map(toWatchToken);
  }

  /**
   * Revokes token `id` of `tenantId` (again: no change, the first revocation time stays).
   * @returns the token, or null when the tenant has no token with this id
   */
  async revoke(tenantId: string, id: string): Promise<WatchToken | null> {
    const { rows } = await this.db.query<Row>(
      `UPDATE watch_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 AND tenant_id = $2 RETURNING ${COLS}`,
      [id, tenantId],
    );
    return rows[0] ? toWatchToken(rows[0]) : null;
  }

  /** The token whose text this is, or null (looked up by hash; compared in constant time). Revoked and expired ones too. */
  async byToken(token: string): Promise<(WatchToken & { expired: boolean }) | null> {
    const hash = hashWatchToken(token);
    const { rows } = await this.db.query<Row & { token_hash: Buffer; expired: boolean }>(
      `SELECT ${COLS}, token_hash, expires_at <= now() AS expired FROM watch_tokens WHERE token_hash = $1`,
      [hash],
    );
    const r = rows[0];
    if (!r || !timingSafeEqual(Buffer.from(r.token_hash), hash)) return null;
    return { ...toWatchToken(r), expired: r.expired };
  }

  /** Those of `ids` that no longer open a socket, and why: `revoked` (or gone), `expired`. */
  async inactive(ids: readonly string[]): Promise<Array<{ id: string; reason: 'revoked' | 'expired' }>> {
    if (ids.length === 0) return [];
    const { rows } = await this.db.query<{ id: string; revoked: boolean; expired: boolean }>(
      `SELECT id, revoked_at IS NOT NULL AS revoked, expires_at <= now() AS expired FROM watch_tokens WHERE id = ANY($1::text[])`,
      [ids],
    );
    const found = new Map(rows.map((r) => [r.id, r]));
    const out: Array<{ id: string; reason: 'revoked' | 'expired' }> = [];
    for (const id of ids) {
      const r = found.get(id);
      if (!r || r.revoked) out.push({ id, reason: 'revoked' });
      else if (r.expired) out.push({ id, reason: 'expired' });
    }
    return out;
  }
}
