/**
 * The router lease against this machine's Postgres (own schema): one holder
 * at a time, expiry hands it over, a holder that stops renewing loses it and
 * is refused afterwards, release hands it over at once, bad input changes
 * nothing; and two LeasedRouters on one bus: one answers router.ctl, the
 * standby takes over when the active one closes.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessBus, subjects as makeSubjects } from '@crowdplay/bus';
import { openStore, type Store } from '@crowdplay/store';
import { createTelemetry } from '@crowdplay/telemetry';
import { testSchema, type TestSchema } from '@crowdplay/testing';
import { LeasedRouter, RouterClient, RouterLease, type LeaseGrant } from '../src/index.ts';

/** Polls `f` every 20 ms until it returns a value, or throws after `ms`. */
async function until<T>(f: () => Promise<T | null | undefined> | T | null | undefined, what: string, ms = 5_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v !== null && v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('RouterLease (Postgres)', () => {
  let schema: TestSchema;
  let store: Store;
  let n = 0;
  const name = (): string => `lease-${++n}`;

  before(async () => {
    schema = await testSchema();
    store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 4, pgliteDir: 'memory' });
  });
  after(async () => {
    await store.close();
    await schema.drop();
  });

  it('one holder at a time: the second is refused while the first renews; renewals keep the term', async () => {
    const lease = name();
    const a = new RouterLease(store.db, { name: lease, holder: 'a', leaseMs: 10_000 });
    const b = new RouterLease(store.db, { name: lease, holder: 'b', leaseMs: 10_000 });
    const first = await a.acquire();
    assert.equal(first?.term, 1);
    assert.equal(await b.acquire(), null);
    const renewed = await a.acquire();
    assert.equal(renewed?.term, 1, 'a renewal is the same tenure');
    assert.ok(renewed!.validUntilMs >= first!.validUntilMs);
    assert.equal(await b.acquire(), null);
    const row = await a.current();
    assert.equal(row?.holder, 'a');
    assert.equal(row?.term, 1);
  });

  it('expiry hands it over; the holder that stopped renewing is refused afterwards', async () => {
    const lease = name();
    const a = new RouterLease(store.db, { name: lease, holder: 'a', leaseMs: 300 });
    const b = new RouterLease(store.db, { name: lease, holder: 'b', leaseMs: 300 });
    const t0 = performance.now();
    assert.equal((await a.acquire())?.term, 1);
    // a stops renewing; b tries as a standby does until it wins.
    const won: LeaseGrant = await until(() => b.acquire(), 'b takes the expired lease');
    const waited = performance.now() - t0;
    assert.ok(waited >= 250, `b won only after a's lease ran out (${waited.toFixed(0)} ms)`);
    assert.equal(won.term, 2, 'a new holder is a new term');
    assert.equal(await a.acquire(), null, "a's renewal after losing it is refused");
    assert.deepEqual(
      { holder: (await b.current())?.holder, term: (await b.current())?.term },
      { holder: 'b', term: 2 },
      'the refused renewal changed nothing',
    );
  });

  it('a holder whose lease lapsed gets a new term even when nobody took it meanwhile', async () => {
    const lease = name();
    const a = new RouterLease(store.db, { name: lease, holder: 'a', leaseMs: 150 });
    assert.equal((await a.acquire())?.term, 1);
    const again = await until(async () => {
      const row = await store.db.query<{ expired: boolean }>('SELECT expires_at < now() AS expired FROM router_lease WHERE name = $1', [
        lease,
      ]);
      return row.rows[0]?.expired ? a.acquire() : null;
    }, 'a takes its lapsed lease again');
    assert.equal(again.term, 2, 'not the same tenure: its Router must start afresh');
  });

  it('release hands it over at once; a second release or one by a non-holder changes nothing', async () => {
    const lease = name();
    const a = new RouterLease(store.db, { name: lease, holder: 'a', leaseMs: 60_000 });
    const b = new RouterLease(store.db, { name: lease, holder: 'b', leaseMs: 60_000 });
    await a.acquire();
    assert.equal(await b.release(), false);
    assert.equal(await b.acquire(), null, "b's release did not end a's tenure");
    assert.equal(await a.release(), true);
    assert.equal(await a.release(), false);
    assert.equal((await b.acquire())?.term, 2, 'the standby wins at its next try, without waiting out the 60 s');
  });

  it('bad input is refused and writes nothing', async () => {
    const lease = name();
    for (const leaseMs of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY])
      assert.throws(() => new RouterLease(store.db, { name: lease, holder: 'a', leaseMs }), RangeError, String(leaseMs));
    assert.throws(() => new RouterLease(store.db, { name: lease, holder: '', leaseMs: 1_000 }), TypeError);
    assert.throws(() => new RouterLease(store.db, { name: '', holder: 'a', leaseMs: 1_000 }), TypeError);
    const rows = await store.db.query('SELECT 1 FROM router_lease WHERE name = $1 OR name = $2', [lease, '']);
    assert.equal(rows.rows.length, 0);
  });
});

describe('LeasedRouter: two replicas on one bus', () => {
  let schema: TestSchema;
  let store: Store;

  before(async () => {
    schema = await testSchema();
    store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 4, pgliteDir: 'memory' });
  });
  after(async () => {
    await store.close();
    await schema.drop();
  });

  it('one is active and answers router.ctl; the standby takes over when it closes; a closed one stays down', async () => {
    const bus = new InProcessBus();
    const subjects = makeSubjects(`lease${process.pid}`);
    const telemetry = createTelemetry({ service: 'test', level: 'silent', refusalLogIntervalMs: 60_000 });
    const opts = { leaseMs: 3_000, shardTimeoutMs: 3_000, waitForShardMs: 100, requestTimeoutMs: 500, checkMs: 50 };
    const r1 = new LeasedRouter({ bus, subjects, store, telemetry }, { ...opts, holder: 'r1' });
    const r2 = new LeasedRouter({ bus, subjects, store, telemetry }, { ...opts, holder: 'r2' });
    const client = new RouterClient(bus, subjects, 500);
    try {
      await r1.start();
      await r2.start();
      assert.equal(r1.isActive(), true);
      assert.equal(r2.isActive(), false);
      // Standby calls are refused as retryable; the bus reaches the active one only.
      await assert.rejects(r2.assign('nope'), (e: { code?: string }) => e.code === 'CP_ERR_CHANNEL_UNAVAILABLE');
      assert.deepEqual(await client.membership(), []);
      // The standby keeps trying and stays standby while r1 renews (several of its tries).
      const row = await r1.lease.current();
      await until(async () => ((await r1.lease.current())!.expiresAt > row!.expiresAt ? true : null), 'r1 renews');
      assert.equal(r2.isActive(), false);
      await r1.close();
      const t0 = performance.now();
      // r2 tries every second; the released lease would otherwise last 3 s.
      // Polled every turn of the event loop: the first instant it reads active, it must already answer router.ctl.
      while (!r2.isActive() && performance.now() - t0 < 2_500) await new Promise((r) => setImmediate(r));
      assert.ok(r2.isActive(), 'r2 takes over at its next try, before the lease would have expired');
      assert.equal((await r2.lease.current())?.holder, 'r2');
      assert.equal((await r2.lease.current())?.term, 2);
      assert.deepEqual(await client.membership(), [], 'r2 answers router.ctl now');
      assert.equal(r1.isActive(), false);
      await assert.rejects(r1.lookup('x'), (e: { code?: string }) => e.code === 'CP_ERR_CHANNEL_UNAVAILABLE');
    } finally {
      await r1.close();
      await r2.close();
      await telemetry.close();
    }
  });

  it('renews on a connection of its own: a pool held by long statements does not let the lease lapse', async () => {
    const busy = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 1, pgliteDir: 'memory', migrate: false });
    const telemetry = createTelemetry({ service: 'test', level: 'silent', refusalLogIntervalMs: 60_000 });
    const r = new LeasedRouter(
      { bus: new InProcessBus(), subjects: makeSubjects(`leasebusy${process.pid}`), store: busy, telemetry },
      { holder: 'busy', leaseName: `busy-${process.pid}`, leaseMs: 600, shardTimeoutMs: 3_000, waitForShardMs: 100, requestTimeoutMs: 500 },
    );
    let sleeping: Promise<unknown> | undefined;
    try {
      await r.start();
      assert.equal(r.isActive(), true);
      // The pool's one connection sleeps for three leases; renewals every 200 ms must not queue behind it.
      sleeping = busy.db.query('SELECT pg_sleep(1.8)');
      const t0 = performance.now();
      while (performance.now() - t0 < 1_700) {
        assert.equal(r.isActive(), true, `active at ${Math.round(performance.now() - t0)} ms`);
        await new Promise((res) => setTimeout(res, 50));
      }
      assert.equal((await r.lease.current())?.term, 1, 'one tenure throughout');
    } finally {
      await sleeping;
      await r.close();
      await busy.close();
      await telemetry.close();
    }
  });
});
