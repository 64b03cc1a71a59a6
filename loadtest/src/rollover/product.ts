/**
 * The product as its own child process for the rollover scenario, as
 * `npm start` runs it (the bundle scripts/build.mjs writes, built for the
 * run into `.crowdplay/loadtest-build-<pid>/`; `node crowdplay.js start`, pinned with
 * `taskset -c` when available), its samplers (RSS from /proc, event-loop lag
 * and board interval from /metrics), its error-log count, and the run's
 * isolation (a fresh PostgreSQL schema, dropped after; the send queue's Redis
 * keys removed after).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));

/**
 * Builds the product bundle (scripts/build.mjs) into
 * `.crowdplay/loadtest-build-<pid>/` (inside the repository, so its npm
 * imports resolve; removed when this process exits).
 * @returns the path of its crowdplay.js
 * @throws Error when the build fails
 */
export async function buildProductBundle(): Promise<string> {
  const { buildProduct } = await import('../../../scripts/build.mjs');
  const outdir = join(ROOT, '.crowdplay', `loadtest-build-${process.pid}`);
  mkdirSync(outdir, { recursive: true });
  process.once('exit', () => rmSync(outdir, { recursive: true, force: true }));
  return (await buildProduct({ outdir, quiet: true })).main;
}
/** The Redis keys of the send queue under TELEGRAM_SENDQ_PREFIX `prefix` (libs/sendq keys.ts: `{<prefix>}…`). */
export const sendqKeyPattern = (prefix: string): string => `{${prefix}}*`;

/** `taskset` on PATH (util-linux), or null. */
export function tasksetPath(): string | null {
  for (const p of ['/usr/bin/taskset', '/bin/taskset', '/usr/local/bin/taskset']) if (existsSync(p)) return p;
  return null;
}

/** Pins process `pid` to `cpus` (taskset list syntax, e.g. "1"). @returns false when taskset is missing or failed */
export function pinProcess(pid: number, cpus: string): boolean {
  const ts = tasksetPath();
  if (!ts) return false;
  return spawnSync(ts, ['-pc', cpus, String(pid)], { stdio: 'ignore' }).status === 0;
}

/** A running product process. */
export interface Product {
  child: ChildProcess;
  pid: number;
  url: string;
  /** Lines of stdout+stderr with a pino level ≥ 50 (error, fatal) so far. */
  errorLines: () => string[];
  output: () => string;
  /** Set once the process exited. */
  exited: () => { code: number | null; signal: string | null } | null;
}

/**
 * Starts `crowdplay start` with `env` added to this process's environment,
 * on 127.0.0.1 and a free port; resolves once it logs `listening on`.
 * @param cpus taskset CPU list, or null to run unpinned
 * @throws Error when it exits or does not listen within 90 s
 */
export async function startProduct(env: Record<string, string>, cpus: string | null): Promise<Product> {
  const ts = cpus === null ? null : tasksetPath();
  const node = [process.execPath, await buildProductBundle(), 'start'];
  const [cmd, ...args] = ts ? [ts, '-c', cpus!, ...node] : node;
  const child = spawn(cmd!, args, {
    cwd: ROOT,
    env: { ...process.env, HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let partial = '';
  const errors: string[] = [];
  let exit: { code: number | null; signal: string | null } | null = null;
  const onData = (d: Buffer): void => {
    const s = d.toString();
    if (out.length < 4_000_000) out += s;
    const lines = (partial + s).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      const m = /"level":(\d+)/.exec(line);
      if (m && Number(m[1]) >= 50) errors.push(line);
    }
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  child.once('exit', (code, signal) => (exit = { code, signal }));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`crowdplay did not start in 90 s:\n${out.slice(-2000)}`)), 90_000);
    const look = (): void => {
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        child.stdout!.off('data', look);
        resolve(m[1]!);
      }
    };
    child.stdout!.on('data', look);
    child.stderr!.on('data', look);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`crowdplay exited with ${code} before listening:\n${out.slice(-2000)}`));
    });
  });
  return { child, pid: child.pid!, url, errorLines: () => errors, output: () => out, exited: () => exit };
}

/** SIGTERM, then SIGKILL after 15 s; resolves when the process is gone. */
export async function stopProduct(p: Product): Promise<void> {
  if (p.exited()) return;
  const gone = new Promise<void>((resolve) => p.child.once('exit', () => resolve()));
  p.child.kill('SIGTERM');
  const hard = setTimeout(() => p.child.kill('SIGKILL'), 15_000);
  await gone;
  clearTimeout(hard);
}

/** Resident set of `pid` from /proc/<pid>/status: current (VmRSS) and peak (VmHWM), MB (2^20 bytes); null when unreadable. */
export function readRss(pid: number): { rssMb: number; hwmMb: number } | null {
  try {
    const s = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? NaN);
    const rss = kb('VmRSS');
    const hwm = kb('VmHWM');
    if (!Number.isFinite(rss)) return null;
    return { rssMb: rss / 1024, hwmMb: Number.isFinite(hwm) ? hwm / 1024 : rss / 1024 };
  } catch {
    return null;
  }
}

/** A gauge's value in a Prometheus text exposition (name, optionally with a unit suffix, and a label filter); null when absent. */
export function metricValue(text: string, name: string, label?: string): number | null {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || !(m[1] === name || m[1] === `${name}_ms`)) continue;
    if (label && !(m[2] ?? '').includes(label)) continue;
    const v = Number(m[3]);
    if (Number.isFinite(v)) return v;
  }
  return null;
}

/**
 * Samples the product every `rssEveryMs` (RSS) and `metricsEveryMs` (/metrics:
 * `crowdplay_event_loop_lag_ms{quantile="max"}`, which is the max since the
 * previous scrape, and `crowdplay_board_interval_ms`).
 */
export class ProductSampler {
  peakRssMb: number | null = null;
  /** Largest event-loop stall since {@link openWindow} (before it: since start), ms. */
  maxLoopStallMs: number | null = null;
  /** Largest stall before {@link openWindow} (start-up and setup), ms. */
  setupLoopStallMs: number | null = null;
  /** RSS when the window opened, MB. */
  rssAtWindowMb: number | null = null;
  intervalLast: number | null = null;
  intervalMax: number | null = null;
  scrapeErrors = 0;
  private timers: NodeJS.Timeout[] = [];
  private scraping = false;

  constructor(
    private readonly p: Product,
    private readonly rssEveryMs = 250,
    private readonly metricsEveryMs = 1_000,
  ) {}

  start(): void {
    this.sampleRss();
    this.timers.push(setInterval(() => this.sampleRss(), this.rssEveryMs));
    this.timers.push(setInterval(() => void this.scrape(), this.metricsEveryMs));
  }

  private sampleRss(): void {
    const r = readRss(this.p.pid);
    if (!r) return;
    this.peakRssMb = Math.max(this.peakRssMb ?? 0, r.rssMb, r.hwmMb);
  }

  /** One /metrics scrape (skipped while one is in flight). */
  async scrape(): Promise<void> {
    if (this.scraping) return;
    this.scraping = true;
    try {
      const res = await fetch(`${this.p.url}/metrics`, { signal: AbortSignal.timeout(5_000) });
      const text = await res.text();
      const lag = metricValue(text, 'crowdplay_event_loop_lag_ms', 'quantile="max"');
      if (lag !== null) this.maxLoopStallMs = Math.max(this.maxLoopStallMs ?? 0, lag);
      const iv = metricValue(text, 'crowdplay_board_interval_ms');
      if (iv !== null) {
        this.intervalLast = iv;
        this.intervalMax = Math.max(this.intervalMax ?? 0, iv);
      }
    } catch {
      this.scrapeErrors++;
    } finally {
      this.scraping = false;
    }
  }

  /** Ends the setup phase: a scrape closes it (its stalls go to setupLoopStallMs); later stalls go to maxLoopStallMs. */
  async openWindow(): Promise<void> {
    while (this.scraping) await new Promise((r) => setTimeout(r, 10));
    await this.scrape();
    this.setupLoopStallMs = this.maxLoopStallMs;
    this.maxLoopStallMs = null;
    this.rssAtWindowMb = readRss(this.p.pid)?.rssMb ?? null;
  }

  /** Stops sampling after a last scrape and RSS read. */
  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    this.sampleRss();
    await this.scrape();
  }
}

/** Drops `schema` (CASCADE) on `databaseUrl`. */
export async function dropSchema(databaseUrl: string, schema: string): Promise<void> {
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    await c.query(`DROP SCHEMA IF EXISTS "${schema.replace(/"/g, '')}" CASCADE`);
  } finally {
    await c.end();
  }
}

/**
 * Deletes the send queue's Redis keys under TELEGRAM_SENDQ_PREFIX `prefix`
 * ({@link sendqKeyPattern}) with redis-cli (SCAN + DEL).
 * @returns keys deleted, or null when redis-cli is missing or failed
 */
export function purgeSendqKeys(redisUrl: string, prefix: string): number | null {
  const u = new URL(redisUrl);
  const base = ['-h', u.hostname || '127.0.0.1', '-p', u.port || '6379', ...(u.pathname.length > 1 ? ['-n', u.pathname.slice(1)] : [])];
  const scan = spawnSync('redis-cli', [...base, '--scan', '--pattern', sendqKeyPattern(prefix)], { encoding: 'utf8' });
  if (scan.status !== 0) return null;
  const keys = scan.stdout.split('\n').filter((k) => k !== '');
  for (let i = 0; i < keys.length; i += 500) {
    const r = spawnSync('redis-cli', [...base, 'DEL', ...keys.slice(i, i + 500)], { encoding: 'utf8' });
    if (r.status !== 0) return null;
  }
  return keys.length;
}
