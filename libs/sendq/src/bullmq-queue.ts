import { createHash, randomUUID } from 'node:crypto';
import { DelayedError, Queue, WaitingError, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { traceCarrier, tracingOn, withSpan } from '@crowdplay/telemetry';
import { longTimeout, systemClock, type Clock } from './clock.ts';
import { CallWindow } from './call-window.ts';
import { botRetryMs, chatIntervalsOf, chatSpacingUs, type ChatIntervals } from './gcra.ts';
import { QueueCounters } from './counters.ts';
import { sendqKeys, type SendqKeys } from './keys.ts';
import {
  logPause,
  resolveQueueOptions,
  SAME_PAUSE_MS,
  widened,
  retryBackoffMs,
  type PauseSource,
  type ResolvedQueueOptions,
  type SendQueueOptions,
} from './options.ts';
import { RedisBucket } from './redis-bucket.ts';
import { MAX_REDIRECT_HOPS, checkChatId, checkJobInput } from './shared.ts';
import { LANES } from './types.ts';
import type {
  EnqueueResult,
  JobResult,
  Lane,
  LaneDepth,
  RefuseReason,
  SendBucket,
  SendFn,
  SendJob,
  SendJobInput,
  SendOutcome,
  SendQueue,
  SendQueueStats,
} from './types.ts';

/** Options of {@link BullmqSendQueue.open}. */
export interface BullmqSendQueueOptions extends SendQueueOptions {
  /** REDIS_URL. */
  redisUrl: string;
  /** Key prefix (keys.ts); every process of one bot uses the same. @defaultValue DEFAULT_PREFIX */
  prefix?: string;
  /**
   * The bucket (not closed by `close()`). @defaultValue a `RedisBucket` on the same prefix, on
   * Redis TIME unless `clock` is given (then on `clock`, passed to the script).
   */
  bucket?: SendBucket;
}

/** What a BullMQ job stores (JSON). */
interface JobData<P> {
  chatId: number;
  lane: Lane;
  key?: string;
  /** Supersession version (INCR of the key's counter) of this job. */
  v?: number;
  /** The producer's version (`SendJobInput.version`). */
  pv?: number;
  payload: P;
  isGroup: boolean;
  retries: number;
  requeues: number;
  /** Calls answered 429 (the job went back to the front). */
  r429: number;
  enqueuedAtMs: number;
  /** Dropped when not handed to `send` this long after `enqueuedAtMs`, ms (`SendJobInput.deadlineMs`). */
  deadlineMs?: number;
  /** W3C trace context of the span that enqueued the job (`traceparent`), when tracing is on and one was active. */
  tc?: Record<string, string>;
}

/** The frozen view of a job that `send` and `onSettled` get. */
function jobView<P>(id: string, chatId: number, d: JobData<P>, grantedAtMs: number): SendJob<P> {
  return Object.freeze({
    id,
    chatId,
    lane: d.lane,
    key: d.key,
    version: d.pv,
    payload: d.payload,
    isGroup: d.isGroup,
    retries: d.retries,
    requeues: d.requeues,
    enqueuedAtMs: d.enqueuedAtMs,
    grantedAtMs,
  });
}

/** A version key lives this long after its last job was enqueued (ms): longer than any job waits. */
const VERSION_TTL_MS = 7 * 86_400_000;
/**
 * Versions of a keyed enqueue, atomically: refuses a producer version older than the highest enqueued for the key,
 * else records it and takes the next supersession version and enqueue sequence.
 * KEYS: 1 supersession version, 2 producer version, 3 sequence. ARGV: 1 producer version ('' none), 2 expiry ms.
 * → {1, v, seq} | {0, highest producer version}
 */
const VERSION_LUA = `
if ARGV[1] ~= '' then
  local top = redis.call('GET', KEYS[2])
  if top and tonumber(ARGV[1]) < tonumber(top) then return {0, top} end
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
end
local v = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, v, redis.call('INCR', KEYS[3])}
`;

/** BullMQ job name (one kind of job). */
const JOB_NAME = 'send';

/** BullMQ attempts of a job whose processing failed on a Redis error (not a Bot API outcome). */
const INFRA_ATTEMPTS = 5;

/** Score offset of board jobs in a chat's ZSET (tx jobs first, then board; each by enqueue sequence). */
const BOARD_SCORE = 2 ** 50;

/** Deterministic id of version `v` of supersession key `key` (BullMQ ids may not contain ':'). */
function keyedJobId(key: string, v: number): string {
  return `s-${createHash('sha1').update(key).digest('hex').slice(0, 24)}-${v}`;
}

/**
 * The send queue on BullMQ (REDIS_URL), durable across processes.
 *
 * - One BullMQ queue and one worker per lane (`q` transactional, `qb`
 *   board), each worker with `concurrency` slots: a board job never holds a
 *   slot a reply needs. At the bucket a reply departs at the earliest board
 *   booking (gcra.ts "Lanes"), so it waits at most one bot interval for boards,
 *   and boards use every slot replies leave idle.
 * - Every limiter decision comes from the Lua bucket (`RedisBucket`); BullMQ's
 *   own limiter (per queue, not per chat) is not configured. A worker takes a
 *   job, then a token for its chat: refused by the chat/group limit → the job
 *   is moved to BullMQ's delayed set until the bucket's retry time
 *   (`moveToDelayed` + `DelayedError`: the slot is freed at once, other chats'
 *   jobs go next); refused bot-wide (pause, bot rate) → BullMQ's manual
 *   rate-limit hook (`Queue.rateLimit(botWaitMs)` + `Worker.RateLimitError()`)
 *   puts the job back at the front and stops this worker fetching for that wait.
 * - Supersession: each keyed job carries a version (`INCR {p}:v:<key>`) and a
 *   deterministic id; enqueue removes the previous version's job when it is
 *   still waiting, and a worker drops a job whose version is no longer the
 *   latest before taking a token.
 * - Deactivation: a Redis SET; purge removes the chat's waiting jobs (ids in
 *   `{p}:cj:<chat>`), and a worker purges any it meets. Migration: a Redis
 *   HASH old → new read by enqueue and workers, and the chat's job ids move.
 * - Results travel to the enqueuing process over a pub/sub channel.
 *
 * Within a chat, order is best effort (a job delayed by its chat limit comes
 * back in delayed-set order); the in-process adapter keeps strict order.
 */
export class BullmqSendQueue<P> implements SendQueue<P> {
  readonly kind = 'bullmq' as const;
  private readonly keys: SendqKeys;
  private readonly counters: QueueCounters;
  private readonly pending = new Map<string, (r: JobResult) => void>();
  private readonly workers: Worker[] = [];
  private readonly workerConns: Redis[] = [];
  /** Board bookings taken by this process; with `bookingPrefix` their ids are unique per take across processes. */
  private bookings = 0;
  private readonly bookingPrefix = randomUUID().slice(0, 8);
  private send: SendFn<P> | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;
  private inFlight = 0;
  /** Slow start: the worker's concurrency now (1 at start and after each pause, doubled on each success). */
  private window = 1;
  private readonly kickTimers = new Set<() => void>();
  private pausedUntilMs = 0;
  /** This process's call starts: at most botRatePerS in any 1,000 ms (call-window.ts). */
  private readonly calls: CallWindow;
  /** A chat's own intervals (the group's burst included): how long a job waits behind its chat's earlier ones. */
  private readonly chatIv: ChatIntervals;
  private depthCache: { atMs: number; depth: LaneDepth } = { atMs: -Infinity, depth: { tx: 0, board: 0 } };

  private constructor(
    private readonly o: ResolvedQueueOptions,
    private readonly opts: BullmqSendQueueOptions,
    private readonly clock: Clock,
    readonly bucket: SendBucket,
    private readonly ownsBucket: boolean,
    private readonly redis: Redis,
    private readonly sub: Redis,
    private readonly queues: Readonly<Record<Lane, Queue>>,
    private readonly queueConn: Redis,
  ) {
    this.keys = sendqKeys(opts.prefix);
    this.counters = new QueueCounters(opts.metrics, opts.refusals, () => this.depthCache.depth, {
      botRatePerS: o.limits.botRatePerS,
      now: () => clock.now(),
    });
    this.calls = new CallWindow(o.limits.botRatePerS);
    this.chatIv = chatIntervalsOf(o.limits);
  }

  /**
   * Connects (three connections: commands, pub/sub, BullMQ's queue; `start`
   * adds the worker's two) and loads the bucket script.
   * @throws CrowdplayError CP_ERR_CONFIG_INVALID on bad options; RangeError on a bad prefix;
   *   Error when `clock` is not tied to real time (ManualClock); the ioredis error when Redis is unreachable.
   */
  static async open<P>(opts: BullmqSendQueueOptions): Promise<BullmqSendQueue<P>> {
    const o = resolveQueueOptions(opts);
    const keys = sendqKeys(opts.prefix);
    const clock = opts.clock ?? systemClock;
    if (!Number.isFinite(clock.speed)) throw new Error('BullmqSendQueue needs a clock tied to real time (BullMQ delays use Date.now)');
    const redis = new Redis(opts.redisUrl, { maxRetriesPerRequest: null, lazyConnect: true });
    const sub = new Redis(opts.redisUrl, { maxRetriesPerRequest: null, lazyConnect: true });
    const onError = opts.onError ?? ((err, context) => console.error(`sendq ${context}:`, err));
    redis.on('error', (err) => onError(err, 'redis'));
    sub.on('error', (err) => onError(err, 'redis subscriber'));
    let bucket = opts.bucket;
    const opened: Queue[] = [];
    const queueConn = new Redis(opts.redisUrl, { maxRetriesPerRequest: null, lazyConnect: true });
    queueConn.on('error', (err) => onError(err, 'redis (bullmq queue)'));
    try {
      await Promise.all([redis.connect(), sub.connect(), queueConn.connect()]);
      bucket ??= await RedisBucket.open({ redis, prefix: opts.prefix, limits: o.limits, clock: opts.clock });
      for (const lane of LANES) {
        const queue = new Queue(keys.queueName[lane], { connection: queueConn, prefix: keys.bullPrefix });
        opened.push(queue);
        queue.on('error', (err) => onError(err, `bullmq queue (${lane})`));
        await queue.waitUntilReady();
      }
      await sub.subscribe(keys.settled);
    } catch (err) {
      for (const queue of opened) await queue.close().catch(() => {});
      redis.disconnect();
      sub.disconnect();
      queueConn.disconnect();
      throw err;
    }
    const queues = { tx: opened[0]!, board: opened[1]! };
    const q = new BullmqSendQueue<P>(o, opts, clock, bucket, opts.bucket === undefined, redis, sub, queues, queueConn);
    sub.on('message', (channel: string, message: string) => {
      if (channel === keys.settled) q.onSettledMessage(message);
    });
    await q.refreshDepth();
    return q;
  }

  private get onError(): (err: unknown, context: string) => void {
    return this.opts.onError ?? ((err, context) => console.error(`sendq ${context}:`, err));
  }

  // ---- producers ----

  /** Follows migration redirects in Redis (one HGET per hop; almost always one). */
  private async resolveChat(chatId: number): Promise<number> {
    let id = chatId;
    for (let i = 0; i < MAX_REDIRECT_HOPS; i++) {
      const next = await this.redis.hget(this.keys.moved, String(id));
      if (next === null) return id;
      id = Number(next);
    }
    return id;
  }

  async enqueue(input: SendJobInput<P>): Promise<EnqueueResult> {
    checkJobInput(input);
    if (this.closed) return this.refuse('closed', input.chatId);
    const chatId = await this.resolveChat(input.chatId);
    const [deact, depthRaw] = await Promise.all([
      this.redis.sismember(this.keys.deactivated, String(chatId)),
      this.redis.hmget(this.keys.depth, 'tx', 'board'),
    ]);
    if (deact === 1) return this.refuse('deactivated', chatId);
    const depth = { tx: Number(depthRaw[0] ?? 0), board: Number(depthRaw[1] ?? 0) };
    this.depthCache = { atMs: Date.now(), depth };
    if (input.key === undefined && depth.tx + depth.board >= this.o.maxQueued) return this.refuse('full', chatId);
    let v: number | undefined;
    let id: string;
    let seq: number;
    if (input.key !== undefined) {
      const k = this.keys;
      const r = (await this.redis.eval(
        VERSION_LUA,
        3,
        k.version(input.key),
        k.producerVersion(input.key),
        k.seq,
        input.version === undefined ? '' : String(input.version),
        String(VERSION_TTL_MS),
      )) as [number, number | string, number?];
      // A queued job is only ever replaced by a newer version (an older render arriving late is dropped).
      if (r[0] === 0) return this.refuse('stale', chatId);
      v = Number(r[1]);
      seq = Number(r[2] ?? 0);
      id = keyedJobId(input.key, v);
      // A keyed job replaces its queued predecessor, so it counts against the bound only when nothing was replaced.
      if (v === 1 && depth.tx + depth.board >= this.o.maxQueued) return this.refuse('full', chatId);
    } else {
      id = `j-${randomUUID()}`;
      seq = await this.redis.incr(this.keys.seq);
    }
    const data: JobData<P> = {
      chatId,
      lane: input.lane,
      ...(input.key !== undefined ? { key: input.key, v } : {}),
      ...(input.version !== undefined ? { pv: input.version } : {}),
      payload: input.payload,
      isGroup: input.isGroup ?? chatId < 0,
      retries: 0,
      requeues: 0,
      r429: 0,
      enqueuedAtMs: this.clock.now(),
      ...(input.deadlineMs !== undefined ? { deadlineMs: input.deadlineMs } : {}),
    };
    const tc = tracingOn() ? traceCarrier() : undefined;
    if (tc !== undefined) data.tc = tc;
    let resolve!: (r: JobResult) => void;
    const result = new Promise<JobResult>((r) => (resolve = r));
    this.pending.set(id, resolve);
    // Registered in the chat's ZSET before BullMQ can hand the job to a worker (the worker checks its rank).
    await this.redis
      .multi()
      .zadd(this.keys.chatJobs(chatId), (input.lane === 'board' ? BOARD_SCORE : 0) + seq, id)
      .hincrby(this.keys.depth, input.lane, 1)
      .exec();
    // A newer version takes its queued predecessor's turn: removed first, then this job goes to the front of its
    // lane (in process it takes the older job's place in line). Behind the predecessor's whole lane, a board whose
    // chat changed while it waited would wait twice, and the stale one at the head would be sent meanwhile.
    let superseded: string | undefined;
    if (input.key !== undefined && v !== undefined && v > 1) {
      const prevId = keyedJobId(input.key, v - 1);
      if (await this.removeQueued(prevId, { status: 'superseded', by: id })) superseded = prevId;
    }
    await this.queues[input.lane].add(JOB_NAME, data, {
      jobId: id,
      ...(superseded !== undefined ? { lifo: true } : {}),
      removeOnComplete: true,
      removeOnFail: true,
      // Only for errors of our own Redis bookkeeping (send's outcomes never fail a BullMQ job); a
      // re-run after a call never repeats it (see the `called` counter in process()).
      attempts: INFRA_ATTEMPTS,
      backoff: { type: 'exponential', delay: 1_000 },
    });
    return { status: 'queued', id, ...(superseded ? { superseded } : {}), result };
  }

  private refuse(reason: RefuseReason, chatId: number): EnqueueResult {
    this.counters.refused(reason, chatId);
    return { status: 'refused', reason };
  }

  /** Removes a job that has not started (BullMQ refuses a locked one) and settles it. @returns true when removed */
  private async removeQueued(id: string, result: JobResult): Promise<boolean> {
    const found = await this.getJob(id);
    if (found === undefined) return false;
    const { job, lane } = found;
    const removed = await this.queues[lane].remove(id).catch(() => 0);
    if (removed !== 1) return false;
    if (result.status === 'superseded') this.counters.superseded(job.data.lane);
    await this.finish(id, { ...job.data, chatId: await this.resolveChat(job.data.chatId) }, result);
    return true;
  }

  /** The BullMQ job `id` and its lane's queue (tx first), or undefined when neither holds it. */
  private async getJob(id: string): Promise<{ job: Job<JobData<P>>; lane: Lane } | undefined> {
    for (const lane of LANES) {
      const job = (await this.queues[lane].getJob(id)) as Job<JobData<P>> | undefined;
      if (job !== undefined) return { job, lane };
    }
    return undefined;
  }

  // ---- chat state ----

  async pause(forMs: number): Promise<void> {
    if (!(Number.isFinite(forMs) && forMs >= 0)) throw new RangeError(`forMs must be a finite number >= 0, got ${forMs}`);
    await this.pauseFrom(forMs, 'pause()');
  }

  /** A pause of `forMs` (a 429 read here, or `pause()`): the local mirror, then the store. */
  private async pauseFrom(forMs: number, source: PauseSource): Promise<void> {
    // The local mirror first, synchronously: a worker of this process about to call checks it right before the call.
    this.notePause(forMs, source);
    await this.bucket.pause(forMs);
  }

  /** This process's mirror of the bot-wide pause: set, exported and logged when `forMs` from now moves its end later. */
  private notePause(forMs: number, source: PauseSource): void {
    const now = this.clock.now();
    const until = now + forMs;
    if (until <= this.pausedUntilMs) return;
    const fresh = this.pausedUntilMs <= now || until > this.pausedUntilMs + SAME_PAUSE_MS;
    this.pausedUntilMs = until;
    this.counters.pauseEnd(until);
    if (!fresh) return;
    logPause(this.opts.logger, this.o, { forMs, endMs: until, source });
    this.setWindow(1);
  }

  /** Slow start: BullMQ's worker fetches at most `n` jobs at once (read by its fetch loop). */
  private setWindow(n: number): void {
    this.window = n;
    this.counters.slowStart(n);
    for (const w of this.workers) w.concurrency = n;
  }

  async deactivate(chatId: number): Promise<number> {
    checkChatId(chatId, 'chatId');
    const id = chatId;
    await this.redis.sadd(this.keys.deactivated, String(id));
    const jobIds = await this.redis.zrange(this.keys.chatJobs(id), '0', '-1');
    let purged = 0;
    for (const jobId of jobIds) if (await this.removeQueued(jobId, { status: 'purged' })) purged++;
    this.counters.purged(purged);
    return purged;
  }

  async reactivate(chatId: number): Promise<void> {
    checkChatId(chatId, 'chatId');
    await this.redis.srem(this.keys.deactivated, String(chatId));
  }

  async isActive(chatId: number): Promise<boolean> {
    checkChatId(chatId, 'chatId');
    return (await this.redis.sismember(this.keys.deactivated, String(chatId))) === 0;
  }

  async moveChat(oldId: number, newId: number): Promise<number> {
    checkChatId(oldId, 'oldId');
    checkChatId(newId, 'newId');
    if (oldId === newId) throw new RangeError(`moveChat: oldId and newId are both ${oldId}`);
    const k = this.keys;
    await this.redis.multi().hdel(k.moved, String(newId)).hset(k.moved, String(oldId), String(newId)).exec();
    const ids = await this.redis.zrange(k.chatJobs(oldId), '0', '-1');
    let moved = 0;
    for (const id of ids) {
      const job = (await this.getJob(id))?.job;
      if (job === undefined) continue;
      await job.updateData({ ...job.data, chatId: newId }).catch(() => {});
      moved++;
    }
    // Scores are enqueue sequences, so the moved (older) jobs stay ahead of the new chat's own.
    await this.redis
      .multi()
      .zunionstore(k.chatJobs(newId), 2, k.chatJobs(newId), k.chatJobs(oldId), 'AGGREGATE', 'MIN')
      .del(k.chatJobs(oldId))
      .exec();
    return moved;
  }

  async depth(): Promise<LaneDepth> {
    await this.refreshDepth();
    return { ...this.depthCache.depth };
  }

  private async refreshDepth(): Promise<void> {
    const r = await this.redis.hmget(this.keys.depth, 'tx', 'board');
    this.depthCache = { atMs: Date.now(), depth: { tx: Math.max(0, Number(r[0] ?? 0)), board: Math.max(0, Number(r[1] ?? 0)) } };
  }

  async chatDepth(chatId: number): Promise<number> {
    return this.redis.zcard(this.keys.chatJobs(chatId));
  }

  stats(): SendQueueStats {
    return this.counters.snapshot();
  }

  async idle(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const d = await this.depth();
      if (d.tx + d.board === 0 && this.inFlight === 0) return true;
      if (Date.now() >= deadline) return false;
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  // ---- workers ----

  start(send: SendFn<P>): void {
    if (this.closed) throw new Error('sendq: start() after close()');
    if (this.send !== undefined) throw new Error('sendq: start() called twice');
    this.send = send;
    // One worker per lane, each with the slow-start window up to `concurrency`: a board job never holds a slot a reply needs.
    for (const lane of LANES) {
      const conn = new Redis(this.opts.redisUrl, { maxRetriesPerRequest: null });
      conn.on('error', (err) => this.onError(err, `redis (bullmq worker, ${lane})`));
      this.workerConns.push(conn);
      const worker = new Worker(this.keys.queueName[lane], (job: Job<JobData<P>>, token?: string) => this.processTraced(job, token ?? ''), {
        connection: conn,
        prefix: this.keys.bullPrefix,
        // Slow start: one job at first, more as calls succeed (setWindow), up to TELEGRAM_SENDQ_CONCURRENCY.
        concurrency: this.window,
        // A bot-wide wait is re-checked at least this often (the bucket decides; BullMQ only stops fetching).
        maximumRateLimitDelay: 5_000,
      });
      this.workers.push(worker);
      worker.on('error', (err) => this.onError(err, `bullmq worker (${lane})`));
      worker.on('failed', (job: Job<JobData<P>> | undefined, err: Error) => {
        this.onError(err, `job ${job?.id ?? '?'} (bookkeeping error)`);
        if (job === undefined || job.attemptsMade < INFRA_ATTEMPTS) return;
        this.counters.failed();
        this.finish(job.id ?? '', job.data, { status: 'failed', reason: `redis errors: ${err.message}` }).catch((e: unknown) =>
          this.onError(e, 'finish'),
        );
      });
    }
  }

  /** Real ms for `ms` of the queue's clock (BullMQ delays use Date.now). */
  private realMs(ms: number): number {
    return Math.max(1, Math.ceil(ms / this.clock.speed));
  }

  /** Stops the lane's worker fetching for `ms` of clock time and puts `job` back at the front (BullMQ's manual rate-limit hook). */
  private async backToFront(lane: Lane, ms: number): Promise<never> {
    const realMs = this.realMs(ms);
    await this.queues[lane].rateLimit(realMs);
    this.kickAfter(lane, realMs);
    throw Worker.RateLimitError();
  }

  /**
   * BullMQ puts a prioritised (board) job moved back from active (rate-limit
   * hook, `moveToWait`) into its prioritised set without the "jobs waiting"
   * marker, so a worker that meanwhile went into its blocking wait would sleep
   * until `drainDelay` (5 s). Adding the marker (what BullMQ's own
   * `addBaseMarkerIfNeeded` does) once the wait is over wakes it.
   */
  private kickAfter(lane: Lane, realMs: number): void {
    const fire = (): void => {
      this.kickTimers.delete(cancel);
      if (this.closed) return;
      this.redis
        .zadd(this.queues[lane].keys.marker ?? `${this.keys.bullPrefix}:${this.keys.queueName[lane]}:marker`, 0, '0')
        .catch((err: unknown) => this.onError(err, 'marker'));
    };
    const cancel = longTimeout(realMs, fire, true);
    this.kickTimers.add(cancel);
  }

  /** `process`, inside a `crowdplay.send_job.process` span continuing the enqueuer's trace when tracing is on. */
  private processTraced(job: Job<JobData<P>>, token: string): Promise<JobResult> {
    if (!tracingOn()) return this.process(job, token);
    const d = job.data;
    return withSpan(
      'crowdplay.send_job.process',
      {
        carrier: d.tc,
        attributes: { 'messaging.system': 'bullmq', 'crowdplay.lane': d.lane, 'crowdplay.chat': d.chatId, 'crowdplay.job': job.id ?? '' },
      },
      () => this.process(job, token),
    );
  }

  private async process(job: Job<JobData<P>>, token: string): Promise<JobResult> {
    const send = this.send;
    if (send === undefined) throw new Error('sendq: worker without send');
    const id = job.id ?? '';
    const d = job.data;
    this.inFlight++;
    try {
      const k = this.keys;
      // Checks before taking a token: migration, deactivation, supersession, the chat's head (one round trip).
      let chatId = d.chatId;
      let pre = await this.preCheck(id, d, chatId);
      if (pre.moved) {
        chatId = await this.resolveChat(d.chatId);
        pre = await this.preCheck(id, d, chatId);
      }
      if (pre.called > d.retries + d.requeues + d.r429) {
        // A call was started and its outcome never recorded (the worker stopped mid-call and BullMQ
        // re-ran the job): it may have been applied, so it is never repeated.
        this.counters.send(d.lane, 'drop');
        return await this.finish(id, { ...d, chatId }, { status: 'dropped', reason: 'outcome unknown: a worker stopped during the call' });
      }
      if (pre.deactivated) {
        this.counters.purged(1);
        return await this.finish(id, { ...d, chatId }, { status: 'purged' });
      }
      if (d.key !== undefined && d.v !== undefined && pre.latest > d.v) {
        this.counters.superseded(d.lane);
        return await this.finish(id, { ...d, chatId }, { status: 'superseded', by: keyedJobId(d.key, pre.latest) });
      }
      if (d.deadlineMs !== undefined && this.clock.now() >= d.enqueuedAtMs + d.deadlineMs) {
        // Its deadline passed while it waited (a pause, a backlog): dropped, never sent late.
        const now = this.clock.now();
        const deadlineMs = d.deadlineMs;
        this.counters.expired(d.lane, this.opts.logger, now, { id, chatId, waitedMs: now - d.enqueuedAtMs, deadlineMs });
        return await this.finish(
          id,
          { ...d, chatId },
          { status: 'dropped', reason: `deadline: not sent within ${Math.round(deadlineMs)} ms of enqueue` },
        );
      }
      if (pre.rank !== null && pre.rank > 0 && pre.head !== undefined && pre.head !== id) {
        // Not the chat's head: wait the least time the jobs ahead take at the chat's limits (per-chat order; no token taken).
        if ((await this.redis.exists(k.bullJob(pre.head, 'tx'), k.bullJob(pre.head, 'board'))) > 0) {
          await job.moveToDelayed(Date.now() + this.realMs(chatSpacingUs(pre.rank, this.chatIv, d.isGroup) / 1000), token);
        } else {
          await this.redis.zrem(k.chatJobs(chatId), pre.head); // a head left behind by a crash: forget it
          await job.moveToDelayed(Date.now() + 1, token);
        }
        throw new DelayedError();
      }
      if (this.clock.now() < this.pausedUntilMs) {
        this.counters.bucketWait('pause');
        return await this.backToFront(d.lane, this.pausedUntilMs - this.clock.now());
      }
      // A board's booked slot is recorded under an id unique to this take, so a reply can move it (gcra.ts "Lanes").
      const bookingId = d.lane === 'board' ? `${this.bookingPrefix}.${++this.bookings}` : undefined;
      const t = await this.bucket.take(String(chatId), d.isGroup, this.o.botBookMs, {
        lane: d.lane,
        ...(bookingId !== undefined ? { bookingId } : {}),
      });
      if (!t.granted) {
        this.counters.bucketWait(t.limit);
        if (t.limit === 'chat' || t.limit === 'group') {
          await job.moveToDelayed(Date.now() + this.realMs(t.retryAfterMs), token);
          throw new DelayedError();
        }
        if (t.limit === 'pause') this.notePause(t.retryAfterMs, 'store');
        // Beyond the booking bound: back when the bot's next slot is within it (gcra.ts botRetryMs), so a slot is
        // booked behind the last one instead of the booked slots running out.
        return await this.backToFront(d.lane, botRetryMs(t, this.o.botBookMs));
      }
      if (t.preempted === true) this.counters.preempted();
      let departAtMs = t.nowMs + t.waitMs;
      if (t.waitMs > 0) {
        // A booked slot of the bot rate (≤ botBookMs away, gcra.ts "Booking"): the bucket counts this call at it.
        this.counters.bookedWait(t.waitMs);
        // A 429 another process saw while we wait is read from the store right before the call (below).
        await new Promise<void>((resolve) => this.clock.after(Math.ceil(t.waitMs), resolve));
        // A board claims its slot before calling; a reply that took it meanwhile moved it on: wait for the new one.
        for (;;) {
          if (bookingId === undefined) break;
          const dep = await this.bucket.depart(bookingId, String(chatId), d.isGroup, departAtMs);
          if (dep.pausedMs > 0) this.notePause(dep.pausedMs, 'store');
          if (dep.movedToMs === null) break;
          departAtMs = dep.movedToMs;
          if (dep.waitMs > 0) await new Promise<void>((resolve) => this.clock.after(Math.ceil(dep.waitMs), resolve));
        }
      }
      // A 429 seen in this process while we awaited the token (or the slot) wins.
      if (this.clock.now() < this.pausedUntilMs) return await this.backToFront(d.lane, this.pausedUntilMs - this.clock.now());
      // The mark, then the store's pause as the last thing read before the call: a pause another process wrote
      // since our take (or during a booked slot's wait) is felt here, not after the call. Read together, the mark's
      // answer (another connection) could come after the pause was written and leave the call on a stale read.
      await this.redis.incr(k.called(id));
      const storePausedMs = await this.bucket.pausedForMs();
      if (storePausedMs > 0) this.notePause(storePausedMs, 'store');
      // This process's call starts within the bot rate in any second (call-window.ts): checked and recorded in the
      // same turn as the call, so a stall between a take and its call cannot bunch calls past the window.
      const heldAt = this.clock.now();
      let held = false;
      for (;;) {
        if (this.clock.now() < this.pausedUntilMs) {
          // Not called after all: unmark.
          await this.redis.decr(k.called(id));
          return await this.backToFront(d.lane, this.pausedUntilMs - this.clock.now());
        }
        const w = this.calls.waitMs(this.clock.now());
        if (w <= 0) break;
        held = true;
        await new Promise<void>((resolve) => this.clock.after(w, resolve));
        const pausedMs = await this.bucket.pausedForMs();
        if (pausedMs > 0) this.notePause(pausedMs, 'store');
      }
      if (held) this.counters.windowWait(this.clock.now() - heldAt);
      // Immediately before the call (nothing awaited from here to send).
      this.calls.record(this.clock.now());
      // The slot's time, to the µs (a float sum of two ms values near 1.8e12 is off by ~0.2 µs).
      this.counters.callStarted(d.lane, this.clock.now());
      const view = jobView<P>(id, chatId, d, t.waitMs > 0 ? Math.round(departAtMs * 1000) / 1000 : t.nowMs);
      let out: SendOutcome<P>;
      try {
        out = await send(view);
      } catch (err) {
        this.onError(err, `send threw for job ${id} (chat ${chatId}): dropped, not retried`);
        this.counters.send(d.lane, 'threw');
        return await this.finish(id, d, { status: 'dropped', reason: 'threw' });
      }
      return await this.apply(job, token, { ...d, chatId }, out);
    } finally {
      this.inFlight--;
    }
  }

  private async preCheck(
    id: string,
    d: JobData<P>,
    chatId: number,
  ): Promise<{ moved: boolean; deactivated: boolean; called: number; latest: number; rank: number | null; head: string | undefined }> {
    const k = this.keys;
    const pipe = this.redis
      .multi()
      .hget(k.moved, String(chatId))
      .sismember(k.deactivated, String(chatId))
      .zrank(k.chatJobs(chatId), id)
      .zrange(k.chatJobs(chatId), '0', '0');
    pipe.get(k.called(id));
    if (d.key !== undefined) pipe.get(k.version(d.key));
    const r = (await pipe.exec()) ?? [];
    const rank = r[2]?.[1];
    const head = r[3]?.[1];
    return {
      moved: r[0]?.[1] != null,
      deactivated: r[1]?.[1] === 1,
      rank: typeof rank === 'number' ? rank : null,
      head: Array.isArray(head) && typeof head[0] === 'string' ? head[0] : undefined,
      called: Number(r[4]?.[1] ?? 0),
      latest: Number(r[5]?.[1] ?? 0),
    };
  }

  /** The outcome policy (docs/sendq.md); same as the in-process adapter's. */
  private async apply(job: Job<JobData<P>>, token: string, d: JobData<P>, out: SendOutcome<P>): Promise<JobResult> {
    const id = job.id ?? '';
    if ('ok' in out) {
      this.counters.send(d.lane, 'ok');
      if (this.window < this.o.concurrency) this.setWindow(widened(this.window, this.o.concurrency));
      return this.finish(id, d, out.value === undefined ? { status: 'sent' } : { status: 'sent', value: out.value });
    }
    if ('retryAfterS' in out) {
      const forMs = Math.max(0, Math.ceil(out.retryAfterS * 1000));
      this.counters.send(d.lane, 'retryAfter');
      this.counters.rateLimited(forMs);
      await this.pauseFrom(forMs, '429');
      await job.updateData({ ...d, r429: d.r429 + 1 });
      return this.backToFront(d.lane, forMs);
    }
    if ('deactivate' in out) {
      this.counters.send(d.lane, 'deactivate');
      const r = await this.finish(id, d, { status: 'deactivated', reason: out.reason ?? 'deactivated' });
      await this.deactivate(d.chatId);
      return r;
    }
    if ('drop' in out) {
      this.counters.send(d.lane, 'drop');
      return this.finish(id, d, { status: 'dropped', reason: out.reason });
    }
    if ('retry' in out) {
      this.counters.send(d.lane, 'retry');
      const retries = d.retries + 1;
      if (retries > this.o.maxRetries) {
        this.counters.failed();
        return this.finish(id, d, {
          status: 'failed',
          reason: `retries exhausted (${this.o.maxRetries})${out.reason ? `: ${out.reason}` : ''}`,
        });
      }
      await job.updateData({ ...d, retries });
      await job.moveToDelayed(Date.now() + this.realMs(retryBackoffMs(this.o, retries)), token);
      throw new DelayedError();
    }
    this.counters.send(d.lane, 'requeue');
    const requeues = d.requeues + 1;
    if (requeues > this.o.maxRequeues) {
      this.counters.failed();
      return this.finish(id, d, {
        status: 'failed',
        reason: `requeues exhausted (${this.o.maxRequeues})${out.reason ? `: ${out.reason}` : ''}`,
      });
    }
    await job.updateData({ ...d, requeues, ...(out.payload !== undefined ? { payload: out.payload } : {}) });
    await job.moveToWait(token);
    this.kickAfter(d.lane, 0);
    throw new WaitingError();
  }

  /** Ends a job: drops its bookkeeping, tells the enqueuing process (pub/sub) and this one. */
  private async finish(id: string, d: JobData<P>, result: JobResult): Promise<JobResult> {
    const k = this.keys;
    this.counters.settled(d.lane, result.status, this.clock.now() - d.enqueuedAtMs);
    await this.redis
      .multi()
      .zrem(k.chatJobs(d.chatId), id)
      .del(k.called(id))
      .hincrby(this.keys.depth, d.lane, -1)
      .publish(k.settled, JSON.stringify({ id, result }))
      .exec();
    this.resolveLocal(id, result);
    const cb = this.opts.onSettled;
    if (cb !== undefined) {
      try {
        cb(jobView<P>(id, d.chatId, d, 0), result);
      } catch (err) {
        this.onError(err, 'onSettled');
      }
    }
    return result;
  }

  private resolveLocal(id: string, result: JobResult): void {
    const r = this.pending.get(id);
    if (r === undefined) return;
    this.pending.delete(id);
    r(result);
  }

  private onSettledMessage(message: string): void {
    try {
      const m = JSON.parse(message) as { id: string; result: JobResult };
      this.resolveLocal(m.id, m.result);
    } catch (err) {
      this.onError(err, 'settled message');
    }
  }

  close(timeoutMs = 10_000): Promise<void> {
    this.closing ??= this.doClose(timeoutMs);
    return this.closing;
  }

  private async doClose(timeoutMs: number): Promise<void> {
    this.closed = true;
    for (const cancel of this.kickTimers) cancel();
    this.kickTimers.clear();
    await Promise.all(
      this.workers.map(async (w) => {
        await Promise.race([w.close(), new Promise((r) => setTimeout(r, timeoutMs))]);
        await w.close(true).catch(() => {});
      }),
    );
    for (const lane of LANES) await this.queues[lane].close().catch(() => {});
    for (const c of [...this.workerConns, this.queueConn]) await c.quit().catch(() => c.disconnect());
    if (this.ownsBucket) await this.bucket.close();
    for (const [id, r] of this.pending) {
      this.pending.delete(id);
      r({ status: 'failed', reason: 'closed: the job stays queued in Redis; this process no longer observes its end' });
    }
    await this.sub.quit().catch(() => this.sub.disconnect());
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
