/**
 * lru-cache options bounding a cache by entry count through `maxSize` (each
 * entry counts 1) rather than `max`, which allocates every slot up front;
 * eviction is the same (least recently used first, dispose reason `evict`).
 * @param entries most entries held (≥ 1)
 * @returns options to spread into `new LRUCache({...})`
 * @throws RangeError unless `entries` is a positive integer
 */
export function lruCountBound(entries: number): { maxSize: number; sizeCalculation: () => number } {
  if (!Number.isSafeInteger(entries) || entries < 1) throw new RangeError(`entries must be a positive integer, got ${entries}`);
  return { maxSize: entries, sizeCalculation: one };
}

const one = (): number => 1;
