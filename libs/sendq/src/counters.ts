import type { Metrics, Refusals } from '@crowdplay/telemetry';
import type { SendQueueOptions } from './options.ts';
import type { Lane, LaneDepth, LimitName, OutcomeKind, RefuseReason, SendQueueStats } from './types.ts';

/** The window of the lane utilisation gauge, ms: call starts in the last this many ms ÷ what the bot rate allows in it. */
export const LANE_USE_WINDOW_MS = 10_000;

/** Expired jobs are logged at most this often, ms (each line carries the count since the previous one). */
const EXPIRED_LOG_EVERY_MS = 1_000;

/**
 * Refusal codes reported to `Refusals` (area `sendq`). Not yet in the
 * catalogue (libs/protocol/src/errors.ts); proposed there as CP_ERR_SENDQ_*.
 */
export const REFUSAL_CODES: Record<RefuseReason, string> = {
  deactivated: 'CP_ERR_SENDQ_CHAT_DEACTIVATED',
  full: 'CP_ERR_SENDQ_FULL',
  closed: 'CP_ERR_SENDQ_CLOSED',
  stale: 'CP_ERR_SENDQ_STALE',
};

function emptyStats(): SendQueueStats {
  const outcomes = (): Record<OutcomeKind, number> => ({ ok: 0, retryAfter: 0, deactivate: 0, drop: 0, retry: 0, requeue: 0, threw: 0 });
  return {
    sends: { tx: outcomes(), board: outcomes() },
    rateLimited: 0,
    pauseMs: 0,
    superseded: 0,
    purged: 0,
    failed: 0,
    expired: { tx: 0, board: 0 },
    refused: { deactivated: 0, full: 0, closed: 0, stale: 0 },
    bucketWaits: { pause: 0, bot: 0, group: 0, chat: 0 },
    booked: { takes: 0, waitMs: 0 },
    windowWaits: { calls: 0, waitMs: 0 },
    pauseEndMs: 0,
    slowStartWindow: 1,
    preempted: 0,
    laneUtilisation: { tx: 0, board: 0 },
  };
}

type Counter = ReturnType<Metrics['counter']>;
type Histogram = ReturnType<Metrics['histogram']>;

interface Instruments {
  sends: Counter;
  rateLimited: Counter;
  pauseMs: Counter;
  superseded: Counter;
  purged: Counter;
  failed: Counter;
  expired: Counter;
  refused: Counter;
  bucketWaits: Counter;
  booked: Counter;
  bookedMs: Counter;
  windowWaits: Counter;
  windowWaitMs: Counter;
  preempted: Counter;
  jobMs: Histogram;
}

/** What the lane utilisation is measured against: the bot rate and the queue's clock. */
export interface LaneUseBasis {
  botRatePerS: number;
  now: () => number;
}

/**
 * The queue's counters: kept in `stats` (this process) and, when a `Metrics`
 * is given, exported as `crowdplay_sendq_*`:
 * sends_total{lane,outcome}, rate_limited_total (429s), pause_ms_total,
 * superseded_total{lane}, purged_total, failed_total, expired_total{lane}, refused_total{reason},
 * bucket_waits_total{limit}, booked_total, booked_wait_ms_total, window_waits_total, window_wait_ms_total, job_ms{lane,status} (enqueued → settled),
 * preempted_total (board slots a reply took),
 * and the gauges depth{lane}, pause_end_seconds (the latest bot-wide pause's end, unix s),
 * slow_start_window (calls let in flight now) and lane_utilisation{lane} (this process's call starts of the lane
 * in the last LANE_USE_WINDOW_MS ÷ what the bot rate allows in it).
 */
export class QueueCounters {
  readonly stats: SendQueueStats = emptyStats();
  private expiredLoggedAtMs = -Infinity;
  private expiredSinceLog = 0;
  private readonly m: Instruments | undefined;
  /** Call starts of the last LANE_USE_WINDOW_MS, per lane, oldest first (ms on the queue's clock). */
  private readonly starts: Record<Lane, number[]> = { tx: [], board: [] };

  /**
   * @param use the bot rate and clock the lane utilisation is measured against; unset: it stays 0
   */
  constructor(
    metrics: Metrics | undefined,
    private readonly refusals: Refusals | undefined,
    depth: () => LaneDepth,
    private readonly use?: LaneUseBasis,
  ) {
    if (metrics === undefined) return;
    this.m = {
      sends: metrics.counter('crowdplay_sendq_sends_total'),
      rateLimited: metrics.counter('crowdplay_sendq_rate_limited_total'),
      pauseMs: metrics.counter('crowdplay_sendq_pause_ms_total'),
      superseded: metrics.counter('crowdplay_sendq_superseded_total'),
      purged: metrics.counter('crowdplay_sendq_purged_total'),
      failed: metrics.counter('crowdplay_sendq_failed_total'),
      expired: metrics.counter('crowdplay_sendq_expired_total'),
      refused: metrics.counter('crowdplay_sendq_refused_total'),
      bucketWaits: metrics.counter('crowdplay_sendq_bucket_waits_total'),
      booked: metrics.counter('crowdplay_sendq_booked_total'),
      bookedMs: metrics.counter('crowdplay_sendq_booked_wait_ms_total'),
      windowWaits: metrics.counter('crowdplay_sendq_window_waits_total'),
      windowWaitMs: metrics.counter('crowdplay_sendq_window_wait_ms_total'),
      preempted: metrics.counter('crowdplay_sendq_preempted_total'),
      jobMs: metrics.histogram('crowdplay_sendq_job_ms'),
    };
    metrics.gauge('crowdplay_sendq_depth', () => {
      const d = depth();
      return [
        [d.tx, { lane: 'tx' }],
        [d.board, { lane: 'board' }],
      ];
    });
    metrics.gauge('crowdplay_sendq_pause_end_seconds', () => this.stats.pauseEndMs / 1000);
    metrics.gauge('crowdplay_sendq_slow_start_window', () => this.stats.slowStartWindow);
    metrics.gauge('crowdplay_sendq_lane_utilisation', () => [
      [this.laneUtilisation('tx'), { lane: 'tx' }],
      [this.laneUtilisation('board'), { lane: 'board' }],
    ]);
  }

  /** A call of `lane` starts now (`nowMs`, the queue's clock): counted in the lane utilisation. */
  callStarted(lane: Lane, nowMs: number): void {
    if (this.use === undefined) return;
    const q = this.starts[lane];
    q.push(nowMs);
    this.trim(q, nowMs);
  }

  /** Share of the bot rate `lane`'s calls used in the last LANE_USE_WINDOW_MS (0…1; 0 without a basis). */
  laneUtilisation(lane: Lane): number {
    if (this.use === undefined) return 0;
    const q = this.starts[lane];
    this.trim(q, this.use.now());
    return Math.round((q.length / ((this.use.botRatePerS * LANE_USE_WINDOW_MS) / 1000)) * 1000) / 1000;
  }

  private trim(q: number[], nowMs: number): void {
    let i = 0;
    while (i < q.length && q[i]! <= nowMs - LANE_USE_WINDOW_MS) i++;
    if (i > 0) q.splice(0, i);
  }

  /** A reply took the booked slot of a board call (that board moved to the bot's next free slot). */
  preempted(): void {
    this.stats.preempted++;
    this.m?.preempted.add(1);
  }

  /** The slow-start window (calls this process lets in flight now) changed to `n`. */
  slowStart(n: number): void {
    this.stats.slowStartWindow = n;
  }

  /** This process saw a bot-wide pause ending at `endMs` (the queue's clock, ms); the gauge keeps the latest end. */
  pauseEnd(endMs: number): void {
    if (endMs > this.stats.pauseEndMs) this.stats.pauseEndMs = endMs;
  }

  send(lane: Lane, kind: OutcomeKind): void {
    this.stats.sends[lane][kind]++;
    this.m?.sends.add(1, { lane, outcome: kind });
  }

  rateLimited(pauseMs: number): void {
    this.stats.rateLimited++;
    this.stats.pauseMs += pauseMs;
    this.m?.rateLimited.add(1);
    this.m?.pauseMs.add(pauseMs);
  }

  superseded(lane: Lane): void {
    this.stats.superseded++;
    this.m?.superseded.add(1, { lane });
  }

  purged(n: number): void {
    if (n <= 0) return;
    this.stats.purged += n;
    this.m?.purged.add(n);
  }

  failed(): void {
    this.stats.failed++;
    this.m?.failed.add(1);
  }

  /** A job's deadline passed while it waited: counted, and logged at warn (one line per second at most, with the count since the last). */
  expired(
    lane: Lane,
    logger: SendQueueOptions['logger'],
    nowMs: number,
    job: { id: string; chatId: number; waitedMs: number; deadlineMs: number },
  ): void {
    this.stats.expired[lane]++;
    this.m?.expired.add(1, { lane });
    this.expiredSinceLog++;
    if (logger === undefined || nowMs - this.expiredLoggedAtMs < EXPIRED_LOG_EVERY_MS) return;
    logger.warn(
      {
        lane,
        jobId: job.id,
        chatId: job.chatId,
        waitedMs: Math.round(job.waitedMs),
        deadlineMs: job.deadlineMs,
        expired: this.expiredSinceLog,
      },
      'send job dropped: its deadline passed while it waited',
    );
    this.expiredLoggedAtMs = nowMs;
    this.expiredSinceLog = 0;
  }

  refused(reason: RefuseReason, chatId: number): void {
    this.stats.refused[reason]++;
    this.m?.refused.add(1, { reason });
    this.refusals?.refuse('sendq', REFUSAL_CODES[reason], { chatId });
  }

  /** A job settled `ms` after it was enqueued (its time in the queue and its call). */
  settled(lane: Lane, status: string, ms: number): void {
    this.m?.jobMs.record(Math.max(0, ms), { lane, status });
  }

  bucketWait(limit: LimitName): void {
    this.stats.bucketWaits[limit]++;
    this.m?.bucketWaits.add(1, { limit });
  }

  /** A take was granted for a booked bot slot `waitMs` away. */
  bookedWait(waitMs: number): void {
    this.stats.booked.takes++;
    this.stats.booked.waitMs += waitMs;
    this.m?.booked.add(1);
    this.m?.bookedMs.add(waitMs);
  }

  /** A call waited `waitMs` in the call window. */
  windowWait(waitMs: number): void {
    this.stats.windowWaits.calls++;
    this.stats.windowWaits.waitMs += waitMs;
    this.m?.windowWaits.add(1);
    this.m?.windowWaitMs.add(waitMs);
  }

  /** A deep copy of the stats. */
  snapshot(): SendQueueStats {
    this.stats.laneUtilisation = { tx: this.laneUtilisation('tx'), board: this.laneUtilisation('board') };
    return structuredClone(this.stats);
  }
}
