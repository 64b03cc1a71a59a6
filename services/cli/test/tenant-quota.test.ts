/**
 * `crowdplay tenant quota`: shows a tenant's effective quotas, sets and removes overrides; bad input and unknown
 * tenants are refused with a code and an exit status, and nothing changes.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { isCrowdplayError } from '@crowdplay/protocol';
import { openStore, type Store } from '@crowdplay/store';
import { testSchema, type TestSchema } from '@crowdplay/testing';
import { parseQuotaFlags } from '../src/tenant-quota.ts';

const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));

describe('tenant quota flags', () => {
  it('tenant quota - flags parse to a patch: integers set, "default" and --clear remove', () => {
    assert.deepEqual(parseQuotaFlags({ channels: '10', 'intents-per-s': '0', 'grants-per-day': 'default' }), {
      channels: 10,
      intentsPerS: 0,
      grantPointsPerDay: null,
    });
    assert.deepEqual(parseQuotaFlags({}, ['connections']), { connections: null });
    assert.deepEqual(parseQuotaFlags({}, ['all']), {
      channels: null,
      connections: null,
      intentsPerS: null,
      grantPointsPerDay: null,
      bots: null,
    });
    assert.deepEqual(parseQuotaFlags({}), {});
  });

  it('tenant quota - a negative, non-integer or too large number, an unknown --clear name are refused with CP_ERR_PROTO_INVALID', () => {
    const bad: Array<[Record<string, string>, string[]]> = [
      [{ channels: '-1' }, []],
      [{ connections: '1.5' }, []],
      [{ 'intents-per-s': 'many' }, []],
      [{ 'grants-per-day': '1e12' }, []],
      [{ channels: '99999999999999999' }, []],
      [{ channels: '' }, []],
      [{}, ['robots']],
      [{ channels: '5' }, ['channels']],
    ];
    for (const [values, clear] of bad) {
      assert.throws(
        () => parseQuotaFlags(values, clear),
        (e) => isCrowdplayError(e, 'CP_ERR_PROTO_INVALID'),
        JSON.stringify([values, clear]),
      );
    }
  });
});

describe('crowdplay tenant quota', () => {
  let schema: TestSchema;
  let store: Store;
  before(async () => {
    schema = await testSchema();
    store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 2, pgliteDir: 'memory' });
    await store.tenants.create('acme', 'Acme');
  });
  after(async () => {
    await store.close();
    await schema.drop();
  });

  const cli = (args: string[]): { code: number | null; stderr: string; stdout: string } => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', MAIN, 'tenant', 'quota', ...args], {
      env: { ...process.env, DATABASE_URL: schema.databaseUrl, DATABASE_SCHEMA: schema.schema, LOG_LEVEL: 'warn' },
      encoding: 'utf8',
      timeout: 30_000,
    });
    return { code: r.status, stderr: r.stderr, stdout: r.stdout };
  };

  it('tenant quota - shows the defaults, sets overrides, removes them with default and --clear', async () => {
    const shown = cli(['acme']);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /^channels +100000 +\(default: TENANT_MAX_CHANNELS\)$/m);
    assert.match(shown.stdout, /^grants-per-day +1000000000000 +\(default: TENANT_MAX_GRANT_POINTS_PER_DAY\)$/m);

    const set = cli(['acme', '--channels', '10', '--connections=20', '--intents-per-s', '30', '--grants-per-day', '40']);
    assert.equal(set.code, 0, set.stderr);
    assert.match(set.stdout, /^intents-per-s +30 +\(override\)$/m);
    assert.deepEqual(await store.quotas.overrides('acme'), { channels: 10, connections: 20, intentsPerS: 30, grantPointsPerDay: 40 });

    const cleared = cli(['acme', '--channels', 'default', '--clear', 'grants-per-day']);
    assert.equal(cleared.code, 0, cleared.stderr);
    assert.match(cleared.stdout, /^channels +100000 +\(default: TENANT_MAX_CHANNELS\)$/m);
    assert.deepEqual(await store.quotas.overrides('acme'), { connections: 20, intentsPerS: 30 });
    assert.equal(cli(['acme', '--clear', 'all']).code, 0);
    assert.deepEqual(await store.quotas.overrides('acme'), {});
  });

  it('tenant quota - bad numbers exit 2 and an unknown tenant exits 1, each with its code; nothing changes', async () => {
    await store.quotas.set('acme', { channels: 7 });
    for (const args of [
      ['acme', '--channels', '-1', '--connections', '5'],
      ['acme', '--connections=-3'],
      ['acme', '--intents-per-s', '2.5'],
      ['acme', '--grants-per-day', 'lots'],
    ]) {
      const r = cli(args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /CP_ERR_PROTO_INVALID|argument is ambiguous|usage:/, args.join(' '));
      assert.equal(r.stdout, '');
    }
    const unknown = cli(['nobody', '--channels', '3']);
    assert.equal(unknown.code, 1, unknown.stderr);
    assert.match(unknown.stderr, /CP_ERR_TENANT_UNKNOWN: unknown tenant nobody/);
    assert.equal(cli(['nobody']).code, 1);
    assert.deepEqual(await store.quotas.overrides('acme'), { channels: 7 }, 'nothing changed');
    const { rows } = await store.db.query<{ n: string }>('SELECT count(*) AS n FROM tenant_quotas');
    assert.equal(Number(rows[0]!.n), 1, 'no row for the unknown tenant');
  });
});
