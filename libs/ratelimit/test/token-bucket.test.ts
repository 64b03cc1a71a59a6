import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { fullBucket, takeToken, type BucketState } from '../src/index.ts';

/** Float slack for bounds on sums of fractional refills (tokens). */
const EPS = 1e-9;

const rateArb = fc.oneof(fc.integer({ min: 1, max: 1_000 }), fc.double({ min: 0.01, max: 1_000, noNaN: true }));
const burstArb = fc.integer({ min: 1, max: 100 });
/** Integer ms steps; negative ones model a clock going backwards. */
const stepsArb = fc.array(fc.integer({ min: -5_000, max: 5_000 }), { maxLength: 200 });

void test('token bucket - a full bucket allows burst takes, then refuses with the wait for one token', () => {
  let s = fullBucket(3, 1_000);
  for (let i = 0; i < 3; i++) {
    const r = takeToken(s, 1_000, 2, 3);
    assert.equal(r.allowed, true);
    assert.equal(r.retryAfterMs, 0);
    s = r.state;
  }
  const refused = takeToken(s, 1_000, 2, 3);
  assert.equal(refused.allowed, false);
  assert.equal(refused.retryAfterMs, 500, '1 token at 2/s');
  assert.deepEqual(refused.state, s, 'a refused take consumes nothing');
  assert.equal(takeToken(refused.state, 1_499, 2, 3).allowed, false);
  const later = takeToken(refused.state, 1_500, 2, 3);
  assert.equal(later.allowed, true);
  assert.equal(later.state.tokens, 0);
});

void test('token bucket - cost: takes several tokens at once, retryAfterMs covers the deficit', () => {
  const r1 = takeToken(fullBucket(10, 0), 0, 5, 10, 8);
  assert.deepEqual([r1.allowed, r1.state.tokens], [true, 2]);
  const r2 = takeToken(r1.state, 0, 5, 10, 5);
  assert.deepEqual([r2.allowed, r2.retryAfterMs], [false, 600], '3 tokens at 5/s');
  assert.equal(takeToken(r2.state, 600, 5, 10, 5).allowed, true);
  assert.equal(takeToken(r2.state, 0, 5, 10, 0).allowed, true, 'cost 0 is always allowed');
});

void test('token bucket - refill is capped at burst', () => {
  const r = takeToken({ tokens: 0, updatedMs: 0 }, 1_000_000, 10, 4);
  assert.equal(r.state.tokens, 3);
  assert.equal(r.state.updatedMs, 1_000_000);
});

void test('token bucket - bad parameters throw RangeError and leave the state untouched', () => {
  const s = Object.freeze({ tokens: 2, updatedMs: 100 });
  const bad: Array<[number, number, number, number]> = [
    [100, 0, 5, 1],
    [100, -1, 5, 1],
    [100, Number.NaN, 5, 1],
    [100, Number.POSITIVE_INFINITY, 5, 1],
    [100, 1, 0.5, 1],
    [100, 1, Number.NaN, 1],
    [100, 1, 5, 6],
    [100, 1, 5, -1],
    [100, 1, 5, Number.NaN],
    [Number.NaN, 1, 5, 1],
    [Number.POSITIVE_INFINITY, 1, 5, 1],
  ];
  for (const [now, rate, burst, cost] of bad) {
    assert.throws(() => takeToken(s, now, rate, burst, cost), RangeError, JSON.stringify([now, rate, burst, cost]));
  }
  assert.deepEqual(s, { tokens: 2, updatedMs: 100 });
});

void test('token bucket - property: tokens stay within 0..burst and the input state is never mutated', () => {
  fc.assert(
    fc.property(
      rateArb,
      burstArb,
      stepsArb,
      fc.array(fc.integer({ min: 0, max: 100 }), { maxLength: 200 }),
      (rate, burst, steps, costs) => {
        let s: BucketState = fullBucket(burst, 0);
        let now = 0;
        steps.forEach((dt, i) => {
          now += dt;
          const before = Object.freeze({ ...s });
          const r = takeToken(before, now, rate, burst, Math.min(burst, costs[i] ?? 1));
          assert.ok(r.state.tokens >= 0, `negative: ${r.state.tokens}`);
          assert.ok(r.state.tokens <= burst, `over burst: ${r.state.tokens}`);
          assert.ok(r.allowed ? r.retryAfterMs === 0 : Number.isInteger(r.retryAfterMs) && r.retryAfterMs >= 1);
          s = r.state;
        });
      },
    ),
  );
});

void test('token bucket - property: over t seconds at most burst + rate*t takes are allowed', () => {
  fc.assert(
    fc.property(
      rateArb,
      burstArb,
      fc.double({ min: 0, max: 1, noNaN: true }),
      fc.array(fc.integer({ min: 0, max: 2_000 }), { minLength: 1, maxLength: 500 }),
      (rate, burst, fill, gaps) => {
        // Any start state (a partly used bucket), then a client hammering at arbitrary times.
        let s: BucketState = { tokens: fill * burst, updatedMs: 0 };
        let now = 0;
        let allowed = 0;
        for (const gap of gaps) {
          now += gap;
          const r = takeToken(s, now, rate, burst);
          if (r.allowed) allowed++;
          s = r.state;
        }
        const bound = burst + (rate * now) / 1000;
        assert.ok(allowed <= bound + EPS, `allowed ${allowed} > ${bound} over ${now} ms`);
      },
    ),
  );
});

void test('token bucket - property: refused, then allowed exactly after retryAfterMs and not a ms earlier', () => {
  fc.assert(
    fc.property(
      rateArb,
      burstArb,
      fc.double({ min: 0, max: 1, noNaN: true }),
      fc.integer({ min: 0, max: 1_000_000 }),
      fc.double({ min: 0, max: 1, noNaN: true }),
      (rate, burst, fill, start, costFrac) => {
        const cost = Math.max(1, Math.round(costFrac * burst));
        const s = { tokens: fill * cost * 0.999, updatedMs: start }; // fewer than cost tokens
        const r = takeToken(s, start, rate, burst, cost);
        assert.equal(r.allowed, false);
        assert.equal(takeToken(r.state, start + r.retryAfterMs, rate, burst, cost).allowed, true);
        if (r.retryAfterMs > 1) assert.equal(takeToken(r.state, start + r.retryAfterMs - 1, rate, burst, cost).allowed, false);
      },
    ),
  );
});

void test('token bucket - property: an empty bucket refills at rate (tokens after dt = min(burst, rate*dt))', () => {
  fc.assert(
    fc.property(
      rateArb,
      burstArb,
      fc.integer({ min: 0, max: 10_000_000 }),
      fc.integer({ min: 0, max: 100_000 }),
      (rate, burst, start, dt) => {
        const r = takeToken({ tokens: 0, updatedMs: start }, start + dt, rate, burst, 0);
        const expected = Math.min(burst, (rate * dt) / 1000);
        assert.ok(Math.abs(r.state.tokens - expected) <= EPS * Math.max(1, expected), `${r.state.tokens} vs ${expected}`);
      },
    ),
  );
});

void test('token bucket - property: a client pacing at one cost per ceil(cost/rate) is never refused', () => {
  fc.assert(
    fc.property(rateArb, burstArb, fc.integer({ min: 1, max: 300 }), fc.integer({ min: 0, max: 50 }), (rate, burst, n, extraMs) => {
      const cost = 1;
      const gapMs = Math.ceil((cost * 1000) / rate) + extraMs;
      let s = fullBucket(burst, 0);
      for (let i = 0; i < n; i++) {
        const r = takeToken(s, i * gapMs, rate, burst, cost);
        assert.ok(r.allowed, `refused at take ${i}`);
        s = r.state;
      }
    }),
  );
});

void test('token bucket - property: a clock going backwards counts as no elapsed time', () => {
  fc.assert(
    fc.property(rateArb, burstArb, stepsArb, (rate, burst, steps) => {
      // The same takes on the running maximum of the clock give identical decisions.
      let a: BucketState = fullBucket(burst, 0);
      let b: BucketState = fullBucket(burst, 0);
      let now = 0;
      let high = 0;
      for (const dt of steps) {
        now += dt;
        high = Math.max(high, now);
        const ra = takeToken(a, now, rate, burst);
        const rb = takeToken(b, high, rate, burst);
        assert.equal(ra.allowed, rb.allowed);
        assert.deepEqual(ra.state, rb.state);
        assert.equal(ra.retryAfterMs, rb.retryAfterMs);
        assert.ok(ra.state.updatedMs <= high);
        a = ra.state;
        b = rb.state;
      }
    }),
  );
});
