/**
 * The `failover` load scenario: a local cluster (`startCluster`,
 * the bundle `npm run cluster` runs) on the machine's NATS, Redis and
 * PostgreSQL, isolated by its own schema, subject prefix and Redis prefixes
 * (removed afterwards); one sdk-game client per channel running pool rounds
 * and receiving batches (games.ts); viewers in forked workers (worker.ts)
 * acting and staking. Mid-run it applies the selected faults in order:
 * `kill` SIGKILLs the shard owning the most channels, `drain` SIGTERMs the
 * live shard owning the most, `gateway` restarts the last gateway, `router`
 * SIGKILLs the router and starts it again after `routerDownMs`, `postgres`
 * stops PostgreSQL and starts it again after `postgresDownMs` (on a server
 * of the run's own, the only kind it may stop). Every
 * channel a shard fault moves (and a sample of channels at the router's)
 * gets a recovery probe (probe.ts); then it checks the failover targets
 * (report.ts, README "failover").
 */
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import { CLUSTER_DEFAULTS, startCluster, type Cluster } from '@crowdplay/cli';
import { verifyLedger } from '@crowdplay/ledger';
import { CrowdplayError } from '@crowdplay/protocol';
import { openStore, type Store } from '@crowdplay/store';
import { freePorts, ownPostgres } from '@crowdplay/testing';
import { machineInfo } from '../crowd/scenario.ts';
import { forkTs, waitExit } from '../fork.ts';
import { addEncoded, newHistogram, summarize } from '../hist.ts';
import { findListeningPid } from '../proc.ts';
import { createTokenMinter } from '../tokens.ts';
import { buildProductBundle, dropSchema, purgeSendqKeys } from '../rollover/product.ts';
import { SteadyCpuWatch, type SteadyCpu } from './cpu.ts';
import { ChannelGame } from './games.ts';
import { ProbeSet, probeViewerId, type ProbeResult } from './probe.ts';
import { shardRecoveryFigures, type ShardProbeResult } from './shard-probe.ts';
import { ShardProbeHost } from './shard-probe-worker.ts';
import {
  emptyFailoverCounters,
  type AckedStake,
  type FailoverCounters,
  type FailoverWorkerConfig,
  type FailoverWorkerFinal,
  type FailoverWorkerMessage,
  viewerId,
} from './ipc.ts';
import { msFigures, type FailoverReport, type FailoverTarget, type RecoveryFigures, type RouterLogLine } from './report.ts';

/** The services the cluster uses when none are named: `crowdplay cluster`'s defaults (this machine's). */
export const FAILOVER_DEFAULTS = CLUSTER_DEFAULTS;

/** The failover's timing targets, ms. */
export const TARGET_KILL_RECOVERY_MS = 5_000;
/** The drain's target below DRAIN_TARGET_LARGE_CHANNELS channels, ms. */
export const TARGET_DRAIN_RECOVERY_MS = 1_000;
/** The drain's target from DRAIN_TARGET_LARGE_CHANNELS channels on, ms. */
export const TARGET_DRAIN_RECOVERY_LARGE_MS = 2_000;
export const DRAIN_TARGET_LARGE_CHANNELS = 3_000;
/** The move after the router declared the shard dead, at the shard, ms. */
export const TARGET_KILL_MOVE_MS = 1_500;
export const TARGET_RECONNECT_MS = 10_000;

/**
 * The drain's recovery target for a run of `channels` channels, ms: TARGET_DRAIN_RECOVERY_MS (the 30-channel shape's),
 * TARGET_DRAIN_RECOVERY_LARGE_MS from DRAIN_TARGET_LARGE_CHANNELS channels on (the cluster's sized shape: with three
 * shards, once one was killed the drained one holds half of the channels, ~1,500 at 3,000).
 */
export function drainTargetMs(channels: number): number {
  return channels >= DRAIN_TARGET_LARGE_CHANNELS ? TARGET_DRAIN_RECOVERY_LARGE_MS : TARGET_DRAIN_RECOVERY_MS;
}

/** The faults a run can apply (`--faults`). */
export const FAILOVER_FAULTS = ['kill', 'drain', 'gateway', 'router', 'postgres'] as const;
export type FailoverFault = (typeof FAILOVER_FAULTS)[number];
/** The faults applied when none are named. */
export const DEFAULT_FAULTS: readonly FailoverFault[] = ['kill', 'drain', 'gateway'];
/** Channels probed at a router kill (spread over the channel list). */
const ROUTER_PROBES = 100;
/** How long a fault may wait past its time for the previous fault's probes to recover, ms. */
const FAULT_GAP_MS = 15_000;
/** Longest a fault waits for its viewer-path probes' sockets to be welcomed, ms (past it, it goes ahead and warns). */
const PROBES_WELCOME_MS = 30_000;
/** Viewers act at least this long after the last fault, ms. */
const ACT_AFTER_FAULT_MS = 5_000;
/** Longest the end waits for every logged batch to reach its game before counting, ms. */
const DELIVERY_WAIT_MS = 30_000;
/** The private PostgreSQL of a run with the postgres fault: fsync and shared buffers as the machine's server has them. */
const PRIVATE_POSTGRES_SETTINGS = { fsync: 'on', shared_buffers: '128MB' } as const;
/** Viewers per worker process when --workers is not given. */
const VIEWERS_PER_WORKER = 1_500;

export interface FailoverOptions {
  gateways: number;
  shards: number;
  viewers: number;
  channels: number;
  /** Steady phase after the ramp, s (the faults happen inside it). */
  durationS: number;
  natsUrl?: string;
  redisUrl?: string;
  databaseUrl?: string;
  /** Connect ramp, s. @defaultValue max(2, viewers / 1,000) */
  rampS?: number;
  /** @defaultValue 1,000 */
  actIntervalMs?: number;
  /** Pool round length, ms. @defaultValue 8,000 */
  roundMs?: number;
  /** @defaultValue max(1, ⌈viewers / 1,500⌉) */
  workers?: number;
  /** @defaultValue 1,000 (inside the gateway's CONN_BURST of 2,000 per address) */
  viewersPerAddress?: number;
  /** The faults, applied in this order. @defaultValue DEFAULT_FAULTS (kill, drain, gateway) */
  faults?: readonly FailoverFault[];
  /** Fault times as increasing fractions of the steady phase, one per fault. @defaultValue (i + 1) / (faults + 1) */
  faultsAt?: readonly number[];
  /** Every game client is welcomed by then or counted in gamesNotConnected, ms after the cluster is up. @defaultValue max(60,000, 20 · channels) */
  gameConnectDeadlineMs?: number;
  /**
   * A viewer's first connect is retried until this long after the ramp, ms, then counted in viewersNotConnected (the
   * games' window: a cold start places every channel first). @defaultValue max(30,000, 20 · channels)
   */
  viewerConnectDeadlineMs?: number;
  /** Game connects in flight at once. @defaultValue 200 */
  gameConnectConcurrency?: number;
  /** Interval between one probe's intents, ms. @defaultValue 100 */
  probeIntervalMs?: number;
  /** How long the router stays down at a `router` fault, ms. @defaultValue 3,000 */
  routerDownMs?: number;
  /**
   * How long PostgreSQL stays down at a `postgres` fault (a fast shutdown, then a start on the same data), ms. The
   * fault needs a server the rig may stop: it starts one of its own (and refuses `databaseUrl`). @defaultValue 3,000
   */
  postgresDownMs?: number;
  /**
   * The cluster's ROUND_UNSETTLED_MAX_MS: the bound within which a round the game could not settle is cancelled and
   * refunded by the server. The end waits up to this long (+ 10 s) for every round to be paid, so `stakesLost`
   * checks that bound. @defaultValue 30,000
   */
  roundUnsettledMaxMs?: number;
  /** Extra environment of every cluster process. */
  clusterEnv?: Record<string, string>;
  /** Every cluster process's log lines are also written here (prefixed by the process). */
  logFile?: string;
  onProgress?: (line: string) => void;
  command?: string;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function invalid(msg: string): CrowdplayError {
  return new CrowdplayError('CP_ERR_CONFIG_INVALID', [msg]);
}

/**
 * Parses `--faults`: comma-separated names out of FAILOVER_FAULTS, each at most once, in the order they are applied.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID for an empty list, an unknown or repeated name
 */
export function parseFaults(text: string): FailoverFault[] {
  const names = text.split(',').map((x) => x.trim());
  const out: FailoverFault[] = [];
  for (const n of names) {
    if (!(FAILOVER_FAULTS as readonly string[]).includes(n))
      throw invalid(`faults: unknown fault ${JSON.stringify(n)} (one of ${FAILOVER_FAULTS.join(', ')})`);
    if (out.includes(n as FailoverFault)) throw invalid(`faults: ${n} named twice`);
    out.push(n as FailoverFault);
  }
  return out;
}

/**
 * After a postgres fault: how long from the server accepting again (`upAt`, ms since epoch) to the first stake that
 * committed in the ledger and to the first batch written to the event log (their rows' created_at).
 * @returns ms each, null when none came after it
 */
async function firstWritesAfter(st: Store, upAt: number): Promise<{ firstStakeMs: number | null; firstBatchLoggedMs: number | null }> {
  const { rows } = await st.db.query<{ stake: string | null; batch: string | null }>(
    `SELECT (SELECT extract(epoch FROM min(created_at)) * 1000 FROM transfers WHERE kind = 'stake' AND created_at >= to_timestamp($1 / 1000.0)) AS stake,
            (SELECT extract(epoch FROM min(created_at)) * 1000 FROM channel_events WHERE kind = 'batch' AND created_at >= to_timestamp($1 / 1000.0)) AS batch`,
    [upAt],
  );
  const after = (v: string | null): number | null => (v === null ? null : Math.max(0, Math.round(Number(v) - upAt)));
  return { firstStakeMs: after(rows[0]!.stake), firstBatchLoggedMs: after(rows[0]!.batch) };
}

/** sha256(viewer ␀ key) base64url[0..22): the crowd-engine's stake idempotency hash (round-ledger.ts hashOf), part of the stake's transfer id. */
export function stakeHash(viewer: string, key: string): string {
  return createHash('sha256').update(viewer).update('\u0000').update(key).digest('base64url').slice(0, 22);
}

/**
 * Acked intents counted in no batch: Σ over (viewer, option) of max(0, acked − counted).
 * A viewer's surplus on one option never offsets a loss on another.
 */
export function lostIntents(acked: ReadonlyMap<string, readonly number[]>, counted: ReadonlyMap<string, readonly number[]>): number {
  let lost = 0;
  for (const [viewer, a] of acked) {
    const c = counted.get(viewer);
    for (let k = 0; k < a.length; k++) lost += Math.max(0, a[k]! - (c?.[k] ?? 0));
  }
  return lost;
}

/** Σ of per-code counters. */
function sumCodes(maps: Array<Record<string, number>>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of maps) for (const [k, v] of Object.entries(m)) out[k] = (out[k] ?? 0) + v;
  return out;
}

interface OwnerRow {
  id: string;
  owner: string | null;
  epoch: number;
}

async function owners(store: Store, channels: string[]): Promise<Map<string, OwnerRow>> {
  const { rows } = await store.db.query<{ id: string; owner: string | null; epoch: string | number }>(
    'SELECT id, owner, epoch FROM channels WHERE id = ANY($1)',
    [channels],
  );
  return new Map(rows.map((r) => [r.id, { id: r.id, owner: r.owner, epoch: Number(r.epoch) }]));
}

/** The shard (among `candidates`) owning the most channels; null when none owns any. */
function busiest(rows: Map<string, OwnerRow>, candidates: string[]): string | null {
  let best: string | null = null;
  let n = 0;
  for (const s of candidates) {
    const k = [...rows.values()].filter((r) => r.owner === s).length;
    if (k > n) [best, n] = [s, k];
  }
  return best;
}

/**
 * Runs the scenario once and returns its report (loadtest/README.md "failover").
 * Never throws for what it measures; throws for setup problems.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID (bad options); Error when the cluster, a game client or a worker does not come up
 */
export async function runFailoverScenario(o: FailoverOptions): Promise<FailoverReport> {
  const started = Date.now();
  const log = o.onProgress ?? ((): void => {});
  const int = (name: string, v: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    if (!Number.isInteger(v) || v < min || v > max) throw invalid(`${name} must be an integer in [${min}, ${max}], got ${v}`);
    return v;
  };
  const gateways = int('gateways', o.gateways, 2, 32);
  const shards = int('shards', o.shards, 3, 32);
  const viewers = int('viewers', o.viewers, 1);
  const C = int('channels', o.channels, 1, 10_000);
  if (!(o.durationS >= 5)) throw invalid(`duration must be ≥ 5 s, got ${o.durationS}`);
  const rampS = o.rampS ?? Math.max(2, viewers / 1_000);
  if (!(rampS >= 0)) throw invalid(`ramp must be ≥ 0 s, got ${rampS}`);
  const actIntervalMs = int('actIntervalMs', o.actIntervalMs ?? 1_000, 20);
  const roundMs = int('roundMs', o.roundMs ?? 8_000, 2_000);
  const workers = int('workers', o.workers ?? Math.max(1, Math.ceil(viewers / VIEWERS_PER_WORKER)), 1, 64);
  const perAddress = int('viewersPerAddress', o.viewersPerAddress ?? 1_000, 1);
  const faults = [...(o.faults ?? DEFAULT_FAULTS)];
  if (faults.length === 0) throw invalid('faults: name at least one');
  parseFaults(faults.join(','));
  const faultsAt = [...(o.faultsAt ?? faults.map((_, i) => (i + 1) / (faults.length + 1)))];
  if (faultsAt.length !== faults.length || !faultsAt.every((x, i) => x > 0 && x < 1 && (i === 0 || x > faultsAt[i - 1]!)))
    throw invalid(`faultsAt must be ${faults.length} increasing fractions in (0, 1), got ${faultsAt.join(',')}`);
  const gameConnectDeadlineMs = int('gameConnectDeadlineMs', o.gameConnectDeadlineMs ?? Math.max(60_000, 20 * C), 1_000);
  const viewerConnectDeadlineMs = int('viewerConnectDeadlineMs', o.viewerConnectDeadlineMs ?? Math.max(30_000, 20 * C), 1_000);
  const gameConnectConcurrency = int('gameConnectConcurrency', o.gameConnectConcurrency ?? 200, 1);
  const probeIntervalMs = int('probeIntervalMs', o.probeIntervalMs ?? 100, 10, 100);
  const routerDownMs = int('routerDownMs', o.routerDownMs ?? 3_000, 0);
  const postgresDownMs = int('postgresDownMs', o.postgresDownMs ?? 3_000, 0, 60_000);
  const restartsPostgres = faults.includes('postgres');
  if (restartsPostgres && o.databaseUrl)
    throw invalid('the postgres fault stops a PostgreSQL the rig starts itself: leave out the database URL');
  const roundUnsettledMaxMs = int('roundUnsettledMaxMs', o.roundUnsettledMaxMs ?? 30_000, 100);
  const natsUrl = o.natsUrl ?? FAILOVER_DEFAULTS.NATS_URL;
  const redisUrl = o.redisUrl ?? FAILOVER_DEFAULTS.REDIS_URL;
  // With the postgres fault: a private server the rig stops and starts, set like the machine's (fsync on).
  const ownPg = restartsPostgres ? await ownPostgres('test', PRIVATE_POSTGRES_SETTINGS) : null;
  const databaseUrl = ownPg?.url ?? o.databaseUrl ?? FAILOVER_DEFAULTS.DATABASE_URL;
  const welcomeGrant = 1_000;
  const stakePoints: [number, number] = [1, 10];
  const ackTimeoutMs = 10_000;
  const warnings: string[] = [];

  const run = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
  const schema = `failover_${run}`;
  const subjectPrefix = `fo_${run}`;
  const redisPrefix = `failover:${run}`;
  const channels = Array.from({ length: C }, (_, k) => `fo-${k}`);
  const addresses = Array.from({ length: Math.ceil(viewers / perAddress) }, (_, i) => `127.0.0.${2 + i}`);
  if (addresses.length > 250) throw invalid(`viewers / viewersPerAddress needs more than 250 source addresses`);

  let cluster: Cluster | null = null;
  let store: Store | null = null;
  const games: ChannelGame[] = [];
  const children: ChildProcess[] = [];
  const errorLines: string[] = [];
  let errorCount = 0;
  const logFile = o.logFile ? createWriteStream(o.logFile) : null;
  const unexpectedExits: string[] = [];
  let report: FailoverReport | null = null;
  let progress: NodeJS.Timeout | null = null;
  let shardProbes: ShardProbeHost | null = null;
  let steadyCpu: SteadyCpu | null = null;
  const probeSets: ProbeSet[] = [];
  /** The router's `shard declared dead` and `channels moved` lines, as they arrived. */
  const routerLog: RouterLogLine[] = [];
  const routerLine = (line: string): void => {
    try {
      const j = JSON.parse(line.slice(line.indexOf('|') + 1)) as Record<string, unknown>;
      const num = (v: unknown): number | null => (typeof v === 'number' ? v : null);
      routerLog.push({
        msg: String(j.msg),
        shard: typeof j.shard === 'string' ? j.shard : null,
        seenAt: Date.now(),
        declaredDeadAtMs: num(j.declaredDeadAtMs),
        moved: num(j.moved),
        failed: num(j.failed),
        moveMs: num(j.moveMs),
        reason: typeof j.reason === 'string' ? j.reason : null,
      });
    } catch {
      // not JSON: not one of the router's structured lines
    }
  };
  try {
    log(`building the bundle; schema ${schema}, subject prefix ${subjectPrefix}, Redis prefix ${redisPrefix}`);
    const bundle = await buildProductBundle();
    const basePort = await freePorts(gateways);
    cluster = await startCluster({
      gateways,
      shards,
      env: {
        ...process.env,
        NATS_URL: natsUrl,
        REDIS_URL: redisUrl,
        DATABASE_URL: databaseUrl,
        DATABASE_SCHEMA: schema,
        BUS_SUBJECT_PREFIX: subjectPrefix,
        TELEGRAM_SENDQ_PREFIX: redisPrefix,
        BOARD_RENDER_PREFIX: `${redisPrefix}:render`,
        TELEGRAM_BOT_TOKEN: '',
        DEMO_ENABLED: 'false',
        HOST: '127.0.0.1',
        PORT: String(basePort),
        LOG_LEVEL: 'info',
        ROUND_UNSETTLED_MAX_MS: String(roundUnsettledMaxMs),
        ...o.clusterEnv,
      },
      entry: { execArgv: [], script: bundle },
      out: (line) => {
        logFile?.write(`${line}\n`);
        if (line.startsWith('router') && (line.includes('declared dead') || line.includes('router: channels moved'))) routerLine(line);
        const m = /"level":(\d+)/.exec(line);
        if (m && Number(m[1]) >= 50) {
          errorCount++;
          if (errorLines.length < 10) errorLines.push(line.slice(0, 400));
        }
      },
      readyTimeoutMs: 90_000,
    });
    const cl = cluster;
    void cl.failed.then((e) => unexpectedExits.push(`${e.name} (code ${e.code}, signal ${e.signal})`));
    const urls = cl.gatewayUrls;
    log(`cluster up: gateways ${urls.join(', ')}`);
    store = await openStore({ url: databaseUrl, schema, poolMax: 4, pgliteDir: 'memory', migrate: false });
    const st = store;
    shardProbes = await ShardProbeHost.start(natsUrl, subjectPrefix);
    const sp = shardProbes;
    const tenant = await st.tenants.create('failover', 'Failover load');
    const apiKey = tenant.apiKey;
    const secret = tenant.tenant.signingSecret;

    // Games: channel k on gateway k mod G, at most gameConnectConcurrency connecting at once, retried until the deadline.
    for (let k = 0; k < C; k++) {
      games.push(new ChannelGame(channels[k]!, urls[k % gateways]!, apiKey, { welcomeGrant, roundMs, welcomeDeadlineMs: 15_000 }));
    }
    const gamesFrom = Date.now();
    const gameDeadline = gamesFrom + gameConnectDeadlineMs;
    let lateTimer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((r) => (lateTimer = setTimeout(r, gameConnectDeadlineMs)));
    const gameConnectMs: number[] = [];
    let nextGame = 0;
    const connector = async (): Promise<void> => {
      while (nextGame < C) {
        const g = games[nextGame++]!;
        const from = Date.now();
        if (await g.connect(gameDeadline, late)) gameConnectMs.push(Date.now() - from);
      }
    };
    await Promise.all(Array.from({ length: Math.min(C, gameConnectConcurrency) }, connector));
    clearTimeout(lateTimer);
    const liveGames = games.filter((g) => g.connected);
    const gamesNotConnected = C - liveGames.length;
    if (gamesNotConnected > 0) warnings.push(`${gamesNotConnected} game clients were not welcomed within ${gameConnectDeadlineMs} ms`);
    log(`${liveGames.length}/${C} game clients welcomed in ${Date.now() - gamesFrom} ms; starting rounds and ${workers} workers`);
    for (const g of liveGames) g.startRounds();
    const minter = await createTokenMinter('failover', secret);
    const gameOf = new Map(games.map((g) => [g.channel, g]));
    const chIndex = new Map(channels.map((ch, k) => [ch, k]));

    // Workers.
    const workerFile = fileURLToPath(new URL('./worker.ts', import.meta.url));
    const latest = new Map<number, FailoverCounters>();
    const finals = new Map<number, FailoverWorkerFinal>();
    const finalWaiters: Array<() => void> = [];
    const readies: Array<Promise<void>> = [];
    for (let w = 0; w < workers; w++) {
      const child = forkTs(workerFile, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      children.push(child);
      readies.push(
        new Promise<void>((resolve, reject) => {
          child.on('message', (raw: unknown) => {
            const m = raw as FailoverWorkerMessage;
            if (m.type === 'ready') resolve();
            else if (m.type === 'progress') latest.set(w, m.counters);
            else if (m.type === 'final') {
              finals.set(w, m);
              for (const f of finalWaiters.splice(0)) f();
            } else if (m.type === 'fatal') {
              warnings.push(`worker ${w} failed: ${m.message.split('\n')[0] ?? ''}`);
              reject(new Error(m.message));
            }
          });
          child.once('exit', (code, signal) => {
            if (!finals.has(w)) warnings.push(`worker ${w} exited (${code ?? signal}) without a report`);
            for (const f of finalWaiters.splice(0)) f();
            reject(new Error(`worker ${w} exited before it was ready`));
          });
        }),
      );
      const cfg: FailoverWorkerConfig = {
        workerIndex: w,
        workers,
        gatewayUrls: urls,
        viewers,
        channels,
        sourceAddresses: addresses,
        viewersPerAddress: perAddress,
        tenantId: 'failover',
        tenantSecret: secret,
        rampMs: rampS * 1000,
        actIntervalMs,
        ackTimeoutMs,
        welcomeDeadlineMs: 15_000,
        connectDeadlineMs: viewerConnectDeadlineMs,
        stakePoints,
        backoff: { initialMs: 250, maxMs: 2_000 },
      };
      child.send({ type: 'config', config: cfg });
    }
    await Promise.race([Promise.all(readies), sleep(120_000).then(() => Promise.reject(new Error('workers not ready in 120 s')))]);
    const initialOwners = await owners(st, channels);
    const t0 = Date.now() + 500;
    for (const c of children) c.send({ type: 'start', t0 });
    // The steady phase (its CPU figures and the faults' times) starts once every viewer is welcomed, not while the
    // connection storm still queues behind the ramp: a fault then measures recovery, not the first connects.
    await sleep(Math.max(0, t0 + rampS * 1000 - Date.now()));
    const connectedNow = (): number => [...latest.values()].reduce((n, c) => n + c.connected, 0);
    while (connectedNow() < viewers && Date.now() < t0 + viewerConnectDeadlineMs) await sleep(250);
    if (connectedNow() < viewers)
      warnings.push(
        `${viewers - connectedNow()} viewers were not welcomed ${viewerConnectDeadlineMs} ms after the start: the steady phase began without them`,
      );
    const steadyAt = Date.now();
    log(`${connectedNow()}/${viewers} viewers welcomed ${steadyAt - t0} ms after the start; steady phase`);
    const actEnd = steadyAt + o.durationS * 1000;
    // Steady-phase CPU per process: from the end of the ramp to the first fault.
    const natsPid = findListeningPid(Number(new URL(natsUrl).port || 4222));
    const cpuWatch = new SteadyCpuWatch(
      [
        ...cl.processes.flatMap((p) => (p.pid === undefined ? [] : [{ name: p.name, pid: p.pid }])),
        ...(natsPid === null ? [] : [{ name: 'nats-server', pid: natsPid }]),
        ...children.flatMap((c) => (c.pid === undefined ? [] : [{ name: 'viewer workers', pid: c.pid }])),
        { name: 'harness (games, probes)', pid: process.pid },
      ],
      C,
    );
    const cpuWatchStarted = sleep(Math.max(0, steadyAt - Date.now())).then(() => cpuWatch.start());
    progress = setInterval(() => {
      const s = emptyFailoverCounters();
      for (const c of latest.values()) for (const k of Object.keys(s) as Array<keyof FailoverCounters>) s[k] += c[k];
      log(
        `+${((Date.now() - t0) / 1000).toFixed(0)} s: connected ${s.connected}/${viewers}, acts ${s.actsSent} sent ${s.actsAcked} acked ${s.actsRefused} refused, stakes ${s.stakesSent}/${s.stakesAcked}, batches seen ${games.reduce((n, g) => n + g.evs.length, 0)}`,
      );
    }, 5_000);

    // Faults, in the order given.
    const shardNames = cl.processes.filter((p) => p.service === 'crowd-engine').map((p) => p.name);
    const atFault = async (frac: number): Promise<void> => sleep(Math.max(0, steadyAt + frac * o.durationS * 1000 - Date.now()));
    /**
     * Probes for `chans`, pre-connected (welcomed, or PROBES_WELCOME_MS passed) before the fault and armed at it.
     * A probe's channel k sits on gateway (k + 1) mod G, away from its game's.
     */
    const probesFor = async (fault: string, chans: string[]): Promise<ProbeSet> => {
      const ks = chans.map((ch) => chIndex.get(ch)!);
      const viewerIds = ks.map((k) => probeViewerId(fault, k));
      const tokens = await Promise.all(viewerIds.map((v) => minter.mint(v)));
      const set = new ProbeSet({
        urlOf: (i) => urls[(ks[i]! + 1) % gateways]!,
        channels: chans,
        viewers: viewerIds,
        tokens,
        arrivalOf: (ch, v) => gameOf.get(ch)!.probeArrivals.get(v),
        intervalMs: probeIntervalMs,
        ackTimeoutMs: 3_000,
        localAddress: `127.0.1.${1 + probeSets.length}`,
      });
      probeSets.push(set);
      const from = Date.now();
      await set.welcomed(from + PROBES_WELCOME_MS);
      if (set.welcomedNow < chans.length)
        warnings.push(
          `${fault}: ${chans.length - set.welcomedNow} of ${chans.length} probes were not welcomed ${PROBES_WELCOME_MS} ms before the fault`,
        );
      log(`${fault}: ${set.welcomedNow}/${chans.length} probes welcomed in ${Date.now() - from} ms`);
      return set;
    };
    interface ShardFault {
      shard: string | null;
      at: number;
      before: Map<string, OwnerRow>;
      chans: string[];
      probes: ProbeSet | null;
      /** The fault's set of shard probes (ShardProbeHost id). */
      shardProbes: number | null;
    }
    const noFault = (): ShardFault => ({ shard: null, at: 0, before: new Map(), chans: [], probes: null, shardProbes: null });
    let kill = noFault();
    let drain = noFault();
    let routerFault: { at: number; restartMs: number | null; chans: string[]; probes: ProbeSet | null } | null = null;
    /** The postgres fault: when the stop began, how long the fast shutdown took, when the server accepted again. */
    let pgFault: { at: number; stopMs: number | null; upAt: number | null } | null = null;
    let drainExit: FailoverReport['timeline']['drainExit'] = null;
    let gwName: string | null = null;
    let gwAt = 0;
    let gwRestartMs: number | null = null;
    const restarts: Array<Promise<void>> = [];
    const shardFault = async (kind: 'kill' | 'drain'): Promise<ShardFault> => {
      const before = await owners(st, channels);
      const other = kind === 'kill' ? drain.shard : kill.shard;
      const shard = busiest(
        before,
        shardNames.filter((x) => x !== other && cl.get(x).running),
      );
      if (!shard) {
        warnings.push(`no live shard owned a channel at the ${kind}`);
        return noFault();
      }
      const chans = [...before.values()].filter((r) => r.owner === shard && gameOf.get(r.id)!.connected).map((r) => r.id);
      const probes = await probesFor(kind, chans);
      const shardProbes = await sp.create({
        gateway: `fo-probe-${kind}`,
        channels: chans,
        viewers: chans.map((ch) => probeViewerId(`shard-${kind}`, chIndex.get(ch)!)),
        mode: kind === 'kill' ? 'dead' : 'moving',
        intervalMs: probeIntervalMs,
      });
      const at = Date.now();
      const h = cl.get(shard);
      if (kind === 'drain')
        void h.exited().then((e) => {
          drainExit = { ms: Date.now() - at, code: e.code, signal: e.signal };
          return sp.ownerGone(shardProbes).catch((err: unknown) => void warnings.push(`shard probes: ${(err as Error).message}`));
        });
      h.signal(kind === 'kill' ? 'SIGKILL' : 'SIGTERM');
      probes.arm();
      await sp.arm(shardProbes, at);
      log(`${kind === 'kill' ? 'SIGKILL' : 'SIGTERM'} ${shard} (${chans.length} channels with a game, probed)`);
      return { shard, at, before, chans, probes, shardProbes };
    };
    let lastProbes: ProbeSet | null = null;
    let lastShardProbes: number | null = null;
    let lastFaultAt = 0;
    for (let f = 0; f < faults.length; f++) {
      await atFault(faultsAt[f]!);
      if (f === 0) {
        await cpuWatchStarted;
        steadyCpu = cpuWatch.stop();
      }
      // One fault at a time: the next waits (up to FAULT_GAP_MS past its time) for the last one's probes to recover.
      const gapUntil = Date.now() + FAULT_GAP_MS;
      const lastSet = lastShardProbes as number | null;
      await Promise.all([(lastProbes as ProbeSet | null)?.settle(gapUntil), lastSet === null ? null : sp.settle(lastSet, gapUntil)]);
      const fault = faults[f]!;
      lastFaultAt = Date.now();
      if (fault === 'kill') ({ probes: lastProbes, shardProbes: lastShardProbes } = kill = await shardFault('kill'));
      else if (fault === 'drain') ({ probes: lastProbes, shardProbes: lastShardProbes } = drain = await shardFault('drain'));
      else if (fault === 'gateway') {
        const name = `gw-${gateways}`;
        gwName = name;
        gwAt = Date.now();
        log(`restarting ${name}`);
        restarts.push(
          cl
            .get(name)
            .restart()
            .then(
              () => {
                gwRestartMs = Date.now() - gwAt;
                log(`${name} ready again after ${gwRestartMs} ms`);
              },
              (err: unknown) => void warnings.push(`${name} did not restart: ${(err as Error).message.split('\n')[0]}`),
            ),
        );
      } else if (fault === 'postgres') {
        const pg = ownPg!;
        const r = { at: Date.now(), stopMs: null as number | null, upAt: null as number | null };
        pgFault = r;
        lastProbes = null;
        lastShardProbes = null;
        log(`stopping PostgreSQL (fast shutdown); starting it again in ${postgresDownMs} ms`);
        restarts.push(
          (async () => {
            await pg.stop();
            r.stopMs = Date.now() - r.at;
            await sleep(Math.max(0, r.at + postgresDownMs - Date.now()));
            await pg.start();
            r.upAt = Date.now();
            log(`PostgreSQL accepting again ${r.upAt - r.at} ms after its stop began`);
          })().catch((err: unknown) => void warnings.push(`PostgreSQL did not start again: ${(err as Error).message.split('\n')[0]}`)),
        );
      } else {
        const step = Math.max(1, Math.floor(liveGames.length / ROUTER_PROBES));
        const chans = liveGames
          .filter((_, i) => i % step === 0)
          .slice(0, ROUTER_PROBES)
          .map((g) => g.channel);
        const probes = await probesFor('router', chans);
        const r = { at: Date.now(), restartMs: null as number | null, chans, probes };
        lastProbes = probes;
        lastShardProbes = null;
        routerFault = r;
        const h = cl.get('router');
        h.signal('SIGKILL');
        probes.arm();
        log(`SIGKILL router (${chans.length} channels probed); restart in ${routerDownMs} ms`);
        restarts.push(
          (async () => {
            await h.exited();
            await sleep(Math.max(0, r.at + routerDownMs - Date.now()));
            await h.restart();
            r.restartMs = Date.now() - r.at;
            log(`router ready again ${r.restartMs} ms after its kill`);
          })().catch((err: unknown) => void warnings.push(`router did not restart: ${(err as Error).message.split('\n')[0]}`)),
        );
      }
    }
    // Acting goes on at least ACT_AFTER_FAULT_MS after the last fault (one delayed by its predecessor's probes included).
    await sleep(Math.max(0, actEnd - Date.now(), lastFaultAt + ACT_AFTER_FAULT_MS - Date.now()));
    if (steadyCpu === null) {
      await cpuWatchStarted;
      steadyCpu = cpuWatch.stop();
    }
    await Promise.all(restarts);

    // End: stop acting, finish the rounds, collect.
    log('acting stops; settling the last rounds');
    const endedGames = games.filter((g) => g.connected && g.client.state === 'closed');
    for (const c of children) c.send({ type: 'stop', drainMs: 8_000, reconnectWaitMs: 30_000 });
    await Promise.all(games.map((g) => g.stopRounds(30_000)));
    const finalDeadline = Date.now() + 45_000;
    while (finals.size < workers && Date.now() < finalDeadline && children.some((c) => c.exitCode === null && c.signalCode === null))
      await new Promise<void>((r) => {
        finalWaiters.push(r);
        setTimeout(r, 1_000);
      });
    // The last batches (a tick, the bus) and the rounds' payouts: a round its game could not settle is cancelled and
    // refunded by the server within ROUND_UNSETTLED_MAX_MS of its deadline (all deadlines have passed by now).
    let unpaid = -1;
    for (const until = Date.now() + Math.max(20_000, roundUnsettledMaxMs + 10_000); ;) {
      const { rows } = await st.db.query<{ n: string }>(
        'SELECT count(*) AS n FROM rounds WHERE channel_id = ANY($1) AND NOT (paid AND state IN ($2, $3))',
        [channels, 'settled', 'cancelled'],
      );
      unpaid = Number(rows[0]!.n);
      if (unpaid === 0 || Date.now() > until) break;
      await sleep(500);
    }
    // Every batch logged by now reaches its game before the count: under overload the gateways can be tens of
    // seconds behind the shards, and a batch still on its way is not a lost one.
    const { rows: newest } = await st.db.query<{ channel_id: string; ev: string }>(
      `SELECT channel_id, max(event_id) AS ev FROM channel_events WHERE kind = 'batch' AND channel_id = ANY($1) GROUP BY channel_id`,
      [channels],
    );
    const undelivered = (): number => newest.filter((r) => !gameOf.get(r.channel_id)!.arrivedAt.has(Number(r.ev))).length;
    for (const until = Date.now() + DELIVERY_WAIT_MS; undelivered() > 0 && Date.now() < until;) await sleep(250);
    const stillUndelivered = undelivered();
    if (stillUndelivered > 0)
      warnings.push(
        `${stillUndelivered} channels' newest logged batch had not reached their game ${DELIVERY_WAIT_MS} ms after acting stopped`,
      );
    if (progress) clearInterval(progress);
    progress = null;
    const probeResults = new Map<ProbeSet, ProbeResult[]>();
    for (const set of probeSets) probeResults.set(set, await set.stop());
    const shardProbeResults: Map<number, ShardProbeResult[]> = await sp.stop();

    // ---------------------------------------------------------------- analysis
    const fin = [...finals.values()];
    if (fin.length < workers)
      warnings.push(`${workers - fin.length} workers sent no final report: their viewers are missing from the figures`);
    const sum = emptyFailoverCounters();
    for (const f of fin) for (const k of Object.keys(sum) as Array<keyof FailoverCounters>) sum[k] += f.counters[k];
    const refusedByCode: Record<string, number> = {};
    const failedByCode: Record<string, number> = {};
    const retriedByCode: Record<string, number> = {};
    const dropsByCode: Record<string, number> = {};
    const reconnectFailedByCode: Record<string, number> = {};
    const reconnect: number[] = [];
    const welcome: number[] = [];
    const stakes: AckedStake[] = [];
    const ackedByChannel = new Map<string, Map<string, number[]>>(channels.map((ch) => [ch, new Map()]));
    const actAck = newHistogram();
    let cpuAvg = 0;
    let cpuPeak = 0;
    for (const f of fin) {
      for (const [k, v] of Object.entries(f.refusedByCode)) refusedByCode[k] = (refusedByCode[k] ?? 0) + v;
      for (const [k, v] of Object.entries(f.connectFailedByCode)) failedByCode[k] = (failedByCode[k] ?? 0) + v;
      for (const [k, v] of Object.entries(f.connectRetriedByCode)) retriedByCode[k] = (retriedByCode[k] ?? 0) + v;
      for (const [k, v] of Object.entries(f.dropsByCode)) dropsByCode[k] = (dropsByCode[k] ?? 0) + v;
      for (const [k, v] of Object.entries(f.reconnectFailedByCode)) reconnectFailedByCode[k] = (reconnectFailedByCode[k] ?? 0) + v;
      reconnect.push(...f.reconnectMs);
      welcome.push(...f.welcomeMs);
      stakes.push(...f.stakes);
      for (const [i, row] of Object.entries(f.acked)) ackedByChannel.get(channels[Number(i) % C]!)!.set(viewerId(Number(i)), row);
      addEncoded(actAck, f.actAck);
      cpuAvg = Math.max(cpuAvg, f.cpu.avgPct);
      cpuPeak = Math.max(cpuPeak, f.cpu.peakPct);
    }

    // Event log: each batch's epoch (which owner closed it).
    const { rows: evRows } = await st.db.query<{ channel_id: string; event_id: string; epoch: string }>(
      `SELECT channel_id, event_id, epoch FROM channel_events WHERE kind = 'batch' AND channel_id = ANY($1)`,
      [channels],
    );
    const epochOf = new Map<string, Map<number, number>>(channels.map((ch) => [ch, new Map()]));
    for (const r of evRows) epochOf.get(r.channel_id)!.set(Number(r.event_id), Number(r.epoch));
    // Batches in the event log that the channel's game client never received (a gap in what it saw).
    let batchesNotReceived = 0;
    const notReceivedSamples: string[] = [];
    for (const g of games) {
      for (const [ev, ep] of epochOf.get(g.channel)!) {
        if (g.arrivedAt.has(ev)) continue;
        batchesNotReceived++;
        if (notReceivedSamples.length < 20) notReceivedSamples.push(`${g.channel} ev ${ev} (epoch ${ep})`);
      }
    }
    /**
     * Recovery per probed channel: fault → the first probe intent at the game (an acked probe is required: an intent
     * in a batch was accepted); move: the router's declared-dead instant → the same arrival.
     */
    const declaredDead = (shard: string | null, at: number): number | null =>
      routerLog.find((l) => l.msg.includes('declared dead') && l.shard === shard && l.seenAt >= at)?.declaredDeadAtMs ?? null;
    const recovery = (
      shard: string | null,
      at: number,
      probes: ProbeSet | null,
      deadAt: number | null,
      shardProbes: number | null = null,
    ): RecoveryFigures => {
      const results = probes ? probeResults.get(probes)! : [];
      const xs: number[] = [];
      const moves: number[] = [];
      const notRecovered: string[] = [];
      const failedByCode: Record<string, number> = {};
      let sent = 0;
      let acked = 0;
      for (const p of results) {
        sent += p.sent;
        acked += p.acked;
        for (const [k, v] of Object.entries(p.failedByCode)) failedByCode[k] = (failedByCode[k] ?? 0) + v;
        if (p.arrivedAt === null || p.acked === 0)
          notRecovered.push(`${p.channel}: sent ${p.sent}, acked ${p.acked}, ${JSON.stringify(p.failedByCode)}`);
        else {
          xs.push(Math.max(0, p.arrivedAt - at));
          if (deadAt !== null) moves.push(Math.max(0, p.arrivedAt - deadAt));
        }
      }
      return {
        ...msFigures(xs),
        shard,
        atMs: probes ? at - t0 : null,
        channels: results.length,
        recovered: xs.length,
        notRecovered: notRecovered.slice(0, 50),
        detectionMs: deadAt === null ? null : deadAt - at,
        moveMs: msFigures(moves),
        probes: { sent, acked, failedByCode },
        atShard: shardProbes === null ? null : shardRecoveryFigures(shardProbeResults.get(shardProbes) ?? [], deadAt),
      };
    };
    const killFig = recovery(kill.shard, kill.at, kill.probes, kill.shard ? declaredDead(kill.shard, kill.at) : null, kill.shardProbes);
    const drainFig = recovery(drain.shard, drain.at, drain.probes, null, drain.shardProbes);
    const rf = routerFault as { at: number; restartMs: number | null; chans: string[]; probes: ProbeSet | null } | null;
    const routerFig = rf ? recovery('router', rf.at, rf.probes, null) : null;
    const pf = pgFault as { at: number; stopMs: number | null; upAt: number | null } | null;
    const postgresFig = pf?.upAt ? await firstWritesAfter(st, pf.upAt) : null;
    const killedSet = new Set(kill.chans);
    const drainedSet = new Set(drain.chans.filter((ch) => !killedSet.has(ch)));
    // Probes' acked intents count like the viewers' (intentsLost).
    for (const res of probeResults.values())
      for (const p of res) if (p.acked > 0) ackedByChannel.get(p.channel)!.set(p.viewer, [p.acked, 0, 0]);

    // Moves (channels table at the end).
    const endOwners = await owners(st, channels);
    const movedFrom = (shard: string | null, before: Map<string, OwnerRow>, chans: string[]): number =>
      chans.filter((ch) => {
        const e = endOwners.get(ch);
        return e !== undefined && e.epoch > before.get(ch)!.epoch && e.owner !== shard;
      }).length;
    const movedKilled = movedFrom(kill.shard, kill.before, kill.chans);
    const movedDrained = movedFrom(drain.shard, drain.before, drain.chans);
    let epochBumps = 0;
    for (const [ch, r] of initialOwners) epochBumps += (endOwners.get(ch)?.epoch ?? r.epoch) - r.epoch;

    // Intents.
    const lost = { killed: 0, drained: 0, other: 0, total: 0 };
    let counted = 0;
    let droppedOverCap = 0;
    const lostSamples: string[] = [];
    for (const g of games) {
      const acked = ackedByChannel.get(g.channel)!;
      const n = lostIntents(acked, g.counted);
      const cls = killedSet.has(g.channel) ? 'killed' : drainedSet.has(g.channel) ? 'drained' : 'other';
      if (n > 0 && lostSamples.length < 20)
        for (const [viewer, a] of acked) {
          const got = g.counted.get(viewer) ?? [0, 0, 0];
          if (a.some((x, k) => x > got[k]!))
            lostSamples.push(`${g.channel} (${cls}) ${viewer}: acked ${a.join('/')}, counted ${got.join('/')}; ${g.describe(t0)}`);
        }
      lost[cls] += n;
      lost.total += n;
      counted += g.intents;
      droppedOverCap += g.dropped;
    }
    if (droppedOverCap > 0)
      warnings.push(`${droppedOverCap} intents over maxPerTick were tallied, not listed: intentsLost over-counts them`);

    // Stakes: each acked stake's transfer is in the ledger and its round was settled or cancelled, and paid.
    const { rows: roundRows } = await st.db.query<{ channel_id: string; id: string; uid: string; state: string; paid: boolean }>(
      'SELECT channel_id, id, uid, state, paid FROM rounds WHERE channel_id = ANY($1)',
      [channels],
    );
    const roundBy = new Map(roundRows.map((r) => [`${r.channel_id}/${r.id}`, r]));
    const { rows: stakeRows } = await st.db.query<{ id: string; amount: string }>(`SELECT id, amount FROM transfers WHERE kind = 'stake'`);
    const stakeTransfers = new Map(stakeRows.map((r) => [r.id, Number(r.amount)]));
    let stakesLost = 0;
    const stakeSamples: string[] = [];
    for (const s of stakes) {
      const r = roundBy.get(`${s.channel}/${s.round}`);
      const id = r ? `${r.uid}:s:${stakeHash(viewerId(s.v), s.key)}` : null;
      const amount = id === null ? undefined : stakeTransfers.get(id);
      const why =
        r === undefined
          ? 'round not in the rounds table'
          : amount === undefined
            ? 'no stake transfer'
            : amount !== s.points
              ? `transfer of ${amount}, acked ${s.points}`
              : !(r.paid && (r.state === 'settled' || r.state === 'cancelled'))
                ? `round ${r.state}${r.paid ? '' : ', unpaid'}`
                : null;
      if (why === null) continue;
      stakesLost++;
      if (stakeSamples.length < 10) stakeSamples.push(`${viewerId(s.v)} ${s.channel}/${s.round} ${s.points}: ${why}`);
    }

    // Ledger.
    let ledgerVerify: FailoverReport['ledgerVerify'];
    try {
      const v = await verifyLedger(st.db);
      ledgerVerify = v.ok ? 'ok' : { failed: v.failures.map((f) => ({ check: f.check, detail: f.detail })) };
    } catch (err) {
      ledgerVerify = { error: (err as Error).message };
    }

    const duplicateEventIds = games.reduce((n, g) => n + g.duplicates, 0);
    const nonMonotonicEventIds = games.reduce((n, g) => n + g.nonMonotonic, 0);
    const rounds = games.flatMap((g) => g.rounds);
    const reconnectFig = msFigures(reconnect);
    const viewersFailed = sum.viewersDropped - sum.viewersReconnected;
    const t = (
      value: number | string | null,
      limit: string,
      ok: boolean,
      kind: FailoverTarget['kind'] = 'correctness',
    ): FailoverTarget => ({ value, limit, ok, kind });
    const figs = [killFig, drainFig, ...(routerFig ? [routerFig] : [])];
    const drainTarget = drainTargetMs(C);
    const probedN = figs.reduce((n, f) => n + f.channels, 0);
    const recoveredN = figs.reduce((n, f) => n + f.recovered, 0);
    const targets: Record<string, FailoverTarget> = {
      stakesLost: t(stakesLost, '= 0', stakesLost === 0),
      duplicateEventIds: t(duplicateEventIds, '= 0', duplicateEventIds === 0),
      nonMonotonicEventIds: t(nonMonotonicEventIds, '= 0', nonMonotonicEventIds === 0),
      ledgerVerify: t(ledgerVerify === 'ok' ? 'ok' : 'failed', 'ok', ledgerVerify === 'ok'),
      intentsLostDrained: t(lost.drained, '= 0', lost.drained === 0),
      // Channels no fault touched have no excuse (the killed shard's open tick is the only loss a run may show).
      intentsLostOther: t(lost.other, '= 0', lost.other === 0),
      viewersFailed: t(viewersFailed, '= 0', viewersFailed === 0),
      channelsRecovered: t(`${recoveredN}/${probedN}`, 'all (every moved or probed channel batches again)', recoveredN === probedN),
      gamesNotConnected: t(gamesNotConnected, '= 0', gamesNotConnected === 0),
      viewersNotConnected: t(sum.connectFailed, '= 0', sum.connectFailed === 0),
      unexpectedExits: t(unexpectedExits.length, '= 0', unexpectedExits.length === 0),
      ...(faults.includes('kill') && {
        recoveryMsKillMax: t(
          killFig.max,
          `≤ ${TARGET_KILL_RECOVERY_MS}`,
          killFig.max !== null && killFig.max <= TARGET_KILL_RECOVERY_MS,
          'timing',
        ),
        recoveryMsKillMaxAtShard: t(
          killFig.atShard?.max ?? null,
          `≤ ${TARGET_KILL_RECOVERY_MS}`,
          (killFig.atShard?.max ?? Infinity) <= TARGET_KILL_RECOVERY_MS,
          'timing',
        ),
        moveMsKillMaxAtShard: t(
          killFig.atShard?.moveMs.max ?? null,
          `≤ ${TARGET_KILL_MOVE_MS}`,
          (killFig.atShard?.moveMs.max ?? Infinity) <= TARGET_KILL_MOVE_MS,
          'timing',
        ),
      }),
      ...(faults.includes('drain') && {
        recoveryMsDrainMax: t(drainFig.max, `≤ ${drainTarget}`, drainFig.max !== null && drainFig.max <= drainTarget, 'timing'),
        recoveryMsDrainMaxAtShard: t(
          drainFig.atShard?.max ?? null,
          `≤ ${drainTarget}`,
          (drainFig.atShard?.max ?? Infinity) <= drainTarget,
          'timing',
        ),
      }),
      ...(faults.includes('gateway') && {
        reconnectMsMax: t(
          reconnectFig.max,
          `≤ ${TARGET_RECONNECT_MS}`,
          reconnectFig.max !== null && reconnectFig.max <= TARGET_RECONNECT_MS,
          'timing',
        ),
      }),
    };
    if (faults.includes('gateway') && sum.viewersDropped === 0)
      warnings.push('no viewer dropped at the gateway restart: reconnectMs has no sample');
    if (sum.connectFailed > 0) warnings.push(`${sum.connectFailed} viewers never connected: ${JSON.stringify(failedByCode)}`);
    const correct = Object.values(targets).every((x) => x.ok || x.kind === 'timing');
    report = {
      scenario: 'failover',
      command: o.command ?? `runFailoverScenario(${JSON.stringify({ gateways, shards, viewers, channels: C, durationS: o.durationS })})`,
      startedAt: new Date(started).toISOString(),
      machine: machineInfo(),
      config: {
        gateways,
        shards,
        viewers,
        channels: C,
        durationS: o.durationS,
        rampS,
        actIntervalMs,
        roundMs,
        welcomeGrant,
        stakePoints,
        ackTimeoutMs,
        workers,
        viewersPerAddress: perAddress,
        sourceAddresses: addresses,
        databaseSchema: schema,
        subjectPrefix,
        redisPrefix,
        gatewayPorts: Array.from({ length: gateways }, (_, i) => basePort + i),
        faults,
        faultsAt,
        gameConnectDeadlineMs,
        viewerConnectDeadlineMs,
        gameConnectConcurrency,
        probeIntervalMs,
        routerDownMs,
        postgresDownMs,
        postgresServer: ownPg
          ? `private, ${Object.entries(PRIVATE_POSTGRES_SETTINGS)
              .map(([k, v]) => `${k}=${v}`)
              .join(', ')}`
          : 'given',
        roundUnsettledMaxMs,
      },
      timeline: {
        killed: kill.shard,
        killAtMs: kill.shard ? kill.at - t0 : null,
        drained: drain.shard,
        drainAtMs: drain.shard ? drain.at - t0 : null,
        drainExit,
        restartedGateway: gwName,
        gatewayRestartAtMs: gwName ? gwAt - t0 : null,
        gatewayRestartMs: gwRestartMs,
        routerKilledAtMs: rf ? rf.at - t0 : null,
        routerRestartMs: rf ? rf.restartMs : null,
        postgresStoppedAtMs: pf ? pf.at - t0 : null,
        postgresStopMs: pf ? pf.stopMs : null,
        postgresBackMs: pf?.upAt ? pf.upAt - pf.at : null,
        unexpectedExits,
      },
      channelsMoved: {
        killed: movedKilled,
        drained: movedDrained,
        total: movedKilled + movedDrained,
        other: Math.max(0, epochBumps - movedKilled - movedDrained),
      },
      recoveryMs: { kill: killFig, drain: drainFig, router: routerFig, postgres: postgresFig },
      routerLog: routerLog.map((l) => ({ ...l, seenAt: l.seenAt - t0 })),
      games: {
        channels: C,
        connected: liveGames.length,
        notConnected: gamesNotConnected,
        notConnectedSample: games
          .filter((g) => !g.connected)
          .slice(0, 20)
          .map((g) => g.channel),
        connectMs: msFigures(gameConnectMs),
        connectFailedByCode: sumCodes(games.map((g) => g.connectFailedByCode)),
        errorsByCode: sumCodes(games.map((g) => g.errors)),
        closesByCode: sumCodes(games.map((g) => g.closesByCode)),
        ended: endedGames.length,
        endedSample: endedGames.slice(0, 10).map((g) => `${g.channel}: ${g.describe(t0)}`),
      },
      intents: {
        sent: sum.actsSent,
        acked: sum.actsAcked,
        refused: sum.actsRefused,
        refusedByCode,
        closed: sum.actsClosed,
        unanswered: sum.actsUnanswered,
        counted,
        droppedOverCap,
      },
      intentsLost: lost,
      stakes: {
        sent: sum.stakesSent,
        acked: sum.stakesAcked,
        refused: sum.stakesRefused,
        closed: sum.stakesClosed,
        unanswered: sum.stakesUnanswered,
      },
      stakesLost,
      stakesLostSamples: stakeSamples,
      intentsLostSamples: lostSamples.slice(0, 20),
      batchesNotReceived,
      batchesNotReceivedSamples: notReceivedSamples,
      rounds: {
        opened: rounds.length,
        settledByGame: rounds.filter((r) => r.end === 'settled').length,
        finalBeforeSettle: rounds.filter((r) => r.end === 'final').length,
        unpaidAtEnd: unpaid,
      },
      duplicateEventIds,
      nonMonotonicEventIds,
      gameResyncs: games.reduce((n, g) => n + g.resyncs, 0),
      viewersDropped: sum.viewersDropped,
      viewersReconnected: sum.viewersReconnected,
      viewersFailed,
      reconnectMs: reconnectFig,
      dropsByCode,
      reconnectFailedByCode,
      ledgerVerify,
      actAckMs: summarize(actAck),
      connections: {
        requested: viewers,
        connected: sum.connected,
        failed: sum.connectFailed,
        welcomeMs: msFigures(welcome),
        failedByCode,
        retriedByCode,
      },
      generatorCpuPct: { avg: Math.round(cpuAvg), peak: Math.round(cpuPeak) },
      steadyCpu,
      errorLogLines: errorCount,
      errorLogSamples: errorLines,
      targets,
      correct,
      elapsedS: 0,
      warnings,
    };
  } finally {
    if (progress) clearInterval(progress);
    await Promise.all(probeSets.map((p) => p.stop().catch(() => undefined)));
    await shardProbes?.kill();
    for (const c of children) if (c.connected) c.send({ type: 'exit' });
    await Promise.all(children.map((c) => waitExit(c, 10_000)));
    await Promise.all(games.map((g) => g.client.close().catch(() => undefined)));
    // The figures are in: no drain needed (the last shards would each wait out SHUTDOWN_DEADLINE_MS with nowhere to go).
    for (const p of cluster?.processes ?? []) p.signal('SIGKILL');
    await cluster?.stop().catch(() => undefined);
    await store?.close().catch(() => undefined);
    if (ownPg) await ownPg.close().catch((err: unknown) => log(`could not remove the private PostgreSQL: ${(err as Error).message}`));
    else
      await dropSchema(databaseUrl, schema).catch((err: unknown) => {
        const m = `could not drop schema ${schema}: ${(err as Error).message}`;
        if (report) report.warnings.push(m);
        else log(m);
      });
    if (purgeSendqKeys(redisUrl, `${redisPrefix}:render`) === null || purgeSendqKeys(redisUrl, redisPrefix) === null)
      warnings.push(`redis-cli failed or missing: the run's keys {${redisPrefix}}* were not removed`);
  }
  report.elapsedS = Math.round((Date.now() - started) / 100) / 10;
  log(`done in ${report.elapsedS} s`);
  return report;
}
