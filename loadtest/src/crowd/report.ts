/**
 * The crowd scenario's report: the JSON written by `--json` and the printed
 * table. Every field is defined in loadtest/README.md.
 */
import type { LatencySummary } from '../hist.ts';
import type { ProcessSample } from '../proc.ts';

export interface MachineInfo {
  cpuModel: string;
  cpuCount: number;
  memoryBytes: number;
  nodeVersion: string;
  platform: string;
  release: string;
}

export interface CrowdReport {
  scenario: 'crowd';
  /** The command line (or a description of the programmatic call). */
  command: string;
  /** ISO time the run started. */
  startedAt: string;
  url: string;
  machine: MachineInfo;
  config: {
    viewers: number;
    channels: number;
    durationS: number;
    rampS: number;
    workers: number;
    actIntervalMs: number;
    drainS: number;
    viewersPerAddress: number;
    sourceAddresses: string[];
    tenantId: string;
  };
  viewers: {
    requested: number;
    connected: number;
    failed: number;
    failedByCode: Record<string, number>;
    dropped: number;
    droppedByCode: Record<string, number>;
  };
  intents: {
    sent: number;
    acked: number;
    refused: number;
    refusedByCode: Record<string, number>;
    lost: number;
    inFlight: number;
    /** Sum of the batches' tallies (all actions), as the game saw them; includes the probe acts. */
    tallied: number;
    /** Acts made by the readiness probes (one viewer per channel, before the ramp). */
    probe: number;
  };
  actAckMs: LatencySummary;
  connectMs: LatencySummary;
  batchLagMs: LatencySummary & { intakeOffsetMs: number };
  updateLagMs: LatencySummary;
  ackedPerSecond: number;
  updatesPerSecond: number;
  updatesPerViewerPerSecond: number;
  bytesPerBroadcast: number | null;
  maxBytesPerBroadcast: number;
  batches: number;
  droppedOverCap: number;
  serverPid: number | null;
  serverPidSource: 'flag' | 'port' | null;
  serverCpuPct: number | null;
  serverCpuMsPerIntent: number | null;
  serverCpuNote: string | null;
  /** The server (`server`) and every `--watch-pid` process over [t0, end of acting]: CPU %, RSS at start, end and peak. */
  processes: ProcessSample[];
  /** Server RSS at the end of acting minus at t0, per viewer connected, bytes (memory per connection); null when unknown. */
  serverRssBytesPerViewer: number | null;
  generatorCpuPct: number[];
  generatorCpuPeakPct: number[];
  coordinatorCpuPct: number;
  /** Whole machine (/proc/stat) over the same window, % of all cores; null when unreadable. */
  machineCpuPct: number | null;
  generatorBound: boolean;
  durationS: number;
  elapsedS: number;
  errorsByCode: Record<string, number>;
  complete: boolean;
  warnings: string[];
  baseline?: CrowdReport;
  ratios?: { actAckP95: number | null; serverCpuPerIntent: number | null };
}

const mb = (b: number | null): string => (b === null ? 'n/a' : (b / 1_048_576).toFixed(1));
const fmt = (n: number | null | undefined, unit = ''): string =>
  n === null || n === undefined ? 'n/a' : `${Number.isInteger(n) ? n.toLocaleString('en-US') : n.toFixed(2)}${unit}`;
const lat = (s: LatencySummary): string =>
  `p50 ${fmt(s.p50)}  p95 ${fmt(s.p95)}  p99 ${fmt(s.p99)}  max ${fmt(s.max)}  (n=${s.count.toLocaleString('en-US')})`;
const codes = (m: Record<string, number>): string => {
  const e = Object.entries(m);
  return e.length === 0 ? '' : `  [${e.map(([k, v]) => `${k}: ${v}`).join(', ')}]`;
};

/** The report as an aligned two-column text table (with the baseline beside it when present). */
export function formatReport(r: CrowdReport): string {
  const rows: Array<[string, string]> = [
    ['command', r.command],
    ['url', r.url],
    [
      'machine',
      `${r.machine.cpuCount}× ${r.machine.cpuModel}, ${(r.machine.memoryBytes / 2 ** 30).toFixed(1)} GiB, node ${r.machine.nodeVersion}`,
    ],
    [
      'config',
      `${r.config.viewers} viewers, ${r.config.channels} channels, ramp ${fmt(r.config.rampS)} s, ${r.config.durationS} s, ${r.config.workers} workers, ${r.config.sourceAddresses.length} source addresses`,
    ],
    ['viewers connected', `${fmt(r.viewers.connected)} / ${fmt(r.viewers.requested)}`],
    ['viewers failed', fmt(r.viewers.failed) + codes(r.viewers.failedByCode)],
    ['viewers dropped', fmt(r.viewers.dropped) + codes(r.viewers.droppedByCode)],
    ['intents sent', fmt(r.intents.sent)],
    ['intents acked', fmt(r.intents.acked)],
    ['intents refused', fmt(r.intents.refused) + codes(r.intents.refusedByCode)],
    ['intents lost / in flight', `${fmt(r.intents.lost)} / ${fmt(r.intents.inFlight)}`],
    ['intents tallied (game)', fmt(r.intents.tallied)],
    ['acked per second', fmt(r.ackedPerSecond)],
    ['act ack ms', lat(r.actAckMs)],
    ['batch lag ms', `${lat(r.batchLagMs)}  (incl. +${fmt(r.batchLagMs.intakeOffsetMs)} intake)`],
    ['update lag ms', lat(r.updateLagMs)],
    ['connect ms', lat(r.connectMs)],
    ['updates per second', `${fmt(r.updatesPerSecond)} (${fmt(r.updatesPerViewerPerSecond)} per viewer)`],
    ['bytes per broadcast', `${fmt(r.bytesPerBroadcast)} (max ${fmt(r.maxBytesPerBroadcast)})`],
    ['batches / dropped over cap', `${fmt(r.batches)} / ${fmt(r.droppedOverCap)}`],
    [
      'server cpu %',
      r.serverCpuPct === null
        ? `unknown (${r.serverCpuNote ?? 'no pid'})`
        : `${fmt(r.serverCpuPct)} (pid ${r.serverPid}, ${r.serverPidSource}); ${fmt(r.serverCpuMsPerIntent)} ms per intent`,
    ],
    ...r.processes.map((p): [string, string] => [
      `process ${p.name} (pid ${p.pid})`,
      `cpu ${fmt(p.cpuPct)} %; rss MB start ${mb(p.rssStartBytes)} end ${mb(p.rssEndBytes)} peak ${mb(p.rssPeakBytes)}`,
    ]),
    ['server rss per viewer', r.serverRssBytesPerViewer === null ? 'unknown' : `${fmt(r.serverRssBytesPerViewer)} bytes`],
    [
      'generator cpu %',
      `${r.generatorCpuPct.map((p) => fmt(p)).join(' ')} (peak ${r.generatorCpuPeakPct.map((p) => fmt(p)).join(' ')}); coordinator ${fmt(r.coordinatorCpuPct)}`,
    ],
    ['machine cpu % (all cores)', fmt(r.machineCpuPct)],
    ['generator bound', r.generatorBound ? 'YES: the load generator, not the server, may be the limit' : 'no'],
    ['duration s (steady) / elapsed s', `${fmt(r.durationS)} / ${fmt(r.elapsedS)}`],
    ['complete', r.complete ? 'yes' : 'NO'],
  ];
  if (r.ratios && r.baseline) {
    rows.push(['baseline act ack ms', lat(r.baseline.actAckMs)]);
    rows.push(['baseline server cpu %', `${fmt(r.baseline.serverCpuPct)}; ${fmt(r.baseline.serverCpuMsPerIntent)} ms per intent`]);
    rows.push(['ratio act ack p95 (ours/ref)', fmt(r.ratios.actAckP95)]);
    rows.push(['ratio server cpu/intent (ours/ref)', fmt(r.ratios.serverCpuPerIntent)]);
  }
  for (const w of r.warnings) rows.push(['warning', w]);
  const width = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join('\n');
}
