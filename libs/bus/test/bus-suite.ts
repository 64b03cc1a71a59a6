/**
 * The one behaviour suite every `Bus` adapter passes (InProcessBus, NatsBus).
 * Each test opens its own bus and uses its own random subject prefix, waits
 * on events (never on sleeps) and proves "nothing delivered" by publishing a
 * sentinel afterwards and waiting for it: delivery is ordered per publisher,
 * so anything wrongly delivered would have arrived before the sentinel.
 */
import { after, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { BusError, subjects, type Bus, type BusMessage, type Subscription, type SubscribeOptions } from '../src/index.ts';

/** Options the suite passes to the factory (an adapter may ignore them). */
export interface BusFactoryOptions {
  onError?: (err: unknown, subject?: string) => void;
}

export type BusFactory = (opts?: BusFactoryOptions) => Promise<Bus>;

/** Per-test limit, ms: a lost message fails the test instead of hanging it. */
const TEST_TIMEOUT_MS = 15_000;
/** How long `waitFor` waits for the expected count before failing with a count, ms. */
const WAIT_MS = 5_000;

const enc = new TextEncoder();
const dec = new TextDecoder();
const text = (s: string): Uint8Array => enc.encode(s);
const str = (d: Uint8Array): string => dec.decode(d);

/** A random subject prefix, subject-safe for `subjects()`. */
export function randomPrefix(): string {
  return `t_${randomBytes(6).toString('hex')}`;
}

/** Resolves when `predicate()` holds, re-checked by `notify()`; rejects with `describe()` after WAIT_MS. */
class Waiter {
  private waiters: Array<{ check: () => boolean; resolve: () => void }> = [];
  notify(): void {
    this.waiters = this.waiters.filter((w) => {
      if (!w.check()) return true;
      w.resolve();
      return false;
    });
  }
  until(check: () => boolean, describe: () => string): Promise<void> {
    if (check()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w.check !== check);
        reject(new Error(`timed out after ${WAIT_MS} ms: ${describe()}`));
      }, WAIT_MS);
      this.waiters.push({
        check,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      });
    });
  }
}

interface Collector {
  readonly msgs: BusMessage[];
  readonly sub: Subscription;
  /** Resolves once at least `n` messages arrived. */
  waitFor(n: number): Promise<void>;
  /** Resolves once a message on `subject` with payload `payload` arrived. */
  waitForPayload(payload: string): Promise<void>;
}

function collect(bus: Bus, subject: string, opts?: SubscribeOptions, shared?: Waiter): Collector {
  const msgs: BusMessage[] = [];
  const waiter = shared ?? new Waiter();
  const sub = bus.subscribe(
    subject,
    (m) => {
      msgs.push(m);
      waiter.notify();
    },
    opts,
  );
  return {
    msgs,
    sub,
    waitFor: (n) =>
      waiter.until(
        () => msgs.length >= n,
        () => `${subject}: expected ${n} messages, got ${msgs.length}`,
      ),
    waitForPayload: (payload) =>
      waiter.until(
        () => msgs.some((m) => str(m.data) === payload),
        () => `${subject}: no "${payload}" among ${msgs.length} messages`,
      ),
  };
}

async function rejectsWithCode(p: Promise<unknown>, code: BusError['code']): Promise<BusError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof BusError, `expected BusError, got ${String(err)}`);
    assert.equal(err.code, code);
    return err;
  }
  assert.fail(`expected BusError ${code}, but it resolved`);
}

/** Defines the shared tests for the adapter `name` built by `factory` (a fresh bus per call). */
export function busSuite(name: string, factory: BusFactory): void {
  const opened = new Set<Bus>();
  after(async () => {
    for (const b of opened) await b.close();
  });

  async function setup(t: TestContext, opts?: BusFactoryOptions): Promise<{ bus: Bus; p: string }> {
    const bus = await factory(opts);
    opened.add(bus);
    t.after(() => bus.close());
    return { bus, p: randomPrefix() };
  }

  const it = (title: string, fn: (t: TestContext) => Promise<void>): void => {
    void test(`${name} - ${title}`, { timeout: TEST_TIMEOUT_MS }, fn);
  };

  it('exact subject: delivers data to the subscriber, nothing from other subjects', async (t) => {
    const { bus, p } = await setup(t);
    const c = collect(bus, `${p}.a`);
    bus.publish(`${p}.b`, text('other'));
    bus.publish(`${p}.a.b`, text('deeper'));
    bus.publish(`${p}.a`, text('hello'));
    await c.waitFor(1);
    const m = c.msgs[0]!;
    assert.equal(m.subject, `${p}.a`);
    assert.equal(str(m.data), 'hello');
    assert.equal(m.reply, undefined);
    assert.equal(m.headers, undefined);
    bus.publish(`${p}.a`, text('sentinel'));
    await c.waitForPayload('sentinel');
    assert.deepEqual(
      c.msgs.map((x) => str(x.data)),
      ['hello', 'sentinel'],
    );
  });

  it('wildcard *: matches exactly one token', async (t) => {
    const { bus, p } = await setup(t);
    const c = collect(bus, `${p}.a.*`);
    bus.publish(`${p}.a`, text('no-token'));
    bus.publish(`${p}.a.b.c`, text('two-tokens'));
    bus.publish(`${p}.x.b`, text('other-branch'));
    bus.publish(`${p}.a.b`, text('one'));
    bus.publish(`${p}.a.c`, text('two'));
    bus.publish(`${p}.a.end`, text('sentinel'));
    await c.waitForPayload('sentinel');
    assert.deepEqual(
      c.msgs.map((m) => `${m.subject}=${str(m.data)}`),
      [`${p}.a.b=one`, `${p}.a.c=two`, `${p}.a.end=sentinel`],
    );
  });

  it('wildcard >: matches one or more trailing tokens', async (t) => {
    const { bus, p } = await setup(t);
    const c = collect(bus, `${p}.a.>`);
    const mid = collect(bus, `${p}.*.b`);
    bus.publish(`${p}.a`, text('zero-tokens'));
    bus.publish(`${p}.x.y`, text('other-branch'));
    bus.publish(`${p}.a.b`, text('one'));
    bus.publish(`${p}.a.b.c.d`, text('three'));
    bus.publish(`${p}.a.end`, text('sentinel'));
    await c.waitForPayload('sentinel');
    assert.deepEqual(
      c.msgs.map((m) => str(m.data)),
      ['one', 'three', 'sentinel'],
    );
    await mid.waitFor(1);
    assert.deepEqual(
      mid.msgs.map((m) => m.subject),
      [`${p}.a.b`],
    );
  });

  it('ordering: one publisher’s messages arrive in publish order', async (t) => {
    const { bus, p } = await setup(t);
    const n = 2_000;
    const c = collect(bus, `${p}.seq`);
    for (let i = 0; i < n; i++) bus.publish(`${p}.seq`, text(String(i)));
    await c.waitFor(n);
    assert.deepEqual(
      c.msgs.map((m) => Number(str(m.data))),
      Array.from({ length: n }, (_, i) => i),
    );
  });

  it('headers: round trip on publish and on reply', async (t) => {
    const { bus, p } = await setup(t);
    const headers = { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'X-Custom': 'a b:c', 'x-lower': 'v' };
    const c = collect(bus, `${p}.h`);
    bus.publish(`${p}.h`, text('x'), { headers });
    await c.waitFor(1);
    assert.deepEqual(c.msgs[0]!.headers, headers);

    bus.subscribe(`${p}.rr`, (m) => m.respond(text('pong'), { headers: { 'X-Echo': m.headers?.['X-Custom'] ?? 'missing' } }));
    const reply = await bus.request(`${p}.rr`, text('ping'), { timeoutMs: 2_000, headers });
    assert.deepEqual(reply.headers, { 'X-Echo': 'a b:c' });
    assert.equal(str(reply.data), 'pong');
  });

  it('queue group: each message goes to exactly one member; plain subscribers get all', async (t) => {
    const { bus, p } = await setup(t);
    const n = 200;
    const shared = new Waiter();
    const q1 = collect(bus, `${p}.work`, { queue: 'workers' }, shared);
    const q2 = collect(bus, `${p}.work`, { queue: 'workers' }, shared);
    const plain = collect(bus, `${p}.work`);
    for (let i = 0; i < n; i++) bus.publish(`${p}.work`, text(String(i)));
    await plain.waitFor(n);
    await shared.until(
      () => q1.msgs.length + q2.msgs.length >= n,
      () => `group got ${q1.msgs.length}+${q2.msgs.length} of ${n}`,
    );
    const seen = [...q1.msgs, ...q2.msgs].map((m) => Number(str(m.data))).sort((a, b) => a - b);
    assert.deepEqual(
      seen,
      Array.from({ length: n }, (_, i) => i),
      'every message exactly once across the group',
    );
    assert.ok(q1.msgs.length > 0 && q2.msgs.length > 0, `load shared: ${q1.msgs.length} / ${q2.msgs.length}`);
    // Nothing more arrives later (no duplicates in flight).
    bus.publish(`${p}.work`, text('sentinel'));
    await plain.waitForPayload('sentinel');
    await shared.until(
      () => q1.msgs.length + q2.msgs.length >= n + 1,
      () => 'sentinel to the group',
    );
    assert.equal(q1.msgs.length + q2.msgs.length, n + 1);
  });

  it('request/reply: concurrent requests each get their own reply', async (t) => {
    const { bus, p } = await setup(t);
    const s = subjects(p);
    bus.subscribe(s.routerCtl(), (m) => m.respond(text(`re:${str(m.data)}`)), { queue: 'router' });
    const replies = await Promise.all(
      Array.from({ length: 20 }, (_, i) => bus.request(s.routerCtl(), text(String(i)), { timeoutMs: 2_000 })),
    );
    assert.deepEqual(
      replies.map((r) => str(r.data)),
      Array.from({ length: 20 }, (_, i) => `re:${i}`),
    );
  });

  it('request: no reply within timeoutMs rejects with code timeout', async (t) => {
    const { bus, p } = await setup(t);
    const silent = collect(bus, `${p}.silent`);
    const started = performance.now();
    const err = await rejectsWithCode(bus.request(`${p}.silent`, text('?'), { timeoutMs: 150 }), 'timeout');
    assert.ok(performance.now() - started >= 140, 'waited about timeoutMs');
    assert.ok(err.message.length > 0);
    assert.equal(silent.msgs.length, 1, 'the request itself was delivered');
    assert.ok(silent.msgs[0]!.reply, 'with a reply subject');
  });

  it('request: nobody subscribed rejects with code no_responders, before timeoutMs', async (t) => {
    const { bus, p } = await setup(t);
    const started = performance.now();
    await rejectsWithCode(bus.request(`${p}.nobody`, text('?'), { timeoutMs: 5_000 }), 'no_responders');
    assert.ok(performance.now() - started < 2_500, 'did not wait for the timeout');
  });

  it('request: bad timeoutMs is a RangeError and sends nothing', async (t) => {
    const { bus, p } = await setup(t);
    const c = collect(bus, `${p}.r`);
    for (const timeoutMs of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      await assert.rejects(bus.request(`${p}.r`, text('bad'), { timeoutMs }), RangeError);
    }
    bus.publish(`${p}.r`, text('sentinel'));
    await c.waitForPayload('sentinel');
    assert.deepEqual(
      c.msgs.map((m) => str(m.data)),
      ['sentinel'],
    );
  });

  it('unsubscribe: stops delivery; calling it twice is safe', async (t) => {
    const { bus, p } = await setup(t);
    const gone = collect(bus, `${p}.u`);
    const stays = collect(bus, `${p}.u`);
    bus.publish(`${p}.u`, text('before'));
    await gone.waitFor(1);
    gone.sub.unsubscribe();
    gone.sub.unsubscribe();
    bus.publish(`${p}.u`, text('after'));
    bus.publish(`${p}.u`, text('sentinel'));
    await stays.waitForPayload('sentinel');
    assert.deepEqual(
      gone.msgs.map((m) => str(m.data)),
      ['before'],
    );
    assert.deepEqual(
      stays.msgs.map((m) => str(m.data)),
      ['before', 'after', 'sentinel'],
    );
  });

  it('subscription drain: a queue member leaving loses nothing already routed to it; afterwards the others get everything', async (t) => {
    const { bus, p } = await setup(t);
    const n = 100;
    const shared = new Waiter();
    const leaving = collect(bus, `${p}.dq`, { queue: 'owners' }, shared);
    const staying = collect(bus, `${p}.dq`, { queue: 'owners' }, shared);
    await bus.flush();
    for (let i = 0; i < n; i++) bus.publish(`${p}.dq`, text(String(i)));
    const drained = leaving.sub.drain();
    for (let i = n; i < 2 * n; i++) bus.publish(`${p}.dq`, text(String(i)));
    await drained;
    const heldAtDrain = leaving.msgs.length;
    assert.ok(heldAtDrain > 0, 'the leaving member had its share of what was published before the drain');
    for (let i = 2 * n; i < 3 * n; i++) bus.publish(`${p}.dq`, text(String(i)));
    await shared.until(
      () => leaving.msgs.length + staying.msgs.length >= 3 * n,
      () => `group got ${leaving.msgs.length}+${staying.msgs.length} of ${3 * n}`,
    );
    const seen = [...leaving.msgs, ...staying.msgs].map((m) => Number(str(m.data))).sort((a, b) => a - b);
    assert.deepEqual(
      seen,
      Array.from({ length: 3 * n }, (_, i) => i),
      'every message exactly once across the group: none lost to the drain',
    );
    assert.equal(leaving.msgs.length, heldAtDrain, 'nothing reaches a drained member');
    await leaving.sub.drain(); // twice: no-op
    staying.sub.unsubscribe();
    await staying.sub.drain(); // after unsubscribe: no-op
  });

  it('handler that throws: reported with its subject, other subscribers and later messages still delivered', async (t) => {
    const errors: Array<{ err: unknown; subject: string | undefined }> = [];
    const { bus, p } = await setup(t, { onError: (err, subject) => errors.push({ err, subject }) });
    const boom = new Error('boom');
    let calls = 0;
    bus.subscribe(`${p}.t`, () => {
      calls++;
      throw boom;
    });
    const ok = collect(bus, `${p}.t`);
    bus.publish(`${p}.t`, text('1'));
    bus.publish(`${p}.t`, text('2'));
    await ok.waitFor(2);
    assert.equal(calls, 2);
    assert.equal(errors.length, 2);
    assert.equal(errors[0]!.err, boom);
    assert.equal(errors[0]!.subject, `${p}.t`);
  });

  it('flush: resolves, and what was published before it is delivered', async (t) => {
    const { bus, p } = await setup(t);
    await bus.flush(); // nothing pending
    const c = collect(bus, `${p}.f`);
    for (let i = 0; i < 100; i++) bus.publish(`${p}.f`, text(String(i)));
    await bus.flush();
    await c.waitFor(100);
    assert.equal(c.msgs.length, 100);
  });

  it('drain: delivers in-flight messages, then the bus is closed', async (t) => {
    const { bus, p } = await setup(t);
    const n = 500;
    const c = collect(bus, `${p}.d`);
    for (let i = 0; i < n; i++) bus.publish(`${p}.d`, text(String(i)));
    const d1 = bus.drain();
    const d2 = bus.drain();
    await Promise.all([d1, d2]);
    assert.equal(c.msgs.length, n, 'every in-flight message delivered before drain resolved');
    assert.equal(str(c.msgs[n - 1]!.data), String(n - 1));
    await bus.drain(); // after close: still safe
    assert.throws(
      () => bus.subscribe(`${p}.d`, () => {}),
      (e: unknown) => e instanceof BusError && e.code === 'closed',
    );
    await rejectsWithCode(bus.request(`${p}.d`, text('?'), { timeoutMs: 500 }), 'closed');
    await rejectsWithCode(bus.flush(), 'closed');
    bus.publish(`${p}.d`, text('dropped')); // at most once: no throw
    assert.equal(c.msgs.length, n);
  });

  it('close: idempotent, rejects pending requests with closed, refuses new work', async (t) => {
    const { bus, p } = await setup(t);
    const silent = collect(bus, `${p}.c`);
    const pending = bus.request(`${p}.c`, text('?'), { timeoutMs: 10_000 });
    await silent.waitFor(1);
    await Promise.all([bus.close(), bus.close()]);
    await bus.close();
    await bus.drain();
    await rejectsWithCode(pending, 'closed');
    assert.throws(
      () => bus.subscribe(`${p}.c`, () => {}),
      (e: unknown) => e instanceof BusError && e.code === 'closed',
    );
    await rejectsWithCode(bus.request(`${p}.c`, text('?'), { timeoutMs: 500 }), 'closed');
    bus.publish(`${p}.c`, text('dropped'));
    assert.equal(silent.msgs.length, 1);
  });

  it('large payload: 256 KiB arrives intact, also as a reply', async (t) => {
    const { bus, p } = await setup(t);
    const big = new Uint8Array(randomBytes(256 * 1024));
    const c = collect(bus, `${p}.big`);
    bus.publish(`${p}.big`, big);
    await c.waitFor(1);
    assert.equal(c.msgs[0]!.data.byteLength, big.byteLength);
    assert.ok(Buffer.from(c.msgs[0]!.data).equals(Buffer.from(big)));
    bus.subscribe(`${p}.bigrr`, (m) => m.respond(big));
    const r = await bus.request(`${p}.bigrr`, text('send'), { timeoutMs: 5_000 });
    assert.ok(Buffer.from(r.data).equals(Buffer.from(big)));
  });

  it('subjects(): rejects unsafe tokens and builds nothing from them', async (t) => {
    const { bus, p } = await setup(t);
    const s = subjects(p);
    const c = collect(bus, s.allChannelsIn());
    const bad = ['a.b', 'a b', '>', '*', 'a>', '', 'x'.repeat(65), 'a\nb', 'ä'];
    const builders: Array<(v: string) => string> = [s.channelIn, s.channelOut, s.channelGame, s.channelCtl, s.gatewayAcks, s.shardCtl];
    for (const v of bad) {
      for (const build of builders) assert.throws(() => build(v), TypeError, JSON.stringify(v));
      assert.throws(() => subjects(v), TypeError, `prefix ${JSON.stringify(v)}`);
    }
    for (const v of bad) {
      try {
        bus.publish(s.channelIn(v), text(v));
      } catch {
        // refused: nothing was published
      }
    }
    assert.equal(s.channelIn('ok-1'), `${p}.ch.ok-1.in`);
    bus.publish(s.channelIn('ok-1'), text('sentinel'));
    await c.waitForPayload('sentinel');
    assert.deepEqual(
      c.msgs.map((m) => m.subject),
      [`${p}.ch.ok-1.in`],
    );
  });
}
