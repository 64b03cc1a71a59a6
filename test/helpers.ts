/** Helpers for end-to-end suites: a standalone crowdplay in this process or as a child process. */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultConfig, type Config } from '@crowdplay/config';
import { startServices, SERVICES, type Running } from '@crowdplay/cli';
import { isRetryable } from '@crowdplay/protocol';
import { testSchema, uniqueName, type ServiceUrls, type TestSchema } from '@crowdplay/testing';
import WebSocket from 'ws';

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

/**
 * A dev viewer token from a standalone product (`POST /v1/tokens/dev`) for `channel`, as `viewer` when given.
 * @throws Error when the product answers other than 200
 */
export async function devToken(baseUrl: string, channel: string, viewer?: string): Promise<string> {
  const r = await fetch(`${baseUrl}/v1/tokens/dev`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(viewer === undefined ? { channel } : { channel, viewer }),
  });
  if (r.status !== 200) throw new Error(`POST /v1/tokens/dev answered ${r.status}: ${await r.text()}`);
  return ((await r.json()) as { token: string }).token;
}

export interface ChildServer {
  child: ChildProcess;
  baseUrl: string;
  output: () => string;
  /** SIGTERM, then the exit code. */
  stop(): Promise<number | null>;
}

let bundle: Promise<string> | null = null;

/**
 * The product bundle `npm start` runs (scripts/build.mjs), built once per
 * test process into `.crowdplay/test-build-<pid>/` (inside the repository, so
 * its npm imports resolve) and removed when the process exits.
 * @returns the path of its crowdplay.js
 */
export function builtProduct(): Promise<string> {
  bundle ??= (async () => {
    const { buildProduct } = await import('../scripts/build.mjs');
    const outdir = join(ROOT, '.crowdplay', `test-build-${process.pid}`);
    mkdirSync(outdir, { recursive: true });
    process.once('exit', () => rmSync(outdir, { recursive: true, force: true }));
    return (await buildProduct({ outdir, quiet: true })).main;
  })();
  return bundle;
}

/**
 * `crowdplay start` as a child process exactly as `npm start` runs it (the
 * bundle, `node dist/crowdplay.js start`: see builtProduct), on a free port,
 * with `env` added. Resolves once it logs its URL.
 */
export async function spawnCrowdplay(env: Record<string, string>, readyTimeoutMs = 60_000): Promise<ChildServer> {
  const main = await builtProduct();
  const dataDir = mkdtempSync(join(tmpdir(), 'crowdplay-e2e-'));
  const child = spawn(process.execPath, [main, 'start'], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', PGLITE_DIR: join(dataDir, 'pglite'), LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const baseUrl = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => {
      child.kill('SIGKILL'); // not left running behind the failed suite
      reject(new Error(`crowdplay did not start in ${readyTimeoutMs} ms:\n${out}`));
    }, readyTimeoutMs);
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

/** A JSON frame as a test reads it. */
export type Frame = Record<string, unknown> & { t: string };

/** A raw WebSocket for end-to-end suites: every frame kept in order, waited on by predicate. */
export interface TestSocket {
  ws: WebSocket;
  frames: Frame[];
  /** Resolves with the close code. */
  closed: Promise<number>;
  /** The first frame (from the start) matching `pred`; rejects after `ms`, or at once when the socket closed without one. */
  next(pred: (f: Frame) => boolean, ms?: number): Promise<Frame>;
  send(frame: Record<string, unknown>): void;
  close(): void;
}

export function openSocket(url: string): TestSocket {
  const ws = new WebSocket(url);
  const frames: Frame[] = [];
  let isClosed = false;
  let wake: Array<() => void> = [];
  const notify = (): void => {
    const w = wake;
    wake = [];
    for (const f of w) f();
  };
  ws.on('message', (d: Buffer) => {
    frames.push(JSON.parse(d.toString()) as Frame);
    notify();
  });
  ws.on('error', () => undefined); // the close follows; tests look at frames and the close code
  const closed = new Promise<number>((resolve) =>
    ws.on('close', (code) => {
      isClosed = true;
      notify();
      resolve(code);
    }),
  );
  return {
    ws,
    frames,
    closed,
    async next(pred, ms = 10_000) {
      const deadline = Date.now() + ms;
      for (;;) {
        const f = frames.find(pred);
        if (f) return f;
        if (isClosed) throw new Error(`socket closed without such a frame; got ${JSON.stringify(frames).slice(0, 500)}`);
        if (Date.now() > deadline) throw new Error(`no such frame within ${ms} ms; got ${JSON.stringify(frames).slice(0, 500)}`);
        await new Promise<void>((r) => {
          wake.push(r);
          setTimeout(r, 50);
        });
      }
    },
    send: (frame) => ws.send(JSON.stringify(frame)),
    close: () => ws.terminate(),
  };
}

/**
 * Opens a socket and waits for its welcome. A join the gateway refuses with a retryable code before the welcome
 * (an `error` frame, e.g. CP_ERR_CHANNEL_UNAVAILABLE while the channel's first placement outlasts its deadline on
 * a loaded machine) is asked again on a new socket, 200 ms apart, as the SDKs do; any other refusal is not.
 * @param attempts sockets opened at most
 * @returns the welcomed socket and its welcome frame
 * @throws the last socket's error (no welcome, or a refusal that is not retryable)
 */
export async function openWelcomed(url: string, attempts = 5): Promise<{ socket: TestSocket; welcome: Frame }> {
  for (let i = 1; ; i++) {
    const socket = openSocket(url);
    try {
      return { socket, welcome: await socket.next((f) => f.t === 'welcome') };
    } catch (err) {
      const refusal = socket.frames.find((f) => f.t === 'error');
      socket.close();
      if (i >= attempts || !isRetryable(typeof refusal?.code === 'string' ? refusal.code : undefined)) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/** Polls `what` every 25 ms until it yields a value (not undefined or false); fails after `ms`. */
export async function until<T>(what: () => T | undefined | false, label: string, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = what();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${label}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A `crowdplay service <name>` child process started by {@link spawnService}. */
export interface ServiceProcess {
  name: string;
  child: ChildProcess;
  out: () => string;
}

/**
 * Starts `crowdplay service <name>` (the sources under tsx) with `env`
 * added to this process's environment, appends it to `procs` (so the suite
 * can stop every process it started, also on failure), and resolves when it
 * is ready: a gateway when it logs its URL (the value resolved), any other
 * service when its bus is connected ('').
 * @throws Error (rejects) when it exits first or is not ready in 30 s
 */
export function spawnService(procs: ServiceProcess[], name: string, env: Record<string, string>, label = name): Promise<string> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'services/cli/src/main.ts'), 'service', name], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  procs.push({ name: label, child, out: () => out });
  const ready = name === 'gateway' ? /listening on (http:\/\/[\d.]+:\d+)/ : /"msg":"bus: nats"/;
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${label} not ready:\n${out}`)), 30_000);
    const check = (): void => {
      const m = ready.exec(out);
      if (m) {
        clearTimeout(t);
        resolve(m[1] ?? '');
      }
    };
    child.stdout!.on('data', check);
    child.stderr!.on('data', check);
    child.on('exit', (code) => reject(new Error(`${label} exited ${code}:\n${out}`)));
  });
}

/**
 * The environment of a test cluster (startCluster / spawned services): this process's environment, the suite's
 * services and schema, its own bus subject prefix (`<tag>_…`), send-queue and render-queue prefixes, free ports,
 * info logs; `extra` on top (a suite's timings).
 */
export function clusterTestEnv(
  urls: ServiceUrls,
  schema: TestSchema,
  tag: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    ...(process.env as Record<string, string>),
    DATABASE_URL: urls.databaseUrl,
    DATABASE_SCHEMA: schema.schema,
    NATS_URL: urls.natsUrl,
    REDIS_URL: urls.redisUrl,
    BUS_SUBJECT_PREFIX: uniqueName(tag),
    TELEGRAM_SENDQ_PREFIX: uniqueName('sq'),
    BOARD_RENDER_PREFIX: uniqueName('br'),
    PORT: '0',
    LOG_LEVEL: 'info',
    ...extra,
  };
}
