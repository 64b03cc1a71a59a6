/**
 * Runs the shared bus suite against a real NATS server (NATS_URL, default
 * nats://127.0.0.1:4222). It FAILS, never skips, when NATS is unreachable.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BusError, connectNatsBus, hedgedRequest, openBus } from '../src/index.ts';
import { busSuite, randomPrefix } from './bus-suite.ts';

const NATS_URL = process.env.NATS_URL || 'nats://127.0.0.1:4222';

busSuite('nats', (opts) => connectNatsBus({ servers: NATS_URL, name: 'bus-suite', onError: opts?.onError }));

void test('nats - openBus with a URL connects to NATS', { timeout: 15_000 }, async () => {
  const bus = await openBus({ natsUrl: NATS_URL, name: 'bus-suite-open' });
  try {
    assert.equal(bus.kind, 'nats');
    await bus.flush();
  } finally {
    await bus.close();
  }
});

void test('nats - two connections: ordered delivery and request/reply across processes', { timeout: 15_000 }, async () => {
  const a = await connectNatsBus({ servers: NATS_URL, name: 'bus-suite-a' });
  const b = await connectNatsBus({ servers: NATS_URL, name: 'bus-suite-b' });
  try {
    const p = randomPrefix();
    const n = 1_000;
    const got: number[] = [];
    const all = new Promise<void>((resolve) => {
      b.subscribe(`${p}.x`, (m) => {
        got.push(m.data[0]! | (m.data[1]! << 8));
        if (got.length === n) resolve();
      });
    });
    b.subscribe(`${p}.rr`, (m) => m.respond(m.data.slice().reverse()));
    await b.flush(); // subscriptions registered on the server before A publishes
    for (let i = 0; i < n; i++) a.publish(`${p}.x`, new Uint8Array([i & 0xff, i >> 8]));
    await all;
    assert.deepEqual(
      got,
      Array.from({ length: n }, (_, i) => i),
    );
    const r = await a.request(`${p}.rr`, new Uint8Array([1, 2, 3]), { timeoutMs: 2_000 });
    assert.deepEqual([...r.data], [3, 2, 1]);
  } finally {
    await Promise.all([a.close(), b.close()]);
  }
});

void test('nats - unreachable server: connectNatsBus rejects', { timeout: 15_000 }, async () => {
  await assert.rejects(connectNatsBus({ servers: 'nats://127.0.0.1:1', name: 'bus-suite-unreachable' }));
});

void test('nats - hedgedRequest: no responders fails at once, without a re-send', { timeout: 15_000 }, async () => {
  const bus = await connectNatsBus({ servers: NATS_URL, name: 'bus-suite-hedge' });
  try {
    let hedges = 0;
    const started = performance.now();
    await assert.rejects(
      hedgedRequest(bus, `${randomPrefix()}.nobody`, new Uint8Array(0), { timeoutMs: 5_000, hedgeAfterMs: 1_000, onHedge: () => hedges++ }),
      (err: unknown) => err instanceof BusError && err.code === 'no_responders',
    );
    assert.ok(performance.now() - started < 1_000, 'before the hedge delay, far before the timeout');
    assert.equal(hedges, 0);
  } finally {
    await bus.close();
  }
});

void test(
  'nats - publishes of one turn leave together, in order with requests, subscriptions and flushes',
  { timeout: 15_000 },
  async () => {
    const a = await connectNatsBus({ servers: NATS_URL, name: 'bus-suite-turn-a' });
    const b = await connectNatsBus({ servers: NATS_URL, name: 'bus-suite-turn-b' });
    try {
      const p = randomPrefix();
      const seen: string[] = [];
      b.subscribe(`${p}.>`, (m) => {
        seen.push(new TextDecoder().decode(m.data));
        if (m.subject === `${p}.req`) m.respond(new Uint8Array([1]));
      });
      await b.flush();
      // Publishes spread over promise continuations of one turn, then a request: the request must not overtake them.
      const steps = Array.from({ length: 50 }, (_, i) =>
        Promise.resolve().then(() => a.publish(`${p}.pub`, new TextEncoder().encode(`p${i}`))),
      );
      await Promise.all(steps);
      await a.request(`${p}.req`, new TextEncoder().encode('req'), { timeoutMs: 2_000 });
      assert.deepEqual(seen, [...Array.from({ length: 50 }, (_, i) => `p${i}`), 'req'], 'publishes before the request, in order');
      // A publish then a flush: once the flush resolves, the server has the publish (b receives it without a wait on a timer).
      a.publish(`${p}.pub`, new TextEncoder().encode('last'));
      await a.flush();
      await b.flush();
      assert.equal(seen.at(-1), 'last');
      // One turn's publishes are handed to nats.js together at the turn's end (so they leave in one socket write).
      const stats = a.connection.stats();
      const before = stats.outMsgs;
      for (let i = 0; i < 10; i++) await Promise.resolve().then(() => a.publish(`${p}.pub`, new TextEncoder().encode(`t${i}`)));
      assert.equal(a.connection.stats().outMsgs, before, 'nothing handed to nats.js before the turn ends');
      await new Promise((r) => setImmediate(r));
      await a.flush();
      assert.equal(a.connection.stats().outMsgs, before + 10, 'the ten publishes, handed over at the end of the turn');
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  },
);
