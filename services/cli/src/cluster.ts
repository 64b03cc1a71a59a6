/**
 * `crowdplay cluster --gateways G --shards S --routers R`: a local multi-process
 * cluster for development and tests. R routers (`router`, `router-2`…: one
 * active through the router lease, the others standing by), one sequencer, S crowd-engine shards
 * (SHARD_ID shard-1…shard-S) and G gateways (GATEWAY_ID gw-1…gw-G; ports PORT,
 * PORT+1…, or all 0 = free ports), each a child process running
 * `crowdplay service <name>` with CROWDPLAY_MODE=cluster against the NATS,
 * Redis and Postgres named by NATS_URL, REDIS_URL and DATABASE_URL (defaults:
 * the ones on this machine). Every output line of a child is prefixed with
 * its name. With TELEGRAM_BOT_TOKEN set it also starts one `telegram-sender`
 * (`tg-sender`: a cluster's gateways only enqueue Bot API calls), and
 * `renderers` board-renderer processes (`renderer-N`; then the gateways leave
 * rendering to them, BOARD_RENDER_IN_PROCESS=false, unless the environment
 * says otherwise). With HEALTH_PORT set, each child's operator listener
 * (/healthz, /readyz, /metrics) gets a port of its own: HEALTH_PORT + the
 * child's index in start order (sequencer, routers, shards, sender,
 * renderers, gateways, then shards added later; see childEnv), printed by
 * `crowdplay cluster`. A child that dies unexpectedly resolves `failed`;
 * `stop()` drains gateways first, then shards, then senders and renderers,
 * then router and sequencer. Each child starts through scripts/start.sh, as
 * `npm start` and the image start every deployed process (V8's young
 * generation SEMI_SPACE_MB, glibc's malloc settings): the processes a load
 * scenario or a test measures are the ones operators run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '@crowdplay/config';
import type { ServiceName } from './compose.ts';

/** The one start script of the product's processes (`npm start`, the image's entry point). */
export const START_SCRIPT = fileURLToPath(new URL('../../../scripts/start.sh', import.meta.url));

/** The URLs a cluster uses when the environment names none (the services every machine of this kind runs). */
export const CLUSTER_DEFAULTS = {
  NATS_URL: 'nats://127.0.0.1:4222',
  REDIS_URL: 'redis://127.0.0.1:6379',
  DATABASE_URL: 'postgresql://postgres@127.0.0.1:5432/test',
} as const;

/** Most gateways or shards one local cluster starts. */
export const CLUSTER_MAX_PROCESSES = 32;

export interface ClusterOptions {
  /** Gateways, 1…32. */
  gateways: number;
  /** crowd-engine shards, 1…32. */
  shards: number;
  /**
   * Router processes, 1…32 (default 1): one is active through the router lease, the others stand by. The fault suites
   * start a cluster per case on a shared machine, so a standby is asked for where it is tested.
   */
  routers?: number;
  /** board-renderer processes, 0…32 (default 0: the gateways render in process). */
  renderers?: number;
  /**
   * Environment the children inherit (the CLI passes process.env); the cluster sets CROWDPLAY_MODE, SHARD_ID,
   * GATEWAY_ID, PORT and HEALTH_PORT per child (childEnv).
   */
  env: Readonly<Record<string, string | undefined>>;
  /**
   * How to start `crowdplay`: node options (no spaces within one: scripts/start.sh splits them at spaces) and script
   * (default: tsx and this package's main.ts).
   */
  entry?: { execArgv: string[]; script: string };
  /** Where prefixed output lines go (default: stdout). */
  out?: (line: string) => void;
  /** How long a child may take to log `ready`, ms (default 60,000). */
  readyTimeoutMs?: number;
  /** How long a stopping child may drain before it is killed, ms (default SHUTDOWN_DEADLINE_MS + 5,000). */
  stopTimeoutMs?: number;
}

/** How a child ended. */
export interface ChildExit {
  name: string;
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** One child process of the cluster. */
export interface ProcessHandle {
  /** `router` (then `router-2`…), `sequencer`, `shard-N` or `gw-N`. */
  readonly name: string;
  readonly service: ServiceName;
  /** Its environment (the cluster's plus its own ids and ports: childEnv). */
  readonly env: Readonly<Record<string, string>>;
  /** Port of its operator listener (/healthz, /readyz, /metrics on HEALTH_HOST), undefined when HEALTH_PORT is unset or 0. */
  readonly healthPort: number | undefined;
  /** pid of the current process (undefined before the first start). */
  readonly pid: number | undefined;
  /** A gateway's URL (http://host:port) once ready. */
  readonly url: string | undefined;
  /** True while its process runs. */
  readonly running: boolean;
  /** Everything it printed, across restarts (tests read it on failure). */
  readonly output: string;
  /**
   * Sends a signal. SIGKILL, SIGTERM and SIGINT mark the exit as expected
   * (it does not resolve the cluster's `failed`); SIGSTOP / SIGCONT pause and resume.
   */
  signal(sig: NodeJS.Signals): void;
  /** SIGTERM (after a SIGCONT, in case it was paused) and waits for the exit; SIGKILL past the stop timeout. */
  stop(): Promise<void>;
  /** Stops it if running, then starts it again with the same environment and waits until it is ready. */
  restart(): Promise<void>;
  /** Resolves when the current process exits. */
  exited(): Promise<ChildExit>;
}

export interface Cluster {
  /** Gateways' URLs (http://host:port), in order. */
  readonly gatewayUrls: string[];
  /** Every child: sequencer, router, shards, gateways (and shards added later). */
  readonly processes: ProcessHandle[];
  /** The child named `name`. @throws Error when there is none */
  get(name: string): ProcessHandle;
  /** The environment every child gets (before its own ids and port). */
  readonly env: Readonly<Record<string, string>>;
  /** Starts one more shard (`shard-<S+1>`…) and waits until it is ready. */
  addShard(): Promise<ProcessHandle>;
  /** Resolves with the first child that exited without being asked to. */
  readonly failed: Promise<ChildExit>;
  /** Drains gateways, then shards, then router and sequencer. Safe to call twice. */
  stop(): Promise<void>;
}

/** Children of every cluster of this process: killed if this process exits without stopping them. */
const liveChildren = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of liveChildren) c.kill('SIGKILL');
});

const READY_RE = /"msg":"ready"/;
const URL_RE = /listening on (http:\/\/[^\s"]+)/;

class Child implements ProcessHandle {
  private proc: ChildProcess | null = null;
  private exitP: Promise<ChildExit>;
  private expected = false;
  private buf = '';
  output = '';
  url: string | undefined;

  constructor(
    readonly name: string,
    readonly service: ServiceName,
    readonly env: Readonly<Record<string, string>>,
    private readonly opts: Required<Pick<ClusterOptions, 'entry' | 'out' | 'readyTimeoutMs' | 'stopTimeoutMs'>>,
    private readonly onUnexpectedExit: (e: ChildExit) => void,
  ) {
    this.exitP = Promise.resolve({ name, code: null, signal: null });
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  get healthPort(): number | undefined {
    const port = Number(this.env.HEALTH_PORT ?? 0);
    return port > 0 ? port : undefined;
  }

  get running(): boolean {
    return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** Spawns the process and resolves once it logged `ready`. @throws Error when it exits or times out first (it is killed) */
  start(): Promise<void> {
    const { entry } = this.opts;
    this.expected = false;
    // start.sh execs node: the child's pid is node's (signals, CPU and memory readings reach the service itself).
    const proc = spawn('sh', [START_SCRIPT, 'service', this.service], {
      env: {
        ...this.env,
        CROWDPLAY_NODE: process.execPath,
        CROWDPLAY_BUNDLE: entry.script,
        CROWDPLAY_NODE_ARGS: entry.execArgv.join(' '),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group: a Ctrl-C at the terminal reaches the cluster only, which drains the children in order.
      detached: true,
    });
    liveChildren.add(proc);
    proc.once('exit', () => liveChildren.delete(proc));
    this.proc = proc;
    let seen = '';
    let onLine: ((line: string) => void) | null = null;
    const take = (d: Buffer): void => {
      const text = this.buf + d.toString();
      const lines = text.split('\n');
      this.buf = lines.pop() ?? '';
      for (const line of lines) {
        this.output += `${line}\n`;
        this.opts.out(`${this.name.padEnd(9)}| ${line}`);
        onLine?.(line);
      }
    };
    proc.stdout!.on('data', take);
    proc.stderr!.on('data', take);
    this.exitP = new Promise((resolve) => {
      proc.once('exit', (code, signal) => {
        if (this.buf) take(Buffer.from('\n'));
        const e = { name: this.name, code, signal };
        if (!this.expected) this.onUnexpectedExit(e);
        resolve(e);
      });
    });
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.signal('SIGKILL');
        reject(new Error(`${this.name} was not ready within ${this.opts.readyTimeoutMs} ms:\n${seen}`));
      }, this.opts.readyTimeoutMs);
      onLine = (line) => {
        seen += `${line}\n`;
        const m = URL_RE.exec(line);
        if (m) this.url = m[1]!;
        if (READY_RE.test(line)) {
          clearTimeout(timer);
          onLine = null;
          resolve();
        }
      };
      void this.exitP.then((e) => {
        clearTimeout(timer);
        reject(new Error(`${this.name} exited (code ${e.code}, signal ${e.signal}) before it was ready:\n${seen}`));
      });
    });
  }

  signal(sig: NodeJS.Signals): void {
    if (sig === 'SIGKILL' || sig === 'SIGTERM' || sig === 'SIGINT') this.expected = true;
    if (this.running) this.proc!.kill(sig);
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.expected = true;
    this.proc!.kill('SIGCONT');
    this.proc!.kill('SIGTERM');
    const timer = setTimeout(() => this.signal('SIGKILL'), this.opts.stopTimeoutMs);
    await this.exitP;
    clearTimeout(timer);
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  exited(): Promise<ChildExit> {
    return this.exitP;
  }
}

/**
 * The environment of the cluster's child number `index` (0-based, in start order): `base` (the cluster's), then
 * `extra` (its ids, its PORT), and, when `base` sets a HEALTH_PORT other than 0, HEALTH_PORT + `index`: the children
 * run on one machine, and each one's operator listener must bind a port of its own (one port for all: the first child
 * binds it, every other one exits with EADDRINUSE). HEALTH_PORT 0 (or unset) stays 0: no listener.
 * @throws TypeError when HEALTH_PORT + index is past 65,535 (checked before the child is spawned)
 */
export function childEnv(
  base: Readonly<Record<string, string>>,
  index: number,
  extra: Readonly<Record<string, string>> = {},
): Record<string, string> {
  const env: Record<string, string> = { ...base, ...extra };
  const first = Number(base.HEALTH_PORT ?? 0);
  if (Number.isInteger(first) && first > 0) {
    const port = first + index;
    if (port > 65_535)
      throw new TypeError(`HEALTH_PORT ${first} + ${index} (the cluster's child ${index + 1}) is past 65535: lower HEALTH_PORT`);
    env.HEALTH_PORT = String(port);
  }
  return env;
}

function countOf(kind: string, n: number, min = 1): number {
  if (!Number.isInteger(n) || n < min || n > CLUSTER_MAX_PROCESSES)
    throw new TypeError(`--${kind} must be an integer in [${min}, ${CLUSTER_MAX_PROCESSES}]`);
  return n;
}

/**
 * Starts a local cluster and resolves once every child is ready (sequencer
 * first: it runs the migrations; then router and shards; then gateways).
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID when the children's environment is invalid (checked before anything starts);
 *   TypeError for counts outside [1, 32]; Error when a child exits or is not ready in time (everything started is stopped)
 */
export async function startCluster(opts: ClusterOptions): Promise<Cluster> {
  const gateways = countOf('gateways', opts.gateways);
  const shards = countOf('shards', opts.shards);
  const renderers = countOf('renderers', opts.renderers ?? 0, 0);
  const routerCount = countOf('routers', opts.routers ?? 1);
  const base: Record<string, string> = {};
  for (const [k, v] of Object.entries(opts.env)) if (v !== undefined) base[k] = v;
  for (const [k, v] of Object.entries(CLUSTER_DEFAULTS)) if (!base[k]) base[k] = v;
  base.CROWDPLAY_MODE = 'cluster';
  // Fail before spawning anything: the same check every child makes (cluster mode needs NATS_URL, DATABASE_URL, REDIS_URL).
  const config = loadConfig(base);
  // The last child's HEALTH_PORT too, before anything starts (childEnv throws past 65,535).
  childEnv(base, routerCount + shards + (config.telegram.botToken ? 1 : 0) + renderers + gateways);
  const firstPort = config.http.port;
  const full = {
    entry: opts.entry ?? { execArgv: ['--import', 'tsx'], script: fileURLToPath(new URL('./main.ts', import.meta.url)) },
    out: opts.out ?? ((line: string) => void process.stdout.write(`${line}\n`)),
    readyTimeoutMs: opts.readyTimeoutMs ?? 60_000,
    stopTimeoutMs: opts.stopTimeoutMs ?? config.gateway.shutdownMs + 5_000,
  };
  let reportFailure: (e: ChildExit) => void = () => undefined;
  const failed = new Promise<ChildExit>((resolve) => (reportFailure = resolve));
  let stopping = false;
  const processes: Child[] = [];
  const make = (name: string, service: ServiceName, extra: Record<string, string> = {}): Child => {
    const c = new Child(name, service, childEnv(base, processes.length, extra), full, (e) => {
      if (!stopping) reportFailure(e);
    });
    processes.push(c);
    return c;
  };
  let shardCount = 0;
  const newShard = (): Child => {
    shardCount++;
    return make(`shard-${shardCount}`, 'crowd-engine', { SHARD_ID: `shard-${shardCount}` });
  };
  const byKind = (s: ServiceName): Child[] => processes.filter((p) => p.service === s);
  let stopP: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping = true;
    stopP ??= (async () => {
      await Promise.all(byKind('gateway').map((p) => p.stop()));
      await Promise.all(byKind('crowd-engine').map((p) => p.stop()));
      await Promise.all([...byKind('telegram-sender'), ...byKind('board-renderer')].map((p) => p.stop()));
      await Promise.all(processes.filter((p) => p.service === 'router' || p.service === 'sequencer').map((p) => p.stop()));
    })();
    return stopP;
  };
  try {
    const sequencer = make('sequencer', 'sequencer');
    await sequencer.start();
    const routers = Array.from({ length: routerCount }, (_, i) => make(i === 0 ? 'router' : `router-${i + 1}`, 'router'));
    const engines = Array.from({ length: shards }, newShard);
    // The Telegram bot's workers: one sender (the gateways of a cluster only enqueue Bot API calls), the renderers asked for.
    const workers = [
      ...(config.telegram.botToken ? [make('tg-sender', 'telegram-sender')] : []),
      ...Array.from({ length: renderers }, (_, i) => make(`renderer-${i + 1}`, 'board-renderer')),
    ];
    await Promise.all([...routers.map((r) => r.start()), ...engines.map((s) => s.start()), ...workers.map((w) => w.start())]);
    const renderEnv: Record<string, string> =
      renderers > 0 && base.BOARD_RENDER_IN_PROCESS === undefined ? { BOARD_RENDER_IN_PROCESS: 'false' } : {};
    const gws = Array.from({ length: gateways }, (_, i) =>
      make(`gw-${i + 1}`, 'gateway', { ...renderEnv, GATEWAY_ID: `gw-${i + 1}`, PORT: String(firstPort === 0 ? 0 : firstPort + i) }),
    );
    await Promise.all(gws.map((g) => g.start()));
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    get gatewayUrls() {
      return byKind('gateway').map((g) => g.url ?? '');
    },
    processes,
    get(name) {
      const p = processes.find((c) => c.name === name);
      if (!p) throw new Error(`no process ${name} in this cluster`);
      return p;
    },
    env: base,
    async addShard() {
      const s = newShard();
      await s.start();
      return s;
    },
    failed,
    stop,
  };
}
