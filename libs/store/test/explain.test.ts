/**
 * The hot queries use their indexes on large tables (docs/architecture.md "Event log"):
 * 100k channels, 200k logged events, 100k wallets and 200k transfers made
 * with generate_series, ANALYZEd, then EXPLAIN (FORMAT JSON) of each query
 * as the code runs it (the SQL constants the code itself uses: EVENT_SQL,
 * CHANNEL_SQL, LEDGER_SQL; real parameters): no Seq Scan on a large table.
 * The idempotency look-up runs inside cp_ledger_commit (a migration's
 * plpgsql), so its join is restated here.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { testSchema, type TestSchema } from '@crowdplay/testing';
import { LEDGER_SQL } from '@crowdplay/ledger';
import { CHANNEL_SQL, EVENT_SQL, openStore, type Store } from '../src/index.ts';

const LARGE = ['channels', 'channel_events', 'accounts', 'transfers'];

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

function nodes(p: PlanNode): PlanNode[] {
  return [p, ...(p.Plans ?? []).flatMap(nodes)];
}

describe('EXPLAIN: hot queries use indexes on large tables (Postgres)', () => {
  let schema: TestSchema;
  let store: Store;

  async function plan(sql: string, params: unknown[]): Promise<PlanNode[]> {
    const { rows } = await store.db.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) ${sql}`, params);
    return nodes(rows[0]!['QUERY PLAN'][0]!.Plan);
  }

  async function assertIndexed(sql: string, params: unknown[], mustUse: string[]): Promise<void> {
    const all = await plan(sql, params);
    const seq = all.filter((n) => n['Node Type'] === 'Seq Scan' && LARGE.includes(n['Relation Name'] ?? ''));
    assert.deepEqual(
      seq.map((n) => n['Relation Name']),
      [],
      `no Seq Scan on a large table: ${JSON.stringify(all.map((n) => [n['Node Type'], n['Relation Name'], n['Index Name']]))}`,
    );
    const used = new Set(all.map((n) => n['Index Name']).filter(Boolean));
    for (const ix of mustUse) assert.ok(used.has(ix), `uses ${ix} (used: ${[...used].join(', ')})`);
  }

  before(async () => {
    schema = await testSchema();
    store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 1, pgliteDir: 'memory' });
    await store.tenants.create('acme', 'Acme');
    await store.db.tx(async (q) => {
      // Bulk rows without the per-row fencing triggers (the test database's superuser may).
      await q.query('SET LOCAL session_replication_role = replica');
      await q.query(
        `INSERT INTO channels (id, tenant_id, epoch, owner)
         SELECT 'c' || g, 'acme', 1, CASE WHEN g % 10 = 0 THEN 's' || (g % 50) END FROM generate_series(1, 100000) g`,
      );
      await q.query(
        `INSERT INTO channel_events (channel_id, event_id, epoch, kind, body, created_at)
         SELECT 'c' || (g % 1000 + 1), g, 1, 'batch', '{"t":"batch"}', now() - (200000 - g) * interval '10 ms'
         FROM generate_series(1, 200000) g`,
      );
      await q.query(
        `INSERT INTO accounts (tenant_id, kind, owner, balance) SELECT 'acme', 'wallet', 'v' || g, 1000 FROM generate_series(1, 100000) g`,
      );
      await q.query(`INSERT INTO accounts (tenant_id, kind, owner) VALUES ('acme', 'treasury', ''), ('acme', 'escrow', 'r1')`);
      await q.query(
        `INSERT INTO transfers (id, tenant_id, channel_id, epoch, from_account, to_account, amount, kind, round_id, fingerprint)
         SELECT 't' || g, 'acme', 'c1', 1, g % 100000 + 1, 100001, 1, 'stake', 'r' || (g % 2000), sha256(('t' || g)::bytea)
         FROM generate_series(1, 200000) g`,
      );
    });
    for (const t of LARGE) await store.db.query(`ANALYZE ${t}`);
  });
  after(async () => {
    await store?.close();
    await schema?.drop();
  });

  it('resume - events of a channel after an id (primary key), and the floor', async () => {
    await assertIndexed(EVENT_SQL.since, ['c7', 150_000, 1_001], ['channel_events_pkey']);
    await assertIndexed(EVENT_SQL.floor, ['c7'], ['channels_pkey']);
  });

  it('retention - the pruning pass takes the oldest rows by created_at', async () => {
    await assertIndexed(EVENT_SQL.pruneVictims, [new Date(Date.now() - 1_800_000), 5_000], ['channel_events_created_idx']);
  });

  it('assignment - a channel by id, the channels of an owner', async () => {
    await assertIndexed(CHANNEL_SQL.byId, ['c4242'], ['channels_pkey']);
    await assertIndexed(CHANNEL_SQL.byOwner, ['s7'], ['channels_owner_idx']);
  });

  it('ledger - wallet balance, balances of many, idempotency lookup, transfers of a round', async () => {
    await assertIndexed(LEDGER_SQL.balance, ['acme', 'wallet', 'v77'], []);
    await assertIndexed(LEDGER_SQL.walletBalances, ['acme', ['v1', 'v2', 'v3']], []);
    await assertIndexed(
      'SELECT x.id, x.fingerprint FROM unnest($1::text[]) AS u(id) JOIN transfers x ON x.id = u.id',
      [['t1', 't99']],
      ['transfers_pkey'],
    );
    await assertIndexed(LEDGER_SQL.roundNets, ['acme', 'r17', ['stake'], ['refund']], ['transfers_round_idx']);
  });
});

describe('EXPLAIN: round reads start from the round with the accounts’ statistics out of date (Postgres)', () => {
  let schema: TestSchema;
  let store: Store;

  before(async () => {
    schema = await testSchema();
    store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 1, pgliteDir: 'memory' });
    await store.tenants.create('acme', 'Acme');
    // Analyzed while empty, then filled: a tenant's wallets created since the last ANALYZE (autovacuum kept out).
    for (const t of ['accounts', 'transfers']) {
      await store.db.query(`ALTER TABLE ${t} SET (autovacuum_enabled = false)`);
      await store.db.query(`ANALYZE ${t}`);
    }
    await store.db.tx(async (q) => {
      await q.query('SET LOCAL session_replication_role = replica');
      await q.query(
        `INSERT INTO accounts (tenant_id, kind, owner, balance) SELECT 'acme', 'wallet', 'v' || g, 1000 FROM generate_series(1, 20000) g`,
      );
      await q.query(`INSERT INTO accounts (tenant_id, kind, owner) VALUES ('acme', 'escrow', 'r1')`);
      // v5 stakes 3 and gets 3 back, v6 stakes 2; the escrow is account 20001.
      await q.query(
        `INSERT INTO transfers (id, tenant_id, channel_id, epoch, from_account, to_account, amount, kind, round_id, fingerprint)
         VALUES ('s5', 'acme', 'c1', 1, 5, 20001, 3, 'stake', 'r1', sha256('s5')),
                ('s6', 'acme', 'c1', 1, 6, 20001, 2, 'stake', 'r1', sha256('s6')),
                ('b5', 'acme', 'c1', 1, 20001, 5, 3, 'refund', 'r1', sha256('b5'))`,
      );
    });
  });
  after(async () => {
    await store?.close();
    await schema?.drop();
  });

  async function accountScans(sql: string, params: unknown[]): Promise<string[]> {
    const { rows } = await store.db.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) ${sql}`, params);
    // Index names of the scans on accounts (a bitmap scan names its index on its child), and any sequential scan.
    return nodes(rows[0]!['QUERY PLAN'][0]!.Plan)
      .filter((n) => n['Index Name']?.startsWith('accounts_') || (n['Node Type'] === 'Seq Scan' && n['Relation Name'] === 'accounts'))
      .map((n) => n['Index Name'] ?? n['Node Type']);
  }

  it('ledger - a round’s flows and nets look wallets up by id, not every wallet of the tenant', async () => {
    const flowsArgs = ['acme', ['r1'], ['stake', 'buy'], null];
    const netsArgs = ['acme', 'r1', ['stake'], ['refund']];
    for (const [sql, args] of [
      [LEDGER_SQL.roundFlows, flowsArgs],
      [LEDGER_SQL.roundNets, netsArgs],
    ] as const) {
      const scans = await accountScans(sql, [...args]);
      assert.ok(scans.length > 0 && scans.every((s) => s === 'accounts_pkey'), `accounts by primary key only: ${scans.join('; ')}`);
    }
    const flows = await store.db.query<{ owner: string; staked: string; moved: string }>(LEDGER_SQL.roundFlows, flowsArgs);
    assert.deepEqual(
      flows.rows.map((r) => [r.owner, Number(r.staked), Number(r.moved)]),
      [
        ['v5', 3, 0],
        ['v6', 2, -2],
      ],
    );
    const nets = await store.db.query<{ owner: string; net: string }>(LEDGER_SQL.roundNets, netsArgs);
    assert.deepEqual(
      nets.rows.map((r) => [r.owner, Number(r.net)]),
      [['v6', 2]],
    );
  });
});
