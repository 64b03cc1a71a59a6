/**
 * The health server of processes without a gateway, and the lifecycle that
 * drives it: readiness false from the first moment of a drain while liveness
 * stays true (the k8s probes in k8s/ rely on both).
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { connect as netConnect } from 'node:net';
import { defaultConfig } from '@crowdplay/config';
import { isCrowdplayError } from '@crowdplay/protocol';
import { createTelemetry } from '@crowdplay/telemetry';
import { freePort, serviceUrls, testSchema, uniqueName, until as waitUntil } from '@crowdplay/testing';
import { runUntilSignal, startHealthServer, type ProcessLike, type Running } from '@crowdplay/cli';
import { spawnService, until, type ServiceProcess } from '../../../test/helpers.ts';

/** Loopback, any free port, the default request deadline. */
const ANY_PORT = { host: '127.0.0.1', port: 0, requestTimeoutMs: defaultConfig().http.requestTimeoutMs };

const get = async (port: number, path: string): Promise<{ status: number; body: string }> => {
  const r = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: r.status, body: await r.text() };
};

/** A process stand-in: records exit codes, emits signals on demand. */
class FakeProcess extends EventEmitter implements ProcessLike {
  readonly exits: number[] = [];
  exit(code: number): void {
    this.exits.push(code);
  }
}

function fakeRunning(stop: () => Promise<void>): Running {
  const telemetry = createTelemetry({ service: 'health-test', level: 'silent', refusalLogIntervalMs: 10_000 });
  telemetry.metrics.counter('crowdplay_granted_points_total').add(3);
  return { port: undefined, telemetry, store: {} as Running['store'], bus: {} as Running['bus'], stop };
}

describe('health server', () => {
  it('HEALTH_PORT taken is CP_ERR_CONFIG_INVALID naming HEALTH_PORT and the address; a host not of this machine names HEALTH_HOST', async () => {
    const first = await startHealthServer(ANY_PORT);
    try {
      await assert.rejects(
        startHealthServer({ ...ANY_PORT, port: first.port }),
        (err: unknown) =>
          isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID') &&
          err.message.includes(`HEALTH_PORT: 127.0.0.1:${first.port} is in use by another process (EADDRINUSE)`),
      );
      assert.equal((await get(first.port, '/healthz')).status, 200, 'the first listener still serves');
    } finally {
      await first.close();
    }
    await assert.rejects(
      startHealthServer({ ...ANY_PORT, host: '192.0.2.1' }),
      (err: unknown) =>
        isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID') && err.message.includes('HEALTH_HOST: 192.0.2.1 is not an address of this machine'),
    );
  });

  it('starting: /healthz 200, /readyz 503, /metrics 503; ready: 200 and the metrics text; draining: /readyz 503, /healthz 200', async () => {
    const h = await startHealthServer(ANY_PORT);
    try {
      assert.equal(h.state, 'starting');
      assert.equal((await get(h.port, '/healthz')).status, 200);
      assert.deepEqual(await get(h.port, '/readyz'), { status: 503, body: JSON.stringify({ ready: false, state: 'starting' }) });
      assert.equal((await get(h.port, '/metrics')).status, 503);
      h.setReady(async () => '# TYPE x counter\nx 1\n');
      assert.deepEqual(await get(h.port, '/readyz'), { status: 200, body: JSON.stringify({ ready: true }) });
      assert.equal((await get(h.port, '/metrics')).body, '# TYPE x counter\nx 1\n');
      h.setDraining();
      assert.deepEqual(await get(h.port, '/readyz'), { status: 503, body: JSON.stringify({ ready: false, state: 'draining' }) });
      assert.equal((await get(h.port, '/healthz')).status, 200);
      // Once draining, a late setReady does not turn readiness back on.
      h.setReady(async () => '');
      assert.equal((await get(h.port, '/readyz')).status, 503);
      assert.deepEqual(await get(h.port, '/nope'), {
        status: 404,
        body: JSON.stringify({ code: 'CP_ERR_HTTP_NOT_FOUND', message: 'no route GET /nope' }),
      });
      const post = await fetch(`http://127.0.0.1:${h.port}/readyz`, { method: 'POST' });
      assert.deepEqual(
        [post.status, post.headers.get('allow'), await post.json()],
        [
          405,
          'GET, HEAD',
          { code: 'CP_ERR_HTTP_METHOD_NOT_ALLOWED', message: 'method POST is not allowed on this path; it takes GET, HEAD' },
        ],
      );
      const postElsewhere = await fetch(`http://127.0.0.1:${h.port}/nope`, { method: 'POST' });
      assert.deepEqual(
        [postElsewhere.status, await postElsewhere.json()],
        [404, { code: 'CP_ERR_HTTP_NOT_FOUND', message: 'no route POST /nope' }],
      );
    } finally {
      await h.close();
    }
  });

  it('a request not received whole within HTTP_REQUEST_TIMEOUT_MS gets 408, is counted and its connection closed; others are served', async () => {
    const h = await startHealthServer({ ...ANY_PORT, requestTimeoutMs: 100 });
    const refused: string[] = [];
    h.setReady(async () => '', { refuse: (area, code) => void refused.push(`${area} ${code}`) });
    try {
      // Node's own defaults would hold it 60 s (headersTimeout): 5 s is far past the 100 ms deadline and far below that.
      const stalled = await new Promise<string>((resolve, reject) => {
        let text = '';
        const s = netConnect(h.port, '127.0.0.1', () => s.write('GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: '));
        const held = setTimeout(() => {
          s.destroy();
          reject(new Error('the stalled request was held past 5 s (deadline 100 ms)'));
        }, 5_000);
        s.on('data', (d) => (text += String(d)));
        s.on('error', () => undefined);
        s.on('close', () => {
          clearTimeout(held);
          resolve(text);
        });
      });
      assert.match(stalled, /^HTTP\/1\.1 408 /);
      assert.equal(JSON.parse(stalled.slice(stalled.indexOf('\r\n\r\n') + 4)).code, 'CP_ERR_LIMIT_REQUEST_TIMEOUT');
      assert.deepEqual(refused, ['http CP_ERR_LIMIT_REQUEST_TIMEOUT']);
      assert.equal((await get(h.port, '/healthz')).status, 200);
    } finally {
      await h.close();
    }
  });
});

describe('runUntilSignal with a health server', () => {
  it('readiness turns false at the first SIGTERM, before the drain finishes; liveness stays true; exit 0 after the drain', async () => {
    const h = await startHealthServer(ANY_PORT);
    const proc = new FakeProcess();
    let finish!: () => void;
    let stopCalls = 0;
    const running = fakeRunning(() => {
      stopCalls++;
      return new Promise<void>((r) => (finish = r));
    });
    try {
      await runUntilSignal(defaultConfig(), async () => running, { health: h, proc });
      assert.equal((await get(h.port, '/readyz')).status, 200);
      assert.match((await get(h.port, '/metrics')).body, /crowdplay_granted_points_total(\{[^}]*\})? 3\n/);
      proc.emit('SIGTERM', 'SIGTERM');
      assert.equal(h.state, 'draining'); // synchronously, before any await of the drain
      assert.equal(stopCalls, 1);
      assert.equal((await get(h.port, '/readyz')).status, 503);
      assert.equal((await get(h.port, '/healthz')).status, 200);
      assert.deepEqual(proc.exits, []); // still draining
      finish();
      await until(() => proc.exits.length > 0, 'exit after drain');
      assert.deepEqual(proc.exits, [0]);
    } finally {
      await h.close();
      await running.telemetry.close();
    }
  });

  it('a second signal exits 130 at once; a failed drain exits 1', async () => {
    const proc = new FakeProcess();
    const running = fakeRunning(() => new Promise<void>(() => undefined));
    await runUntilSignal(defaultConfig(), async () => running, { proc });
    proc.emit('SIGINT', 'SIGINT');
    proc.emit('SIGTERM', 'SIGTERM');
    assert.deepEqual(proc.exits, [130]);
    await running.telemetry.close();

    const proc2 = new FakeProcess();
    const failing = fakeRunning(() => Promise.reject(new Error('drain failed')));
    await runUntilSignal(defaultConfig(), async () => failing, { proc: proc2 });
    proc2.emit('SIGTERM', 'SIGTERM');
    await until(() => proc2.exits.length > 0, 'exit after failed drain');
    assert.deepEqual(proc2.exits, [1]);
    await failing.telemetry.close();
  });

  it('a start that fails closes the health server and rethrows', async () => {
    const h = await startHealthServer(ANY_PORT);
    const proc = new FakeProcess();
    await assert.rejects(
      runUntilSignal(defaultConfig(), () => Promise.reject(new Error('no database')), { health: h, proc }),
      /no database/,
    );
    await assert.rejects(fetch(`http://127.0.0.1:${h.port}/healthz`));
    assert.equal(proc.listenerCount('SIGTERM'), 0);
  });
});

describe('crowdplay service <name> with HEALTH_PORT (PostgreSQL + NATS)', () => {
  const procs: ServiceProcess[] = [];
  let drop: (() => Promise<void>) | undefined;
  after(async () => {
    for (const p of procs) if (p.child.exitCode === null) p.child.kill('SIGKILL');
    await drop?.();
  });

  it('a shard and a sequencer serve /healthz, /readyz and /metrics, and exit 0 on SIGTERM', async () => {
    const urls = await serviceUrls();
    const schema = await testSchema();
    drop = () => schema.drop();
    const env = {
      DATABASE_URL: urls.databaseUrl,
      DATABASE_SCHEMA: schema.schema,
      NATS_URL: urls.natsUrl,
      BUS_SUBJECT_PREFIX: uniqueName('health'),
      CROWDPLAY_MODE: 'standalone',
    };
    const ports = { shard: await freePort(), sequencer: await freePort() };
    await spawnService(procs, 'sequencer', { ...env, HEALTH_PORT: String(ports.sequencer) });
    await spawnService(procs, 'crowd-engine', { ...env, SHARD_ID: 'health-a', HEALTH_PORT: String(ports.shard) });
    for (const port of [ports.sequencer, ports.shard]) {
      await waitUntil(`readyz 200 on ${port}`, async () => (await get(port, '/readyz').catch(() => ({ status: 0 }))).status === 200, {
        timeoutMs: 30_000,
        intervalMs: 50,
      });
      assert.equal((await get(port, '/healthz')).status, 200);
      assert.match((await get(port, '/metrics')).body, /^# (HELP|TYPE) /m);
    }
    for (const p of procs) {
      const exited = new Promise<number | null>((r) => p.child.once('exit', (code) => r(code)));
      p.child.kill('SIGTERM');
      assert.equal(await exited, 0, p.out());
    }
  });
});
