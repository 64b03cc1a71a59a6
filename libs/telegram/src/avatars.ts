/**
 * Avatar reads (getUserProfilePhotos → getFile → file download). Exempt
 * from the send bucket (they are reads), and therefore bounded here:
 * unbounded, 10,000 profile photos at once are ~25,000 round trips, thousands
 * of open handles and a latency tail of seconds:
 *
 * - collapsed per user: concurrent requests for one user share one promise;
 * - capped: at most `concurrency` (TELEGRAM_AVATAR_CONCURRENCY) reads run at
 *   once; the others wait in a FIFO as a user id and a resolver (~100 bytes),
 *   not as a started Bot API call (a suspended grammY call and its gate slot
 *   live long enough to be promoted to the old generation: docs/benchmarks.md).
 *   The gate (the same cap) still bounds avatar HTTP requests bot-wide in
 *   this process (the Bot API transformer applies it to
 *   getUserProfilePhotos/getFile made elsewhere); a download keeps its slot
 *   until its `shrink` has answered, so at most that many photos wait for a
 *   render thread;
 * - cached: a least-recently-used cache bounded in bytes (`cacheBytes`,
 *   TELEGRAM_AVATAR_CACHE_BYTES; lru-cache `maxSize` + `sizeCalculation`),
 *   entries live `ttlMs` (TELEGRAM_AVATAR_TTL_MS, a day: avatars are
 *   cosmetic). "No photo" is cached too (counted as {@link NO_AVATAR_BYTES});
 *   a failed read is cached for `errorTtlMs` so a failing user is not retried
 *   on every board.
 */
import { LRUCache } from 'lru-cache';

/** Bytes a cached "no avatar" answer counts for in the byte budget. */
export const NO_AVATAR_BYTES = 64;
/** Largest avatar accepted, bytes (a 160 px profile JPEG is ~5–15 KB). */
export const AVATAR_MAX_BYTES = 1_048_576;

/** A counting semaphore: `run` waits for a slot; waits are counted (the cap biting). */
export class Gate {
  private active = 0;
  private readonly waiters: Array<() => void> = [];
  /** Calls that had to wait for a slot. */
  waited = 0;
  /** Most calls in flight at once. */
  peak = 0;

  /** @throws RangeError unless `limit` is an integer ≥ 1 */
  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`limit must be an integer >= 1, got ${limit}`);
  }

  /** Calls in flight now. */
  get inFlight(): number {
    return this.active;
  }

  /** Runs `fn` holding one slot (released when it settles). */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) {
      this.waited++;
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    } else this.active++;
    if (this.active > this.peak) this.peak = this.active;
    try {
      return await fn();
    } finally {
      const next = this.waiters.shift();
      if (next)
        next(); // the slot passes to the next waiter directly
      else this.active--;
    }
  }
}

/** The Bot API reads an avatar needs (grammY's Api satisfies it). */
export interface AvatarApi {
  getUserProfilePhotos(
    userId: number,
    other?: { offset?: number; limit?: number },
  ): Promise<{ total_count: number; photos: Array<Array<{ file_id: string; width: number; height: number; file_size?: number }>> }>;
  getFile(fileId: string): Promise<{ file_id: string; file_path?: string; file_size?: number }>;
}

export interface AvatarOptions {
  api: AvatarApi;
  /** Downloads `file_path` (`<apiRoot>/file/bot<token>/<file_path>`), bytes. */
  download: (filePath: string) => Promise<Uint8Array>;
  /** The gate every avatar HTTP request passes (shared with the Bot API transformer). */
  gate: Gate;
  /** Byte budget (TELEGRAM_AVATAR_CACHE_BYTES); 0 disables caching (reads are still collapsed). */
  cacheBytes: number;
  /** Entry lifetime, ms (TELEGRAM_AVATAR_TTL_MS). */
  ttlMs: number;
  /** Lifetime of a cached failure, ms. @defaultValue 60_000 */
  errorTtlMs?: number;
  /** Smallest side wanted, px: the smallest photo size at least this wide is fetched. @defaultValue 160 */
  sizePx?: number;
  /**
   * Turns a downloaded photo into what is cached and handed out (the board
   * passes `RenderPool.thumbnail`: the 24 px PNG a card draws, ~1.7 KB
   * instead of ~10 KB, so the byte budget holds ~6× the users); null = not an
   * image (cached as "no avatar"). A shrink that throws counts as a failed read.
   */
  shrink?: (bytes: Uint8Array) => Promise<Uint8Array | null>;
  /** Clock for TTLs (lru-cache `perf`). */
  now?: () => number;
}

/** Counters since start. */
export interface AvatarStats {
  /** `get` calls. */
  requests: number;
  /** Answered from the cache. */
  cacheHits: number;
  /** Joined a read already in flight for the same user. */
  collapsed: number;
  /** Reads started (each up to three HTTP requests). */
  reads: number;
  /** Reads that failed (answered null, cached for errorTtlMs). */
  failures: number;
  /** Avatar HTTP requests (a download with its shrink counts as one) that waited for a gate slot (the cap biting on calls made outside {@link Avatars.get}). */
  gateWaits: number;
  /** Reads that waited in the FIFO for one of the `concurrency` read slots (the cap biting). */
  queued: number;
  /** Reads waiting in the FIFO now. */
  waiting: number;
  /** Most avatar HTTP requests (or downloads waiting for their shrink) in flight at once. */
  peakInFlight: number;
  /** Bytes held by the cache now. */
  cacheBytes: number;
  /** Entries in the cache now. */
  cacheEntries: number;
}

interface Entry {
  bytes: Uint8Array | null;
}

/** A read waiting for a slot: the user and what settles its (collapsed) promise. */
interface Waiting {
  userId: number;
  settle: (bytes: Uint8Array | null) => void;
}

/** Avatars by Telegram user id (see the module doc). */
export class Avatars {
  private readonly cache: LRUCache<number, Entry> | undefined;
  private readonly inflight = new Map<number, Promise<Uint8Array | null>>();
  private readonly errorTtlMs: number;
  private readonly sizePx: number;
  private readonly s = { requests: 0, cacheHits: 0, collapsed: 0, reads: 0, failures: 0, queued: 0 };
  /** Reads waiting for a slot, oldest first from `head` (compacted when half is spent). */
  private fifo: Array<Waiting | undefined> = [];
  private head = 0;
  /** Reads running now (≤ the gate's limit). */
  private running = 0;

  constructor(private readonly o: AvatarOptions) {
    this.errorTtlMs = o.errorTtlMs ?? 60_000;
    this.sizePx = o.sizePx ?? 160;
    if (o.cacheBytes > 0) {
      const now = o.now;
      this.cache = new LRUCache<number, Entry>({
        maxSize: o.cacheBytes,
        sizeCalculation: (e) => Math.max(1, e.bytes ? e.bytes.length : NO_AVATAR_BYTES),
        ttl: o.ttlMs,
        ...(now ? { perf: { now } } : {}),
      });
    }
  }

  /**
   * The user's profile photo (the smallest size at least `sizePx` wide, as
   * Telegram stores it, usually JPEG), or null when the user has none or
   * the read failed. Never rejects.
   */
  get(userId: number): Promise<Uint8Array | null> {
    this.s.requests++;
    const hit = this.cache?.get(userId);
    if (hit) {
      this.s.cacheHits++;
      return Promise.resolve(hit.bytes);
    }
    const running = this.inflight.get(userId);
    if (running) {
      this.s.collapsed++;
      return running;
    }
    this.s.reads++;
    const p = new Promise<Uint8Array | null>((settle) => {
      if (this.running < this.o.gate.limit) this.start({ userId, settle });
      else {
        this.s.queued++;
        this.fifo.push({ userId, settle });
      }
    });
    this.inflight.set(userId, p);
    return p;
  }

  /** Runs one read in a slot; when it settles, caches and answers it, then starts the oldest waiting read. */
  private start(w: Waiting): void {
    this.running++;
    this.read(w.userId).then(
      (bytes) => {
        this.cache?.set(w.userId, { bytes });
        this.finish(w, bytes);
      },
      () => {
        this.s.failures++;
        this.cache?.set(w.userId, { bytes: null }, { ttl: this.errorTtlMs });
        this.finish(w, null);
      },
    );
  }

  private finish(w: Waiting, bytes: Uint8Array | null): void {
    this.inflight.delete(w.userId);
    this.running--;
    w.settle(bytes);
    let next: Waiting | undefined;
    if (this.head < this.fifo.length) {
      next = this.fifo[this.head];
      this.fifo[this.head++] = undefined; // a taken slot must not keep its resolver (and through it the bytes) alive
    }
    if (this.head === this.fifo.length) {
      this.fifo = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.fifo.length) {
      this.fifo = this.fifo.slice(this.head);
      this.head = 0;
    }
    if (next) this.start(next);
  }

  private async read(userId: number): Promise<Uint8Array | null> {
    const photos = await this.o.api.getUserProfilePhotos(userId, { limit: 1 });
    const sizes = photos.photos[0];
    if (!sizes || sizes.length === 0) return null;
    const sorted = [...sizes].sort((a, b) => a.width - b.width);
    const pick = sorted.find((p) => p.width >= this.sizePx) ?? sorted[sorted.length - 1]!;
    const file = await this.o.api.getFile(pick.file_id);
    if (!file.file_path) return null;
    if (file.file_size !== undefined && file.file_size > AVATAR_MAX_BYTES) return null;
    const path = file.file_path;
    // The shrink runs in the download's slot: a downloaded photo waits for its (render-thread) shrink
    // inside the cap, not in an unbounded queue behind the boards (measured: 4,000 photos, ~27 MB,
    // queued at the render thread during a 400-chat rollover, with the boards stuck behind them).
    return this.o.gate.run(async () => {
      const bytes = await this.o.download(path);
      if (bytes.length > AVATAR_MAX_BYTES) return null;
      return this.o.shrink ? this.o.shrink(bytes) : bytes;
    });
  }

  /** Reads running or waiting for a slot now (one per user). */
  get pending(): number {
    return this.inflight.size;
  }

  stats(): AvatarStats {
    return {
      ...this.s,
      waiting: this.fifo.length - this.head,
      gateWaits: this.o.gate.waited,
      peakInFlight: this.o.gate.peak,
      cacheBytes: this.cache?.calculatedSize ?? 0,
      cacheEntries: this.cache?.size ?? 0,
    };
  }
}
