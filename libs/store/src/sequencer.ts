import type { Db } from './db.ts';

/** A block of event ids `[first, last]`, inclusive. */
export interface IdBlock {
  first: number;
  last: number;
}

/** The sequencer's durable high-water mark. */
export class SequencerRepository {
  constructor(private readonly db: Db) {}

  /**
   * Raises the high-water mark by `size` and returns the block above the old
   * one. The row update commits before the block is returned, so a restart
   * never hands out an id twice (ids in a block that was never used are skipped).
   * @throws RangeError for a size that is not a positive integer
   */
  async lease(size: number): Promise<IdBlock> {
    if (!Number.isSafeInteger(size) || size < 1) throw new RangeError(`block size must be a positive integer, got ${size}`);
    const { rows } = await this.db.query<{ high_water: string }>(
      "UPDATE sequencer SET high_water = high_water + $1 WHERE name = 'events' RETURNING high_water",
      [size],
    );
    const last = Number(rows[0]!.high_water);
    return { first: last - size + 1, last };
  }

  /** The current high-water mark. */
  async highWater(): Promise<number> {
    const { rows } = await this.db.query<{ high_water: string }>("SELECT high_water FROM sequencer WHERE name = 'events'");
    return Number(rows[0]!.high_water);
  }
}
