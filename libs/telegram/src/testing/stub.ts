/**
 * A Telegram Bot API stub for tests and load runs: `/bot<token>/<method>`
 * (JSON, form-encoded or multipart bodies, as grammY sends them; multipart
 * for InputFile uploads), `/file/bot<token>/<path>` downloads, and a control
 * API under `/__stub/`.
 *
 * What it models, and why:
 * - Telegram's ceilings (limits.ts): 30 calls/s for the bot, 20/min per group,
 *   1/s per chat, with real 429 bodies
 *   `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after N","parameters":{"retry_after":N}}`.
 *   Counted: every method except the reads in {@link UNLIMITED_METHODS}.
 *   A call admitted through the ceilings counts even when it then fails (400).
 * - Messages stored per chat with sequential ids (per chat, or as Telegram
 *   numbers them: private chats and basic groups share one sequence, see
 *   `StubOptions.messageIds`), so an edit of a deleted or
 *   unknown message fails as Telegram's does (400 "Bad Request: message to
 *   edit not found"), and editing in the same content (same photo bytes,
 *   caption, text and reply markup) fails with "message is not modified".
 * - Chats the bot was removed from (403 "Forbidden: bot was kicked from the
 *   group chat"), chats that do not exist (400 "Bad Request: chat not found"),
 *   groups upgraded to supergroups (400 with `parameters.migrate_to_chat_id`).
 * - Fault injection ({@link FaultRule}): 429s, any error per chat or method,
 *   slow answers, a connection dropped before or after the call is applied,
 *   raw HTTP answers (a proxy's 502 page).
 * - Profile photos for avatar reads (getUserProfilePhotos, getFile, download).
 * - The bot's own settings (bot-settings.ts): its webhook, command lists and
 *   menu buttons, with the Bot API's parameter checks; getMe answers with the
 *   bot's profile ({@link StubOptions.bot}).
 * Every call is recorded ({@link CallRecord}) and counted ({@link StubStats}),
 * and each chat's last board (its newest photo message) is kept for load
 * reports.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { boundaryOf, parseMultipart, type Part } from './multipart.ts';
import { StubLimiter, TELEGRAM_LIMITS, type LimitScope, type StubLimits } from './limits.ts';
import { BadRequest, BotSettings, type StubBotCommand, type StubMenuButton, type StubWebhook } from './bot-settings.ts';

/** Methods the ceilings do not count (reads and bot settings). */
export const UNLIMITED_METHODS: ReadonlySet<string> = new Set([
  'getMe',
  'getFile',
  'getUserProfilePhotos',
  'getChat',
  'getChatMember',
  'getChatMemberCount',
  'getChatAdministrators',
  'getWebhookInfo',
  'getUpdates',
  'setWebhook',
  'deleteWebhook',
  'setMyCommands',
  'getMyCommands',
  'deleteMyCommands',
  'setChatMenuButton',
  'getChatMenuButton',
]);

/** Telegram's description of "not modified" (400), verbatim. */
export const NOT_MODIFIED =
  'Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message';
export const EDIT_NOT_FOUND = 'Bad Request: message to edit not found';
export const DELETE_NOT_FOUND = 'Bad Request: message to delete not found';
export const CHAT_NOT_FOUND = 'Bad Request: chat not found';
export const UPGRADED = 'Bad Request: group chat was upgraded to a supergroup chat';

/** One injected fault. Rules are tried in the order added; the first that matches a call applies, once per `times`. */
export type FaultRule = FaultMatch &
  (
    | { kind: '429'; retryAfterS: number }
    | { kind: 'error'; code: number; description: string; parameters?: Record<string, unknown> }
    | { kind: 'slow'; delayMs: number }
    /** Close the connection without applying the call. */
    | { kind: 'drop-before-apply' }
    /** Apply the call (store/edit/delete the message), then close the connection without an answer. */
    | { kind: 'drop-after-apply' }
    /** A raw HTTP answer, e.g. a proxy's `502` HTML page (not applied). */
    | { kind: 'http'; status: number; body: string; contentType?: string }
  );

export interface FaultMatch {
  /** Method name(s); any when absent. */
  method?: string | string[];
  /** Chat id; any when absent. */
  chatId?: number;
  /** How many calls it applies to (default 1; Infinity for always). */
  times?: number;
}

/** One recorded call. */
export interface CallRecord {
  seq: number;
  atMs: number;
  method: string;
  chatId?: number;
  messageId?: number;
  /** HTTP status answered; 0 when the connection was dropped. */
  status: number;
  outcome: 'ok' | 'error' | '429' | 'dropped' | 'http';
  description?: string;
  /** Which ceiling answered 429 (absent for injected 429s). */
  scope?: LimitScope;
  /** Applied to the stored state (true also for a drop-after-apply). */
  applied: boolean;
  /** Uploaded bytes (photos). */
  uploadBytes?: number;
  /** sha256 (hex, first 16) of the photo this call set. */
  photo?: string;
  /** The user whose avatar a `file` download served (avatar downloads only). */
  userId?: number;
}

/** A stored message. */
export interface StoredMessage {
  message_id: number;
  chat_id: number;
  kind: 'text' | 'photo';
  /** False for people's messages ({@link TelegramStub.userMessage}): the bot cannot edit them. */
  fromBot: boolean;
  text?: string;
  caption?: string;
  photo?: StoredPhoto;
  /** JSON of reply_markup ('' when none). */
  markup: string;
  date: number;
  edit_date?: number;
  /** Times the content changed since it was sent. */
  edits: number;
  /** Stub clock (ms) of the last send or edit. */
  atMs: number;
}

export interface StoredPhoto {
  file_id: string;
  file_unique_id: string;
  sha256: string;
  bytes: number;
  width: number;
  height: number;
}

/** The newest photo message of a chat: what its board shows. */
export interface BoardView {
  chatId: number;
  messageId: number;
  caption?: string;
  sha256: string;
  bytes: number;
  /** Stub clock (ms) of the send or edit that set it. */
  atMs: number;
  /** Photo messages the bot has in this chat right now (1 = no duplicate board). */
  photoMessages: number;
  /** sendPhoto calls applied in this chat (posts, including reposts). */
  posts: number;
  /** editMessageMedia calls applied in this chat. */
  edits: number;
}

export interface StubStats {
  /** Every call answered or dropped (file downloads included, method `file`). */
  calls: number;
  ok: number;
  /** 429 answers (ceilings and injected). */
  rejected429: number;
  rejected429ByScope: Record<string, number>;
  /** Non-429 error answers, by description. */
  errors: Record<string, number>;
  dropped: number;
  byMethod: Record<string, number>;
  /** Most requests of a method open at once (received, not yet answered or dropped), by method. */
  peakInFlight: Record<string, number>;
  chats: number;
}

export interface StubOptions {
  /** Accepted bot tokens; default: any `<digits>:<rest>` token. */
  tokens?: string[];
  /** Ceilings; `false` switches them all off. Default {@link TELEGRAM_LIMITS}. */
  limits?: StubLimits | false;
  /** Clock, ms (default Date.now). */
  now?: () => number;
  /** Calls kept in `calls()` (oldest dropped first; counters are kept regardless). Default 200,000. */
  maxRecords?: number;
  /** Keep uploaded photo bytes (downloadable through getFile). Default false: only their hash and size. */
  keepUploads?: boolean;
  /** Profile photo of a user (null: none). Default: a deterministic ~2 KB blob for every user. */
  avatarFor?: (userId: number) => Uint8Array | null;
  /** Largest request body, bytes (default 20 MiB; Telegram's photo limit is 10 MB). */
  maxBodyBytes?: number;
  /**
   * How message ids are numbered. `per-chat` (default): 1, 2, 3… in every chat. `telegram`: as Telegram
   * numbers them for a bot: supergroups and channels (ids ≤ −10^12) per chat, private chats and basic groups
   * from one sequence shared by all of them (an id is then in one chat only: an edit of it in another chat
   * answers "message to edit not found").
   */
  messageIds?: 'per-chat' | 'telegram';
  /**
   * The bot's profile as getMe answers it (`id`: default 7000000001). Default: username `crowdplay_stub_bot`, may join groups, privacy
   * mode on (`can_read_all_group_messages` false), as @BotFather leaves a new bot.
   */
  bot?: { id?: number; username?: string; canJoinGroups?: boolean; canReadAllGroupMessages?: boolean };
}

type Params = Record<string, unknown>;
type ApiResult =
  { ok: true; result: unknown } | { ok: false; error_code: number; description: string; parameters?: Record<string, unknown> };

class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly description: string,
    readonly parameters?: Record<string, unknown>,
  ) {
    super(description);
  }
}

interface ChatState {
  id: number;
  nextMessageId: number;
  messages: Map<number, StoredMessage>;
  posts: number;
  mediaEdits: number;
  /** Why calls to it fail, when they do. */
  status: { kind: 'ok' } | { kind: 'kicked' } | { kind: 'gone' } | { kind: 'migrated'; to: number };
}

const BOT_ID = 7_000_000_001;

function pngSize(b: Uint8Array): { width: number; height: number } {
  // PNG signature (8 bytes), IHDR length+type (8), then width, height (big-endian u32).
  if (b.length >= 24 && b[0] === 0x89 && b[1] === 0x50 && b[2] === 0x4e && b[3] === 0x47) {
    const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
    return { width: v.getUint32(16), height: v.getUint32(20) };
  }
  return { width: 0, height: 0 };
}

function defaultAvatar(userId: number): Uint8Array {
  const out = Buffer.alloc(2_048);
  let block = createHash('sha256').update(`avatar:${userId}`).digest();
  for (let i = 0; i < out.length; i += 32) {
    block.copy(out, i);
    block = createHash('sha256').update(block).digest();
  }
  return out;
}

function chatType(id: number): string {
  return id > 0 ? 'private' : id <= -1_000_000_000_000 ? 'supergroup' : 'group';
}

function kickedDescription(id: number): string {
  const t = chatType(id);
  return t === 'private' ? 'Forbidden: bot was blocked by the user' : `Forbidden: bot was kicked from the ${t} chat`;
}

const JSON_FIELDS = new Set([
  'reply_markup',
  'media',
  'reply_parameters',
  'entities',
  'caption_entities',
  'link_preview_options',
  'allowed_updates',
  'commands',
  'scope',
  'menu_button',
]);

function int(p: Params, name: string): number | undefined {
  const v = p[name];
  if (v === undefined || v === null || v === '') return undefined;
  const n = typeof v === 'number' ? v : Number(v);
  return Number.isSafeInteger(n) ? n : undefined;
}

function str(p: Params, name: string): string | undefined {
  const v = p[name];
  return v === undefined || v === null ? undefined : String(v);
}

/** The Telegram Bot API stub (see the module doc). `listen()` it, point TELEGRAM_API_ROOT at `url`. */
export class TelegramStub {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private readonly limiter: StubLimiter | undefined;
  private readonly chats = new Map<number, ChatState>();
  private readonly photos = new Map<string, StoredPhoto & { data?: Uint8Array }>();
  private faults: Array<FaultRule & { left: number }> = [];
  private records: CallRecord[] = [];
  private seq = 0;
  private counters!: StubStats;
  private readonly now: () => number;
  private readonly maxRecords: number;
  private readonly avatarFor: (userId: number) => Uint8Array | null;
  private readonly avatarCache = new Map<number, Uint8Array | null>();
  private readonly maxBodyBytes: number;
  private readonly inFlight = new Map<string, number>();
  private readonly settings = new BotSettings();
  private readonly me: Record<string, unknown>;
  /** Next id of the sequence private chats and basic groups share (`messageIds: 'telegram'`). */
  private nextSharedId = 1;
  /** Base URL once listening, e.g. `http://127.0.0.1:40123` (use as TELEGRAM_API_ROOT). */
  url = '';

  constructor(private readonly opts: StubOptions = {}) {
    this.now = opts.now ?? Date.now;
    this.maxRecords = opts.maxRecords ?? 200_000;
    this.avatarFor = opts.avatarFor ?? defaultAvatar;
    this.maxBodyBytes = opts.maxBodyBytes ?? 20 * 1024 * 1024;
    const limits = opts.limits === false ? undefined : (opts.limits ?? TELEGRAM_LIMITS);
    this.limiter = limits ? new StubLimiter(limits) : undefined;
    this.me = {
      id: opts.bot?.id ?? BOT_ID,
      is_bot: true,
      first_name: 'crowdplay stub',
      username: opts.bot?.username ?? 'crowdplay_stub_bot',
      can_join_groups: opts.bot?.canJoinGroups ?? true,
      can_read_all_group_messages: opts.bot?.canReadAllGroupMessages ?? false,
      supports_inline_queries: false,
    };
    this.resetCounters();
  }

  private resetCounters(): void {
    this.counters = {
      calls: 0,
      ok: 0,
      rejected429: 0,
      rejected429ByScope: {},
      errors: {},
      dropped: 0,
      byMethod: {},
      peakInFlight: {},
      chats: 0,
    };
    this.inFlight.clear();
  }

  /** Starts listening (port 0: any free port) on 127.0.0.1 unless `host` is given; resolves with `url`. */
  async listen(port = 0, host = '127.0.0.1'): Promise<string> {
    const server = createServer((req, res) => void this.handle(req, res));
    server.keepAliveTimeout = 30_000;
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    this.server = server;
    const a = server.address() as AddressInfo;
    this.url = `http://${a.address.includes(':') ? `[${a.address}]` : a.address}:${a.port}`;
    return this.url;
  }

  /** Stops listening and closes every open connection. */
  async close(): Promise<void> {
    const s = this.server;
    if (!s) return;
    this.server = undefined;
    for (const sock of this.sockets) sock.destroy();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  // -- control ---------------------------------------------------------------

  /** Adds fault rules (tried in order, first match applies). */
  inject(...rules: FaultRule[]): void {
    for (const r of rules) this.faults.push({ ...r, left: r.times ?? 1 });
  }

  /** Removes every fault rule. */
  clearFaults(): void {
    this.faults = [];
  }

  /** The bot is removed from the chat: every call for it answers 403 until {@link readd}. */
  kick(chatId: number): void {
    this.chat(chatId).status = { kind: 'kicked' };
  }

  /** The chat does not exist (any more): calls answer 400 "chat not found". */
  forget(chatId: number): void {
    this.chat(chatId).status = { kind: 'gone' };
  }

  /** The group became supergroup `to`: calls for the old id answer 400 with `migrate_to_chat_id`; the supergroup starts with no bot messages to edit. */
  migrate(chatId: number, to: number): void {
    const from = this.chat(chatId);
    from.status = { kind: 'migrated', to };
    const dest = this.chat(to);
    dest.status = { kind: 'ok' };
  }

  /** The bot is back in the chat (after kick/forget/migrate). */
  readd(chatId: number): void {
    this.chat(chatId).status = { kind: 'ok' };
  }

  /** A user message in the chat (takes the next message id, as people talking in a group do). */
  userMessage(chatId: number, text = 'hi'): number {
    const c = this.chat(chatId);
    const id = this.takeId(c);
    c.messages.set(id, {
      message_id: id,
      chat_id: chatId,
      kind: 'text',
      fromBot: false,
      text,
      markup: '',
      date: this.unix(),
      edits: 0,
      atMs: this.now(),
    });
    return id;
  }

  /**
   * Telegram's webhook delivery state as getWebhookInfo reports it (the stub delivers no updates): updates
   * waiting, and the last delivery error (`lastErrorMessage: null` clears it; its date defaults to now).
   */
  setWebhookDelivery(d: { pendingUpdateCount?: number; lastErrorMessage?: string | null; lastErrorDate?: number }): void {
    this.settings.setDelivery(d, this.unix());
  }

  /** Drops every chat, message, fault, record, counter and bot setting. */
  reset(): void {
    this.settings.reset();
    this.chats.clear();
    this.photos.clear();
    this.faults = [];
    this.records = [];
    this.avatarCache.clear();
    this.nextSharedId = 1;
    this.resetCounters();
  }

  // -- inspection ------------------------------------------------------------

  /** Recorded calls (the newest `maxRecords`), optionally those after `sinceSeq`. */
  calls(sinceSeq = 0): CallRecord[] {
    return sinceSeq <= 0 ? [...this.records] : this.records.filter((r) => r.seq > sinceSeq);
  }

  /** Counters since start or the last reset. */
  stats(): StubStats {
    return structuredClone({ ...this.counters, chats: this.chats.size });
  }

  /** The webhook as setWebhook stored it (with its secret_token, which getWebhookInfo never shows) and its delivery state. */
  webhook(): StubWebhook {
    return this.settings.webhook();
  }

  /** The command list setMyCommands stored for a scope and language (default: the bot's default list). */
  commands(scope?: Record<string, unknown>, languageCode = ''): StubBotCommand[] {
    return this.settings.commands(scope, languageCode);
  }

  /** A chat's menu button, or (no chat) the bot's default one; `{type: 'commands'}` until one is set. */
  menuButton(chatId?: number): StubMenuButton {
    return this.settings.menuButton(chatId);
  }

  /** The messages the bot sees in a chat, by id. */
  messages(chatId: number): StoredMessage[] {
    return [...(this.chats.get(chatId)?.messages.values() ?? [])].sort((a, b) => a.message_id - b.message_id);
  }

  /** The chat's board: its newest photo message (by last send or edit), or undefined. */
  board(chatId: number): BoardView | undefined {
    const c = this.chats.get(chatId);
    if (!c) return undefined;
    let best: StoredMessage | undefined;
    let photoMessages = 0;
    for (const m of c.messages.values()) {
      if (m.kind !== 'photo' || !m.photo) continue;
      photoMessages++;
      if (!best || m.atMs > best.atMs || (m.atMs === best.atMs && m.message_id > best.message_id)) best = m;
    }
    if (!best?.photo) return undefined;
    const v: BoardView = {
      chatId,
      messageId: best.message_id,
      sha256: best.photo.sha256,
      bytes: best.photo.bytes,
      atMs: best.atMs,
      photoMessages,
      posts: c.posts,
      edits: c.mediaEdits,
    };
    if (best.caption !== undefined) v.caption = best.caption;
    return v;
  }

  /** Every chat's board (chats with a photo message). */
  boards(): BoardView[] {
    const out: BoardView[] = [];
    for (const id of this.chats.keys()) {
      const b = this.board(id);
      if (b) out.push(b);
    }
    return out;
  }

  // -- HTTP ------------------------------------------------------------------

  private unix(): number {
    return Math.floor(this.now() / 1000);
  }

  /** The next message id of chat `c` (its own sequence, or the shared one: {@link StubOptions.messageIds}). */
  private takeId(c: ChatState): number {
    if (this.opts.messageIds === 'telegram' && c.id > -1_000_000_000_000) return this.nextSharedId++;
    return c.nextMessageId++;
  }

  private chat(id: number): ChatState {
    let c = this.chats.get(id);
    if (!c) {
      c = { id, nextMessageId: 1, messages: new Map(), posts: 0, mediaEdits: 0, status: { kind: 'ok' } };
      this.chats.set(id, c);
    }
    return c;
  }

  private tokenOk(token: string): boolean {
    return this.opts.tokens ? this.opts.tokens.includes(token) : /^\d+:[A-Za-z0-9_-]+$/.test(token);
  }

  private record(r: Omit<CallRecord, 'seq' | 'atMs'>): void {
    const rec: CallRecord = { seq: ++this.seq, atMs: this.now(), ...r };
    const c = this.counters;
    c.calls++;
    c.byMethod[r.method] = (c.byMethod[r.method] ?? 0) + 1;
    if (r.outcome === 'ok') c.ok++;
    else if (r.outcome === '429') {
      c.rejected429++;
      const k = r.scope ?? 'injected';
      c.rejected429ByScope[k] = (c.rejected429ByScope[k] ?? 0) + 1;
    } else if (r.outcome === 'dropped') c.dropped++;
    else {
      const k = r.description ?? String(r.status);
      c.errors[k] = (c.errors[k] ?? 0) + 1;
    }
    this.records.push(rec);
    if (this.records.length > this.maxRecords) this.records.splice(0, this.records.length - this.maxRecords);
  }

  private takeFault(method: string, chatId: number | undefined): FaultRule | undefined {
    for (let i = 0; i < this.faults.length; i++) {
      const f = this.faults[i]!;
      if (f.method !== undefined && !(Array.isArray(f.method) ? f.method.includes(method) : f.method === method)) continue;
      if (f.chatId !== undefined && f.chatId !== chatId) continue;
      f.left--;
      if (f.left <= 0) this.faults.splice(i, 1);
      return f;
    }
    return undefined;
  }

  /** Counts an open request of `method` until its response closes. */
  private track(method: string, res: ServerResponse): void {
    const n = (this.inFlight.get(method) ?? 0) + 1;
    this.inFlight.set(method, n);
    if (n > (this.counters.peakInFlight[method] ?? 0)) this.counters.peakInFlight[method] = n;
    res.once('close', () => this.inFlight.set(method, Math.max(0, (this.inFlight.get(method) ?? 1) - 1)));
  }

  private async readBody(req: IncomingMessage): Promise<Buffer> {
    const chunks: Buffer[] = [];
    let n = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      n += chunk.length;
      if (n > this.maxBodyBytes) throw new ApiError(413, 'Request Entity Too Large');
      chunks.push(chunk);
    }
    return Buffer.concat(chunks);
  }

  private async params(req: IncomingMessage, url: URL): Promise<{ params: Params; files: Map<string, Uint8Array> }> {
    const params: Params = Object.fromEntries(url.searchParams);
    const files = new Map<string, Uint8Array>();
    const body = await this.readBody(req);
    const ct = String(req.headers['content-type'] ?? '');
    if (body.length > 0) {
      if (ct.startsWith('application/json')) {
        let parsed: unknown;
        try {
          parsed = JSON.parse(body.toString('utf8'));
        } catch {
          throw new ApiError(400, "Bad Request: can't parse JSON");
        }
        if (parsed && typeof parsed === 'object') Object.assign(params, parsed);
      } else if (ct.startsWith('application/x-www-form-urlencoded')) {
        Object.assign(params, Object.fromEntries(new URLSearchParams(body.toString('utf8'))));
      } else if (ct.startsWith('multipart/form-data')) {
        const boundary = boundaryOf(ct);
        if (!boundary) throw new ApiError(400, 'Bad Request: no multipart boundary');
        let parts: Part[];
        try {
          parts = parseMultipart(body, boundary);
        } catch (err) {
          throw new ApiError(400, `Bad Request: ${(err as Error).message}`);
        }
        for (const part of parts) {
          if (part.filename === undefined) params[part.name] = part.data.toString('utf8');
          else files.set(part.name, new Uint8Array(part.data));
        }
      }
    }
    for (const k of JSON_FIELDS) {
      const v = params[k];
      if (typeof v === 'string' && (v.startsWith('{') || v.startsWith('['))) {
        try {
          params[k] = JSON.parse(v);
        } catch {
          throw new ApiError(400, `Bad Request: can't parse ${k} JSON object`);
        }
      }
    }
    return { params, files };
  }

  private send(res: ServerResponse, status: number, body: unknown): void {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  }

  private drop(req: IncomingMessage, res: ServerResponse): void {
    res.socket?.destroy();
    req.socket.destroy();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://stub');
    } catch {
      this.send(res, 400, { ok: false, error_code: 400, description: 'Bad Request' });
      return;
    }
    try {
      if (url.pathname.startsWith('/__stub/')) return await this.control(req, res, url);
      const file = /^\/file\/bot([^/]+)\/(.+)$/.exec(url.pathname);
      if (file) return await this.download(res, file[1]!, decodeURIComponent(file[2]!));
      const m = /^\/bot([^/]+)\/([A-Za-z]+)$/.exec(url.pathname);
      if (!m) {
        this.send(res, 404, { ok: false, error_code: 404, description: 'Not Found' });
        return;
      }
      await this.call(req, res, url, m[1]!, m[2]!);
    } catch (err) {
      if (!res.headersSent && !res.destroyed) {
        const e = err instanceof ApiError ? err : new ApiError(500, `Internal Server Error: ${(err as Error).message}`);
        this.send(res, e.code, { ok: false, error_code: e.code, description: e.description });
      }
    }
  }

  private async call(req: IncomingMessage, res: ServerResponse, url: URL, token: string, method: string): Promise<void> {
    this.track(method, res);
    if (!this.tokenOk(token)) {
      await this.readBody(req).catch(() => undefined);
      this.record({ method, status: 401, outcome: 'error', description: 'Unauthorized', applied: false });
      this.send(res, 401, { ok: false, error_code: 401, description: 'Unauthorized' });
      return;
    }
    let parsed: { params: Params; files: Map<string, Uint8Array> };
    try {
      parsed = await this.params(req, url);
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(400, 'Bad Request');
      this.record({ method, status: e.code, outcome: 'error', description: e.description, applied: false });
      this.send(res, e.code, { ok: false, error_code: e.code, description: e.description });
      return;
    }
    const { params, files } = parsed;
    const chatId = int(params, 'chat_id');
    const messageId = int(params, 'message_id');
    const base = { method, ...(chatId !== undefined ? { chatId } : {}), ...(messageId !== undefined ? { messageId } : {}) };

    let fault = this.takeFault(method, chatId);
    if (fault?.kind === 'slow') {
      const delayMs = fault.delayMs;
      await new Promise((r) => setTimeout(r, delayMs));
      if (res.destroyed) return;
      fault = undefined;
    }
    if (fault) {
      switch (fault.kind) {
        case '429': {
          const d = `Too Many Requests: retry after ${fault.retryAfterS}`;
          this.record({ ...base, status: 429, outcome: '429', description: d, applied: false });
          this.send(res, 429, { ok: false, error_code: 429, description: d, parameters: { retry_after: fault.retryAfterS } });
          return;
        }
        case 'error':
          this.record({ ...base, status: fault.code, outcome: 'error', description: fault.description, applied: false });
          this.send(res, fault.code, {
            ok: false,
            error_code: fault.code,
            description: fault.description,
            ...(fault.parameters ? { parameters: fault.parameters } : {}),
          });
          return;
        case 'http':
          this.record({ ...base, status: fault.status, outcome: 'http', description: `HTTP ${fault.status}`, applied: false });
          res.writeHead(fault.status, { 'content-type': fault.contentType ?? 'text/html' });
          res.end(fault.body);
          return;
        case 'drop-before-apply':
          this.record({ ...base, status: 0, outcome: 'dropped', description: 'dropped before apply', applied: false });
          this.drop(req, res);
          return;
        case 'drop-after-apply':
          break;
      }
    }

    let result: ApiResult;
    let applied = false;
    let scope: LimitScope | undefined;
    let upload: { bytes?: number; photo?: string } = {};
    try {
      if (chatId !== undefined) this.checkChat(chatId);
      if (this.limiter && !UNLIMITED_METHODS.has(method)) {
        const a = this.limiter.admit(chatId, this.now());
        if (!a.ok) {
          scope = a.scope;
          throw new ApiError(429, `Too Many Requests: retry after ${a.retryAfterS}`, { retry_after: a.retryAfterS });
        }
      }
      const r = this.apply(method, params, files);
      applied = true;
      upload = r.upload ?? {};
      result = { ok: true, result: r.result };
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      result = { ok: false, error_code: err.code, description: err.description, ...(err.parameters ? { parameters: err.parameters } : {}) };
    }
    const extra = {
      ...(upload.bytes !== undefined ? { uploadBytes: upload.bytes } : {}),
      ...(upload.photo ? { photo: upload.photo } : {}),
    };
    if (fault?.kind === 'drop-after-apply') {
      this.record({ ...base, ...extra, status: 0, outcome: 'dropped', description: 'dropped after apply', applied });
      this.drop(req, res);
      return;
    }
    if (result.ok) this.record({ ...base, ...extra, status: 200, outcome: 'ok', applied });
    else
      this.record({
        ...base,
        status: result.error_code,
        outcome: result.error_code === 429 ? '429' : 'error',
        description: result.description,
        applied,
        ...(scope ? { scope } : {}),
      });
    this.send(res, result.ok ? 200 : result.error_code, result);
  }

  private checkChat(chatId: number): void {
    const c = this.chats.get(chatId);
    if (!c) return;
    switch (c.status.kind) {
      case 'kicked':
        throw new ApiError(403, kickedDescription(chatId));
      case 'gone':
        throw new ApiError(400, CHAT_NOT_FOUND);
      case 'migrated':
        throw new ApiError(400, UPGRADED, { migrate_to_chat_id: c.status.to });
      default:
    }
  }

  private messageJson(m: StoredMessage, markup: unknown): Record<string, unknown> {
    const out: Record<string, unknown> = {
      message_id: m.message_id,
      from: { id: this.me.id, is_bot: true, first_name: 'crowdplay stub', username: this.me.username },
      chat: { id: m.chat_id, type: chatType(m.chat_id), ...(m.chat_id < 0 ? { title: `chat ${m.chat_id}` } : { first_name: 'user' }) },
      date: m.date,
    };
    if (m.edit_date !== undefined) out.edit_date = m.edit_date;
    if (m.kind === 'text') out.text = m.text;
    if (m.photo) {
      const p = m.photo;
      out.photo = [{ file_id: p.file_id, file_unique_id: p.file_unique_id, width: p.width, height: p.height, file_size: p.bytes }];
    }
    if (m.caption !== undefined) out.caption = m.caption;
    if (markup !== undefined && markup !== null && markup !== '') out.reply_markup = markup;
    return out;
  }

  /** Resolves a `photo` / `media` reference: attach://name, an upload under the field name, a known file_id, or a URL. */
  private resolvePhoto(ref: unknown, fieldName: string, files: Map<string, Uint8Array>): StoredPhoto & { uploaded?: number } {
    let data: Uint8Array | undefined;
    if (typeof ref === 'string' && ref.startsWith('attach://')) data = files.get(ref.slice('attach://'.length));
    else if (ref === undefined && files.has(fieldName)) data = files.get(fieldName);
    if (data) {
      const sha256 = createHash('sha256').update(data).digest('hex');
      const id = `stubphoto_${sha256.slice(0, 32)}`;
      let p = this.photos.get(id);
      if (!p) {
        const { width, height } = pngSize(data);
        p = { file_id: id, file_unique_id: sha256.slice(0, 16), sha256, bytes: data.length, width, height };
        if (this.opts.keepUploads) p.data = data;
        this.photos.set(id, p);
      }
      const { data: _d, ...photo } = p;
      return { ...photo, uploaded: data.length };
    }
    if (typeof ref === 'string' && ref !== '') {
      const known = this.photos.get(ref);
      if (known) {
        const { data: _d, ...photo } = known;
        return photo;
      }
      if (/^https?:\/\//.test(ref)) {
        const sha256 = createHash('sha256').update(ref).digest('hex');
        return { file_id: `stuburl_${sha256.slice(0, 32)}`, file_unique_id: sha256.slice(0, 16), sha256, bytes: 0, width: 0, height: 0 };
      }
    }
    throw new ApiError(400, 'Bad Request: wrong file identifier/HTTP URL specified');
  }

  private target(params: Params, forDelete = false): { chat: ChatState; msg: StoredMessage } {
    const chatId = int(params, 'chat_id');
    if (chatId === undefined) throw new ApiError(400, 'Bad Request: chat_id is empty');
    const messageId = int(params, 'message_id');
    if (messageId === undefined) throw new ApiError(400, 'Bad Request: message identifier is not specified');
    const chat = this.chat(chatId);
    const msg = chat.messages.get(messageId);
    if (!msg) throw new ApiError(400, forDelete ? DELETE_NOT_FOUND : EDIT_NOT_FOUND);
    if (!forDelete && !msg.fromBot) throw new ApiError(400, "Bad Request: message can't be edited");
    return { chat, msg };
  }

  private apply(
    method: string,
    p: Params,
    files: Map<string, Uint8Array>,
  ): { result: unknown; upload?: { bytes?: number; photo?: string } } {
    const chatId = int(p, 'chat_id');
    const markup = p.reply_markup;
    const markupJson = markup === undefined || markup === null ? '' : JSON.stringify(markup);
    const needChat = (): ChatState => {
      if (chatId === undefined) throw new ApiError(400, 'Bad Request: chat_id is empty');
      return this.chat(chatId);
    };
    const now = this.now();
    const settings = <T>(f: (b: BotSettings) => T): { result: T } => {
      try {
        return { result: f(this.settings) };
      } catch (err) {
        if (err instanceof BadRequest) throw new ApiError(400, `Bad Request: ${err.description}`);
        throw err;
      }
    };
    switch (method) {
      case 'getMe':
        return { result: { ...this.me } };
      case 'answerCallbackQuery':
      case 'sendChatAction':
        return { result: true };
      case 'setWebhook':
        return settings((b) => b.setWebhook(p));
      case 'deleteWebhook':
        return settings((b) => b.setWebhook({ url: '', drop_pending_updates: p.drop_pending_updates }));
      case 'getWebhookInfo':
        return settings((b) => b.webhookInfo());
      case 'setMyCommands':
        return settings((b) => b.setMyCommands(p));
      case 'getMyCommands':
        return settings((b) => b.getMyCommands(p));
      case 'deleteMyCommands':
        return settings((b) => b.deleteMyCommands(p));
      case 'setChatMenuButton':
      case 'getChatMenuButton': {
        if (p.chat_id !== undefined && p.chat_id !== null && p.chat_id !== '' && (chatId === undefined || chatId <= 0))
          throw new ApiError(400, 'Bad Request: invalid chat_id specified');
        return settings((b) => (method === 'setChatMenuButton' ? b.setChatMenuButton(p, chatId) : b.getChatMenuButton(chatId)));
      }
      case 'getChat': {
        const c = needChat();
        return { result: { id: c.id, type: chatType(c.id), ...(c.id < 0 ? { title: `chat ${c.id}` } : {}) } };
      }
      case 'sendMessage': {
        const c = needChat();
        const text = str(p, 'text');
        if (!text) throw new ApiError(400, 'Bad Request: message text is empty');
        const m: StoredMessage = {
          message_id: this.takeId(c),
          chat_id: c.id,
          kind: 'text',
          fromBot: true,
          text,
          markup: markupJson,
          date: this.unix(),
          edits: 0,
          atMs: now,
        };
        c.messages.set(m.message_id, m);
        return { result: this.messageJson(m, markup) };
      }
      case 'sendPhoto': {
        const c = needChat();
        const photo = this.resolvePhoto(p.photo, 'photo', files);
        const { uploaded, ...stored } = photo;
        const m: StoredMessage = {
          message_id: this.takeId(c),
          chat_id: c.id,
          kind: 'photo',
          fromBot: true,
          photo: stored,
          markup: markupJson,
          date: this.unix(),
          edits: 0,
          atMs: now,
        };
        const caption = str(p, 'caption');
        if (caption !== undefined) m.caption = caption;
        c.messages.set(m.message_id, m);
        c.posts++;
        return {
          result: this.messageJson(m, markup),
          upload: { ...(uploaded !== undefined ? { bytes: uploaded } : {}), photo: stored.sha256.slice(0, 16) },
        };
      }
      case 'editMessageMedia': {
        const { chat, msg } = this.target(p);
        const media = p.media as Record<string, unknown> | undefined;
        if (!media || typeof media !== 'object') throw new ApiError(400, 'Bad Request: media is empty');
        if (media.type !== 'photo') throw new ApiError(400, 'Bad Request: the stub supports photo media only');
        if (msg.kind !== 'photo') throw new ApiError(400, 'Bad Request: there is no media in the message to edit');
        const photo = this.resolvePhoto(media.media, 'media', files);
        const { uploaded, ...stored } = photo;
        const caption = media.caption === undefined ? undefined : String(media.caption);
        if (msg.photo?.sha256 === stored.sha256 && msg.caption === caption && msg.markup === markupJson)
          throw new ApiError(400, NOT_MODIFIED);
        msg.photo = stored;
        if (caption === undefined) delete msg.caption;
        else msg.caption = caption;
        msg.markup = markupJson;
        this.edited(msg, now);
        chat.mediaEdits++;
        return {
          result: this.messageJson(msg, markup),
          upload: { ...(uploaded !== undefined ? { bytes: uploaded } : {}), photo: stored.sha256.slice(0, 16) },
        };
      }
      case 'editMessageText': {
        const { msg } = this.target(p);
        const text = str(p, 'text');
        if (!text) throw new ApiError(400, 'Bad Request: message text is empty');
        if (msg.kind !== 'text') throw new ApiError(400, 'Bad Request: there is no text in the message to edit');
        if (msg.text === text && msg.markup === markupJson) throw new ApiError(400, NOT_MODIFIED);
        msg.text = text;
        msg.markup = markupJson;
        this.edited(msg, now);
        return { result: this.messageJson(msg, markup) };
      }
      case 'editMessageCaption': {
        const { msg } = this.target(p);
        const caption = str(p, 'caption');
        if (msg.kind !== 'photo') throw new ApiError(400, 'Bad Request: there is no caption in the message to edit');
        if (msg.caption === caption && msg.markup === markupJson) throw new ApiError(400, NOT_MODIFIED);
        if (caption === undefined) delete msg.caption;
        else msg.caption = caption;
        msg.markup = markupJson;
        this.edited(msg, now);
        return { result: this.messageJson(msg, markup) };
      }
      case 'editMessageReplyMarkup': {
        const { msg } = this.target(p);
        if (msg.markup === markupJson) throw new ApiError(400, NOT_MODIFIED);
        msg.markup = markupJson;
        this.edited(msg, now);
        return { result: this.messageJson(msg, markup) };
      }
      case 'deleteMessage': {
        const { chat, msg } = this.target(p, true);
        chat.messages.delete(msg.message_id);
        return { result: true };
      }
      case 'getUserProfilePhotos': {
        const userId = int(p, 'user_id');
        if (userId === undefined) throw new ApiError(400, 'Bad Request: user not found');
        const data = this.avatar(userId);
        if (!data) return { result: { total_count: 0, photos: [] } };
        const size = (suffix: string, w: number): Record<string, unknown> => ({
          file_id: `avatar_${userId}_${suffix}`,
          file_unique_id: `av${userId}${suffix}`,
          width: w,
          height: w,
          file_size: data.length,
        });
        return { result: { total_count: 1, photos: [[size('s', 160), size('m', 320), size('b', 640)]] } };
      }
      case 'getFile': {
        const fileId = str(p, 'file_id') ?? '';
        const av = /^avatar_(\d+)_[smb]$/.exec(fileId);
        if (av) {
          const data = this.avatar(Number(av[1]));
          if (data)
            return {
              result: { file_id: fileId, file_unique_id: `f${fileId}`, file_size: data.length, file_path: `profile_photos/${fileId}.jpg` },
            };
        }
        const ph = this.photos.get(fileId);
        if (ph)
          return { result: { file_id: fileId, file_unique_id: ph.file_unique_id, file_size: ph.bytes, file_path: `photos/${fileId}.png` } };
        throw new ApiError(400, 'Bad Request: invalid file_id');
      }
      default:
        throw new ApiError(404, 'Not Found: method not found');
    }
  }

  private edited(msg: StoredMessage, now: number): void {
    msg.edits++;
    msg.edit_date = this.unix();
    msg.atMs = now;
  }

  private avatar(userId: number): Uint8Array | null {
    if (!this.avatarCache.has(userId)) this.avatarCache.set(userId, this.avatarFor(userId));
    return this.avatarCache.get(userId) ?? null;
  }

  private async download(res: ServerResponse, token: string, path: string): Promise<void> {
    this.track('file', res);
    let fault = this.takeFault('file', undefined);
    if (fault?.kind === 'slow') {
      const delayMs = fault.delayMs;
      await new Promise((r) => setTimeout(r, delayMs));
      fault = undefined;
    }
    let data: Uint8Array | undefined;
    const av = /^profile_photos\/avatar_(\d+)_[smb]\.jpg$/.exec(path);
    if (av) data = this.avatar(Number(av[1])) ?? undefined;
    const ph = /^photos\/(.+)\.png$/.exec(path);
    if (ph) data = this.photos.get(ph[1]!)?.data;
    if (!this.tokenOk(token) || !data || fault) {
      this.record({ method: 'file', status: 404, outcome: 'error', description: 'Not Found', applied: false });
      this.send(res, 404, { ok: false, error_code: 404, description: 'Not Found' });
      return;
    }
    this.record({ method: 'file', status: 200, outcome: 'ok', applied: true, ...(av ? { userId: Number(av[1]) } : {}) });
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': data.length });
    res.end(data);
  }

  private async control(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const path = url.pathname.slice('/__stub/'.length);
    const body = req.method === 'POST' ? await this.readBody(req) : Buffer.alloc(0);
    const json = (): unknown => (body.length ? JSON.parse(body.toString('utf8')) : {});
    if (req.method === 'GET' && path === 'stats') return this.send(res, 200, this.stats());
    if (req.method === 'GET' && path === 'boards') return this.send(res, 200, this.boards());
    if (req.method === 'GET' && path === 'bot') return this.send(res, 200, { me: this.me, ...this.settings.snapshot() });
    if (req.method === 'POST' && path === 'webhook/delivery') {
      this.setWebhookDelivery(json() as Parameters<TelegramStub['setWebhookDelivery']>[0]);
      return this.send(res, 200, { ok: true });
    }
    if (req.method === 'GET' && path === 'calls') return this.send(res, 200, this.calls(Number(url.searchParams.get('since') ?? 0)));
    if (req.method === 'POST' && path === 'reset') {
      this.reset();
      return this.send(res, 200, { ok: true });
    }
    if (req.method === 'POST' && path === 'faults') {
      const v = json();
      this.inject(...((Array.isArray(v) ? v : [v]) as FaultRule[]));
      return this.send(res, 200, { ok: true });
    }
    if (req.method === 'POST' && path === 'faults/clear') {
      this.clearFaults();
      return this.send(res, 200, { ok: true });
    }
    const chat = /^chats\/(-?\d+)\/(kick|forget|readd|migrate)$/.exec(path);
    if (req.method === 'POST' && chat) {
      const id = Number(chat[1]);
      if (chat[2] === 'kick') this.kick(id);
      else if (chat[2] === 'forget') this.forget(id);
      else if (chat[2] === 'readd') this.readd(id);
      else this.migrate(id, Number(url.searchParams.get('to')));
      return this.send(res, 200, { ok: true });
    }
    const msgs = /^chats\/(-?\d+)$/.exec(path);
    if (req.method === 'GET' && msgs)
      return this.send(res, 200, { board: this.board(Number(msgs[1])) ?? null, messages: this.messages(Number(msgs[1])) });
    this.send(res, 404, { ok: false, error_code: 404, description: 'Not Found' });
  }
}
