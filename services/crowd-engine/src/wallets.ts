/**
 * The shard's in-memory mirror of viewers' available points, so a stake or a
 * trade is checked and reserved synchronously (the LMSR market prices and
 * reserves in one synchronous step) while the durable ledger stays the
 * source of truth.
 *
 * Invariant: a mirror is never above what the ledger would let the viewer
 * spend. It is loaded from the committed balance; a debit is reserved here
 * at once and only then sent to the ledger; a credit (sell proceeds, payout,
 * refund) is added only after it committed. So the mirror errs low, never
 * high — except when something outside this shard debits the same wallet
 * (another shard, in a cluster), in which case Postgres refuses the debit
 * and the shard undoes the trade and reloads the mirror. A viewer that was
 * granted points elsewhere (the tenant API) is reloaded when a reservation
 * would fail and the mirror is older than WALLET_RELOAD_MS.
 */
import type { Ledger } from '@crowdplay/ledger';

interface Entry {
  available: number;
  /** Debits reserved and sent to the ledger, not yet answered. */
  inflight: number;
  loadedAtMs: number;
}

/** Options of {@link WalletMirror}. */
export interface WalletMirrorOptions {
  /** Most wallets mirrored; idle ones (nothing in flight) are dropped oldest first. */
  max: number;
  /** A mirror older than this is reloaded before a reservation is refused, ms. */
  reloadMs: number;
  now: () => number;
}

/** Available points per (tenant, viewer). See the module comment. */
export class WalletMirror {
  private readonly entries = new Map<string, Entry>();
  private readonly waiting = new Map<string, Array<{ viewer: string; resolve: () => void; reject: (e: unknown) => void }>>();
  private loadScheduled = false;
  /** Reloads done because a reservation would have failed (metric). */
  reloads = 0;

  constructor(
    private readonly ledger: Ledger,
    private readonly opts: WalletMirrorOptions,
  ) {}

  /** Wallets mirrored now. */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Loads the viewer's mirror if it is not loaded (batched: every viewer
   * asked for in one event-loop turn is loaded with one query per tenant).
   * @throws the ledger's error when the balance query fails
   */
  ensure(tenant: string, viewer: string): Promise<void> {
    if (this.entries.has(key(tenant, viewer))) return Promise.resolve();
    return new Promise((resolve, reject) => {
      let list = this.waiting.get(tenant);
      if (!list) this.waiting.set(tenant, (list = []));
      list.push({ viewer, resolve, reject });
      if (!this.loadScheduled) {
        this.loadScheduled = true;
        setImmediate(() => void this.loadWaiting());
      }
    });
  }

  private async loadWaiting(): Promise<void> {
    this.loadScheduled = false;
    const batches = [...this.waiting];
    this.waiting.clear();
    await Promise.all(
      batches.map(async ([tenant, list]) => {
        for (let i = 0; i < list.length; i += 10_000) {
          const part = list.slice(i, i + 10_000);
          try {
            const viewers = [...new Set(part.map((w) => w.viewer))].filter((v) => !this.entries.has(key(tenant, v)));
            const balances = await this.ledger.walletBalances(tenant, viewers);
            const now = this.opts.now();
            for (const [viewer, balance] of balances) {
              // A concurrent load may have won; keep its reservations.
              if (!this.entries.has(key(tenant, viewer)))
                this.set(key(tenant, viewer), { available: balance, inflight: 0, loadedAtMs: now });
            }
            for (const w of part) w.resolve();
          } catch (err) {
            for (const w of part) w.reject(err);
          }
        }
      }),
    );
  }

  /** Available points, or undefined when not loaded. */
  available(tenant: string, viewer: string): number | undefined {
    return this.entries.get(key(tenant, viewer))?.available;
  }

  /**
   * Reserves `points` for a debit about to be sent to the ledger.
   * @returns false, changing nothing, when not loaded or fewer are available
   */
  reserve(tenant: string, viewer: string, points: number): boolean {
    const e = this.entries.get(key(tenant, viewer));
    if (!e || e.available < points) return false;
    e.available -= points;
    e.inflight++;
    this.touch(key(tenant, viewer), e);
    return true;
  }

  /**
   * A reserved debit committed. When no other debit of the viewer is in
   * flight, `balanceAfter` (the ledger's balance right after it) replaces the
   * mirror, picking up credits made elsewhere.
   */
  debited(tenant: string, viewer: string, balanceAfter: number | null): void {
    const e = this.entries.get(key(tenant, viewer));
    if (!e) return;
    e.inflight = Math.max(0, e.inflight - 1);
    if (e.inflight === 0 && balanceAfter !== null) e.available = balanceAfter;
  }

  /**
   * A reserved debit was refused: its points are available again. With
   * `reload`, the mirror is dropped (reloaded on next use) once nothing is in flight.
   */
  released(tenant: string, viewer: string, points: number, reload = false): void {
    const k = key(tenant, viewer);
    const e = this.entries.get(k);
    if (!e) return;
    e.available += points;
    e.inflight = Math.max(0, e.inflight - 1);
    if (reload) e.loadedAtMs = -Infinity;
    if (reload && e.inflight === 0) this.entries.delete(k);
  }

  /**
   * A credit committed (sell proceeds, payout, refund, grant). `balanceAfter`
   * replaces the mirror when nothing is in flight.
   */
  credited(tenant: string, viewer: string, points: number, balanceAfter: number | null): void {
    const e = this.entries.get(key(tenant, viewer));
    if (!e) return;
    e.available = e.inflight === 0 && balanceAfter !== null ? balanceAfter : e.available + points;
  }

  /**
   * Reloads the viewer's mirror from the ledger if it is older than
   * `reloadMs` (before refusing a reservation for lack of points).
   * @returns true when it reloaded
   */
  async refreshIfStale(tenant: string, viewer: string): Promise<boolean> {
    const k = key(tenant, viewer);
    const e = this.entries.get(k);
    if (e && (e.inflight > 0 || this.opts.now() - e.loadedAtMs < this.opts.reloadMs)) return false;
    this.entries.delete(k);
    this.reloads++;
    await this.ensure(tenant, viewer);
    return true;
  }

  private set(k: string, e: Entry): void {
    this.entries.set(k, e);
    if (this.entries.size <= this.opts.max) return;
    for (const [old, oe] of this.entries) {
      if (this.entries.size <= this.opts.max) break;
      if (oe.inflight === 0 && old !== k) this.entries.delete(old);
    }
  }

  /** Moves the entry to the young end (Map order is the eviction order). */
  private touch(k: string, e: Entry): void {
    this.entries.delete(k);
    this.entries.set(k, e);
  }
}

function key(tenant: string, viewer: string): string {
  return `${tenant}\u0000${viewer}`;
}
