import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError } from '@crowdplay/protocol';
import { testSchema, type TestSchema } from '@crowdplay/testing';
import { readdirSync } from 'node:fs';
import { MIGRATIONS_DIR, openStore, parseRoundCursor, roundCursor, tenantNameProblem, type RoundCursor, type Store } from '../src/index.ts';

/** The row of an open two-outcome pool round `id` of `channelId` (acme's), written at `epoch`. */
function openPool(channelId: string, id: string, epoch: number) {
  return {
    channelId,
    id,
    uid: `${channelId}/${id}`,
    tenantId: 'acme',
    kind: 'pool' as const,
    outcomes: ['x', 'y'],
    liquidity: null,
    takeBps: 0,
    openedAt: 1_700_000_000_000,
    deadlineAt: 1_700_000_060_000,
    epoch,
  };
}

/** Counts the round-update statements `store` sends until `restore()`. */
function countRoundUpdates(store: Store): { n: number; restore: () => void } {
  const db = store.db as { query: (...args: never[]) => unknown };
  const query = db.query;
  const c = {
    n: 0,
    restore: () => {
      db.query = query;
    },
  };
  db.query = ((sql: unknown, ...rest: never[]) => {
    if (typeof sql === 'string' && /UPDATE rounds r SET state/.test(sql)) c.n++;
    return (query as (...a: unknown[]) => unknown).call(db, sql, ...rest);
  }) as typeof db.query;
  return c;
}

/** The same suite against real Postgres (own schema) and embedded PGlite. */
function storeSuite(name: string, open: () => Promise<{ store: Store; cleanup: () => Promise<void> }>): void {
  describe(`store (${name})`, () => {
    let store: Store;
    let cleanup: () => Promise<void>;
    before(async () => {
      ({ store, cleanup } = await open());
    });
    after(async () => {
      await store.close();
      await store.close(); // idempotent
      await cleanup();
    });

    it('tenants - create, look up by API key, rotate', async () => {
      const { tenant, apiKey } = await store.tenants.create('acme', 'Acme');
      assert.equal(tenant.id, 'acme');
      assert.match(apiKey, /^cpk_acme_[0-9a-f]{48}$/);
      assert.equal((await store.tenants.byApiKey(apiKey))?.id, 'acme');
      assert.equal(await store.tenants.byApiKey(apiKey + 'x'), null);
      const rotated = await store.tenants.rotateKey('acme');
      assert.notEqual(rotated.apiKey, apiKey);
      assert.equal(await store.tenants.byApiKey(apiKey), null, 'old key stops working');
      assert.equal((await store.tenants.byApiKey(rotated.apiKey))?.id, 'acme');
      assert.deepEqual(
        (await store.tenants.list()).map((t) => t.id),
        ['acme'],
      );
      const oldSecret = (await store.tenants.get('acme'))!.signingSecret;
      const rotatedSecret = await store.tenants.rotateSecret('acme');
      assert.notEqual(rotatedSecret.signingSecret, oldSecret);
      assert.equal((await store.tenants.get('acme'))!.signingSecret, rotatedSecret.signingSecret);
      await assert.rejects(store.tenants.rotateSecret('nobody'), (e) => isCrowdplayError(e, 'CP_ERR_TENANT_UNKNOWN'));
    });

    it('tenants - ensure creates a missing tenant once and never changes an existing one', async () => {
      const before = await store.tenants.get('acme');
      assert.equal(await store.tenants.ensure('acme', 'Renamed'), false);
      assert.deepEqual(await store.tenants.get('acme'), before, 'an existing tenant is left as it was');
      assert.equal(await store.tenants.ensure('botco', 'Bot'), true);
      assert.equal(await store.tenants.ensure('botco', 'Bot again'), false);
      assert.equal((await store.tenants.get('botco'))?.name, 'Bot');
      await assert.rejects(store.tenants.ensure('bad id!', 'x'), TypeError);
      assert.equal(await store.tenants.get('bad id!'), null);
      await store.db.query(`DELETE FROM tenants WHERE id = 'botco'`);
    });

    it('tenants - bad input is refused and changes nothing', async () => {
      await assert.rejects(store.tenants.create('bad id!', 'x'), TypeError);
      // A new id starting with "-" or "_" would read as an option, or look like one, on every command line naming it.
      for (const id of ['--name', '-x', '_x'])
        await assert.rejects(
          store.tenants.create(id, 'x'),
          (e) => e instanceof TypeError && /starts with a letter or a digit/.test(e.message),
          id,
        );
      // A name is printed to operators' terminals as it is: no control or bidi characters, not blank, ≤ 100 code points.
      for (const name of ['a\nb', 'red\u001b[31m', 'abc\u202Edef', ' ', 'x'.repeat(101)])
        await assert.rejects(store.tenants.create('named', name), (e) => e instanceof TypeError && /tenant name /.test(e.message), name);
      assert.equal(tenantNameProblem('🎉'.repeat(100)), undefined, '100 code points, 200 UTF-16 units');
      await assert.rejects(store.tenants.create('acme', 'dup'), (e: { code?: string }) => e.code === '23505');
      await assert.rejects(store.tenants.rotateKey('nobody'), (e) => isCrowdplayError(e, 'CP_ERR_TENANT_UNKNOWN'));
      assert.deepEqual(
        (await store.tenants.list()).map((t) => [t.id, t.name]),
        [['acme', 'Acme']],
      );
    });

    it('channels - belong to one tenant', async () => {
      await store.tenants.create('other', 'Other');
      const c = await store.channels.ensure('room-1', 'acme');
      assert.deepEqual([c.tenantId, c.epoch, c.owner], ['acme', 0, null]);
      await assert.rejects(store.channels.ensure('room-1', 'other'), (e) => isCrowdplayError(e, 'CP_ERR_AUTH_FORBIDDEN_CHANNEL'));
      await assert.rejects(store.channels.ensure('no.dots', 'acme'), (e) => isCrowdplayError(e, 'CP_ERR_CHANNEL_INVALID_ID'));
      assert.equal((await store.channels.get('room-1'))?.tenantId, 'acme');
      assert.equal(await store.channels.get('no.dots'), null);
    });

    it('channels - acquire bumps the epoch and fences stale snapshot writes', async () => {
      await store.channels.ensure('room-2', 'acme');
      const e1 = await store.channels.acquire('room-2', 'shard-a');
      await store.channels.saveSnapshot('room-2', e1, 10, { n: 1 });
      const e2 = await store.channels.acquire('room-2', 'shard-b');
      assert.equal(e2, e1 + 1);
      await assert.rejects(store.channels.saveSnapshot('room-2', e1, 11, { n: 666 }), (e) =>
        isCrowdplayError(e, 'CP_ERR_CHANNEL_STALE_EPOCH'),
      );
      const snap = await store.channels.loadSnapshot('room-2');
      assert.deepEqual([snap?.epoch, snap?.eventId, snap?.state], [e1, 10, { n: 1 }], 'the stale write changed nothing');
      await store.channels.saveSnapshot('room-2', e2, 12, { n: 2 });
      assert.deepEqual((await store.channels.loadSnapshot('room-2'))?.state, { n: 2 });
      assert.equal(await store.channels.release('room-2', 'shard-a', e1), false, 'old owner cannot release');
      assert.deepEqual(
        (await store.channels.listOwned('shard-b')).map((c) => c.id),
        ['room-2'],
      );
      assert.equal(await store.channels.release('room-2', 'shard-b', e2), true);
      assert.equal((await store.channels.get('room-2'))?.owner, null);
    });

    it('channels - bulk acquire, snapshots and release: one statement each, fenced per channel', async () => {
      const ids = ['bulk-1', 'bulk-2', 'bulk-3'];
      for (const id of ids) await store.channels.ensure(id, 'acme');
      await store.channels.ensure('bulk-moved', 'acme');
      assert.equal(await store.channels.beginMigration('bulk-moved', 'bulk-moved-2'), 'started');
      const epochs = await store.channels.acquireMany([
        { channel: 'bulk-1', shard: 'shard-a' },
        { channel: 'bulk-2', shard: 'shard-b' },
        { channel: 'bulk-3', shard: 'shard-a' },
        { channel: 'bulk-moved', shard: 'shard-a' },
        { channel: 'nope', shard: 'shard-a' },
        { channel: 'no.dots', shard: 'shard-a' },
      ]);
      assert.deepEqual([...epochs.keys()].sort(), ids, 'migrated, unknown and invalid channels are left out');
      const rows = await store.channels.getMany([...ids, 'bulk-moved', 'nope', 'no.dots']);
      assert.deepEqual(
        ids.map((id) => [rows.get(id)?.owner, rows.get(id)?.epoch]),
        [
          ['shard-a', epochs.get('bulk-1')],
          ['shard-b', epochs.get('bulk-2')],
          ['shard-a', epochs.get('bulk-3')],
        ],
      );
      assert.equal(rows.get('bulk-moved')?.owner, null, 'the migrated channel got no owner');
      assert.equal(rows.has('nope'), false);
      // bulk-3 moves on: its snapshot at the old epoch is refused, the others written.
      const e3 = await store.channels.acquire('bulk-3', 'shard-b');
      const stale = await store.channels.saveSnapshots(
        ids.map((id) => ({ channel: id, epoch: epochs.get(id)!, eventId: 7, state: { id } })),
      );
      assert.deepEqual(stale, ['bulk-3']);
      const snaps = await store.channels.loadSnapshots([...ids, 'nope']);
      assert.deepEqual([...snaps.values()].map((x) => [x.channelId, x.state]).sort(), [
        ['bulk-1', { id: 'bulk-1' }],
        ['bulk-2', { id: 'bulk-2' }],
      ]);
      const released = await store.channels.releaseMany([
        { channel: 'bulk-1', shard: 'shard-a', epoch: epochs.get('bulk-1')! },
        { channel: 'bulk-2', shard: 'shard-a', epoch: epochs.get('bulk-2')! },
        { channel: 'bulk-3', shard: 'shard-a', epoch: epochs.get('bulk-3')! },
      ]);
      assert.deepEqual([...released], ['bulk-1'], 'only an owner at its epoch releases');
      const after = await store.channels.getMany(ids);
      assert.deepEqual(
        ids.map((id) => after.get(id)?.owner),
        [null, 'shard-b', 'shard-b'],
      );
      assert.equal(after.get('bulk-3')?.epoch, e3);
      assert.equal((await store.channels.acquireMany([])).size, 0);
      assert.deepEqual(await store.channels.saveSnapshots([]), []);
    });

    it('rounds - bulk handoff writes open rounds at their channel epoch; stale, final or unknown ones are left as they were', async () => {
      const ids = ['ho-1', 'ho-2'];
      for (const id of ids) await store.channels.ensure(id, 'acme');
      const e1 = await store.channels.acquire('ho-1', 'shard-a');
      const e2 = await store.channels.acquire('ho-2', 'shard-a');
      await store.rounds.insert(openPool('ho-1', 'a', e1));
      await store.rounds.insert(openPool('ho-1', 'done', e1));
      await store.rounds.insert(openPool('ho-2', 'b', e2));
      assert.equal(await store.rounds.update('ho-1', 'done', e1, { state: 'cancelled', paid: true }), true);
      const e2b = await store.channels.acquire('ho-2', 'shard-b'); // ho-2 moved on: its old owner's write is stale
      const written = await store.rounds.handOffMany([
        { channelId: 'ho-1', id: 'a', epoch: e1, book: { handoff: 1 } },
        { channelId: 'ho-1', id: 'done', epoch: e1, book: { handoff: 2 } },
        { channelId: 'ho-2', id: 'b', epoch: e2, book: { handoff: 3 } },
        { channelId: 'ho-1', id: 'nope', epoch: e1, book: { handoff: 4 } },
      ]);
      assert.deepEqual([...written], ['ho-1/a']);
      const rows = await Promise.all([store.rounds.get('ho-1', 'a'), store.rounds.get('ho-1', 'done'), store.rounds.get('ho-2', 'b')]);
      assert.deepEqual(
        rows.map((r) => [r?.state, r?.book, r?.epoch]),
        [
          ['open', { handoff: 1 }, e1],
          ['cancelled', null, e1],
          ['open', null, e2],
        ],
      );
      assert.ok(e2b > e2);
      assert.equal((await store.rounds.handOffMany([])).size, 0);
    });

    it('rounds - the changes of one turn go in one statement; each keeps its answer: applied, skipped, stale', async () => {
      for (const id of ['cu-1', 'cu-2']) await store.channels.ensure(id, 'acme');
      const e1 = await store.channels.acquire('cu-1', 'shard-a');
      const e2 = await store.channels.acquire('cu-2', 'shard-a');
      for (const id of ['a', 'b', 'c']) await store.rounds.insert(openPool('cu-1', id, e1));
      await store.rounds.insert(openPool('cu-2', 'd', e2));
      assert.equal(await store.rounds.update('cu-1', 'c', e1, { state: 'cancelled', paid: true }), true);
      await store.channels.acquire('cu-2', 'shard-b'); // cu-2 moved on: its old owner's change is stale
      const statements = countRoundUpdates(store);
      const answers = await Promise.allSettled([
        store.rounds.update('cu-1', 'a', e1, { state: 'locked', book: { pool: [1, 2] } }),
        store.rounds.update('cu-1', 'b', e1, { state: 'settled', winner: 0, book: { pool: [3, 0] } }),
        store.rounds.update('cu-1', 'c', e1, { state: 'locked', book: { pool: [0, 0] } }),
        store.rounds.update('cu-2', 'd', e2, { state: 'locked', book: { pool: [5, 5] } }),
        // The same round again in this turn: it goes in a statement after the first one's.
        store.rounds.update('cu-1', 'a', e1, { state: 'settled', winner: 1 }),
      ]);
      assert.deepEqual(
        answers.map((a) => (a.status === 'fulfilled' ? a.value : isCrowdplayError(a.reason) ? a.reason.code : String(a.reason))),
        [true, true, false, 'CP_ERR_CHANNEL_STALE_EPOCH', true],
      );
      assert.equal(statements.n, 2, 'one statement per repeat of a round, not one per change');
      statements.restore();
      const rows = await Promise.all(['a', 'b', 'c'].map((id) => store.rounds.get('cu-1', id)));
      assert.deepEqual(
        rows.map((r) => [r?.state, r?.winner, r?.book]),
        [
          ['settled', 1, { pool: [1, 2] }],
          ['settled', 0, { pool: [3, 0] }],
          ['cancelled', null, null],
        ],
      );
      const d = await store.rounds.get('cu-2', 'd');
      assert.deepEqual([d?.state, d?.book, d?.epoch], ['open', null, e2], 'the stale change wrote nothing');
    });

    it('rounds - a change Postgres refuses fails alone; the others of its turn apply', async () => {
      await store.channels.ensure('cu-3', 'acme');
      const e = await store.channels.acquire('cu-3', 'shard-a');
      await store.rounds.insert(openPool('cu-3', 'ok', e));
      await store.rounds.insert(openPool('cu-3', 'bad', e));
      // A locked round must carry its book (CHECK): this change is refused by Postgres.
      const [good, bad] = await Promise.allSettled([
        store.rounds.update('cu-3', 'ok', e, { state: 'locked', book: { pool: [1, 1] } }),
        store.rounds.update('cu-3', 'bad', e, { state: 'locked' }),
      ]);
      assert.deepEqual(good, { status: 'fulfilled', value: true });
      assert.equal(bad.status, 'rejected');
      assert.match(String((bad as PromiseRejectedResult).reason), /check constraint/i);
      assert.equal((await store.rounds.get('cu-3', 'ok'))?.state, 'locked');
      const b = await store.rounds.get('cu-3', 'bad');
      assert.deepEqual([b?.state, b?.book], ['open', null], 'the refused change wrote nothing');
    });

    it('rounds - title and labels round-trip; recent rounds page newest first with a cursor', async () => {
      await store.channels.ensure('rec-1', 'acme');
      const epoch = await store.channels.acquire('rec-1', 'shard-a');
      const base = { channelId: 'rec-1', tenantId: 'acme', kind: 'pool' as const, outcomes: ['x', 'y'], liquidity: null, takeBps: 0 };
      const at = 1_700_000_000_000;
      // Five rounds; two share an opening time, so the id breaks the tie.
      for (const [id, openedAt] of [
        ['r1', at],
        ['r2', at + 1_000],
        ['r3', at + 2_000],
        ['r4', at + 2_000],
        ['r5', at + 3_000],
      ] as const) {
        await store.rounds.insert({ ...base, id, uid: `rec-1/${id}`, openedAt, deadlineAt: openedAt + 60_000, epoch });
      }
      await store.rounds.insert({
        ...base,
        id: 'labelled',
        uid: 'rec-1/labelled',
        openedAt: at - 1,
        deadlineAt: at + 60_000,
        epoch,
        title: 'Heads or tails? 表か裏か',
        labels: { x: 'Heads 🙂', y: '<b>Tails</b>' },
      });
      const labelled = await store.rounds.get('rec-1', 'labelled');
      assert.equal(labelled?.title, 'Heads or tails? 表か裏か');
      assert.deepEqual(labelled?.labels, { x: 'Heads 🙂', y: '<b>Tails</b>' });
      assert.equal((await store.rounds.get('rec-1', 'r1'))?.title, null, 'no title given: null');

      const seen: string[] = [];
      let before: RoundCursor | undefined;
      for (let page = 0; page < 10; page++) {
        const res = await store.rounds.listRecent('rec-1', { limit: 2, ...(before ? { before } : {}) });
        seen.push(...res.rows.map((r) => r.id));
        if (!res.next) break;
        assert.deepEqual(parseRoundCursor(roundCursor(res.next)), res.next, 'a cursor survives its text form');
        before = res.next;
      }
      assert.deepEqual(seen, ['r5', 'r4', 'r3', 'r2', 'r1', 'labelled']);
      assert.equal((await store.rounds.listRecent('nobody', { limit: 10 })).rows.length, 0);
      for (const bad of ['', '12', 'x.r1', '1.r 1', `${'9'.repeat(17)}.r1`]) assert.equal(parseRoundCursor(bad), undefined, bad);
    });

    it('channels - a move (group → supergroup) is recorded once, resumed until finished, then a no-op', async () => {
      await store.channels.ensure('tgn100', 'acme');
      assert.equal(await store.channels.beginMigration('tgn999', 'tgn998'), 'none', 'a chat that never played');
      assert.equal(await store.channels.get('tgn998'), null, '…and nothing was created for it');
      assert.equal(await store.channels.beginMigration('tgn100', 'tgn1000100'), 'started');
      const target = await store.channels.get('tgn1000100');
      assert.deepEqual([target?.tenantId, target?.migratedTo], ['acme', null], 'the new channel, for the same tenant');
      assert.equal((await store.channels.get('tgn100'))?.migratedTo, 'tgn1000100');
      assert.equal(await store.channels.beginMigration('tgn100', 'tgn1000100'), 'resumed', 'not finished yet');
      assert.equal(await store.channels.finishMigration('tgn100'), true);
      const done = await store.channels.get('tgn100');
      assert.ok(done?.migratedAt instanceof Date);
      assert.equal(await store.channels.beginMigration('tgn100', 'tgn1000100'), 'done');
      assert.equal(await store.channels.finishMigration('tgn100'), true);
      assert.equal((await store.channels.get('tgn100'))?.migratedAt?.getTime(), done.migratedAt.getTime(), 'finished once');
      assert.equal(await store.channels.finishMigration('tgn1000100'), false, 'no move recorded for it');
      // Fencing the old channel: its last owner's writes are refused.
      const e1 = await store.channels.acquire('tgn100', 'shard-a');
      assert.equal(await store.channels.fence('tgn100'), e1 + 1);
      await assert.rejects(store.channels.saveSnapshot('tgn100', e1, 1, {}), (e) => isCrowdplayError(e, 'CP_ERR_CHANNEL_STALE_EPOCH'));
      assert.equal((await store.channels.get('tgn100'))?.owner, null);
      await assert.rejects(store.channels.fence('nope'), (e) => isCrowdplayError(e, 'CP_ERR_CHANNEL_UNKNOWN'));
    });

    it('channels - a bad move is refused and changes nothing', async () => {
      await store.channels.ensure('tgn200', 'acme');
      await store.channels.ensure('tgn300', 'other');
      const before = await store.channels.get('tgn200');
      const refused = (why: RegExp) => (e: unknown) => isCrowdplayError(e, 'CP_ERR_CHANNEL_MIGRATION_INVALID') && why.test(e.message);
      await assert.rejects(store.channels.beginMigration('tgn200', 'tgn200'), refused(/itself/));
      await assert.rejects(store.channels.beginMigration('tgn200', 'tgn300'), refused(/another tenant/));
      await assert.rejects(store.channels.beginMigration('tgn200', 'no.dots'), (e) => isCrowdplayError(e, 'CP_ERR_CHANNEL_INVALID_ID'));
      // Back and forth: the target moved on already.
      assert.equal(await store.channels.beginMigration('tgn200', 'tgn201'), 'started');
      await assert.rejects(store.channels.beginMigration('tgn201', 'tgn200'), refused(/tgn200 itself moved/));
      await assert.rejects(store.channels.beginMigration('tgn200', 'tgn202'), refused(/moved to tgn201 before/));
      assert.equal(await store.channels.get('tgn202'), null, 'the refused target was not created');
      assert.equal((await store.channels.get('tgn201'))?.migratedTo, null);
      assert.deepEqual({ ...(await store.channels.get('tgn200'))!, migratedTo: null }, before, 'only migrated_to changed');
    });

    it('sequencer - blocks never overlap and rise', async () => {
      const a = await store.sequencer.lease(100);
      const b = await store.sequencer.lease(5);
      assert.equal(a.last - a.first, 99);
      assert.equal(b.first, a.last + 1);
      assert.equal(await store.sequencer.highWater(), b.last);
      await assert.rejects(store.sequencer.lease(0), RangeError);
      await assert.rejects(store.sequencer.lease(1.5), RangeError);
      assert.equal(await store.sequencer.highWater(), b.last, 'bad lease changed nothing');
    });
  });
}

let pgSchema: TestSchema;
storeSuite('postgres', async () => {
  pgSchema = await testSchema();
  const store = await openStore({ url: pgSchema.databaseUrl, schema: pgSchema.schema, poolMax: 4, pgliteDir: 'memory' });
  assert.equal(store.kind, 'postgres');
  return { store, cleanup: () => pgSchema.drop() };
});

storeSuite('pglite', async () => {
  const store = await openStore({ url: '', schema: 'public', poolMax: 10, pgliteDir: 'memory' });
  assert.equal(store.kind, 'pglite');
  return { store, cleanup: async () => undefined };
});

describe('store - migrations', () => {
  it('concurrent opens of one schema wait for each other; reopening applies nothing twice', async () => {
    const s = await testSchema();
    try {
      const opts = { url: s.databaseUrl, schema: s.schema, poolMax: 2, pgliteDir: 'memory' };
      const stores = await Promise.all([openStore(opts), openStore(opts), openStore(opts)]);
      for (const st of stores) await st.close();
      const again = await openStore(opts);
      const { rows } = await again.db.query<{ n: string }>('SELECT count(*) AS n FROM pgmigrations');
      const files = readdirSync(MIGRATIONS_DIR).filter((f) => f.endsWith('.sql'));
      assert.equal(Number(rows[0]!.n), files.length, 'each migration applied exactly once');
      await again.close();
    } finally {
      await s.drop();
    }
  });
});

describe('store - PGlite data directory', () => {
  it('a second process cannot open a directory in use; a stale lock is taken over', async () => {
    const { mkdtempSync, writeFileSync, existsSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { spawnSync } = await import('node:child_process');
    const dir = mkdtempSync(join(tmpdir(), 'cp-pglite-'));
    // Held by a live process that is not us (our parent, the test runner).
    writeFileSync(join(dir, 'crowdplay.lock'), String(process.ppid));
    await assert.rejects(
      openStore({ url: '', schema: 'public', poolMax: 1, pgliteDir: dir }),
      (e) => isCrowdplayError(e, 'CP_ERR_STORE_DATA_DIR_IN_USE') && e.message.includes(String(process.ppid)),
    );
    assert.equal(existsSync(join(dir, 'pgdata')) || existsSync(join(dir, 'PG_VERSION')), false, 'nothing was created');
    // A lock left by a dead process is taken over.
    const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
    writeFileSync(join(dir, 'crowdplay.lock'), dead.stdout);
    const store = await openStore({ url: '', schema: 'public', poolMax: 1, pgliteDir: dir });
    await assert.rejects(openStore({ url: '', schema: 'public', poolMax: 1, pgliteDir: dir }), (e) =>
      isCrowdplayError(e, 'CP_ERR_STORE_DATA_DIR_IN_USE'),
    );
    await store.close();
    assert.equal(existsSync(join(dir, 'crowdplay.lock')), false, 'released on close');
  });

  it('a directory that cannot be made or written is refused CP_ERR_CONFIG_INVALID naming PGLITE_DIR; nothing is created', async () => {
    const { mkdtempSync, writeFileSync, readdirSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const dir = mkdtempSync(join(tmpdir(), 'cp-pglite-'));
    writeFileSync(join(dir, 'a-file'), 'x');
    const refused = (e: unknown): boolean => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') && e.message.includes('PGLITE_DIR');
    // A file where the directory or one of its parents should be.
    for (const at of [join(dir, 'a-file'), join(dir, 'a-file', 'db')])
      await assert.rejects(openStore({ url: '', schema: 'public', poolMax: 1, pgliteDir: at }), refused, at);
    assert.deepEqual(readdirSync(dir), ['a-file'], 'nothing was created');
    // A virtual file system (Node 20's recursive mkdir would never return here).
    await assert.rejects(openStore({ url: '', schema: 'public', poolMax: 1, pgliteDir: '/proc/crowdplay-none/db' }), refused);
  });
});
