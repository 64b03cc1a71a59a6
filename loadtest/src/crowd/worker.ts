/**
 * Crowd load worker: one child process holding a share of the viewers
 * (at most 18,000 sockets: a process here may hold 20,000 open files).
 * Forked by the coordinator (scenario.ts) with `--import tsx`; talks only over
 * IPC (see ipc.ts).
 *
 * Life: `config` → mint tokens → `ready` → `start{t0}` → connect on the ramp
 * schedule → each connected viewer acts once per `actIntervalMs` at a random
 * phase (one 20 ms slot of the interval) until t0 + ramp + duration → wait for
 * outstanding acks up to `drainMs` → `final` → close sockets → exit.
 */
import { guardWorker, sendToParent } from '../fork.ts';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import { isCrowdplayError } from '@crowdplay/protocol';
import { encodeHistogram, newHistogram, recordUs } from '../hist.ts';
import { createTokenMinter } from '../tokens.ts';
import {
  ACTION,
  OPTIONS,
  emptyCounters,
  type CoordinatorMessage,
  type WorkerConfig,
  type WorkerCounters,
  type WorkerFinal,
  type WorkerMessage,
} from './ipc.ts';

/** Granularity of act phases, ms: a viewer acts in one of actIntervalMs / SLOT_MS slots. */
const SLOT_MS = 20;
/** Time a worker may take after its drain before it exits on its own, ms. */
const SELF_DEADLINE_GRACE_MS = 20_000;

interface Viewer {
  i: number;
  channel: string;
  token: string;
  client: ViewerClient | null;
  connected: boolean;
  closedByUs: boolean;
  /** The first update of a connection is the server's catch-up state (old `at`): not a broadcast lag sample. */
  sawUpdate: boolean;
}

function send(msg: WorkerMessage, cb?: () => void): void {
  sendToParent(msg, cb);
}

function bump(map: Record<string, number>, key: string): void {
  map[key] = (map[key] ?? 0) + 1;
}

/** Key for failure counts: the error code; for the SDK's own CP_ERR_CLIENT_* codes with their message (close code, socket error). */
function codeOf(err: unknown): string {
  if (!isCrowdplayError(err)) return err instanceof Error ? err.name : 'unknown';
  return err.code.startsWith('CP_ERR_CLIENT_') ? `${err.code}: ${err.message}`.slice(0, 100) : err.code;
}

async function prepare(cfg: WorkerConfig): Promise<Viewer[]> {
  const minter = await createTokenMinter(cfg.tenantId, cfg.tenantSecret);
  const viewers: Viewer[] = [];
  for (let i = cfg.workerIndex; i < cfg.viewers; i += cfg.workers) {
    viewers.push({
      i,
      channel: cfg.channels[i % cfg.channels.length] ?? 'load-0',
      token: '',
      client: null,
      connected: false,
      closedByUs: false,
      sawUpdate: false,
    });
  }
  const CHUNK = 1_000;
  for (let k = 0; k < viewers.length; k += CHUNK) {
    const slice = viewers.slice(k, k + CHUNK);
    const tokens = await Promise.all(slice.map((v) => minter.mint(`v-${cfg.workerIndex}-${v.i}`)));
    slice.forEach((v, j) => (v.token = tokens[j] ?? ''));
  }
  return viewers;
}

function run(cfg: WorkerConfig, viewers: Viewer[], t0: number, stopSignal: { stop: () => void }): void {
  const counters: WorkerCounters = emptyCounters(viewers.length);
  const refusedByCode: Record<string, number> = {};
  const failedByCode: Record<string, number> = {};
  const droppedByCode: Record<string, number> = {};
  const errorsByCode: Record<string, number> = {};
  const steady = { acked: 0, refused: 0, updates: 0 };
  const actAck = newHistogram();
  const updateLag = newHistogram();
  const connectH = newHistogram();
  let updateBytes = 0;
  let maxUpdateBytes = 0;

  const rampEnd = t0 + cfg.rampS * 1000;
  const actEnd = rampEnd + cfg.durationS * 1000;
  const inSteady = (ms: number): boolean => ms >= rampEnd && ms <= actEnd;
  const stepMs = cfg.viewers > 0 ? (cfg.rampS * 1000) / cfg.viewers : 0;
  const nSlots = Math.max(1, Math.round(cfg.actIntervalMs / SLOT_MS));
  const slots: Viewer[][] = Array.from({ length: nSlots }, () => []);

  let cpuAtT0 = process.cpuUsage();
  let wallAtT0 = performance.now();
  let cpuAvgPct = 0;
  let cpuPeakPct = 0;
  let lastCpu = process.cpuUsage();
  let lastWall = performance.now();
  let acting = true;
  let finished = false;

  const inFlight = (): number => counters.sent - counters.acked - counters.refused - counters.lost;

  function startViewer(v: Viewer): void {
    counters.started++;
    const addr =
      cfg.sourceAddresses.length > 0
        ? cfg.sourceAddresses[Math.floor(v.i / cfg.viewersPerAddress) % cfg.sourceAddresses.length]
        : undefined;
    let client: ViewerClient;
    try {
      client = new ViewerClient({
        url: cfg.url,
        channel: v.channel,
        token: v.token,
        WebSocket,
        autoReconnect: false,
        welcomeDeadlineMs: cfg.welcomeDeadlineMs,
        closeDeadlineMs: 3_000,
        wsOptions: { perMessageDeflate: false, handshakeTimeout: cfg.welcomeDeadlineMs, ...(addr ? { localAddress: addr } : {}) },
      });
    } catch (err) {
      counters.failed++;
      bump(failedByCode, codeOf(err));
      return;
    }
    v.client = client;
    client.on('update', (u, info) => {
      counters.updates++;
      if (inSteady(info.receivedAtMs)) steady.updates++;
      if (v.sawUpdate) recordUs(updateLag, (info.receivedAtMs - u.at) * 1000);
      v.sawUpdate = true;
      const bytes = Buffer.byteLength(info.raw);
      updateBytes += bytes;
      if (bytes > maxUpdateBytes) maxUpdateBytes = bytes;
    });
    client.on('error', (e) => bump(errorsByCode, e.code));
    client.on('close', (code) => {
      if (v.connected && !v.closedByUs) {
        v.connected = false;
        counters.dropped++;
        bump(droppedByCode, String(code));
      }
    });
    const startedAt = performance.now();
    client.connect().then(
      () => {
        counters.connected++;
        v.connected = true;
        recordUs(connectH, (performance.now() - startedAt) * 1000);
        slots[Math.floor(Math.random() * nSlots)]?.push(v);
      },
      (err: unknown) => {
        counters.failed++;
        bump(failedByCode, codeOf(err));
      },
    );
  }

  function act(v: Viewer): void {
    const client = v.client;
    if (!client || !v.connected || client.state !== 'open') return;
    const option = OPTIONS[Math.floor(Math.random() * OPTIONS.length)];
    const sentAt = performance.now();
    counters.sent++;
    client.act(ACTION, option).then(
      (ack) => {
        recordUs(actAck, (performance.now() - sentAt) * 1000);
        const now = Date.now();
        if (ack.ok) {
          counters.acked++;
          if (inSteady(now)) steady.acked++;
        } else {
          counters.refused++;
          if (inSteady(now)) steady.refused++;
          bump(refusedByCode, ack.code ?? 'no-code');
        }
        if (!acting && inFlight() === 0) finish();
      },
      () => {
        counters.lost++;
        if (!acting && inFlight() === 0) finish();
      },
    );
  }

  // connect on the ramp schedule: viewer i at t0 + i · stepMs
  let nextK = 0;
  const connectTick = (): void => {
    const now = Date.now();
    while (nextK < viewers.length && acting) {
      const v = viewers[nextK];
      if (!v || t0 + v.i * stepMs > now) break;
      startViewer(v);
      nextK++;
    }
    if (nextK >= viewers.length || !acting) clearInterval(connectTimer);
  };
  const connectTimer = setInterval(connectTick, 5);

  // act: every SLOT_MS, the viewers of the next slot act once
  let slotIdx = 0;
  let nextSlotAt = t0;
  const actTimer = setInterval(() => {
    const now = Date.now();
    while (nextSlotAt <= now && acting) {
      if (nextSlotAt >= actEnd) {
        stopActing();
        return;
      }
      for (const v of slots[slotIdx] ?? []) act(v);
      slotIdx = (slotIdx + 1) % nSlots;
      nextSlotAt += SLOT_MS;
    }
    if (now >= actEnd) stopActing();
  }, SLOT_MS / 2);

  const progressTimer = setInterval(() => {
    const cpu = process.cpuUsage(lastCpu);
    const wall = performance.now() - lastWall;
    lastCpu = process.cpuUsage();
    lastWall = performance.now();
    const cpuPct = wall > 0 ? ((cpu.user + cpu.system) / 1000 / wall) * 100 : 0;
    if (acting && cpuPct > cpuPeakPct) cpuPeakPct = cpuPct;
    send({ type: 'progress', workerIndex: cfg.workerIndex, counters: { ...counters }, actAck: encodeHistogram(actAck), cpuPct });
  }, 2_000);

  let drainTimer: ReturnType<typeof setTimeout> | undefined;
  function stopActing(): void {
    if (!acting) return;
    acting = false;
    clearInterval(actTimer);
    clearInterval(connectTimer);
    const cpu = process.cpuUsage(cpuAtT0);
    const wall = performance.now() - wallAtT0;
    cpuAvgPct = wall > 0 ? ((cpu.user + cpu.system) / 1000 / wall) * 100 : 0;
    if (inFlight() === 0) finish();
    else drainTimer = setTimeout(finish, cfg.drainMs);
  }
  stopSignal.stop = stopActing;

  function finish(): void {
    if (finished) return;
    finished = true;
    clearTimeout(drainTimer);
    clearInterval(progressTimer);
    const final: WorkerFinal = {
      type: 'final',
      workerIndex: cfg.workerIndex,
      counters: { ...counters },
      inFlight: inFlight(),
      refusedByCode,
      failedByCode,
      droppedByCode,
      errorsByCode,
      hist: { actAck: encodeHistogram(actAck), updateLag: encodeHistogram(updateLag), connect: encodeHistogram(connectH) },
      steady,
      updateBytes,
      maxUpdateBytes,
      cpu: { avgPct: cpuAvgPct, peakPct: Math.max(cpuPeakPct, cpuAvgPct) },
    };
    send(final, () => {
      for (const v of viewers) v.closedByUs = true;
      const closes = viewers.flatMap((v) => (v.client ? [v.client.close()] : []));
      const hard = setTimeout(() => process.exit(0), 3_000);
      hard.unref();
      void Promise.allSettled(closes).then(() => process.exit(0));
    });
  }

  // sample CPU exactly at t0 (this function runs at t0 or just before it)
  const atT0 = setTimeout(
    () => {
      cpuAtT0 = process.cpuUsage();
      wallAtT0 = performance.now();
      lastCpu = cpuAtT0;
      lastWall = wallAtT0;
      connectTick();
    },
    Math.max(0, t0 - Date.now()),
  );
  void atT0;
  setTimeout(() => process.exit(3), actEnd - Date.now() + cfg.drainMs + SELF_DEADLINE_GRACE_MS).unref();
}

let config: WorkerConfig | null = null;
let prepared: Viewer[] | null = null;
const stopSignal = { stop: (): void => {} };

guardWorker((message): WorkerMessage => ({ type: 'fatal', workerIndex: config?.workerIndex ?? -1, message }));
process.on('message', (raw: unknown) => {
  const msg = raw as CoordinatorMessage;
  if (msg.type === 'config') {
    config = msg.config;
    const t = performance.now();
    prepare(msg.config).then(
      (viewers) => {
        prepared = viewers;
        send({ type: 'ready', workerIndex: msg.config.workerIndex, mintMs: performance.now() - t });
      },
      (err: unknown) => send({ type: 'fatal', workerIndex: msg.config.workerIndex, message: String(err) }, () => process.exit(1)),
    );
  } else if (msg.type === 'start' && config && prepared) {
    run(config, prepared, msg.t0, stopSignal);
  } else if (msg.type === 'stop') {
    stopSignal.stop();
  }
});
