/**
 * `crowdplay cluster` as real processes (the bundle `npm run cluster` runs) on
 * the machine's PostgreSQL and NATS, isolated by schema, subject prefix and
 * Redis key prefixes: failover after a kill -9 of a channel's shard (the
 * viewer keeps its socket), a new shard taking its share, and a router restart
 * that keeps every assignment. Every process started here is stopped in
 * `after`, also on failure.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import WebSocket from 'ws';
import { SignJWT } from 'jose';
import { openBus, subjects as makeSubjects, type Bus } from '@crowdplay/bus';
import { startCluster, type Cluster } from '@crowdplay/cli';
import { GameClient } from '@crowdplay/sdk-game';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import type { Batch } from '@crowdplay/protocol';
import { RouterClient, type Assignment } from '@crowdplay/router';
import { openStore, type Store } from '@crowdplay/store';
import { serviceUrls, testSchema, uniqueName, type TestSchema } from '@crowdplay/testing';
import { builtProduct, ROOT } from '../helpers.ts';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms))),
    ]);
  } finally {
    clearTimeout(t);
  }
}

describe('crowdplay cluster: failover, rebalance, router restart (PostgreSQL + NATS)', () => {
  let schema: TestSchema;
  let cluster: Cluster | undefined;
  let store: Store | undefined;
  let bus: Bus | undefined;
  let router: RouterClient;
  let env: Record<string, string>;
  let main = '';
  const lines: string[] = [];
  const game = { client: undefined as GameClient | undefined };
  let viewer: ViewerClient | undefined;
  let secret = '';
  let apiKey = '';

  before(async () => {
    const urls = await serviceUrls();
    schema = await testSchema();
    main = await builtProduct();
    const prefix = uniqueName('cl');
    env = {
      ...(process.env as Record<string, string>),
      DATABASE_URL: urls.databaseUrl,
      DATABASE_SCHEMA: schema.schema,
      NATS_URL: urls.natsUrl,
      REDIS_URL: urls.redisUrl,
      BUS_SUBJECT_PREFIX: prefix,
      TELEGRAM_SENDQ_PREFIX: uniqueName('sq'),
      BOARD_RENDER_PREFIX: uniqueName('br'),
      PORT: '0',
      LOG_LEVEL: 'info',
      SNAPSHOT_INTERVAL_MS: '200',
      SHARD_HEARTBEAT_MS: '250',
      ROUTER_SHARD_TIMEOUT_MS: '1500',
      ROUTER_CHECK_MS: '200',
      ROUTER_REBALANCE_MOVES_PER_S: '4',
    };
    cluster = await startCluster({
      gateways: 1,
      shards: 2,
      env,
      entry: { execArgv: [], script: main },
      out: (l) => void lines.push(l),
    });
    store = await openStore({ url: urls.databaseUrl, schema: schema.schema, poolMax: 2, pgliteDir: 'memory', migrate: false });
    const created = await store.tenants.create('acme', 'Acme');
    apiKey = created.apiKey;
    secret = created.tenant.signingSecret;
    bus = await openBus({ natsUrl: urls.natsUrl, name: 'cluster-test' });
    router = new RouterClient(bus, makeSubjects(prefix), 3_000);
  });

  after(async () => {
    await viewer?.close().catch(() => undefined);
    await game.client?.close().catch(() => undefined);
    await cluster?.stop();
    await bus?.close();
    await store?.close();
    await schema?.drop();
  });

  /** Polls the router until `ok` holds for the channel's assignment; returns it. */
  async function waitFor(channel: string, ok: (a: Assignment | null) => boolean, ms: number): Promise<Assignment | null> {
    const deadline = Date.now() + ms;
    for (;;) {
      const a = await router.lookup(channel).catch(() => null);
      if (ok(a)) return a;
      if (Date.now() > deadline) throw new Error(`${channel}: ${JSON.stringify(a)} after ${ms} ms\n${lines.slice(-40).join('\n')}`);
      await sleep(100);
    }
  }

  it('kill -9 of a channel’s shard: the channel moves to the other shard at a higher epoch; the viewer’s next act is acked and batched on the same socket', async () => {
    const url = cluster!.gatewayUrls[0]!;
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
    const g = new GameClient({ url, channel: 'hall', apiKey });
    game.client = g;
    const batches: Batch[] = [];
    g.on('batch', (b) => batches.push(b));
    await g.connect();
    g.declare([{ name: 'cheer', maxPerTick: 100 }]);
    const token = await new SignJWT({ tid: 'acme' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('zoe')
      .setExpirationTime('5m')
      .sign(new TextEncoder().encode(secret));
    viewer = new ViewerClient({ url, channel: 'hall', token, WebSocket, autoReconnect: false });
    const states: string[] = [];
    viewer.on('state', (s) => states.push(s));
    await viewer.connect();
    let ack = await within(3_000, viewer.act('cheer'), 'first act');
    for (let i = 0; !ack.ok && i < 100; i++) {
      assert.equal(ack.code, 'CP_ERR_INTENT_NO_GAME', 'only refused until the declaration lands');
      await sleep(20);
      ack = await within(3_000, viewer.act('cheer'), 'act');
    }
    assert.equal(ack.ok, true);
    const before = (await router.lookup('hall'))!;
    assert.ok(before, 'assigned');
    assert.match(before.shard, /^shard-[12]$/);
    await sleep(600); // a snapshot (SNAPSHOT_INTERVAL_MS=200) holds the declaration

    const t0 = Date.now();
    cluster!.get(before.shard).signal('SIGKILL');
    const moved = (await waitFor('hall', (a) => a !== null && a.shard !== before.shard && a.epoch > before.epoch, 8_000))!;
    const movedMs = Date.now() - t0;
    assert.ok(movedMs < 5_000, `moved in ${movedMs} ms`);
    const row = await store!.channels.get('hall');
    assert.deepEqual({ owner: row?.owner, epoch: row?.epoch }, { owner: moved.shard, epoch: moved.epoch }, 'Postgres agrees');

    const seen = batches.length;
    const again = await within(3_000, viewer.act('cheer'), 'act after the move');
    assert.equal(again.ok, true, JSON.stringify(again));
    const deadline = Date.now() + 5_000;
    while (batches.length === seen && Date.now() < deadline) await sleep(20);
    assert.ok(batches.length > seen, 'a batch after the move');
    assert.equal(batches.at(-1)!.actions.cheer?.intents.at(-1)?.viewer, 'zoe');
    assert.equal(viewer.state, 'open');
    assert.ok(!states.includes('reconnecting') && !states.includes('closed'), `no reconnect: ${states.join(',')}`);
  });

  it('a third shard joins and takes its share of the channels', async () => {
    const ids = ['r1', 'r2', 'r3', 'r4', 'r5', 'r6'];
    for (const id of ids) await store!.channels.ensure(id, 'acme');
    for (const id of ids) await router.assign(id);
    const all = [...ids, 'hall'];
    const start = new Map<string, Assignment>();
    for (const id of all) start.set(id, (await router.lookup(id))!);
    const live = new Set([...start.values()].map((a) => a.shard));
    assert.equal(live.size, 1, 'one live shard holds them all after the kill');
    await cluster!.addShard();
    const deadline = Date.now() + 15_000;
    let owners: Assignment[] = [];
    for (;;) {
      owners = await Promise.all(all.map(async (id) => (await router.lookup(id))!));
      if (owners.filter((a) => a.shard === 'shard-3').length >= 3) break;
      if (Date.now() > deadline) assert.fail(`shard-3 has no fair share: ${JSON.stringify(owners)}\n${lines.slice(-40).join('\n')}`);
      await sleep(200);
    }
    const onNew = owners.filter((a) => a.shard === 'shard-3');
    assert.ok(onNew.length === 3 || onNew.length === 4, `fair share of 7 over 2 shards: ${onNew.length}`);
    for (const a of onNew) {
      assert.ok(a.epoch > start.get(a.channel)!.epoch, `${a.channel} moved at a new epoch`);
      assert.equal((await store!.channels.get(a.channel))?.owner, 'shard-3');
    }
  });

  it('router restart: every assignment survives (same owner and epoch), and nothing moves afterwards', async () => {
    const all = ['r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'hall'];
    await sleep(1_000); // any rebalance in flight settles
    const before = new Map<string, Assignment>();
    for (const id of all) before.set(id, (await router.lookup(id))!);
    await cluster!.get('router').restart();
    for (const id of all) {
      assert.deepEqual(await router.lookup(id), before.get(id), `lookup ${id}`);
      assert.deepEqual(await router.assign(id), before.get(id), `assign ${id} answers the owner, no new epoch`);
    }
    await sleep(2_000); // longer than ROUTER_SHARD_TIMEOUT_MS: the live shards were heard from, nothing failed over
    for (const id of all) {
      const row = await store!.channels.get(id);
      assert.deepEqual({ shard: row?.owner, epoch: row?.epoch }, { shard: before.get(id)!.shard, epoch: before.get(id)!.epoch });
    }
  });

  it('cluster mode without NATS_URL or DATABASE_URL: a service refuses to start, and startCluster refuses before spawning', async () => {
    const { NATS_URL: _n, DATABASE_URL: _d, ...rest } = env;
    const r = spawnSync(process.execPath, [main, 'service', 'router'], {
      cwd: ROOT,
      env: { ...rest, CROWDPLAY_MODE: 'cluster' },
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /NATS_URL: required when CROWDPLAY_MODE=cluster/);
    assert.match(r.stderr, /DATABASE_URL: required when CROWDPLAY_MODE=cluster/);
    let spawned = 0;
    await assert.rejects(
      startCluster({ gateways: 1, shards: 1, env: { ...env, NATS_URL: 'http://127.0.0.1:1' }, out: () => void spawned++ }),
      /NATS_URL/,
    );
    await assert.rejects(startCluster({ gateways: 0, shards: 1, env, out: () => void spawned++ }), /--gateways must be an integer/);
    assert.equal(spawned, 0);
  });
});
