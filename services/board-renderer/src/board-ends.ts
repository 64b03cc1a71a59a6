/**
 * Board ends: what became of each board a render worker handed to the send
 * queue, told to the gateway that holds the chat's board (its scheduler keeps
 * the chat due until its newest board is delivered: services/telegram
 * scheduler.ts).
 *
 * In one process the render worker tells the gateway's ChatBoards directly.
 * In the cluster a board is rendered by any `board-renderer` (or any gateway
 * that renders) and sent by any sender, while one gateway holds the chat: the
 * worker publishes each end on the Redis channel `{<BOARD_RENDER_PREFIX>}:ends`
 * ({@link RedisBoardEnds}) and every gateway applies the ends of the chats it
 * holds. Redis pub/sub delivers at most once (a gateway reconnecting misses
 * what was published meanwhile), so the scheduler's confirm timeout stays the
 * backstop: a board whose end is never heard is handed on again.
 */
import { Redis } from 'ioredis';
import type { EnqueueResult, JobResult } from '@crowdplay/sendq';
import { renderQueueKeys } from '@crowdplay/sendq';

/** What became of a board: on the send queue (`queued`), or how its job ended, or why it never got there. */
export type BoardEndOutcome =
  /** Handed to the send queue (a newer board of the chat replaces it there until it starts). */
  | 'queued'
  /** The send queue refused it: the chat is deactivated (kicked, blocked, gone). */
  | 'deactivated'
  /** The send queue refused it for another reason (full, stale, closed). */
  | 'refused'
  /** Its render or its hand-on threw. */
  | 'not-handed-on'
  /** How its send-queue job ended (libs/sendq JobResult statuses). */
  | JobResult['status'];

const OUTCOMES: ReadonlySet<string> = new Set<BoardEndOutcome>([
  'queued',
  'deactivated',
  'refused',
  'not-handed-on',
  'sent',
  'superseded',
  'failed',
  'dropped',
  'purged',
]);

/** One board's end: chat id (Telegram's), the board's version, the outcome. */
export interface BoardEnd {
  readonly chatId: number;
  readonly version: number;
  readonly outcome: BoardEndOutcome;
}

/** Where a render worker reports board ends, and where a gateway hears them. */
export interface BoardEnds {
  readonly kind: 'local' | 'redis';
  /** Reports one end. Never throws (a Redis failure goes to the `onError` option and the end is lost: the confirm timeout covers it). */
  publish(end: BoardEnd): void;
  /** Calls `handler` with every end reported from now on, by any process. `handler` must not throw. */
  subscribe(handler: (end: BoardEnd) => void): void;
  close(): Promise<void>;
}

/** Counters of a {@link BoardEnds}: `crowdplay_board_ends_total{way}`. */
export interface BoardEndsMetrics {
  counter(name: 'crowdplay_board_ends_total'): { add(v: number, attributes: { way: 'published' | 'heard' | 'malformed' }): void };
}

/**
 * The hooks of `startRenderWorker` that report every board's end to `ends`:
 * the send queue's answer at once (`queued`, `deactivated`, `refused`), then
 * the job's end when it settles; a render or hand-on that threw as `not-handed-on`.
 */
export function publishingHooks(ends: BoardEnds): {
  onQueued: (chatId: number, version: number, r: EnqueueResult) => void;
  onFailed: (chatId: number, version: number) => void;
} {
  return {
    onQueued: (chatId, version, r) => {
      if (r.status === 'refused') {
        ends.publish({ chatId, version, outcome: r.reason === 'deactivated' ? 'deactivated' : 'refused' });
        return;
      }
      ends.publish({ chatId, version, outcome: 'queued' });
      void r.result.then(
        (res) => ends.publish({ chatId, version, outcome: res.status }),
        () => ends.publish({ chatId, version, outcome: 'failed' }),
      );
    },
    onFailed: (chatId, version) => ends.publish({ chatId, version, outcome: 'not-handed-on' }),
  };
}

/**
 * The end encoded as `[chatId, version, outcome]`, or null when `raw` is not one
 * (counted as `malformed` by the caller; nothing is applied).
 */
export function decodeBoardEnd(raw: string): BoardEnd | null {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return null;
  }
  if (!Array.isArray(v) || v.length !== 3) return null;
  const [chatId, version, outcome] = v as [unknown, unknown, unknown];
  if (!Number.isSafeInteger(chatId) || chatId === 0) return null;
  if (typeof version !== 'number' || !Number.isFinite(version)) return null;
  if (typeof outcome !== 'string' || !OUTCOMES.has(outcome)) return null;
  return { chatId: chatId as number, version, outcome: outcome as BoardEndOutcome };
}

/** The wire form of an end (see {@link decodeBoardEnd}). */
export function encodeBoardEnd(end: BoardEnd): string {
  return JSON.stringify([end.chatId, end.version, end.outcome]);
}

/** Ends within one process: `publish` calls every subscriber at once. */
export class LocalBoardEnds implements BoardEnds {
  readonly kind = 'local' as const;
  private readonly handlers: Array<(end: BoardEnd) => void> = [];

  publish(end: BoardEnd): void {
    for (const h of this.handlers) h(end);
  }

  subscribe(handler: (end: BoardEnd) => void): void {
    this.handlers.push(handler);
  }

  close(): Promise<void> {
    this.handlers.length = 0;
    return Promise.resolve();
  }
}

/** Options of {@link RedisBoardEnds.open}. */
export interface RedisBoardEndsOptions {
  redisUrl: string;
  /** BOARD_RENDER_PREFIX: the channel is the render queue's `ends` (libs/sendq renderQueueKeys). */
  prefix: string;
  metrics?: BoardEndsMetrics;
  /** Redis errors, and ends that could not be published. @defaultValue console.error */
  onError?: (err: unknown, context: string) => void;
}

/**
 * Ends over Redis pub/sub, across processes: one connection publishes, a
 * second one (opened by the first `subscribe`) listens.
 */
export class RedisBoardEnds implements BoardEnds {
  readonly kind = 'redis' as const;
  private readonly channel: string;
  private sub: Redis | null = null;
  /** The SUBSCRIBE's answer: once it resolved, ends published are heard. */
  private subscribed: Promise<unknown> | null = null;
  private readonly handlers: Array<(end: BoardEnd) => void> = [];
  private readonly counter: ReturnType<BoardEndsMetrics['counter']> | undefined;
  private closed = false;

  private constructor(
    private readonly opts: RedisBoardEndsOptions,
    private readonly pub: Redis,
  ) {
    this.channel = renderQueueKeys(opts.prefix).ends;
    this.counter = opts.metrics?.counter('crowdplay_board_ends_total');
  }

  /**
   * Connects the publishing connection.
   * @throws RangeError on a bad prefix; the ioredis error when Redis is unreachable
   */
  static async open(opts: RedisBoardEndsOptions): Promise<RedisBoardEnds> {
    renderQueueKeys(opts.prefix);
    const pub = new Redis(opts.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 3 });
    const onError = opts.onError ?? ((err, context) => console.error(`board ends ${context}:`, err));
    pub.on('error', (err) => onError(err, 'redis'));
    await pub.connect();
    return new RedisBoardEnds({ ...opts, onError }, pub);
  }

  publish(end: BoardEnd): void {
    if (this.closed) return;
    this.counter?.add(1, { way: 'published' });
    this.pub.publish(this.channel, encodeBoardEnd(end)).catch((err: unknown) => this.opts.onError!(err, 'publish'));
  }

  /** @throws Error after close */
  subscribe(handler: (end: BoardEnd) => void): void {
    if (this.closed) throw new Error('board ends: closed');
    this.handlers.push(handler);
    if (this.sub) return;
    const sub = new Redis(this.opts.redisUrl, { maxRetriesPerRequest: null });
    sub.on('error', (err) => this.opts.onError!(err, 'redis (subscriber)'));
    sub.on('message', (_channel: string, raw: string) => {
      const end = decodeBoardEnd(raw);
      if (!end) {
        this.counter?.add(1, { way: 'malformed' });
        return;
      }
      this.counter?.add(1, { way: 'heard' });
      for (const h of this.handlers) h(end);
    });
    this.subscribed = sub.subscribe(this.channel).catch((err: unknown) => this.opts.onError!(err, 'subscribe'));
    this.sub = sub;
  }

  /** Resolves once the subscription is in effect (ends published from then on are heard); immediately without one. */
  async ready(): Promise<void> {
    await this.subscribed;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.handlers.length = 0;
    const subQuit = this.sub ? this.sub.quit().catch(() => this.sub?.disconnect()) : Promise.resolve();
    await Promise.all([subQuit, this.pub.quit().catch(() => this.pub.disconnect())]);
  }
}
