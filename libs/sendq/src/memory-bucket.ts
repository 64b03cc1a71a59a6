import { systemClock, type Clock } from './clock.ts';
import { decideTake, intervalsOf, waitUsToMs, type Intervals } from './gcra.ts';
import { checkLimits, checkMaxWait } from './options.ts';
import type { DepartResult, SendBucket, SendLimits, TakeLane, TakeResult } from './types.ts';

/** Options of {@link MemoryBucket}. */
export interface MemoryBucketOptions {
  limits: SendLimits;
  /** @defaultValue systemClock */
  clock?: Clock;
}

/** Takes between sweeps of expired per-chat entries (keeps memory bounded by chats active in the last interval). */
const SWEEP_EVERY = 4_096;

/**
 * The in-process bucket (standalone; one process is the whole bot). Same
 * arithmetic as the Redis script (`gcra.ts`), on the injected clock.
 */
export class MemoryBucket implements SendBucket {
  readonly kind = 'memory' as const;
  private readonly iv: Intervals;
  private readonly clock: Clock;
  private pausedUntilUs = 0;
  private botTatUs = 0;
  private readonly chatTat = new Map<string, number>();
  private readonly groupTat = new Map<string, number>();
  /** Recorded board bookings (`TakeLane.bookingId`), by departure (a few: at most the booking horizon's slots). */
  private bookings: Array<{ id: string; atUs: number; chatKey: string; isGroup: boolean }> = [];
  private takes = 0;

  /** @throws CrowdplayError CP_ERR_CONFIG_INVALID on bad limits. */
  constructor(opts: MemoryBucketOptions) {
    checkLimits(opts.limits);
    this.iv = intervalsOf(opts.limits);
    this.clock = opts.clock ?? systemClock;
  }

  /** Synchronous {@link SendBucket.take} (the in-process queue uses it directly). */
  takeNow(chatKey: string, isGroup: boolean, maxWaitMs = 0, lane: TakeLane = { lane: 'board' }): TakeResult {
    if (chatKey === '') throw new RangeError('chatKey must not be empty');
    const nowMs = this.clock.now();
    const nowUs = Math.round(nowMs * 1000);
    if (++this.takes % SWEEP_EVERY === 0) this.sweep(nowUs);
    // Bookings departed over a second ago (a worker that gave its slot up) are forgotten, as in the Redis script.
    this.bookings = this.bookings.filter((b) => b.atUs >= nowUs - 1_000_000);
    const first = lane.lane === 'tx' ? this.bookings.find((b) => b.atUs > nowUs) : undefined;
    const d = decideTake(
      {
        pausedUntilUs: this.pausedUntilUs,
        botTatUs: this.botTatUs,
        chatTatUs: this.chatTat.get(chatKey) ?? 0,
        groupTatUs: isGroup ? (this.groupTat.get(chatKey) ?? 0) : undefined,
        ...(first ? { boardBookedUs: first.atUs } : {}),
      },
      nowUs,
      this.iv,
      Math.floor(maxWaitMs * 1000),
      lane.lane,
    );
    if (!d.granted)
      return { granted: false, nowMs, retryAfterMs: waitUsToMs(d.retryUs), botWaitMs: waitUsToMs(d.botWaitUs), limit: d.limit };
    this.botTatUs = d.botTatUs;
    this.chatTat.set(chatKey, d.chatTatUs);
    if (d.groupTatUs !== undefined) this.groupTat.set(chatKey, d.groupTatUs);
    if (d.rebookUs !== undefined && first) {
      // The board whose slot the reply took departs at the next free slot; its chat's spacing counts from there.
      first.atUs = d.rebookUs;
      this.chatTat.set(first.chatKey, Math.max(this.chatTat.get(first.chatKey) ?? 0, d.rebookUs + this.iv.chatUs));
      if (first.isGroup) this.groupTat.set(first.chatKey, Math.max(this.groupTat.get(first.chatKey) ?? 0, d.rebookUs + this.iv.groupUs));
      this.bookings.sort((a, b) => a.atUs - b.atUs);
      return { granted: true, nowMs, waitMs: d.waitUs / 1000, preempted: true };
    }
    if (d.waitUs > 0 && lane.lane === 'board' && lane.bookingId !== undefined) {
      this.bookings.push({ id: lane.bookingId, atUs: nowUs + d.waitUs, chatKey, isGroup });
      this.bookings.sort((a, b) => a.atUs - b.atUs);
    }
    return { granted: true, nowMs, waitMs: d.waitUs / 1000 };
  }

  take(chatKey: string, isGroup: boolean, maxWaitMs = 0, lane?: TakeLane): Promise<TakeResult> {
    try {
      checkMaxWait(maxWaitMs);
      return Promise.resolve(this.takeNow(chatKey, isGroup, maxWaitMs, lane));
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  /** Synchronous {@link SendBucket.depart}. */
  departNow(bookingId: string, chatKey: string, _isGroup: boolean, atMs: number): DepartResult {
    if (bookingId === '' || chatKey === '') throw new RangeError('bookingId and chatKey must not be empty');
    const nowUs = Math.round(this.clock.now() * 1000);
    const pausedMs = waitUsToMs(this.pausedUntilUs - nowUs);
    const i = this.bookings.findIndex((b) => b.id === bookingId);
    if (i < 0) return { movedToMs: null, waitMs: 0, pausedMs };
    const b = this.bookings[i]!;
    if (b.atUs > Math.round(atMs * 1000)) return { movedToMs: b.atUs / 1000, waitMs: Math.max(0, b.atUs - nowUs) / 1000, pausedMs };
    this.bookings.splice(i, 1);
    return { movedToMs: null, waitMs: 0, pausedMs };
  }

  depart(bookingId: string, chatKey: string, isGroup: boolean, atMs: number): Promise<DepartResult> {
    try {
      return Promise.resolve(this.departNow(bookingId, chatKey, isGroup, atMs));
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  /** Synchronous {@link SendBucket.pause}. */
  pauseNow(forMs: number): number {
    if (!(Number.isFinite(forMs) && forMs >= 0)) throw new RangeError(`forMs must be a finite number >= 0, got ${forMs}`);
    const nowUs = Math.round(this.clock.now() * 1000);
    this.pausedUntilUs = Math.max(this.pausedUntilUs, nowUs + Math.ceil(forMs * 1000));
    return this.pausedUntilUs / 1000;
  }

  pause(forMs: number): Promise<number> {
    try {
      return Promise.resolve(this.pauseNow(forMs));
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  /** Synchronous {@link SendBucket.pausedForMs}. */
  pausedForMsNow(): number {
    return waitUsToMs(this.pausedUntilUs - Math.round(this.clock.now() * 1000));
  }

  pausedForMs(): Promise<number> {
    return Promise.resolve(this.pausedForMsNow());
  }

  close(): Promise<void> {
    return Promise.resolve();
  }

  private sweep(nowUs: number): void {
    for (const [k, t] of this.chatTat) if (t <= nowUs) this.chatTat.delete(k);
    for (const [k, t] of this.groupTat) if (t <= nowUs) this.groupTat.delete(k);
  }
}
