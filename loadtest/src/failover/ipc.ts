/**
 * Messages between the failover coordinator (scenario.ts) and its viewer
 * worker processes (worker.ts), over node:child_process IPC (JSON). The
 * act-ack histogram travels as hdr-histogram compressed base64 of µs values.
 */

/** The scenario's free action and its options (declared by the game clients, maxPerTick above the offered load). */
export const ACTION = 'vote';
export const OPTIONS = ['a', 'b', 'c'] as const;

/** The viewer id (token `sub`) of viewer index `i`. */
export const viewerId = (i: number): string => `fv-${i}`;

/**
 * The gateway index of viewer `i` of C channels over G gateways: (i + ⌊i / C⌋) mod G. Consecutive viewers alternate
 * gateways (one viewer per channel still uses every gateway), and each further viewer of a channel moves to the next
 * gateway (a channel with G viewers has one on every gateway).
 */
export function viewerGateway(i: number, C: number, G: number): number {
  return (i + Math.floor(i / C)) % G;
}

/** Everything a worker needs; sent once after fork. */
export interface FailoverWorkerConfig {
  workerIndex: number;
  workers: number;
  /** Gateway base URLs; viewer i connects to gatewayUrls[(i + ⌊i / channels⌋) mod G] (worker.ts viewerGateway). */
  gatewayUrls: string[];
  /** Viewers in the whole run; this worker takes indices i ≡ workerIndex (mod workers). */
  viewers: number;
  /** Channel names; viewer i joins channels[i mod C]. */
  channels: string[];
  /** Source address per block of `viewersPerAddress` viewers; empty = OS default. */
  sourceAddresses: string[];
  viewersPerAddress: number;
  tenantId: string;
  tenantSecret: string;
  /** Viewer i starts connecting at t0 + i · rampMs / viewers. */
  rampMs: number;
  /** Mean interval between one viewer's acts, ms. */
  actIntervalMs: number;
  /** An act or stake not answered this long after it was sent counts as unanswered (a later answer still counts), ms. */
  ackTimeoutMs: number;
  /** Per-connection welcome deadline, ms. */
  welcomeDeadlineMs: number;
  /**
   * A viewer's first connect that fails is retried (backoff, next gateway) until this long after the end of the
   * ramp; one still failing then counts in `connectFailed`, ms.
   */
  connectDeadlineMs: number;
  /** Points per stake, uniform in [lo, hi]. */
  stakePoints: [number, number];
  /** Reconnect backoff of the viewers (full jitter), ms; a dropped viewer reconnects to the next gateway of the list. */
  backoff: { initialMs: number; maxMs: number };
}

export type FailoverCoordinatorMessage =
  | { type: 'config'; config: FailoverWorkerConfig }
  | { type: 'start'; t0: number }
  /**
   * Stop acting and staking; wait for outstanding answers up to `drainMs` and for dropped viewers to be welcomed
   * again up to `reconnectWaitMs`, then report `final`.
   */
  | { type: 'stop'; drainMs: number; reconnectWaitMs: number }
  /** Close every socket and exit. */
  | { type: 'exit' };

/** An acked stake, as the viewer saw it. */
export interface AckedStake {
  /** Viewer index (viewer id `fv-<i>`). */
  v: number;
  channel: string;
  round: string;
  outcome: string;
  points: number;
  /** The stake's idempotency key. */
  key: string;
}

/** Cumulative counters of one worker. */
export interface FailoverCounters {
  viewers: number;
  connected: number;
  connectFailed: number;
  actsSent: number;
  actsAcked: number;
  actsRefused: number;
  /** The socket closed before the ack (the SDK rejected the act). */
  actsClosed: number;
  /** Not answered within ackTimeoutMs (and never answered by the end). */
  actsUnanswered: number;
  /** Answered after ackTimeoutMs (counted as acked or refused too). */
  actsLate: number;
  stakesSent: number;
  stakesAcked: number;
  stakesRefused: number;
  stakesClosed: number;
  stakesUnanswered: number;
  /** Viewers whose socket dropped (not closed by us) at least once. */
  viewersDropped: number;
  /** Dropped viewers welcomed again after their last drop. */
  viewersReconnected: number;
}

export function emptyFailoverCounters(viewers = 0): FailoverCounters {
  return {
    viewers,
    connected: 0,
    connectFailed: 0,
    actsSent: 0,
    actsAcked: 0,
    actsRefused: 0,
    actsClosed: 0,
    actsUnanswered: 0,
    actsLate: 0,
    stakesSent: 0,
    stakesAcked: 0,
    stakesRefused: 0,
    stakesClosed: 0,
    stakesUnanswered: 0,
    viewersDropped: 0,
    viewersReconnected: 0,
  };
}

export interface FailoverWorkerProgress {
  type: 'progress';
  workerIndex: number;
  counters: FailoverCounters;
  cpuPct: number;
}

export interface FailoverWorkerFinal {
  type: 'final';
  workerIndex: number;
  counters: FailoverCounters;
  /** Acked acts per viewer and option: `acked[v]` = [a, b, c] counts (viewer index v of this worker's share; sparse). */
  acked: Record<number, number[]>;
  stakes: AckedStake[];
  refusedByCode: Record<string, number>;
  connectFailedByCode: Record<string, number>;
  /** Failed first-connect attempts that were retried, by error. */
  connectRetriedByCode: Record<string, number>;
  dropsByCode: Record<string, number>;
  /** Failed reconnect attempts by gateway and error (refused, 429/503, welcome timeout…). */
  reconnectFailedByCode: Record<string, number>;
  /** Per dropped-and-reconnected outage: ms from the close to the next welcome. */
  reconnectMs: number[];
  /** Per viewer welcomed: ms from its turn on the ramp to its first welcome (retries included). */
  welcomeMs: number[];
  /** Gateway index of each viewer that dropped and was not welcomed again. */
  failedByGateway: Record<number, number>;
  /** Dropped viewers per gateway index. */
  droppedByGateway: Record<number, number>;
  actAck: string;
  cpu: { avgPct: number; peakPct: number };
}

export type FailoverWorkerMessage =
  | { type: 'ready'; workerIndex: number }
  | FailoverWorkerProgress
  | FailoverWorkerFinal
  | { type: 'fatal'; workerIndex: number; message: string };
