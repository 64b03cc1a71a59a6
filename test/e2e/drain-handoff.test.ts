/**
 * Drain moves a channel with its open round: two `crowdplay
 * service crowd-engine` processes, a router, a sequencer and a gateway on
 * PostgreSQL + NATS (own schema, own subject prefix). SIGTERM to the owner of
 * a channel with an open pool round: the channel moves to the other shard
 * with the round still open and its stakes intact, a viewer's later stake is
 * acked by the new owner, settlement pays everyone, `ledger verify` is ok.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import WebSocket from 'ws';
import { SignJWT } from 'jose';
import { defaultConfig } from '@crowdplay/config';
import { verifyLedger } from '@crowdplay/ledger';
import { GameClient } from '@crowdplay/sdk-game';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import { openStore, type Store } from '@crowdplay/store';
import { serviceUrls, testSchema, uniqueName, type TestSchema } from '@crowdplay/testing';
import { ROOT, spawnService, type ServiceProcess } from '../helpers.ts';

const CLI = join(ROOT, 'services/cli/src/main.ts');

describe('drain hands a channel with an open round to another shard (PostgreSQL + NATS)', () => {
  let schema: TestSchema;
  let store: Store;
  let env: Record<string, string>;
  const procs: ServiceProcess[] = [];
  let gatewayUrl = '';

  const start = (name: string, extra: Record<string, string> = {}): Promise<string> =>
    spawnService(procs, name, { ...env, ...extra }, extra.SHARD_ID ?? name);
  const exited = (c: ChildProcess): Promise<number | null> =>
    new Promise((r) => (c.exitCode !== null ? r(c.exitCode) : c.once('exit', (code) => r(code))));

  before(async () => {
    const urls = await serviceUrls();
    schema = await testSchema();
    env = {
      DATABASE_URL: urls.databaseUrl,
      DATABASE_SCHEMA: schema.schema,
      NATS_URL: urls.natsUrl,
      BUS_SUBJECT_PREFIX: uniqueName('dh'),
      LOG_LEVEL: 'info',
      PORT: '0',
    };
    await start('sequencer');
    await start('crowd-engine', { SHARD_ID: 'shard-a' });
    await start('crowd-engine', { SHARD_ID: 'shard-b' });
    await start('router');
    gatewayUrl = await start('gateway');
    store = await openStore(defaultConfig({ db: { url: schema.databaseUrl, schema: schema.schema, poolMax: 2, pgliteDir: 'memory' } }).db);
  });

  after(async () => {
    for (const p of procs.reverse()) {
      if (p.child.exitCode === null) p.child.kill('SIGTERM');
      await exited(p.child);
    }
    await store?.close();
    await schema?.drop();
  });

  it('SIGTERM to the owner: the channel moves with its open round; a later stake is acked by the new owner; settle pays everyone', async () => {
    const created = spawnSync(process.execPath, ['--import', 'tsx', CLI, 'tenant', 'create', 'acme', '--name', 'Acme'], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      encoding: 'utf8',
    });
    assert.equal(created.status, 0, created.stderr);
    const apiKey = /api key:\s+(\S+)/.exec(created.stdout)![1]!;
    const secret = /signing secret:\s+(\S+)/.exec(created.stdout)![1]!;
    for (const v of ['ann', 'bob', 'cat']) {
      const res = await fetch(`${gatewayUrl}/v1/grants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ viewer: v, points: 100, id: `fund-${v}` }),
      });
      assert.ok(res.ok, `grant ${res.status} ${await res.text()}`);
    }

    const game = new GameClient({ url: gatewayUrl, channel: 'hall', apiKey });
    await game.connect();
    game.declare([{ name: 'cheer', maxPerTick: 100 }]);
    const opened = await game.openRound({ round: 'r1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 60_000 });
    assert.equal(opened.state, 'open');
    const viewer = async (name: string): Promise<ViewerClient> => {
      const token = await new SignJWT({ tid: 'acme' })
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject(name)
        .setExpirationTime('5m')
        .sign(new TextEncoder().encode(secret));
      const v = new ViewerClient({ url: gatewayUrl, channel: 'hall', token, WebSocket, autoReconnect: false });
      await v.connect();
      return v;
    };
    const ann = await viewer('ann');
    const bob = await viewer('bob');
    assert.equal((await ann.stake('r1', 'x', 40, { key: 'a1' })).ok, true);
    assert.equal((await bob.stake('r1', 'y', 20, { key: 'b1' })).ok, true);

    const owner = async (): Promise<string | null> => (await store.channels.get('hall'))?.owner ?? null;
    const from = await owner();
    assert.ok(from === 'shard-a' || from === 'shard-b', String(from));
    const other = from === 'shard-a' ? 'shard-b' : 'shard-a';
    const proc = procs.find((p) => p.name === from)!;
    proc.child.kill('SIGTERM');
    assert.equal(await exited(proc.child), 0, proc.out());
    assert.equal(await owner(), other, 'moved to the other shard');
    const row = await store.rounds.get('hall', 'r1');
    assert.equal(row?.state, 'open', 'not refunded');

    // A stake after the move: acked by the new owner (retried while the handoff refuses, as a client would).
    const cat = await viewer('cat');
    let ack = await cat.stake('r1', 'x', 10, { key: 'c1' });
    for (let i = 0; !ack.ok && ack.code === 'CP_ERR_CHANNEL_UNAVAILABLE' && i < 50; i++) {
      await new Promise((r) => setTimeout(r, 50));
      ack = await cat.stake('r1', 'x', 10, { key: 'c1' });
    }
    assert.deepEqual([ack.ok, ack.cost], [true, 10], JSON.stringify(ack));
    assert.equal((await ann.stake('r1', 'x', 40, { key: 'a1' })).cost, 40, 'a key from before the move is a replay');

    const settled = await game.settleRound('r1', 'x');
    assert.equal(settled.state, 'settled');
    const bal = (v: string): Promise<number> =>
      store.db
        .query<{ balance: string }>(`SELECT balance FROM accounts WHERE kind = 'wallet' AND owner = $1`, [v])
        .then((r) => Number(r.rows[0]!.balance));
    const take = Math.floor((70 * defaultConfig({}).ledger.houseTakeBps) / 10_000);
    const ballots = [await bal('ann'), await bal('bob'), await bal('cat')];
    assert.equal(ballots[1], 80, 'bob lost his 20');
    // Winners ann (40) and cat (10) share the pool of 70 less the take: 60 + 90 kept + 70 − take.
    assert.equal(ballots[0]! + ballots[2]!, 220 - take, `winners share the pool: ${ballots.join(',')}`);
    assert.ok(ballots[0]! - 60 > ballots[2]! - 90, 'ann staked more, ann won more');
    assert.deepEqual((await verifyLedger(store.db)).failures, []);
    await Promise.all([ann.close(), bob.close(), cat.close()]);
    await game.close();
  });
});
