/**
 * The product as its own child process for the rollover scenario, as
 * `npm start` runs it (the bundle scripts/build.mjs writes, built for the
 * run into `.crowdplay/loadtest-build-<pid>/`, started by scripts/start.sh
 * with its process-start settings, SEMI_SPACE_MB and MALLOC_ARENA_MAX, as
 * `crowdplay start`, pinned with `taskset -c` when available), its samplers (RSS from /proc, event-loop lag
 * and board interval from /metrics), its error-log count, and the run's
 * isolation (a fresh PostgreSQL schema, dropped after; the send queue's Redis
 * keys removed after).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve as resolvePath } from 'node:path';
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

/** Pins process `pid` (with `allThreads`, every thread it has now) to `cpus` (taskset list syntax, e.g. "1"). @returns false when taskset is missing or failed */
export function pinProcess(pid: number, cpus: string, allThreads = false): boolean {
  const ts = tasksetPath();
  if (!ts) return false;
  return spawnSync(ts, [...(allThreads ? ['-a'] : []), '-pc', cpus, String(pid)], { stdio: 'ignore' }).status === 0;
}

/** A running product: one `crowdplay start` process, or a `crowdplay cluster`'s children. */
export interface Product {
  /** Standalone: `start`; cluster: `cluster` (its shape in {@link Product.shape}). */
  mode: 'standalone' | 'cluster';
  /** Cluster only: gateways and shards. */
  shape: { gateways: number; shards: number } | null;
  /** Every live process of the product (standalone: one; cluster: each child), for RSS. */
  pids: () => { name: string; pid: number }[];
  /** The first gateway's URL (http://host:port). */
  url: string;
  /** Every gateway's URL, in order (standalone: [url]). */
  urls: string[];
  /** Lines of stdout+stderr with a pino level ≥ 50 (error, fatal) so far. */
  errorLines: () => string[];
  output: () => string;
  /** Set once the process (cluster: any child, unasked) exited. */
  exited: () => { code: number | null; signal: string | null; name?: string } | null;
  /** SIGTERM (cluster: drains gateways, shards, then router and sequencer), SIGKILL after a deadline; resolves when all are gone. */
  stop: () => Promise<void>;
}

/** Collects a process's output: everything (first 4 MB), and the lines with a pino level ≥ 50. */
function outputCollector(): { onData: (d: Buffer | string) => void; out: () => string; errors: string[] } {
  let out = '';
  let partial = '';
  const errors: string[] = [];
  return {
    errors,
    out: () => out,
    onData: (d) => {
      const s = d.toString();
      if (out.length < 4_000_000) out += s;
      const lines = (partial + s).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        const m = /"level":(\d+)/.exec(line);
        if (m && Number(m[1]) >= 50) errors.push(line);
      }
    },
  };
}

/**
 * A node for scripts/start.sh's CROWDPLAY_NODE that is this node with `--cpu-prof` into `dir` (node refuses
 * `--cpu-prof` in NODE_OPTIONS): a shell script that execs it, so the product's pid stays node's.
 * @returns the script's path (in `dir`, created)
 */
function profilingNode(dir: string): string {
  mkdirSync(dir, { recursive: true });
  const script = join(dir, 'node-cpu-prof.sh');
  const q = (v: string): string => `'${v.replace(/'/g, `'\\''`)}'`;
  writeFileSync(script, `#!/bin/sh\nexec ${q(process.execPath)} --cpu-prof --cpu-prof-dir=${q(dir)} "$@"\n`, { mode: 0o755 });
  return script;
}

/**
 * Starts `crowdplay start` through scripts/start.sh (as `npm start` does) with `env` added to this process's environment,
 * on 127.0.0.1 and a free port; resolves once it logs `listening on`.
 * @param cpus taskset CPU list, or null to run unpinned
 * @param cpuProfDir write a V8 CPU profile of the product into this directory when it exits (node --cpu-prof)
 * @throws Error when it exits or does not listen within 90 s
 */
export async function startProduct(env: Record<string, string>, cpus: string | null, cpuProfDir?: string): Promise<Product> {
  const ts = cpus === null ? null : tasksetPath();
  // npm start's way (scripts/start.sh execs node: the pid is node's), with this run's bundle and this node.
  const bundle = await buildProductBundle();
  const node = ['sh', join(ROOT, 'scripts', 'start.sh'), 'start'];
  const [cmd, ...args] = ts ? [ts, '-c', cpus!, ...node] : node;
  const child = spawn(cmd!, args, {
    cwd: ROOT,
    env: {
      ...process.env,
      CROWDPLAY_BUNDLE: bundle,
      CROWDPLAY_NODE: cpuProfDir === undefined ? process.execPath : profilingNode(resolvePath(cpuProfDir)),
      HOST: '127.0.0.1',
      PORT: '0',
      // The sampler scrapes /metrics where it connects (loopback here).
      METRICS_ON_PORT: 'true',
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const col = outputCollector();
  let exit: { code: number | null; signal: string | null } | null = null;
  child.stdout!.on('data', col.onData);
  child.stderr!.on('data', col.onData);
  child.once('exit', (code, signal) => (exit = { code, signal }));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`crowdplay did not start in 90 s:\n${col.out().slice(-2000)}`)), 90_000);
    const look = (): void => {
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(col.out());
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
      reject(new Error(`crowdplay exited with ${code} before listening:\n${col.out().slice(-2000)}`));
    });
  });
  return {
    mode: 'standalone',
    shape: null,
    pids: () => (exit ? [] : [{ name: 'crowdplay', pid: child.pid! }]),
    url,
    urls: [url],
    errorLines: () => col.errors,
    output: col.out,
    exited: () => exit,
    stop: () => stopChild(child, () => exit !== null),
  };
}

/**
 * Starts `crowdplay cluster` as startCluster() runs it (services/cli/src/cluster.ts; each child the bundle's
 * `service <name>`, CROWDPLAY_MODE=cluster) with `env` added to this process's environment: sequencer, router,
 * `shards` shards and `gateways` gateways on 127.0.0.1 and free ports. With `cpus`, every child (all its threads)
 * is pinned there with `taskset -a -p` once it is ready.
 * @throws RangeError for counts outside 1…32; Error when a child does not start (the others are stopped)
 */
export async function startClusterProduct(
  env: Record<string, string>,
  shape: { gateways: number; shards: number },
  cpus: string | null,
): Promise<Product> {
  const { startCluster } = await import('@crowdplay/cli');
  const script = await buildProductBundle();
  const col = outputCollector();
  const cluster = await startCluster({
    gateways: shape.gateways,
    shards: shape.shards,
    env: { ...process.env, HOST: '127.0.0.1', PORT: '0', METRICS_ON_PORT: 'true', LOG_LEVEL: 'info', ...env },
    entry: { execArgv: [], script },
    out: (line) => col.onData(`${line}\n`),
    readyTimeoutMs: 90_000,
  });
  let exit: { code: number | null; signal: string | null; name?: string } | null = null;
  void cluster.failed.then((e) => (exit ??= { code: e.code, signal: e.signal, name: e.name }));
  const pids = (): { name: string; pid: number }[] =>
    cluster.processes.filter((p) => p.running && p.pid !== undefined).map((p) => ({ name: p.name, pid: p.pid! }));
  if (cpus !== null) for (const p of pids()) pinProcess(p.pid, cpus, true);
  const urls = cluster.gatewayUrls;
  return {
    mode: 'cluster',
    shape,
    pids,
    url: urls[0]!,
    urls,
    errorLines: () => col.errors,
    output: col.out,
    exited: () => exit,
    stop: () => cluster.stop(),
  };
}

/** SIGTERM, then SIGKILL after 15 s; resolves when the process is gone. */
async function stopChild(child: ChildProcess, gone: () => boolean): Promise<void> {
  if (gone()) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const hard = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await exited;
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

/** A histogram's `_sum` and `_count` (or a counter's value as `count`, `sum` 0), summed over scraped processes. */
export interface SumCount {
  sum: number;
  count: number;
}

/**
 * Where a board's time goes in the product, from its cumulative /metrics: `renderJob` (crowdplay_render_queue_job_ms:
 * hand-on → PNG on the send queue), `renderWait` (crowdplay_board_queued_ms: waiting for a render thread),
 * `render` (crowdplay_board_render_ms: drawing and encoding), `sendLane` (crowdplay_sendq_job_ms of boards sent:
 * send queue → Telegram's answer); and boards superseded before their render started
 * (crowdplay_render_queue_superseded_total) or while waiting in the board lane (crowdplay_sendq_job_ms_count of
 * status superseded), as `count`.
 */
export interface BoardPipelineCounts {
  renderJob: SumCount;
  renderWait: SumCount;
  render: SumCount;
  sendLane: SumCount;
  supersededBeforeRender: SumCount;
  supersededInLane: SumCount;
}

/**
 * {@link BoardPipelineCounts} of one /metrics text; null when it has no render metric (boards off, or a gateway that
 * does not render). A missing series counts as zero.
 */
export function boardPipelineOf(text: string): BoardPipelineCounts | null {
  const hist = (name: string, label?: string): SumCount | null => {
    const sum = metricValue(text, `${name}_sum`, label);
    const count = metricValue(text, `${name}_count`, label);
    return sum === null || count === null ? null : { sum, count };
  };
  const render = hist('crowdplay_board_render_ms');
  if (!render) return null;
  const zero = { sum: 0, count: 0 };
  return {
    renderJob: hist('crowdplay_render_queue_job_ms') ?? zero,
    renderWait: hist('crowdplay_board_queued_ms') ?? zero,
    render,
    sendLane: hist('crowdplay_sendq_job_ms', 'lane="board",status="sent"') ?? zero,
    supersededBeforeRender: { sum: 0, count: metricValue(text, 'crowdplay_render_queue_superseded_total') ?? 0 },
    supersededInLane: { sum: 0, count: metricValue(text, 'crowdplay_sendq_job_ms_count', 'lane="board",status="superseded"') ?? 0 },
  };
}

/** `a` + `b`, field by field (null is nothing). */
function addPipelines(a: BoardPipelineCounts | null, b: BoardPipelineCounts | null): BoardPipelineCounts | null {
  if (!a || !b) return a ?? b;
  const out = { ...a };
  for (const k of Object.keys(a) as Array<keyof BoardPipelineCounts>) out[k] = { sum: a[k].sum + b[k].sum, count: a[k].count + b[k].count };
  return out;
}

/**
 * Samples the product every `rssEveryMs` (RSS of each of its processes) and `metricsEveryMs` (each gateway's
 * /metrics: `crowdplay_event_loop_lag_ms{quantile="max"}`, which is the max since the previous scrape, and
 * `crowdplay_board_interval_ms`). In a cluster, `peakRssMb` is the largest peak of one process (the per-process
 * figure the targets are about) and `peakRssSumMb` the largest sum over its processes at one sample.
 */
/** The act-ack histogram's bound the report counts against (one of libs/telemetry LATENCY_BUCKETS_MS; the guess p99 target), ms. */
export const ACT_ACK_WITHIN_MS = 100;

/** Act acks within {@link ACT_ACK_WITHIN_MS} and in all (cumulative histogram counts). */
export interface ActAckCounts {
  within: number;
  count: number;
}

export class ProductSampler {
  peakRssMb: number | null = null;
  /** Which process had {@link peakRssMb}. */
  peakRssProcess: string | null = null;
  /** Largest sum of the processes' RSS at one sample, MB. */
  peakRssSumMb: number | null = null;
  /** Peak RSS per process name, MB. */
  readonly peakRssByProcess = new Map<string, number>();
  /** Largest event-loop stall since {@link openWindow} (before it: since start), ms. */
  maxLoopStallMs: number | null = null;
  /** Largest stall before {@link openWindow} (start-up and setup), ms. */
  setupLoopStallMs: number | null = null;
  /** RSS (sum over the processes) when the window opened, MB. */
  rssAtWindowMb: number | null = null;
  intervalLast: number | null = null;
  intervalMax: number | null = null;
  /** {@link BoardPipelineCounts} at the latest scrape, summed over the scraped processes; null before any has one. */
  pipelineLast: BoardPipelineCounts | null = null;
  /** Last `crowdplay_board_backlog` (boards handed on, not sent; a cluster: the largest over its gateways) and drain rate. */
  backlogLast: number | null = null;
  drainLast: number | null = null;
  scrapeErrors = 0;
  /** Largest `crowdplay_process_memory_bytes` of a scraped gateway per kind (heap_used, heap_total, external, array_buffers), `crowdplay_board_thread_heap_bytes` (render_thread_heaps) and `crowdplay_ws_buffered_bytes` (ws_buffered), MB. */
  readonly memoryPeakMb: Record<string, number> = {};
  /**
   * `crowdplay_act_ack_ms` (the shard's: gateway receipt of an intent → its act ack) summed over the scraped
   * processes, as {@link ACT_ACK_WITHIN_MS} acks within that bound and all acks: at the window's opening and at the
   * latest scrape (a cluster's shards are not scraped: null there).
   */
  actAckAtWindow: ActAckCounts | null = null;
  actAckLast: ActAckCounts | null = null;
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

  private sampleRss(): number | null {
    let sum: number | null = null;
    for (const { name, pid } of this.p.pids()) {
      const r = readRss(pid);
      if (!r) continue;
      sum = (sum ?? 0) + r.rssMb;
      const peak = Math.max(r.rssMb, r.hwmMb);
      this.peakRssByProcess.set(name, Math.max(this.peakRssByProcess.get(name) ?? 0, peak));
      if (this.peakRssMb === null || peak > this.peakRssMb) {
        this.peakRssMb = peak;
        this.peakRssProcess = name;
      }
    }
    if (sum !== null) this.peakRssSumMb = Math.max(this.peakRssSumMb ?? 0, sum);
    return sum;
  }

  /** One /metrics scrape of every gateway (skipped while one is in flight). */
  async scrape(): Promise<void> {
    if (this.scraping) return;
    this.scraping = true;
    try {
      let acks: ActAckCounts | null = null;
      let pipeline: BoardPipelineCounts | null = null;
      await Promise.all(
        this.p.urls.map(async (url) => {
          try {
            const res = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5_000) });
            const text = await res.text();
            const within = metricValue(text, 'crowdplay_act_ack_ms_bucket', `le="${ACT_ACK_WITHIN_MS}"`);
            const count = metricValue(text, 'crowdplay_act_ack_ms_count');
            if (within !== null && count !== null) acks = { within: (acks?.within ?? 0) + within, count: (acks?.count ?? 0) + count };
            const lag = metricValue(text, 'crowdplay_event_loop_lag_ms', 'quantile="max"');
            if (lag !== null) this.maxLoopStallMs = Math.max(this.maxLoopStallMs ?? 0, lag);
            const peak = (key: string, b: number | null): void => {
              if (b !== null) this.memoryPeakMb[key] = Math.max(this.memoryPeakMb[key] ?? 0, Math.round(b / 2 ** 20));
            };
            for (const kind of ['heap_used', 'heap_total', 'external', 'array_buffers'])
              peak(kind, metricValue(text, 'crowdplay_process_memory_bytes', `kind="${kind}"`));
            peak('render_thread_heaps', metricValue(text, 'crowdplay_board_thread_heap_bytes'));
            peak('ws_buffered', metricValue(text, 'crowdplay_ws_buffered_bytes'));
            pipeline = addPipelines(pipeline, boardPipelineOf(text));
            const bl = metricValue(text, 'crowdplay_board_backlog');
            if (bl !== null) this.backlogLast = bl;
            const dr = metricValue(text, 'crowdplay_board_drain_per_s');
            if (dr !== null) this.drainLast = dr;
            const iv = metricValue(text, 'crowdplay_board_interval_ms');
            if (iv !== null) {
              this.intervalLast = iv;
              this.intervalMax = Math.max(this.intervalMax ?? 0, iv);
            }
          } catch {
            this.scrapeErrors++;
          }
        }),
      );
      if (acks) this.actAckLast = acks;
      if (pipeline) this.pipelineLast = pipeline;
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
    this.actAckAtWindow = this.actAckLast ?? { within: 0, count: 0 };
    this.rssAtWindowMb = this.sampleRss();
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
