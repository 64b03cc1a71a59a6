/**
 * The send queue's ports: `SendBucket` (the one token bucket every Bot API
 * call passes) and `SendQueue` (lanes, per-chat sub-queues, supersession,
 * deactivation, migration, the outcome policy). Two adapters each:
 * in-process (`MemoryBucket`, `MemorySendQueue`) and Redis (`RedisBucket`,
 * one Lua script; `BullmqSendQueue`), chosen by REDIS_URL in
 * {@link openSendQueue}. Both pass one shared test suite (`test/sendq-suite.ts`).
 *
 * Telegram's documented limits (https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this):
 * about 30 messages per second per bot, 20 per minute per group, about one
 * per second per chat. A 429 answer carries `parameters.retry_after` (s); the
 * limit is on the bot, so it pauses every sender (see `SendBucket.pause`).
 */

/** `tx`: transactional (command replies), served first. `board`: board edits/posts. */
export type Lane = 'tx' | 'board';

/** Lanes in service order (earlier first). */
export const LANES: readonly Lane[] = ['tx', 'board'];

/**
 * The three limits every call is checked against, all from config
 * (`config.telegram.botRatePerS`, `.groupRatePerMin`, `.groupBurst`,
 * `.chatRatePerS`). Each is a GCRA (gcra.ts): the bot and chat rates evenly
 * spaced (burst 1), the group rate with a burst of `groupBurst`. At most
 * `botRatePerS` grants in any 1,000 ms window for the bot, at most
 * `groupRatePerMin` in any 60,000 ms window per group chat (whatever the
 * burst), at most `chatRatePerS` in any 1,000 ms window per chat.
 */
export interface SendLimits {
  /** Bot-wide rate, calls per second (TELEGRAM_BOT_RATE_PER_S, Telegram: 30). */
  botRatePerS: number;
  /** Per group chat, calls per minute (TELEGRAM_GROUP_RATE_PER_MIN, Telegram: 20). */
  groupRatePerMin: number;
  /**
   * Calls a group chat that has been quiet may make at once (each still `chatRatePerS` apart), an integer
   * 1…groupRatePerMin (TELEGRAM_GROUP_BURST); a group sending all the time then gets groupRatePerMin − (groupBurst − 1)
   * a minute. @defaultValue 1 (evenly spaced)
   */
  groupBurst?: number;
  /** Per chat (any chat), calls per second (TELEGRAM_CHAT_RATE_PER_S, Telegram: 1). */
  chatRatePerS: number;
}

/** The limit that refused a take: the bot-wide pause, the bot rate, the group rate or the chat rate. */
export type LimitName = 'pause' | 'bot' | 'group' | 'chat';

/** Answer of {@link SendBucket.take}. A refused take consumes nothing. */
export type TakeResult =
  | {
      readonly granted: true;
      /** The bucket's time of the grant, ms (Redis TIME or the injected clock). */
      readonly nowMs: number;
      /**
       * Wait before the call, ms (≥ 0, µs precision): 0 for a slot free now;
       * for a booked slot of the bot rate (`maxWaitMs`), the time until it,
       * which the caller waits (rounded up) before calling, then checks the
       * pause again. The slot is at `nowMs + waitMs`.
       */
      readonly waitMs: number;
      /** True when a transactional take took the slot of a board booking (that board moved to the bot's next free slot). */
      readonly preempted?: boolean;
    }
  | {
      readonly granted: false;
      /** The bucket's time of the decision, ms. */
      readonly nowMs: number;
      /** Least wait, ms (integer ≥ 1), after which the same take can succeed (all limits considered). */
      readonly retryAfterMs: number;
      /**
       * Wait, ms (≥ 0), before ANY chat can pass the bot-wide limits (pause
       * and bot rate). 0 when only this chat's own limits refused: other chats
       * may go now.
       */
      readonly botWaitMs: number;
      /** The limit with the longest wait (pause > bot > group > chat on ties). */
      readonly limit: LimitName;
    };

/** The lane a take is for (priority at the bucket, gcra.ts "Lanes"). */
export interface TakeLane {
  /** `tx` may take the slot of the earliest board booking; `board` books behind it. */
  lane: Lane;
  /**
   * Board: the id a booked grant is recorded under (unique per take), so that a reply can move it and the
   * caller can `depart` it. Unset: a board booking is not recorded (and no reply can take its slot).
   */
  bookingId?: string;
}

/** Answer of {@link SendBucket.depart}. */
export interface DepartResult {
  /** null: the booked slot is still this call's and is now claimed (go). Else a reply took it: the board's new slot, ms (bucket clock). */
  movedToMs: number | null;
  /** Wait until `movedToMs`, ms (0 when claimed). */
  waitMs: number;
  /** Remaining bot-wide pause, ms (0 when not paused), read in the same step. */
  pausedMs: number;
}

/**
 * The one token bucket of the bot. `take` checks the bot-wide pause, the bot
 * rate, the group rate (when `isGroup`) and the chat rate atomically: either
 * one token of each is taken, or none and the caller learns when to retry.
 */
export interface SendBucket {
  /** `memory` or `redis`, for the start-up log. */
  readonly kind: 'memory' | 'redis';
  /**
   * Checks all limits for one call to `chatKey` and takes a token of each when
   * all allow it. Never waits.
   * @param chatKey the chat id as a string (`String(chatId)`)
   * @param isGroup true for group chats (negative ids): adds the per-group limit
   * @param maxWaitMs when only the bot rate refuses (no pause, the chat's own limits allow) and its next
   *   free slot is at most this far, book that slot instead of refusing (gcra.ts "Booking"); 0: never
   * @param lane the take's lane (gcra.ts "Lanes"): a `tx` take that only the bot rate refuses departs at the
   *   earliest board booking still ahead, which moves to the bot's next free slot. @defaultValue `{lane: 'board'}`, unrecorded
   * @throws RangeError on an empty chatKey or a negative / non-finite maxWaitMs; Redis errors (ioredis) for the Redis adapter.
   */
  take(chatKey: string, isGroup: boolean, maxWaitMs?: number, lane?: TakeLane): Promise<TakeResult>;
  /**
   * A board call whose booked slot (`take` with a `bookingId`) is due, right before it calls: claims the slot
   * when it is still the call's (no reply can take it after this), or tells the new slot a reply moved it to.
   * @param atMs the departure the caller waited for, ms (the grant's `nowMs + waitMs`, or the last `depart`'s)
   * @throws RangeError on an empty bookingId or chatKey; Redis errors for the Redis adapter.
   */
  depart(bookingId: string, chatKey: string, isGroup: boolean, atMs: number): Promise<DepartResult>;
  /**
   * Bot-wide pause (a 429's `retry_after`): no take is granted for `forMs`
   * from the bucket's now. A shorter pause never shortens a longer one.
   * @param forMs duration, ms (`retry_after` s × 1000), finite ≥ 0
   * @returns the pause's end in the bucket's clock, ms
   * @throws RangeError on a negative or non-finite `forMs`.
   */
  pause(forMs: number): Promise<number>;
  /** Remaining bot-wide pause, ms (0 when not paused): what a sender checks immediately before a call. */
  pausedForMs(): Promise<number>;
  /** Releases the connection (Redis adapter; a no-op in process). Safe to call twice. */
  close(): Promise<void>;
}

/** What a producer enqueues. `payload` must be JSON-serialisable for the BullMQ adapter. */
export interface SendJobInput<P> {
  /** Telegram chat id (negative for groups). `send` must address `job.chatId`, not an id inside `payload` (migration rewrites it). */
  chatId: number;
  lane: Lane;
  /**
   * Supersession key: a newer job with the same key replaces a queued older
   * one that has not started (the older resolves `superseded`). E.g.
   * `board:<chatId>`. A job already handed to `send` is never superseded.
   */
  key?: string;
  /**
   * Version of the content under `key` (e.g. a board's version), a safe
   * integer ≥ 0, increasing. A queued job is only ever replaced by a newer
   * version: one older than the latest enqueued for its key (in process:
   * among the last `maxQueued` keys; BullMQ: for 7 days) is refused `stale`
   * and counted; an equal one (the same content again) replaces as a newer
   * arrival does. Without it, arrival order decides.
   */
  version?: number;
  /**
   * The job is worth sending only this long after enqueue, ms (e.g. a command
   * reply whose caller waits `resultTimeoutMs`): one not handed to `send`
   * by then is dropped (`dropped`, reason `deadline …`), logged and counted in
   * `crowdplay_sendq_expired_total`, never sent late. Finite > 0. @defaultValue none
   */
  deadlineMs?: number;
  payload: P;
  /** Adds the per-group limit. @defaultValue `chatId < 0` (groups, supergroups and channels have negative ids) */
  isGroup?: boolean;
}

/** A job as `send` sees it. */
export interface SendJob<P> {
  readonly id: string;
  readonly chatId: number;
  readonly lane: Lane;
  readonly key: string | undefined;
  /** The producer's version of the content under `key`, when it gave one. */
  readonly version: number | undefined;
  readonly payload: P;
  readonly isGroup: boolean;
  /** Retries so far after `{retry}` outcomes (0 on the first call). */
  readonly retries: number;
  /** Requeues so far after `{requeue}` outcomes. */
  readonly requeues: number;
  /** When the job was enqueued, ms (the queue's clock). */
  readonly enqueuedAtMs: number;
  /** When the bucket granted this call, ms (the bucket's clock); for a booked slot, the slot's time. */
  readonly grantedAtMs: number;
}

/**
 * What `send` tells the queue happened (it maps Bot API answers to these):
 * - `{ ok: true, value? }`: done (also "message is not modified"); `value` (JSON) goes to the waiting producer.
 * - `{ retryAfterS }`: a 429: bot-wide pause for `retryAfterS` s, the job goes back to the front of its chat queue.
 * - `{ deactivate: true }`: bot kicked / chat not found / 403: the chat's queued jobs are purged and new ones refused until `reactivate`.
 * - `{ drop: true, reason }`: give up on this job (e.g. a 400 that cannot succeed).
 * - `{ retry: true }`: network error / 5xx where the CALLER decided that retrying is safe (never return it
 *   for a call that may have posted a board): up to `maxRetries` with exponential backoff, then `failed`.
 * - `{ requeue: true, payload? }`: run again through the bucket, at the front of its chat queue, optionally
 *   with a new payload (e.g. "message to edit not found" → repost); up to `maxRequeues`, then `failed`.
 */
export type SendOutcome<P> =
  | { ok: true; value?: unknown }
  | { retryAfterS: number }
  | { deactivate: true; reason?: string }
  | { drop: true; reason: string }
  | { retry: true; reason?: string }
  | { requeue: true; payload?: P; reason?: string };

/** The user-supplied executor: performs the Bot API call for `job`. A throw counts as `{ drop, reason: 'threw' }` (never retried: it may have been applied). */
export type SendFn<P> = (job: SendJob<P>) => Promise<SendOutcome<P>>;

/** How a job ended. */
export type JobResult =
  | { status: 'sent'; value?: unknown }
  /** Replaced by a newer job with the same key (`by` = its id) before it started. */
  | { status: 'superseded'; by: string }
  /** Its chat was deactivated while it was queued. */
  | { status: 'purged' }
  /** `send` answered `{deactivate}` for this job. */
  | { status: 'deactivated'; reason: string }
  /** `send` answered `{drop}` (or threw: reason `threw`), or its deadline passed while it waited (reason `deadline …`). */
  | { status: 'dropped'; reason: string }
  /** Retries or requeues exhausted. */
  | { status: 'failed'; reason: string };

/**
 * Why an enqueue was refused (each counted in `crowdplay_sendq_refused_total` and `Refusals`); `stale`: a
 * version older than the latest enqueued for its key (the newer one is what is sent).
 */
export type RefuseReason = 'deactivated' | 'full' | 'closed' | 'stale';

/** Answer of {@link SendQueue.enqueue}. */
export type EnqueueResult =
  | {
      status: 'queued';
      id: string;
      /** Id of the queued job this one superseded, if any. */
      superseded?: string;
      /**
       * Settles when the job ends, in any process (BullMQ: delivered over a
       * Redis channel; best effort across processes: a producer that must not
       * hang should race it with a timeout). Never rejects.
       */
      result: Promise<JobResult>;
    }
  | { status: 'refused'; reason: RefuseReason };

/** Outcome kinds as counted in metrics (`threw` = send threw). */
export type OutcomeKind = 'ok' | 'retryAfter' | 'deactivate' | 'drop' | 'retry' | 'requeue' | 'threw';

/** Counters of this process since the queue was created (also exported as metrics). */
export interface SendQueueStats {
  /** Calls made through `send`, by lane and outcome. */
  sends: Record<Lane, Record<OutcomeKind, number>>;
  /** 429 answers (`{retryAfterS}` outcomes). */
  rateLimited: number;
  /** Sum of bot-wide pauses requested, ms. */
  pauseMs: number;
  /** Jobs superseded (before starting). */
  superseded: number;
  /** Jobs purged by deactivation. */
  purged: number;
  /** Jobs ended `failed` (retries or requeues exhausted). */
  failed: number;
  /** Jobs dropped because their deadline (`deadlineMs`) passed while they waited, by lane. */
  expired: Record<Lane, number>;
  /** Enqueues refused, by reason. */
  refused: Record<RefuseReason, number>;
  /** Refused takes, by the limit that refused. */
  bucketWaits: Record<LimitName, number>;
  /** Takes granted for a booked slot of the bot rate, and the waits for them (ms, summed). */
  booked: { takes: number; waitMs: number };
  /** Calls held back by this process's call window (at most the bot rate in any second), and the waits (ms, summed). */
  windowWaits: { calls: number; waitMs: number };
  /** End of the latest bot-wide pause this process saw (a 429, `pause()`, or the store's pause), ms on the queue's clock; 0: none yet. */
  pauseEndMs: number;
  /** Calls this process lets in flight now: 1 at start and after each pause, doubled on each success up to `concurrency` (slow start). */
  slowStartWindow: number;
  /** Replies that took the booked slot of a board call (priority at the bucket; the board moved to the next free slot). */
  preempted: number;
  /** Share of the bot rate each lane's calls from this process used over the last 10 s (0…1), at the time of `stats()`. */
  laneUtilisation: Record<Lane, number>;
}

/** Jobs queued (not yet handed to `send`), by lane. */
export type LaneDepth = Record<Lane, number>;

/**
 * The send queue. Producers `enqueue`; a process that sends calls `start(send)`
 * once. Within a chat, jobs run one at a time in order (tx lane first); across
 * chats, a chat throttled by its own limit never holds back another chat.
 */
export interface SendQueue<P> {
  /** `memory` or `bullmq`, for the start-up log. */
  readonly kind: 'memory' | 'bullmq';
  /** The bucket every call of this queue passes. */
  readonly bucket: SendBucket;
  /**
   * Queues one call. Refused (not thrown) when the chat is deactivated, the
   * queue is full (`maxQueued`) or closed, or `version` is older than the
   * latest of its key (`stale`); every refusal is counted. A chat
   * moved by `moveChat` is redirected to its new id.
   * @throws RangeError on a non-integer `chatId`, an unknown `lane`, an empty `key`, a `version` that is not a safe integer ≥ 0
   *   or comes without a `key`, or a `deadlineMs` that is not a finite number > 0.
   */
  enqueue(job: SendJobInput<P>): Promise<EnqueueResult>;
  /**
   * Starts this process's workers: up to `concurrency` calls of `send` in
   * flight, opened by slow start (one call at first and after each bot-wide
   * pause, doubled on each success), so a 429 meets few calls in flight. Call once.
   * @throws Error when already started or closed.
   */
  start(send: SendFn<P>): void;
  /**
   * Bot-wide pause for `forMs` (as on a 429): stored in the bucket, seen by every
   * sender of every process before its next call.
   * @throws RangeError on a negative or non-finite `forMs`.
   */
  pause(forMs: number): Promise<void>;
  /**
   * Deactivates a chat (bot kicked, 403, chat not found): its queued jobs
   * resolve `purged`, new ones are refused (`deactivated`) until `reactivate`.
   * Acts on this exact id (a migration redirect is not followed: the old id of
   * a migrated group is gone, and its updates must not switch off the new one).
   * @returns the number of queued jobs purged
   * @throws RangeError on a chat id that is not a non-zero safe integer.
   */
  deactivate(chatId: number): Promise<number>;
  /** Accepts jobs for the chat (this exact id) again (bot re-added). No-op for an active chat. @throws RangeError on a bad id. */
  reactivate(chatId: number): Promise<void>;
  /** False while the chat (this exact id) is deactivated. @throws RangeError on a bad id. */
  isActive(chatId: number): Promise<boolean>;
  /**
   * Migration (group → supergroup, `migrate_to_chat_id`): moves the chat's
   * queued jobs to `newId` (order kept, ahead of jobs already queued for
   * `newId`), and redirects later enqueues for `oldId` to `newId`.
   * @returns the number of queued jobs moved
   * @throws RangeError when the ids are not integers or are equal.
   */
  moveChat(oldId: number, newId: number): Promise<number>;
  /** Jobs by lane: queued (in process) or unfinished (BullMQ, includes calls in flight). */
  depth(): Promise<LaneDepth>;
  /** Jobs of one chat (this exact id): queued (in process) or unfinished (BullMQ, includes a call in flight). */
  chatDepth(chatId: number): Promise<number>;
  /** This process's counters. */
  stats(): SendQueueStats;
  /**
   * Resolves once nothing is queued or in flight (in this process's view), or
   * after `timeoutMs`. @returns true when idle, false on timeout
   */
  idle(timeoutMs: number): Promise<boolean>;
  /**
   * Ordered shutdown: stop taking new jobs, wait for calls in flight (up to
   * `timeoutMs`), release connections. Queued jobs stay queued (BullMQ: in
   * Redis for the next process; in process: their `result` resolves `failed`
   * reason `closed`). Safe to call twice.
   */
  close(timeoutMs?: number): Promise<void>;
}
