import type { Metrics } from './metrics.ts';
import type { Refusals } from './refusals.ts';

/**
 * The tenant label of the tenants past the first `maxTenants`: `~` is outside the tenant id alphabet
 * (`^[A-Za-z0-9_-]{1,64}$`), so it never collides with a real tenant.
 */
export const OTHER_TENANT_LABEL = '~other';

/** The quotas a tenant has, as the `quota` label names them. */
export const QUOTA_LABELS = ['channels', 'connections', 'intentsPerS', 'grantPointsPerDay', 'bots'] as const;
export type QuotaLabel = (typeof QUOTA_LABELS)[number];

/**
 * Refusals of a tenant over a quota: counted in `crowdplay_tenant_quota_refusals_total{tenant, quota}` with at
 * most `maxTenants` tenant label values per process (the first seen keep theirs; the others share
 * {@link OTHER_TENANT_LABEL}), and through {@link Refusals} (`crowdplay_refusals_total`, one log line per interval).
 */
export class TenantQuotaRefusals {
  private readonly labelled = new Set<string>();
  private readonly counter;

  constructor(
    metrics: Metrics,
    private readonly refusals: Refusals,
    readonly maxTenants: number,
  ) {
    if (!(Number.isInteger(maxTenants) && maxTenants >= 1)) throw new RangeError(`maxTenants must be an integer >= 1, got ${maxTenants}`);
    this.counter = metrics.counter('crowdplay_tenant_quota_refusals_total');
  }

  /** The label value of `tenant`: its id while fewer than `maxTenants` have one, else {@link OTHER_TENANT_LABEL}. */
  label(tenant: string): string {
    if (this.labelled.has(tenant)) return tenant;
    if (this.labelled.size >= this.maxTenants) return OTHER_TENANT_LABEL;
    this.labelled.add(tenant);
    return tenant;
  }

  /**
   * Counts one refusal of `tenant` over `quota`, in area `area` (gateway, funding, …).
   * @param detail extra fields for the log line (the first refusal of the interval)
   */
  refuse(area: string, tenant: string, quota: QuotaLabel, detail?: Record<string, unknown>): void {
    this.counter.add(1, { tenant: this.label(tenant), quota });
    this.refusals.refuse(area, 'CP_ERR_TENANT_QUOTA', { tenant, quota, ...detail });
  }
}

const perMetrics = new WeakMap<Metrics, TenantQuotaRefusals>();

/**
 * The process's {@link TenantQuotaRefusals} (one per Metrics, so every part of a process shares one bound of
 * tenant labels); `maxTenants` (TENANT_QUOTA_METRIC_TENANTS) is taken from the first call.
 */
export function tenantQuotaRefusals(telemetry: { metrics: Metrics; refusals: Refusals }, maxTenants: number): TenantQuotaRefusals {
  let r = perMetrics.get(telemetry.metrics);
  if (!r) perMetrics.set(telemetry.metrics, (r = new TenantQuotaRefusals(telemetry.metrics, telemetry.refusals, maxTenants)));
  return r;
}
