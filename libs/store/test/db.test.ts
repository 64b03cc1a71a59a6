import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { isCrowdplayError } from '@crowdplay/protocol';
import { freePort, serviceUrls } from '@crowdplay/testing';
import { isUnavailableError, mapPgError, PgDb } from '../src/index.ts';

function unavailable(err: unknown): boolean {
  assert.ok(isCrowdplayError(err, 'CP_ERR_STORE_UNAVAILABLE'), `expected CP_ERR_STORE_UNAVAILABLE, got ${String(err)}`);
  assert.equal(err.httpStatus, 503);
  assert.ok(err.cause instanceof Error, 'the driver error is the cause');
  return true;
}

describe('store - database unavailable', () => {
  it('a server that is not there: query and tx are refused with CP_ERR_STORE_UNAVAILABLE (retryable), not the raw socket error', async () => {
    const pool = new pg.Pool({ connectionString: `postgresql://postgres@127.0.0.1:${await freePort()}/test`, max: 1 });
    pool.on('error', () => undefined);
    const db = new PgDb(pool);
    try {
      await assert.rejects(db.query('SELECT 1'), unavailable);
      let ran = false;
      await assert.rejects(
        db.tx(async () => {
          ran = true;
        }),
        unavailable,
      );
      assert.equal(ran, false, 'the transaction body never ran');
    } finally {
      await db.close();
    }
  });

  it('a session ended by the server (fast shutdown, pg_terminate_backend: 57P01) is CP_ERR_STORE_UNAVAILABLE; the pool then reconnects', async () => {
    const { databaseUrl } = await serviceUrls();
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
    pool.on('error', () => undefined);
    const db = new PgDb(pool);
    const admin = new pg.Client({ connectionString: databaseUrl });
    await admin.connect();
    try {
      const { rows } = await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const pid = rows[0]!.pid;
      // Its rejection is awaited below: assert.rejects takes it now, so it is never an unhandled rejection meanwhile.
      const sleeping = assert.rejects(db.query('SELECT pg_sleep(30)'), unavailable);
      // Terminated once it is running (pg_stat_activity shows it active), not before.
      for (;;) {
        const a = await admin.query<{ state: string }>('SELECT state FROM pg_stat_activity WHERE pid = $1', [pid]);
        if (a.rows[0]?.state === 'active') break;
        await new Promise((r) => setTimeout(r, 10));
      }
      await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      await sleeping;
      const again = await db.query<{ one: number }>('SELECT 1 AS one');
      assert.deepEqual(again.rows, [{ one: 1 }], 'the next query runs on a new connection');
    } finally {
      await admin.end();
      await db.close();
    }
  });

  it('a connection ended between two statements of a transaction: the transaction fails with CP_ERR_STORE_UNAVAILABLE, the process lives', async () => {
    const { databaseUrl } = await serviceUrls();
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
    pool.on('error', () => undefined);
    let checkedOut: pg.PoolClient | undefined;
    pool.on('acquire', (c) => (checkedOut = c));
    const db = new PgDb(pool);
    const admin = new pg.Client({ connectionString: databaseUrl });
    await admin.connect();
    try {
      await assert.rejects(
        db.tx(async (q) => {
          const { rows } = await q.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
          const ended = new Promise((resolve, reject) => {
            checkedOut!.once('end', resolve);
            setTimeout(() => reject(new Error('the connection did not end within 5 s')), 5_000).unref();
          });
          await admin.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
          // No statement runs while the server ends the session: its error reaches the connection, not a query.
          await ended;
          await q.query('SELECT 1');
        }),
        unavailable,
      );
      const again = await db.query<{ one: number }>('SELECT 1 AS one');
      assert.deepEqual(again.rows, [{ one: 1 }], 'the broken connection was discarded; the next query runs on a new one');
    } finally {
      await admin.end();
      await db.close();
    }
  });

  it('a statement error is not unavailability: SQLSTATEs pass through unchanged', async () => {
    const { databaseUrl } = await serviceUrls();
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
    const db = new PgDb(pool);
    try {
      await assert.rejects(db.query('SELEC 1'), (err: unknown) => {
        assert.equal(isCrowdplayError(err), false);
        assert.equal((err as { code?: string }).code, '42601');
        return true;
      });
    } finally {
      await db.close();
    }
  });

  it('isUnavailableError - connection failures yes, statement failures and other errors no', () => {
    const coded = (code: string, message = `injected ${code}`): Error => Object.assign(new Error(message), { code });
    for (const e of [
      coded('ECONNREFUSED'),
      coded('ECONNRESET'),
      coded('57P01'),
      coded('57P03', 'the database system is starting up'),
      coded('08006'),
      new Error('Connection terminated unexpectedly'),
      new Error('timeout exceeded when trying to connect'),
    ])
      assert.equal(isUnavailableError(e), true, e.message);
    for (const e of [coded('23505'), coded('40P01'), coded('42601'), new TypeError('bad parameter'), 'ECONNRESET', null])
      assert.equal(isUnavailableError(e), false, String(e));
    // Mapped once: a CrowdplayError is never mapped again.
    const mapped = mapPgError(coded('ECONNRESET'));
    assert.ok(isCrowdplayError(mapped, 'CP_ERR_STORE_UNAVAILABLE'));
    assert.equal(mapPgError(mapped), mapped);
    assert.equal(isUnavailableError(mapped), false);
  });
});
