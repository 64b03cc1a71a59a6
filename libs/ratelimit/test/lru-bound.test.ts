/** lruCountBound: an entry-count bound for lru-cache without preallocating `max` slots. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LRUCache } from 'lru-cache';
import { lruCountBound } from '../src/index.ts';

test('lruCountBound - holds at most N entries, evicting the least recently used (dispose reason evict)', () => {
  const evicted: string[] = [];
  const c = new LRUCache<string, number>({ ...lruCountBound(3), dispose: (_v, k, reason) => reason === 'evict' && evicted.push(k) });
  for (const k of ['a', 'b', 'c']) c.set(k, 1);
  c.get('a');
  c.set('d', 1);
  c.set('e', 1);
  assert.deepEqual([...c.keys()].sort(), ['a', 'd', 'e']);
  assert.deepEqual(evicted, ['b', 'c']);
  assert.equal(c.size, 3);
});

test('lruCountBound - refuses a bound that is not a positive integer', () => {
  for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY])
    assert.throws(
      () => lruCountBound(bad),
      (e: unknown) => e instanceof RangeError && /positive integer/.test(e.message),
      String(bad),
    );
});
