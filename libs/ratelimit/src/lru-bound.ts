/**
 * lru-cache options bounding a cache by entry count without `max`: with
 * `max`, lru-cache 11 allocates every slot up front (measured: four caches
 * of 100,000 entries, +6.1 MB of heap and +4.6 MB of array buffers at
 * start-up, in every process: docs/benchmarks.md "Session 10"); bounded by
 * `maxSize` with each entry counting 1, storage grows with use and eviction
 * is the same (least recently used first, dispose reason `evict`).
 * @param entries most entries held (≥ 1)
 * @returns options to spread into `new LRUCache({...})`
 * @throws RangeError unless `entries` is a positive integer
 */
export function lruCountBound(entries: number): { maxSize: number; sizeCalculation: () => number } {
  if (!Number.isSafeInteger(entries) || entries < 1) throw new RangeError(`entries must be a positive integer, got ${entries}`);
  return { maxSize: entries, sizeCalculation: one };
}

const one = (): number => 1;
