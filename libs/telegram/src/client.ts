/**
 * The Bot API client: grammY's `Api` with one API transformer installed, so
 * that every call made through it — sendMessage, sendPhoto,
 * editMessageMedia, deleteMessage, answerCallbackQuery, setWebhook, and any
 * method added later — passes the send queue (libs/sendq: the one token
 * bucket, the bot-wide 429 pause, lanes, supersession):
 *
 * - Outside a send, the transformer does not call Telegram: it enqueues the
 *   call (`{kind: 'call', method, params}`, InputFile bytes base64-encoded so
 *   the job is JSON) and answers with the job's result.
 * - The queue's worker runs {@link TelegramClient.sender}'s function once the
 *   bucket granted a token; it makes the HTTP call through the same `Api`
 *   with a grant: an AbortSignal the client made for that one call (grammY
 *   hands a call's signal to every transformer), which the transformer passes
 *   through once; the signal never leaves the client, so one token is one
 *   call (a second call with the same grant would throw
 *   CP_ERR_TELEGRAM_GRANT_REUSED: kept as a guard, unreachable today). (Not an
 *   AsyncLocalStorage: running one turns on Node's promise hook for the whole
 *   process, and every await pays for it: 2,000,000 awaits 65 → 200 ms,
 *   docs/benchmarks.md "Side measurements".)
 * - Avatar reads (getUserProfilePhotos, getFile) are exempt from the send
 *   bucket but pass the avatar gate (TELEGRAM_AVATAR_CONCURRENCY); see
 *   avatars.ts for collapsing and the byte-budgeted cache.
 *
 * Boards are not raw calls: {@link TelegramClient.enqueueBoard} queues
 * `{kind: 'board', version, photo}` under the key `board:<chat>` (a newer
 * board supersedes a queued older one) and the sender decides at send time,
 * from the message ids it stored (board-store.ts), whether to edit, post,
 * repost once, or probe after an ambiguous post. The outcome table is in
 * docs/telegram.md.
 */
import { randomBytes } from 'node:crypto';
import { Api, InputFile, type Transformer } from 'grammy';
import type { ApiMethods } from 'grammy/types';
import { CrowdplayError } from '@crowdplay/protocol';
import {
  DEFAULT_MAX_RETRIES,
  type EnqueueResult,
  type JobResult,
  type Lane,
  type SendFn,
  type SendJob,
  type SendOutcome,
  type SendQueue,
} from '@crowdplay/sendq';
import { AVATAR_MAX_BYTES, Avatars, Gate, type AvatarOptions, type AvatarStats } from './avatars.ts';
import { MemoryBoardStore, sharesMessageIds, type BoardRecord, type BoardStore } from './board-store.ts';
import { classifyError, isIdempotent, type ErrorClass } from './outcome.ts';

/** A file inside a queued call: base64 bytes (JSON-serialisable for BullMQ). */
export interface EncodedFile {
  __file: string;
  filename?: string;
}

/** A queued Bot API call: any method with its params, or a board delivery. */
export type BotCall =
  | {
      kind: 'call';
      method: string;
      params: Record<string, unknown>;
      /** The queue chat id it was enqueued for (after a migration the job's chat differs, and `chat_id` follows it). */
      chatId: number;
      /**
       * When the call was first queued (the queue's clock, ms), if this job continues one that never reached
       * Telegram: its deadline (`txUnreachedDeadlineMs`) counts from there.
       */
      firstAtMs?: number;
      /** The call's own deadline from its first enqueue, ms (`CallOptions.deadlineMs`): a continuation carries what is left. */
      deadlineMs?: number;
    }
  | {
      kind: 'board';
      /** Increasing per chat; a board older than the one shown is not sent. */
      version: number;
      /** PNG bytes, base64. */
      photo: string;
      caption?: string;
      reply_markup?: unknown;
    };

/**
 * The queue chat id of calls that address no chat (setWebhook, setMyCommands,
 * answerCallbackQuery, getMe…): they share this pseudo chat's 1/s limit
 * unless the caller queues it with {@link TelegramClient.enqueueCall} and names a chat.
 */
export const BOT_LEVEL_CHAT_ID = Number.MAX_SAFE_INTEGER;

/** Avatar reads: exempt from the send bucket, gated by TELEGRAM_AVATAR_CONCURRENCY. */
export const AVATAR_READ_METHODS: ReadonlySet<string> = new Set(['getUserProfilePhotos', 'getFile']);

/** How a call queued with {@link TelegramClient.enqueueCall} is filed (a call made through `api` gets the defaults: lane `tx`, no key, its `chat_id`). */
export interface CallOptions {
  /** Default `tx` (transactional: command replies). */
  lane?: Lane;
  /** Supersession key (a newer call with the same key replaces a queued older one). */
  key?: string;
  /** Queue chat id; default the call's `chat_id`, else {@link BOT_LEVEL_CHAT_ID}. */
  chatId?: number;
  /**
   * Drop the call (never send it late) when it has not started this long after enqueue, ms. A call made
   * through `api` gets `resultTimeoutMs`: its caller stops waiting then. @defaultValue none
   */
  deadlineMs?: number;
}

/** What a board job did. */
export interface BoardDelivery {
  chatId: number;
  version: number;
  messageId: number;
  /** posted: a new message; edited; unchanged: "not modified"; recovered: an ambiguous post was found and edited; stale: a newer version is shown. */
  action: 'posted' | 'edited' | 'unchanged' | 'recovered' | 'stale';
}

export interface TelegramHooks {
  /** The chat stopped accepting the bot (its queued jobs were purged; re-add → `queue.reactivate`). */
  onDeactivate?(chatId: number, reason: string): void;
  /** Group → supergroup: the queue moved the chat's jobs; the product moves the chat's state. */
  onMigrate?(oldChatId: number, newChatId: number): void;
  /** A board job landed. */
  onBoard?(d: BoardDelivery): void;
}

export interface TelegramClientOptions {
  /** TELEGRAM_BOT_TOKEN. */
  token: string;
  /** TELEGRAM_API_ROOT (no trailing slash). */
  apiRoot: string;
  /** The send queue every call passes (opened by the caller: `openSendQueue`). */
  queue: SendQueue<BotCall>;
  /** Board message ids and flags. @defaultValue a new MemoryBoardStore */
  boards?: BoardStore;
  /** TELEGRAM_AVATAR_CONCURRENCY, TELEGRAM_AVATAR_CACHE_BYTES, TELEGRAM_AVATAR_TTL_MS. */
  avatars: { concurrency: number; cacheBytes: number; ttlMs: number; errorTtlMs?: number; shrink?: AvatarOptions['shrink'] };
  /** How long a caller of `api.*` waits for its queued call's result, ms. @defaultValue 60_000 */
  resultTimeoutMs?: number;
  /** Lifetime of a chat's post claim (a crashed sender's claim lapses), ms. @defaultValue 60_000 */
  postClaimTtlMs?: number;
  /**
   * TELEGRAM_TX_UNREACHED_DEADLINE_MS: how long a call on lane `tx` that never reached Telegram (connection
   * refused, DNS failure, connect timeout) is tried again, ms from its first enqueue; past the queue's retries
   * it continues as a new job (its caller in this process follows it). @defaultValue 600_000
   */
  txUnreachedDeadlineMs?: number;
  /** The queue's `maxRetries` (after that many `{retry}` outcomes a tx call continues as a new job). @defaultValue libs/sendq DEFAULT_MAX_RETRIES */
  queueMaxRetries?: number;
  /**
   * The board producer hands on again a board that was not delivered (ChatBoards learning each job's result):
   * a board call that got no answer (network, 5xx) then ends its job at once (`dropped`) instead of waiting in
   * the queue's retry backoff, and the chat goes back to the scheduler. @defaultValue false
   */
  boardsHandedBack?: boolean;
  /** grammY's HTTP timeout per call, s. @defaultValue 30 */
  timeoutSeconds?: number;
  /** Clock, ms. @defaultValue Date.now */
  now?: () => number;
  hooks?: TelegramHooks;
  /** Records each Bot API HTTP call's duration (request sent → answer parsed, ms) by method and whether Telegram said ok. */
  callMs?: { record(ms: number, attributes: Record<string, string>): void };
  /** A hook threw. @defaultValue console.error */
  onError?: (err: unknown) => void;
}

/** Counters since start (this process). */
export interface TelegramClientStats {
  /** Calls enqueued through `api` or `enqueueCall`, by method. */
  enqueued: Record<string, number>;
  /** HTTP calls made under a grant, by method. */
  sent: Record<string, number>;
  /** Error classes seen, by kind. */
  errors: Record<string, number>;
  boards: {
    posted: number;
    edited: number;
    unchanged: number;
    recovered: number;
    stale: number;
    /** "message to edit not found": the board message was gone (one repost each). */
    missing: number;
    /** Posts that got no answer (probed before posting again). */
    ambiguousPosts: number;
    /** Edits of candidate ids after an ambiguous post. */
    probes: number;
    /** Lost posts found after the board was posted again (private chats, basic groups), and deleted. */
    reconciled: number;
    /** Board calls that got no answer (network, 5xx) and were handed back to the producer (`boardsHandedBack`). */
    unreachable: number;
  };
  deactivated: number;
  migrated: number;
}

/** A method of grammY's `api.raw`: `(payload, signal)`, or `(signal)` for a method without parameters (its `{}` is bound). */
type RawCall = (paramsOrSignal?: unknown, signal?: AbortSignal) => Promise<unknown>;

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== 'object' || v === null) return false;
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
}

/** Largest file accepted in a queued call, bytes (Telegram's photo upload limit is 10 MB). */
export const MAX_QUEUED_FILE_BYTES = 10 * 1024 * 1024;

async function inputFileBytes(f: InputFile): Promise<Buffer> {
  const raw = await f.toRaw();
  if (raw instanceof Uint8Array) return Buffer.from(raw);
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of raw as AsyncIterable<Uint8Array>) {
    n += c.length;
    if (n > MAX_QUEUED_FILE_BYTES) throw new RangeError(`a queued file is larger than ${MAX_QUEUED_FILE_BYTES} bytes`);
    chunks.push(Buffer.from(c));
  }
  return Buffer.concat(chunks);
}

/** Params with every InputFile replaced by an {@link EncodedFile} (JSON-serialisable). */
export async function encodeParams(v: unknown): Promise<unknown> {
  if (v instanceof InputFile) {
    const bytes = await inputFileBytes(v);
    return { __file: bytes.toString('base64'), ...(v.filename ? { filename: v.filename } : {}) } satisfies EncodedFile;
  }
  if (Array.isArray(v)) return Promise.all(v.map(encodeParams));
  if (isPlainObject(v)) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) if (x !== undefined) out[k] = await encodeParams(x);
    return out;
  }
  return v;
}

/** The inverse of {@link encodeParams}: EncodedFiles become InputFiles again. */
export function decodeParams(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(decodeParams);
  if (isPlainObject(v)) {
    if (typeof v.__file === 'string')
      return new InputFile(Buffer.from(v.__file, 'base64'), typeof v.filename === 'string' ? v.filename : undefined);
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[k] = decodeParams(x);
    return out;
  }
  return v;
}

function chatIdOf(params: unknown): number | undefined {
  if (!isPlainObject(params)) return undefined;
  const c = params.chat_id;
  const n = typeof c === 'number' ? c : typeof c === 'string' && /^-?\d+$/.test(c) ? Number(c) : NaN;
  return Number.isSafeInteger(n) && n !== 0 ? n : undefined;
}

/** The reason of a job that never reached Telegram and continues as the job named after it. */
export const CONTINUED = 'continued as job ';

/** Continued jobs remembered for callers in this process (a caller elsewhere sees the `dropped` reason, and the call is still made). */
const MAX_CONTINUED = 10_000;

/** `code: description`: how a Telegram error travels in a job's reason (and back into a GrammyError). */
function tgReason(code: number, description: string): string {
  return `${code}: ${description}`;
}

/** The client (see the module doc). One per process. */
/** A board job's payload. */
type Board = Extract<BotCall, { kind: 'board' }>;

/** The avatar stats that are values now rather than running totals (exported as a gauge). */
const AVATAR_GAUGES: ReadonlyArray<keyof AvatarStats> = ['waiting', 'peakInFlight', 'cacheBytes', 'cacheEntries'];

/** What {@link TelegramClient.exportMetrics} registers on: libs/telemetry's `Metrics`, structurally. */
export interface TelegramClientMetrics {
  observableCounter(
    name: 'crowdplay_telegram_boards_total' | 'crowdplay_telegram_errors_total' | 'crowdplay_telegram_avatar_total',
    read: () => Array<[number, Record<string, string>]>,
  ): unknown;
  gauge(name: 'crowdplay_telegram_avatar', read: () => Array<[number, Record<string, string>]>): unknown;
}

export class TelegramClient {
  /** grammY's Api: every call passes the send queue (avatar reads: the avatar gate). */
  readonly api: Api;
  readonly avatars: Avatars;
  readonly boards: BoardStore;
  /** The gate of avatar HTTP requests. */
  readonly avatarGate: Gate;
  private readonly queue: SendQueue<BotCall>;
  /** Grants of the send side, by the signal of the call they allow: whether its one call was made. */
  private readonly grants = new WeakMap<object, { used: boolean }>();
  private readonly resultTimeoutMs: number;
  private readonly postClaimTtlMs: number;
  private readonly txUnreachedDeadlineMs: number;
  private readonly queueMaxRetries: number;
  /** Jobs continued as a new job (never reached Telegram), by the old job's id: what a caller here follows (bounded). */
  private readonly continued = new Map<string, EnqueueResult & { status: 'queued' }>();
  private readonly now: () => number;
  private readonly hooks: TelegramHooks;
  /** Makes claim holders unique across processes (queue job ids of in-process queues repeat: m1, m2, …). */
  private readonly instance = randomBytes(6).toString('hex');
  private readonly s: TelegramClientStats = {
    enqueued: {},
    sent: {},
    errors: {},
    boards: {
      posted: 0,
      edited: 0,
      unchanged: 0,
      recovered: 0,
      stale: 0,
      missing: 0,
      ambiguousPosts: 0,
      probes: 0,
      reconciled: 0,
      unreachable: 0,
    },
    deactivated: 0,
    migrated: 0,
  };

  /** @throws RangeError on an empty token (the Telegram part stays off without one: do not construct the client) */
  constructor(private readonly o: TelegramClientOptions) {
    if (!o.token) throw new RangeError('TelegramClient needs a bot token (TELEGRAM_BOT_TOKEN)');
    this.queue = o.queue;
    this.boards = o.boards ?? new MemoryBoardStore();
    this.resultTimeoutMs = o.resultTimeoutMs ?? 60_000;
    this.postClaimTtlMs = o.postClaimTtlMs ?? 60_000;
    this.txUnreachedDeadlineMs = o.txUnreachedDeadlineMs ?? 600_000;
    this.queueMaxRetries = o.queueMaxRetries ?? DEFAULT_MAX_RETRIES;
    this.now = o.now ?? Date.now;
    this.hooks = o.hooks ?? {};
    this.api = new Api(o.token, { apiRoot: o.apiRoot, timeoutSeconds: o.timeoutSeconds ?? 30 });
    this.api.config.use(this.transformer);
    this.avatarGate = new Gate(o.avatars.concurrency);
    const root = o.apiRoot;
    const token = o.token;
    const timeoutMs = (o.timeoutSeconds ?? 30) * 1000;
    this.avatars = new Avatars({
      api: this.api,
      gate: this.avatarGate,
      cacheBytes: o.avatars.cacheBytes,
      ttlMs: o.avatars.ttlMs,
      ...(o.avatars.errorTtlMs !== undefined ? { errorTtlMs: o.avatars.errorTtlMs } : {}),
      ...(o.avatars.shrink ? { shrink: o.avatars.shrink } : {}),
      ...(o.now ? { now: o.now } : {}),
      download: async (filePath) => {
        const res = await fetch(`${root}/file/bot${token}/${filePath}`, { signal: AbortSignal.timeout(timeoutMs) });
        if (!res.ok) throw new Error(`avatar download: HTTP ${res.status}`);
        if (Number(res.headers.get('content-length') ?? 0) > AVATAR_MAX_BYTES) throw new Error('avatar download: too large');
        return new Uint8Array(await res.arrayBuffer());
      },
    });
  }

  private count(map: Record<string, number>, k: string): void {
    map[k] = (map[k] ?? 0) + 1;
  }

  /** The API transformer (see the module doc). */
  private readonly transformer = (async (prev, method, payload, signal) => {
    const grant = signal ? this.grants.get(signal) : undefined;
    if (grant) {
      if (grant.used) throw new CrowdplayError('CP_ERR_TELEGRAM_GRANT_REUSED', [method]);
      grant.used = true;
      this.count(this.s.sent, method);
      return this.timed(method, () => prev(method, payload, signal));
    }
    if (AVATAR_READ_METHODS.has(method)) return this.avatarGate.run(() => this.timed(method, () => prev(method, payload, signal)));
    const params = (await encodeParams(payload ?? {})) as Record<string, unknown>;
    // Its caller stops waiting after resultTimeoutMs: a call not started by then is dropped, not sent late.
    const r = await this.enqueueEncoded(method, params, { deadlineMs: this.resultTimeoutMs });
    const chatId = chatIdOf(params) ?? BOT_LEVEL_CHAT_ID;
    if (r.status === 'refused') throw new CrowdplayError('CP_ERR_TELEGRAM_REFUSED', [method, chatId, r.reason]);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new CrowdplayError('CP_ERR_TELEGRAM_TIMEOUT', [method, this.resultTimeoutMs])), this.resultTimeoutMs);
      timer.unref();
    });
    try {
      const res = await Promise.race([this.follow(r.id, r.result), timeout]);
      return this.toApiResponse(method, chatId, res);
    } finally {
      clearTimeout(timer);
    }
  }) as Transformer;

  /**
   * The end of job `id`, following it into the jobs that continue it in this process (a call that never reached
   * Telegram continues as a new job past the queue's retries: the old one ends `dropped`, reason CONTINUED…).
   */
  private async follow(id: string, result: Promise<JobResult>): Promise<JobResult> {
    for (;;) {
      const res = await result;
      if (res.status !== 'dropped' || !res.reason.startsWith(CONTINUED)) return res;
      const next = this.continued.get(id);
      if (!next) return res;
      this.continued.delete(id);
      id = next.id;
      result = next.result;
    }
  }

  /** Runs one HTTP call of `method`, recording its duration (callMs) with ok = "true" | "false" | "error" (threw). */
  private async timed<R extends { ok: boolean }>(method: string, call: () => Promise<R>): Promise<R> {
    const rec = this.o.callMs;
    if (!rec) return call();
    const t0 = performance.now();
    try {
      const r = await call();
      rec.record(performance.now() - t0, { method, ok: String(r.ok) });
      return r;
    } catch (err) {
      rec.record(performance.now() - t0, { method, ok: 'error' });
      throw err;
    }
  }

  private toApiResponse(
    method: string,
    chatId: number,
    res: JobResult,
  ): never | { ok: true; result: never } | { ok: false; error_code: number; description: string } {
    switch (res.status) {
      case 'sent':
        return { ok: true, result: res.value as never };
      case 'superseded':
        throw new CrowdplayError('CP_ERR_TELEGRAM_SUPERSEDED', [method, chatId, res.by]);
      case 'purged':
        throw new CrowdplayError('CP_ERR_TELEGRAM_CHAT_INACTIVE', [chatId, 'purged while queued']);
      case 'deactivated':
      case 'dropped': {
        const m = /^(\d{3}): (.*)$/s.exec(res.reason);
        if (m) return { ok: false, error_code: Number(m[1]), description: m[2]! };
        if (res.status === 'deactivated') throw new CrowdplayError('CP_ERR_TELEGRAM_CHAT_INACTIVE', [chatId, res.reason]);
        throw new CrowdplayError('CP_ERR_TELEGRAM_FAILED', [method, chatId, res.reason]);
      }
      case 'failed':
        throw new CrowdplayError('CP_ERR_TELEGRAM_FAILED', [method, chatId, res.reason]);
    }
  }

  private enqueueEncoded(method: string, params: Record<string, unknown>, opts: CallOptions): Promise<EnqueueResult> {
    const chatId = opts.chatId ?? chatIdOf(params) ?? BOT_LEVEL_CHAT_ID;
    this.count(this.s.enqueued, method);
    return this.queue.enqueue({
      chatId,
      lane: opts.lane ?? 'tx',
      ...(opts.key !== undefined ? { key: opts.key } : {}),
      ...(opts.deadlineMs !== undefined ? { deadlineMs: opts.deadlineMs } : {}),
      ...(chatId === BOT_LEVEL_CHAT_ID ? { isGroup: false } : {}),
      payload: { kind: 'call', method, params, chatId, ...(opts.deadlineMs !== undefined ? { deadlineMs: opts.deadlineMs } : {}) },
    });
  }

  /**
   * Queues a call without waiting for it (the webhook answers within a
   * second and never waits on Telegram). `result` settles when it ran.
   * @returns the queue's answer (refused: deactivated chat, full, closed)
   * @throws RangeError from the queue on a bad chat id, lane or key
   */
  async enqueueCall<M extends keyof ApiMethods>(
    method: M,
    params: Parameters<ApiMethods[M]>[0],
    opts: CallOptions = {},
  ): Promise<EnqueueResult> {
    const encoded = (await encodeParams(params ?? {})) as Record<string, unknown>;
    return this.enqueueEncoded(method, encoded, opts);
  }

  /**
   * Queues a board for a chat (lane `board`, key `board:<chatId>`: a newer
   * board supersedes a queued older one; an older one than the latest queued
   * for the chat is refused `stale`). The sender edits the chat's board
   * message, or posts one when there is none; see docs/telegram.md.
   * @param board.version increasing per chat (a version older than the one shown is skipped)
   * @param board.png the PNG bytes
   */
  enqueueBoard(
    chatId: number,
    board: { version: number; png: Uint8Array; caption?: string; replyMarkup?: unknown },
  ): Promise<EnqueueResult> {
    const payload: BotCall = { kind: 'board', version: board.version, photo: Buffer.from(board.png).toString('base64') };
    if (board.caption !== undefined) payload.caption = board.caption;
    if (board.replyMarkup !== undefined) payload.reply_markup = board.replyMarkup;
    this.count(this.s.enqueued, 'board');
    return this.queue.enqueue({ chatId, lane: 'board', key: `board:${chatId}`, version: board.version, payload });
  }

  /** Records a message id seen in a chat (the bot ingress calls it for each update) so a lost post can be found. */
  noteMessageId(chatId: number, messageId: number): Promise<void> {
    return this.boards.noteMessageId(chatId, messageId);
  }

  /** The function to pass to `queue.start()` in the process that sends. */
  sender(): SendFn<BotCall> {
    return (job) => (job.payload.kind === 'board' ? this.sendBoard(job, job.payload) : this.sendCall(job, job.payload));
  }

  stats(): TelegramClientStats {
    return structuredClone(this.s);
  }

  /**
   * Exports the client's counters, read at scrape time (libs/telemetry's catalogue):
   * running totals as observable counters `crowdplay_telegram_boards_total{action}`,
   * `crowdplay_telegram_errors_total{class}` and `crowdplay_telegram_avatar_total{stat}` (queued: the avatar
   * cap biting on reads; gateWaits: on other avatar calls), and the avatar reads' current values as the gauge
   * `crowdplay_telegram_avatar{stat}` (waiting, peakInFlight, cacheBytes, cacheEntries).
   * @param metrics libs/telemetry's `Metrics` (structurally: this package does not depend on it)
   */
  exportMetrics(metrics: TelegramClientMetrics): void {
    metrics.observableCounter('crowdplay_telegram_boards_total', () => Object.entries(this.s.boards).map(([action, n]) => [n, { action }]));
    metrics.observableCounter('crowdplay_telegram_errors_total', () => Object.entries(this.s.errors).map(([k, n]) => [n, { class: k }]));
    const now = new Set<keyof AvatarStats>(AVATAR_GAUGES);
    const avatars = (gauges: boolean): Array<[number, Record<string, string>]> =>
      Object.entries(this.avatars.stats())
        .filter(([stat]) => now.has(stat as keyof AvatarStats) === gauges)
        .map(([stat, n]) => [n, { stat }]);
    metrics.observableCounter('crowdplay_telegram_avatar_total', () => avatars(false));
    metrics.gauge('crowdplay_telegram_avatar', () => avatars(true));
  }

  // ---- the send side ----

  /** One HTTP call through `api` with a grant (a signal of its own that the transformer lets through once). */
  private granted(method: string, params: unknown): Promise<unknown> {
    const fn = (this.api.raw as unknown as Record<string, RawCall>)[method];
    if (typeof fn !== 'function') return Promise.reject(new Error(`unknown Bot API method ${method}`));
    const signal = new AbortController().signal;
    this.grants.set(signal, { used: false });
    // grammY binds an empty payload to its methods without parameters (getMe, close, …): the signal is their one argument.
    return fn.length <= 1 ? fn(signal) : fn(params, signal);
  }

  /**
   * Notes the message id of our own call's answer (a call of `method` started at `startedAtMs`) in the board
   * store's numbering. Only a call that makes a message (send*, copy*, forward*) takes a new id and so bounds an
   * unconfirmed post; an edit answers with its message's old id.
   */
  private async noteResult(chatId: number, method: string, result: unknown, startedAtMs: number): Promise<void> {
    if (!isPlainObject(result) || typeof result.message_id !== 'number') return;
    if (isIdempotent(method)) await this.boards.noteMessageId(chatId, result.message_id);
    else await this.boards.noteOwnSend(chatId, result.message_id, startedAtMs);
  }

  private async sendCall(job: SendJob<BotCall>, call: Extract<BotCall, { kind: 'call' }>): Promise<SendOutcome<BotCall>> {
    const params = decodeParams(call.params) as Record<string, unknown>;
    // Migration moves a job to the new chat id: address the job's chat, not the one it was queued with.
    if (job.chatId !== call.chatId && chatIdOf(params) === call.chatId) params.chat_id = job.chatId;
    const startedAtMs = this.now();
    try {
      const result = await this.granted(call.method, params);
      await this.noteResult(job.chatId, call.method, result, startedAtMs);
      return { ok: true, value: result };
    } catch (err) {
      const c = classifyError(err);
      if (job.lane === 'tx' && c.kind === 'network' && !c.maybeApplied) return this.unreached(job, call, c.detail);
      return this.outcome(job, call.method, c, err);
    }
  }

  /**
   * A transactional call that never reached Telegram (nothing can have been applied): tried again until
   * `txUnreachedDeadlineMs` after it was first queued. Within the queue's retries, `{retry}` (its backoff);
   * then it continues as a new job with the same payload (a fresh backoff), and a caller in this process
   * follows it ({@link follow}).
   */
  private async unreached(job: SendJob<BotCall>, call: Extract<BotCall, { kind: 'call' }>, detail: string): Promise<SendOutcome<BotCall>> {
    this.count(this.s.errors, 'network');
    const firstAtMs = call.firstAtMs ?? job.enqueuedAtMs;
    const waited = job.grantedAtMs - firstAtMs;
    if (waited >= this.txUnreachedDeadlineMs)
      return {
        drop: true,
        reason: `never reached Telegram in ${this.txUnreachedDeadlineMs} ms (TELEGRAM_TX_UNREACHED_DEADLINE_MS): ${detail}`,
      };
    // A call with a deadline of its own (a reply its caller waits for) continues only for what is left of it.
    const leftMs = call.deadlineMs === undefined ? undefined : call.deadlineMs - waited;
    if (leftMs !== undefined && leftMs <= 0)
      return { drop: true, reason: `deadline ${call.deadlineMs} ms passed; never reached Telegram: ${detail}` };
    if (job.retries < this.queueMaxRetries) return { retry: true, reason: detail };
    const next = await this.queue.enqueue({
      chatId: job.chatId,
      lane: job.lane,
      ...(job.key !== undefined ? { key: job.key } : {}),
      ...(leftMs !== undefined ? { deadlineMs: leftMs } : {}),
      isGroup: job.isGroup,
      payload: { ...call, firstAtMs },
    });
    if (next.status !== 'queued')
      return { drop: true, reason: `never reached Telegram, and could not be queued again (${next.reason}): ${detail}` };
    this.continued.set(job.id, next);
    if (this.continued.size > MAX_CONTINUED) this.continued.delete(this.continued.keys().next().value!);
    return { drop: true, reason: `${CONTINUED}${next.id} (never reached Telegram: ${detail})` };
  }

  /** The outcome policy shared by raw calls and boards (docs/telegram.md). */
  private async outcome(job: SendJob<BotCall>, method: string, c: ErrorClass, err: unknown): Promise<SendOutcome<BotCall>> {
    this.count(this.s.errors, c.kind);
    switch (c.kind) {
      case 'not_modified':
        return { ok: true, value: true };
      case 'rate_limited':
        return { retryAfterS: c.retryAfterS };
      case 'delete_target_missing':
        return method === 'deleteMessage'
          ? { ok: true, value: true }
          : { drop: true, reason: tgReason(400, 'message to delete not found') };
      case 'chat_gone':
        this.s.deactivated++;
        this.hook(() => this.hooks.onDeactivate?.(job.chatId, c.reason));
        return { deactivate: true, reason: tgReason(c.code, c.description) };
      case 'migrated':
        await this.migrate(job.chatId, c.toChatId);
        return { requeue: true, reason: `migrated to ${c.toChatId}` };
      case 'edit_target_missing':
        return { drop: true, reason: tgReason(400, c.description) };
      case 'rejected':
        return { drop: true, reason: tgReason(c.code, c.description) };
      case 'server':
      case 'network': {
        const detail = c.kind === 'server' ? tgReason(c.code, c.description) : c.detail;
        if (isIdempotent(method) || (c.kind === 'network' && !c.maybeApplied)) return { retry: true, reason: detail };
        // It may have been applied: repeating it could post twice.
        return { drop: true, reason: `ambiguous (not repeated): ${detail || String(err)}` };
      }
    }
  }

  /** Runs a hook; a throwing hook is reported, never turned into the job's outcome. */
  private hook(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      (this.o.onError ?? ((e: unknown) => console.error('telegram hook threw:', e)))(err);
    }
  }

  private async migrate(oldId: number, newId: number): Promise<void> {
    if (oldId === newId) return;
    this.s.migrated++;
    await this.queue.moveChat(oldId, newId);
    await this.boards.move(oldId, newId);
    this.hook(() => this.hooks.onMigrate?.(oldId, newId));
  }

  private boardMedia(b: Extract<BotCall, { kind: 'board' }>): Record<string, unknown> {
    return {
      type: 'photo',
      media: new InputFile(Buffer.from(b.photo, 'base64'), 'board.png'),
      ...(b.caption !== undefined ? { caption: b.caption } : {}),
    };
  }

  private delivered(job: SendJob<BotCall>, version: number, messageId: number, action: BoardDelivery['action']): SendOutcome<BotCall> {
    this.s.boards[action]++;
    const d: BoardDelivery = { chatId: job.chatId, version, messageId, action };
    this.hook(() => this.hooks.onBoard?.(d));
    return { ok: true, value: d };
  }

  private async sendBoard(job: SendJob<BotCall>, b: Board): Promise<SendOutcome<BotCall>> {
    const chatId = job.chatId;
    const st = await this.boards.get(chatId);
    const u = st.unconfirmed;
    if (st.messageId !== undefined) {
      // Posted again after an ambiguous post in the bot-wide numbering: look for the lost one first.
      if (u?.shared) return this.reconcile(job, b, st.messageId, u);
      if (st.version !== undefined && b.version <= st.version) return this.delivered(job, st.version, st.messageId, 'stale');
      return this.boardEdit(job, b, st.messageId);
    }
    if (u) {
      if (!u.shared) return this.probe(job, b, u.next, u);
      // No bound yet on where the lost post can be: post (its own id is the bound), then look below it.
      if (u.shared.boundId === undefined) return this.boardPost(job, b, st, true);
      const candidate = await this.nextCandidate(u.next, u.shared.boundId);
      if (candidate === undefined) {
        // Every id it could have taken is another chat's, or not in this chat: it did not land.
        await this.boards.patch(chatId, { unconfirmed: undefined });
        return this.boardPost(job, b, { ...st, unconfirmed: undefined }, false);
      }
      return this.probe(job, b, candidate, u);
    }
    return this.boardPost(job, b, st, false);
  }

  /** The first id from `from` below `bound` that no chat of the bot-wide numbering is known to hold, or undefined. */
  private async nextCandidate(from: number, bound: number): Promise<number | undefined> {
    for (let id = from; id < bound; id++) if ((await this.boards.sharedOwner(id)) === undefined) return id;
    return undefined;
  }

  /** editMessageMedia of the board on `messageId`: null when it shows the board now (edited or "not modified"), else the failure. */
  private async editTo(chatId: number, b: Board, messageId: number): Promise<{ unchanged: boolean } | { c: ErrorClass; err: unknown }> {
    try {
      await this.granted('editMessageMedia', {
        chat_id: chatId,
        message_id: messageId,
        media: this.boardMedia(b),
        ...(b.reply_markup !== undefined ? { reply_markup: b.reply_markup } : {}),
      });
      return { unchanged: false };
    } catch (err) {
      const c = classifyError(err);
      if (c.kind === 'not_modified') return { unchanged: true };
      return { c, err };
    }
  }

  /**
   * A board call that failed: no answer (network, 5xx) with `boardsHandedBack` ends the job so the producer
   * hands the chat's newest board on again at its own pace; the rest is the shared outcome policy.
   */
  private boardFailed(job: SendJob<BotCall>, method: string, c: ErrorClass, err: unknown): Promise<SendOutcome<BotCall>> {
    if (this.o.boardsHandedBack && (c.kind === 'network' || c.kind === 'server')) {
      this.count(this.s.errors, c.kind);
      this.s.boards.unreachable++;
      const detail = c.kind === 'server' ? tgReason(c.code, c.description) : c.detail;
      return Promise.resolve({ drop: true, reason: `no answer from Telegram (the board is handed on again): ${detail}` });
    }
    return this.outcome(job, method, c, err);
  }

  /** Edits the board in message `messageId` (the chat's stored board). */
  private async boardEdit(job: SendJob<BotCall>, b: Board, messageId: number): Promise<SendOutcome<BotCall>> {
    const chatId = job.chatId;
    const r = await this.editTo(chatId, b, messageId);
    if (!('c' in r)) {
      await this.boards.patch(chatId, { messageId, version: b.version, unconfirmed: undefined });
      await this.boards.noteMessageId(chatId, messageId);
      return this.delivered(job, b.version, messageId, r.unchanged ? 'unchanged' : 'edited');
    }
    if (r.c.kind === 'edit_target_missing') {
      // The board message is gone: forget it; the requeued job (or whichever board job runs next) posts once.
      this.count(this.s.errors, r.c.kind);
      this.s.boards.missing++;
      await this.boards.patch(chatId, { messageId: undefined });
      return { requeue: true, reason: 'board message missing: reposting' };
    }
    return this.boardFailed(job, 'editMessageMedia', r.c, r.err);
  }

  /** Whether a probe's failure says the candidate is not the lost post (someone else's, not a photo, no such message here). */
  private static notOurs(c: ErrorClass): boolean {
    return c.kind === 'edit_target_missing' || c.kind === 'rejected';
  }

  /** Edits candidate `messageId` after an ambiguous post (`u`): found, not it (next candidate), or (own numbering) not landed. */
  private async probe(
    job: SendJob<BotCall>,
    b: Board,
    messageId: number,
    u: NonNullable<BoardRecord['unconfirmed']>,
  ): Promise<SendOutcome<BotCall>> {
    const chatId = job.chatId;
    this.s.boards.probes++;
    const r = await this.editTo(chatId, b, messageId);
    if (!('c' in r)) {
      await this.boards.patch(chatId, { messageId, version: b.version, unconfirmed: undefined });
      await this.boards.noteMessageId(chatId, messageId);
      return this.delivered(job, b.version, messageId, 'recovered');
    }
    if (!TelegramClient.notOurs(r.c)) return this.boardFailed(job, 'editMessageMedia', r.c, r.err);
    this.count(this.s.errors, r.c.kind);
    if (!u.shared && r.c.kind === 'edit_target_missing' && /not found/i.test(r.c.description)) {
      // The chat numbers its own messages: no message has this id yet, so the lost post did not land
      // (barring a deletion in between). Post.
      await this.boards.patch(chatId, { unconfirmed: undefined });
      return { requeue: true, reason: `message ${messageId} does not exist: the lost post did not land` };
    }
    // Someone else's message, another chat's id, or not a photo: the next candidate.
    await this.boards.patch(chatId, { unconfirmed: { ...u, next: messageId + 1 } });
    return { requeue: true, reason: `message ${messageId} is not the lost board` };
  }

  /**
   * The board was posted again (`messageId`) after an ambiguous post in the bot-wide numbering: the lost post,
   * if it landed, is one of the ids below the bound that no chat is known to hold. Each is edited; the one that
   * takes the edit is the lost post and is deleted. When none is left, the chat's board is `messageId` alone.
   */
  private async reconcile(
    job: SendJob<BotCall>,
    b: Board,
    messageId: number,
    u: NonNullable<BoardRecord['unconfirmed']>,
  ): Promise<SendOutcome<BotCall>> {
    const chatId = job.chatId;
    const sh = u.shared!;
    if (sh.foundId !== undefined) {
      try {
        await this.granted('deleteMessage', { chat_id: chatId, message_id: sh.foundId });
      } catch (err) {
        const c = classifyError(err);
        if (c.kind !== 'delete_target_missing') return this.boardFailed(job, 'deleteMessage', c, err);
      }
      this.s.boards.reconciled++;
      await this.boards.patch(chatId, { unconfirmed: undefined });
      if (b.version <= (await this.boards.get(chatId)).version!) return this.delivered(job, b.version, messageId, 'posted');
      return { requeue: true, reason: `the lost post ${sh.foundId} is deleted: ${messageId} is the board` };
    }
    const candidate = await this.nextCandidate(u.next, sh.boundId ?? messageId);
    if (candidate === undefined) {
      // Looked through: the chat's one board is `messageId` (this job's post, or an earlier one's).
      await this.boards.patch(chatId, { unconfirmed: undefined });
      const shown = (await this.boards.get(chatId)).version;
      if (shown !== undefined && b.version <= shown) return this.delivered(job, shown, messageId, 'posted');
      return this.boardEdit(job, b, messageId);
    }
    this.s.boards.probes++;
    const r = await this.editTo(chatId, b, candidate);
    if (!('c' in r)) {
      await this.boards.patch(chatId, { unconfirmed: { ...u, next: candidate + 1, shared: { ...sh, foundId: candidate } } });
      return { requeue: true, reason: `message ${candidate} is the lost post: deleting it` };
    }
    if (!TelegramClient.notOurs(r.c)) return this.boardFailed(job, 'editMessageMedia', r.c, r.err);
    this.count(this.s.errors, r.c.kind);
    await this.boards.patch(chatId, { unconfirmed: { ...u, next: candidate + 1 } });
    return { requeue: true, reason: `message ${candidate} is not the lost board` };
  }

  private claimId(job: SendJob<BotCall>): string {
    return `${this.instance}:${job.id}`;
  }

  /**
   * Posts the board. `reconcile`: an ambiguous post in the bot-wide numbering is still unresolved (`st.unconfirmed`):
   * it stays, bounded by this post's id, and is looked for on the next run.
   */
  private async boardPost(job: SendJob<BotCall>, b: Board, st: BoardRecord, reconcile: boolean): Promise<SendOutcome<BotCall>> {
    const chatId = job.chatId;
    if (!(await this.boards.claimPost(chatId, this.claimId(job), this.now(), this.postClaimTtlMs)))
      return { retry: true, reason: 'another board post is in flight for this chat' };
    // Where a lost post would be: after the highest id known before it, in the chat's numbering or the bot's.
    const afterId = sharesMessageIds(chatId) ? Math.max(st.lastSeenId, await this.boards.sharedHighId()) : st.lastSeenId;
    const startedAtMs = this.now();
    let result: unknown;
    try {
      result = await this.granted('sendPhoto', {
        chat_id: chatId,
        photo: new InputFile(Buffer.from(b.photo, 'base64'), 'board.png'),
        ...(b.caption !== undefined ? { caption: b.caption } : {}),
        ...(b.reply_markup !== undefined ? { reply_markup: b.reply_markup } : {}),
      });
    } catch (e) {
      const c = classifyError(e);
      if (c.kind === 'server' || (c.kind === 'network' && c.maybeApplied)) {
        // It may have landed: never post it again blindly. Look for it first (board-store.ts).
        this.count(this.s.errors, c.kind);
        this.s.boards.ambiguousPosts++;
        const earlier = reconcile ? st.unconfirmed : undefined;
        await this.boards.patch(chatId, {
          // A second lost post while one is unresolved: look from the older one's start (both are after it).
          unconfirmed: {
            afterId: earlier?.afterId ?? afterId,
            next: earlier?.next ?? afterId + 1,
            version: b.version,
            ...(sharesMessageIds(chatId) ? { shared: { failedAtMs: this.now() } } : {}),
          },
          postClaim: undefined,
        });
        return { requeue: true, reason: 'ambiguous board post: looking for it before posting again' };
      }
      await this.boards.releasePost(chatId, this.claimId(job));
      return this.boardFailed(job, 'sendPhoto', c, e);
    }
    const messageId = isPlainObject(result) && typeof result.message_id === 'number' ? result.message_id : undefined;
    if (messageId === undefined) {
      await this.boards.releasePost(chatId, this.claimId(job));
      return { drop: true, reason: 'sendPhoto answered without a message_id' };
    }
    const u = reconcile ? st.unconfirmed : undefined;
    await this.boards.patch(chatId, {
      messageId,
      version: b.version,
      // This post started after the lost one failed: the lost one, if it landed, is below it.
      unconfirmed: u?.shared ? { ...u, shared: { ...u.shared, boundId: Math.min(u.shared.boundId ?? messageId, messageId) } } : undefined,
      postClaim: undefined,
    });
    await this.boards.noteOwnSend(chatId, messageId, startedAtMs);
    // The lost post may be there too: look for it before this job ends (reconcile), so the chat keeps one board.
    if (u?.shared) return { requeue: true, reason: 'posted again after an ambiguous post: looking for the lost one' };
    return this.delivered(job, b.version, messageId, 'posted');
  }
}
