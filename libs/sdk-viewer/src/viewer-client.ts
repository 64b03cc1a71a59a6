/**
 * The viewer client (`role=crowd`): connect, act with act-ack promises,
 * channel updates, resume from the last event id, reconnect with jittered
 * backoff. Runs in browsers (global `WebSocket`) and in Node (pass the `ws`
 * package's `WebSocket` class as `options.WebSocket`); it imports neither
 * `ws` nor Node's `events`.
 *
 * @example
 *   import WebSocket from 'ws';
 *   const viewer = new ViewerClient({ url: 'http://127.0.0.1:8080', channel: 'demo', token, WebSocket });
 *   viewer.on('update', (u) => render(u.tally));
 *   await viewer.connect();
 *   const ack = await viewer.act('pull', 'left'); // { t: 'ack', seq: 1, ok: true, cost: 0 }
 */
import type { ActAck, ChannelUpdate, CrowdAct, ErrorCode, ErrorFrame, Welcome } from '@crowdplay/protocol';
import { CHANNEL_ID_RE, CloseCode, CrowdplayError, ERRORS } from '@crowdplay/protocol';
import { backoffDelayMs, DEFAULT_BACKOFF, type BackoffOptions } from './backoff.ts';
import { TypedEmitter } from './emitter.ts';
import { describeSocketError, WS_OPEN, type WebSocketConstructor, type WebSocketLike } from './socket.ts';

/**
 * Connection state. `idle` before `connect()`; `connecting` until the first
 * welcome; `open` after a welcome; `reconnecting` from a drop until the next
 * welcome (backoff wait and attempts); `closed` for good (by `close()`, a
 * do-not-reconnect close code, or a drop with `autoReconnect: false`).
 */
export type ConnectionState = 'idle' | 'connecting' | 'open' | 'reconnecting' | 'closed';

/** Extra facts about a received frame. */
export interface FrameInfo {
  /** Local wall clock (ms since epoch) when the frame was handed to the SDK, before parsing. */
  receivedAtMs: number;
  /** The frame's text exactly as received (its UTF-8 length is the bytes the server sent). */
  raw: string;
}

/** Events of a {@link ViewerClient}; subscribe with `on(name, listener)`. */
export interface ViewerEvents {
  /** Every welcome (the first one and one per reconnect). */
  welcome: (welcome: Welcome) => void;
  /** A channel update (full state); `lastEventId` is already advanced to `update.ev`. */
  update: (update: ChannelUpdate, info: FrameInfo) => void;
  /** Every act ack, just before the matching `act()` promise resolves. */
  ack: (ack: ActAck) => void;
  /** A connection state change. */
  state: (state: ConnectionState, previous: ConnectionState) => void;
  /**
   * Something went wrong without ending the client: a socket error, a frame
   * the SDK could not use (CP_ERR_PROTO_*), a welcome deadline missed, or an
   * `error` frame from the server (its code when the SDK knows it, else
   * CP_ERR_INTERNAL; the frame is passed as the second argument).
   */
  error: (err: CrowdplayError, frame?: ErrorFrame) => void;
  /** Every socket close (also the ones followed by a reconnect; see `state`). */
  close: (code: number, reason: string) => void;
}

/** Options of a {@link ViewerClient}. */
export interface ViewerClientOptions {
  /** Base URL of the gateway: `http(s)://host:port[/prefix]` or `ws(s)://…`. */
  url: string;
  /** Channel id (`^[A-Za-z0-9_-]{1,64}$`). */
  channel: string;
  /** Viewer token (HS256 JWT signed with the tenant's secret). Either this or `getToken`. */
  token?: string;
  /** Called before every connection attempt (refresh); wins over `token`. */
  getToken?: () => string | Promise<string>;
  /** Resume point: sent as `lastEventId` on the first connect; afterwards the newest `update.ev` seen. */
  lastEventId?: number;
  /** Reconnect backoff (full jitter). @defaultValue {@link DEFAULT_BACKOFF} */
  backoff?: Partial<BackoffOptions>;
  /** Reconnect after a drop. @defaultValue true */
  autoReconnect?: boolean;
  /** Close codes after which the client never reconnects. @defaultValue {@link NO_RECONNECT_CLOSE_CODES} */
  noReconnectCloseCodes?: readonly number[];
  /** A connection attempt without a welcome frame this long after it started is abandoned (and retried), ms. @defaultValue 10_000 */
  welcomeDeadlineMs?: number;
  /** If the server has not finished the close handshake this long after `close()`, `close()` resolves anyway, ms. @defaultValue 5_000 */
  closeDeadlineMs?: number;
  /** WebSocket class. @defaultValue `globalThis.WebSocket` (browsers, Node ≥ 22). In Node 20 pass `ws`' class. */
  WebSocket?: WebSocketConstructor;
  /**
   * Node only: the third constructor argument of `ws`' WebSocket, e.g.
   * `{ localAddress: '127.0.0.2', perMessageDeflate: false }`. Omitted in browsers.
   */
  wsOptions?: object;
  /** Path of the WebSocket endpoint under `url`. @defaultValue '/v1/ws' */
  path?: string;
  /** Uniform [0, 1) source for the backoff jitter (tests). @defaultValue Math.random */
  random?: () => number;
}

/**
 * Close codes that mean "do not reconnect": the credentials or the channel are
 * wrong and a retry would fail the same way (docs/protocol.md, close codes).
 */
export const NO_RECONNECT_CLOSE_CODES: readonly number[] = Object.freeze([CloseCode.unauthorized, CloseCode.forbidden, CloseCode.unknownChannel]);

const DEFAULT_WELCOME_DEADLINE_MS = 10_000;
const DEFAULT_CLOSE_DEADLINE_MS = 5_000;
const DEFAULT_PATH = '/v1/ws';

interface PendingAct {
  resolve: (ack: ActAck) => void;
  reject: (err: CrowdplayError) => void;
}

/** True when `code` is in the error catalogue of this SDK's protocol version. */
function isKnownCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(ERRORS, code);
}

/**
 * Builds the WebSocket URL of an endpoint: `http`→`ws`, `https`→`wss`,
 * `path` appended to the base path, then the query parameters in order.
 *
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID when `base` is not an http(s)/ws(s) URL
 */
export function buildWsUrl(base: string, path: string, params: Record<string, string | number | undefined>): string {
  let u: URL;
  try {
    u = new URL(base);
  } catch (err) {
    throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [`url: not a URL: ${base}`], { cause: err });
  }
  if (u.protocol === 'http:') u.protocol = 'ws:';
  else if (u.protocol === 'https:') u.protocol = 'wss:';
  else if (u.protocol !== 'ws:' && u.protocol !== 'wss:') {
    throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [`url: scheme must be http, https, ws or wss, got ${u.protocol}`]);
  }
  u.pathname = u.pathname.replace(/\/+$/, '') + path;
  u.search = '';
  for (const [k, v] of Object.entries(params)) if (v !== undefined) u.searchParams.set(k, String(v));
  return u.toString();
}

/**
 * One viewer's connection to a channel. See the module comment for an example.
 *
 * Acts are numbered by the client (`seq` 1, 2, … for the client's lifetime);
 * each `act()` promise resolves with the matching act ack (accepted or refused
 * with a code) and rejects with CP_ERR_CLIENT_CLOSED if the socket closes
 * first (an act is never re-sent on the next socket).
 */
export class ViewerClient extends TypedEmitter<ViewerEvents> {
  readonly #url: string;
  readonly #channel: string;
  readonly #token: string | undefined;
  readonly #getToken: (() => string | Promise<string>) | undefined;
  readonly #backoff: BackoffOptions;
  readonly #autoReconnect: boolean;
  readonly #noReconnect: ReadonlySet<number>;
  readonly #welcomeDeadlineMs: number;
  readonly #closeDeadlineMs: number;
  readonly #WS: WebSocketConstructor;
  readonly #wsOptions: object | undefined;
  readonly #path: string;
  readonly #random: () => number;

  #state: ConnectionState = 'idle';
  #sock: WebSocketLike | null = null;
  #seq = 0;
  readonly #pending = new Map<number, PendingAct>();
  #lastEventId: number | undefined;
  #attempt = 0;
  #welcome: Welcome | null = null;
  /** Why the current attempt failed, if known (server error frame, welcome deadline). */
  #failure: CrowdplayError | null = null;
  #reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  #welcomeTimer: ReturnType<typeof setTimeout> | undefined;
  #connectPromise: Promise<Welcome> | null = null;
  #connectSettle: { resolve: (w: Welcome) => void; reject: (err: CrowdplayError) => void } | null = null;
  #userClosed = false;
  #closePromise: Promise<void> | null = null;
  #closeResolve: (() => void) | null = null;

  /**
   * @throws CrowdplayError CP_ERR_CONFIG_INVALID (bad url, no WebSocket class,
   *   bad numbers), CP_ERR_CHANNEL_INVALID_ID, CP_ERR_AUTH_MISSING (neither
   *   `token` nor `getToken`)
   */
  constructor(options: ViewerClientOptions) {
    super();
    if (!CHANNEL_ID_RE.test(options.channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
    if (options.token === undefined && options.getToken === undefined) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
    const WS = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WS) throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['WebSocket: no global WebSocket here; pass the `ws` class as options.WebSocket']);
    this.#path = options.path ?? DEFAULT_PATH;
    buildWsUrl(options.url, this.#path, {}); // validates the URL now rather than on the first connect
    this.#backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    if (!(this.#backoff.initialMs >= 0 && this.#backoff.maxMs >= this.#backoff.initialMs)) {
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['backoff: need 0 ≤ initialMs ≤ maxMs']);
    }
    this.#welcomeDeadlineMs = options.welcomeDeadlineMs ?? DEFAULT_WELCOME_DEADLINE_MS;
    this.#closeDeadlineMs = options.closeDeadlineMs ?? DEFAULT_CLOSE_DEADLINE_MS;
    if (!(this.#welcomeDeadlineMs > 0) || !(this.#closeDeadlineMs >= 0)) {
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['welcomeDeadlineMs must be > 0 and closeDeadlineMs ≥ 0']);
    }
    this.#url = options.url;
    this.#channel = options.channel;
    this.#token = options.token;
    this.#getToken = options.getToken;
    this.#autoReconnect = options.autoReconnect ?? true;
    this.#noReconnect = new Set(options.noReconnectCloseCodes ?? NO_RECONNECT_CLOSE_CODES);
    this.#WS = WS;
    this.#wsOptions = options.wsOptions;
    this.#random = options.random ?? Math.random;
    this.#lastEventId = options.lastEventId;
  }

  /** Current connection state. */
  get state(): ConnectionState {
    return this.#state;
  }

  /** Newest event id seen in an update (or the `lastEventId` option until one arrives). */
  get lastEventId(): number | undefined {
    return this.#lastEventId;
  }

  /** The latest welcome frame, or null before the first one. */
  get welcome(): Welcome | null {
    return this.#welcome;
  }

  /** Acts sent on the current socket and not yet acked. */
  get pendingActs(): number {
    return this.#pending.size;
  }

  /** Bytes queued on the socket and not yet sent (0 when there is no socket). */
  get bufferedAmount(): number {
    return this.#sock?.bufferedAmount ?? 0;
  }

  /**
   * Connects (once; later calls return the same promise).
   *
   * @returns the first welcome frame
   * @throws (rejects) CrowdplayError when the client ends up `closed` before a
   *   welcome: the server's error code if it sent an `error` frame (e.g.
   *   CP_ERR_AUTH_INVALID before a 4001), CP_ERR_CLIENT_WELCOME_TIMEOUT,
   *   CP_ERR_CLIENT_CLOSED (close code in the message), or
   *   CP_ERR_CLIENT_NOT_OPEN when `close()` was called before `connect()`.
   *   With `autoReconnect` on, failed attempts are retried with backoff and
   *   only a do-not-reconnect close code or `close()` rejects.
   */
  connect(): Promise<Welcome> {
    if (this.#connectPromise) return this.#connectPromise;
    if (this.#userClosed) return Promise.reject(new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', ['closed']));
    this.#connectPromise = new Promise<Welcome>((resolve, reject) => {
      this.#connectSettle = { resolve, reject };
    });
    this.#setState('connecting');
    void this.#openSocket();
    return this.#connectPromise;
  }

  /**
   * Sends one intent `{t:'act', seq, action, option?}`.
   *
   * @returns the act ack for this `seq`: `ok: true` (with `cost`, points) or
   *   `ok: false` with a refusal `code` (CP_ERR_INTENT_*). A refusal resolves, it does not reject.
   * @throws (rejects) CrowdplayError CP_ERR_CLIENT_NOT_OPEN when not `open`;
   *   CP_ERR_CLIENT_CLOSED when the socket closes before the ack;
   *   CP_ERR_CLIENT_SOCKET when the send itself throws.
   */
  act(action: string, option?: string): Promise<ActAck> {
    const sock = this.#sock;
    if (this.#state !== 'open' || sock === null || sock.readyState !== WS_OPEN) {
      return Promise.reject(new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', [this.#state]));
    }
    const seq = ++this.#seq;
    const frame: CrowdAct = option === undefined ? { t: 'act', seq, action } : { t: 'act', seq, action, option };
    return new Promise<ActAck>((resolve, reject) => {
      this.#pending.set(seq, { resolve, reject });
      try {
        sock.send(JSON.stringify(frame));
      } catch (err) {
        this.#pending.delete(seq);
        reject(new CrowdplayError('CP_ERR_CLIENT_SOCKET', [err instanceof Error ? err.message : String(err)], { cause: err }));
      }
    });
  }

  /**
   * Closes the client for good: stops reconnecting, rejects pending acts and
   * an unsettled `connect()` with CP_ERR_CLIENT_CLOSED, and closes the socket.
   * Idempotent: every call returns the same promise, which resolves when the
   * socket has closed (or after `closeDeadlineMs`).
   *
   * @param code close code sent to the server (1000 or 3000–4999). @defaultValue 1000
   */
  close(code: number = CloseCode.normal, reason = 'client closed'): Promise<void> {
    if (this.#closePromise) return this.#closePromise;
    this.#userClosed = true;
    clearTimeout(this.#reconnectTimer);
    clearTimeout(this.#welcomeTimer);
    const err = new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, ': closed by the client']);
    this.#rejectPending(err);
    this.#connectSettle?.reject(err);
    this.#connectSettle = null;
    const sock = this.#sock;
    if (sock === null) {
      this.#closePromise = Promise.resolve();
    } else {
      this.#closePromise = new Promise<void>((resolve) => {
        const deadline = setTimeout(() => {
          this.#closeResolve = null;
          resolve();
        }, this.#closeDeadlineMs);
        this.#closeResolve = () => {
          clearTimeout(deadline);
          resolve();
        };
      });
      try {
        sock.close(code, reason);
      } catch {
        this.#sock = null;
        this.#closeResolve?.();
      }
    }
    this.#setState('closed');
    return this.#closePromise;
  }

  #setState(next: ConnectionState): void {
    const prev = this.#state;
    if (prev === next) return;
    this.#state = next;
    this.emit('state', next, prev);
  }

  #rejectPending(err: CrowdplayError): void {
    if (this.#pending.size === 0) return;
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pending) p.reject(err);
  }

  async #resolveToken(): Promise<string> {
    if (this.#getToken) return await this.#getToken();
    return this.#token ?? '';
  }

  async #openSocket(): Promise<void> {
    this.#failure = null;
    let token: string;
    try {
      token = await this.#resolveToken();
    } catch (err) {
      if (this.#userClosed) return;
      const e = err instanceof CrowdplayError ? err : new CrowdplayError('CP_ERR_AUTH_MISSING', [], { cause: err });
      this.#failure = e;
      this.emit('error', e);
      this.#afterDrop(1006, 'getToken failed', false);
      return;
    }
    if (this.#userClosed) return;
    const url = buildWsUrl(this.#url, this.#path, {
      role: 'crowd',
      channel: this.#channel,
      token,
      lastEventId: this.#lastEventId,
    });
    let sock: WebSocketLike;
    try {
      sock = this.#wsOptions === undefined ? new this.#WS(url) : new this.#WS(url, undefined, this.#wsOptions);
    } catch (err) {
      const e = new CrowdplayError('CP_ERR_CLIENT_SOCKET', [err instanceof Error ? err.message : String(err)], { cause: err });
      this.#failure = e;
      this.emit('error', e);
      this.#afterDrop(1006, 'WebSocket constructor failed', false);
      return;
    }
    this.#sock = sock;
    this.#welcomeTimer = setTimeout(() => {
      if (this.#sock !== sock) return;
      const e = new CrowdplayError('CP_ERR_CLIENT_WELCOME_TIMEOUT', [this.#welcomeDeadlineMs]);
      this.#failure = e;
      this.emit('error', e);
      try {
        sock.close(CloseCode.normal, 'no welcome');
      } catch {
        // a CONNECTING socket may refuse close() in some engines; the close event still follows
      }
    }, this.#welcomeDeadlineMs);
    sock.onmessage = (ev) => {
      if (this.#sock === sock) this.#onFrame(ev.data);
    };
    sock.onerror = (ev) => {
      if (this.#sock !== sock || this.#userClosed) return;
      const e = new CrowdplayError('CP_ERR_CLIENT_SOCKET', [describeSocketError(ev)]);
      if (this.#failure === null && this.#state !== 'open') this.#failure = e; // e.g. refused, or HTTP 429/503 instead of an upgrade
      this.emit('error', e);
    };
    sock.onclose = (ev) => {
      if (this.#sock !== sock) return;
      this.#sock = null;
      clearTimeout(this.#welcomeTimer);
      this.#rejectPending(new CrowdplayError('CP_ERR_CLIENT_CLOSED', [ev.code, ev.reason ? `: ${ev.reason}` : '']));
      this.emit('close', ev.code, ev.reason);
      if (this.#userClosed) {
        this.#closeResolve?.();
        this.#closeResolve = null;
        return;
      }
      this.#afterDrop(ev.code, ev.reason, this.#noReconnect.has(ev.code));
    };
  }

  /** After a failed attempt or a dropped socket: reconnect with backoff, or end. */
  #afterDrop(code: number, reason: string, fatal: boolean): void {
    if (this.#userClosed) return;
    if (fatal || !this.#autoReconnect) {
      const err = this.#failure ?? new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, reason ? `: ${reason}` : '']);
      this.#userClosed = true; // nothing will reopen this client
      this.#closePromise = Promise.resolve();
      this.#setState('closed');
      this.#connectSettle?.reject(err);
      this.#connectSettle = null;
      return;
    }
    this.#setState(this.#connectSettle ? 'connecting' : 'reconnecting');
    const delayMs = backoffDelayMs(this.#attempt++, this.#backoff, this.#random);
    this.#reconnectTimer = setTimeout(() => {
      this.#reconnectTimer = undefined;
      void this.#openSocket();
    }, delayMs);
  }

  #protoError(code: ErrorCode, args: readonly unknown[]): void {
    this.emit('error', new CrowdplayError(code, args));
  }

  #onFrame(data: unknown): void {
    const receivedAtMs = Date.now();
    if (typeof data !== 'string') {
      this.#protoError('CP_ERR_PROTO_MALFORMED', []);
      return;
    }
    let msg: unknown;
    try {
      msg = JSON.parse(data);
    } catch {
      this.#protoError('CP_ERR_PROTO_MALFORMED', []);
      return;
    }
    if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) {
      this.#protoError('CP_ERR_PROTO_MALFORMED', []);
      return;
    }
    const t = (msg as { t?: unknown }).t;
    switch (t) {
      case 'welcome':
        this.#onWelcome(msg as Welcome);
        return;
      case 'ack':
        this.#onAck(msg as ActAck);
        return;
      case 'update':
        this.#onUpdate(msg as ChannelUpdate, { receivedAtMs, raw: data });
        return;
      case 'error':
        this.#onServerError(msg as ErrorFrame);
        return;
      default:
        this.#protoError('CP_ERR_PROTO_UNKNOWN_TYPE', [String(t).slice(0, 32), 'crowd']);
    }
  }

  #onWelcome(w: Welcome): void {
    if (typeof w.serverTime !== 'number' || typeof w.channel !== 'string') {
      this.#protoError('CP_ERR_PROTO_INVALID', ['welcome without serverTime/channel']);
      return;
    }
    clearTimeout(this.#welcomeTimer);
    this.#attempt = 0;
    this.#failure = null;
    this.#welcome = w;
    this.#setState('open');
    this.emit('welcome', w);
    this.#connectSettle?.resolve(w);
    this.#connectSettle = null;
  }

  #onAck(ack: ActAck): void {
    if (typeof ack.seq !== 'number' || typeof ack.ok !== 'boolean') {
      this.#protoError('CP_ERR_PROTO_INVALID', ['ack without numeric seq / boolean ok']);
      return;
    }
    const p = this.#pending.get(ack.seq);
    if (!p) {
      this.#protoError('CP_ERR_PROTO_INVALID', [`ack for unknown seq ${ack.seq}`]);
      return;
    }
    this.#pending.delete(ack.seq);
    this.emit('ack', ack);
    p.resolve(ack);
  }

  #onUpdate(u: ChannelUpdate, info: FrameInfo): void {
    if (typeof u.ev !== 'number' || typeof u.at !== 'number') {
      this.#protoError('CP_ERR_PROTO_INVALID', ['update without numeric ev/at']);
      return;
    }
    if (this.#lastEventId === undefined || u.ev > this.#lastEventId) this.#lastEventId = u.ev;
    this.emit('update', u, info);
  }

  #onServerError(frame: ErrorFrame): void {
    const err = isKnownCode(frame.code) ? new CrowdplayError(frame.code, []) : new CrowdplayError('CP_ERR_INTERNAL', []);
    if (typeof frame.message === 'string') err.message = frame.message;
    this.#failure = err;
    this.emit('error', err, frame);
  }
}
