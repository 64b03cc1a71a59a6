/**
 * What the store's benches share: a store on one connection to a schema of its own (so every statement runs on the
 * backend whose CPU is read) holding `channels` channels of tenant `bench`, owned by shard-1 at epoch 1.
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { openStore, type Store } from '@crowdplay/store';
import { testSchema } from '@crowdplay/testing';

/**
 * Opens the bench's store (DATABASE_URL, or the local test Postgres) with the channels `ids`.
 * @returns the store and `close()`, which closes it and drops its schema
 */
export async function openBenchStore(ids: readonly string[]): Promise<{ store: Store; close: () => Promise<void> }> {
  const schema = await testSchema();
  const store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 1, pgliteDir: 'memory' });
  const close = async (): Promise<void> => {
    await store.close();
    await schema.drop();
  };
  try {
    await store.tenants.create('bench', 'Bench');
    await store.db.query("INSERT INTO channels (id, tenant_id, epoch, owner) SELECT unnest($1::text[]), 'bench', 1, 'shard-1'", [[...ids]]);
  } catch (err) {
    await close();
    throw err;
  }
  return { store, close };
}

/** CPU ms of the store's backend so far (/proc/<pid>/stat, clock ticks of 10 ms). */
export async function backendCpuMs(store: Store): Promise<number> {
  const { rows } = await store.db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  const fields = readFileSync(`/proc/${rows[0]!.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/**
 * Runs `main` with the command line's arguments when the module at `moduleUrl` is the script node started (not when
 * scripts/bench.ts imports it), and exits with its code (1 when it throws).
 */
export function runIfMain(moduleUrl: string, main: (argv: string[]) => Promise<number>): void {
  if (moduleUrl !== pathToFileURL(process.argv[1] ?? '').href) return;
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
