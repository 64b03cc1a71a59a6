/**
 * The connection lifecycle shared by the viewer client (this package) and the
 * game client (libs/sdk-game): open a socket, wait for the welcome frame
 * within a deadline, keep the connection state machine, report unusable
 * frames and server `error` frames, reconnect with jittered backoff unless the
 * close code says not to, and close idempotently.
 *
 * Internal to the SDKs (exported for @crowdplay/sdk-game only): the clients
 * own their public events; this class reports through {@link ReconnectingSocketHooks}
 * and leaves every frame other than `welcome` and `error` to them.
 *
 * Browser-safe: it imports neither `ws` nor Node built-ins; the WebSocket
 * class is injected (the browser's global one, or `ws`' class in Node).
 */
import type { ErrorCode, ErrorFrame, Welcome } from '@crowdplay/protocol';
import { CloseCode, CrowdplayError, ERRORS } from '@crowdplay/protocol';
import { backoffDelayMs, DEFAULT_BACKOFF, type BackoffOptions } from './backoff.ts';
import { describeSocketError, type WebSocketConstructor, type WebSocketLike } from './socket.ts';

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

/**
 * Close codes that mean "do not reconnect": the credentials or the channel are
 * wrong and a retry would fail the same way (docs/protocol.md, close codes).
 */
export const NO_RECONNECT_CLOSE_CODES: readonly number[] = Object.freeze([
  CloseCode.unauthorized,
  CloseCode.forbidden,
  CloseCode.unknownChannel,
]);

/** Default of `welcomeDeadlineMs`, ms. */
export const DEFAULT_WELCOME_DEADLINE_MS = 10_000;
/** Default of `closeDeadlineMs`, ms. */
export const DEFAULT_CLOSE_DEADLINE_MS = 5_000;

/** Options of a {@link ReconnectingSocket}; the clients pass their own options through. */
export interface ReconnectingSocketOptions<S extends WebSocketLike> {
  /**
   * The URL of the next attempt, asked before every attempt (fresh token,
   * resume point). A rejection or throw fails that attempt like a refused
   * connection (reported as given when it is a CrowdplayError, else as
   * CP_ERR_CLIENT_SOCKET) and is retried with backoff.
   */
  url: () => string | Promise<string>;
  /** WebSocket class (browser global or `ws`' class). */
  WebSocket: WebSocketConstructor<S>;
  /** Third constructor argument (Node `ws` options); omitted from the call when undefined. */
  wsOptions?: object;
  /** Reconnect backoff (full jitter). @defaultValue {@link DEFAULT_BACKOFF} (250 ms doubling to 30 s) */
  backoff?: Partial<BackoffOptions>;
  /** Reconnect after a drop. @defaultValue true */
  autoReconnect?: boolean;
  /** Close codes after which it never reconnects. @defaultValue {@link NO_RECONNECT_CLOSE_CODES} */
  noReconnectCloseCodes?: readonly number[];
  /**
   * Close codes that end the connection when they close an attempt before the
   * first welcome (`connect()` rejects), and are retried like any drop after it.
   * @defaultValue none
   */
  noRetryBeforeWelcomeCloseCodes?: readonly number[];
  /** An attempt without a welcome this long after the socket was created is abandoned (and retried), ms. @defaultValue 10_000 */
  welcomeDeadlineMs?: number;
  /**
   * `connect()` rejects with CP_ERR_CLIENT_WELCOME_TIMEOUT (the last attempt's
   * failure as `cause`) and the connection ends when no welcome arrived this
   * long after it was called, across attempts, ms; Infinity: no deadline.
   * Later drops are not limited. @defaultValue Infinity
   */
  connectTimeoutMs?: number;
  /** `close()` resolves at the latest this long after it was called, ms. @defaultValue 5_000 */
  closeDeadlineMs?: number;
  /** Uniform [0, 1) source for the backoff jitter (tests). @defaultValue Math.random */
  random?: () => number;
  /**
   * Drops a socket at once, without the close handshake (`ws`' `terminate()`).
   * When given, it is used at the welcome deadline and at the close deadline;
   * without it the welcome deadline sends close(1000, 'no welcome') and the
   * close deadline just stops waiting.
   */
  terminate?: (sock: S) => void;
}

/** How a {@link ReconnectingSocket} reports to its client; every hook is called synchronously. */
export interface ReconnectingSocketHooks {
  /** What is wrong with a welcome frame (reported as CP_ERR_PROTO_INVALID, the frame ignored), or undefined when it is usable. */
  checkWelcome(welcome: Welcome): string | undefined;
  /** A state change. */
  onState(state: ConnectionState, previous: ConnectionState): void;
  /** Every accepted welcome: called after the state became `open` and before `connect()` resolves. */
  onWelcome(welcome: Welcome): void;
  /** Every JSON object frame other than `welcome` and `error` (`t` is its unchecked type field). */
  onFrame(t: unknown, msg: object, info: FrameInfo): void;
  /** A socket error, an unusable frame (CP_ERR_PROTO_*), a missed welcome, a failed attempt, or a server `error` frame (passed as 2nd argument). */
  onError(err: CrowdplayError, frame?: ErrorFrame): void;
  /** Every socket close, also the ones followed by a reconnect; called before the reconnect-or-end decision. */
  onClose(code: number, reason: string): void;
}

/** True when `code` is in the error catalogue of this SDK's protocol version. */
function isKnownCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(ERRORS, code);
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * One logical connection that survives socket drops. See the module comment.
 *
 * @typeParam S the socket type the injected WebSocket class creates (the
 *   game client uses `ws`' own type to send with a completion callback)
 */
export class ReconnectingSocket<S extends WebSocketLike = WebSocketLike> {
  readonly #hooks: ReconnectingSocketHooks;
  readonly #url: () => string | Promise<string>;
  readonly #WS: WebSocketConstructor<S>;
  readonly #wsOptions: object | undefined;
  readonly #backoff: BackoffOptions;
  readonly #autoReconnect: boolean;
  readonly #noReconnect: ReadonlySet<number>;
  readonly #noRetryBeforeWelcome: ReadonlySet<number>;
  readonly #welcomeDeadlineMs: number;
  readonly #connectTimeoutMs: number;
  readonly #closeDeadlineMs: number;
  readonly #random: () => number;
  readonly #terminate: ((sock: S) => void) | undefined;

  #state: ConnectionState = 'idle';
  #sock: S | null = null;
  #attempt = 0;
  #welcome: Welcome | null = null;
  /** Why the current attempt failed, if known (server error frame, welcome deadline, socket error). */
  #failure: CrowdplayError | null = null;
  /** The failure of the latest attempt that failed since the last welcome (kept while the next attempt runs). */
  #lastFailure: CrowdplayError | null = null;
  #reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  #welcomeTimer: ReturnType<typeof setTimeout> | undefined;
  #connectTimer: ReturnType<typeof setTimeout> | undefined;
  #connectPromise: Promise<Welcome> | null = null;
  #connectSettle: { resolve: (w: Welcome) => void; reject: (err: CrowdplayError) => void } | null = null;
  /** Set by `close()` or a final drop: nothing will open a socket again. */
  #ended = false;
  #closePromise: Promise<void> | null = null;
  #closeResolve: (() => void) | null = null;

  /**
   * @throws CrowdplayError CP_ERR_CONFIG_INVALID (backoff not 0 ≤ initialMs ≤ maxMs,
   *   welcomeDeadlineMs or connectTimeoutMs not > 0, closeDeadlineMs not ≥ 0)
   */
  constructor(options: ReconnectingSocketOptions<S>, hooks: ReconnectingSocketHooks) {
    this.#backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    if (!(this.#backoff.initialMs >= 0 && this.#backoff.maxMs >= this.#backoff.initialMs)) {
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['backoff: need 0 ≤ initialMs ≤ maxMs']);
    }
    this.#welcomeDeadlineMs = options.welcomeDeadlineMs ?? DEFAULT_WELCOME_DEADLINE_MS;
    this.#closeDeadlineMs = options.closeDeadlineMs ?? DEFAULT_CLOSE_DEADLINE_MS;
    if (!(this.#welcomeDeadlineMs > 0) || !(this.#closeDeadlineMs >= 0)) {
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['welcomeDeadlineMs must be > 0 and closeDeadlineMs ≥ 0']);
    }
    this.#connectTimeoutMs = options.connectTimeoutMs ?? Infinity;
    if (!(this.#connectTimeoutMs > 0)) throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['connectTimeoutMs must be > 0']);
    this.#noRetryBeforeWelcome = new Set(options.noRetryBeforeWelcomeCloseCodes ?? []);
    this.#hooks = hooks;
    this.#url = options.url;
    this.#WS = options.WebSocket;
    this.#wsOptions = options.wsOptions;
    this.#autoReconnect = options.autoReconnect ?? true;
    this.#noReconnect = new Set(options.noReconnectCloseCodes ?? NO_RECONNECT_CLOSE_CODES);
    this.#random = options.random ?? Math.random;
    this.#terminate = options.terminate;
  }

  /** Current connection state. */
  get state(): ConnectionState {
    return this.#state;
  }

  /** The latest welcome frame, or null before the first one. */
  get welcome(): Welcome | null {
    return this.#welcome;
  }

  /** The current socket (any readyState; null between attempts and after the end). */
  get socket(): S | null {
    return this.#sock;
  }

  /** True once `close()` was called or a drop ended the connection for good. */
  get ended(): boolean {
    return this.#ended;
  }

  /**
   * Connects (once; later calls return the same promise).
   *
   * @returns the first welcome frame
   * @throws (rejects) CrowdplayError when it ends up `closed` before a welcome:
   *   the server's error code if it sent an `error` frame, the last attempt's
   *   failure (CP_ERR_CLIENT_WELCOME_TIMEOUT, CP_ERR_CLIENT_SOCKET, …),
   *   CP_ERR_CLIENT_WELCOME_TIMEOUT after `connectTimeoutMs`,
   *   CP_ERR_CLIENT_CLOSED (close code in the message), or CP_ERR_CLIENT_NOT_OPEN
   *   when `close()` was called before `connect()`
   */
  connect(): Promise<Welcome> {
    if (this.#connectPromise) return this.#connectPromise;
    if (this.#ended) return Promise.reject(new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', ['closed']));
    this.#connectPromise = new Promise<Welcome>((resolve, reject) => {
      this.#connectSettle = { resolve, reject };
    });
    this.#setState('connecting');
    if (Number.isFinite(this.#connectTimeoutMs)) this.#connectTimer = setTimeout(() => this.#connectTimedOut(), this.#connectTimeoutMs);
    this.#openSocket();
    return this.#connectPromise;
  }

  /**
   * Closes for good: stops reconnecting, rejects an unsettled `connect()` with
   * CP_ERR_CLIENT_CLOSED, closes the socket. Idempotent (same promise); resolves
   * when the socket has closed or after `closeDeadlineMs`.
   *
   * @param code close code sent to the server (1000 or 3000–4999)
   */
  close(code: number = CloseCode.normal, reason = 'client closed'): Promise<void> {
    if (this.#closePromise) return this.#closePromise;
    this.#ended = true;
    clearTimeout(this.#reconnectTimer);
    clearTimeout(this.#welcomeTimer);
    clearTimeout(this.#connectTimer);
    this.#connectSettle?.reject(new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, ': closed by the client']));
    this.#connectSettle = null;
    const sock = this.#sock;
    if (sock === null) {
      this.#closePromise = Promise.resolve();
    } else {
      this.#closePromise = new Promise<void>((resolve) => {
        const deadline = setTimeout(() => {
          this.#closeResolve = null;
          this.#terminate?.(sock);
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
        this.#terminate?.(sock);
        this.#closeResolve?.();
      }
    }
    this.#setState('closed');
    return this.#closePromise;
  }

  /** `connectTimeoutMs` passed without a welcome: `connect()` rejects (the last failure as cause) and the connection ends. */
  #connectTimedOut(): void {
    const settle = this.#connectSettle;
    if (settle === null || this.#ended) return;
    const failure = this.#failure ?? this.#lastFailure;
    const err = new CrowdplayError('CP_ERR_CLIENT_WELCOME_TIMEOUT', [this.#connectTimeoutMs], failure ? { cause: failure } : undefined);
    if (failure) err.message += ` (last attempt: ${failure.code}: ${failure.message})`;
    this.#connectSettle = null;
    settle.reject(err);
    void this.close(CloseCode.normal, 'connect timeout');
  }

  #setState(next: ConnectionState): void {
    const prev = this.#state;
    if (prev === next) return;
    this.#state = next;
    this.#hooks.onState(next, prev);
  }

  #protoError(code: ErrorCode, args: readonly unknown[] = []): void {
    this.#hooks.onError(new CrowdplayError(code, args));
  }

  #openSocket(): void {
    this.#failure = null;
    if (this.#ended) return;
    let url: string | Promise<string>;
    try {
      url = this.#url();
    } catch (err) {
      this.#attemptFailed(err, 'no URL');
      return;
    }
    if (typeof url === 'string') {
      this.#openUrl(url);
      return;
    }
    url.then(
      (u) => {
        if (!this.#ended) this.#openUrl(u);
      },
      (err: unknown) => {
        if (!this.#ended) this.#attemptFailed(err, 'no URL');
      },
    );
  }

  /** An attempt that never got a socket: report, then retry with backoff or end. */
  #attemptFailed(err: unknown, reason: string): void {
    const e = err instanceof CrowdplayError ? err : new CrowdplayError('CP_ERR_CLIENT_SOCKET', [errorText(err)], { cause: err });
    this.#failure = e;
    this.#hooks.onError(e);
    this.#afterDrop(1006, reason, false);
  }

  #openUrl(url: string): void {
    let sock: S;
    try {
      sock = this.#wsOptions === undefined ? new this.#WS(url) : new this.#WS(url, undefined, this.#wsOptions);
    } catch (err) {
      this.#attemptFailed(new CrowdplayError('CP_ERR_CLIENT_SOCKET', [errorText(err)], { cause: err }), 'WebSocket constructor failed');
      return;
    }
    this.#sock = sock;
    this.#welcomeTimer = setTimeout(() => {
      if (this.#sock !== sock) return;
      const e = new CrowdplayError('CP_ERR_CLIENT_WELCOME_TIMEOUT', [this.#welcomeDeadlineMs]);
      this.#failure = e;
      this.#hooks.onError(e);
      if (this.#terminate) {
        this.#terminate(sock);
        return;
      }
      try {
        sock.close(CloseCode.normal, 'no welcome');
      } catch {
        // a CONNECTING socket may refuse close() in some engines; the close event still follows
      }
    }, this.#welcomeDeadlineMs);
    sock.onmessage = (ev) => {
      if (this.#sock === sock) this.#onMessage(ev.data);
    };
    sock.onerror = (ev) => {
      if (this.#sock !== sock || this.#ended) return;
      const cause = typeof ev === 'object' && ev !== null ? (ev as { error?: unknown }).error : undefined; // `ws` passes the Error
      const e = new CrowdplayError('CP_ERR_CLIENT_SOCKET', [describeSocketError(ev)], cause instanceof Error ? { cause } : undefined);
      if (this.#failure === null && this.#state !== 'open') this.#failure = e; // e.g. refused, or HTTP 429/503 instead of an upgrade
      this.#hooks.onError(e);
    };
    sock.onclose = (ev) => {
      if (this.#sock !== sock) return;
      this.#sock = null;
      clearTimeout(this.#welcomeTimer);
      this.#hooks.onClose(ev.code, ev.reason);
      if (this.#ended) {
        this.#closeResolve?.();
        this.#closeResolve = null;
        return;
      }
      const fatal = this.#noReconnect.has(ev.code) || (this.#welcome === null && this.#noRetryBeforeWelcome.has(ev.code));
      this.#afterDrop(ev.code, ev.reason, fatal);
    };
  }

  /** After a failed attempt or a dropped socket: reconnect with backoff, or end. */
  #afterDrop(code: number, reason: string, fatal: boolean): void {
    if (this.#ended) return;
    if (this.#failure) this.#lastFailure = this.#failure;
    if (fatal || !this.#autoReconnect) {
      const err = this.#failure ?? new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, reason ? `: ${reason}` : '']);
      this.#ended = true;
      clearTimeout(this.#connectTimer);
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
      this.#openSocket();
    }, delayMs);
  }

  #onMessage(data: unknown): void {
    const receivedAtMs = Date.now();
    if (typeof data !== 'string') {
      this.#protoError('CP_ERR_PROTO_MALFORMED'); // binary frame
      return;
    }
    let msg: unknown;
    try {
      msg = JSON.parse(data);
    } catch {
      this.#protoError('CP_ERR_PROTO_MALFORMED');
      return;
    }
    if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) {
      this.#protoError('CP_ERR_PROTO_MALFORMED');
      return;
    }
    const t = (msg as { t?: unknown }).t;
    if (t === 'welcome') this.#onWelcome(msg as Welcome);
    else if (t === 'error') this.#onServerError(msg as ErrorFrame);
    else this.#hooks.onFrame(t, msg, { receivedAtMs, raw: data });
  }

  #onWelcome(w: Welcome): void {
    const problem = this.#hooks.checkWelcome(w);
    if (problem !== undefined) {
      this.#protoError('CP_ERR_PROTO_INVALID', [problem]);
      return;
    }
    clearTimeout(this.#welcomeTimer);
    clearTimeout(this.#connectTimer);
    this.#attempt = 0;
    this.#failure = null;
    this.#lastFailure = null;
    this.#welcome = w;
    this.#setState('open');
    this.#hooks.onWelcome(w);
    this.#connectSettle?.resolve(w);
    this.#connectSettle = null;
  }

  /**
   * A server `error` frame: its code when known (else CP_ERR_INTERNAL) and its
   * message; the reason for a following close, unless it answers a game
   * request (`ref`).
   */
  #onServerError(frame: ErrorFrame): void {
    const err = isKnownCode(frame.code) ? new CrowdplayError(frame.code) : new CrowdplayError('CP_ERR_INTERNAL');
    if (typeof frame.message === 'string') err.message = frame.message;
    if (frame.ref === undefined) this.#failure = err;
    this.#hooks.onError(err, frame);
  }
}
