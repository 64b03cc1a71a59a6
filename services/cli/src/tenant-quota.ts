/**
 * `crowdplay tenant quota <tenant> [--channels N] [--connections N] [--intents-per-s N] [--grants-per-day N] [--bots N] [--clear NAME]`:
 * shows a tenant's effective quotas (its overrides over the TENANT_MAX_* settings) or changes its overrides.
 * A value `default` (or `--clear NAME`, `--clear all`) removes an override. Bad input is refused before anything
 * is read or written (docs/decisions/0030-tenant-quotas.md).
 */
import type { Config } from '@crowdplay/config';
import { CrowdplayError } from '@crowdplay/protocol';
import { effectiveQuotas, MAX_QUOTA, QUOTA_NAMES, type QuotaName, type QuotaPatch, type Store } from '@crowdplay/store';

/** The command line's name of each quota. */
export const QUOTA_FLAGS: Record<QuotaName, string> = {
  channels: 'channels',
  connections: 'connections',
  intentsPerS: 'intents-per-s',
  grantPointsPerDay: 'grants-per-day',
  bots: 'bots',
};

/** Each quota's setting (the default's name in the output). */
const SETTING: Record<QuotaName, string> = {
  channels: 'TENANT_MAX_CHANNELS',
  connections: 'TENANT_MAX_CONNECTIONS',
  intentsPerS: 'TENANT_MAX_INTENTS_PER_S',
  grantPointsPerDay: 'TENANT_MAX_GRANT_POINTS_PER_DAY',
  bots: 'TENANT_MAX_BOTS',
};

/**
 * The change the flags ask for.
 * @param values each flag's value as given (`--channels 10` → `{ channels: '10' }`), `clear` the `--clear` names
 * @throws CrowdplayError CP_ERR_PROTO_INVALID: a value that is not an integer 0..2^53-1 nor `default`, an unknown
 *   `--clear` name, or a quota both set and cleared
 */
export function parseQuotaFlags(values: Partial<Record<string, string>>, clear: readonly string[] = []): QuotaPatch {
  const patch: QuotaPatch = {};
  for (const q of QUOTA_NAMES) {
    const raw = values[QUOTA_FLAGS[q]];
    if (raw === undefined) continue;
    if (raw === 'default') patch[q] = null;
    else if (/^\d{1,16}$/.test(raw) && Number(raw) <= MAX_QUOTA) patch[q] = Number(raw);
    else
      throw new CrowdplayError('CP_ERR_PROTO_INVALID', [
        `--${QUOTA_FLAGS[q]} must be an integer 0..${MAX_QUOTA} or "default", got "${raw}"`,
      ]);
  }
  for (const name of clear) {
    const names = name === 'all' ? QUOTA_NAMES : QUOTA_NAMES.filter((q) => QUOTA_FLAGS[q] === name);
    if (names.length === 0)
      throw new CrowdplayError('CP_ERR_PROTO_INVALID', [
        `--clear takes one of ${[...Object.values(QUOTA_FLAGS), 'all'].join(', ')}, got "${name}"`,
      ]);
    for (const q of names) {
      if (typeof patch[q] === 'number') throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`--${QUOTA_FLAGS[q]} is both set and cleared`]);
      patch[q] = null;
    }
  }
  return patch;
}

/**
 * Applies `patch` (when it changes anything) and describes the tenant's effective quotas, one line each:
 * `channels  100000  (default: TENANT_MAX_CHANNELS)` or `connections  10  (override)`.
 * @throws CrowdplayError CP_ERR_TENANT_UNKNOWN (nothing written), CP_ERR_PROTO_INVALID
 */
export async function tenantQuota(store: Store, config: Config, tenant: string, patch: QuotaPatch): Promise<string> {
  const overrides = Object.keys(patch).length > 0 ? await store.quotas.set(tenant, patch) : await store.quotas.overrides(tenant);
  const q = config.quota;
  const effective = effectiveQuotas(
    { channels: q.channels, connections: q.connections, intentsPerS: q.intentsPerS, grantPointsPerDay: q.grantPointsPerDay, bots: q.bots },
    overrides,
  );
  const width = Math.max(...QUOTA_NAMES.map((n) => QUOTA_FLAGS[n].length));
  const lines = QUOTA_NAMES.map(
    (n) => `${QUOTA_FLAGS[n].padEnd(width)}  ${effective[n]}  (${overrides[n] !== undefined ? 'override' : `default: ${SETTING[n]}`})`,
  );
  return `tenant: ${tenant}\n${lines.join('\n')}\n`;
}
