/**
 * Rounds against kill -9 and SIGTERM: `crowdplay start` as a child process on
 * a PostgreSQL test schema, a game opens a pool and a market round, viewers
 * stake and trade, the process dies mid-round; after a restart (SIGKILL) or
 * at the drain (SIGTERM) every open round is refunded through the ledger,
 * `ledger verify` is ok, and every acked stake and buy is in the ledger.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import { defaultConfig } from '@crowdplay/config';
import { verifyLedger } from '@crowdplay/ledger';
import { openStore, type Store } from '@crowdplay/store';
import { testSchema, type TestSchema } from '@crowdplay/testing';
import { openSocket, spawnCrowdplay, type ChildServer, type Frame, type TestSocket } from '../helpers.ts';

const KEY = defaultConfig({}).standalone.tenantKey;
const SECRET = defaultConfig({}).standalone.tenantSecret;
const CHANNEL = 'arena';
const VIEWERS = ['v1', 'v2', 'v3', 'v4', 'v5'];
const FUNDS = 1_000;

/** A socket that has had its welcome. */
async function welcomed(url: string): Promise<TestSocket> {
  const c = openSocket(url);
  await c.next((f) => f.t === 'welcome');
  return c;
}

async function viewerToken(viewer: string): Promise<string> {
  return new SignJWT({ tid: 'dev' })
    .setProtectedHeader({ alg: 'HS256', kid: 'dev' })
    .setSubject(viewer)
    .setExpirationTime('10m')
    .sign(new TextEncoder().encode(SECRET));
}

function wsUrl(base: string, params: Record<string, string>): string {
  return `${base.replace(/^http/, 'ws')}/v1/ws?${new URLSearchParams(params).toString()}`;
}

describe('rounds survive kill -9 and SIGTERM (standalone process on PostgreSQL)', () => {
  let schema: TestSchema;
  let store: Store;
  let env: Record<string, string>;
  let server: ChildServer | undefined;

  before(async () => {
    schema = await testSchema();
    env = { DATABASE_URL: schema.databaseUrl, DATABASE_SCHEMA: schema.schema, DEMO_ENABLED: 'false' };
  });
  after(async () => {
    if (server && server.child.exitCode === null) server.child.kill('SIGKILL');
    await store?.close();
    await schema?.drop();
  });

  /** Game request with a ref, answered by a result or error frame. */
  async function request(game: TestSocket, frame: Frame): Promise<Frame> {
    const ref = `r${Math.random().toString(36).slice(2)}`;
    game.send({ ...frame, ref });
    return game.next((f) => f.ref === ref && (f.t === 'result' || f.t === 'error'));
  }

  /**
   * Opens a pool and a market round, funds the viewers, and has each viewer
   * stake and trade in a closed loop until `stop()`; returns what was acked.
   */
  async function play(base: string, rounds: { pool: string; market: string }) {
    const game = await welcomed(wsUrl(base, { role: 'game', channel: CHANNEL, key: KEY }));
    game.send({ t: 'declare', actions: [{ name: 'cheer', maxPerTick: 10 }] });
    for (const [round, kind] of [
      [rounds.pool, 'pool'],
      [rounds.market, 'market'],
    ] as const) {
      const r = await request(game, { t: 'round.open', round, kind, outcomes: ['x', 'y'], durationMs: 120_000 });
      assert.equal(r.t, 'result', JSON.stringify(r));
    }
    for (const v of VIEWERS) {
      const res = await fetch(`${base}/v1/grants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ viewer: v, points: FUNDS, id: `fund-${v}` }),
      });
      assert.ok(res.ok, `grant ${res.status}`);
    }
    const acked = new Map<string, { staked: number; bought: number }>(VIEWERS.map((v) => [v, { staked: 0, bought: 0 }]));
    let running = true;
    let total = 0;
    const loops = VIEWERS.map(async (v) => {
      const c = await welcomed(wsUrl(base, { role: 'crowd', channel: CHANNEL, token: await viewerToken(v) }));
      let seq = 0;
      try {
        while (running) {
          const s = ++seq;
          const stake = s % 2 === 0;
          c.send(
            stake
              ? { t: 'stake', seq: s, round: rounds.pool, outcome: s % 4 === 0 ? 'x' : 'y', points: 3 }
              : { t: 'buy', seq: s, round: rounds.market, outcome: 'x', budget: 5 },
          );
          const ack = await c.next((f) => f.t === 'ack' && f.seq === s, 5_000).catch(() => null);
          if (!ack) break; // the server died under us
          if (ack.ok === true) {
            const a = acked.get(v)!;
            if (stake) a.staked += ack.cost as number;
            else a.bought += ack.cost as number;
            total++;
          }
        }
      } finally {
        c.close();
      }
    });
    return {
      acked,
      count: () => total,
      stop: async () => {
        running = false;
        game.close();
        await Promise.allSettled(loops);
      },
    };
  }

  /** Σ committed transfers of `kind` per viewer's wallet into the round (ledger truth). */
  async function committed(round: string, kind: string): Promise<Map<string, number>> {
    const { rows } = await store.db.query<{ owner: string; total: string }>(
      `SELECT a.owner, sum(t.amount) AS total FROM transfers t JOIN accounts a ON a.id = t.from_account
       WHERE t.round_id = $1 AND t.kind = $2 GROUP BY a.owner`,
      [`${CHANNEL}/${round}`, kind],
    );
    return new Map(rows.map((r) => [r.owner, Number(r.total)]));
  }

  async function balances(): Promise<number[]> {
    const { rows } = await store.db.query<{ owner: string; balance: string }>(
      "SELECT owner, balance FROM accounts WHERE tenant_id = 'dev' AND kind = 'wallet' AND owner = ANY($1) ORDER BY owner",
      [VIEWERS],
    );
    return rows.map((r) => Number(r.balance));
  }

  async function assertAckedInLedger(acked: Map<string, { staked: number; bought: number }>, r: { pool: string; market: string }) {
    const stakes = await committed(r.pool, 'stake');
    const buys = await committed(r.market, 'buy');
    for (const [v, a] of acked) {
      assert.ok((stakes.get(v) ?? 0) >= a.staked, `${v}: acked stakes ${a.staked}, committed ${stakes.get(v) ?? 0}`);
      assert.ok((buys.get(v) ?? 0) >= a.bought, `${v}: acked buys ${a.bought}, committed ${buys.get(v) ?? 0}`);
    }
  }

  it('kill -9 mid-round: after a restart the open rounds are refunded and verify is ok', async () => {
    server = await spawnCrowdplay(env);
    store = await openStore({ ...defaultConfig({}).db, url: schema.databaseUrl, schema: schema.schema, poolMax: 2 });
    const rounds = { pool: 'k-pool', market: 'k-market' };
    const p = await play(server.baseUrl, rounds);
    const t0 = Date.now();
    while (p.count() < 60 && Date.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 20));
    assert.ok(p.count() >= 60, `only ${p.count()} trades acked`);
    server.child.kill('SIGKILL'); // trades are in flight right now
    await new Promise((r) => server!.child.once('exit', r));
    await p.stop();
    await assertAckedInLedger(p.acked, rounds);

    // Restart: the channel with unfinished rounds is acquired at start-up and its open rounds refunded.
    server = await spawnCrowdplay(env);
    for (const id of [rounds.pool, rounds.market]) {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const { rows } = await store.db.query<{ state: string; paid: boolean }>('SELECT state, paid FROM rounds WHERE id = $1', [id]);
        if (rows[0]?.paid) {
          assert.equal(rows[0].state, 'cancelled');
          break;
        }
        assert.ok(Date.now() < deadline, `round ${id} was not refunded after the restart`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    assert.deepEqual(
      await balances(),
      VIEWERS.map(() => FUNDS),
      'every committed stake and buy was refunded exactly',
    );
    assert.deepEqual((await verifyLedger(store.db)).failures, []);
    assert.equal(await server.stop(), 0);
  });

  it('SIGTERM mid-round: the drain refunds every open round, then the process exits 0', async () => {
    server = await spawnCrowdplay(env);
    const rounds = { pool: 't-pool', market: 't-market' };
    const p = await play(server.baseUrl, rounds);
    const t0 = Date.now();
    while (p.count() < 60 && Date.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 20));
    const code = await server.stop(); // SIGTERM while the viewers keep trading
    await p.stop();
    assert.equal(code, 0, server.output());
    await assertAckedInLedger(p.acked, rounds);
    const { rows } = await store.db.query<{ id: string; state: string; paid: boolean }>(
      'SELECT id, state, paid FROM rounds WHERE id = ANY($1) ORDER BY id',
      [[rounds.pool, rounds.market]],
    );
    assert.deepEqual(
      rows.map((r) => [r.id, r.state, r.paid]),
      [
        ['t-market', 'cancelled', true],
        ['t-pool', 'cancelled', true],
      ],
    );
    assert.deepEqual(
      await balances(),
      VIEWERS.map(() => FUNDS),
    );
    assert.deepEqual((await verifyLedger(store.db)).failures, []);
  });
});
