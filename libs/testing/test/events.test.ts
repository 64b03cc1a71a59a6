import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { counter, deferred, nextEvent, until, within, WaitTimeoutError, type Subscribable } from '../src/index.ts';

interface Ev {
  tick: (n: number) => void;
}

function emitter(): Subscribable<Ev> & { emit(n: number): void; listeners(): number } {
  const e = new EventEmitter();
  return {
    on: (event, listener) => {
      e.on(event, listener);
      return () => e.off(event, listener);
    },
    emit: (n) => e.emit('tick', n),
    listeners: () => e.listenerCount('tick'),
  };
}

test('nextEvent - resolves with the first matching event and unsubscribes', async () => {
  const e = emitter();
  const p = nextEvent<Ev, 'tick'>(e, 'tick', (n) => n > 1);
  e.emit(1);
  e.emit(2);
  e.emit(3);
  assert.deepEqual(await p, [2]);
  assert.equal(e.listeners(), 0);
});

test('nextEvent - with timeoutMs, rejects naming the event and unsubscribes', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const e = emitter();
  const p = nextEvent<Ev, 'tick'>(e, 'tick', () => true, { timeoutMs: 100 });
  t.mock.timers.tick(100);
  await assert.rejects(p, (err: Error) => err instanceof WaitTimeoutError && /no matching 'tick' event within 100 ms/.test(err.message));
  assert.equal(e.listeners(), 0);
});

test('within - passes the value through; at the deadline rejects naming what was awaited', async (t) => {
  assert.equal(await within(Promise.resolve(7), 'seven'), 7);
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const never = deferred<number>();
  const p = within(never.promise, 'the second batch', { timeoutMs: 250 });
  t.mock.timers.tick(249);
  never.resolve(1);
  assert.equal(await p, 1, 'settled before the deadline');
  const late = within(deferred().promise, 'the second batch', { timeoutMs: 250 });
  t.mock.timers.tick(250);
  await assert.rejects(late, { name: 'WaitTimeoutError', message: 'timed out after 250 ms waiting for the second batch' });
});

test('until - resolves with the first truthy value, polling an async check', async () => {
  let n = 0;
  assert.equal(await until('n to reach 3', async () => ++n >= 3 && n, { intervalMs: 1 }), 3);
  assert.equal(await until('zero is a value', () => 0), 0);
});

test('until - at its deadline rejects naming what and the last value; a throw rejects at once', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'] });
  let calls = 0;
  const p = until('the queue to drain', () => (calls++, null), { timeoutMs: 50, intervalMs: 10 });
  for (let i = 0; i < 6; i++) {
    await Promise.resolve();
    await Promise.resolve();
    t.mock.timers.tick(10);
  }
  await assert.rejects(p, { name: 'WaitTimeoutError', message: 'timed out after 50 ms waiting for the queue to drain (last: null)' });
  assert.equal(calls, 6, 'checked at 0, 10, … 50 ms');
  await assert.rejects(
    until('anything', () => {
      throw new Error('broken check');
    }),
    /broken check/,
  );
});

test('counter - reached(n) resolves on the n-th hit, at once when already there; times out with the count', async (t) => {
  const c = counter();
  const third = c.reached(3);
  let done = false;
  void third.then(() => (done = true));
  c.hit();
  c.hit();
  await Promise.resolve();
  assert.equal(done, false);
  c.hit();
  await third;
  assert.equal(c.count, 3);
  await c.reached(2);
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const p = c.reached(5, 'five sends', { timeoutMs: 30 });
  c.hit();
  t.mock.timers.tick(30);
  await assert.rejects(p, { name: 'WaitTimeoutError', message: 'timed out after 30 ms waiting for five sends (count: 4)' });
});

test('deferred - settles once from outside and reports it', async () => {
  const d = deferred<string>();
  assert.equal(d.settled, false);
  d.resolve('x');
  assert.equal(d.settled, true);
  assert.equal(await d.promise, 'x');
  const r = deferred();
  r.reject(new Error('no'));
  await assert.rejects(r.promise, /no/);
});
