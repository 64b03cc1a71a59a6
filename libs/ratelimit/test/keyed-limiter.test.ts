import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { DEFAULT_MAX_KEYS, KeyedLimiter } from '../src/index.ts';

void test('keyed limiter - each key has its own bucket', () => {
  const l = new KeyedLimiter({ ratePerS: 1, burst: 2 });
  assert.equal(l.take('a', 0).allowed, true);
  assert.equal(l.take('a', 0).allowed, true);
  assert.deepEqual(l.take('a', 0), { allowed: false, retryAfterMs: 1_000 });
  assert.equal(l.take('b', 0).allowed, true, 'b is untouched by a');
  assert.equal(l.take('a', 1_000).allowed, true, 'a refilled one token after 1 s');
  assert.equal(l.size, 2);
});

void test('keyed limiter - uses the injected clock when take gets no time', () => {
  let now = 0;
  const l = new KeyedLimiter({ ratePerS: 10, burst: 1, nowMs: () => now });
  assert.equal(l.take('k').allowed, true);
  assert.deepEqual(l.take('k'), { allowed: false, retryAfterMs: 100 });
  now = 100;
  assert.equal(l.take('k').allowed, true);
});

void test('keyed limiter - bounded by maxKeys: least recently used buckets are evicted and counted', () => {
  const l = new KeyedLimiter({ ratePerS: 1, burst: 1, maxKeys: 3 });
  for (const k of ['a', 'b', 'c']) l.take(k, 0);
  assert.equal(l.evictions, 0);
  l.take('a', 0); // a is now the most recently used (and refused)
  l.take('d', 0); // evicts b
  l.take('e', 0); // evicts c
  assert.equal(l.size, 3);
  assert.equal(l.evictions, 2);
  assert.equal(l.take('a', 0).allowed, false, 'a was kept, still empty');
  assert.equal(l.take('b', 0).allowed, true, 'b was forgotten: starts full again');
  assert.equal(l.evictions, 3, 'bringing b back evicted another');
});

void test('keyed limiter - property: size never exceeds maxKeys and evictions account for every other key', () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 50 }), fc.array(fc.integer({ min: 0, max: 200 }), { maxLength: 500 }), (maxKeys, keys) => {
      const l = new KeyedLimiter({ ratePerS: 5, burst: 2, maxKeys });
      keys.forEach((k, i) => {
        l.take(`k${k}`, i);
        assert.ok(l.size <= maxKeys);
      });
      // Every first sight (including re-sights after eviction) inserted one bucket.
      assert.ok(l.size + l.evictions >= new Set(keys).size);
    }),
  );
});

void test('keyed limiter - default maxKeys is DEFAULT_MAX_KEYS (100_000)', () => {
  assert.equal(DEFAULT_MAX_KEYS, 100_000);
  assert.equal(new KeyedLimiter({ ratePerS: 1, burst: 1 }).maxKeys, DEFAULT_MAX_KEYS);
});

void test('keyed limiter - bad options throw RangeError', () => {
  for (const opts of [
    { ratePerS: 0, burst: 1 },
    { ratePerS: 1, burst: 0 },
    { ratePerS: 1, burst: 1, maxKeys: 0 },
    { ratePerS: 1, burst: 1, maxKeys: 1.5 },
    { ratePerS: 1, burst: 1, maxKeys: Number.POSITIVE_INFINITY },
  ]) {
    assert.throws(() => new KeyedLimiter(opts), RangeError, JSON.stringify(opts));
  }
});

void test('keyed limiter - a bad take throws RangeError and changes nothing', () => {
  const l = new KeyedLimiter({ ratePerS: 1, burst: 2 });
  l.take('k', 0);
  assert.throws(() => l.take('k', 0, 3), RangeError);
  assert.throws(() => l.take('k', Number.NaN), RangeError);
  assert.throws(() => l.take('new', 0, -1), RangeError);
  assert.equal(l.size, 1, 'no bucket created for the bad take');
  assert.equal(l.take('k', 0).allowed, true, 'one token was still there');
  assert.equal(l.take('k', 0).allowed, false);
});

void test('keyed limiter - delete forgets a key', () => {
  const l = new KeyedLimiter({ ratePerS: 1, burst: 1 });
  l.take('k', 0);
  assert.equal(l.take('k', 0).allowed, false);
  l.delete('k');
  assert.equal(l.size, 0);
  assert.equal(l.take('k', 0).allowed, true);
  assert.equal(l.evictions, 0, 'a delete is not an eviction');
});
