/**
 * Failover viewer worker: one child process holding a share of the viewers,
 * forked by the coordinator (scenario.ts) with `--import tsx`; talks only
 * over IPC (ipc.ts).
 *
 * Each viewer (sdk-viewer, autoReconnect with jittered backoff) connects on
 * the ramp schedule, acts once per `actIntervalMs` at a random phase, and
 * stakes once in every open round its channel's updates show (at a random
 * time before the deadline, with an idempotency key). Every ack is recorded:
 * acked acts per (viewer, option) and acked stakes go back in `final` for the
 * coordinator's checks (intentsLost, stakesLost). Drops and re-welcomes give
 * reconnectMs.
 *
 * Life: `config` → mint tokens → `ready` → `start{t0}` → … → `stop{drainMs}`
 * → wait for outstanding answers → `final` → `exit` (close sockets, exit).
 */
import { guardWorker, sendToParent } from '../fork.ts';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import { isCrowdplayError, type ActAck } from '@crowdplay/protocol';
import { encodeHistogram, newHistogram, recordUs } from '../hist.ts';
import { createTokenMinter } from '../tokens.ts';
import {
  ACTION,
  OPTIONS,
  emptyFailoverCounters,
  type AckedStake,
  type FailoverCoordinatorMessage,
  type FailoverWorkerConfig,
  type FailoverWorkerFinal,
  type FailoverWorkerMessage,
  viewerGateway,
  viewerId,
} from './ipc.ts';

/** Granularity of act phases, ms. */
const SLOT_MS = 20;
/** A stake is sent at least this long before its round's deadline, ms. */
const STAKE_MARGIN_MS = 1_500;
/** A worker exits on its own this long after `stop` if the coordinator never says `exit`, ms. */
const SELF_DEADLINE_MS = 180_000;

interface Viewer {
  i: number;
  channel: string;
  gateway: number;
  token: string;
  client: ViewerClient | null;
  open: boolean;
  everWelcomed: boolean;
  closedByUs: boolean;
  /** When the socket last dropped (not closed by us) and no welcome since; null otherwise. */
  droppedAt: number | null;
  dropped: boolean;
  /** Rounds this viewer has seen open (a stake is planned or sent for each). */
  rounds: Set<string>;
  acked: number[] | null;
}

function send(msg: FailoverWorkerMessage, cb?: () => void): void {
  sendToParent(msg, cb);
}

function bump(map: Record<string | number, number>, key: string | number): void {
  map[key] = (map[key] ?? 0) + 1;
}

function codeOf(err: unknown): string {
  if (!isCrowdplayError(err)) return err instanceof Error ? err.name : 'unknown';
  return err.code.startsWith('CP_ERR_CLIENT_') ? `${err.code}: ${err.message}`.slice(0, 100) : err.code;
}

async function prepare(cfg: FailoverWorkerConfig): Promise<Viewer[]> {
  const minter = await createTokenMinter(cfg.tenantId, cfg.tenantSecret);
  const viewers: Viewer[] = [];
  const C = cfg.channels.length;
  for (let i = cfg.workerIndex; i < cfg.viewers; i += cfg.workers) {
    viewers.push({
      i,
      channel: cfg.channels[i % C]!,
      gateway: viewerGateway(i, C, cfg.gatewayUrls.length),
      token: '',
      client: null,
      open: false,
      everWelcomed: false,
      closedByUs: false,
      droppedAt: null,
      dropped: false,
      rounds: new Set(),
      acked: null,
    });
  }
  const tokens = await Promise.all(viewers.map((v) => minter.mint(viewerId(v.i), 4 * 3_600)));
  viewers.forEach((v, k) => (v.token = tokens[k]!));
  return viewers;
}

function run(
  cfg: FailoverWorkerConfig,
  viewers: Viewer[],
  t0: number,
): { stop: (drainMs: number, reconnectWaitMs: number) => void; exit: () => void } {
  const c = emptyFailoverCounters(viewers.length);
  const refusedByCode: Record<string, number> = {};
  const connectFailedByCode: Record<string, number> = {};
  const connectRetriedByCode: Record<string, number> = {};
  const connectDeadline = t0 + cfg.rampMs + cfg.connectDeadlineMs;
  const dropsByCode: Record<string, number> = {};
  const reconnectFailedByCode: Record<string, number> = {};
  const reconnectMs: number[] = [];
  const welcomeMs: number[] = [];
  const stakes: AckedStake[] = [];
  const actAck = newHistogram();
  const timers = new Set<NodeJS.Timeout>();
  const reconnectTimers = new Set<NodeJS.Timeout>();
  /** Set while `stop` waits for dropped viewers to come back. */
  let onReconnected: (() => void) | null = null;
  let acting = true;
  let inFlight = 0;
  let onIdle: (() => void) | null = null;
  const settled = (): void => {
    inFlight--;
    if (inFlight === 0) onIdle?.();
  };
  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  let lastCpu = process.cpuUsage();
  let lastWall = performance.now();
  let peakPct = 0;
  let avgPct = 0;

  /** Sends one act or stake and classifies its answer; `ok` runs on an accepted ack. */
  function track(kind: 'act' | 'stake', p: Promise<ActAck>, ok: (ack: ActAck) => void): void {
    const sentAt = performance.now();
    inFlight++;
    let late = false;
    const timer = setTimeout(() => {
      late = true;
      if (kind === 'act') c.actsUnanswered++;
      else c.stakesUnanswered++;
    }, cfg.ackTimeoutMs);
    p.then(
      (ack) => {
        clearTimeout(timer);
        if (late) {
          if (kind === 'act') {
            c.actsUnanswered--;
            c.actsLate++;
          } else c.stakesUnanswered--;
        }
        if (kind === 'act') recordUs(actAck, (performance.now() - sentAt) * 1000);
        if (ack.ok) {
          if (kind === 'act') c.actsAcked++;
          else c.stakesAcked++;
          ok(ack);
        } else {
          if (kind === 'act') c.actsRefused++;
          else c.stakesRefused++;
          bump(refusedByCode, `${kind}:${ack.code ?? 'no-code'}`);
        }
        settled();
      },
      () => {
        clearTimeout(timer);
        if (late) {
          if (kind === 'act') c.actsUnanswered--;
          else c.stakesUnanswered--;
        }
        if (kind === 'act') c.actsClosed++;
        else c.stakesClosed++;
        settled();
      },
    );
  }

  function act(v: Viewer): void {
    const client = v.client;
    if (!acting || !client || !v.open || client.state !== 'open') return;
    const k = Math.floor(Math.random() * OPTIONS.length);
    c.actsSent++;
    track('act', client.act(ACTION, OPTIONS[k]!), () => {
      v.acked ??= [0, 0, 0];
      v.acked[k]!++;
    });
  }

  function stake(v: Viewer, round: string, outcomes: string[]): void {
    const client = v.client;
    if (!acting || !client || !v.open || client.state !== 'open') return;
    const outcome = outcomes[Math.floor(Math.random() * outcomes.length)]!;
    const [lo, hi] = cfg.stakePoints;
    const points = lo + Math.floor(Math.random() * (hi - lo + 1));
    const key = `s-${round}`;
    c.stakesSent++;
    track('stake', client.stake(round, outcome, points, { key }), () =>
      stakes.push({ v: v.i, channel: v.channel, round, outcome, points, key }),
    );
  }

  /**
   * Connects viewer `v` to its current gateway. A socket that drops (not closed by us) is replaced, after a jittered
   * backoff (full jitter, doubling from backoff.initialMs to backoff.maxMs), by one to the next gateway: what a client
   * behind a load balancer does when its gateway drains. Failed attempts rotate on the same way.
   */
  function startViewer(v: Viewer, attempt = 0): void {
    const addr =
      cfg.sourceAddresses.length > 0
        ? cfg.sourceAddresses[Math.floor(v.i / cfg.viewersPerAddress) % cfg.sourceAddresses.length]
        : undefined;
    const client = new ViewerClient({
      url: cfg.gatewayUrls[v.gateway]!,
      channel: v.channel,
      token: v.token,
      WebSocket,
      autoReconnect: false,
      welcomeDeadlineMs: cfg.welcomeDeadlineMs,
      closeDeadlineMs: 3_000,
      wsOptions: { perMessageDeflate: false, handshakeTimeout: cfg.welcomeDeadlineMs, ...(addr ? { localAddress: addr } : {}) },
    });
    v.client = client;
    const retry = (n: number): void => {
      if (v.closedByUs) return;
      v.gateway = (v.gateway + 1) % cfg.gatewayUrls.length;
      const capMs = Math.min(cfg.backoff.maxMs, cfg.backoff.initialMs * 2 ** Math.min(n, 20));
      const t = setTimeout(() => {
        reconnectTimers.delete(t);
        startViewer(v, n + 1);
      }, Math.random() * capMs);
      reconnectTimers.add(t);
    };
    client.on('welcome', () => {
      v.open = true;
      if (!v.everWelcomed) {
        v.everWelcomed = true;
        c.connected++;
        welcomeMs.push(Date.now() - (t0 + v.i * stepMs));
      }
      if (v.droppedAt !== null) {
        reconnectMs.push(Date.now() - v.droppedAt);
        v.droppedAt = null;
        onReconnected?.();
      }
    });
    client.on('close', (code) => {
      const wasOpen = v.open;
      v.open = false;
      if (v.closedByUs || !wasOpen || v.client !== client) return;
      bump(dropsByCode, String(code));
      v.dropped = true;
      v.droppedAt ??= Date.now();
      retry(0);
    });
    client.on('update', (u) => {
      if (!acting || !u.rounds) return;
      const now = Date.now();
      for (const r of u.rounds) {
        if (r.state !== 'open' || r.kind !== 'pool' || v.rounds.has(r.id)) continue;
        const room = r.deadline - now - STAKE_MARGIN_MS;
        if (room <= 0) continue;
        v.rounds.add(r.id);
        const t = setTimeout(
          () => {
            timers.delete(t);
            stake(v, r.id, r.outcomes);
          },
          Math.floor(Math.random() * room),
        );
        timers.add(t);
      }
    });
    client.on('error', () => undefined); // drops and refusals are counted from closes and acks
    client.connect().then(
      () => undefined,
      (err: unknown) => {
        if (v.everWelcomed) {
          // A reconnect attempt failed: the next gateway, a longer backoff.
          bump(reconnectFailedByCode, `gw-${v.gateway + 1}: ${codeOf(err)}`);
          retry(attempt);
        } else if (Date.now() < connectDeadline) {
          // A first connect failed (refused, rate limited, no welcome in time): retried the same way until the deadline.
          bump(connectRetriedByCode, codeOf(err));
          retry(attempt);
        } else {
          c.connectFailed++;
          bump(connectFailedByCode, codeOf(err));
        }
      },
    );
  }

  // connect on the ramp schedule
  const stepMs = cfg.viewers > 0 ? cfg.rampMs / cfg.viewers : 0;
  let next = 0;
  const connectTimer = setInterval(() => {
    const now = Date.now();
    while (next < viewers.length && t0 + viewers[next]!.i * stepMs <= now) startViewer(viewers[next++]!);
    if (next >= viewers.length) clearInterval(connectTimer);
  }, 5);

  // act: every SLOT_MS the viewers of the next slot act once
  const nSlots = Math.max(1, Math.round(cfg.actIntervalMs / SLOT_MS));
  const slots: Viewer[][] = Array.from({ length: nSlots }, () => []);
  for (const v of viewers) slots[Math.floor(Math.random() * nSlots)]!.push(v);
  let slot = 0;
  let nextSlotAt = t0;
  const actTimer = setInterval(() => {
    const now = Date.now();
    while (nextSlotAt <= now && acting) {
      for (const v of slots[slot]!) act(v);
      slot = (slot + 1) % nSlots;
      nextSlotAt += SLOT_MS;
    }
  }, SLOT_MS / 2);

  const progressTimer = setInterval(() => {
    const cpu = process.cpuUsage(lastCpu);
    const wall = performance.now() - lastWall;
    lastCpu = process.cpuUsage();
    lastWall = performance.now();
    const pct = wall > 0 ? ((cpu.user + cpu.system) / 1000 / wall) * 100 : 0;
    if (acting) peakPct = Math.max(peakPct, pct);
    send({ type: 'progress', workerIndex: cfg.workerIndex, counters: { ...c }, cpuPct: pct });
  }, 2_000);

  let finished = false;
  function finish(): void {
    if (finished) return;
    finished = true;
    clearInterval(progressTimer);
    const acked: Record<number, number[]> = {};
    const failedByGateway: Record<number, number> = {};
    const droppedByGateway: Record<number, number> = {};
    c.viewersDropped = 0;
    c.viewersReconnected = 0;
    // Unanswered: neither acked, refused nor rejected by now (also the ones sent less than ackTimeoutMs ago).
    c.actsUnanswered = c.actsSent - c.actsAcked - c.actsRefused - c.actsClosed;
    c.stakesUnanswered = c.stakesSent - c.stakesAcked - c.stakesRefused - c.stakesClosed;
    for (const v of viewers) {
      if (v.acked) acked[v.i] = v.acked;
      if (!v.dropped) continue;
      c.viewersDropped++;
      bump(droppedByGateway, v.gateway);
      if (v.droppedAt === null) c.viewersReconnected++;
      else bump(failedByGateway, v.gateway);
    }
    const final: FailoverWorkerFinal = {
      type: 'final',
      workerIndex: cfg.workerIndex,
      counters: { ...c },
      acked,
      stakes,
      refusedByCode,
      connectFailedByCode,
      connectRetriedByCode,
      dropsByCode,
      reconnectFailedByCode,
      reconnectMs,
      welcomeMs,
      failedByGateway,
      droppedByGateway,
      actAck: encodeHistogram(actAck),
      cpu: { avgPct, peakPct: Math.max(peakPct, avgPct) },
    };
    send(final);
  }

  return {
    stop(drainMs, reconnectWaitMs) {
      if (!acting) return;
      acting = false;
      clearInterval(actTimer);
      clearInterval(connectTimer);
      for (const t of timers) clearTimeout(t);
      timers.clear();
      const cpu = process.cpuUsage(cpu0);
      const wall = performance.now() - wall0;
      avgPct = wall > 0 ? ((cpu.user + cpu.system) / 1000 / wall) * 100 : 0;
      // Final once every answer is in (or drainMs passed) and no viewer is still away (or reconnectWaitMs passed).
      let answered = inFlight === 0;
      const away = (): boolean => viewers.some((v) => v.droppedAt !== null);
      let back = !away();
      const maybe = (): void => {
        if (answered && back) finish();
      };
      if (!answered) {
        onIdle = () => {
          answered = true;
          maybe();
        };
        setTimeout(onIdle, drainMs);
      }
      if (!back) {
        onReconnected = () => {
          if (away()) return;
          back = true;
          maybe();
        };
        setTimeout(() => {
          back = true;
          maybe();
        }, reconnectWaitMs);
      }
      maybe();
      setTimeout(() => process.exit(3), SELF_DEADLINE_MS).unref();
    },
    exit() {
      for (const t of reconnectTimers) clearTimeout(t);
      for (const v of viewers) v.closedByUs = true;
      const closes = viewers.flatMap((v) => (v.client ? [v.client.close()] : []));
      setTimeout(() => process.exit(0), 3_000).unref();
      void Promise.allSettled(closes).then(() => process.exit(0));
    },
  };
}

let config: FailoverWorkerConfig | null = null;
let prepared: Viewer[] | null = null;
let running: ReturnType<typeof run> | null = null;

guardWorker((message): FailoverWorkerMessage => ({ type: 'fatal', workerIndex: config?.workerIndex ?? -1, message }));
process.on('message', (raw: unknown) => {
  const msg = raw as FailoverCoordinatorMessage;
  if (msg.type === 'config') {
    config = msg.config;
    prepare(msg.config).then(
      (viewers) => {
        prepared = viewers;
        send({ type: 'ready', workerIndex: msg.config.workerIndex });
      },
      (err: unknown) => send({ type: 'fatal', workerIndex: msg.config.workerIndex, message: String(err) }, () => process.exit(1)),
    );
  } else if (msg.type === 'start' && config && prepared) {
    const cfg = config;
    const viewers = prepared;
    setTimeout(() => (running = run(cfg, viewers, msg.t0)), Math.max(0, msg.t0 - Date.now()));
  } else if (msg.type === 'stop') {
    running?.stop(msg.drainMs, msg.reconnectWaitMs);
  } else if (msg.type === 'exit') {
    if (running) running.exit();
    else process.exit(0);
  }
});
