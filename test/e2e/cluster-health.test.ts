/**
 * `crowdplay cluster` with HEALTH_PORT set: every child serves /healthz,
 * /readyz and /metrics on a port of its own (HEALTH_PORT + its index in start
 * order), so all of them start instead of colliding on one port. Every
 * process started here is stopped in `after`, also on failure.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { startCluster, type Cluster } from '@crowdplay/cli';
import { serviceUrls, testSchema, type TestSchema } from '@crowdplay/testing';
import { builtProduct, clusterTestEnv } from '../helpers.ts';

/** Whether 127.0.0.1:`port` can be bound now (bound, then released). */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** The first of `n` consecutive ports that can be bound now, from a free port the system picked. */
async function freePortRange(n: number): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const first = await new Promise<number>((resolve, reject) => {
      const s = createServer();
      s.once('error', reject);
      s.listen(0, '127.0.0.1', () => {
        const port = (s.address() as { port: number }).port;
        s.close(() => resolve(port));
      });
    });
    if (first + n - 1 > 65_535) continue;
    let all = true;
    for (let p = first; p < first + n && all; p++) all = await bindable(p);
    if (all) return first;
  }
  throw new Error(`no ${n} consecutive free ports`);
}

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
    healthPort = await freePortRange(4);
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
