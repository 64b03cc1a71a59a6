/**
 * Messages between the crowd coordinator and its worker processes
 * (node:child_process IPC, JSON serialisation). Histograms travel as
 * hdr-histogram compressed base64 of µs values.
 */

/** The scenario's one action and its options (declared by the coordinator's game clients). */
export const ACTION = 'vote';
export const OPTIONS = ['a', 'b', 'c'] as const;

/** Everything a worker needs; sent once after fork. */
export interface WorkerConfig {
  workerIndex: number;
  workers: number;
  /** Gateway base URL (http://127.0.0.1:8080). */
  url: string;
  /** Viewers in the whole run; this worker takes indices i ≡ workerIndex (mod workers). */
  viewers: number;
  /** Channel names; viewer i joins channels[i % channels.length]. */
  channels: string[];
  /** Source address per block of `viewersPerAddress` viewers (i / viewersPerAddress); empty = OS default. */
  sourceAddresses: string[];
  viewersPerAddress: number;
  tenantId: string;
  tenantSecret: string;
  /** Viewer i starts connecting at t0 + i · rampS · 1000 / viewers. */
  rampS: number;
  /** Steady phase after the ramp, s. Viewers act until t0 + (rampS + durationS) · 1000. */
  durationS: number;
  /** Mean interval between one viewer's acts, ms. */
  actIntervalMs: number;
  /** Time allowed for outstanding acks after acting stops, ms. */
  drainMs: number;
  /** Per-connection welcome deadline, ms. */
  welcomeDeadlineMs: number;
}

export type CoordinatorMessage = { type: 'config'; config: WorkerConfig } | { type: 'start'; t0: number } | { type: 'stop' };

/** Counters every worker keeps (cumulative). */
export interface WorkerCounters {
  /** Viewers this worker is responsible for. */
  viewers: number;
  /** Connect attempts started. */
  started: number;
  connected: number;
  failed: number;
  /** Viewers that were connected and lost their socket without us closing it. */
  dropped: number;
  sent: number;
  acked: number;
  refused: number;
  /** Acts whose socket closed before the ack (rejected by the SDK). */
  lost: number;
  updates: number;
}

/** Counters all at zero (a worker's start, or the sum's identity). */
export function emptyCounters(viewers = 0): WorkerCounters {
  return { viewers, started: 0, connected: 0, failed: 0, dropped: 0, sent: 0, acked: 0, refused: 0, lost: 0, updates: 0 };
}

export interface WorkerProgress {
  type: 'progress';
  workerIndex: number;
  counters: WorkerCounters;
  /** Cumulative act-ack histogram so far. */
  actAck: string;
  /** This process's CPU over the last interval, % of one core. */
  cpuPct: number;
}

export interface WorkerFinal {
  type: 'final';
  workerIndex: number;
  counters: WorkerCounters;
  /** Acts sent and neither acked, refused nor lost when the worker reported. */
  inFlight: number;
  refusedByCode: Record<string, number>;
  failedByCode: Record<string, number>;
  droppedByCode: Record<string, number>;
  errorsByCode: Record<string, number>;
  hist: { actAck: string; updateLag: string; connect: string };
  /** Acks and updates received inside the steady window [t0 + ramp, t0 + ramp + duration]. */
  steady: { acked: number; refused: number; updates: number };
  updateBytes: number;
  maxUpdateBytes: number;
  /** Average CPU over [t0, end of acting], % of one core; peak = highest 2 s interval. */
  cpu: { avgPct: number; peakPct: number };
}

export type WorkerMessage =
  | { type: 'ready'; workerIndex: number; mintMs: number }
  | WorkerProgress
  | WorkerFinal
  | { type: 'fatal'; workerIndex: number; message: string };
