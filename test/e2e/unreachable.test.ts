/**
 * A service whose DATABASE_URL or NATS_URL names a server that cannot be
 * reached: the process (the bundle `npm start` runs) ends on its own with
 * exit code 1 and one line on stderr naming the code and the setting, the
 * URL's password hidden; within the connect timeout when the server accepts
 * and never answers. Nothing is left running: the process is gone and its
 * health port is free again.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, type Server, type Socket } from 'node:net';
import { serviceUrls, testSchema, type ServiceUrls, type TestSchema } from '@crowdplay/testing';
import { builtProduct, ROOT, until } from '../helpers.ts';
import { freePort } from '../servers.ts';

const PASSWORD = 's3cret-do-not-show';

/** Whether 127.0.0.1:`port` can be bound now (nothing listens there). */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** A server that accepts connections and never says a word (a database or NATS that hangs). */
async function silentServer(): Promise<{ port: number; open: () => number; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.resume(); // reads (and drops) what the client sends: a paused socket never sees the client's FIN
    s.on('close', () => sockets.delete(s));
    s.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    open: () => sockets.size,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** `crowdplay service router` in cluster mode with `env`, until it exits (killed after `limitMs`: the test fails). */
async function runService(main: string, env: Record<string, string>, limitMs = 30_000): Promise<Ended> {
  const t0 = Date.now();
  const child = spawn(process.execPath, [main, 'service', 'router'], {
    cwd: ROOT,
    env: { ...process.env, CROWDPLAY_MODE: 'cluster', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const kill = setTimeout(() => child.kill('SIGKILL'), limitMs);
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    child.once('close', (c, s) => resolve([c, s])),
  );
  clearTimeout(kill);
  return { code, signal, stdout, stderr, ms: Date.now() - t0 };
}

/** A port nothing listens on: bound, then closed. */
const closedPort = freePort;

describe('start-up with an unreachable DATABASE_URL or NATS_URL', () => {
  let urls: ServiceUrls;
  let schema: TestSchema;
  let main = '';

  before(async () => {
    urls = await serviceUrls();
    schema = await testSchema();
    main = await builtProduct();
  });

  after(async () => {
    await schema?.drop();
  });

  /** The checks every case shares: exit 1 by itself, one stderr line, no password anywhere, the health port free. */
  async function assertOneLine(r: Ended, healthPort: number, line: RegExp): Promise<void> {
    assert.equal(r.signal, null, `exited by itself, not killed after the limit:\n${r.stderr}`);
    assert.equal(r.code, 1, r.stderr);
    const lines = r.stderr.split('\n').filter((l) => l.length > 0);
    assert.equal(lines.length, 1, `one line on stderr:\n${r.stderr}`);
    assert.match(lines[0]!, line);
    assert.ok(!`${r.stdout}${r.stderr}`.includes(PASSWORD), `the password is not shown:\n${r.stdout}${r.stderr}`);
    assert.equal(await bindable(healthPort), true, 'the health port is free again');
  }

  it('DATABASE_URL on a closed port - CP_ERR_STORE_UNAVAILABLE naming DATABASE_URL, password hidden, exit 1', async () => {
    const [dbPort, healthPort] = [await closedPort(), await freePort()];
    const r = await runService(main, {
      DATABASE_URL: `postgresql://postgres:${PASSWORD}@127.0.0.1:${dbPort}/test`,
      NATS_URL: urls.natsUrl,
      REDIS_URL: urls.redisUrl,
      HEALTH_PORT: String(healthPort),
    });
    await assertOneLine(
      r,
      healthPort,
      new RegExp(
        `^crowdplay: CP_ERR_STORE_UNAVAILABLE: .*DATABASE_URL=postgresql://postgres:\\*\\*\\*@127\\.0\\.0\\.1:${dbPort}/test: .*ECONNREFUSED`,
      ),
    );
  });

  it('NATS_URL on a closed port - CP_ERR_BUS_UNAVAILABLE naming NATS_URL, password hidden, exit 1', async () => {
    const [natsPort, healthPort] = [await closedPort(), await freePort()];
    const r = await runService(main, {
      DATABASE_URL: urls.databaseUrl,
      DATABASE_SCHEMA: schema.schema,
      NATS_URL: `nats://crowdplay:${PASSWORD}@127.0.0.1:${natsPort}`,
      REDIS_URL: urls.redisUrl,
      HEALTH_PORT: String(healthPort),
    });
    await assertOneLine(
      r,
      healthPort,
      new RegExp(`^crowdplay: CP_ERR_BUS_UNAVAILABLE: .*NATS_URL=nats://crowdplay:\\*\\*\\*@127\\.0\\.0\\.1:${natsPort}: `),
    );
  });

  it('servers that accept and never answer - the start ends within the connect timeouts, naming them', async () => {
    const silent = await silentServer();
    try {
      const healthPort = await freePort();
      const db = await runService(
        main,
        {
          DATABASE_URL: `postgresql://postgres:${PASSWORD}@127.0.0.1:${silent.port}/test`,
          DATABASE_CONNECT_TIMEOUT_MS: '300',
          NATS_URL: urls.natsUrl,
          REDIS_URL: urls.redisUrl,
          HEALTH_PORT: String(healthPort),
        },
        20_000,
      );
      await assertOneLine(
        db,
        healthPort,
        /^crowdplay: CP_ERR_STORE_UNAVAILABLE: .*DATABASE_URL=.*timeout.*\(DATABASE_CONNECT_TIMEOUT_MS=300\)$/,
      );
      const nats = await runService(
        main,
        {
          DATABASE_URL: urls.databaseUrl,
          DATABASE_SCHEMA: schema.schema,
          NATS_URL: `nats://crowdplay:${PASSWORD}@127.0.0.1:${silent.port}`,
          NATS_CONNECT_TIMEOUT_MS: '300',
          REDIS_URL: urls.redisUrl,
          HEALTH_PORT: String(healthPort),
        },
        20_000,
      );
      await assertOneLine(nats, healthPort, /^crowdplay: CP_ERR_BUS_UNAVAILABLE: .*NATS_URL=.*\(NATS_CONNECT_TIMEOUT_MS=300\)$/);
      // Both processes are gone, and so are their connections to the silent server (its close events may trail the exit).
      await until(() => silent.open() === 0, `no connection left open (${silent.open()} open)`, 5_000);
    } finally {
      await silent.close();
    }
  });
});
