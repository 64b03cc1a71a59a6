import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TypedEmitter } from '@crowdplay/sdk-viewer';

interface Ev {
  n: (value: number) => void;
  pair: (a: string, b: number) => void;
}

class Source extends TypedEmitter<Ev> {
  fire<K extends keyof Ev>(event: K, ...args: Parameters<Ev[K]>): boolean {
    return (this.emit as (e: K, ...a: Parameters<Ev[K]>) => boolean)(event, ...args);
  }
}

test('sdk-viewer emitter - on/off/once deliver in order and unsubscribe', () => {
  const s = new Source();
  const got: string[] = [];
  const off = s.on('n', (v) => got.push(`on:${v}`));
  s.once('n', (v) => got.push(`once:${v}`));
  s.on('pair', (a, b) => got.push(`${a}${b}`));
  assert.equal(s.listenerCount('n'), 2);
  assert.equal(s.fire('n', 1), true);
  assert.equal(s.listenerCount('n'), 1, 'once removed itself');
  s.fire('n', 2);
  s.fire('pair', 'x', 3);
  off();
  assert.equal(s.fire('n', 4), false, 'no listener left');
  assert.deepEqual(got, ['on:1', 'once:1', 'on:2', 'x3']);
});

test('sdk-viewer emitter - a listener added during emit waits for the next one', () => {
  const s = new Source();
  const got: number[] = [];
  s.on('n', () => {
    s.on('n', (v) => got.push(v));
  });
  s.fire('n', 1);
  assert.deepEqual(got, []);
  s.fire('n', 2);
  assert.deepEqual(got, [2]);
});
