/**
 * Event ids for one shard, taken from blocks leased from the sequencer.
 * A new block is leased on every acquire of a channel that had an owner (so
 * a moved channel's ids rise past everything its previous owner used) and in
 * the background when the current block runs low.
 *
 * Guarantees (tested in services/crowd-engine/test/ids.test.ts):
 * - every id handed out is greater than every id handed out before it by this
 *   allocator (shard-wide, so per channel too), even when leases answer out of
 *   order (a background refill and a renew in flight at once, two sequencers);
 * - after `renew()` resolves, every id is at least the first id of the block
 *   that renew leased, i.e. it comes from a block leased after renew was called.
 *   Blocks that would break either rule are dropped (their ids are never used).
 */
export interface IdBlock {
  first: number;
  last: number;
}

export type LeaseFn = () => Promise<IdBlock>;

export class IdAllocator {
  private next = 0;
  private last = -1;
  /** Newest id handed out (0 before any: sequencer ids start at 1). */
  private issued = 0;
  private spare: IdBlock | null = null;
  private leasing: Promise<void> | null = null;
  /** The renew in flight, and the one queued behind it that later callers share. */
  private renewing: Promise<void> | null = null;
  private queuedRenew: Promise<void> | null = null;
  /** Blocks leased but never used (out of order or superseded by a renew), for tests and metrics. */
  dropped = 0;

  /** @param refillBelow lease the next block in the background once fewer ids than this remain */
  constructor(
    private readonly lease: LeaseFn,
    private readonly refillBelow: number,
  ) {}

  /** Ids left in the current block. */
  get remaining(): number {
    return Math.max(0, this.last - this.next + 1);
  }

  /**
   * Leases a fresh block: every id handed out after this resolves is at least
   * that block's first id, hence greater than any id leased before renew was
   * called. The rest of the current block is dropped unless it already lies
   * above the new block (a block leased later still). Ids handed out while
   * the lease is in flight come from the old block.
   * @throws the lease error (sequencer unreachable)
   */
  renew(): Promise<void> {
    // Renews asked while one is in flight share the next one, sent once it answers: that lease is requested after
    // each of their calls, so it satisfies all of them (a bulk acquire on every shard of a busy cluster would
    // otherwise send the sequencer one lease per batch, all at once).
    if (this.queuedRenew) return this.queuedRenew;
    const prior = this.renewing;
    let run: Promise<void>;
    if (prior) {
      run = prior
        .catch(() => undefined)
        .then(() => {
          if (this.queuedRenew === run) this.queuedRenew = null;
          return this.renewNow();
        });
      this.queuedRenew = run;
    } else run = this.renewNow();
    this.renewing = run;
    void run
      .finally(() => {
        if (this.renewing === run) this.renewing = null;
      })
      .catch(() => undefined);
    return run;
  }

  private async renewNow(): Promise<void> {
    const b = await this.lease();
    if (b.first <= this.issued) {
      // Ids above b were handed out already (a later block answered first): every next id is above b too.
      this.dropped++;
      return;
    }
    if (this.next <= this.last && this.next > b.last) {
      // The current block was leased after b (answers out of order) and is still in use: keep it.
      this.dropped++;
      return;
    }
    if (this.next <= this.last) this.dropped++;
    this.next = b.first;
    this.last = b.last;
    if (this.spare && this.spare.first < b.first) {
      this.spare = null;
      this.dropped++;
    }
  }

  /**
   * The next id, or null when the block is exhausted and no spare is ready
   * (the caller awaits `ready()` and retries). Starts a background lease when
   * the block runs low.
   */
  take(): number | null {
    if (this.next > this.last) {
      const s = this.spare;
      this.spare = null;
      if (!s || s.first <= this.issued) {
        if (s) this.dropped++;
        this.refill();
        return null;
      }
      this.next = s.first;
      this.last = s.last;
    }
    const id = this.next++;
    this.issued = id;
    if (this.last - this.next + 1 < this.refillBelow) this.refill();
    return id;
  }

  /** Resolves when a background lease finishes (immediately if none runs). */
  async ready(): Promise<void> {
    if (this.next > this.last && !this.spare) this.refill();
    await this.leasing;
  }

  private refill(): void {
    if (this.leasing || this.spare) return;
    this.leasing = this.lease()
      .then((b) => {
        // A block below what is in use (a renew's block answered later but was leased later) is useless.
        if (b.first > Math.max(this.issued, this.last)) this.spare = b;
        else this.dropped++;
      })
      .finally(() => {
        this.leasing = null;
      });
    this.leasing.catch(() => undefined);
  }
}
