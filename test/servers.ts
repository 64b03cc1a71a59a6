/**
 * Private `nats-server` / `redis-server` processes for suites that restart
 * them (the machine's shared ones are never stopped): a free port, a temp
 * data directory, `restart()` on the same port and directory, `stop()`
 * removes the directory. The private PostgreSQL (`ownPostgres`) lives in
 * libs/testing, where the load scenarios use it too; it is re-exported here.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '@crowdplay/testing';

export { freePort, ownPostgres, type OwnPostgres } from '@crowdplay/testing';

async function accepting(port: number, ms: number, label: string): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const c = connect(port, '127.0.0.1');
      c.once('connect', () => {
        c.destroy();
        resolve(true);
      });
      c.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`${label} not accepting on ${port} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface OwnServer {
  url: string;
  port: number;
  /** SIGTERM, waits for the exit, starts it again on the same port and data directory, waits until it accepts. */
  restart(downMs?: number): Promise<void>;
  /** SIGTERM (SIGKILL after 5 s) and removes the data directory. Safe to call twice. */
  stop(): Promise<void>;
  output(): string;
}

async function ownServer(label: string, scheme: string, args: (port: number, dir: string) => string[], cmd: string): Promise<OwnServer> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), `cp-${label}-`));
  let proc: ChildProcess | null = null;
  let out = '';
  const start = async (): Promise<void> => {
    const p = spawn(cmd, args(port, dir), { stdio: ['ignore', 'pipe', 'pipe'] });
    p.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    proc = p;
    await accepting(port, 10_000, label);
  };
  const halt = async (): Promise<void> => {
    const p = proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const gone = new Promise((r) => p.once('exit', r));
    p.kill('SIGTERM');
    const t = setTimeout(() => p.kill('SIGKILL'), 5_000);
    await gone;
    clearTimeout(t);
  };
  process.once('exit', () => proc?.kill('SIGKILL'));
  await start();
  let stopped = false;
  return {
    url: `${scheme}://127.0.0.1:${port}`,
    port,
    async restart(downMs = 500) {
      await halt();
      await new Promise((r) => setTimeout(r, downMs));
      await start();
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await halt();
      rmSync(dir, { recursive: true, force: true });
    },
    output: () => out,
  };
}

/** `nats-server -js` on a free port with a temp store directory. */
export function ownNats(): Promise<OwnServer> {
  return ownServer('nats', 'nats', (port, dir) => ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dir], 'nats-server');
}

/** `redis-server` on a free port, no persistence (`--save ""`, `--appendonly no`), in a temp directory. */
export function ownRedis(): Promise<OwnServer> {
  return ownServer(
    'redis',
    'redis',
    (port, dir) => ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
    'redis-server',
  );
}
