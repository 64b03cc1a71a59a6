import { before, it } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError } from '@crowdplay/protocol';
import { effectiveQuotas, utcDay, type Store } from '../src/index.ts';
import { eachStoreBackend } from './backends.ts';

const DEFAULTS = { channels: 100_000, connections: 200_000, intentsPerS: 50_000, grantPointsPerDay: 1_000_000_000_000, bots: 3 };

eachStoreBackend('quotas', (ctx) => {
  let store: Store;
  let stores: Store[];
  before(() => {
    stores = ctx.stores;
    store = stores[0]!;
  });

  it('quotas - overrides are set, read back and cleared; the rest take the defaults', async () => {
    assert.deepEqual(await store.quotas.overrides('acme'), {});
    assert.deepEqual(await store.quotas.set('acme', { channels: 3, grantPointsPerDay: 0 }), { channels: 3, grantPointsPerDay: 0 });
    assert.deepEqual(await store.quotas.set('acme', { connections: 7, grantPointsPerDay: null }), { channels: 3, connections: 7 });
    assert.deepEqual(effectiveQuotas(DEFAULTS, await store.quotas.overrides('acme')), { ...DEFAULTS, channels: 3, connections: 7 });
    assert.deepEqual(await store.quotas.set('acme', { connections: null, channels: null }), {});
    assert.deepEqual(await store.quotas.overrides('other'), {});
  });

  it('quotas - bad values and unknown tenants are refused with a code and change nothing', async () => {
    await store.quotas.set('acme', { channels: 5 });
    for (const bad of [-1, 1.5, Number.NaN, 2 ** 60]) {
      await assert.rejects(store.quotas.set('acme', { channels: bad, connections: 9 }), (e) => isCrowdplayError(e, 'CP_ERR_PROTO_INVALID'));
    }
    assert.deepEqual(await store.quotas.overrides('acme'), { channels: 5 });
    await assert.rejects(store.quotas.set('nobody', { channels: 1 }), (e) => isCrowdplayError(e, 'CP_ERR_TENANT_UNKNOWN'));
    await assert.rejects(store.quotas.overrides('nobody'), (e) => isCrowdplayError(e, 'CP_ERR_TENANT_UNKNOWN'));
    assert.equal((await store.quotas.all()).has('nobody'), false);
    await store.quotas.set('acme', { channels: null });
  });

  it('quotas - channels: creation stops at the quota, existing channels still resolve, other tenants unaffected', async () => {
    await store.quotas.set('acme', { channels: 2 });
    await store.channels.ensure('acme-1', 'acme', DEFAULTS.channels);
    await store.channels.ensure('acme-2', 'acme', DEFAULTS.channels);
    await assert.rejects(store.channels.ensure('acme-3', 'acme', DEFAULTS.channels), (e) => isCrowdplayError(e, 'CP_ERR_TENANT_QUOTA'));
    assert.equal(await store.channels.get('acme-3'), null, 'nothing written');
    assert.equal((await store.channels.ensure('acme-1', 'acme', DEFAULTS.channels)).id, 'acme-1', 'an existing channel is not refused');
    await store.channels.ensure('other-1', 'other', DEFAULTS.channels);
    // The default applies without an override.
    await assert.rejects(store.channels.ensure('other-2', 'other', 1), (e) => isCrowdplayError(e, 'CP_ERR_TENANT_QUOTA'));
    await store.quotas.set('acme', { channels: null });
  });

  it('quotas - channels: concurrent creations from every store never pass the quota', async () => {
    await store.tenants.create('racer', 'Racer');
    await store.quotas.set('racer', { channels: 5 });
    const results = await Promise.allSettled(
      Array.from({ length: 24 }, (_, i) => stores[i % stores.length]!.channels.ensure(`race-${i}`, 'racer', DEFAULTS.channels)),
    );
    const ok = results.filter((r) => r.status === 'fulfilled').length;
    const refused = results.filter((r) => r.status === 'rejected' && isCrowdplayError(r.reason, 'CP_ERR_TENANT_QUOTA')).length;
    assert.equal(ok, 5);
    assert.equal(refused, 19);
    const { rows } = await store.db.query<{ n: string }>("SELECT count(*) AS n FROM channels WHERE tenant_id = 'racer'");
    assert.equal(Number(rows[0]!.n), 5);
  });

  it('quotas - channels: a burst of first joins shares its creation transactions, within the quota', async () => {
    await store.tenants.create('burst', 'Burst');
    await store.quotas.set('burst', { channels: 40 });
    await store.tenants.create('squatter', 'Squatter');
    await store.channels.ensure('burst-taken', 'squatter', DEFAULTS.channels);
    const db = store.db as { tx: (...args: never[]) => unknown };
    const tx = db.tx;
    let txs = 0;
    db.tx = ((...args: never[]) => {
      txs++;
      return (tx as (...a: never[]) => unknown).apply(db, args);
    }) as typeof db.tx;
    let results: Array<PromiseSettledResult<{ id: string; tenantId: string }>>;
    try {
      // 50 asked in one turn (one of them twice, one another tenant's): 40 fit the quota.
      const ids = [...Array.from({ length: 50 }, (_, i) => `burst-${i}`), 'burst-3', 'burst-taken'];
      results = await Promise.allSettled(ids.map((id) => store.channels.ensure(id, 'burst', DEFAULTS.channels)));
    } finally {
      db.tx = tx;
    }
    // The creations asked while the first transaction runs share the next one (a pool answers the look-ups in a few turns).
    assert.ok(txs >= 1 && txs <= 3, `the burst shares its transactions: ${txs} for 50 creations`);
    const fresh = results.slice(0, 50);
    assert.equal(fresh.filter((r) => r.status === 'fulfilled').length, 40, '40 created');
    assert.equal(
      fresh.filter((r) => r.status === 'rejected' && isCrowdplayError(r.reason, 'CP_ERR_TENANT_QUOTA')).length,
      10,
      'the rest refused as over quota',
    );
    assert.equal(results[3]!.status === 'fulfilled', results[50]!.status === 'fulfilled', 'an id asked twice gets one answer');
    const foreign = results[51]!;
    assert.ok(
      foreign.status === 'rejected' && isCrowdplayError(foreign.reason, 'CP_ERR_AUTH_FORBIDDEN_CHANNEL'),
      "another tenant's channel is refused as before",
    );
    const { rows } = await store.db.query<{ n: string }>("SELECT count(*) AS n FROM channels WHERE tenant_id = 'burst'");
    assert.equal(Number(rows[0]!.n), 40, 'nothing over the quota was written');
    assert.equal((await store.channels.get('burst-taken'))?.tenantId, 'squatter', "the other tenant's channel is unchanged");
  });

  it('quotas - grant points: reserved exactly per UTC day, released, and concurrent reservations never pass', async () => {
    const day = utcDay(new Date('2026-03-01T23:59:59Z'));
    assert.equal(day, '2026-03-01');
    await store.quotas.set('acme', { grantPointsPerDay: 1_000 });
    assert.deepEqual(await store.quotas.reserveGrantPoints('acme', 600, DEFAULTS.grantPointsPerDay, day), {
      allowed: true,
      used: 600,
      limit: 1_000,
    });
    assert.deepEqual(await store.quotas.reserveGrantPoints('acme', 500, DEFAULTS.grantPointsPerDay, day), {
      allowed: false,
      used: 600,
      limit: 1_000,
    });
    await store.quotas.releaseGrantPoints('acme', 100, day);
    assert.equal((await store.quotas.reserveGrantPoints('acme', 500, DEFAULTS.grantPointsPerDay, day)).allowed, true);
    assert.equal(await store.quotas.grantedPoints('acme', day), 1_000);
    assert.equal((await store.quotas.reserveGrantPoints('acme', 1, DEFAULTS.grantPointsPerDay, '2026-03-02')).allowed, true, 'a new day');
    assert.deepEqual(await store.quotas.reserveGrantPoints('other', 2_000, 1_500, day), { allowed: false, used: 0, limit: 1_500 });
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => stores[i % stores.length]!.quotas.reserveGrantPoints('other', 100, 1_500, day)),
    );
    assert.equal(results.filter((r) => r.allowed).length, 15);
    assert.equal(await store.quotas.grantedPoints('other', day), 1_500);
  });
});
