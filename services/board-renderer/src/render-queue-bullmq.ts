/**
 * The render queue on BullMQ (REDIS_URL): gateways submit, render workers in
 * any process (`crowdplay service board-renderer`, or a gateway with
 * BOARD_RENDER_IN_PROCESS) take the jobs.
 *
 * Keys (all under the hash tag `{<prefix>}`, one Redis Cluster slot):
 * - `{p}:c:<chat>` HASH, the chat's state: `v` latest version, `b` its board
 *   (JSON, avatars base64, at most `maxJobBytes`), `sat` its submit time (ms),
 *   `taken` the last version a worker took, `done` the last version finished,
 *   `run` 1 while the chat has a BullMQ job (waiting or active), `jid` that
 *   job's id, `seq` job counter, `at` last activity (ms). Expires 7 days after
 *   the last submit.
 * - `{p}:queued` SET of chats whose job waits for a worker (the depth, and
 *   the `maxQueue` bound).
 * - BullMQ queue `r` with prefix `{p}`; a job's data is only `{chatId, rank}`
 *   (the rank of the submit that added it: a worker hands its jobs to the
 *   render pool, which starts the lowest rank first).
 *
 * Supersession, race-free: the board lives in the chat's hash, not in the
 * job. A submit (one Lua script) writes the newest board over the older one
 * and adds a BullMQ job only when the chat has none (`run` 0); otherwise the
 * chat's waiting job will find the newest board when it starts, or the
 * active job will, when its render ends (the worker loops: take the newest
 * version not done → render → mark done → take again; "nothing newer" sets
 * `run` 0 in the same script that checks). One job per chat at a time, so a
 * chat's versions render one at a time and in order, across processes.
 *
 * A render that throws, or a callback that throws, is counted and marked
 * done (not retried). A Redis error in the processor fails the job, which
 * BullMQ retries ({@link INFRA_ATTEMPTS}); a re-run (or a stalled job taken
 * over after a worker died) renders the newest version not done again.
 * A chat whose job was lost (a process died between the submit script and
 * adding the job) is reclaimed by its next submit after {@link STALE_MS}.
 */
import { Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { defineLua, renderQueueKeys, type LuaCall } from '@crowdplay/sendq';
import { traceCarrier, tracingOn, withSpan } from '@crowdplay/telemetry';
import type { Board, RenderOutcome } from '@crowdplay/board';
import {
  DEFAULT_MAX_JOB_BYTES,
  DEFAULT_RENDER_MAX_QUEUE,
  RenderQueueCounters,
  checkPositive,
  checkRank,
  decodeBoardJob,
  encodeBoardJob,
  type RenderConsumer,
  type RenderQueue,
  type RenderQueueOptions,
  type RenderQueueStats,
  type SubmitOutcome,
} from './render-queue.ts';

/** A chat's job not seen to make progress for this long is replaced by its next submit (ms): renders take < 1 s. */
export const STALE_MS = 300_000;
/** A chat's state lives this long after its last submit (ms). */
const STATE_TTL_MS = 7 * 86_400_000;
/** BullMQ attempts of a job whose processing failed on a Redis error (a render error is not retried). */
const INFRA_ATTEMPTS = 3;
const JOB_NAME = 'render';

/** A render job's data: the chat (its boards live in the chat's Redis hash) and the submitter's trace context. */
interface RenderJobData {
  chatId: number;
  /** The chat's rank when the job was added (the scheduler's quietest-first order, ms since epoch): lower renders first. */
  rank?: number;
  /** W3C `traceparent` (and `tracestate`) of the span active at submit, when tracing is on. */
  tc?: Record<string, string>;
}

const LUA_HEAD = `local NEG = -math.huge
local function num(x) if x then return tonumber(x) end return NEG end
`;

/** KEYS: chat, queued. ARGV: chatId, version, board, maxQueue, nowMs, staleMs, ttlMs. → {kind, jid|by, depth, superseded} */
const SUBMIT_LUA = `${LUA_HEAD}
local cur = redis.call('HGET', KEYS[1], 'v')
local version = tonumber(ARGV[2])
local depth = redis.call('SCARD', KEYS[2])
-- Not newer than the stored version, nor than one already drawn (a render may draw past the version it took).
local top = math.max(num(cur), num(redis.call('HGET', KEYS[1], 'done')))
if version <= top then return {'superseded', tostring(top), depth, 0} end
local now = tonumber(ARGV[5])
local need = redis.call('HGET', KEYS[1], 'run') ~= '1' or now - num(redis.call('HGET', KEYS[1], 'at')) > tonumber(ARGV[6])
local isQueued = redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1
if need and not isQueued and depth >= tonumber(ARGV[4]) then return {'full', '', depth, 0} end
local sup = 0
if cur and tonumber(cur) > num(redis.call('HGET', KEYS[1], 'taken')) then sup = 1 end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'b', ARGV[3], 'sat', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[7])
if need then
  local jid = 'c' .. ARGV[1] .. '-' .. redis.call('HINCRBY', KEYS[1], 'seq', 1)
  redis.call('HSET', KEYS[1], 'run', '1', 'jid', jid, 'at', ARGV[5])
  redis.call('SADD', KEYS[2], ARGV[1])
  return {'add', jid, redis.call('SCARD', KEYS[2]), sup}
end
return {'merged', '', depth, sup}
`;

/** KEYS: chat, queued. ARGV: jobId, chatId, nowMs. → {'take', v, board, sat, depth} | {'idle'|'stale', '', '', '', depth} */
const TAKE_LUA = `${LUA_HEAD}
if redis.call('HGET', KEYS[1], 'jid') ~= ARGV[1] then return {'stale', '', '', '', redis.call('SCARD', KEYS[2])} end
redis.call('SREM', KEYS[2], ARGV[2])
local depth = redis.call('SCARD', KEYS[2])
local v = redis.call('HGET', KEYS[1], 'v')
if v and tonumber(v) > num(redis.call('HGET', KEYS[1], 'done')) then
  redis.call('HSET', KEYS[1], 'taken', v, 'at', ARGV[3])
  return {'take', v, redis.call('HGET', KEYS[1], 'b') or '', redis.call('HGET', KEYS[1], 'sat') or ARGV[3], depth}
end
redis.call('HSET', KEYS[1], 'run', '0')
return {'idle', '', '', '', depth}
`;

/** KEYS: chat. ARGV: jobId, version, nowMs. Marks a version finished (rendered, or failed: not retried). */
const DONE_LUA = `${LUA_HEAD}
if redis.call('HGET', KEYS[1], 'jid') ~= ARGV[1] then return 0 end
if tonumber(ARGV[2]) > num(redis.call('HGET', KEYS[1], 'done')) then redis.call('HSET', KEYS[1], 'done', ARGV[2]) end
-- The board is no longer needed once a version at or past it is done (a render may draw past the stored one).
if num(redis.call('HGET', KEYS[1], 'v')) <= tonumber(ARGV[2]) then redis.call('HDEL', KEYS[1], 'b') end
redis.call('HSET', KEYS[1], 'at', ARGV[3])
return 1
`;

/** KEYS: chat, queued. ARGV: jobId, chatId, nowMs. A job leaving work behind (worker closing): → the next job's id, or ''. */
const HANDOFF_LUA = `${LUA_HEAD}
if redis.call('HGET', KEYS[1], 'jid') ~= ARGV[1] then return '' end
if num(redis.call('HGET', KEYS[1], 'v')) > num(redis.call('HGET', KEYS[1], 'done')) then
  local jid = 'c' .. ARGV[2] .. '-' .. redis.call('HINCRBY', KEYS[1], 'seq', 1)
  redis.call('HSET', KEYS[1], 'jid', jid, 'at', ARGV[3])
  redis.call('SADD', KEYS[2], ARGV[2])
  return jid
end
redis.call('HSET', KEYS[1], 'run', '0')
return ''
`;

/** The queue's scripts on its connection (libs/sendq defineLua: EVALSHA, EVAL after NOSCRIPT). */
function scriptsOn(redis: Redis): Record<'submit' | 'take' | 'done' | 'handoff', LuaCall> {
  return {
    submit: defineLua(redis, 'cpRenderSubmit', SUBMIT_LUA),
    take: defineLua(redis, 'cpRenderTake', TAKE_LUA),
    done: defineLua(redis, 'cpRenderDone', DONE_LUA),
    handoff: defineLua(redis, 'cpRenderHandoff', HANDOFF_LUA),
  };
}

/** Options of {@link BullmqRenderQueue.open}. */
export interface BullmqRenderQueueOptions extends RenderQueueOptions {
  /** REDIS_URL. */
  redisUrl: string;
  /** Key prefix; every process of one deployment uses the same. @defaultValue DEFAULT_RENDER_PREFIX */
  prefix?: string;
}

/** The render queue on BullMQ. See the module comment. */
export class BullmqRenderQueue implements RenderQueue {
  readonly kind = 'bullmq' as const;
  private readonly keys: ReturnType<typeof renderQueueKeys>;
  private readonly scripts: ReturnType<typeof scriptsOn>;
  private readonly counters: RenderQueueCounters;
  private readonly maxJobBytes: number;
  private readonly maxQueue: number;
  private depth = 0;
  private worker: Worker | undefined;
  private workerConn: Redis | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;

  private constructor(
    private readonly opts: BullmqRenderQueueOptions,
    private readonly redis: Redis,
    private readonly queue: Queue,
    private readonly queueConn: Redis,
  ) {
    this.keys = renderQueueKeys(opts.prefix);
    this.scripts = scriptsOn(redis);
    this.maxJobBytes = checkPositive('maxJobBytes', opts.maxJobBytes ?? DEFAULT_MAX_JOB_BYTES);
    this.maxQueue = checkPositive('maxQueue', opts.maxQueue ?? DEFAULT_RENDER_MAX_QUEUE);
    this.counters = new RenderQueueCounters(opts.metrics, opts.refusals, () => this.depth);
  }

  /**
   * Connects (two connections; `start` adds the worker's).
   * @throws RangeError on a bad prefix, maxJobBytes or maxQueue; the ioredis error when Redis is unreachable
   */
  static async open(opts: BullmqRenderQueueOptions): Promise<BullmqRenderQueue> {
    const keys = renderQueueKeys(opts.prefix);
    checkPositive('maxJobBytes', opts.maxJobBytes ?? DEFAULT_MAX_JOB_BYTES);
    checkPositive('maxQueue', opts.maxQueue ?? DEFAULT_RENDER_MAX_QUEUE);
    const onError = opts.onError ?? ((err, context) => console.error(`render queue ${context}:`, err));
    const redis = new Redis(opts.redisUrl, { maxRetriesPerRequest: null, lazyConnect: true });
    const queueConn = new Redis(opts.redisUrl, { maxRetriesPerRequest: null, lazyConnect: true });
    redis.on('error', (err) => onError(err, 'redis'));
    queueConn.on('error', (err) => onError(err, 'redis (bullmq queue)'));
    let queue: Queue | undefined;
    try {
      await Promise.all([redis.connect(), queueConn.connect()]);
      queue = new Queue(keys.queueName, { connection: queueConn, prefix: keys.bullPrefix });
      queue.on('error', (err) => onError(err, 'bullmq queue'));
      await queue.waitUntilReady();
    } catch (err) {
      await queue?.close().catch(() => {});
      redis.disconnect();
      queueConn.disconnect();
      throw err;
    }
    const q = new BullmqRenderQueue(opts, redis, queue, queueConn);
    q.depth = await redis.scard(keys.queued);
    return q;
  }

  private get onError(): (err: unknown, context: string) => void {
    return this.opts.onError ?? ((err, context) => console.error(`render queue ${context}:`, err));
  }

  /**
   * See {@link RenderQueue.submit}. One Lua script (replace the chat's board,
   * bound check) and, when the chat has no job, one BullMQ add.
   * @throws TypeError (rejects) on a malformed board; the ioredis error when Redis fails
   */
  async submit(chatId: number, version: number, board: Board, rankMs?: number): Promise<SubmitOutcome> {
    if (!Number.isSafeInteger(chatId)) throw new TypeError(`chatId must be a safe integer, got ${chatId}`);
    if (!Number.isFinite(version)) throw new TypeError(`version must be a finite number, got ${version}`);
    if (rankMs !== undefined) checkRank(rankMs);
    const json = encodeBoardJob(board);
    if (this.closed) return this.counters.refused('closed', { chatId });
    const bytes = Buffer.byteLength(json);
    if (bytes > this.maxJobBytes) return this.counters.refused('too-large', { chatId, bytes, maxJobBytes: this.maxJobBytes });
    const [kind, arg, depth, sup] = (await this.scripts.submit(
      [this.keys.chat(chatId), this.keys.queued],
      [String(chatId), String(version), json, String(this.maxQueue), String(Date.now()), String(STALE_MS), String(STATE_TTL_MS)],
    )) as [string, string, number, number];
    this.depth = Number(depth);
    if (kind === 'superseded') {
      this.counters.superseded();
      return { status: 'superseded', by: Number(arg) };
    }
    if (kind === 'full') return this.counters.refused('queue-full', { chatId, maxQueue: this.maxQueue });
    this.counters.submitted(bytes);
    if (Number(sup) === 1) this.counters.superseded();
    if (kind === 'add') await this.addJob(chatId, arg, rankMs, tracingOn() ? traceCarrier() : undefined);
    return { status: 'queued' };
  }

  /** Adds the chat's BullMQ job; `tc` is the submitter's trace context (tracing on only), continued by the job's span. */
  private async addJob(chatId: number, jobId: string, rankMs: number | undefined, tc?: Record<string, string>): Promise<void> {
    const data: RenderJobData = { chatId, ...(rankMs !== undefined ? { rank: rankMs } : {}), ...(tc !== undefined ? { tc } : {}) };
    await this.queue.add(JOB_NAME, data, {
      jobId,
      attempts: INFRA_ATTEMPTS,
      backoff: { type: 'exponential', delay: 500 },
      removeOnComplete: true,
      removeOnFail: 100,
    });
  }

  /** Starts a BullMQ worker with `jobConcurrency` slots (default: the pool's slots); the pool's semaphore bounds the renders on threads. */
  start(consumer: RenderConsumer): void {
    if (this.worker || this.closed) throw new Error('the render queue is already started or closed');
    this.workerConn = new Redis(this.opts.redisUrl, { maxRetriesPerRequest: null });
    this.workerConn.on('error', (err) => this.onError(err, 'redis (bullmq worker)'));
    this.worker = new Worker(this.keys.queueName, (job: Job<RenderJobData>) => this.processTraced(job, consumer), {
      connection: this.workerConn,
      prefix: this.keys.bullPrefix,
      concurrency: Math.max(1, consumer.jobConcurrency ?? consumer.pool.slots),
    });
    this.worker.on('error', (err) => this.onError(err, 'bullmq worker'));
    this.worker.on('failed', (job, err) => this.onError(err, `render job ${job?.id ?? '?'} (attempt ${job?.attemptsMade ?? '?'})`));
  }

  /** `process`, inside a `crowdplay.render_job.process` span (continuing the submitter's trace, if any) when tracing is on. */
  private processTraced(job: Job<RenderJobData>, consumer: RenderConsumer): Promise<void> {
    if (!tracingOn()) return this.process(job, consumer);
    return withSpan(
      'crowdplay.render_job.process',
      {
        carrier: job.data.tc,
        attributes: { 'messaging.system': 'bullmq', 'crowdplay.chat': job.data.chatId, 'crowdplay.job': job.id ?? '' },
      },
      () => this.process(job, consumer),
    );
  }

  /** One chat's job: renders the newest version not done, until there is none (or this worker closes). */
  private async process(job: Job<RenderJobData>, consumer: RenderConsumer): Promise<void> {
    const chatId = job.data.chatId;
    const jobId = job.id!;
    const chatKey = this.keys.chat(chatId);
    for (;;) {
      if (this.closed) {
        const next = (await this.scripts.handoff([chatKey, this.keys.queued], [jobId, String(chatId), String(Date.now())])) as string;
        if (next) await this.addJob(chatId, next, job.data.rank);
        return;
      }
      const [kind, v, json, sat, depth] = (await this.scripts.take(
        [chatKey, this.keys.queued],
        [jobId, String(chatId), String(Date.now())],
      )) as [string, string, string, string, number];
      this.depth = Number(depth);
      if (kind !== 'take') return;
      const version = Number(v);
      let out: RenderOutcome | undefined;
      try {
        out = await consumer.pool.render(String(chatId), version, decodeBoardJob(json), job.data.rank ?? 0);
      } catch (err) {
        this.counters.failed();
        this.onError(err, `render of chat ${chatId} version ${version}`);
        consumer.onFailed?.(chatId, version);
      }
      // The pool refuses only when closed (this worker never hands it more than its concurrency): the job fails and is retried.
      if (out?.status === 'refused') throw new Error(`the render pool refused chat ${chatId}'s board: ${out.reason}`);
      if (out?.status === 'superseded') this.counters.superseded();
      if (out?.status === 'rendered') {
        try {
          await consumer.onRendered(chatId, out.version, out.png);
          this.counters.rendered(Date.now() - Number(sat));
        } catch (err) {
          this.counters.failed();
          this.onError(err, `handing chat ${chatId}'s board version ${version} on`);
          consumer.onFailed?.(chatId, out.version);
        }
      }
      // Done up to the version drawn: a newer one the pool's `latest` drew makes the versions submitted up to it moot.
      await this.scripts.done([chatKey], [jobId, out?.status === 'rendered' ? String(out.version) : v, String(Date.now())]);
    }
  }

  stats(): RenderQueueStats {
    return { queued: this.depth, ...this.counters.c };
  }

  /** Chats with a waiting job plus the jobs a worker holds (BullMQ's active list), read from Redis. */
  async backlog(): Promise<number> {
    const [waiting, active] = await Promise.all([this.redis.scard(this.keys.queued), this.queue.getActiveCount()]);
    this.depth = waiting;
    return waiting + active;
  }

  /**
   * Stops: new submits are refused `closed`; the worker finishes the renders
   * in progress (a chat with a newer version left gets a new job for another
   * worker), then the connections close. Safe to call twice.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      await this.worker?.close().catch((err: unknown) => this.onError(err, 'closing the bullmq worker'));
      await this.queue.close().catch(() => {});
      this.workerConn?.disconnect();
      await this.redis.quit().catch(() => this.redis.disconnect());
      await this.queueConn.quit().catch(() => this.queueConn.disconnect());
    })();
    return this.closing;
  }
}
