/**
 * The render queue: the port between the live boards (which submit a chat's
 * board version) and the render worker (which renders it in the RenderPool
 * and hands the PNG on). Two adapters behind one interface, chosen by
 * REDIS_URL in {@link openRenderQueue}:
 *
 * - {@link MemoryRenderQueue} (no REDIS_URL): submits straight into this
 *   process's RenderPool (the pool's own queue, per-chat supersession and
 *   bound); the consumer must run in this process.
 * - `BullmqRenderQueue` (render-queue-bullmq.ts): jobs in Redis, taken by a
 *   worker in any process (`crowdplay service board-renderer`, or a gateway
 *   with BOARD_RENDER_IN_PROCESS).
 *
 * Both: boards wait in rank order (`submit`'s `rankMs`: quietest chat first);
 * a newer version of a chat replaces its queued (not yet started) one;
 * a chat's versions are rendered one at a time, in order; a render that
 * throws is counted and not retried (the consumer's `onFailed` hears of it);
 * a job over BOARD_RENDER_MAX_JOB_BYTES is refused. Shared behaviour suite: test/render-queue-suite.ts.
 */
import { validateBoard, type Board, type BoardMetrics, type BoardRefusals, type RenderPool } from '@crowdplay/board';

/** What `submit` did with a board. */
export type SubmitOutcome =
  /** Accepted: it will be rendered unless a newer version of the chat replaces it first. */
  | { readonly status: 'queued' }
  /** Not newer than a version of the chat already queued or rendering (`by`). */
  | { readonly status: 'superseded'; readonly by: number }
  /** Refused (counted): the queue is full, the job is over the byte limit, or the queue is closed. */
  | { readonly status: 'refused'; readonly reason: 'queue-full' | 'too-large' | 'closed' };

/** Called with each rendered PNG; its promise is awaited before the chat's next version is handed on. */
export type OnRendered = (chatId: number, version: number, png: Buffer) => Promise<unknown>;

/** The consumer side: where jobs are rendered and where the PNGs go. */
export interface RenderConsumer {
  /** The render pool (its semaphore bounds the renders on threads). */
  readonly pool: RenderPool;
  readonly onRendered: OnRendered;
  /**
   * A job of chat `chatId` at `version` ended without a board handed on: its render threw, or `onRendered`
   * threw (counted in `failed`; not retried). The producer's cue to hand the chat on again. Must not throw.
   */
  readonly onFailed?: (chatId: number, version: number) => void;
  /**
   * BullMQ: jobs this process works on at once (BOARD_RENDER_JOBS_IN_FLIGHT). More than the pool's slots, so one
   * job's Redis round trips and send-queue hand-over overlap another's render, and the pool holds the boards
   * waiting to render and draws them in rank order (a job beyond the slots waits in the pool's queue, holding its
   * decoded board in this thread only; the pool's semaphore still bounds the renders on threads).
   * @defaultValue the pool's slots
   */
  readonly jobConcurrency?: number;
}

/** Counters of a render queue (this process's view; `queued` is the whole queue's depth). */
export interface RenderQueueStats {
  /** Jobs waiting to be started (BullMQ: chats with a waiting job, as last read from Redis). */
  readonly queued: number;
  readonly submitted: number;
  /** Versions replaced before they started, or submitted not newer than one queued or rendering. */
  readonly superseded: number;
  readonly refused: number;
  readonly tooLarge: number;
  /** PNGs handed to `onRendered` by this process. */
  readonly rendered: number;
  /** Renders that threw (not retried) or whose `onRendered` threw. */
  readonly failed: number;
}

/** The render queue port. */
export interface RenderQueue {
  readonly kind: 'memory' | 'bullmq';
  /**
   * Submits version `version` (increasing per chat) of chat `chatId`'s board.
   * Resolves once the job is accepted (not rendered); see {@link SubmitOutcome}.
   * @param rankMs the chat's rank, ms since epoch (the scheduler's `quietMs`): a render thread takes the waiting board
   *   of lowest rank, so the chat quiet the longest is drawn first and does not wait behind the look-ahead. In process
   *   every waiting board is ranked; on BullMQ the boards a worker holds (BOARD_RENDER_JOBS_IN_FLIGHT), and a chat's
   *   job keeps the rank of the submit that added it. @defaultValue 0 (ahead of every ranked board)
   * @throws TypeError (rejects) when the board is malformed (validateBoard); RangeError (rejects) when `rankMs` is not
   *   a finite number; nothing is queued
   */
  submit(chatId: number, version: number, board: Board, rankMs?: number): Promise<SubmitOutcome>;
  /**
   * Starts the consumer in this process. In process: required before `submit`.
   * BullMQ: a worker with `jobConcurrency` slots (default `pool.slots`).
   * @throws Error when started twice or after close
   */
  start(consumer: RenderConsumer): void;
  stats(): RenderQueueStats;
  /**
   * Boards submitted and not yet handed on, across every process: waiting for a worker, or taken and waiting for
   * or on a render thread. What the scheduler's look-ahead counts as the render stage of its backlog.
   * @throws the ioredis error when Redis fails (BullMQ)
   */
  backlog(): Promise<number>;
  /** Stops taking jobs and waits for the renders in progress to be handed on (the pool is the caller's to close, after this). Safe to call twice. */
  close(): Promise<void>;
}

/** Options common to both adapters. */
export interface RenderQueueOptions {
  /** Largest job, bytes of its JSON (BOARD_RENDER_MAX_JOB_BYTES). @defaultValue 2,097,152 */
  maxJobBytes?: number;
  /** Jobs waiting before a submit is refused `queue-full` (BOARD_RENDER_MAX_QUEUE; in process the pool's `maxQueue` applies). @defaultValue 1,024 */
  maxQueue?: number;
  metrics?: BoardMetrics;
  refusals?: BoardRefusals;
  /** Errors that are not a submit's answer (a failed render, a callback that threw, Redis). @defaultValue console.error */
  onError?: (err: unknown, context: string) => void;
}

export const DEFAULT_MAX_JOB_BYTES = 2_097_152;
export const DEFAULT_RENDER_MAX_QUEUE = 1_024;

/** A board as a job carries it: JSON, avatars base64 (they survive Redis and JSON). */
interface WireCard {
  id: string;
  name: string;
  avatar?: string;
  rows: Board['cards'][number]['rows'];
}

/**
 * The job form of a board: JSON with each avatar as base64 (~4/3 of its bytes).
 * @throws TypeError when the board is malformed (validateBoard)
 */
export function encodeBoardJob(board: Board): string {
  validateBoard(board);
  const cards: WireCard[] = board.cards.map((c) => {
    const w: WireCard = { id: c.id, name: c.name, rows: c.rows };
    if (c.avatar) w.avatar = Buffer.from(c.avatar.buffer, c.avatar.byteOffset, c.avatar.byteLength).toString('base64');
    return w;
  });
  return JSON.stringify({ title: board.title, puzzle: board.puzzle, cards, ...roundsOf(board) });
}

/** A board's rounds as the job carries them (plain JSON), absent when it has none. */
function roundsOf(board: Board): { rounds?: Board['rounds'] } {
  return board.rounds && board.rounds.length > 0 ? { rounds: board.rounds } : {};
}

/**
 * The byte size of {@link encodeBoardJob}'s JSON without building it (the
 * avatars' base64 is only counted): what the in-process queue checks against
 * `maxJobBytes` so both adapters refuse the same boards.
 * @throws TypeError when the board is malformed (validateBoard)
 */
export function boardJobBytes(board: Board): number {
  validateBoard(board);
  let avatars = 0;
  const cards: WireCard[] = board.cards.map((c) => {
    const w: WireCard = { id: c.id, name: c.name, rows: c.rows };
    if (c.avatar) {
      w.avatar = '';
      avatars += 4 * Math.ceil(c.avatar.byteLength / 3);
    }
    return w;
  });
  return Buffer.byteLength(JSON.stringify({ title: board.title, puzzle: board.puzzle, cards, ...roundsOf(board) })) + avatars;
}

/**
 * The board of a job (avatars decoded to bytes), inverse of {@link encodeBoardJob}.
 * @throws SyntaxError on bad JSON; TypeError when the result is not a valid board
 */
export function decodeBoardJob(json: string): Board {
  const raw = JSON.parse(json) as { title: string; puzzle: string; cards: WireCard[]; rounds?: Board['rounds'] };
  if (typeof raw !== 'object' || raw === null || !Array.isArray(raw.cards)) throw new TypeError('board job: not a board');
  const board: Board = {
    title: raw.title,
    puzzle: raw.puzzle,
    cards: raw.cards.map((c) => {
      if (typeof c.avatar === 'string')
        return { id: c.id, name: c.name, rows: c.rows, avatar: new Uint8Array(Buffer.from(c.avatar, 'base64')) };
      return { id: c.id, name: c.name, rows: c.rows };
    }),
    ...(raw.rounds !== undefined ? { rounds: raw.rounds } : {}),
  };
  validateBoard(board);
  return board;
}

/** Counters and metrics shared by the adapters. */
export class RenderQueueCounters {
  readonly c = { submitted: 0, superseded: 0, refused: 0, tooLarge: 0, rendered: 0, failed: 0 };
  private readonly m:
    | {
        superseded: { add(v: number): void };
        refused: { add(v: number, a?: Record<string, string>): void };
        failed: { add(v: number): void };
        jobMs: { record(v: number): void };
        jobBytes: { record(v: number): void };
      }
    | undefined;

  constructor(
    metrics: BoardMetrics | undefined,
    private readonly refusals: BoardRefusals | undefined,
    depth: () => number,
  ) {
    if (!metrics) return;
    metrics.gauge('crowdplay_render_queue_depth', depth);
    this.m = {
      superseded: metrics.counter('crowdplay_render_queue_superseded_total'),
      refused: metrics.counter('crowdplay_render_queue_refused_total'),
      failed: metrics.counter('crowdplay_render_queue_failed_total'),
      jobMs: metrics.histogram('crowdplay_render_queue_job_ms'),
      jobBytes: metrics.histogram('crowdplay_render_queue_job_bytes'),
    };
  }

  submitted(bytes: number): void {
    this.c.submitted++;
    this.m?.jobBytes.record(bytes);
  }

  superseded(n = 1): void {
    this.c.superseded += n;
    this.m?.superseded.add(n);
  }

  refused(reason: 'queue-full' | 'too-large' | 'closed', detail: Record<string, unknown>): SubmitOutcome {
    this.c.refused++;
    if (reason === 'too-large') this.c.tooLarge++;
    this.m?.refused.add(1, { reason });
    if (reason === 'queue-full') this.refusals?.refuse('board', 'CP_ERR_BOARD_QUEUE_FULL', detail);
    if (reason === 'too-large') this.refusals?.refuse('board', 'CP_ERR_BOARD_JOB_TOO_LARGE', detail);
    return { status: 'refused', reason };
  }

  rendered(jobMs: number): void {
    this.c.rendered++;
    this.m?.jobMs.record(jobMs);
  }

  failed(): void {
    this.c.failed++;
    this.m?.failed.add(1);
  }
}

/**
 * The in-process render queue: `submit` hands the board straight to the
 * RenderPool, whose queue holds it by reference (no copy, no encoding) until
 * a slot frees, replaces a chat's queued older version in place, and bounds
 * the jobs (the pool's `maxQueue`). The job's size is still checked against
 * `maxJobBytes` so both adapters refuse the same boards.
 */
export class MemoryRenderQueue implements RenderQueue {
  readonly kind = 'memory' as const;
  private consumer: RenderConsumer | undefined;
  private closed = false;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly counters: RenderQueueCounters;
  private readonly maxJobBytes: number;
  private readonly onError: (err: unknown, context: string) => void;

  /** @throws RangeError when maxJobBytes is not a positive integer */
  constructor(opts: RenderQueueOptions = {}) {
    this.maxJobBytes = checkPositive('maxJobBytes', opts.maxJobBytes ?? DEFAULT_MAX_JOB_BYTES);
    this.onError = opts.onError ?? ((err, context) => console.error(`render queue ${context}:`, err));
    this.counters = new RenderQueueCounters(opts.metrics, opts.refusals, () => this.consumer?.pool.stats().queued ?? 0);
  }

  start(consumer: RenderConsumer): void {
    if (this.consumer || this.closed) throw new Error('the render queue is already started or closed');
    this.consumer = consumer;
  }

  /** @throws Error (rejects) when `start` was not called; TypeError when the board is malformed */
  submit(chatId: number, version: number, board: Board, rankMs = 0): Promise<SubmitOutcome> {
    let bytes: number;
    try {
      checkRank(rankMs);
      bytes = boardJobBytes(board);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new TypeError(String(err)));
    }
    if (this.closed) return Promise.resolve(this.counters.refused('closed', { chatId }));
    const consumer = this.consumer;
    if (!consumer) return Promise.reject(new Error('the in-process render queue renders in this process: call start() first'));
    if (bytes > this.maxJobBytes)
      return Promise.resolve(this.counters.refused('too-large', { chatId, bytes, maxJobBytes: this.maxJobBytes }));
    const key = String(chatId);
    const admission = consumer.pool.admission(key, version);
    if (admission === 'closed') return Promise.resolve(this.counters.refused('closed', { chatId }));
    if (admission === 'queue-full') {
      // The pool counts and logs its own refusal; the queue counts it as a refused job.
      void consumer.pool.render(key, version, board);
      return Promise.resolve(this.counters.refused('queue-full', { chatId }));
    }
    if (admission === 'superseded') {
      return consumer.pool.render(key, version, board).then((out) => {
        this.counters.superseded();
        return { status: 'superseded', by: out.status === 'superseded' ? out.by : version };
      });
    }
    this.counters.submitted(bytes);
    const at = performance.now();
    const job = consumer.pool.render(key, version, board, rankMs).then(
      async (out) => {
        if (out.status === 'superseded') this.counters.superseded();
        if (out.status !== 'rendered') return;
        try {
          // out.version: the version drawn (a newer one when the pool's `latest` had it).
          await consumer.onRendered(chatId, out.version, out.png);
          this.counters.rendered(performance.now() - at);
        } catch (err) {
          this.counters.failed();
          this.onError(err, 'handing a rendered board on');
          consumer.onFailed?.(chatId, out.version);
        }
      },
      (err: unknown) => {
        this.counters.failed();
        this.onError(err, 'render');
        consumer.onFailed?.(chatId, version);
      },
    );
    this.inFlight.add(job);
    void job.finally(() => this.inFlight.delete(job));
    return Promise.resolve({ status: 'queued' });
  }

  stats(): RenderQueueStats {
    return { queued: this.consumer?.pool.stats().queued ?? 0, ...this.counters.c };
  }

  backlog(): Promise<number> {
    const s = this.consumer?.pool.stats();
    return Promise.resolve(s === undefined ? 0 : s.queued + s.inFlight);
  }

  /** Refuses new submits; waits until every accepted job is rendered and handed on (or superseded). */
  async close(): Promise<void> {
    this.closed = true;
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }
}

/** @throws RangeError when `rankMs` is not a finite number */
function checkRank(rankMs: number): void {
  if (!Number.isFinite(rankMs)) throw new RangeError(`rankMs must be a finite number, got ${rankMs}`);
}

function checkPositive(name: string, v: number): number {
  if (!Number.isInteger(v) || v < 1) throw new RangeError(`${name} must be a positive integer, got ${v}`);
  return v;
}

export { checkPositive, checkRank };
