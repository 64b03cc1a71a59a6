/**
 * A gateway's per-tenant quotas (docs/decisions/0030-tenant-quotas.md): each
 * tenant's effective quotas (its overrides in Postgres over the TENANT_MAX_*
 * defaults, read again after TENANT_QUOTA_CACHE_MS), the tenant's viewer
 * sockets held here (TENANT_MAX_CONNECTIONS, per gateway) and its intent
 * bucket here (TENANT_MAX_INTENTS_PER_S, per gateway). Refusals are counted
 * per tenant with a bounded label (libs/telemetry's TenantQuotaRefusals).
 * Channels and grants are counted exactly in Postgres (libs/store's quotas).
 */
import type { Config } from '@crowdplay/config';
import { fullBucket, takeToken, type BucketState } from '@crowdplay/ratelimit';
import { effectiveQuotas, type Quotas, type Store } from '@crowdplay/store';
import { tenantQuotaRefusals, type QuotaLabel, type Telemetry, type TenantQuotaRefusals } from '@crowdplay/telemetry';

interface Entry {
  quotas: Quotas;
  /** When the overrides were read, ms (clock). */
  at: number;
  /** A read in flight, if any. */
  loading: Promise<Quotas> | undefined;
}

/** The defaults from the settings. */
export function quotaDefaults(q: Config['quota']): Quotas {
  return {
    channels: q.channels,
    connections: q.connections,
    intentsPerS: q.intentsPerS,
    grantPointsPerDay: q.grantPointsPerDay,
    bots: q.bots,
  };
}

/** Per-tenant quota state of one gateway process. */
export class TenantQuotas {
  readonly defaults: Quotas;
  readonly refusals: TenantQuotaRefusals;
  private readonly entries = new Map<string, Entry>();
  private readonly connections = new Map<string, number>();
  private readonly buckets = new Map<string, BucketState>();

  constructor(
    private readonly cfg: Config['quota'],
    private readonly store: Store,
    telemetry: Telemetry,
    private readonly clock: () => number = () => performance.now(),
  ) {
    this.defaults = quotaDefaults(cfg);
    this.refusals = tenantQuotaRefusals(telemetry, cfg.metricTenants);
  }

  /**
   * The tenant's effective quotas, read from the store when not cached or older than TENANT_QUOTA_CACHE_MS.
   * A failed read keeps the last known (or the defaults): a store outage does not refuse connections.
   */
  async load(tenant: string): Promise<Quotas> {
    const e = this.entries.get(tenant);
    if (e && this.clock() - e.at < this.cfg.cacheMs) return e.quotas;
    if (e?.loading) return e.loading;
    const entry: Entry = e ?? { quotas: this.defaults, at: -Infinity, loading: undefined };
    this.entries.set(tenant, entry);
    entry.loading = this.store.quotas
      .overrides(tenant)
      .then(
        (o) => effectiveQuotas(this.defaults, o),
        () => entry.quotas,
      )
      .then((q) => {
        entry.quotas = q;
        entry.at = this.clock();
        entry.loading = undefined;
        return q;
      });
    return entry.loading;
  }

  /** The tenant's quotas now, without waiting: the cached ones (a stale entry is read again in the background). */
  current(tenant: string): Quotas {
    const e = this.entries.get(tenant);
    if (!e || this.clock() - e.at >= this.cfg.cacheMs) void this.load(tenant);
    return e?.quotas ?? this.defaults;
  }

  /** The tenant's viewer sockets held by this gateway. */
  connectionsOf(tenant: string): number {
    return this.connections.get(tenant) ?? 0;
  }

  /**
   * Takes one of the tenant's connection slots on this gateway.
   * @returns true when taken; false (nothing taken) when the tenant holds its quota already
   */
  takeConnection(tenant: string, quotas: Quotas): boolean {
    const n = this.connectionsOf(tenant);
    if (n >= quotas.connections) return false;
    this.connections.set(tenant, n + 1);
    return true;
  }

  /** Gives back a slot taken by {@link takeConnection}. */
  releaseConnection(tenant: string): void {
    const n = this.connectionsOf(tenant) - 1;
    if (n > 0) this.connections.set(tenant, n);
    else this.connections.delete(tenant);
  }

  /**
   * Takes one intent from the tenant's bucket on this gateway (refilled at its intents-per-second quota, holding
   * one second's worth). A quota of 0 refuses every intent.
   * @returns whether the intent may go on
   */
  takeIntent(tenant: string): boolean {
    const rate = this.current(tenant).intentsPerS;
    if (rate <= 0) return false;
    const now = this.clock();
    const r = takeToken(this.buckets.get(tenant) ?? fullBucket(rate, now), now, rate, rate);
    this.buckets.set(tenant, r.state);
    return r.allowed;
  }

  /** Counts a refusal of `tenant` over `quota` (per tenant, bounded, and in crowdplay_refusals_total). */
  refuse(area: string, tenant: string, quota: QuotaLabel, detail?: Record<string, unknown>): void {
    this.refusals.refuse(area, tenant, quota, detail);
  }
}
