import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { CrowdplayError, labelProblem } from '@crowdplay/protocol';
import type { Db } from './db.ts';

/** A tenant as the services see it. `signingSecret` verifies viewer JWTs (HS256). */
export interface Tenant {
  id: string;
  name: string;
  apiKeyPrefix: string;
  signingSecret: string;
  createdAt: Date;
}

/** The one time the API key is visible: at create and rotate. */
export interface TenantCredentials {
  tenant: Tenant;
  apiKey: string;
}

interface Row {
  id: string;
  name: string;
  api_key_prefix: string;
  signing_secret: string;
  created_at: Date;
}

const TENANT_ID_RE = /^[A-Za-z0-9_-]{1,64}$/;

/** Most code points in a tenant's name (shown as text in `crowdplay tenant list` and logs). */
export const TENANT_NAME_MAX = 100;

/**
 * Why `name` cannot be a tenant's name, or undefined: the rules of display labels (libs/protocol `labelProblem`:
 * not blank, no control or bidi-override character) within TENANT_NAME_MAX code points, since it is printed to
 * operators' terminals as it is.
 */
export function tenantNameProblem(name: string): string | undefined {
  const why = labelProblem(name, TENANT_NAME_MAX);
  return why === undefined ? undefined : `tenant name ${why}`;
}

/** Why `id` cannot be a tenant's id, or undefined: 1–64 ASCII letters, digits, `_` or `-`. */
export function tenantIdProblem(id: string): string | undefined {
  return TENANT_ID_RE.test(id) ? undefined : 'a tenant id is 1–64 ASCII letters, digits, _ or -';
}

/**
 * Why `id` cannot be a new tenant's id, or undefined: {@link tenantIdProblem}'s rule, and a first character that is a
 * letter or a digit (an id starting with "-" reads as an option on every command line that names it).
 */
export function newTenantIdProblem(id: string): string | undefined {
  return tenantIdProblem(id) ?? (/^[A-Za-z0-9]/.test(id) ? undefined : 'a new tenant id starts with a letter or a digit');
}

/** SHA-256 of an API key (keys are 192-bit random, so no stretching is needed). */
export function hashApiKey(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest();
}

/** A new API key: `cpk_<tenant>_<48 hex chars>` (192 random bits). */
export function newApiKey(tenantId: string): string {
  return `cpk_${tenantId}_${randomBytes(24).toString('hex')}`;
}

/** A new signing secret: 256 random bits, base64url. */
export function newSigningSecret(): string {
  return randomBytes(32).toString('base64url');
}

function toTenant(r: Row): Tenant {
  return { id: r.id, name: r.name, apiKeyPrefix: r.api_key_prefix, signingSecret: r.signing_secret, createdAt: r.created_at };
}

const COLS = 'id, name, api_key_prefix, signing_secret, created_at';

/** Tenants with hashed API keys. */
export class TenantRepository {
  constructor(private readonly db: Db) {}

  /**
   * Creates a tenant with a fresh API key and signing secret.
   * @throws TypeError for an invalid id or name (tenantIdProblem, tenantNameProblem; nothing written); the pg unique-violation error
   *   (23505) when it exists.
   */
  async create(id: string, name: string): Promise<TenantCredentials> {
    const why = newTenantIdProblem(id) ?? tenantNameProblem(name);
    if (why) throw new TypeError(why);
    const apiKey = newApiKey(id);
    const { rows } = await this.db.query<Row>(
      `INSERT INTO tenants (id, name, api_key_hash, api_key_prefix, signing_secret) VALUES ($1, $2, $3, $4, $5) RETURNING ${COLS}`,
      [id, name, hashApiKey(apiKey), apiKey.slice(0, 12), newSigningSecret()],
    );
    return { tenant: toTenant(rows[0]!), apiKey };
  }

  /**
   * Creates tenant `id` with a fresh API key and signing secret unless it exists (the Telegram bot's tenant:
   * its players sign in with initData, so nobody needs the key; `crowdplay tenant rotate-key` issues one).
   * Never changes an existing tenant.
   * @returns whether this call created it
   * @throws TypeError for an invalid id (tenantIdProblem; nothing written)
   */
  async ensure(id: string, name: string): Promise<boolean> {
    const why = tenantIdProblem(id);
    if (why) throw new TypeError(why);
    const apiKey = newApiKey(id);
    const { rowCount } = await this.db.query(
      `INSERT INTO tenants (id, name, api_key_hash, api_key_prefix, signing_secret) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING`,
      [id, name, hashApiKey(apiKey), apiKey.slice(0, 12), newSigningSecret()],
    );
    return (rowCount ?? 0) > 0;
  }

  /**
   * Creates or updates a tenant with the given key and secret (standalone's dev
   * tenant, whose credentials are settings).
   */
  async upsert(id: string, name: string, apiKey: string, signingSecret: string): Promise<Tenant> {
    const { rows } = await this.db.query<Row>(
      `INSERT INTO tenants (id, name, api_key_hash, api_key_prefix, signing_secret) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, api_key_hash = EXCLUDED.api_key_hash,
         api_key_prefix = EXCLUDED.api_key_prefix, signing_secret = EXCLUDED.signing_secret
       RETURNING ${COLS}`,
      [id, name, hashApiKey(apiKey), apiKey.slice(0, 12), signingSecret],
    );
    return toTenant(rows[0]!);
  }

  /**
   * Replaces a tenant's API key; the old one stops working at once.
   * @throws CrowdplayError CP_ERR_TENANT_UNKNOWN
   */
  async rotateKey(id: string): Promise<TenantCredentials> {
    const apiKey = newApiKey(id);
    const { rows } = await this.db.query<Row>(
      `UPDATE tenants SET api_key_hash = $2, api_key_prefix = $3, key_rotated_at = now() WHERE id = $1 RETURNING ${COLS}`,
      [id, hashApiKey(apiKey), apiKey.slice(0, 12)],
    );
    if (rows.length === 0) throw new CrowdplayError('CP_ERR_TENANT_UNKNOWN', [id]);
    return { tenant: toTenant(rows[0]!), apiKey };
  }

  /**
   * Replaces a tenant's signing secret; viewer tokens signed with the old one
   * stop verifying once gateways' tenant caches expire (5 s).
   * @returns the tenant with its new secret
   * @throws CrowdplayError CP_ERR_TENANT_UNKNOWN
   */
  async rotateSecret(id: string): Promise<Tenant> {
    const { rows } = await this.db.query<Row>(`UPDATE tenants SET signing_secret = $2 WHERE id = $1 RETURNING ${COLS}`, [
      id,
      newSigningSecret(),
    ]);
    if (rows.length === 0) throw new CrowdplayError('CP_ERR_TENANT_UNKNOWN', [id]);
    return toTenant(rows[0]!);
  }

  /** Every tenant, by id. */
  async list(): Promise<Tenant[]> {
    const { rows } = await this.db.query<Row>(`SELECT ${COLS} FROM tenants ORDER BY id`);
    return rows.map(toTenant);
  }

  /** The tenant with this id, or null. */
  async get(id: string): Promise<Tenant | null> {
    const { rows } = await this.db.query<Row>(`SELECT ${COLS} FROM tenants WHERE id = $1`, [id]);
    return rows[0] ? toTenant(rows[0]) : null;
  }

  /** The tenant whose API key this is, or null (looked up by hash; compared in constant time). */
  async byApiKey(apiKey: string): Promise<Tenant | null> {
    const hash = hashApiKey(apiKey);
    const { rows } = await this.db.query<Row & { api_key_hash: Buffer }>(
      `SELECT ${COLS}, api_key_hash FROM tenants WHERE api_key_hash = $1`,
      [hash],
    );
    const r = rows[0];
    if (!r || !timingSafeEqual(r.api_key_hash, hash)) return null;
    return toTenant(r);
  }
}
