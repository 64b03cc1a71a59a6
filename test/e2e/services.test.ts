/**
 * Each service runnable alone: `crowdplay service <name>` as four processes
 * sharing PostgreSQL and NATS (own schema, own subject prefix), a tenant made
 * with `crowdplay tenant create`, an sdk-game connection creating the channel,
 * and a viewer whose intent is acked and batched across the processes.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import WebSocket from 'ws';
import { SignJWT } from 'jose';
import { GameClient } from '@crowdplay/sdk-game';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import type { Batch } from '@crowdplay/protocol';
import { serviceUrls, testSchema, uniqueName, type TestSchema } from '@crowdplay/testing';
import { ROOT, spawnService, type ServiceProcess } from '../helpers.ts';

const CLI = join(ROOT, 'services/cli/src/main.ts');

describe('services as separate processes (PostgreSQL + NATS)', () => {
  let schema: TestSchema;
  let env: Record<string, string>;
  const procs: ServiceProcess[] = [];
  let gatewayUrl = '';

  const start = (name: string, extra: Record<string, string> = {}): Promise<string> =>
    spawnService(procs, name, { ...env, ...extra }, name);

  before(async () => {
    const urls = await serviceUrls();
    schema = await testSchema();
    env = {
      DATABASE_URL: urls.databaseUrl,
      DATABASE_SCHEMA: schema.schema,
      NATS_URL: urls.natsUrl,
      BUS_SUBJECT_PREFIX: uniqueName('svc'),
      LOG_LEVEL: 'info',
      PORT: '0',
    };
    await start('sequencer');
    await start('crowd-engine', { SHARD_ID: 'shard-a' });
    await start('router');
    gatewayUrl = await start('gateway');
  });

  after(async () => {
    for (const p of procs.reverse()) {
      p.child.kill('SIGTERM');
      await new Promise((r) => (p.child.exitCode !== null ? r(undefined) : p.child.once('exit', r)));
    }
    await schema?.drop();
  });

  it('tenant create, a game creates its channel, a viewer acts: acked and batched across processes', async () => {
    const created = spawnSync(process.execPath, ['--import', 'tsx', CLI, 'tenant', 'create', 'acme', '--name', 'Acme'], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      encoding: 'utf8',
    });
    assert.equal(created.status, 0, created.stderr);
    const apiKey = /api key:\s+(\S+)/.exec(created.stdout)?.[1];
    const secret = /signing secret:\s+(\S+)/.exec(created.stdout)?.[1];
    assert.ok(apiKey && secret, created.stdout);
    const dup = spawnSync(process.execPath, ['--import', 'tsx', CLI, 'tenant', 'create', 'acme'], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      encoding: 'utf8',
    });
    assert.equal(dup.status, 1);
    assert.match(
      dup.stderr,
      /^crowdplay tenant create: CP_ERR_TENANT_EXISTS: tenant acme already exists \(crowdplay tenant rotate-key acme /,
    );
    assert.equal(dup.stdout, '', 'no new key printed');

    const game = new GameClient({ url: gatewayUrl, channel: 'hall', apiKey });
    const batches: Batch[] = [];
    game.on('batch', (b) => batches.push(b));
    await game.connect();
    game.declare([{ name: 'cheer', maxPerTick: 100 }]);

    const token = await new SignJWT({ tid: 'acme' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('zoe')
      .setExpirationTime('5m')
      .sign(new TextEncoder().encode(secret));
    const viewer = new ViewerClient({ url: gatewayUrl, channel: 'hall', token, WebSocket, autoReconnect: false });
    await viewer.connect();
    let ack = await viewer.act('cheer');
    for (let i = 0; !ack.ok && i < 100; i++) {
      assert.equal(ack.code, 'CP_ERR_INTENT_NO_GAME', 'only refused until the declaration lands');
      await new Promise((r) => setTimeout(r, 20));
      ack = await viewer.act('cheer');
    }
    assert.equal(ack.ok, true);
    const deadline = Date.now() + 5_000;
    while (batches.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(batches[0]?.actions.cheer?.intents[0]?.viewer, 'zoe');
    await viewer.close();
    await game.close();

    const list = spawnSync(process.execPath, ['--import', 'tsx', CLI, 'tenant', 'list'], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      encoding: 'utf8',
    });
    assert.match(list.stdout, /^acme\tAcme\t/m);
  });
});
