/**
 * The render thread (a piscina worker): registers the fonts (once per
 * process: a no-op when the main thread already has), warms Skia's font
 * loading, then renders the boards it is handed, one at a time.
 */
import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { threadId, workerData } from 'node:worker_threads';
import { runInNewContext } from 'node:vm';
import { adoptFontRegistry } from './fonts.ts';
import { avatarThumbnail, releaseThreadCaches, renderBoard, warmUpFonts } from './render.ts';
import type { Board } from './model.ts';
import type { PngOptions } from './png.ts';

/** What the pool hands a render thread (structured-cloned once the semaphore is held). */
export interface RenderTask {
  readonly board: Board;
  readonly png?: PngOptions;
}

/**
 * Sent by `RenderPool.close()` to every thread before they are terminated:
 * each waits on `barrier` until `threads` release tasks have arrived (so each
 * thread gets exactly one), drops its caches and collects garbage, so no
 * native image is left for napi-rs to report at exit ("ObjectRef is not
 * unref, it considered as a memory leak" on stderr, one line per avatar).
 */
export interface ReleaseTask {
  readonly release: Int32Array;
  readonly threads: number;
}

/** Shrinks one avatar (render.ts `avatarThumbnail`); the thread answers the PNG or null. */
export interface ThumbnailTask {
  readonly thumbnail: Uint8Array;
}

/** What a render thread hands back. */
export interface RenderTaskResult {
  readonly png: Uint8Array;
  readonly width: number;
  readonly height: number;
  readonly cards: number;
  readonly hidden: number;
  readonly drawMs: number;
  readonly encodeMs: number;
  /** This thread's V8 heap after the render (reserved, bytes) and the thread it is: the pool sums the threads' latest. */
  readonly heapBytes: number;
  readonly threadId: number;
  /** This thread's nice value, read back (null where a thread's own priority cannot be read: not Linux). */
  readonly nice: number | null;
}

/** What the pool gives its default worker (piscina `workerData`). */
export interface RenderWorkerData {
  /** Lower this thread's priority to this nice value (0: leave it). */
  readonly nice: number;
  /** The process's registry of on-demand font files (fonts.ts `shareFontRegistry`): each is registered once, by whichever thread needs it first. */
  readonly fontRegistry?: SharedArrayBuffer;
}

/**
 * This thread's id for the scheduler (Linux: /proc/thread-self → `<pid>/task/<tid>`), or null elsewhere.
 * `os.setPriority(tid)` then acts on this thread alone (setpriority(2): the nice value is per thread on Linux).
 */
function kernelThreadId(): number | null {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    return Number.isInteger(tid) && tid > 0 ? tid : null;
  } catch {
    return null;
  }
}

/** Sets this thread's nice value to `nice` when > 0 (never raises priority: that needs CAP_SYS_NICE). @returns the value read back, or null when not readable */
function applyNice(nice: number): number | null {
  const tid = kernelThreadId();
  if (tid === null) return null;
  try {
    if (nice > 0 && getPriority(tid) < nice) setPriority(tid, nice);
    return getPriority(tid);
  } catch {
    return null;
  }
}

const threadNice = applyNice((workerData as Partial<RenderWorkerData> | undefined)?.nice ?? 0);
const sharedFonts = (workerData as Partial<RenderWorkerData> | undefined)?.fontRegistry;
if (sharedFonts) adoptFontRegistry(sharedFonts);

warmUpFonts();

/**
 * `gc` through the V8 flag, for this thread. Each render reads its pixels back
 * (4.3 MB at 40 cards, render.ts `readPixels`) through @napi-rs/canvas
 * buffers that are freed by finalizers after a collection, and V8 collects
 * rarely when its own heap is small: with no help, resident memory grows by
 * one pixel buffer a render. Avatar thumbnails leave the same kind of
 * garbage: each decoded photo (~100 KB at 160 px) waits for a collection
 * (render.ts `avatarThumbnail`). A minor collection every NATIVE_GC_BYTES of
 * such native garbage bounds it.
 *
 * The collection alone does not free anything: Node hands each finalizer to
 * this thread's event loop (a thread-safe immediate), and a thread that is
 * given task after task does not get there in time, so the buffers waiting
 * for their finalizers pile up in @napi-rs/canvas's own heap (mimalloc). A
 * task that collected therefore resolves only after its thread's loop has
 * turned twice (`settle`), which bounds that heap (docs/benchmarks.md).
 */
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as (opts?: { type: 'minor' | 'major' }) => void;
const NATIVE_GC_BYTES = 8 * 2 ** 20;
/** Native bytes left for the collector since the last collection. */
const native = { bytes: 0 };

/** A minor collection once NATIVE_GC_BYTES of native garbage are waiting. @returns true when it collected */
function collectNativeGarbage(): boolean {
  if (native.bytes < NATIVE_GC_BYTES) return false;
  native.bytes = 0;
  gc({ type: 'minor' });
  return true;
}

/**
 * `value`, at once when no collection ran; after a collection, a promise of it
 * that resolves once this thread's event loop has turned twice, so the
 * finalizers the collection queued (each freeing native memory) run before
 * piscina hands this thread its next task.
 */
function settle<T>(value: T): T | Promise<T> {
  if (!collectNativeGarbage()) return value;
  return new Promise((resolve) => setImmediate(() => setImmediate(() => resolve(value))));
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function release(t: ReleaseTask): Promise<void> {
  Atomics.add(t.release, 0, 1);
  Atomics.notify(t.release, 0);
  const deadline = Date.now() + 2_000;
  for (let seen = Atomics.load(t.release, 0); seen < t.threads && Date.now() < deadline; seen = Atomics.load(t.release, 0)) {
    Atomics.wait(t.release, 0, seen, 50);
  }
  releaseThreadCaches();
  // napi-rs finalizers run after a collection, on a later turn: collect, yield, twice.
  gc();
  await sleep(5);
  gc();
  await sleep(5);
}

/** Renders one board (piscina calls the default export), shrinks an avatar (ThumbnailTask), or releases the thread (ReleaseTask). */
export default function render(
  task: RenderTask | ReleaseTask | ThumbnailTask,
): RenderTaskResult | Uint8Array | null | Promise<RenderTaskResult | Uint8Array | null | void> {
  if ('release' in task) return release(task);
  if ('thumbnail' in task) {
    return settle(avatarThumbnail(task.thumbnail, native));
  }
  const r = renderBoard(task.board, task.png ? { png: task.png } : {});
  native.bytes += r.width * r.height * 4;
  return settle({
    png: r.png,
    width: r.width,
    height: r.height,
    cards: r.cards,
    hidden: r.hidden,
    drawMs: r.drawMs,
    encodeMs: r.encodeMs,
    heapBytes: getHeapStatistics().total_heap_size,
    threadId,
    nice: threadNice,
  });
}
