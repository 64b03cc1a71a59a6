/**
 * The backends the store's multi-tenant suites run on, and their shared set-up: tenants `acme` and `other`,
 * the stores closed and the schema dropped after.
 */
import { after, before, describe } from 'node:test';
import { testSchema } from '@crowdplay/testing';
import { openStore, type Store } from '../src/index.ts';

/** Postgres with two stores on one schema (so races between processes are real), and PGlite with one. */
export const STORE_BACKENDS: ReadonlyArray<{ name: string; open: () => Promise<{ stores: Store[]; cleanup: () => Promise<void> }> }> = [
  {
    name: 'postgres, two stores',
    open: async () => {
      const pg = await testSchema();
      const opts = { url: pg.databaseUrl, schema: pg.schema, poolMax: 4, pgliteDir: 'memory' };
      return { stores: [await openStore(opts), await openStore(opts)], cleanup: () => pg.drop() };
    },
  },
  {
    name: 'pglite',
    open: async () => ({
      stores: [await openStore({ url: '', schema: 'public', poolMax: 10, pgliteDir: 'memory' })],
      cleanup: async () => undefined,
    }),
  },
];

/**
 * `describe(\`${title} (${backend})\`)` once per backend; `body` gets the stores (the first is `stores[0]`) once
 * `before` has opened them and created tenants `acme` and `other`: read them inside the tests, not at declaration.
 */
export function eachStoreBackend(title: string, body: (ctx: { stores: Store[] }) => void): void {
  for (const backend of STORE_BACKENDS) {
    describe(`${title} (${backend.name})`, () => {
      const ctx = { stores: [] as Store[] };
      let cleanup: () => Promise<void> = async () => undefined;
      before(async () => {
        ({ stores: ctx.stores, cleanup } = await backend.open());
        await ctx.stores[0]!.tenants.create('acme', 'Acme');
        await ctx.stores[0]!.tenants.create('other', 'Other');
      });
      after(async () => {
        for (const s of ctx.stores) await s.close();
        await cleanup();
      });
      body(ctx);
    });
  }
}
