/**
 * The `crowd` scenario: N viewers as
 * role=crowd over K channels, each acting about once a second, one game
 * client per channel collecting batches. The coordinator (this module) runs
 * the games, a readiness probe, the progress line and the report; viewers
 * live in forked worker processes (worker.ts).
 *
 * Bounded: the run ends by itself after ramp + duration + drain, and workers
 * still alive at the hard deadline after that are killed (by pid).
 */
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import WebSocket from 'ws';
import { CrowdplayError, type ActionSpec } from '@crowdplay/protocol';
import { GameClient } from '@crowdplay/sdk-game';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import { addEncoded, newHistogram, recordUs, summarize } from '../hist.ts';
import { clockTicksPerSecond, findListeningPid, machineCpuTicks, processCpuMs, ProcessWatch, type ProcessSample } from '../proc.ts';
import { createTokenMinter } from '../tokens.ts';
import { forkTs, waitExit } from '../fork.ts';
import { spawnReferenceServer } from '../reference-spawn.ts';
import {
  ACTION,
  OPTIONS,
  emptyCounters,
  type CoordinatorMessage,
  type WorkerConfig,
  type WorkerCounters,
  type WorkerFinal,
  type WorkerMessage,
  type WorkerProgress,
} from './ipc.ts';
import type { CrowdReport, MachineInfo } from './report.ts';

/** The standalone dev tenant (libs/config: STANDALONE_TENANT_SECRET / STANDALONE_TENANT_KEY defaults). */
export const DEV_TENANT = Object.freeze({
  id: 'dev',
  secret: 'dev-secret-change-me-0123456789abcdef',
  key: 'cpk_dev_0123456789abcdef0123456789abcdef',
});

/** Default connection ramp, sockets/s (2,000 viewers connect in 1.3 s). */
export const DEFAULT_FAN_IN_PER_S = 1_500;
/** One process here may hold 20,000 open files; a worker keeps headroom for its own. */
export const MAX_SOCKETS_PER_WORKER = 18_000;
/**
 * Viewers per loopback source address. One address reaches one destination
 * from ~28,000 ephemeral ports, but the gateway's per-address connection
 * bucket (CONN_BURST 2,000, CONN_RATE_PER_S 200) is the tighter bound: a
 * real crowd comes from many addresses, so the generator spreads like one.
 */
export const DEFAULT_VIEWERS_PER_ADDRESS = 2_000;
/** Default viewers per worker when --workers is not given. */
const VIEWERS_PER_WORKER = 5_000;
/** A process above this average CPU (% of one core) marks the run as generator-bound. */
export const GENERATOR_BOUND_PCT = 85;
/** …or above this in any 2 s interval. */
export const GENERATOR_BOUND_PEAK_PCT = 95;
/** Whole-machine CPU (% of all cores) above which the report warns that server and generator compete for cores. */
export const MACHINE_SATURATED_PCT = 90;

/** Options of {@link runCrowdScenario}. */
export interface CrowdOptions {
  /** Gateway base URL, e.g. `http://127.0.0.1:8080`. */
  url: string;
  /** Viewers to connect (≥ 1). */
  viewers: number;
  /** Steady phase after the ramp, s. */
  durationS: number;
  /** Channels `load-0 … load-(K-1)`; viewer i joins channel i mod K. */
  channels: number;
  /** @defaultValue DEV_TENANT.id */
  tenantId?: string;
  /** Tenant signing secret for viewer JWTs. @defaultValue DEV_TENANT.secret */
  tenantSecret?: string;
  /** Tenant API key for the game clients. @defaultValue DEV_TENANT.key */
  tenantKey?: string;
  /** Connection ramp, s. @defaultValue viewers / DEFAULT_FAN_IN_PER_S */
  rampS?: number;
  /** Worker processes. @defaultValue max(2, ceil(viewers / 5,000)) */
  workers?: number;
  /** Viewers per local source address (127.0.0.2, .3, …). @defaultValue DEFAULT_VIEWERS_PER_ADDRESS */
  viewersPerAddress?: number;
  /** Server pid for serverCpuPct; else the process listening on the URL's port is looked up in /proc. */
  serverPid?: number;
  /**
   * More processes to measure over the same window as the server (CPU, RSS at start, end and peak), e.g. the
   * shard, router and sequencer of a cluster. The server is always measured as `server`. @defaultValue none
   */
  watchPids?: ReadonlyArray<{ name: string; pid: number }>;
  /** Mean interval between one viewer's acts, ms. @defaultValue 1_000 */
  actIntervalMs?: number;
  /** Time for outstanding acks after acting stops, s. @defaultValue 10 */
  drainS?: number;
  /** Per-connection welcome deadline, ms. @defaultValue 15_000 */
  welcomeDeadlineMs?: number;
  /** Channel name prefix. @defaultValue 'load-' */
  channelPrefix?: string;
  /** Receives the progress line every 2 s. @defaultValue none */
  onProgress?: (line: string) => void;
  /** Recorded in the report as `command`. */
  command?: string;
}

interface Resolved extends Required<Omit<CrowdOptions, 'serverPid' | 'onProgress' | 'command' | 'watchPids'>> {
  serverPid: number | undefined;
  watchPids: ReadonlyArray<{ name: string; pid: number }>;
  onProgress: (line: string) => void;
  command: string;
}

const VOTE: ActionSpec[] = [{ name: ACTION, options: [...OPTIONS], maxPerTick: 1_000 }];
const PROBE_DEADLINE_MS = 15_000;
const WORKER_READY_DEADLINE_MS = 120_000;
const START_DELAY_MS = 500;
const HARD_DEADLINE_GRACE_MS = 15_000;

function invalid(msg: string): CrowdplayError {
  return new CrowdplayError('CP_ERR_CONFIG_INVALID', [msg]);
}

function resolveOptions(o: CrowdOptions): Resolved {
  const int = (name: string, v: number, min: number): number => {
    if (!Number.isInteger(v) || v < min) throw invalid(`${name} must be an integer ≥ ${min}, got ${v}`);
    return v;
  };
  const viewers = int('viewers', o.viewers, 1);
  const channels = int('channels', o.channels, 1);
  if (!(o.durationS > 0)) throw invalid(`durationS must be > 0, got ${o.durationS}`);
  const rampS = o.rampS ?? viewers / DEFAULT_FAN_IN_PER_S;
  if (!(rampS >= 0)) throw invalid(`rampS must be ≥ 0, got ${rampS}`);
  const workers = Math.min(viewers, int('workers', o.workers ?? Math.max(2, Math.ceil(viewers / VIEWERS_PER_WORKER)), 1));
  if (Math.ceil(viewers / workers) > MAX_SOCKETS_PER_WORKER) {
    throw invalid(
      `${Math.ceil(viewers / workers)} viewers per worker is over ${MAX_SOCKETS_PER_WORKER}: use --workers ≥ ${Math.ceil(viewers / MAX_SOCKETS_PER_WORKER)}`,
    );
  }
  try {
    const u = new URL(o.url);
    if (!['http:', 'https:', 'ws:', 'wss:'].includes(u.protocol)) throw new Error(u.protocol);
  } catch (err) {
    throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [`url: ${o.url}`], { cause: err });
  }
  return {
    url: o.url,
    viewers,
    channels,
    durationS: o.durationS,
    rampS,
    workers,
    tenantId: o.tenantId ?? DEV_TENANT.id,
    tenantSecret: o.tenantSecret ?? DEV_TENANT.secret,
    tenantKey: o.tenantKey ?? DEV_TENANT.key,
    viewersPerAddress: int('viewersPerAddress', o.viewersPerAddress ?? DEFAULT_VIEWERS_PER_ADDRESS, 1),
    serverPid: o.serverPid,
    watchPids: o.watchPids ?? [],
    actIntervalMs: int('actIntervalMs', o.actIntervalMs ?? 1_000, 20),
    drainS: o.drainS ?? 10,
    welcomeDeadlineMs: int('welcomeDeadlineMs', o.welcomeDeadlineMs ?? 15_000, 1),
    channelPrefix: o.channelPrefix ?? 'load-',
    onProgress: o.onProgress ?? (() => {}),
    command:
      o.command ?? `runCrowdScenario(${JSON.stringify({ url: o.url, viewers: o.viewers, durationS: o.durationS, channels: o.channels })})`,
  };
}

/** Local source addresses 127.0.0.2, .3, … one per `perAddress` viewers, when the target is IPv4 loopback. */
function sourceAddresses(url: string, viewers: number, perAddress: number): string[] {
  const host = new URL(url).hostname;
  if (!/^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)) return [];
  const n = Math.ceil(viewers / perAddress);
  return Array.from({ length: n }, (_, k) => {
    const v = 2 + k;
    return `127.${(v >> 16) & 255}.${(v >> 8) & 255}.${v & 255}`;
  });
}

function urlPort(url: string): number {
  const u = new URL(url);
  if (u.port) return Number(u.port);
  return u.protocol === 'https:' || u.protocol === 'wss:' ? 443 : 80;
}

/** This machine, for the report. */
export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  return {
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    cpuCount: cpus.length,
    memoryBytes: os.totalmem(),
    nodeVersion: process.version,
    platform: os.platform(),
    release: os.release(),
  };
}

function addCodes(into: Record<string, number>, from: Record<string, number>): void {
  for (const [k, v] of Object.entries(from)) into[k] = (into[k] ?? 0) + v;
}

function sumCounters(list: WorkerCounters[]): WorkerCounters {
  const total: WorkerCounters = emptyCounters();
  for (const c of list) for (const k of Object.keys(total) as Array<keyof WorkerCounters>) total[k] += c[k];
  return total;
}

function withDeadline<T>(p: Promise<T>, ms: number, what: string | (() => string)): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const label = typeof what === 'string' ? what : what();
      reject(new CrowdplayError('CP_ERR_INTERNAL', [], { cause: new Error(`${label}: no answer within ${ms} ms`) }));
    }, ms);
  });
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
}

const round2 = (n: number): number => Math.round(n * 100) / 100;

/**
 * Probes channel `channel`: one viewer connects and acts until an act is
 * accepted (the game's declaration is in effect) or refused for another reason.
 *
 * @returns acts made, how many were accepted, and a warning if the channel never accepted one
 * @throws CrowdplayError the connect error (e.g. CP_ERR_AUTH_INVALID): no viewer would get in either
 */
async function probeChannel(
  o: Resolved,
  channel: string,
  token: string,
): Promise<{ acts: number; accepted: number; warning: string | null }> {
  const viewer = new ViewerClient({
    url: o.url,
    channel,
    token,
    WebSocket,
    autoReconnect: false,
    welcomeDeadlineMs: o.welcomeDeadlineMs,
    wsOptions: { perMessageDeflate: false },
  });
  try {
    await viewer.connect();
    const until = Date.now() + PROBE_DEADLINE_MS;
    let acts = 0;
    for (;;) {
      acts++;
      const ack = await viewer.act(ACTION, OPTIONS[0]);
      if (ack.ok) return { acts, accepted: 1, warning: null };
      if (ack.code !== 'CP_ERR_INTENT_NO_GAME')
        return { acts, accepted: 0, warning: `probe on ${channel}: act refused with ${ack.code ?? 'no code'}` };
      if (Date.now() > until)
        return {
          acts,
          accepted: 0,
          warning: `probe on ${channel}: the game's declaration was not in effect after ${PROBE_DEADLINE_MS} ms`,
        };
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await viewer.close();
  }
}

/**
 * Runs the crowd scenario once against `opts.url` and returns its report.
 * See loadtest/README.md for every field. Never throws for what it measures
 * (failures are counted); throws for setup problems.
 *
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID (bad options), the probe's
 *   connect error (bad tenant secret, unknown channel…), CP_ERR_INTERNAL
 *   (game clients or workers did not come up in time)
 */
export async function runCrowdScenario(opts: CrowdOptions): Promise<CrowdReport> {
  const o = resolveOptions(opts);
  const startedAt = new Date();
  const wall0 = performance.now();
  const warnings: string[] = [];
  const channelNames = Array.from({ length: o.channels }, (_, k) => `${o.channelPrefix}${k}`);
  const addrs = sourceAddresses(o.url, o.viewers, o.viewersPerAddress);
  if (addrs.length === 0 && o.viewers > DEFAULT_VIEWERS_PER_ADDRESS) {
    warnings.push(`target ${new URL(o.url).hostname} is not an IPv4 loopback literal: all viewers use one source address (~28,000 ports)`);
  }

  // server pid (before workers exist: the /proc scan is cheap now)
  let serverPid: number | null = o.serverPid ?? null;
  let serverPidSource: 'flag' | 'port' | null = serverPid !== null ? 'flag' : null;
  let serverCpuNote: string | null = null;
  if (serverPid === null) {
    serverPid = findListeningPid(urlPort(o.url));
    if (serverPid !== null) serverPidSource = 'port';
    else serverCpuNote = `no --server-pid and no process found listening on port ${urlPort(o.url)} via /proc`;
  }
  const ticksPerS = clockTicksPerSecond();

  // games: one per channel, declaring `vote`; batches measured here
  const batchLag = newHistogram();
  let batches = 0;
  let tallied = 0;
  let droppedOverCap = 0;
  let lastGameError = 'none';
  const games = channelNames.map((channel) => {
    const g = new GameClient({
      url: o.url,
      channel,
      apiKey: o.tenantKey,
      backoff: { initialMs: 250, maxMs: 2_000 },
      welcomeDeadlineMs: o.welcomeDeadlineMs,
    });
    g.on('error', (e) => (lastGameError = `${e.code}: ${e.message}`));
    g.on('batch', (b, info) => {
      batches++;
      for (const a of Object.values(b.actions)) {
        droppedOverCap += a.dropped;
        for (const n of Object.values(a.tally)) tallied += n;
        for (const it of a.intents) recordUs(batchLag, (info.receivedAtMs - it.at) * 1000);
      }
    });
    g.declare(VOTE);
    return g;
  });
  const children: ChildProcess[] = [];
  try {
    await withDeadline(
      Promise.all(games.map((g) => g.connect())),
      o.welcomeDeadlineMs + 5_000,
      () => `game clients (last error: ${lastGameError})`,
    );

    // readiness probe: the declaration is in effect on every channel
    const minter = await createTokenMinter(o.tenantId, o.tenantSecret);
    let probeActs = 0;
    let probeAccepted = 0;
    await Promise.all(
      channelNames.map(async (channel, k) => {
        const r = await probeChannel(o, channel, await minter.mint(`probe-${k}`));
        probeActs += r.acts;
        probeAccepted += r.accepted;
        if (r.warning) warnings.push(r.warning);
      }),
    );

    // workers
    const workerFile = fileURLToPath(new URL('./worker.ts', import.meta.url));
    const latest = new Map<number, WorkerProgress>();
    const finals = new Map<number, WorkerFinal>();
    const done = new Set<number>();
    let allDone: () => void = () => {};
    const allDonePromise = new Promise<void>((resolve) => (allDone = resolve));
    const markDone = (w: number): void => {
      done.add(w);
      if (done.size === o.workers) allDone();
    };
    const readies: Array<Promise<void>> = [];
    for (let w = 0; w < o.workers; w++) {
      const child = forkTs(workerFile, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      children.push(child);
      readies.push(
        new Promise<void>((resolve, reject) => {
          child.on('message', (raw: unknown) => {
            const m = raw as WorkerMessage;
            if (m.type === 'ready') resolve();
            else if (m.type === 'progress') latest.set(w, m);
            else if (m.type === 'final') {
              finals.set(w, m);
              markDone(w);
            } else if (m.type === 'fatal') {
              warnings.push(`worker ${w} failed: ${m.message.split('\n')[0] ?? ''}`);
              reject(new CrowdplayError('CP_ERR_INTERNAL', [], { cause: new Error(m.message) }));
              markDone(w);
            }
          });
          child.once('exit', (code, signal) => {
            if (!finals.has(w) && !done.has(w)) {
              warnings.push(`worker ${w} exited (${code ?? signal}) without a report`);
              reject(new CrowdplayError('CP_ERR_INTERNAL', [], { cause: new Error(`worker ${w} exited early`) }));
              markDone(w);
            }
          });
        }),
      );
      const config: WorkerConfig = {
        workerIndex: w,
        workers: o.workers,
        url: o.url,
        viewers: o.viewers,
        channels: channelNames,
        sourceAddresses: addrs,
        viewersPerAddress: o.viewersPerAddress,
        tenantId: o.tenantId,
        tenantSecret: o.tenantSecret,
        rampS: o.rampS,
        durationS: o.durationS,
        actIntervalMs: o.actIntervalMs,
        drainMs: o.drainS * 1000,
        welcomeDeadlineMs: o.welcomeDeadlineMs,
      };
      child.send({ type: 'config', config } satisfies CoordinatorMessage);
    }
    await withDeadline(Promise.all(readies), WORKER_READY_DEADLINE_MS, 'workers ready');

    const t0 = Date.now() + START_DELAY_MS;
    const rampEnd = t0 + o.rampS * 1000;
    const actEnd = rampEnd + o.durationS * 1000;
    for (const c of children) c.send({ type: 'start', t0 } satisfies CoordinatorMessage);

    // CPU samples at t0 and at the end of acting
    let server0: number | null = null;
    let server1: number | null = null;
    let machine0: { busy: number; total: number } | null = null;
    let machine1: { busy: number; total: number } | null = null;
    let coord0 = process.cpuUsage();
    let coordCpuPct = 0;
    let window0 = performance.now();
    let windowMs = 0;
    const watch = new ProcessWatch([...(serverPid === null ? [] : [{ name: 'server', pid: serverPid }]), ...o.watchPids]);
    let processes = null as ProcessSample[] | null;
    const sampleStart = setTimeout(() => {
      watch.start();
      server0 = serverPid === null ? null : processCpuMs(serverPid, ticksPerS);
      machine0 = machineCpuTicks();
      coord0 = process.cpuUsage();
      window0 = performance.now();
    }, START_DELAY_MS);
    const sampleEnd = setTimeout(() => {
      processes = watch.stop();
      server1 = serverPid === null ? null : processCpuMs(serverPid, ticksPerS);
      machine1 = machineCpuTicks();
      const c = process.cpuUsage(coord0);
      windowMs = performance.now() - window0;
      coordCpuPct = ((c.user + c.system) / 1000 / windowMs) * 100;
    }, actEnd - Date.now());

    // progress line every 2 s
    let prevAcked = 0;
    let prevUpdates = 0;
    const progress = setInterval(() => {
      const list = [...latest.values()];
      const c = sumCounters(list.map((p) => p.counters));
      const h = newHistogram();
      for (const p of list) addEncoded(h, p.actAck);
      const s = summarize(h);
      h.destroy();
      const line =
        `[crowd ${((Date.now() - t0) / 1000).toFixed(1).padStart(6)} s] connected ${c.connected}/${o.viewers} failed ${c.failed} dropped ${c.dropped}` +
        ` | acked/s ${Math.round((c.acked - prevAcked) / 2)} | ack p95 ${s.p95 ?? 'n/a'} ms | updates/s ${Math.round((c.updates - prevUpdates) / 2)}` +
        ` | cpu ${list.map((p) => `${Math.round(p.cpuPct)}%`).join(' ')}`;
      prevAcked = c.acked;
      prevUpdates = c.updates;
      o.onProgress(line);
    }, 2_000);

    // wait for every final report, or kill at the hard deadline
    const hardDeadlineMs = actEnd - Date.now() + o.drainS * 1000 + HARD_DEADLINE_GRACE_MS;
    let complete = true;
    let hardTimer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      allDonePromise,
      new Promise<void>((resolve) => {
        hardTimer = setTimeout(() => {
          complete = false;
          resolve();
        }, hardDeadlineMs);
      }),
    ]);
    clearTimeout(hardTimer);
    clearInterval(progress);
    clearTimeout(sampleStart);
    clearTimeout(sampleEnd);
    if (windowMs === 0) {
      // acting ended before its timer (stopped early) or the timer did not run: sample now
      processes = watch.stop();
      server1 = serverPid === null ? null : processCpuMs(serverPid, ticksPerS);
      machine1 = machineCpuTicks();
      const c = process.cpuUsage(coord0);
      windowMs = performance.now() - window0;
      coordCpuPct = ((c.user + c.system) / 1000 / windowMs) * 100;
    }
    for (const [w, child] of children.entries()) {
      if (!finals.has(w)) {
        complete = false;
        warnings.push(`worker ${w} had not reported at the hard deadline: killed`);
        child.kill('SIGKILL');
      }
    }

    // merge worker results
    const fl = [...finals.values()];
    const counters = sumCounters(fl.map((f) => f.counters));
    const actAck = newHistogram();
    const updateLag = newHistogram();
    const connect = newHistogram();
    const refusedByCode: Record<string, number> = {};
    const failedByCode: Record<string, number> = {};
    const droppedByCode: Record<string, number> = {};
    const errorsByCode: Record<string, number> = {};
    let inFlight = 0;
    let updateBytes = 0;
    let maxUpdateBytes = 0;
    const steady = { acked: 0, refused: 0, updates: 0 };
    for (const f of fl) {
      addEncoded(actAck, f.hist.actAck);
      addEncoded(updateLag, f.hist.updateLag);
      addEncoded(connect, f.hist.connect);
      addCodes(refusedByCode, f.refusedByCode);
      addCodes(failedByCode, f.failedByCode);
      addCodes(droppedByCode, f.droppedByCode);
      addCodes(errorsByCode, f.errorsByCode);
      inFlight += f.inFlight;
      updateBytes += f.updateBytes;
      maxUpdateBytes = Math.max(maxUpdateBytes, f.maxUpdateBytes);
      steady.acked += f.steady.acked;
      steady.refused += f.steady.refused;
      steady.updates += f.steady.updates;
    }
    // the gateway refuses the upgrade with HTTP 429, or closes with 4029 after an error frame
    const rateLimited = Object.entries(failedByCode)
      .filter(([k]) => k === 'CP_ERR_LIMIT_CONNECTION_RATE' || /server response: 429\b/.test(k))
      .reduce((a, [, n]) => a + n, 0);
    if (rateLimited > 0) {
      warnings.push(
        `${rateLimited} viewers refused by the per-address connection limit (the generator's address, not capacity): use --viewers-per-address ≤ the gateway's CONN_BURST, or raise CONN_RATE_PER_S`,
      );
    }
    const notConnected = o.viewers - counters.connected - counters.failed;
    if (notConnected > 0) warnings.push(`${notConnected} viewers neither connected nor failed (run stopped early?)`);

    // the last accepted intents reach the games within a tick or two
    const tickMs = games[0]?.welcome?.tickMs ?? 250;
    const expectTallied = counters.acked + probeAccepted;
    const tallyDeadline = Date.now() + 3 * tickMs + 1_000;
    while (tallied < expectTallied && Date.now() < tallyDeadline) await new Promise((r) => setTimeout(r, 25));

    const actAckSummary = summarize(actAck);
    const intakeOffsetMs = actAckSummary.p50 === null ? 0 : round2(actAckSummary.p50 / 2);
    const serverCpuMs = server0 !== null && server1 !== null ? server1 - server0 : null;
    if (serverPid !== null && serverCpuMs === null) serverCpuNote = `could not read /proc/${serverPid}/stat at both ends of the window`;
    const intentsAnswered = counters.acked + counters.refused;
    const generatorCpuPct = fl.map((f) => round2(f.cpu.avgPct));
    const generatorCpuPeakPct = fl.map((f) => round2(f.cpu.peakPct));
    const generatorBound =
      generatorCpuPct.some((p) => p > GENERATOR_BOUND_PCT) ||
      generatorCpuPeakPct.some((p) => p > GENERATOR_BOUND_PEAK_PCT) ||
      coordCpuPct > GENERATOR_BOUND_PCT;
    if (generatorBound)
      warnings.push("generator-bound: a load process was near one full core; latencies and failures may be the generator's");
    // assigned in the timer callbacks above, which TS's narrowing does not see
    const m0 = machine0 as { busy: number; total: number } | null;
    const m1 = machine1 as { busy: number; total: number } | null;
    const machineCpuPct = m0 && m1 && m1.total > m0.total ? round2(((m1.busy - m0.busy) / (m1.total - m0.total)) * 100) : null;
    if (machineCpuPct !== null && machineCpuPct > MACHINE_SATURATED_PCT) {
      warnings.push(
        `machine CPU ${machineCpuPct} % of all cores: server and generator compete for cores; latencies include that contention`,
      );
    }
    const steadyS = o.durationS;

    const report: CrowdReport = {
      scenario: 'crowd',
      command: o.command,
      startedAt: startedAt.toISOString(),
      url: o.url,
      machine: machineInfo(),
      config: {
        viewers: o.viewers,
        channels: o.channels,
        durationS: o.durationS,
        rampS: round2(o.rampS),
        workers: o.workers,
        actIntervalMs: o.actIntervalMs,
        drainS: o.drainS,
        viewersPerAddress: o.viewersPerAddress,
        sourceAddresses: addrs,
        tenantId: o.tenantId,
      },
      viewers: {
        requested: o.viewers,
        connected: counters.connected,
        failed: counters.failed,
        failedByCode,
        dropped: counters.dropped,
        droppedByCode,
      },
      intents: {
        sent: counters.sent,
        acked: counters.acked,
        refused: counters.refused,
        refusedByCode,
        lost: counters.lost,
        inFlight,
        tallied,
        probe: probeActs,
      },
      actAckMs: actAckSummary,
      connectMs: summarize(connect),
      batchLagMs: { ...summarize(batchLag, intakeOffsetMs), intakeOffsetMs },
      updateLagMs: summarize(updateLag),
      ackedPerSecond: round2(steady.acked / steadyS),
      updatesPerSecond: round2(steady.updates / steadyS),
      updatesPerViewerPerSecond: counters.connected > 0 ? round2(steady.updates / steadyS / counters.connected) : 0,
      bytesPerBroadcast: counters.updates > 0 ? round2(updateBytes / counters.updates) : null,
      maxBytesPerBroadcast: maxUpdateBytes,
      batches,
      droppedOverCap,
      serverPid,
      serverPidSource,
      serverCpuPct: serverCpuMs === null || windowMs <= 0 ? null : round2((serverCpuMs / windowMs) * 100),
      serverCpuMsPerIntent:
        serverCpuMs === null || intentsAnswered === 0 ? null : Math.round((serverCpuMs / intentsAnswered) * 10_000) / 10_000,
      serverCpuNote: serverCpuMs === null ? serverCpuNote : null,
      processes: processes ?? [],
      serverRssBytesPerViewer: rssPerViewer(
        processes?.find((p) => p.name === 'server'),
        counters.connected,
      ),
      generatorCpuPct,
      generatorCpuPeakPct,
      coordinatorCpuPct: round2(coordCpuPct),
      machineCpuPct,
      generatorBound,
      durationS: round2(windowMs / 1000 - o.rampS),
      elapsedS: round2((performance.now() - wall0) / 1000),
      errorsByCode,
      complete,
      warnings,
    };
    actAck.destroy();
    updateLag.destroy();
    connect.destroy();
    batchLag.destroy();
    return report;
  } finally {
    for (const c of children) if (c.connected) c.send({ type: 'stop' } satisfies CoordinatorMessage, () => {});
    await Promise.all(children.map((c) => waitExit(c, 10_000)));
    await Promise.all(games.map((g) => g.close()));
  }
}

/** (RSS at the end of acting − RSS at t0) ÷ viewers connected, bytes; null when unknown or none connected. */
function rssPerViewer(server: ProcessSample | undefined, connected: number): number | null {
  if (!server || server.rssStartBytes === null || server.rssEndBytes === null || connected === 0) return null;
  return Math.round((server.rssEndBytes - server.rssStartBytes) / connected);
}

/** ours / reference, or null when either side is unknown or the reference is 0. */
function ratio(ours: number | null, ref: number | null): number | null {
  if (ours === null || ref === null || ref === 0) return null;
  return Math.round((ours / ref) * 1000) / 1000;
}

/**
 * Runs the scenario against `opts.url`, then against the frozen bare-ws
 * reference server (started here as a child process on a free port, with the
 * same options), and returns our report with `baseline` and `ratios`
 * (`actAckP95` and `serverCpuPerIntent`, ours / reference).
 *
 * @throws as {@link runCrowdScenario}
 */
export async function runCrowdWithBaseline(opts: CrowdOptions): Promise<CrowdReport> {
  const ours = await runCrowdScenario(opts);
  const ref = await spawnReferenceServer();
  try {
    const baseline = await runCrowdScenario({
      ...opts,
      url: ref.url,
      serverPid: ref.pid,
      watchPids: [],
      command: `${ours.command} (baseline: bare-ws reference server)`,
    });
    return {
      ...ours,
      baseline,
      ratios: {
        actAckP95: ratio(ours.actAckMs.p95, baseline.actAckMs.p95),
        serverCpuPerIntent: ratio(ours.serverCpuMsPerIntent, baseline.serverCpuMsPerIntent),
      },
    };
  } finally {
    await ref.close();
  }
}
