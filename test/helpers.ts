/** Helpers for end-to-end suites: a standalone crowdplay in this process or as a child process. */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultConfig, type Config } from '@crowdplay/config';
import { startServices, SERVICES, type Running } from '@crowdplay/cli';
import { testSchema, type TestSchema } from '@crowdplay/testing';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface InProcess {
  config: Config;
  running: Running;
  baseUrl: string;
  stop(): Promise<void>;
}

/**
 * Standalone in this process on a random port, on the machine's Postgres
 * (own schema: PGlite's 3 s start is paid once, in the process test) and the
 * in-process bus.
 */
export async function startStandalone(patch: Parameters<typeof defaultConfig>[0] = {}): Promise<InProcess> {
  const schema: TestSchema = await testSchema();
  const config = defaultConfig({
    ...patch,
    http: { host: '127.0.0.1', port: 0, ...patch.http },
    db: { url: schema.databaseUrl, schema: schema.schema, poolMax: 4, pgliteDir: 'memory', ...patch.db },
    log: { level: 'silent', refusalLogIntervalMs: 10_000, ...patch.log },
    standalone: { ...defaultConfig().standalone, demoMotion: false, ...patch.standalone },
  });
  const running = await startServices(config, SERVICES, { standalone: true });
  return {
    config,
    running,
    baseUrl: `http://127.0.0.1:${running.port}`,
    async stop() {
      await running.stop();
      await schema.drop();
    },
  };
}

export interface ChildServer {
  child: ChildProcess;
  baseUrl: string;
  output: () => string;
  /** SIGTERM, then the exit code. */
  stop(): Promise<number | null>;
}

/**
 * `crowdplay start` as a child process exactly as `npm start` runs it
 * (tsx services/cli/src/main.ts start), on a free port, with `env` added.
 * Resolves once it logs its URL.
 */
export async function spawnCrowdplay(env: Record<string, string>, readyTimeoutMs = 60_000): Promise<ChildServer> {
  const dataDir = mkdtempSync(join(tmpdir(), 'crowdplay-e2e-'));
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'services/cli/src/main.ts'), 'start'], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', PGLITE_DIR: join(dataDir, 'pglite'), LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const baseUrl = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`crowdplay did not start in ${readyTimeoutMs} ms:\n${out}`)), readyTimeoutMs);
    const onData = (): void => {
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) {
        clearTimeout(t);
        resolve(m[1]!);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then((code) => {
      clearTimeout(t);
      reject(new Error(`crowdplay exited with ${code} before listening:\n${out}`));
    });
  });
  return {
    child,
    baseUrl,
    output: () => out,
    async stop() {
      child.kill('SIGTERM');
      const code = await exited;
      rmSync(dataDir, { recursive: true, force: true });
      return code;
    },
  };
}
