import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { runner } from 'node-pg-migrate';
import { CrowdplayError } from '@crowdplay/protocol';
import { mapPgError, PgDb, PgliteDb, type Db } from './db.ts';
import { TenantRepository } from './tenants.ts';
import { QuotaRepository } from './quotas.ts';
import { BotRepository } from './bots.ts';
import { ChannelRepository } from './channels.ts';
import { SequencerRepository } from './sequencer.ts';
import { RoundRepository } from './rounds.ts';
import { EventLogRepository } from './events.ts';
import { WatchTokenRepository } from './watch-tokens.ts';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../migrations', import.meta.url));

export interface StoreOptions {
  /** Postgres URL; empty selects embedded PGlite. */
  url: string;
  /** Schema for crowdplay's tables (created by the migrations if missing). */
  schema: string;
  /** Pool size for real Postgres (connections); PGlite is one session. */
  poolMax: number;
  /** PGlite data directory, or `memory`. */
  pgliteDir: string;
  /** Run migrations on open (default true). */
  migrate?: boolean;
  /** Where migration progress is logged (default: silent). */
  log?: (msg: string) => void;
  /**
   * Real Postgres: how long the first connection may take, ms (DATABASE_CONNECT_TIMEOUT_MS); unset: pg's own (none,
   * the OS's connect timeout). Only that first connection: the pool's later ones are not bounded by it.
   */
  connectTimeoutMs?: number;
}

/** The store: the Db handle and its repositories. */
export interface Store {
  readonly kind: 'postgres' | 'pglite';
  readonly db: Db;
  readonly tenants: TenantRepository;
  readonly channels: ChannelRepository;
  readonly sequencer: SequencerRepository;
  readonly rounds: RoundRepository;
  /** The event log (resume of game connections, retention). */
  readonly events: EventLogRepository;
  /** Read-only watch tokens (stream overlays): minted, listed and revoked by the tenant. */
  readonly watchTokens: WatchTokenRepository;
  /** Per-tenant quota overrides and the grant points used per UTC day. */
  readonly quotas: QuotaRepository;
  /** A tenant's own Telegram bots (secrets encrypted). */
  readonly bots: BotRepository;
  /**
   * A Db of its own connection on the same database and schema, for a statement that must not wait behind
   * the pool (the router lease's renewal); closed with the store. PGlite is one session: its own Db.
   */
  dedicated(): Db;
  /** Closes the pool (or PGlite) and every dedicated Db. Safe to call twice. */
  close(): Promise<void>;
}

function quoteIdent(name: string): string {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new TypeError(`not a plain SQL identifier: ${name}`);
  return `"${name}"`;
}

/**
 * Opens the store named by `opts.url`, runs pending migrations, and returns
 * the repositories.
 *
 * Real Postgres: a pg Pool of `poolMax` connections whose search_path is
 * `schema`. Embedded: PGlite (measured here: ~800 MiB RSS, ~3 s to start),
 * used as the single session it is.
 *
 * @throws CrowdplayError CP_ERR_STORE_UNAVAILABLE when Postgres cannot be reached (refused, unreachable, no
 *   connection within `connectTimeoutMs`); the pg error of any other failure to connect (a password refused);
 *   migration errors.
 */
export async function openStore(opts: StoreOptions): Promise<Store> {
  const schema = quoteIdent(opts.schema);
  if (opts.url) await probe(opts.url, opts.connectTimeoutMs);
  let db: Db;
  const pgPool = (max: number): PgDb => {
    const pool = new pg.Pool({ connectionString: opts.url, max, options: `-c search_path=${schema}` });
    // A pooled connection that dies is discarded by pg; it must not crash the process.
    pool.on('error', () => undefined);
    return new PgDb(pool);
  };
  if (opts.url) {
    db = pgPool(opts.poolMax);
  } else {
    const { PGlite } = await import('@electric-sql/pglite');
    let dataDir: string | undefined;
    if (opts.pgliteDir !== 'memory') {
      dataDir = resolve(opts.pgliteDir);
      makeDataDir(dataDir);
    }
    const unlock = dataDir ? lockDataDir(dataDir) : () => undefined;
    let pglite;
    try {
      pglite = await PGlite.create(dataDir ? { dataDir } : {});
      await pglite.exec(`CREATE SCHEMA IF NOT EXISTS ${schema}; SET search_path TO ${schema}`);
    } catch (err) {
      unlock();
      throw err;
    }
    db = new PgliteDb(pglite, unlock);
  }
  try {
    if (opts.migrate !== false) await migrate(db, opts.schema, opts.log);
  } catch (err) {
    await db.close();
    throw err;
  }
  const sides: Db[] = [];
  const main = db;
  return {
    kind: db.kind,
    db,
    tenants: new TenantRepository(db),
    channels: new ChannelRepository(db),
    sequencer: new SequencerRepository(db),
    rounds: new RoundRepository(db),
    events: new EventLogRepository(db),
    watchTokens: new WatchTokenRepository(db),
    quotas: new QuotaRepository(db),
    bots: new BotRepository(db),
    dedicated: () => {
      if (main.kind === 'pglite') return main;
      const side = pgPool(1);
      sides.push(side);
      return side;
    },
    close: async () => {
      await Promise.all(sides.map((d) => d.close()));
      await main.close();
    },
  };
}

/**
 * One connection to `url`, closed at once: Postgres answers within `timeoutMs` or the start fails here, with the
 * store's code, instead of in the first query of a pool that would wait on the OS's connect timeout.
 * @throws CrowdplayError CP_ERR_STORE_UNAVAILABLE (isUnavailableError: refused, unreachable, timed out); other pg errors as they are
 */
async function probe(url: string, timeoutMs: number | undefined): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: timeoutMs ?? 0 });
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (err) {
    throw mapPgError(err);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * Takes the PGlite data directory for this process: PGlite does not lock it,
 * and two processes on one directory silently lose writes and reuse event
 * ids. A lock file holds the owner's pid; a lock whose process is gone is
 * taken over.
 * @returns the release function (removes the lock file)
 * @throws CrowdplayError CP_ERR_STORE_DATA_DIR_IN_USE when a live process holds it
 */
export function lockDataDir(dataDir: string): () => void {
  const lock = join(dataDir, 'crowdplay.lock');
  for (let attempt = 0; ; attempt++) {
    try {
      writeFileSync(lock, String(process.pid), { flag: 'wx' });
      return () => rmSync(lock, { force: true });
    } catch (err) {
      if ((err as { code?: string }).code !== 'EEXIST') throw unusableDataDir(dataDir, err);
      if (attempt > 0) throw err;
      const pid = Number(readFileSync(lock, 'utf8').trim());
      if (Number.isInteger(pid) && pid > 0 && (pid === process.pid || isAlive(pid))) {
        throw new CrowdplayError('CP_ERR_STORE_DATA_DIR_IN_USE', [dataDir, pid]);
      }
      rmSync(lock, { force: true }); // stale: its process is gone
    }
  }
}

/**
 * Creates the embedded database's directory and its missing parents, one level at a time: Node 20's recursive
 * mkdir never returns for a path under /proc.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID naming PGLITE_DIR when the path cannot be a directory (a file on
 *   the way, no permission, a read-only or virtual file system); nothing is created then
 */
function makeDataDir(dataDir: string): void {
  const missing: string[] = [];
  let at = dataDir;
  while (!existsSync(at)) {
    missing.push(at);
    const up = dirname(at);
    if (up === at) break;
    at = up;
  }
  try {
    if (!statSync(at).isDirectory()) throw new Error(`${at} is not a directory`);
    for (const dir of missing.reverse()) mkdirSync(dir);
  } catch (err) {
    throw unusableDataDir(dataDir, err);
  }
}

function unusableDataDir(dataDir: string, cause: unknown): CrowdplayError {
  const why = cause instanceof Error ? cause.message : String(cause);
  return new CrowdplayError('CP_ERR_CONFIG_INVALID', [`PGLITE_DIR: ${dataDir} cannot hold the embedded database (${why})`], { cause });
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: string }).code === 'EPERM';
  }
}

/**
 * Applies pending migrations (node-pg-migrate, SQL files in
 * libs/store/migrations) to `schema`, under a per-schema advisory lock so
 * concurrent starters wait for each other instead of racing.
 */
export async function migrate(db: Db, schema: string, log: (msg: string) => void = () => undefined): Promise<void> {
  const createSchema = `CREATE SCHEMA IF NOT EXISTS ${quoteIdent(schema)}`;
  const run = (q: { query(sql: string, params?: unknown[]): Promise<unknown> }) =>
    runner({
      // node-pg-migrate needs only query(text | {text, values}).
      dbClient: {
        query: (textOrConfig: string | { text: string; values?: unknown[] }, values?: unknown[]) =>
          typeof textOrConfig === 'string' ? q.query(textOrConfig, values) : q.query(textOrConfig.text, textOrConfig.values),
      } as unknown as pg.ClientBase,
      dir: MIGRATIONS_DIR,
      direction: 'up',
      migrationsTable: 'pgmigrations',
      schema,
      migrationsSchema: schema,
      createSchema: true,
      checkOrder: true,
      // node-pg-migrate's own lock is one per database and fails at once when
      // taken; we hold a per-schema advisory lock that waits instead (below).
      noLock: true,
      log,
      logger: { debug: () => undefined, info: log, warn: log, error: log },
    });
  if (db instanceof PgDb) {
    const client = await db.pool.connect();
    // Checked out, the connection has no 'error' listener of pg-pool's: a server ending it mid-migration would end
    // the process; the statement fails instead and the broken connection is discarded.
    const onError = (): void => undefined;
    client.on('error', onError);
    let failed: Error | undefined;
    try {
      // Concurrent starters of one schema wait for each other; other schemas do not.
      await client.query('SELECT pg_advisory_lock(hashtext($1))', [`crowdplay-migrate:${schema}`]);
      try {
        await client.query(createSchema);
        await run(client);
      } finally {
        await client.query('SELECT pg_advisory_unlock(hashtext($1))', [`crowdplay-migrate:${schema}`]);
      }
    } catch (err) {
      failed = err as Error;
      throw err;
    } finally {
      client.off('error', onError);
      client.release(failed);
    }
  } else {
    await db.query(createSchema);
    await run(db);
  }
}
