/**
 * No single router: several router processes run, one is active. Which one
 * is decided by a lease, a row of the `router_lease` table that the active
 * router renews every ROUTER_LEASE_MS / 3 and that expires ROUTER_LEASE_MS
 * after its last renewal (Postgres's clock). A standby tries to take it just
 * as often and wins once it has expired; until then it answers nothing
 * (only the active router subscribes to `router.ctl`, in the `router` queue
 * group, and to the heartbeats).
 *
 * Why two routers acting at once for a moment is safe: the router keeps no
 * authority of its own. Every placement bumps the channel's epoch in
 * Postgres (`acquireMany`) and a shard serves a channel only at the epoch it
 * acquired; every durable write of a channel is fenced by that epoch. A
 * router that acts after losing the lease (it was paused, SIGSTOP, and its
 * last statements land late) can at worst move a channel once more, to a
 * newer epoch: the previous owner's writes are then refused, the latest
 * placement is the one Postgres records, and the active router's reconciler
 * makes its own view follow Postgres. Ownership stays single; what it costs
 * is an extra move. So the lease only keeps that rare and short: a holder
 * counts its lease valid until the instant it sent its last successful
 * renewal plus ROUTER_LEASE_MS on its own monotonic clock (never later than
 * Postgres lets another take it), and its Router asks `isActive()` before
 * each background pass, each heartbeat and each request, standing down at
 * the first `false`.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Bus, Subjects } from '@crowdplay/bus';
import { CrowdplayError } from '@crowdplay/protocol';
import type { Queryable, Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import type { Assignment, Migration, RouterApi } from './api.ts';
import { Router, type RouterOptions } from './router.ts';

/** The lease's row name when none is given: one active router per schema. */
export const ROUTER_LEASE_NAME = 'router';

/** What a successful `acquire` returns. */
export interface LeaseGrant {
  /** The tenure: unchanged across renewals, higher after any other holder or a lapse. */
  term: number;
  /** Until when the holder may act, on the lease's clock (ms): the instant the statement was sent plus `leaseMs`. */
  validUntilMs: number;
}

/** The lease row as Postgres has it. */
export interface LeaseRow {
  holder: string;
  term: number;
  expiresAt: Date;
}

const ACQUIRE_SQL = `
INSERT INTO router_lease (name, holder, expires_at, term)
VALUES ($1, $2, now() + $3 * interval '1 millisecond', 1)
ON CONFLICT (name) DO UPDATE SET
  holder = excluded.holder,
  expires_at = excluded.expires_at,
  term = CASE WHEN router_lease.holder = excluded.holder AND router_lease.expires_at >= now()
    THEN router_lease.term ELSE router_lease.term + 1 END
WHERE router_lease.holder = excluded.holder OR router_lease.expires_at < now()
RETURNING term`;

/**
 * One holder's handle on a lease row (`router_lease`). `acquire` takes or
 * renews it in one statement; it is refused while another holder's lease
 * has not expired.
 */
export class RouterLease {
  readonly name: string;
  readonly holder: string;
  readonly leaseMs: number;
  private readonly clock: () => number;

  /**
   * @param db where `router_lease` lives (the store's Db)
   * @param opts.holder this holder's id, unique per process (default: host, pid and a random suffix)
   * @param opts.leaseMs how long a grant lasts, ms: an integer ≥ 1
   * @param opts.name the lease row (default ROUTER_LEASE_NAME)
   * @param opts.clock a monotonic clock in ms (default performance.now)
   * @throws RangeError when leaseMs is not a positive integer; TypeError for an empty name or holder
   */
  constructor(
    private readonly db: Queryable,
    opts: { leaseMs: number; holder?: string; name?: string; clock?: () => number },
  ) {
    if (!Number.isInteger(opts.leaseMs) || opts.leaseMs < 1)
      throw new RangeError(`leaseMs must be a positive integer of ms, got ${opts.leaseMs}`);
    const holder = opts.holder ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    const name = opts.name ?? ROUTER_LEASE_NAME;
    if (holder === '' || name === '') throw new TypeError('a lease needs a non-empty name and holder');
    this.leaseMs = opts.leaseMs;
    this.holder = holder;
    this.name = name;
    this.clock = opts.clock ?? (() => performance.now());
  }

  /**
   * Takes the lease, or renews it when this holder has it: one conditional
   * upsert that wins when the row is missing, held by this holder, or
   * expired. A renewal keeps the term; a new tenure (another holder before,
   * or this one's lease had lapsed) gets term + 1.
   * @returns the grant, or null when another holder's lease has not expired (nothing changed)
   * @throws the store's error when Postgres is unreachable (the holder must not count on the lease past its last grant)
   */
  async acquire(): Promise<LeaseGrant | null> {
    const sentAt = this.clock();
    const r = await this.db.query<{ term: string | number }>(ACQUIRE_SQL, [this.name, this.holder, this.leaseMs]);
    const row = r.rows[0];
    if (!row) return null;
    return { term: Number(row.term), validUntilMs: sentAt + this.leaseMs };
  }

  /**
   * Ends this holder's tenure now (the row expires), so a standby takes the
   * lease at its next try instead of waiting out ROUTER_LEASE_MS.
   * @returns false when this holder did not hold it (nothing changed)
   * @throws the store's error when Postgres is unreachable
   */
  async release(): Promise<boolean> {
    const r = await this.db.query(
      `UPDATE router_lease SET expires_at = now() - interval '1 millisecond' WHERE name = $1 AND holder = $2 AND expires_at >= now() RETURNING term`,
      [this.name, this.holder],
    );
    return r.rows.length > 0;
  }

  /**
   * The lease row, or null when nobody ever took it.
   * @throws the store's error when Postgres is unreachable
   */
  async current(): Promise<LeaseRow | null> {
    const r = await this.db.query<{ holder: string; term: string | number; expires_at: Date | string }>(
      'SELECT holder, term, expires_at FROM router_lease WHERE name = $1',
      [this.name],
    );
    const row = r.rows[0];
    return row ? { holder: row.holder, term: Number(row.term), expiresAt: new Date(row.expires_at) } : null;
  }
}

export interface LeasedRouterOptions extends Omit<RouterOptions, 'isActive'> {
  /** How long a grant of the lease lasts, ms (ROUTER_LEASE_MS); it is renewed every third of it. */
  leaseMs: number;
  /** This process's holder id (default: host, pid and a random suffix). */
  holder?: string;
  /** The lease row (default ROUTER_LEASE_NAME). */
  leaseName?: string;
  /**
   * Called each time this process's router becomes active, after its Router started (the process wiring
   * assigns the channels with unfinished rounds here). Awaited by `start()` for the first tenure only.
   */
  onActive?: (router: Router) => Promise<void> | void;
}

/** Why a router stood down: the `reason` in its log line. */
type StandDown = 'lease expired' | 'another holder' | 'new term' | 'closing' | 'start failed';

/**
 * A router replica: it takes part in the lease and runs a {@link Router}
 * while it holds it, none while it does not. It tries to take or renew the
 * lease every `leaseMs / 3`; it starts its Router when it wins (the Router
 * rebuilds its assignments from Postgres) and closes it (unsubscribing from
 * `router.ctl` at once) when its lease expired without a renewal, another
 * holder has it, or its term changed. Logs `router lease won` and `router
 * lease lost` (with term, holder and reason); crowdplay_router_lease_active
 * and crowdplay_router_lease_changes_total{change}.
 */
export class LeasedRouter implements RouterApi {
  readonly lease: RouterLease;
  private router: Router | null = null;
  private term = 0;
  private validUntilMs = 0;
  private timer: NodeJS.Timeout | null = null;
  private expiryTimer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;
  private readonly closing = new Set<Promise<void>>();
  private closed = false;
  /** The last renewal failed (logged once per outage). */
  private failing = false;
  /** The running Router was announced active (logged `router lease won`): its stand-down is logged too. */
  private announced = false;
  private readonly clock: () => number;
  private readonly changes: ReturnType<Telemetry['metrics']['counter']>;

  /**
   * @throws RangeError when leaseMs is not a positive integer
   */
  constructor(
    private readonly deps: { bus: Bus; subjects: Subjects; store: Store; telemetry: Telemetry },
    private readonly opts: LeasedRouterOptions,
  ) {
    this.clock = () => performance.now();
    // Its own connection: a renewal queued in the pool behind the router's bulk statements let the lease lapse.
    this.lease = new RouterLease(deps.store.dedicated(), {
      leaseMs: opts.leaseMs,
      ...(opts.holder !== undefined ? { holder: opts.holder } : {}),
      ...(opts.leaseName !== undefined ? { name: opts.leaseName } : {}),
      clock: this.clock,
    });
    const mx = deps.telemetry.metrics;
    this.changes = mx.counter('crowdplay_router_lease_changes_total');
    mx.gauge('crowdplay_router_lease_active', () => (this.isActive() ? 1 : 0));
  }

  /**
   * True while this process holds the lease, its lease has not run out by its own clock, and its Router has
   * started (answers `router.ctl`). False while the Router is still starting after a won lease.
   */
  isActive(): boolean {
    return this.announced && this.holds();
  }

  /** The lease is held and not run out by this process's clock (whether or not its Router has started). */
  private holds(): boolean {
    return this.router !== null && this.clock() < this.validUntilMs;
  }

  /** The running Router while active, else null. */
  get active(): Router | null {
    return this.isActive() ? this.router : null;
  }

  /**
   * Tries the lease once (starting the Router and awaiting `onActive` when it wins), then keeps trying every
   * `leaseMs / 3`. Resolves whether it won or not: a standby is ready too.
   * @throws what `onActive` threw for this first tenure (the Router runs on; later tenures only log it)
   */
  async start(): Promise<void> {
    await this.tick(true);
    this.schedule();
  }

  private schedule(): void {
    if (this.closed) return;
    this.timer = setTimeout(
      () => {
        // A renewal that hangs (Postgres unreachable without an error) is not stacked: the expiry timer stands down.
        this.ticking ??= this.tick().finally(() => (this.ticking = null));
        this.schedule();
      },
      Math.max(1, Math.floor(this.opts.leaseMs / 3)),
    );
  }

  private async tick(first = false): Promise<void> {
    let grant: LeaseGrant | null;
    const t0 = this.clock();
    try {
      grant = await this.lease.acquire();
      // A renewal slower than the interval between renewals is the lease's warning sign: another such lapses it.
      const ms = Math.round(this.clock() - t0);
      if (ms > this.opts.leaseMs / 3)
        this.deps.telemetry.logger.warn({ holder: this.lease.holder, ms, leaseMs: this.opts.leaseMs }, 'router lease: slow renewal');
    } catch (err) {
      if (!this.failing) this.deps.telemetry.logger.warn({ err, holder: this.lease.holder }, 'router lease: Postgres did not answer');
      this.failing = true;
      if (this.router && !this.holds()) this.standDown('lease expired');
      return;
    }
    if (this.failing) this.deps.telemetry.logger.info({ holder: this.lease.holder }, 'router lease: Postgres answers again');
    this.failing = false;
    if (this.closed) return;
    if (grant === null) {
      if (this.router) this.standDown('another holder');
      return;
    }
    // A grant already run out (this process was paused with the statement in flight) is no lease: the next try renews.
    if (this.clock() >= grant.validUntilMs) {
      if (this.router) this.standDown('lease expired');
      return;
    }
    if (this.router && (grant.term !== this.term || !this.holds())) this.standDown(grant.term !== this.term ? 'new term' : 'lease expired');
    this.term = grant.term;
    this.validUntilMs = grant.validUntilMs;
    this.armExpiry();
    if (!this.router) await this.becomeActive(first);
  }

  /** Stands down at the lease's end unless a renewal moved it. */
  private armExpiry(): void {
    if (this.expiryTimer) clearTimeout(this.expiryTimer);
    this.expiryTimer = setTimeout(
      () => {
        this.expiryTimer = null;
        if (this.router && !this.holds()) this.standDown('lease expired');
      },
      Math.max(0, this.validUntilMs - this.clock()),
    );
  }

  private async becomeActive(rethrow: boolean): Promise<void> {
    const { telemetry } = this.deps;
    const r = new Router(this.deps, {
      ...this.opts,
      isActive: () => {
        if (this.router === r && this.holds()) return true;
        if (this.router === r) this.standDown('lease expired');
        return false;
      },
    });
    this.router = r;
    try {
      await r.start();
    } catch (err) {
      telemetry.logger.error({ err, term: this.term }, 'router lease: the router did not start');
      if (this.router === r) this.standDown('start failed');
      return;
    }
    if (this.router !== r) {
      // Stood down while starting: what start() subscribed after the first close goes now.
      await r.close();
      return;
    }
    this.announced = true;
    this.changes.add(1, { change: 'won' });
    telemetry.logger.info({ term: this.term, holder: this.lease.holder }, 'router lease won; this router is active');
    try {
      await this.opts.onActive?.(r);
    } catch (err) {
      if (rethrow) throw err;
      telemetry.logger.warn({ err }, 'router lease: onActive failed');
    }
  }

  /** Closes the Router now (its subscriptions go before anything else runs); its moves in flight finish in the background. */
  private standDown(reason: StandDown): void {
    const r = this.router;
    if (!r) return;
    this.router = null;
    if (this.announced) {
      this.announced = false;
      this.changes.add(1, { change: 'lost' });
      const log = reason === 'closing' ? this.deps.telemetry.logger.info : this.deps.telemetry.logger.warn;
      log.call(this.deps.telemetry.logger, { term: this.term, holder: this.lease.holder, reason }, 'router lease lost; standing down');
    }
    const p = r.close().catch((err: unknown) => this.deps.telemetry.logger.error({ err }, 'router close failed'));
    this.closing.add(p);
    void p.finally(() => this.closing.delete(p));
  }

  private current(what: string): Router {
    const r = this.active;
    if (!r) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [what], { cause: 'this router is a standby' });
    return r;
  }

  /** See {@link Router.assign}. @throws CrowdplayError CP_ERR_CHANNEL_UNAVAILABLE on a standby (retryable), and Router.assign's errors */
  assign(channel: string): Promise<Assignment> {
    try {
      return this.current(channel).assign(channel);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** See {@link Router.lookup}. @throws CrowdplayError CP_ERR_CHANNEL_UNAVAILABLE on a standby */
  lookup(channel: string): Promise<Assignment | null> {
    try {
      return this.current(channel).lookup(channel);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** See {@link Router.release}. @throws CrowdplayError CP_ERR_CHANNEL_UNAVAILABLE on a standby */
  release(channel: string): Promise<void> {
    try {
      return this.current(channel).release(channel);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** See {@link Router.membership}. @throws CrowdplayError CP_ERR_CHANNEL_UNAVAILABLE on a standby */
  membership(): ReturnType<Router['membership']> {
    try {
      return this.current('*').membership();
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** See {@link Router.migrate}. @throws CrowdplayError CP_ERR_CHANNEL_UNAVAILABLE on a standby, and Router.migrate's errors */
  migrate(from: string, to: string): Promise<Migration> {
    try {
      return this.current(from).migrate(from, to);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Stops trying, closes the Router (waiting for its moves in flight) and releases the lease so a standby takes
   * over at its next try. Safe to call twice.
   */
  async close(): Promise<void> {
    if (this.closed) {
      await Promise.all([...this.closing]);
      return;
    }
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.expiryTimer) clearTimeout(this.expiryTimer);
    this.timer = null;
    this.expiryTimer = null;
    await this.ticking;
    const held = this.router !== null;
    this.standDown('closing');
    await Promise.all([...this.closing]);
    if (held) await this.lease.release().catch((err: unknown) => this.deps.telemetry.logger.warn({ err }, 'router lease: release failed'));
  }
}
