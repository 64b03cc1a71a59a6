import type pg from 'pg';
import type { PGlite, Transaction } from '@electric-sql/pglite';
import { CrowdplayError } from '@crowdplay/protocol';
import { binaryParams, plainParams } from './array-params.ts';

/** The part of a query result crowdplay reads. */
export interface QueryResult<R> {
  rows: R[];
  rowCount: number;
}

/** Anything that runs a query: the database, or the handle inside a transaction. */
export interface Queryable {
  /** `params` may hold ArrayParams (textArray, int8Array: array-params.ts), which each engine sends its own way. */
  query<R = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<QueryResult<R>>;
}

/**
 * The database every repository uses. Two engines: `PgDb` (a pg Pool on real
 * Postgres) and `PgliteDb` (embedded PGlite, one session). Repositories see
 * only this interface.
 */
export interface Db extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  /**
   * Runs `fn` in one transaction: COMMIT when it resolves, ROLLBACK when it
   * throws (the error is rethrown). Inside `fn` use only `q`: with PGlite,
   * a query on the Db itself would wait for the transaction and hang.
   */
  tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** SQLSTATE raised by cp_check_epoch() (migrations/…_foundation.sql). */
export const STALE_EPOCH_SQLSTATE = 'CP409';

/**
 * SQLSTATEs of a server that is going away or not there yet: class 08
 * (connection exception) is matched by prefix; 57P01 admin_shutdown (a fast
 * shutdown ends every session), 57P02 crash_shutdown (another backend
 * crashed), 57P03 cannot_connect_now (starting up, in crash recovery).
 */
const UNAVAILABLE_SQLSTATES: ReadonlySet<string> = new Set(['57P01', '57P02', '57P03']);

/** Socket errors of a connection that could not be made or was cut (Node's `err.code`). */
const UNAVAILABLE_SOCKET_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * pg's own errors for a lost connection carry no code, only these messages
 * (pg/lib/client.js, pg-pool; `timeout expired`: a client's connectionTimeoutMillis, DATABASE_CONNECT_TIMEOUT_MS at
 * start): matched here, at the driver's edge, so that nothing past the store looks at message text.
 */
const PG_CONNECTION_LOST_RE =
  /^(Connection terminated|timeout exceeded when trying to connect|timeout expired$|Client has encountered a connection error)/;

/** True when `err` says the database could not be reached or the connection was lost (not that a statement failed). */
export function isUnavailableError(err: unknown): boolean {
  if (!(err instanceof Error) || err instanceof CrowdplayError) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') return code.startsWith('08') || UNAVAILABLE_SQLSTATES.has(code) || UNAVAILABLE_SOCKET_CODES.has(code);
  return PG_CONNECTION_LOST_RE.test(err.message);
}

/**
 * Maps Postgres errors with a crowdplay meaning to CrowdplayError; others pass through.
 * - cp_check_epoch()'s CP409 → CP_ERR_CHANNEL_STALE_EPOCH;
 * - the database unreachable or the connection lost (isUnavailableError: a restart, a crash, recovery) →
 *   CP_ERR_STORE_UNAVAILABLE (503, retryable; a write in flight may or may not have committed), so a
 *   client is refused as retryable instead of with CP_ERR_INTERNAL.
 */
export function mapPgError(err: unknown): unknown {
  const e = err as { code?: string; message?: string };
  if (e && e.code === STALE_EPOCH_SQLSTATE) {
    const m = /stale epoch (\d+) for channel (\S+)/.exec(e.message ?? '');
    return new CrowdplayError('CP_ERR_CHANNEL_STALE_EPOCH', [m?.[2] ?? '?', m?.[1] ?? '?'], { cause: err });
  }
  if (isUnavailableError(err)) return new CrowdplayError('CP_ERR_STORE_UNAVAILABLE', [(err as Error).message], { cause: err });
  return err;
}

/** The 'error' listener of a checked-out connection (see PgDb.connect). */
const ignoreCheckedOutError = (): void => undefined;

/**
 * Real Postgres through a pg Pool. Every query and transaction takes its
 * connection with `pool.connect()` (as `pool.query` does), so the time spent
 * waiting for a free connection (DATABASE_POOL_MAX biting) is measured and
 * reported to `onWait` (ms), and `pool.waitingCount` shows the queue.
 */
export class PgDb implements Db {
  readonly kind = 'postgres';
  private closed = false;
  /** Called with each connection wait, ms (crowdplay_pg_pool_wait_ms); set by the process's wiring. */
  onWait: ((ms: number) => void) | undefined = undefined;
  constructor(readonly pool: pg.Pool) {}

  /** A pooled connection, its wait reported to `onWait`. @throws the pool's error (mapped) */
  private async connect(): Promise<pg.PoolClient> {
    const t0 = performance.now();
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw mapPgError(err);
    }
    this.onWait?.(performance.now() - t0);
    // While a connection is checked out pg-pool listens for no 'error' on it: one the server ends between two
    // statements (a restart, a crash) would emit an unhandled 'error' and end the process. The statement in flight
    // or the next one fails instead (CP_ERR_STORE_UNAVAILABLE) and release() discards the connection.
    client.on('error', ignoreCheckedOutError);
    return client;
  }

  /** Gives a connection back to the pool (discarded when `err` is set or it is broken). */
  private release(client: pg.PoolClient, err?: Error): void {
    client.off('error', ignoreCheckedOutError);
    client.release(err);
  }

  async query<R = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<QueryResult<R>> {
    const client = await this.connect();
    let r;
    try {
      r = await client.query(sql, binaryParams(params));
    } catch (err) {
      // As pg-pool's own query(): a connection that saw an error is discarded.
      this.release(client, err as Error);
      throw mapPgError(err);
    }
    this.release(client);
    return { rows: r.rows as R[], rowCount: r.rowCount ?? 0 };
  }

  async tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T> {
    const client = await this.connect();
    const q: Queryable = {
      query: async <R>(sql: string, params?: unknown[]) => {
        const r = await client.query(sql, binaryParams(params));
        return { rows: r.rows as R[], rowCount: r.rowCount ?? 0 };
      },
    };
    try {
      await client.query('BEGIN');
      const result = await fn(q);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw mapPgError(err);
    } finally {
      this.release(client);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.end();
  }
}

type PgliteRunner = Pick<PGlite, 'query' | 'exec'> | Transaction;

async function pgliteQuery<R>(runner: PgliteRunner, sql: string, params?: unknown[]): Promise<QueryResult<R>> {
  try {
    if (params && params.length > 0) {
      const r = await runner.query<R>(sql, plainParams(params));
      return { rows: r.rows, rowCount: r.affectedRows ?? r.rows.length };
    }
    // No parameters: the simple protocol, which also runs multi-statement SQL (migrations).
    const results = await runner.exec(sql);
    const last = results[results.length - 1];
    return { rows: (last?.rows ?? []) as R[], rowCount: last?.affectedRows ?? last?.rows.length ?? 0 };
  } catch (err) {
    throw mapPgError(err);
  }
}

/**
 * Embedded PGlite. It is a single session: every query runs one at a time, and
 * a transaction holds the session until it ends.
 */
export class PgliteDb implements Db {
  readonly kind = 'pglite';
  private closed = false;
  /** @param onClose runs after PGlite closed (releases the data-directory lock) */
  constructor(
    readonly pglite: PGlite,
    private readonly onClose: () => void = () => undefined,
  ) {}

  query<R = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<QueryResult<R>> {
    return pgliteQuery<R>(this.pglite, sql, params);
  }

  async tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T> {
    try {
      return await this.pglite.transaction((t) => fn({ query: <R>(sql: string, params?: unknown[]) => pgliteQuery<R>(t, sql, params) }));
    } catch (err) {
      throw mapPgError(err);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.pglite.close();
    } finally {
      this.onClose();
    }
  }
}
