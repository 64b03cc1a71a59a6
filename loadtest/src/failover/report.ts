/**
 * The failover scenario's report (JSON with `--json`, a table on stdout).
 * Every field is described in loadtest/README.md ("failover").
 */
import type { MachineInfo } from '../crowd/report.ts';
import type { LatencySummary } from '../hist.ts';

/** Nearest-rank percentiles of ms samples (null when there are none). */
export interface MsFigures {
  count: number;
  p50: number | null;
  max: number | null;
}

/** One failover target. `correctness` targets decide the exit code; `timing` ones are reported only. */
export interface FailoverTarget {
  value: number | string | null;
  limit: string;
  ok: boolean;
  kind: 'correctness' | 'timing';
}

/** Recovery of the channels one fault moved. */
export interface RecoveryFigures extends MsFigures {
  /** The faulted shard, and when the signal was sent (ms after the viewers' t0). */
  shard: string | null;
  atMs: number | null;
  /** Channels the shard owned at the signal. */
  channels: number;
  /** Of those, channels with no batch at a newer epoch seen by their game client by the end. */
  notRecovered: string[];
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
    /** Fault times as fractions of the steady phase: kill, drain, gateway restart. */
    faultsAt: [number, number, number];
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
    /** Children of the cluster that exited without being asked to. */
    unexpectedExits: string[];
  };
  /** Channels at a new owner after each fault (from the channels table), and moves not caused by a fault. */
  channelsMoved: { killed: number; drained: number; total: number; other: number };
  recoveryMs: { kill: RecoveryFigures; drain: RecoveryFigures };
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
  connections: { requested: number; connected: number; failed: number; failedByCode: Record<string, number> };
  generatorCpuPct: { avg: number; peak: number };
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
    `  killed ${fmt(r.timeline.killed)} at +${fmt(r.timeline.killAtMs)} ms, drained ${fmt(r.timeline.drained)} at +${fmt(r.timeline.drainAtMs)} ms (exit after ${fmt(r.timeline.drainExit?.ms)} ms), restarted ${fmt(r.timeline.restartedGateway)} at +${fmt(r.timeline.gatewayRestartAtMs)} ms (${fmt(r.timeline.gatewayRestartMs)} ms)`,
    `  channelsMoved        killed ${r.channelsMoved.killed}, drained ${r.channelsMoved.drained}, total ${r.channelsMoved.total} (other moves ${r.channelsMoved.other})`,
    `  recoveryMs kill      p50 ${fmt(r.recoveryMs.kill.p50)}, max ${fmt(r.recoveryMs.kill.max)} over ${r.recoveryMs.kill.count}/${r.recoveryMs.kill.channels} channels`,
    `  recoveryMs drain     p50 ${fmt(r.recoveryMs.drain.p50)}, max ${fmt(r.recoveryMs.drain.max)} over ${r.recoveryMs.drain.count}/${r.recoveryMs.drain.channels} channels`,
    `  intents              sent ${r.intents.sent}, acked ${r.intents.acked}, refused ${r.intents.refused}, closed ${r.intents.closed}, unanswered ${r.intents.unanswered}, counted ${r.intents.counted}`,
    `  intentsLost          killed ${r.intentsLost.killed}, drained ${r.intentsLost.drained}, other ${r.intentsLost.other}`,
    `  stakes               sent ${r.stakes.sent}, acked ${r.stakes.acked}, refused ${r.stakes.refused}, closed ${r.stakes.closed}, unanswered ${r.stakes.unanswered}; lost ${r.stakesLost}`,
    `  rounds               opened ${r.rounds.opened}, settled ${r.rounds.settledByGame}, final before settle ${r.rounds.finalBeforeSettle}, unpaid at end ${r.rounds.unpaidAtEnd}`,
    `  event ids            duplicates ${r.duplicateEventIds}, non-monotonic ${r.nonMonotonicEventIds}, game resyncs ${r.gameResyncs}`,
    `  viewers              dropped ${r.viewersDropped}, reconnected ${r.viewersReconnected}, failed ${r.viewersFailed}, reconnectMs p50 ${fmt(r.reconnectMs.p50)} max ${fmt(r.reconnectMs.max)}`,
    `  ledgerVerify         ${r.ledgerVerify === 'ok' ? 'ok' : JSON.stringify(r.ledgerVerify).slice(0, 300)}`,
    `  act ack ms           p50 ${fmt(r.actAckMs.p50)}, p99 ${fmt(r.actAckMs.p99)}, max ${fmt(r.actAckMs.max)} (${r.actAckMs.count})`,
    `  connections          ${r.connections.connected}/${r.connections.requested}, failed ${r.connections.failed}`,
    `  error log lines      ${r.errorLogLines}`,
    'targets:',
    ...Object.entries(r.targets).map(
      ([k, t]) => `  ${t.ok ? 'met   ' : 'MISSED'} ${k.padEnd(26)} ${fmt(t.value).padEnd(12)} ${t.limit} (${t.kind})`,
    ),
    `correct: ${r.correct}; ${r.elapsedS} s`,
  ];
  for (const w of r.warnings) lines.push(`warning: ${w}`);
  return lines.join('\n');
}
