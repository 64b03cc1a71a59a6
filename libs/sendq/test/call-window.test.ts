import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { CallWindow } from '../src/call-window.ts';

test('CallWindow - calls on schedule never wait; one that started late holds the ones behind it to the limit', () => {
  const w = new CallWindow(3, 1_000);
  const call = (t: number): number => {
    const wait = w.waitMs(t);
    w.record(t + wait);
    return wait;
  };
  // Slots 334 ms apart (3 a second): on time, never a wait.
  assert.deepEqual([0, 334, 668].map(call), [0, 0, 0]);
  // The slot of 1,002 starts late, at 1,300; the next slots (1,336, 1,670) are on time and still fit…
  assert.deepEqual([1_300, 1_336, 1_670].map(call), [0, 0, 0]);
  // …but the one of 2,004 would be the 4th call from 1,300 within 1,000 ms: it waits until 2,300.
  assert.equal(call(2_004), 296);
  assert.equal(w.waitMs(2_300), 1_336 + 1_000 - 2_300);
});

test('CallWindow - property: whatever the requested times, the recorded starts never exceed the limit in any window', () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 10 }), fc.array(fc.integer({ min: 0, max: 200 }), { maxLength: 200 }), (limit, gaps) => {
      const w = new CallWindow(limit, 1_000);
      const starts: number[] = [];
      let t = 0;
      for (const g of gaps) {
        t += g;
        const at = t + w.waitMs(t);
        assert.equal(w.waitMs(at), 0);
        w.record(at);
        starts.push(at);
        t = at;
      }
      for (let i = limit; i < starts.length; i++) assert.ok(starts[i]! - starts[i - limit]! >= 1_000);
    }),
  );
});

test('CallWindow - bad limits throw RangeError', () => {
  assert.throws(() => new CallWindow(0), RangeError);
  assert.throws(() => new CallWindow(1.5), RangeError);
  assert.throws(() => new CallWindow(3, 0), RangeError);
});
