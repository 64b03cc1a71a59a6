import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { serviceUrls } from './services.ts';

/** A unique lower-case token for schemas, subject prefixes and key prefixes. */
export function uniqueName(prefix = 't'): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}

/** A Postgres schema owned by one suite. `drop()` removes it and everything in it. */
export interface TestSchema {
  databaseUrl: string;
  schema: string;
  drop(): Promise<void>;
}

/**
 * Reserves a fresh schema name on the test Postgres. The store's migrations
 * create the schema; `drop()` removes it (CASCADE) at the end of the suite.
 */
export async function testSchema(): Promise<TestSchema> {
  const { databaseUrl } = await serviceUrls();
  const schema = uniqueName('cpt');
  return {
    databaseUrl,
    schema,
    async drop() {
      const client = new pg.Client({ connectionString: databaseUrl });
      await client.connect();
      try {
        await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await client.end();
      }
    },
  };
}
