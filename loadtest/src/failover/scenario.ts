/**
 * The `failover` load scenario: a local cluster (`startCluster`,
 * the bundle `npm run cluster` runs) on the machine's NATS, Redis and
 * PostgreSQL, isolated by its own schema, subject prefix and Redis prefixes
 * (removed afterwards); one sdk-game client per channel running pool rounds
 * and receiving batches (games.ts); viewers in forked workers (worker.ts)
 * acting and staking. Mid-run it SIGKILLs the shard owning the most
 * channels, SIGTERMs (drains) the live shard owning the most, and restarts
 * the last gateway; then it checks the failover targets (report.ts, README
 * "failover").
 */
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import WebSocket from 'ws';
import { CLUSTER_DEFAULTS, startCluster, type Cluster } from '@crowdplay/cli';
import { verifyLedger } from '@crowdplay/ledger';
import { CrowdplayError } from '@crowdplay/protocol';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import { openStore, type Store } from '@crowdplay/store';
import { machineInfo } from '../crowd/scenario.ts';
import { forkTs, waitExit } from '../fork.ts';
import { addEncoded, newHistogram, summarize } from '../hist.ts';
import { createTokenMinter } from '../tokens.ts';
import { buildProductBundle, dropSchema, purgeSendqKeys } from '../rollover/product.ts';
import { ChannelGame } from './games.ts';
import {
  ACTION,
  OPTIONS,
  emptyFailoverCounters,
  type AckedStake,
  type FailoverCounters,
  type FailoverWorkerConfig,
  type FailoverWorkerFinal,
  type FailoverWorkerMessage,
  viewerId,
} from './ipc.ts';
import type { FailoverReport, FailoverTarget, MsFigures, RecoveryFigures } from './report.ts';

/** The services the cluster uses when none are named: `crowdplay cluster`'s defaults (this machine's). */
export const FAILOVER_DEFAULTS = CLUSTER_DEFAULTS;

/** The failover's timing targets, ms. */
export const TARGET_KILL_RECOVERY_MS = 5_000;
export const TARGET_DRAIN_RECOVERY_MS = 1_000;
export const TARGET_RECONNECT_MS = 10_000;
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
  /** Fault times as fractions of the steady phase: SIGKILL, SIGTERM, gateway restart. @defaultValue [0.25, 0.5, 0.7] */
  faultsAt?: [number, number, number];
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

/** Nearest-rank p50 and max of ms samples. */
export function msFigures(xs: number[]): MsFigures {
  if (xs.length === 0) return { count: 0, p50: null, max: null };
  const s = [...xs].sort((a, b) => a - b);
  return { count: s.length, p50: s[Math.max(0, Math.ceil(s.length / 2) - 1)]!, max: s[s.length - 1]! };
}

/** sha256(viewer ␀ key) base64url[0..22): the crowd-engine's stake idempotency hash (rounds.ts hashOf), part of the stake's transfer id. */
export function stakeHash(viewer: string, key: string): string {
  return createHash('sha256').update(viewer).update('\u0000').update(key).digest('base64url').slice(0, 22);
}

/** A free TCP port p on 127.0.0.1 with p + 1 … p + n − 1 free too (the cluster's gateways take consecutive ports). */
async function freePorts(n: number): Promise<number> {
  const tryPort = (p: number): Promise<boolean> =>
    new Promise((resolve) => {
      const s = net.createServer();
      s.once('error', () => resolve(false));
      s.listen(p, '127.0.0.1', () => s.close(() => resolve(true)));
    });
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 20_000);
    let ok = true;
    for (let i = 0; i < n && ok; i++) ok = await tryPort(base + i);
    if (ok) return base;
  }
  throw new Error(`no ${n} consecutive free ports found`);
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

/**
 * Probes a channel: one viewer acts until an act is accepted (the game's declaration is in effect).
 * @returns a warning, or null when accepted
 */
async function probe(url: string, channel: string, token: string): Promise<string | null> {
  const v = new ViewerClient({ url, channel, token, WebSocket, autoReconnect: false, wsOptions: { perMessageDeflate: false } });
  try {
    await v.connect();
    const until = Date.now() + 20_000;
    for (;;) {
      const ack = await Promise.race([v.act(ACTION, OPTIONS[0]), sleep(3_000).then(() => null)]);
      if (ack?.ok) return null;
      if (ack && ack.code !== 'CP_ERR_INTENT_NO_GAME' && ack.code !== 'CP_ERR_INTENT_UNKNOWN_ACTION')
        return `probe on ${channel}: refused with ${ack.code ?? '?'}`;
      if (Date.now() > until) return `probe on ${channel}: the declaration was not in effect after 20 s`;
      await sleep(200);
    }
  } finally {
    await v.close();
  }
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
  const faultsAt = o.faultsAt ?? [0.25, 0.5, 0.7];
  if (!(faultsAt[0] > 0 && faultsAt[0] < faultsAt[1] && faultsAt[1] < faultsAt[2] && faultsAt[2] < 1))
    throw invalid(`faultsAt must be increasing fractions in (0, 1), got ${faultsAt.join(',')}`);
  const natsUrl = o.natsUrl ?? FAILOVER_DEFAULTS.NATS_URL;
  const redisUrl = o.redisUrl ?? FAILOVER_DEFAULTS.REDIS_URL;
  const databaseUrl = o.databaseUrl ?? FAILOVER_DEFAULTS.DATABASE_URL;
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
        ...o.clusterEnv,
      },
      entry: { execArgv: [], script: bundle },
      out: (line) => {
        logFile?.write(`${line}\n`);
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
    const tenant = await st.tenants.create('failover', 'Failover load');
    const apiKey = tenant.apiKey;
    const secret = tenant.tenant.signingSecret;

    // Games: channel k on gateway k mod G.
    for (let k = 0; k < C; k++) {
      games.push(new ChannelGame(channels[k]!, urls[k % gateways]!, apiKey, { welcomeGrant, roundMs, welcomeDeadlineMs: 15_000 }));
    }
    await Promise.all(games.map((g) => g.client.connect()));
    const minter = await createTokenMinter('failover', secret);
    const probes = await Promise.all(channels.map(async (ch, k) => probe(urls[k % gateways]!, ch, await minter.mint(`probe-${k}`))));
    for (const w of probes) if (w) warnings.push(w);
    log(`${C} game clients declared; starting rounds and ${workers} workers`);
    for (const g of games) g.startRounds();

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
        stakePoints,
        backoff: { initialMs: 250, maxMs: 2_000 },
      };
      child.send({ type: 'config', config: cfg });
    }
    await Promise.race([Promise.all(readies), sleep(120_000).then(() => Promise.reject(new Error('workers not ready in 120 s')))]);
    const initialOwners = await owners(st, channels);
    const t0 = Date.now() + 500;
    for (const c of children) c.send({ type: 'start', t0 });
    const steadyAt = t0 + rampS * 1000;
    const actEnd = steadyAt + o.durationS * 1000;
    progress = setInterval(() => {
      const s = emptyFailoverCounters();
      for (const c of latest.values()) for (const k of Object.keys(s) as Array<keyof FailoverCounters>) s[k] += c[k];
      log(
        `+${((Date.now() - t0) / 1000).toFixed(0)} s: connected ${s.connected}/${viewers}, acts ${s.actsSent} sent ${s.actsAcked} acked ${s.actsRefused} refused, stakes ${s.stakesSent}/${s.stakesAcked}, batches seen ${games.reduce((n, g) => n + g.evs.length, 0)}`,
      );
    }, 5_000);

    // Faults.
    const shardNames = cl.processes.filter((p) => p.service === 'crowd-engine').map((p) => p.name);
    const atFault = async (frac: number): Promise<void> => sleep(Math.max(0, steadyAt + frac * o.durationS * 1000 - Date.now()));
    await atFault(faultsAt[0]);
    const beforeKill = await owners(st, channels);
    const killed = busiest(beforeKill, shardNames);
    const killAt = Date.now();
    if (killed) {
      cl.get(killed).signal('SIGKILL');
      log(`SIGKILL ${killed} (${[...beforeKill.values()].filter((r) => r.owner === killed).length} channels)`);
    } else warnings.push('no shard owned a channel at the kill');
    await atFault(faultsAt[1]);
    const beforeDrain = await owners(st, channels);
    const drained = busiest(
      beforeDrain,
      shardNames.filter((s) => s !== killed),
    );
    const drainAt = Date.now();
    let drainExit: FailoverReport['timeline']['drainExit'] = null;
    if (drained) {
      const h = cl.get(drained);
      void h.exited().then((e) => (drainExit = { ms: Date.now() - drainAt, code: e.code, signal: e.signal }));
      h.signal('SIGTERM');
      log(`SIGTERM ${drained} (${[...beforeDrain.values()].filter((r) => r.owner === drained).length} channels)`);
    } else warnings.push('no live shard owned a channel at the drain');
    await atFault(faultsAt[2]);
    const gwName = `gw-${gateways}`;
    const gwAt = Date.now();
    let gwRestartMs: number | null = null;
    log(`restarting ${gwName}`);
    const restart = cl
      .get(gwName)
      .restart()
      .then(
        () => {
          gwRestartMs = Date.now() - gwAt;
          log(`${gwName} ready again after ${gwRestartMs} ms`);
        },
        (err: unknown) => warnings.push(`${gwName} did not restart: ${(err as Error).message.split('\n')[0]}`),
      );
    await sleep(Math.max(0, actEnd - Date.now()));
    await restart;

    // End: stop acting, finish the rounds, collect.
    log('acting stops; settling the last rounds');
    for (const c of children) c.send({ type: 'stop', drainMs: 8_000, reconnectWaitMs: 30_000 });
    await Promise.all(games.map((g) => g.stopRounds(30_000)));
    const finalDeadline = Date.now() + 45_000;
    while (finals.size < workers && Date.now() < finalDeadline && children.some((c) => c.exitCode === null && c.signalCode === null))
      await new Promise<void>((r) => {
        finalWaiters.push(r);
        setTimeout(r, 1_000);
      });
    // The last batches (a tick, the bus) and the rounds' payouts.
    let unpaid = -1;
    for (const until = Date.now() + 20_000; ;) {
      const { rows } = await st.db.query<{ n: string }>(
        'SELECT count(*) AS n FROM rounds WHERE channel_id = ANY($1) AND NOT (paid AND state IN ($2, $3))',
        [channels, 'settled', 'cancelled'],
      );
      unpaid = Number(rows[0]!.n);
      if (unpaid === 0 || Date.now() > until) break;
      await sleep(500);
    }
    await sleep(1_500);
    if (progress) clearInterval(progress);
    progress = null;

    // ---------------------------------------------------------------- analysis
    const fin = [...finals.values()];
    if (fin.length < workers)
      warnings.push(`${workers - fin.length} workers sent no final report: their viewers are missing from the figures`);
    const sum = emptyFailoverCounters();
    for (const f of fin) for (const k of Object.keys(sum) as Array<keyof FailoverCounters>) sum[k] += f.counters[k];
    const refusedByCode: Record<string, number> = {};
    const failedByCode: Record<string, number> = {};
    const dropsByCode: Record<string, number> = {};
    const reconnectFailedByCode: Record<string, number> = {};
    const reconnect: number[] = [];
    const stakes: AckedStake[] = [];
    const ackedByChannel = new Map<string, Map<string, number[]>>(channels.map((ch) => [ch, new Map()]));
    const actAck = newHistogram();
    let cpuAvg = 0;
    let cpuPeak = 0;
    for (const f of fin) {
      for (const [k, v] of Object.entries(f.refusedByCode)) refusedByCode[k] = (refusedByCode[k] ?? 0) + v;
      for (const [k, v] of Object.entries(f.connectFailedByCode)) failedByCode[k] = (failedByCode[k] ?? 0) + v;
      for (const [k, v] of Object.entries(f.dropsByCode)) dropsByCode[k] = (dropsByCode[k] ?? 0) + v;
      for (const [k, v] of Object.entries(f.reconnectFailedByCode)) reconnectFailedByCode[k] = (reconnectFailedByCode[k] ?? 0) + v;
      reconnect.push(...f.reconnectMs);
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
    const gameOf = new Map(games.map((g) => [g.channel, g]));
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
    const recovery = (shard: string | null, at: number, before: Map<string, OwnerRow>): { fig: RecoveryFigures; chans: string[] } => {
      const chans = shard ? [...before.values()].filter((r) => r.owner === shard).map((r) => r.id) : [];
      const xs: number[] = [];
      const notRecovered: string[] = [];
      for (const ch of chans) {
        const e0 = before.get(ch)!.epoch;
        const newer = [...epochOf.get(ch)!].filter(([, ep]) => ep > e0).map(([ev]) => ev);
        const t = gameOf.get(ch)!.firstArrivalOf(newer);
        if (t === null) notRecovered.push(ch);
        else xs.push(Math.max(0, t - at));
      }
      return { fig: { ...msFigures(xs), shard, atMs: shard ? at - t0 : null, channels: chans.length, notRecovered }, chans };
    };
    const kill = recovery(killed, killAt, beforeKill);
    const drain = recovery(drained, drainAt, beforeDrain);
    const killedSet = new Set(kill.chans);
    const drainedSet = new Set(drain.chans.filter((ch) => !killedSet.has(ch)));

    // Moves (channels table at the end).
    const endOwners = await owners(st, channels);
    const movedFrom = (shard: string | null, before: Map<string, OwnerRow>, chans: string[]): number =>
      chans.filter((ch) => {
        const e = endOwners.get(ch);
        return e !== undefined && e.epoch > before.get(ch)!.epoch && e.owner !== shard;
      }).length;
    const movedKilled = movedFrom(killed, beforeKill, kill.chans);
    const movedDrained = movedFrom(drained, beforeDrain, drain.chans);
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
            lostSamples.push(`${g.channel} (${cls}) ${viewer}: acked ${a.join('/')}, counted ${got.join('/')}`);
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
    const targets: Record<string, FailoverTarget> = {
      stakesLost: t(stakesLost, '= 0', stakesLost === 0),
      duplicateEventIds: t(duplicateEventIds, '= 0', duplicateEventIds === 0),
      nonMonotonicEventIds: t(nonMonotonicEventIds, '= 0', nonMonotonicEventIds === 0),
      ledgerVerify: t(ledgerVerify === 'ok' ? 'ok' : 'failed', 'ok', ledgerVerify === 'ok'),
      intentsLostDrained: t(lost.drained, '= 0', lost.drained === 0),
      // Channels no fault touched have no excuse (the killed shard's open tick is the only loss a run may show).
      intentsLostOther: t(lost.other, '= 0', lost.other === 0),
      viewersFailed: t(viewersFailed, '= 0', viewersFailed === 0),
      channelsRecovered: t(
        kill.fig.notRecovered.length + drain.fig.notRecovered.length,
        '= 0 (every moved channel batches again)',
        kill.fig.notRecovered.length + drain.fig.notRecovered.length === 0,
      ),
      unexpectedExits: t(unexpectedExits.length, '= 0', unexpectedExits.length === 0),
      recoveryMsKillMax: t(
        kill.fig.max,
        `≤ ${TARGET_KILL_RECOVERY_MS}`,
        kill.fig.max !== null && kill.fig.max <= TARGET_KILL_RECOVERY_MS,
        'timing',
      ),
      recoveryMsDrainMax: t(
        drain.fig.max,
        `≤ ${TARGET_DRAIN_RECOVERY_MS}`,
        drain.fig.max !== null && drain.fig.max <= TARGET_DRAIN_RECOVERY_MS,
        'timing',
      ),
      reconnectMsMax: t(
        reconnectFig.max,
        `≤ ${TARGET_RECONNECT_MS}`,
        reconnectFig.max !== null && reconnectFig.max <= TARGET_RECONNECT_MS,
        'timing',
      ),
    };
    if (sum.viewersDropped === 0) warnings.push('no viewer dropped at the gateway restart: reconnectMs has no sample');
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
        faultsAt,
      },
      timeline: {
        killed,
        killAtMs: killed ? killAt - t0 : null,
        drained,
        drainAtMs: drained ? drainAt - t0 : null,
        drainExit,
        restartedGateway: gwName,
        gatewayRestartAtMs: gwAt - t0,
        gatewayRestartMs: gwRestartMs,
        unexpectedExits,
      },
      channelsMoved: {
        killed: movedKilled,
        drained: movedDrained,
        total: movedKilled + movedDrained,
        other: Math.max(0, epochBumps - movedKilled - movedDrained),
      },
      recoveryMs: { kill: kill.fig, drain: drain.fig },
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
      connections: { requested: viewers, connected: sum.connected, failed: sum.connectFailed, failedByCode },
      generatorCpuPct: { avg: Math.round(cpuAvg), peak: Math.round(cpuPeak) },
      errorLogLines: errorCount,
      errorLogSamples: errorLines,
      targets,
      correct,
      elapsedS: 0,
      warnings,
    };
  } finally {
    if (progress) clearInterval(progress);
    for (const c of children) if (c.connected) c.send({ type: 'exit' });
    await Promise.all(children.map((c) => waitExit(c, 10_000)));
    await Promise.all(games.map((g) => g.client.close().catch(() => undefined)));
    await cluster?.stop().catch(() => undefined);
    await store?.close().catch(() => undefined);
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
