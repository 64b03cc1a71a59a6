/**
 * The render pool: piscina worker threads behind a semaphore taken BEFORE a
 * job is handed to a thread. A queued job is the caller's board object, by
 * reference: its structured-cloned copy (avatars included) exists only while
 * the job holds a slot. Each thread has {@link SLOTS_PER_THREAD} slots: the
 * board it draws and the next one, already posted to it, which it starts as
 * soon as the first is done instead of waiting for this thread's event loop to
 * hand it over (on a busy loop that hand-over, not the render, set the pace).
 * So at most 2 × `concurrency` copies and `concurrency` canvases are ever in
 * flight, however many boards wait (a thousand renders at once hold
 * gigabytes).
 *
 * Per chat: one queued job at most. A newer version for a chat replaces its
 * queued (not yet started) job in place (same queue position), and the
 * replaced job resolves `superseded`; an older or equal version resolves
 * `superseded` at once. A chat's next job never starts while its previous
 * one renders (versions finish in order). A full queue refuses (counted).
 * A free thread takes the queued job of lowest rank, ties in queue order.
 */
import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';
import { registerBoardFonts, shareFontRegistry } from './fonts.ts';
import { validateBoard, type Board } from './model.ts';
import type { PngOptions } from './png.ts';
import type { ReleaseTask, RenderTask, RenderTaskResult, RenderWorkerData, ThumbnailTask } from './worker.ts';

/**
 * The slice of libs/telemetry's `Metrics` the pool uses (structural: pass a `Metrics`, or nothing). Names are
 * catalogue names (libs/telemetry/src/catalogue.ts); a `Metrics` throws on one that is not catalogued.
 */
export interface BoardMetrics {
  counter(name: string): { add(value: number, attributes?: Record<string, string>): void };
  histogram(name: string): { record(value: number): void };
  gauge(name: string, read: () => number | Array<[number, Record<string, string>]>): unknown;
}

/** The slice of libs/telemetry's `Refusals` the pool uses. */
export interface BoardRefusals {
  refuse(area: string, reason: string, detail?: Record<string, unknown>): void;
}

/** Pool options. Defaults in brackets. */
export interface RenderPoolOptions {
  /** Renders at once, = render threads (BOARD_RENDER_CONCURRENCY) [0: min(3, os.availableParallelism())]. */
  readonly concurrency?: number;
  /** Jobs waiting for a slot before `render` refuses with `queue-full` [1024; at most one per chat]. */
  readonly maxQueue?: number;
  /** A PNG over this is counted in `crowdplay_board_png_over_budget_total` (BOARD_MAX_PNG_BYTES) [100,000]. */
  readonly maxPngBytes?: number;
  /** Encoder options passed to every render [the renderer's defaults]. */
  readonly png?: PngOptions;
  /** Metrics (libs/telemetry `Metrics`) [none]. */
  readonly metrics?: BoardMetrics;
  /** Refusal log (libs/telemetry `Refusals`) [none]. */
  readonly refusals?: BoardRefusals;
  /** A thread idle this long exits (ms) [never: a thread exiting with decoded avatars makes napi-rs print a leak warning; see worker.ts]. */
  readonly idleTimeoutMs?: number;
  /**
   * The render threads' nice value, 0–19 (BOARD_RENDER_NICE) [0: left as the process's]. Each thread
   * lowers its own priority (Linux: setpriority on its thread id), so on a busy machine the event
   * loop's thread runs first and renders take the CPU left over. Ignored with `workerFile`.
   */
  readonly threadNice?: number;
  /**
   * Late binding [none]: called as a job leaves the queue for a thread, with the chat and the version submitted;
   * returns the chat's board at a newer version when the caller holds one (else null), and that board is drawn
   * instead: the same render and the same send, of a fresher picture (a board that waited behind others while its
   * chat changed is not drawn stale). The outcome's `version` says which was drawn. A throw or a malformed board
   * keeps the submitted one. Counted: `crowdplay_board_latest_total{outcome="newer"|"failed"}`, `stats().latest`.
   */
  readonly latest?: (chatId: string, version: number) => { version: number; board: Board } | null;
  /** The worker module (tests instrument the pool with their own) [./worker.ts]. */
  readonly workerFile?: string | URL;
  /** `workerData` for the worker module [none]. */
  readonly workerData?: unknown;
}

/** How a render ended. */
export type RenderOutcome =
  | {
      readonly status: 'rendered';
      /** The version drawn: the one submitted, or a newer one from the `latest` option. */
      readonly version: number;
      readonly png: Buffer;
      /** Render time on the thread, drawing plus PNG encoding (ms). */
      readonly ms: number;
      /** PNG size (bytes). */
      readonly bytes: number;
      readonly width: number;
      readonly height: number;
      readonly cards: number;
      readonly drawMs: number;
      readonly encodeMs: number;
      /** Time from `render()` to a slot (ms). */
      readonly queuedMs: number;
      /** True when `bytes` is over `maxPngBytes`. */
      readonly overBudget: boolean;
    }
  | { readonly status: 'superseded'; readonly superseded: true; readonly by: number }
  | { readonly status: 'refused'; readonly reason: 'queue-full' | 'closed' };

/** Counters and gauges of a pool (also exported as metrics). */
export interface RenderPoolStats {
  /** Render threads. */
  readonly concurrency: number;
  /** Jobs handed to the threads: drawing, or posted to a thread to draw next (at most `concurrency` × SLOTS_PER_THREAD). */
  readonly inFlight: number;
  readonly queued: number;
  /** Highest `inFlight` ever seen. */
  readonly maxInFlight: number;
  /** Tasks piscina holds beyond its threads (0 while the semaphore works). */
  readonly piscinaQueued: number;
  readonly rendered: number;
  readonly superseded: number;
  readonly refused: number;
  readonly failed: number;
  readonly overBudget: number;
  /** The render threads' V8 heaps summed, each as of its latest render (reserved bytes; 0 before any render). */
  readonly threadHeapBytes: number;
  /** The nice value the render threads run at, as the latest render read it back (null before any render, or where it cannot be read). */
  readonly threadNice: number | null;
  /** Renders drawn at a newer version through the `latest` option (`newer`), and calls of it that threw or gave a malformed board (`failed`). */
  readonly latest: { readonly newer: number; readonly failed: number };
}

interface Job {
  readonly chatId: string;
  version: number;
  board: Board;
  /** Lower goes first (ties: queue order). */
  rank: number;
  enqueuedAt: number;
  resolve: (o: RenderOutcome) => void;
  reject: (e: unknown) => void;
}

/**
 * The board with every avatar that is a view into a larger buffer copied out:
 * structured cloning a typed array copies its whole ArrayBuffer, so an avatar
 * sliced from a 10 MB response would otherwise send 10 MB to the thread.
 */
function compactAvatars(board: Board): Board {
  if (!board.cards.some((c) => c.avatar && c.avatar.byteLength !== c.avatar.buffer.byteLength)) return board;
  return {
    ...board,
    cards: board.cards.map((c) =>
      c.avatar && c.avatar.byteLength !== c.avatar.buffer.byteLength ? { ...c, avatar: new Uint8Array(c.avatar) } : c,
    ),
  };
}

/**
 * Jobs a render thread holds: the one it draws and the next. One more would only add a copy per thread: the next job
 * is already there when a render ends.
 */
export const SLOTS_PER_THREAD = 2;

/** The default concurrency: min(3, the cores this process may use). */
export function defaultRenderConcurrency(): number {
  return Math.max(1, Math.min(3, availableParallelism()));
}

/** A render pool. See the module comment. */
export class RenderPool {
  /** Render threads. */
  readonly concurrency: number;
  /** Jobs handed to the threads at most: `concurrency` × {@link SLOTS_PER_THREAD}. */
  readonly slots: number;
  private readonly maxQueue: number;
  private readonly maxPngBytes: number;
  private readonly png: PngOptions | undefined;
  private readonly piscina: Piscina<RenderTask | ReleaseTask | ThumbnailTask, RenderTaskResult | Uint8Array | null | undefined>;
  /** Queued jobs by chat, in queue order (a superseding job keeps its chat's place and rank). */
  private readonly queue = new Map<string, Job>();
  /** Chats with a job on a thread, and that job's version. */
  private readonly running = new Map<string, number>();
  private inFlight = 0;
  private closed = false;
  private closing: Promise<void> | null = null;
  private readonly releaseOnClose: boolean;
  private idle: (() => void) | null = null;
  private readonly thumbnails = new Set<Promise<Uint8Array | null>>();
  /** Each render thread's V8 heap (reserved bytes) as of its latest render, by thread id. */
  private readonly threadHeaps = new Map<number, number>();
  /** The nice value the render threads last reported (null: none reported, or not readable here). */
  private threadNice: number | null = null;
  private readonly counts = { maxInFlight: 0, rendered: 0, superseded: 0, refused: 0, failed: 0, overBudget: 0 };
  /** Jobs drawn at a newer version through `latest`, and `latest` calls that threw or gave a malformed board. */
  private readonly latestCounts = { newer: 0, failed: 0 };
  private readonly latest: RenderPoolOptions['latest'];
  private readonly m:
    | {
        renderMs: { record(v: number): void };
        queuedMs: { record(v: number): void };
        bytes: { record(v: number): void };
        superseded: { add(v: number): void };
        refused: { add(v: number, a?: Record<string, string>): void };
        failed: { add(v: number): void };
        overBudget: { add(v: number): void };
        latest: { add(v: number, a?: Record<string, string>): void };
      }
    | undefined;
  private readonly refusals: BoardRefusals | undefined;

  /**
   * Starts `concurrency` render threads (each warms the fonts: ~0.5 s of CPU
   * once). The main thread registers the fonts first (~160 ms, synchronous),
   * so the threads find them registered.
   * @throws RangeError when concurrency, maxQueue or maxPngBytes is not a non-negative integer, or threadNice is not an integer 0–19
   * @throws Error when a font package is missing (registerBoardFonts)
   */
  constructor(opts: RenderPoolOptions = {}) {
    const c = opts.concurrency ?? 0;
    if (!Number.isInteger(c) || c < 0) throw new RangeError(`concurrency must be a non-negative integer, got ${c}`);
    this.concurrency = c === 0 ? defaultRenderConcurrency() : c;
    this.slots = this.concurrency * SLOTS_PER_THREAD;
    this.maxQueue = opts.maxQueue ?? 1024;
    if (!Number.isInteger(this.maxQueue) || this.maxQueue < 0)
      throw new RangeError(`maxQueue must be a non-negative integer, got ${this.maxQueue}`);
    this.maxPngBytes = opts.maxPngBytes ?? 100_000;
    if (!Number.isInteger(this.maxPngBytes) || this.maxPngBytes < 1) {
      throw new RangeError(`maxPngBytes must be a positive integer, got ${this.maxPngBytes}`);
    }
    this.png = opts.png;
    this.refusals = opts.refusals;
    this.latest = opts.latest;
    const nice = opts.threadNice ?? 0;
    if (!Number.isInteger(nice) || nice < 0 || nice > 19) throw new RangeError(`threadNice must be an integer 0–19, got ${nice}`);
    if (opts.workerFile === undefined) registerBoardFonts();
    this.releaseOnClose = opts.workerFile === undefined;
    const file = opts.workerFile ?? new URL('./worker.ts', import.meta.url);
    this.piscina = new Piscina<RenderTask | ReleaseTask | ThumbnailTask, RenderTaskResult | Uint8Array | null | undefined>({
      filename: typeof file === 'string' ? file : file.href,
      minThreads: this.concurrency,
      maxThreads: this.concurrency,
      concurrentTasksPerWorker: SLOTS_PER_THREAD,
      idleTimeout: opts.idleTimeoutMs ?? Infinity,
      workerData:
        opts.workerFile === undefined ? ({ nice, fontRegistry: shareFontRegistry() } satisfies RenderWorkerData) : opts.workerData,
      name: 'default',
      // Let a thread's event loop run between tasks ('sync' parks it in Atomics.wait): napi-rs frees
      // native buffers (each render's pixel read-back) in finalizers that run on the event loop.
      atomics: 'disabled',
      // Each render allocates ~4 bytes a pixel of short-lived read-back strips: a small young generation
      // collects them often and cheaply instead of growing to V8's default (measured: ~30 MB less with 3 threads).
      resourceLimits: { maxYoungGenerationSizeMb: 4 },
    });
    const metrics = opts.metrics;
    if (metrics) {
      this.m = {
        renderMs: metrics.histogram('crowdplay_board_render_ms'),
        queuedMs: metrics.histogram('crowdplay_board_queued_ms'),
        bytes: metrics.histogram('crowdplay_board_png_bytes'),
        superseded: metrics.counter('crowdplay_board_superseded_total'),
        refused: metrics.counter('crowdplay_board_refused_total'),
        failed: metrics.counter('crowdplay_board_failed_total'),
        overBudget: metrics.counter('crowdplay_board_png_over_budget_total'),
        latest: metrics.counter('crowdplay_board_latest_total'),
      };
      metrics.gauge('crowdplay_board_queue_depth', () => this.queue.size);
      metrics.gauge('crowdplay_board_in_flight', () => this.inFlight);
      metrics.gauge('crowdplay_board_thread_heap_bytes', () => this.threadHeapBytes);
      metrics.gauge('crowdplay_board_thread_nice', () => (this.threadNice === null ? [] : [[this.threadNice, {}]]));
    }
  }

  /**
   * Renders chat `chatId`'s board `version` (versions increase per chat).
   * Resolves `rendered` with the PNG; `superseded` when a newer version of
   * the chat replaced this one before it started (or this one was not newer
   * than a version already queued or rendering); `refused` when the queue
   * holds `maxQueue` jobs (`queue-full`, counted) or the pool is closed.
   * The board is validated here, before it is queued.
   * @param rank where the job waits: a free thread takes the queued job of lowest rank (ties: queue order), so a
   *   producer that ranks its boards keeps its order through the queue (the board scheduler passes each chat's
   *   last change, ms since epoch: quietest first). A newer version keeps the place of the one it replaces. @defaultValue 0
   * @throws TypeError (rejects) when the board is malformed (validateBoard); RangeError (rejects) when `rank` is not a
   *   finite number (nothing is queued); or a render thread's error
   */
  render(chatId: string, version: number, board: Board, rank = 0): Promise<RenderOutcome> {
    try {
      if (!Number.isFinite(rank)) throw new RangeError(`rank must be a finite number, got ${rank}`);
      validateBoard(board);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new TypeError(String(err)));
    }
    if (this.closed) return Promise.resolve(this.refuse('closed', chatId));
    const latest = Math.max(this.queue.get(chatId)?.version ?? -Infinity, this.running.get(chatId) ?? -Infinity);
    if (version <= latest) {
      this.countSuperseded();
      return Promise.resolve({ status: 'superseded', superseded: true, by: latest });
    }
    return new Promise<RenderOutcome>((resolve, reject) => {
      const queued = this.queue.get(chatId);
      if (queued) {
        // Replace in place: the older job resolves superseded, the chat keeps its place.
        const old = queued.resolve;
        queued.version = version;
        queued.board = board;
        queued.resolve = resolve;
        queued.reject = reject;
        this.countSuperseded();
        old({ status: 'superseded', superseded: true, by: version });
        return;
      }
      if (this.queue.size >= this.maxQueue) {
        resolve(this.refuse('queue-full', chatId));
        return;
      }
      this.queue.set(chatId, { chatId, version, board, rank, enqueuedAt: performance.now(), resolve, reject });
      this.dispatch();
    });
  }

  /**
   * What `render(chatId, version, …)` would do with a valid board right now,
   * without doing it: `queued` (a new queued job), `replaces` (replaces the
   * chat's queued older job), `superseded` (not newer than a version queued
   * or rendering), `queue-full` or `closed`. A render queue in front of the
   * pool (services/telegram render-queue.ts) answers its producer with it.
   */
  admission(chatId: string, version: number): 'queued' | 'replaces' | 'superseded' | 'queue-full' | 'closed' {
    if (this.closed) return 'closed';
    const queued = this.queue.get(chatId);
    if (version <= Math.max(queued?.version ?? -Infinity, this.running.get(chatId) ?? -Infinity)) return 'superseded';
    if (queued) return 'replaces';
    return this.queue.size >= this.maxQueue ? 'queue-full' : 'queued';
  }

  /** Counters and gauges (see RenderPoolStats). */
  stats(): RenderPoolStats {
    return {
      concurrency: this.concurrency,
      inFlight: this.inFlight,
      queued: this.queue.size,
      piscinaQueued: this.piscina.queueSize,
      ...this.counts,
      threadHeapBytes: this.threadHeapBytes,
      threadNice: this.threadNice,
      latest: { ...this.latestCounts },
    };
  }

  private get threadHeapBytes(): number {
    let sum = 0;
    for (const b of this.threadHeaps.values()) sum += b;
    return sum;
  }

  /**
   * Shrinks an avatar to the size a card draws it (render.ts
   * `avatarThumbnail`: a ~1–2 KB PNG) on a render thread. Not behind the
   * render semaphore: a thumbnail holds a 24 px canvas, not a board's, and
   * its callers are already bounded (the avatar reads' gate,
   * TELEGRAM_AVATAR_CONCURRENCY); ~1 ms per 160 px JPEG, measured.
   * @returns the PNG, or null when the bytes are not an image or the pool is closed
   */
  async thumbnail(bytes: Uint8Array): Promise<Uint8Array | null> {
    if (this.closed) return null;
    // A copy of just these bytes, moved to the thread (a view of a larger buffer, such as a download's,
    // would be cloned whole: measured 5 s of the main thread's postMessage for 10,000 avatars).
    const own = new Uint8Array(bytes);
    const run = this.piscina.run({ thumbnail: own }, { transferList: [own.buffer] }) as Promise<Uint8Array | null>;
    this.thumbnails.add(run);
    try {
      const out = await run;
      return out ? new Uint8Array(out.buffer, out.byteOffset, out.byteLength) : null;
    } finally {
      this.thumbnails.delete(run);
    }
  }

  /**
   * Stops: queued jobs resolve `refused: closed`, jobs handed to a thread finish
   * and resolve, then the threads exit. Later `render` calls resolve
   * `refused: closed`. Safe to call twice.
   */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    this.closed = true;
    const queued = [...this.queue.values()];
    this.queue.clear();
    for (const j of queued) j.resolve(this.refuse('closed', j.chatId));
    if (this.inFlight > 0) await new Promise<void>((r) => (this.idle = r));
    await Promise.allSettled([...this.thumbnails]);
    if (this.releaseOnClose) {
      const release = new Int32Array(new SharedArrayBuffer(4));
      const threads = this.piscina.threads.length;
      await Promise.allSettled(Array.from({ length: threads }, () => this.piscina.run({ release, threads })));
    }
    await this.piscina.destroy();
  }

  private refuse(reason: 'queue-full' | 'closed', chatId: string): RenderOutcome {
    this.counts.refused++;
    this.m?.refused.add(1, { reason });
    if (reason === 'queue-full') this.refusals?.refuse('board', 'CP_ERR_BOARD_QUEUE_FULL', { chatId, maxQueue: this.maxQueue });
    return { status: 'refused', reason };
  }

  private countSuperseded(): void {
    this.counts.superseded++;
    this.m?.superseded.add(1);
  }

  /** Starts queued jobs while a slot is free: the queued job of lowest rank (ties: queue order) whose chat is not rendering. */
  private dispatch(): void {
    while (this.inFlight < this.slots && !this.closed) {
      let next: Job | undefined;
      for (const j of this.queue.values()) {
        if (!this.running.has(j.chatId) && (next === undefined || j.rank < next.rank)) next = j;
      }
      if (!next) return;
      this.queue.delete(next.chatId);
      this.start(next);
    }
  }

  /** Moves `job` to its chat's newer board when the `latest` option has one. */
  private bindLatest(job: Job): void {
    if (!this.latest) return;
    try {
      const fresh = this.latest(job.chatId, job.version);
      if (!fresh || !(fresh.version > job.version)) return;
      validateBoard(fresh.board);
      job.version = fresh.version;
      job.board = fresh.board;
      this.latestCounts.newer++;
      this.m?.latest.add(1, { outcome: 'newer' });
    } catch {
      this.latestCounts.failed++;
      this.m?.latest.add(1, { outcome: 'failed' });
    }
  }

  private start(job: Job): void {
    this.inFlight++;
    this.counts.maxInFlight = Math.max(this.counts.maxInFlight, this.inFlight);
    this.bindLatest(job);
    this.running.set(job.chatId, job.version);
    const queuedMs = performance.now() - job.enqueuedAt;
    this.m?.queuedMs.record(queuedMs);
    const board = compactAvatars(job.board);
    const task: RenderTask = this.png ? { board, png: this.png } : { board };
    (this.piscina.run(task) as Promise<RenderTaskResult | undefined>).then(
      (r) => {
        if (!r) throw new Error('a render thread returned nothing');
        const png = Buffer.from(r.png.buffer, r.png.byteOffset, r.png.byteLength);
        this.threadHeaps.set(r.threadId, r.heapBytes);
        this.threadNice = r.nice;
        const ms = r.drawMs + r.encodeMs;
        const overBudget = png.length > this.maxPngBytes;
        this.counts.rendered++;
        if (overBudget) {
          this.counts.overBudget++;
          this.m?.overBudget.add(1);
        }
        this.m?.renderMs.record(ms);
        this.m?.bytes.record(png.length);
        this.finish(job);
        job.resolve({
          status: 'rendered',
          version: job.version,
          png,
          ms,
          bytes: png.length,
          width: r.width,
          height: r.height,
          cards: r.cards,
          drawMs: r.drawMs,
          encodeMs: r.encodeMs,
          queuedMs,
          overBudget,
        });
      },
      (err: unknown) => {
        this.counts.failed++;
        this.m?.failed.add(1);
        this.finish(job);
        job.reject(err);
      },
    );
  }

  private finish(job: Job): void {
    this.inFlight--;
    this.running.delete(job.chatId);
    if (this.inFlight === 0 && this.idle) {
      const idle = this.idle;
      this.idle = null;
      idle();
    }
    this.dispatch();
  }
}
