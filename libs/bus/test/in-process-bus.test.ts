import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessBus, openBus } from '../src/index.ts';
import { busSuite, randomPrefix } from './bus-suite.ts';

busSuite('in-process', (opts) => Promise.resolve(new InProcessBus({ onError: opts?.onError })));

void test('in-process - openBus with an empty natsUrl gives the in-process bus', async () => {
  const bus = await openBus({ natsUrl: '', name: 'test' });
  assert.equal(bus.kind, 'in-process');
  await bus.close();
});

void test('in-process - default onError logs a throwing handler once per subject and keeps delivering', async (t) => {
  const logged: unknown[][] = [];
  t.mock.method(console, 'error', (...args: unknown[]) => {
    logged.push(args);
  });
  const bus = new InProcessBus();
  t.after(() => bus.close());
  const p = randomPrefix();
  let calls = 0;
  bus.subscribe(`${p}.>`, () => {
    calls++;
    throw new Error('boom');
  });
  const got: string[] = [];
  bus.subscribe(`${p}.>`, (m) => got.push(m.subject));
  for (const s of ['a', 'a', 'a', 'b']) bus.publish(`${p}.${s}`, new Uint8Array(0));
  await bus.flush();
  assert.equal(calls, 4);
  assert.deepEqual(got, [`${p}.a`, `${p}.a`, `${p}.a`, `${p}.b`]);
  assert.equal(logged.length, 2, 'once for subject a, once for b');
  assert.match(String(logged[0]![0]), new RegExp(`${p}\\.a`));
});

void test('in-process - an onError that throws does not stop delivery', async (t) => {
  const bus = new InProcessBus({
    onError: () => {
      throw new Error('reporter broke');
    },
  });
  t.after(() => bus.close());
  const p = randomPrefix();
  bus.subscribe(`${p}.x`, () => {
    throw new Error('boom');
  });
  const got: number[] = [];
  bus.subscribe(`${p}.x`, (m) => got.push(m.data.byteLength));
  bus.publish(`${p}.x`, new Uint8Array(3));
  await bus.flush();
  assert.deepEqual(got, [3]);
});
