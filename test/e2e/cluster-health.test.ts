/**
 * `crowdplay cluster` with HEALTH_PORT set: every child serves /healthz,
 * /readyz and /metrics on a port of its own (HEALTH_PORT + its index in start
 * order), so all of them start instead of colliding on one port. Every
 * process started here is stopped in `after`, also on failure.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, type Cluster } from '@crowdplay/cli';
import { freePorts, serviceUrls, testSchema, type TestSchema } from '@crowdplay/testing';
import { builtProduct, clusterTestEnv } from '../helpers.ts';

describe('crowdplay cluster: one HEALTH_PORT per child (PostgreSQL + NATS)', () => {
  let schema: TestSchema;
  let cluster: Cluster | undefined;
  let healthPort = 0;
  const lines: string[] = [];

  before(async () => {
    const urls = await serviceUrls();
    schema = await testSchema();
    const main = await builtProduct();
    // sequencer, router, shard-1, gw-1
    healthPort = await freePorts(4);
    cluster = await startCluster({
      gateways: 1,
      shards: 1,
      routers: 1,
      env: clusterTestEnv(urls, schema, 'clh', { HEALTH_PORT: String(healthPort), HEALTH_HOST: '127.0.0.1' }),
      entry: { execArgv: [], script: main },
      out: (l) => void lines.push(l),
    });
  });

  after(async () => {
    await cluster?.stop();
    await schema?.drop();
  });

  it('every child starts, each on HEALTH_PORT + its index: /healthz and /readyz 200 there, /metrics its own', async () => {
    const c = cluster!;
    assert.deepEqual(
      c.processes.map((p) => [p.name, p.healthPort]),
      [
        ['sequencer', healthPort],
        ['router', healthPort + 1],
        ['shard-1', healthPort + 2],
        ['gw-1', healthPort + 3],
      ],
    );
    for (const p of c.processes) {
      assert.ok(p.running, `${p.name} runs:\n${p.output}`);
      assert.equal((await fetch(`http://127.0.0.1:${p.healthPort}/healthz`)).status, 200, p.name);
      assert.equal((await fetch(`http://127.0.0.1:${p.healthPort}/readyz`)).status, 200, p.name);
      assert.match(p.output, new RegExp(`"healthPort":${p.healthPort}\\b`), `${p.name} logged its health port`);
    }
    // Each port is its own child's: the shard's metrics carry the shard's gauge, the sequencer's do not.
    const metrics = async (name: string): Promise<string> => (await fetch(`http://127.0.0.1:${c.get(name).healthPort}/metrics`)).text();
    assert.match(await metrics('shard-1'), /crowdplay_shard_channels/);
    assert.doesNotMatch(await metrics('sequencer'), /crowdplay_shard_channels/);
  });
});
