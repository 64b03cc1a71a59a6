import { systemClock, type Clock } from './clock.ts';
import { QueueCounters } from './counters.ts';
import { MinHeap } from './heap.ts';
import { MemoryBucket } from './memory-bucket.ts';
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
import { checkChatId, checkJobInput, resolveRedirect, type Redirects } from './shared.ts';
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

/** Options of {@link MemorySendQueue}. */
export interface MemorySendQueueOptions extends SendQueueOptions {
  /** The bucket to use (not closed by `close()`). @defaultValue a new `MemoryBucket` on `clock` */
  bucket?: SendBucket;
}

interface QJob<P> {
  readonly id: string;
  chatId: number;
  readonly lane: Lane;
  readonly key: string | undefined;
  readonly version: number | undefined;
  payload: P;
  readonly isGroup: boolean;
  retries: number;
  requeues: number;
  readonly enqueuedAtMs: number;
  /** Dropped when not handed to `send` by then, ms on the queue's clock. */
  readonly deadlineAtMs: number | undefined;
  settled: boolean;
  readonly resolve: (r: JobResult) => void;
}

interface ChatQ<P> {
  readonly key: string;
  readonly chatId: number;
  readonly lanes: Record<Lane, QJob<P>[]>;
  /** A worker holds this chat (take or send in progress): at most one call per chat at a time. */
  busy: boolean;
  /** idle: in no set; ready: in `ready[readyLane]`; waiting: in `waiting` until its own limit allows. */
  state: 'idle' | 'ready' | 'waiting';
  readyLane: Lane;
  readySeq: number;
  waitGen: number;
}

interface ReadyEntry<P> {
  chat: ChatQ<P>;
  seq: number;
}
interface WaitEntry<P> {
  chat: ChatQ<P>;
  atMs: number;
  gen: number;
}

/** What a worker does with its chat when it lets go of it. */
type Next = { kind: 'back' } | { kind: 'front' } | { kind: 'wait'; atMs: number };

/**
 * The in-process send queue (standalone).
 *
 * Scheduling: one sub-queue per chat (a tx and a board deque); chats with
 * work are in exactly one of three places: `ready.tx` (has a tx job),
 * `ready.board` (only board jobs), both min-heaps by arrival sequence (FIFO,
 * round robin: a chat re-enters at the back after a call), or `waiting`
 * (a min-heap by the time its own chat/group limit or retry backoff allows
 * it; one timer for the earliest). A worker pops the first ready chat (tx
 * heap first), takes a token for it, and either calls `send` for the chat's
 * head job or lets go at once: refused by the chat's own limit → `waiting`;
 * refused bot-wide (pause, bot rate) → back to the FRONT of its ready heap
 * and the whole dispatcher is gated until the bot-wide wait ends (one
 * timer). Nothing sleeps while holding a slot. Slots open by slow start:
 * one at first and after each bot-wide pause, doubled on each success.
 */
export class MemorySendQueue<P> implements SendQueue<P> {
  readonly kind = 'memory' as const;
  readonly bucket: SendBucket;
  private readonly o: ResolvedQueueOptions;
  private readonly clock: Clock;
  private readonly counters: QueueCounters;
  private readonly onSettled: SendQueueOptions['onSettled'];
  private readonly onError: (err: unknown, context: string) => void;
  private readonly logger: SendQueueOptions['logger'];
  private readonly ownsBucket: boolean;

  private send: SendFn<P> | undefined;
  private closed = false;
  private nextId = 0;
  private nextSeq = 0;
  private inFlight = 0;
  /** Slow start: slots open now (1 at start and after each pause, doubled on each success, at most concurrency). */
  private window = 1;
  private readonly depthByLane: LaneDepth = { tx: 0, board: 0 };
  private readonly chats = new Map<string, ChatQ<P>>();
  private readonly byKey = new Map<string, QJob<P>>();
  /** Highest producer version enqueued per key, least recently enqueued first (at most `maxQueued` keys). */
  private readonly versions = new Map<string, number>();
  private readonly deactivated = new Set<string>();
  private readonly redirects: Redirects = new Map();
  private readonly ready: Record<Lane, MinHeap<ReadyEntry<P>>> = {
    tx: new MinHeap((a, b) => a.seq < b.seq),
    board: new MinHeap((a, b) => a.seq < b.seq),
  };
  private readonly waiting = new MinHeap<WaitEntry<P>>((a, b) => a.atMs < b.atMs);
  private waitTimer: { atMs: number; cancel: () => void } | undefined;
  /** Queued jobs with a deadline, earliest first; one timer for the earliest. */
  private readonly deadlines = new MinHeap<QJob<P>>((a, b) => (a.deadlineAtMs ?? Infinity) < (b.deadlineAtMs ?? Infinity));
  private deadlineTimer: { atMs: number; cancel: () => void } | undefined;
  /** Bot-wide gate (pause or bot rate), ms on `clock`. */
  private gateUntilMs = 0;
  private gateTimer: (() => void) | undefined;
  /** Local mirror of the bucket's pause end, ms: checked synchronously right before each call. */
  private pausedUntilMs = 0;
  private idleWaiters: Array<() => void> = [];

  /** @throws CrowdplayError CP_ERR_CONFIG_INVALID on bad options. */
  constructor(opts: MemorySendQueueOptions) {
    this.o = resolveQueueOptions(opts);
    this.clock = opts.clock ?? systemClock;
    this.ownsBucket = opts.bucket === undefined;
    this.bucket = opts.bucket ?? new MemoryBucket({ limits: this.o.limits, clock: this.clock });
    this.counters = new QueueCounters(opts.metrics, opts.refusals, () => ({ ...this.depthByLane }), {
      botRatePerS: this.o.limits.botRatePerS,
      now: () => this.clock.now(),
    });
    this.onSettled = opts.onSettled;
    this.onError = opts.onError ?? ((err, context) => console.error(`sendq ${context}:`, err));
    this.logger = opts.logger;
  }

  enqueue(input: SendJobInput<P>): Promise<EnqueueResult> {
    try {
      return Promise.resolve(this.enqueueNow(input));
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  private enqueueNow(input: SendJobInput<P>): EnqueueResult {
    checkJobInput(input);
    const chatId = resolveRedirect(this.redirects, input.chatId);
    const chatKey = String(chatId);
    if (this.closed) return this.refuse('closed', chatId);
    if (this.deactivated.has(chatKey)) return this.refuse('deactivated', chatId);
    if (input.key !== undefined && input.version !== undefined) {
      // A queued job is only ever replaced by a newer version (an older render arriving late is dropped).
      const top = this.versions.get(input.key);
      if (top !== undefined && input.version < top) return this.refuse('stale', chatId);
    }
    const older = input.key === undefined ? undefined : this.byKey.get(input.key);
    if (older === undefined && this.depthByLane.tx + this.depthByLane.board >= this.o.maxQueued) return this.refuse('full', chatId);
    let resolve!: (r: JobResult) => void;
    const result = new Promise<JobResult>((r) => (resolve = r));
    if (input.key !== undefined && input.version !== undefined) this.noteVersion(input.key, input.version);
    const enqueuedAtMs = this.clock.now();
    const job: QJob<P> = {
      id: `m${++this.nextId}`,
      chatId,
      lane: input.lane,
      key: input.key,
      version: input.version,
      payload: input.payload,
      isGroup: input.isGroup ?? chatId < 0,
      retries: 0,
      requeues: 0,
      enqueuedAtMs,
      deadlineAtMs: input.deadlineMs === undefined ? undefined : enqueuedAtMs + input.deadlineMs,
      settled: false,
      resolve,
    };
    const chat = this.chatFor(chatId);
    let placed = false;
    if (older !== undefined) {
      const olderChat = this.chats.get(String(older.chatId));
      const list = olderChat?.lanes[older.lane];
      const i = list ? list.indexOf(older) : -1;
      if (list && i >= 0) {
        if (olderChat === chat && older.lane === job.lane) {
          list[i] = job; // takes the older job's place in line
          placed = true;
        } else {
          list.splice(i, 1);
          this.depthByLane[older.lane]--;
        }
      }
    }
    if (!placed) {
      chat.lanes[job.lane].push(job);
      this.depthByLane[job.lane]++;
    }
    if (job.key !== undefined) this.byKey.set(job.key, job);
    if (older !== undefined) {
      this.counters.superseded(older.lane);
      this.settle(older, { status: 'superseded', by: job.id });
    }
    if (job.deadlineAtMs !== undefined) {
      this.deadlines.push(job);
      this.armDeadlineTimer();
    }
    this.jobAdded(chat);
    this.dispatch();
    return { status: 'queued', id: job.id, ...(older ? { superseded: older.id } : {}), result };
  }

  /** Records `version` as the latest of `key` (the map keeps the `maxQueued` most recently enqueued keys). */
  private noteVersion(key: string, version: number): void {
    this.versions.delete(key);
    this.versions.set(key, version);
    if (this.versions.size > this.o.maxQueued) {
      const oldest = this.versions.keys().next();
      if (oldest.done !== true) this.versions.delete(oldest.value);
    }
  }

  private refuse(reason: RefuseReason, chatId: number): EnqueueResult {
    this.counters.refused(reason, chatId);
    return { status: 'refused', reason };
  }

  start(send: SendFn<P>): void {
    if (this.closed) throw new Error('sendq: start() after close()');
    if (this.send !== undefined) throw new Error('sendq: start() called twice');
    this.send = send;
    this.dispatch();
  }

  async pause(forMs: number): Promise<void> {
    if (!(Number.isFinite(forMs) && forMs >= 0)) throw new RangeError(`forMs must be a finite number >= 0, got ${forMs}`);
    // The local mirror first, synchronously (a worker checks it right before each call), then the bucket.
    this.notePause(forMs, 'pause()');
    await this.bucket.pause(forMs);
    this.dispatch();
  }

  deactivate(chatId: number): Promise<number> {
    checkChatId(chatId, 'chatId');
    return Promise.resolve(this.deactivateNow(chatId));
  }

  private deactivateNow(chatId: number): number {
    const key = String(chatId);
    this.deactivated.add(key);
    const chat = this.chats.get(key);
    if (chat === undefined) return 0;
    const jobs = [...chat.lanes.tx, ...chat.lanes.board];
    this.depthByLane.tx -= chat.lanes.tx.length;
    this.depthByLane.board -= chat.lanes.board.length;
    chat.lanes.tx = [];
    chat.lanes.board = [];
    chat.state = 'idle';
    if (!chat.busy) this.chats.delete(key);
    for (const j of jobs) {
      if (j.key !== undefined && this.byKey.get(j.key) === j) this.byKey.delete(j.key);
      this.settle(j, { status: 'purged' });
    }
    this.counters.purged(jobs.length);
    this.checkIdle();
    return jobs.length;
  }

  reactivate(chatId: number): Promise<void> {
    checkChatId(chatId, 'chatId');
    this.deactivated.delete(String(chatId));
    return Promise.resolve();
  }

  isActive(chatId: number): Promise<boolean> {
    checkChatId(chatId, 'chatId');
    return Promise.resolve(!this.deactivated.has(String(chatId)));
  }

  moveChat(oldId: number, newId: number): Promise<number> {
    checkChatId(oldId, 'oldId');
    checkChatId(newId, 'newId');
    if (oldId === newId) return Promise.reject(new RangeError(`moveChat: oldId and newId are both ${oldId}`));
    this.redirects.delete(String(newId));
    this.redirects.set(String(oldId), newId);
    const old = this.chats.get(String(oldId));
    if (old === undefined) return Promise.resolve(0);
    this.chats.delete(old.key);
    old.state = 'idle';
    const target = this.chatFor(newId);
    let moved = 0;
    for (const lane of ['tx', 'board'] as const) {
      const jobs = old.lanes[lane];
      for (const j of jobs) j.chatId = newId;
      moved += jobs.length;
      target.lanes[lane] = [...jobs, ...target.lanes[lane]];
      old.lanes[lane] = [];
    }
    if (this.deactivated.has(target.key)) {
      // Moving into a deactivated chat: the jobs are purged like any other of that chat.
      void this.deactivateNow(newId);
      return Promise.resolve(moved);
    }
    this.jobAdded(target);
    this.dispatch();
    return Promise.resolve(moved);
  }

  depth(): Promise<LaneDepth> {
    return Promise.resolve({ ...this.depthByLane });
  }

  chatDepth(chatId: number): Promise<number> {
    const chat = this.chats.get(String(chatId));
    return Promise.resolve(chat ? chat.lanes.tx.length + chat.lanes.board.length : 0);
  }

  stats(): SendQueueStats {
    return this.counters.snapshot();
  }

  idle(timeoutMs: number): Promise<boolean> {
    if (this.isIdle()) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(t);
        resolve(true);
      };
      const t = setTimeout(() => {
        this.idleWaiters = this.idleWaiters.filter((w) => w !== done);
        resolve(false);
      }, timeoutMs);
      this.idleWaiters.push(done);
    });
  }

  async close(timeoutMs = 10_000): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.waitTimer?.cancel();
    this.waitTimer = undefined;
    this.gateTimer?.();
    this.gateTimer = undefined;
    this.deadlineTimer?.cancel();
    this.deadlineTimer = undefined;
    if (this.inFlight > 0) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, timeoutMs);
        this.idleWaiters.push(() => {
          clearTimeout(t);
          resolve();
        });
        this.checkIdle();
      });
    }
    for (const chat of this.chats.values()) {
      for (const lane of ['tx', 'board'] as const) {
        for (const j of chat.lanes[lane]) this.settle(j, { status: 'failed', reason: 'closed' });
        chat.lanes[lane] = [];
      }
    }
    this.chats.clear();
    this.byKey.clear();
    this.depthByLane.tx = 0;
    this.depthByLane.board = 0;
    if (this.ownsBucket) await this.bucket.close();
  }

  // ---- scheduling ----

  private chatFor(chatId: number): ChatQ<P> {
    const key = String(chatId);
    let chat = this.chats.get(key);
    if (chat === undefined) {
      chat = { key, chatId, lanes: { tx: [], board: [] }, busy: false, state: 'idle', readyLane: 'board', readySeq: 0, waitGen: 0 };
      this.chats.set(key, chat);
    }
    return chat;
  }

  private hasJobs(chat: ChatQ<P>): boolean {
    return chat.lanes.tx.length > 0 || chat.lanes.board.length > 0;
  }

  private headJob(chat: ChatQ<P>): QJob<P> | undefined {
    return chat.lanes.tx[0] ?? chat.lanes.board[0];
  }

  /** Puts `chat` in its ready heap (by `seq`: keep the old one to go back to the front). */
  private makeReady(chat: ChatQ<P>, seq = this.nextSeq++): void {
    chat.state = 'ready';
    chat.readyLane = chat.lanes.tx.length > 0 ? 'tx' : 'board';
    chat.readySeq = seq;
    this.ready[chat.readyLane].push({ chat, seq });
  }

  private makeWaiting(chat: ChatQ<P>, atMs: number): void {
    chat.state = 'waiting';
    chat.waitGen++;
    this.waiting.push({ chat, atMs, gen: chat.waitGen });
    this.armWaitTimer();
  }

  /** A job was added to `chat`: make it schedulable, or move it to the tx heap when a tx job arrived. */
  private jobAdded(chat: ChatQ<P>): void {
    if (chat.busy) return;
    if (chat.state === 'idle') this.makeReady(chat);
    else if (chat.state === 'ready' && chat.readyLane === 'board' && chat.lanes.tx.length > 0) this.makeReady(chat, chat.readySeq);
  }

  private popReady(): ChatQ<P> | undefined {
    for (const lane of ['tx', 'board'] as const) {
      const h = this.ready[lane];
      for (let e = h.pop(); e !== undefined; e = h.pop()) {
        const c = e.chat;
        if (c.state === 'ready' && c.readyLane === lane && c.readySeq === e.seq && this.chats.get(c.key) === c && !c.busy) return c;
      }
    }
    return undefined;
  }

  private armWaitTimer(): void {
    // Drop stale heads so the timer targets a real entry.
    for (let e = this.waiting.peek(); e !== undefined && (e.chat.state !== 'waiting' || e.chat.waitGen !== e.gen); e = this.waiting.peek())
      this.waiting.pop();
    const head = this.waiting.peek();
    if (head === undefined || this.closed) {
      this.waitTimer?.cancel();
      this.waitTimer = undefined;
      return;
    }
    if (this.waitTimer !== undefined && this.waitTimer.atMs <= head.atMs) return;
    this.waitTimer?.cancel();
    const atMs = head.atMs;
    this.waitTimer = { atMs, cancel: this.clock.after(atMs - this.clock.now(), () => this.onWaitTimer()) };
  }

  private onWaitTimer(): void {
    this.waitTimer = undefined;
    const now = this.clock.now();
    for (let e = this.waiting.peek(); e !== undefined && e.atMs <= now; e = this.waiting.peek()) {
      this.waiting.pop();
      const c = e.chat;
      if (c.state !== 'waiting' || c.waitGen !== e.gen || this.chats.get(c.key) !== c) continue;
      if (this.hasJobs(c)) this.makeReady(c);
      else c.state = 'idle';
    }
    this.armWaitTimer();
    this.dispatch();
  }

  /**
   * A bot-wide pause of `forMs` from now: the local mirror (checked right before
   * each call) and the gate, synchronously; logged and exported when it moves
   * the end later.
   */
  private notePause(forMs: number, source: PauseSource): void {
    const now = this.clock.now();
    const until = now + forMs;
    if (until > this.pausedUntilMs) {
      const fresh = this.pausedUntilMs <= now || until > this.pausedUntilMs + SAME_PAUSE_MS;
      this.pausedUntilMs = until;
      this.counters.pauseEnd(until);
      if (fresh) {
        logPause(this.logger, this.o, { forMs, endMs: until, source });
        this.window = 1;
        this.counters.slowStart(1);
      }
    }
    this.gate(until);
  }

  private armDeadlineTimer(): void {
    for (let j = this.deadlines.peek(); j !== undefined && j.settled; j = this.deadlines.peek()) this.deadlines.pop();
    const head = this.deadlines.peek();
    if (head === undefined || head.deadlineAtMs === undefined || this.closed) {
      this.deadlineTimer?.cancel();
      this.deadlineTimer = undefined;
      return;
    }
    if (this.deadlineTimer !== undefined && this.deadlineTimer.atMs <= head.deadlineAtMs) return;
    this.deadlineTimer?.cancel();
    const atMs = head.deadlineAtMs;
    this.deadlineTimer = { atMs, cancel: this.clock.after(atMs - this.clock.now(), () => this.onDeadlineTimer()) };
  }

  /** Drops every queued job whose deadline passed (a pause or a backlog held it): none is sent late. */
  private onDeadlineTimer(): void {
    this.deadlineTimer = undefined;
    const now = this.clock.now();
    for (let j = this.deadlines.peek(); j !== undefined && (j.settled || (j.deadlineAtMs ?? Infinity) <= now); j = this.deadlines.peek()) {
      this.deadlines.pop();
      if (!j.settled) this.expire(j, now);
    }
    this.armDeadlineTimer();
    this.checkIdle();
  }

  /** Removes queued job `job` (its deadline passed) from its chat and settles it `dropped`. */
  private expire(job: QJob<P>, now: number): void {
    const chat = this.chats.get(String(job.chatId));
    const list = chat?.lanes[job.lane];
    const i = list ? list.indexOf(job) : -1;
    if (chat === undefined || list === undefined || i < 0) return; // in a worker's hands: it checks the deadline itself
    list.splice(i, 1);
    this.depthByLane[job.lane]--;
    if (job.key !== undefined && this.byKey.get(job.key) === job) this.byKey.delete(job.key);
    if (!chat.busy && !this.hasJobs(chat)) {
      chat.state = 'idle';
      this.chats.delete(chat.key);
    }
    const waitedMs = now - job.enqueuedAtMs;
    const deadlineMs = (job.deadlineAtMs ?? now) - job.enqueuedAtMs;
    this.counters.expired(job.lane, this.logger, now, { id: job.id, chatId: job.chatId, waitedMs, deadlineMs });
    this.settle(job, { status: 'dropped', reason: `deadline: not sent within ${Math.round(deadlineMs)} ms of enqueue` });
  }

  /** Closes the dispatcher until `untilMs` (bot-wide wait). */
  private gate(untilMs: number): void {
    if (untilMs <= this.gateUntilMs && this.gateTimer !== undefined) return;
    this.gateUntilMs = Math.max(this.gateUntilMs, untilMs);
    this.gateTimer?.();
    // A timer may fire a little before Date.now() reaches its time: dispatch() re-arms it then.
    this.gateTimer = this.clock.after(this.gateUntilMs - this.clock.now(), () => {
      this.gateTimer = undefined;
      this.dispatch();
    });
  }

  private dispatch(): void {
    if (this.send === undefined || this.closed) return;
    while (this.inFlight < this.window) {
      if (this.clock.now() < this.gateUntilMs) {
        this.gate(this.gateUntilMs); // (re-)armed: the gate timer calls dispatch again
        return;
      }
      const chat = this.popReady();
      if (chat === undefined) return;
      chat.state = 'idle';
      chat.busy = true;
      this.inFlight++;
      void this.work(chat, this.send);
    }
  }

  private async work(chat: ChatQ<P>, send: SendFn<P>): Promise<void> {
    const seq = chat.readySeq;
    let next: Next = { kind: 'back' };
    try {
      next = await this.workOnce(chat, send);
    } catch (err) {
      this.onError(err, 'worker');
      next = { kind: 'wait', atMs: this.clock.now() + 1_000 };
    } finally {
      chat.busy = false;
      this.inFlight--;
      if (this.chats.get(chat.key) === chat && !this.closed) {
        if (!this.hasJobs(chat)) {
          chat.state = 'idle';
          this.chats.delete(chat.key);
        } else if (next.kind === 'wait') this.makeWaiting(chat, next.atMs);
        else this.makeReady(chat, next.kind === 'front' ? seq : undefined);
      }
      this.checkIdle();
      this.dispatch();
    }
  }

  private async workOnce(chat: ChatQ<P>, send: SendFn<P>): Promise<Next> {
    const now = this.clock.now();
    if (now < this.pausedUntilMs) {
      this.counters.bucketWait('pause');
      this.gate(this.pausedUntilMs);
      return { kind: 'front' };
    }
    // A job whose deadline passed while it waited is dropped, never sent late.
    for (let j = this.headJob(chat); j?.deadlineAtMs !== undefined && j.deadlineAtMs <= now; j = this.headJob(chat)) this.expire(j, now);
    const first = this.headJob(chat);
    if (first === undefined) return { kind: 'back' };
    const r = await this.bucket.take(chat.key, first.isGroup);
    if (!r.granted) {
      this.counters.bucketWait(r.limit);
      const t = this.clock.now();
      if (r.limit === 'chat' || r.limit === 'group') return { kind: 'wait', atMs: t + r.retryAfterMs };
      if (r.limit === 'pause') this.notePause(r.retryAfterMs, 'store');
      this.gate(t + r.botWaitMs);
      return { kind: 'front' };
    }
    // Immediately before the call: a 429 seen by another worker while this one awaited its token wins.
    if (this.clock.now() < this.pausedUntilMs || this.closed) return { kind: 'front' };
    const job = this.headJob(chat);
    if (job === undefined || this.chats.get(chat.key) !== chat) return { kind: 'back' };
    chat.lanes[job.lane].shift();
    this.depthByLane[job.lane]--;
    if (job.key !== undefined && this.byKey.get(job.key) === job) this.byKey.delete(job.key);
    const view = this.view(job, r.nowMs);
    this.counters.callStarted(job.lane, this.clock.now());
    let outcome: SendOutcome<P>;
    try {
      outcome = await send(view);
    } catch (err) {
      this.onError(err, `send threw for job ${job.id} (chat ${job.chatId}): dropped, not retried`);
      this.counters.send(job.lane, 'threw');
      this.settle(job, { status: 'dropped', reason: 'threw' });
      return { kind: 'back' };
    }
    return this.apply(job, outcome);
  }

  /** The outcome policy (docs/sendq.md). */
  private apply(job: QJob<P>, out: SendOutcome<P>): Next {
    if ('ok' in out) {
      this.counters.send(job.lane, 'ok');
      if (this.window < this.o.concurrency) this.counters.slowStart((this.window = widened(this.window, this.o.concurrency)));
      this.settle(job, out.value === undefined ? { status: 'sent' } : { status: 'sent', value: out.value });
      return { kind: 'back' };
    }
    if ('retryAfterS' in out) {
      const forMs = Math.max(0, Math.ceil(out.retryAfterS * 1000));
      this.counters.send(job.lane, 'retryAfter');
      this.counters.rateLimited(forMs);
      this.notePause(forMs, '429');
      this.bucket.pause(forMs).then(
        () => {},
        (err: unknown) => this.onError(err, 'bucket.pause'),
      );
      this.requeueFront(job);
      return { kind: 'front' };
    }
    if ('deactivate' in out) {
      this.counters.send(job.lane, 'deactivate');
      this.settle(job, { status: 'deactivated', reason: out.reason ?? 'deactivated' });
      this.deactivateNow(job.chatId);
      return { kind: 'back' };
    }
    if ('drop' in out) {
      this.counters.send(job.lane, 'drop');
      this.settle(job, { status: 'dropped', reason: out.reason });
      return { kind: 'back' };
    }
    if ('retry' in out) {
      this.counters.send(job.lane, 'retry');
      job.retries++;
      if (job.retries > this.o.maxRetries) {
        this.counters.failed();
        this.settle(job, { status: 'failed', reason: `retries exhausted (${this.o.maxRetries})${out.reason ? `: ${out.reason}` : ''}` });
        return { kind: 'back' };
      }
      this.requeueFront(job);
      return { kind: 'wait', atMs: this.clock.now() + retryBackoffMs(this.o, job.retries) };
    }
    // requeue
    this.counters.send(job.lane, 'requeue');
    job.requeues++;
    if (job.requeues > this.o.maxRequeues) {
      this.counters.failed();
      this.settle(job, { status: 'failed', reason: `requeues exhausted (${this.o.maxRequeues})${out.reason ? `: ${out.reason}` : ''}` });
      return { kind: 'back' };
    }
    if (out.payload !== undefined) job.payload = out.payload;
    this.requeueFront(job);
    return { kind: 'front' };
  }

  /** Puts a started job back at the front of its chat's lane (following a migration), unless superseded or purged meanwhile. */
  private requeueFront(job: QJob<P>): void {
    const chatId = resolveRedirect(this.redirects, job.chatId);
    job.chatId = chatId;
    if (job.key !== undefined) {
      const newer = this.byKey.get(job.key);
      if (newer !== undefined && newer !== job) {
        this.counters.superseded(job.lane);
        this.settle(job, { status: 'superseded', by: newer.id });
        return;
      }
    }
    if (this.deactivated.has(String(chatId))) {
      this.counters.purged(1);
      this.settle(job, { status: 'purged' });
      return;
    }
    if (this.closed) {
      this.settle(job, { status: 'failed', reason: 'closed' });
      return;
    }
    const chat = this.chatFor(chatId);
    chat.lanes[job.lane].unshift(job);
    this.depthByLane[job.lane]++;
    if (job.key !== undefined) this.byKey.set(job.key, job);
    this.jobAdded(chat);
  }

  private view(job: QJob<P>, grantedAtMs: number): SendJob<P> {
    return Object.freeze({
      id: job.id,
      chatId: job.chatId,
      lane: job.lane,
      key: job.key,
      version: job.version,
      payload: job.payload,
      isGroup: job.isGroup,
      retries: job.retries,
      requeues: job.requeues,
      enqueuedAtMs: job.enqueuedAtMs,
      grantedAtMs,
    });
  }

  private settle(job: QJob<P>, result: JobResult): void {
    if (job.settled) return;
    job.settled = true;
    this.counters.settled(job.lane, result.status, this.clock.now() - job.enqueuedAtMs);
    job.resolve(result);
    if (this.onSettled === undefined) return;
    try {
      this.onSettled(this.view(job, 0), result);
    } catch (err) {
      this.onError(err, 'onSettled');
    }
  }

  private isIdle(): boolean {
    return this.inFlight === 0 && this.depthByLane.tx + this.depthByLane.board === 0;
  }

  private checkIdle(): void {
    if (this.idleWaiters.length === 0) return;
    if (!(this.isIdle() || (this.closed && this.inFlight === 0))) return;
    const ws = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of ws) w();
  }
}
