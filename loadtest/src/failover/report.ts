/**
 * The failover scenario's report (JSON with `--json`, a table on stdout).
 * Every field is described in loadtest/README.md ("failover").
 */
import type { MachineInfo } from '../crowd/report.ts';
import type { LatencySummary } from '../hist.ts';
import type { SteadyCpu } from './cpu.ts';
import type { ShardRecoveryFigures } from './shard-probe.ts';

/** Nearest-rank percentiles of ms samples (null when there are none). */
export interface MsFigures {
  count: number;
  p50: number | null;
  max: number | null;
}

/** Nearest-rank p50 and max of ms samples. */
export function msFigures(xs: number[]): MsFigures {
  if (xs.length === 0) return { count: 0, p50: null, max: null };
  const s = [...xs].sort((a, b) => a - b);
  return { count: s.length, p50: s[Math.max(0, Math.ceil(s.length / 2) - 1)]!, max: s[s.length - 1]! };
}

/** One failover target. `correctness` targets decide the exit code; `timing` ones are reported only. */
export interface FailoverTarget {
  value: number | string | null;
  limit: string;
  ok: boolean;
  kind: 'correctness' | 'timing';
}

/**
 * Recovery of the channels one fault moved, measured by probes (probe.ts): per probed channel, ms from the signal to
 * the first probe intent received by the channel's game (count, p50, max over the recovered channels).
 */
export interface RecoveryFigures extends MsFigures {
  /** The faulted shard (`router` for the router), and when the signal was sent (ms after the viewers' t0). */
  shard: string | null;
  atMs: number | null;
  /** Channels probed: every channel the shard owned at the signal whose game was connected (a sample at the router's). */
  channels: number;
  /** Probed channels whose probe was acked and whose intent reached the game before the end. */
  recovered: number;
  /** Up to 50 probed channels that did not recover: `channel: sent n, acked n, {failures and closes by code}`. */
  notRecovered: string[];
  /** Signal → the router's declared-dead instant (its log line's declaredDeadAtMs), ms; null for a drain or none logged. */
  detectionMs: number | null;
  /** Declared dead → the probe's intent at the game, per recovered channel, ms (kill only). */
  moveMs: MsFigures;
  /** The probes' intents: sent, acked, and failed by code (refusals, CP_ERR_CLIENT_REQUEST_TIMEOUT…). */
  probes: { sent: number; acked: number; failedByCode: Record<string, number> };
  /** The same channels probed at the shard (shard-probe.ts): the control plane's gap, apart from the viewers' path; null for the router fault. */
  atShard: ShardRecoveryFigures | null;
}

/** One of the router's `shard declared dead` / `channels moved` log lines. */
export interface RouterLogLine {
  msg: string;
  shard: string | null;
  /** When the harness read it (ms since epoch in the scenario; ms after t0 in the report). */
  seenAt: number;
  /** The router's clock (ms since epoch) when it declared the shard dead. */
  declaredDeadAtMs: number | null;
  moved: number | null;
  failed: number | null;
  /** Router's own measure: declared dead (or drain started) → channels moved, ms. */
  moveMs: number | null;
  reason: string | null;
}

export interface FailoverReport {
  scenario: 'failover';
  command: string;
  startedAt: string;
  machine: MachineInfo;
  config: {
    gateways: number;
    shards: number;
    viewers: number;
    channels: number;
    durationS: number;
    rampS: number;
    actIntervalMs: number;
    roundMs: number;
    welcomeGrant: number;
    stakePoints: [number, number];
    ackTimeoutMs: number;
    workers: number;
    viewersPerAddress: number;
    sourceAddresses: string[];
    databaseSchema: string;
    subjectPrefix: string;
    redisPrefix: string;
    gatewayPorts: number[];
    /** The faults in the order applied, and their times as fractions of the steady phase. */
    faults: string[];
    faultsAt: number[];
    gameConnectDeadlineMs: number;
    viewerConnectDeadlineMs: number;
    gameConnectConcurrency: number;
    probeIntervalMs: number;
    routerDownMs: number;
    /** How long PostgreSQL stayed down at a postgres fault, ms. */
    postgresDownMs: number;
    /** `private, <settings>`: a server of the run's own (the postgres fault); `given`: the URL the run was given. */
    postgresServer: string;
    /** The cluster's ROUND_UNSETTLED_MAX_MS, ms. */
    roundUnsettledMaxMs: number;
  };
  timeline: {
    killed: string | null;
    killAtMs: number | null;
    drained: string | null;
    drainAtMs: number | null;
    /** The drained shard's exit: ms after SIGTERM, code, signal (null when it had not exited by the end). */
    drainExit: { ms: number; code: number | null; signal: string | null } | null;
    restartedGateway: string | null;
    gatewayRestartAtMs: number | null;
    /** ms from the gateway's SIGTERM until the new process was ready. */
    gatewayRestartMs: number | null;
    routerKilledAtMs: number | null;
    /** ms from the router's SIGKILL until the new router was ready (routerDownMs + its start). */
    routerRestartMs: number | null;
    /** The postgres fault: its start (ms after t0), how long the fast shutdown took, and from its start to accepting again (ms). */
    postgresStoppedAtMs: number | null;
    postgresStopMs: number | null;
    postgresBackMs: number | null;
    /** Children of the cluster that exited without being asked to. */
    unexpectedExits: string[];
  };
  /** Channels at a new owner after each fault (from the channels table), and moves not caused by a fault. */
  channelsMoved: { killed: number; drained: number; total: number; other: number };
  recoveryMs: {
    kill: RecoveryFigures;
    drain: RecoveryFigures;
    router: RecoveryFigures | null;
    /** After the postgres fault, from the server accepting again: the first stake committed, the first batch logged (ms). */
    postgres: { firstStakeMs: number | null; firstBatchLoggedMs: number | null } | null;
  };
  /** The router's declared-dead and channels-moved lines (seenAt ms after t0). */
  routerLog: RouterLogLine[];
  /** The game clients: one per channel, connected with retries until gameConnectDeadlineMs. */
  games: {
    channels: number;
    connected: number;
    notConnected: number;
    notConnectedSample: string[];
    /** From the first attempt to the welcome, per connected game. */
    connectMs: MsFigures;
    /** Attempts that ended without a welcome (a new client followed), by code. */
    connectFailedByCode: Record<string, number>;
    /** Every `error` event of the game clients (welcome timeouts, refused sockets…), by code. */
    errorsByCode: Record<string, number>;
    /** Every socket close of the game clients, by close code (those followed by a reconnect too). */
    closesByCode: Record<string, number>;
    /** Game clients that had ended (state closed: a close code they do not retry) when acting stopped, and a sample. */
    ended: number;
    endedSample: string[];
  };
  intents: {
    sent: number;
    acked: number;
    refused: number;
    refusedByCode: Record<string, number>;
    /** The socket closed before the ack (not acked: not lost). */
    closed: number;
    /** Never answered (e.g. sent while the channel had no owner after the kill): not acked, not lost. */
    unanswered: number;
    /** Listed in first-seen batches by the game clients. */
    counted: number;
    /** Tallied but not listed (over maxPerTick): must be 0 for intentsLost to be exact. */
    droppedOverCap: number;
  };
  /** Acked intents counted in no batch, per (viewer, option) — Σ max(0, acked − counted) — by the channel's fault. */
  intentsLost: { killed: number; drained: number; other: number; total: number };
  /** Up to 20 (viewer, channel) pairs with acked intents not counted: acked and counted per option a/b/c. */
  intentsLostSamples: string[];
  /** Batches in the event log (the run's channels) that the channel's game client never received. */
  batchesNotReceived: number;
  batchesNotReceivedSamples: string[];
  stakes: { sent: number; acked: number; refused: number; closed: number; unanswered: number };
  /** Acked stakes without their ledger transfer, or in a round that was not settled or cancelled and paid by the end. */
  stakesLost: number;
  stakesLostSamples: string[];
  rounds: { opened: number; settledByGame: number; finalBeforeSettle: number; unpaidAtEnd: number };
  duplicateEventIds: number;
  nonMonotonicEventIds: number;
  gameResyncs: number;
  /** Viewers whose socket dropped (the gateway restart), welcomed again, and not welcomed again by the end. */
  viewersDropped: number;
  viewersReconnected: number;
  viewersFailed: number;
  reconnectMs: MsFigures;
  dropsByCode: Record<string, number>;
  /** Failed reconnect attempts by gateway and error. */
  reconnectFailedByCode: Record<string, number>;
  ledgerVerify: 'ok' | { failed: Array<{ check: string; detail: string }> } | { error: string };
  actAckMs: LatencySummary;
  connections: {
    requested: number;
    connected: number;
    failed: number;
    /** Ms from a viewer's turn on the ramp to its first welcome. */
    welcomeMs: MsFigures;
    failedByCode: Record<string, number>;
    /** Failed first-connect attempts that were retried. */
    retriedByCode: Record<string, number>;
  };
  generatorCpuPct: { avg: number; peak: number };
  /** CPU of every process of the rig from the end of the ramp to the first fault (cpu.ts); null when the run ended first. */
  steadyCpu: SteadyCpu | null;
  errorLogLines: number;
  errorLogSamples: string[];
  targets: Record<string, FailoverTarget>;
  /** Every correctness target met (the exit code is 0 exactly then). */
  correct: boolean;
  elapsedS: number;
  warnings: string[];
}

const fmt = (v: unknown): string => (v === null || v === undefined ? '–' : typeof v === 'number' ? String(v) : JSON.stringify(v));

/** The report as a table (stdout). */
export function formatFailoverReport(r: FailoverReport): string {
  const c = r.config;
  const lines = [
    `failover: ${c.gateways} gateways, ${c.shards} shards, ${c.viewers} viewers over ${c.channels} channels, ${c.durationS} s`,
    `  killed ${fmt(r.timeline.killed)} at +${fmt(r.timeline.killAtMs)} ms, drained ${fmt(r.timeline.drained)} at +${fmt(r.timeline.drainAtMs)} ms (exit after ${fmt(r.timeline.drainExit?.ms)} ms), restarted ${fmt(r.timeline.restartedGateway)} at +${fmt(r.timeline.gatewayRestartAtMs)} ms (${fmt(r.timeline.gatewayRestartMs)} ms), router killed at +${fmt(r.timeline.routerKilledAtMs)} ms (back after ${fmt(r.timeline.routerRestartMs)} ms)`,
    ...(r.timeline.postgresStoppedAtMs === null
      ? []
      : [
          `  postgres             stopped at +${r.timeline.postgresStoppedAtMs} ms (shutdown ${fmt(r.timeline.postgresStopMs)} ms), accepting again after ${fmt(r.timeline.postgresBackMs)} ms; then the first stake committed after ${fmt(r.recoveryMs.postgres?.firstStakeMs)} ms, the first batch logged after ${fmt(r.recoveryMs.postgres?.firstBatchLoggedMs)} ms`,
        ]),
    `  channelsMoved        killed ${r.channelsMoved.killed}, drained ${r.channelsMoved.drained}, total ${r.channelsMoved.total} (other moves ${r.channelsMoved.other})`,
    `  games                ${r.games.connected}/${r.games.channels} connected (connectMs p50 ${fmt(r.games.connectMs.p50)}, max ${fmt(r.games.connectMs.max)}), not connected ${r.games.notConnected}, ended ${r.games.ended}`,
    ...(['kill', 'drain', 'router'] as const).flatMap((k) => {
      const f = r.recoveryMs[k];
      if (!f || f.atMs === null) return [];
      const a = f.atShard;
      return [
        `  recoveryMs ${k.padEnd(9)} viewer path: p50 ${fmt(f.p50)}, max ${fmt(f.max)} over ${f.recovered}/${f.channels} channels; detection ${fmt(f.detectionMs)}, move p50 ${fmt(f.moveMs.p50)} max ${fmt(f.moveMs.max)}`,
        ...(a
          ? [
              `  ${''.padEnd(20)} at the shard: p50 ${fmt(a.p50)}, max ${fmt(a.max)} over ${a.recovered}/${a.channels} channels (${a.movedBetweenProbes} moved between probes); move p50 ${fmt(a.moveMs.p50)} max ${fmt(a.moveMs.max)}`,
            ]
          : []),
      ];
    }),
    `  intents              sent ${r.intents.sent}, acked ${r.intents.acked}, refused ${r.intents.refused}, closed ${r.intents.closed}, unanswered ${r.intents.unanswered}, counted ${r.intents.counted}`,
    `  intentsLost          killed ${r.intentsLost.killed}, drained ${r.intentsLost.drained}, other ${r.intentsLost.other}`,
    `  stakes               sent ${r.stakes.sent}, acked ${r.stakes.acked}, refused ${r.stakes.refused}, closed ${r.stakes.closed}, unanswered ${r.stakes.unanswered}; lost ${r.stakesLost}`,
    `  rounds               opened ${r.rounds.opened}, settled ${r.rounds.settledByGame}, final before settle ${r.rounds.finalBeforeSettle}, unpaid at end ${r.rounds.unpaidAtEnd}`,
    `  event ids            duplicates ${r.duplicateEventIds}, non-monotonic ${r.nonMonotonicEventIds}, game resyncs ${r.gameResyncs}`,
    `  viewers              dropped ${r.viewersDropped}, reconnected ${r.viewersReconnected}, failed ${r.viewersFailed}, reconnectMs p50 ${fmt(r.reconnectMs.p50)} max ${fmt(r.reconnectMs.max)}`,
    `  ledgerVerify         ${r.ledgerVerify === 'ok' ? 'ok' : JSON.stringify(r.ledgerVerify).slice(0, 300)}`,
    `  act ack ms           p50 ${fmt(r.actAckMs.p50)}, p99 ${fmt(r.actAckMs.p99)}, max ${fmt(r.actAckMs.max)} (${r.actAckMs.count})`,
    `  connections          ${r.connections.connected}/${r.connections.requested}, failed ${r.connections.failed}, welcomeMs p50 ${fmt(r.connections.welcomeMs.p50)} max ${fmt(r.connections.welcomeMs.max)}`,
    `  error log lines      ${r.errorLogLines}`,
    ...(r.steadyCpu === null
      ? []
      : [
          `  steady cpu           ${r.steadyCpu.seconds} s before the first fault, machine ${fmt(r.steadyCpu.machineBusyPct)} % busy of ${fmt(r.steadyCpu.cores)} cores; % of a core (µs per channel-second):`,
          `                       ${[...r.steadyCpu.processes]
            .sort((a, b) => (b.cpuPct ?? -1) - (a.cpuPct ?? -1))
            .map((p) => `${p.name} ${fmt(p.cpuPct)} (${fmt(p.usPerChannelSecond)})`)
            .join(', ')}`,
        ]),
    'targets:',
    ...Object.entries(r.targets).map(
      ([k, t]) => `  ${t.ok ? 'met   ' : 'MISSED'} ${k.padEnd(26)} ${fmt(t.value).padEnd(12)} ${t.limit} (${t.kind})`,
    ),
    `correct: ${r.correct}; ${r.elapsedS} s`,
  ];
  for (const w of r.warnings) lines.push(`warning: ${w}`);
  return lines.join('\n');
}
