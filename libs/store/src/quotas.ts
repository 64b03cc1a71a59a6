import { CrowdplayError } from '@crowdplay/protocol';
import type { Db, Queryable } from './db.ts';
import { textArray } from './array-params.ts';

/** The quotas a tenant has (docs/decisions/0030-tenant-quotas.md). */
export const QUOTA_NAMES = ['channels', 'connections', 'intentsPerS', 'grantPointsPerDay', 'bots'] as const;
export type QuotaName = (typeof QUOTA_NAMES)[number];

/** A value for each quota. */
export type Quotas = Record<QuotaName, number>;

/** A tenant's overrides: a quota that is absent (or null) takes the deployment-wide default. */
export type QuotaOverrides = Partial<Record<QuotaName, number>>;

/** A change of overrides: a number sets one, null removes it (back to the default), absent leaves it. */
export type QuotaPatch = Partial<Record<QuotaName, number | null>>;

/** The largest quota value Postgres and a JS number both hold exactly. */
export const MAX_QUOTA = Number.MAX_SAFE_INTEGER;

const COLUMN: Record<QuotaName, string> = {
  channels: 'max_channels',
  connections: 'max_connections',
  intentsPerS: 'max_intents_per_s',
  grantPointsPerDay: 'max_grant_points_per_day',
  bots: 'max_bots',
};

/**
 * The advisory lock class of a tenant's channel creation (pg_advisory_xact_lock(class, hashtext(tenant))):
 * two creations of the same tenant's channels take turns, so the count each sees includes the other's row.
 */
export const CHANNEL_QUOTA_LOCK = 0x63_70_71_63; // 'cpqc'

interface Row {
  max_channels: string | null;
  max_connections: string | null;
  max_intents_per_s: string | null;
  max_grant_points_per_day: string | null;
  max_bots: string | null;
}

/** A refusal of a tenant over one of its quotas: CP_ERR_TENANT_QUOTA with the tenant and the quota to count it by. */
export class TenantQuotaError extends CrowdplayError {
  constructor(
    readonly tenant: string,
    readonly quota: QuotaName,
    readonly limit: number,
  ) {
    super('CP_ERR_TENANT_QUOTA', [tenant, quota, limit]);
  }
}

/** True when `v` is a quota value: an integer 0..MAX_QUOTA. */
export function isQuotaValue(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

/** The quota of each name: the override when there is one, else the default. */
export function effectiveQuotas(defaults: Quotas, overrides: QuotaOverrides): Quotas {
  const out = { ...defaults };
  for (const q of QUOTA_NAMES) if (overrides[q] !== undefined) out[q] = overrides[q];
  return out;
}

/** The UTC day of `at` as `YYYY-MM-DD` (the grants quota's period). */
export function utcDay(at: Date): string {
  return at.toISOString().slice(0, 10);
}

/**
 * Per-tenant quota overrides (`tenant_quotas`) and the grant points each
 * tenant was given per UTC day (`tenant_grant_days`). The defaults are
 * settings (TENANT_MAX_*): callers pass them in.
 */
export class QuotaRepository {
  constructor(private readonly db: Db) {}

  /**
   * The tenant's overrides (empty when it has none).
   * @throws CrowdplayError CP_ERR_TENANT_UNKNOWN
   */
  async overrides(tenantId: string): Promise<QuotaOverrides> {
    const { rows } = await this.db.query<Row & { id: string }>(
      `SELECT t.id, q.max_channels, q.max_connections, q.max_intents_per_s, q.max_grant_points_per_day, q.max_bots
       FROM tenants t LEFT JOIN tenant_quotas q ON q.tenant_id = t.id WHERE t.id = $1`,
      [tenantId],
    );
    const r = rows[0];
    if (!r) throw new CrowdplayError('CP_ERR_TENANT_UNKNOWN', [tenantId]);
    const out: QuotaOverrides = {};
    for (const q of QUOTA_NAMES) {
      const v = r[COLUMN[q] as keyof Row];
      if (v !== null) out[q] = Number(v);
    }
    return out;
  }

  /**
   * Sets or removes overrides, one statement; nothing changes when it throws.
   * @returns the overrides after the change
   * @throws CrowdplayError CP_ERR_PROTO_INVALID (a value that is not an integer 0..2^53-1), CP_ERR_TENANT_UNKNOWN
   */
  async set(tenantId: string, patch: QuotaPatch): Promise<QuotaOverrides> {
    const names = QUOTA_NAMES.filter((q) => patch[q] !== undefined);
    for (const q of names) {
      const v = patch[q];
      if (v !== null && !isQuotaValue(v))
        throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`${q} must be an integer 0..${MAX_QUOTA}, got ${String(v)}`]);
    }
    if (names.length > 0) {
      const cols = names.map((q) => COLUMN[q]);
      const { rowCount } = await this.db.query(
        `INSERT INTO tenant_quotas (tenant_id, ${cols.join(', ')})
         SELECT id, ${cols.map((_, i) => `$${i + 2}::bigint`).join(', ')} FROM tenants WHERE id = $1
         ON CONFLICT (tenant_id) DO UPDATE SET ${cols.map((c) => `${c} = EXCLUDED.${c}`).join(', ')}, updated_at = now()`,
        [tenantId, ...names.map((q) => patch[q])],
      );
      if ((rowCount ?? 0) === 0) throw new CrowdplayError('CP_ERR_TENANT_UNKNOWN', [tenantId]);
    }
    return this.overrides(tenantId);
  }

  /** Every override, by tenant (tenants without one are left out). */
  async all(): Promise<Map<string, QuotaOverrides>> {
    const { rows } = await this.db.query<Row & { tenant_id: string }>(
      'SELECT tenant_id, max_channels, max_connections, max_intents_per_s, max_grant_points_per_day, max_bots FROM tenant_quotas ORDER BY tenant_id',
    );
    const out = new Map<string, QuotaOverrides>();
    for (const r of rows) {
      const o: QuotaOverrides = {};
      for (const q of QUOTA_NAMES) {
        const v = r[COLUMN[q] as keyof Row];
        if (v !== null) o[q] = Number(v);
      }
      out.set(r.tenant_id, o);
    }
    return out;
  }

  /**
   * Reserves `points` of the tenant's grant quota for `day`, exactly: one conditional upsert whose row lock
   * serialises concurrent reservations, so two gateways never pass the quota together. The quota is the
   * tenant's override, else `defaultMax`.
   * @returns `allowed` with the points used that day after this call (unchanged when refused) and the quota
   */
  async reserveGrantPoints(
    tenantId: string,
    points: number,
    defaultMax: number,
    day: string,
  ): Promise<{ allowed: boolean; used: number; limit: number }> {
    const { rows } = await this.db.query<{ points: string; lim: string }>(
      `WITH lim AS (
         SELECT COALESCE((SELECT max_grant_points_per_day FROM tenant_quotas WHERE tenant_id = $1), $3::bigint) AS lim
       )
       INSERT INTO tenant_grant_days AS g (tenant_id, day, points)
       SELECT $1, $4::date, $2::bigint FROM lim WHERE $2::bigint <= lim.lim
       ON CONFLICT (tenant_id, day) DO UPDATE SET points = g.points + EXCLUDED.points
         WHERE g.points + EXCLUDED.points <= (SELECT lim FROM lim)
       RETURNING g.points, (SELECT lim FROM lim) AS lim`,
      [tenantId, points, defaultMax, day],
    );
    if (rows[0]) return { allowed: true, used: Number(rows[0].points), limit: Number(rows[0].lim) };
    const cur = await this.db.query<{ points: string | null; lim: string }>(
      `SELECT (SELECT points FROM tenant_grant_days WHERE tenant_id = $1 AND day = $3::date) AS points,
              COALESCE((SELECT max_grant_points_per_day FROM tenant_quotas WHERE tenant_id = $1), $2::bigint) AS lim`,
      [tenantId, defaultMax, day],
    );
    return { allowed: false, used: Number(cur.rows[0]?.points ?? 0), limit: Number(cur.rows[0]?.lim ?? defaultMax) };
  }

  /** Gives back points reserved for `day` that were not granted (a replay, a refused or failed transfer). */
  async releaseGrantPoints(tenantId: string, points: number, day: string): Promise<void> {
    await this.db.query('UPDATE tenant_grant_days SET points = GREATEST(0, points - $2::bigint) WHERE tenant_id = $1 AND day = $3::date', [
      tenantId,
      points,
      day,
    ]);
  }

  /** True when the ledger holds a transfer with this id (a grant that committed before: its repeat is a replay). */
  async transferExists(transferId: string): Promise<boolean> {
    const { rows } = await this.db.query('SELECT 1 FROM transfers WHERE id = $1', [transferId]);
    return rows.length > 0;
  }

  /** The points granted to the tenant's viewers on `day` (0 when none). */
  async grantedPoints(tenantId: string, day: string): Promise<number> {
    const { rows } = await this.db.query<{ points: string }>(
      'SELECT points FROM tenant_grant_days WHERE tenant_id = $1 AND day = $2::date',
      [tenantId, day],
    );
    return rows[0] ? Number(rows[0].points) : 0;
  }
}

/**
 * Inside a transaction: takes the tenant's channel-creation lock, counts the tenant's channels once, and inserts
 * those of `ids` that do not exist, in the order given, while the tenant stays within its quota of channels (its
 * override, else `defaultMax`). One count and one INSERT for the whole list, whatever its length.
 * @param ids distinct valid channel ids, at most a few thousand
 * @returns the ids inserted; the ids refused because the quota was reached (none of them exists); the tenant's
 *   count before and the quota
 */
export async function insertChannelsWithinQuota(
  q: Queryable,
  ids: readonly string[],
  tenantId: string,
  defaultMax: number,
): Promise<{ inserted: Set<string>; overQuota: Set<string>; count: number; limit: number }> {
  await q.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [CHANNEL_QUOTA_LOCK, tenantId]);
  const { rows } = await q.query<{ n: string; lim: string; existing: string[] | null }>(
    `SELECT (SELECT count(*) FROM channels WHERE tenant_id = $1) AS n,
            COALESCE((SELECT max_channels FROM tenant_quotas WHERE tenant_id = $1), $2::bigint) AS lim,
            (SELECT array_agg(id) FROM channels WHERE id = ANY($3::text[])) AS existing`,
    [tenantId, defaultMax, textArray(ids)],
  );
  const count = Number(rows[0]!.n);
  const limit = Number(rows[0]!.lim);
  const existing = new Set(rows[0]!.existing ?? []);
  const fresh = ids.filter((id) => !existing.has(id));
  const room = Math.max(0, limit - count);
  const allowed = fresh.slice(0, room);
  const overQuota = new Set(fresh.slice(room));
  if (allowed.length === 0) return { inserted: new Set(), overQuota, count, limit };
  const r = await q.query<{ id: string }>(
    'INSERT INTO channels (id, tenant_id) SELECT id, $2 FROM unnest($1::text[]) AS u(id) ON CONFLICT (id) DO NOTHING RETURNING id',
    [textArray(allowed), tenantId],
  );
  return { inserted: new Set(r.rows.map((x) => x.id)), overQuota, count, limit };
}
