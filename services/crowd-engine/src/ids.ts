/**
 * Event ids for one shard, taken from blocks leased from the sequencer.
 * A new block is leased on every acquire (so a moved channel's ids rise past
 * everything its previous owner used) and in the background when the current
 * block runs low.
 */
export interface IdBlock {
  first: number;
  last: number;
}

export type LeaseFn = () => Promise<IdBlock>;

export class IdAllocator {
  private next = 0;
  private last = -1;
  private spare: IdBlock | null = null;
  private leasing: Promise<void> | null = null;

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
   * Discards the current and spare blocks and leases a fresh one: every id
   * handed out after this resolves is greater than any id leased before it
   * was called. @throws the lease error (sequencer unreachable)
   */
  async renew(): Promise<void> {
    if (this.leasing) await this.leasing.catch(() => undefined);
    this.spare = null;
    const b = await this.lease();
    this.next = b.first;
    this.last = b.last;
  }

  /**
   * The next id, or null when the block is exhausted and no spare is ready
   * (the caller awaits `ready()` and retries). Starts a background lease when
   * the block runs low.
   */
  take(): number | null {
    if (this.next > this.last) {
      if (!this.spare) {
        this.refill();
        return null;
      }
      this.next = this.spare.first;
      this.last = this.spare.last;
      this.spare = null;
    }
    const id = this.next++;
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
        this.spare = b;
      })
      .finally(() => {
        this.leasing = null;
      });
    this.leasing.catch(() => undefined);
  }
}
