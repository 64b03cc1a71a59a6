/**
 * The game client (`role=game`, Node): declares the game's actions, receives
 * one batch per tick, publishes game state for the viewers' updates, and
 * reconnects with jittered backoff, re-sending its declaration and its latest
 * state after every reconnect (the server keeps neither per socket).
 *
 * @example
 *   const game = new GameClient({ url: 'http://127.0.0.1:8080', channel: 'demo', apiKey });
 *   game.on('batch', (b) => apply(b.actions.vote?.tally));
 *   await game.connect();
 *   game.declare([{ name: 'vote', options: ['a', 'b', 'c'], maxPerTick: 1_000 }]);
 */
import WebSocket from 'ws';
import type { ActionSpec, Batch, ErrorCode, ErrorFrame, GameDeclare, GameState, Welcome } from '@crowdplay/protocol';
import { CHANNEL_ID_RE, CloseCode, CrowdplayError, ERRORS, isCrowdplayError, parseInbound } from '@crowdplay/protocol';
import { backoffDelayMs, buildWsUrl, DEFAULT_BACKOFF, NO_RECONNECT_CLOSE_CODES, TypedEmitter, type BackoffOptions, type ConnectionState } from '@crowdplay/sdk-viewer';

export type { ConnectionState };

/** Extra facts about a received batch frame. */
export interface BatchInfo {
  /** Local wall clock (ms since epoch) when the frame arrived, before parsing. */
  receivedAtMs: number;
  /** Frame length in bytes. */
  bytes: number;
}

/** Events of a {@link GameClient}. */
export interface GameEvents {
  /** Every welcome (first connect and each reconnect; the declaration is re-sent right after). */
  welcome: (welcome: Welcome) => void;
  /** One tick's intents. */
  batch: (batch: Batch, info: BatchInfo) => void;
  /** A connection state change (see the viewer SDK's ConnectionState). */
  state: (state: ConnectionState, previous: ConnectionState) => void;
  /** Socket errors, unusable frames (CP_ERR_PROTO_*), a missed welcome, or a server `error` frame (passed as 2nd argument). */
  error: (err: CrowdplayError, frame?: ErrorFrame) => void;
  /** Every socket close, also the ones followed by a reconnect. */
  close: (code: number, reason: string) => void;
}

/** Options of a {@link GameClient}. */
export interface GameClientOptions {
  /** Base URL of the gateway: `http(s)://host:port[/prefix]` or `ws(s)://…`. */
  url: string;
  /** Channel id (`^[A-Za-z0-9_-]{1,64}$`). */
  channel: string;
  /** The tenant's API key (`cpk_…`). */
  apiKey: string;
  /** Reconnect backoff (full jitter). @defaultValue DEFAULT_BACKOFF of the viewer SDK (250 ms doubling to 30 s) */
  backoff?: Partial<BackoffOptions>;
  /** Reconnect after a drop. @defaultValue true */
  autoReconnect?: boolean;
  /**
   * Close codes after which the client never reconnects. @defaultValue 4001, 4003, 4004.
   * 4009 (another game connection) is retried: after a network drop the server may not have noticed the old socket yet.
   */
  noReconnectCloseCodes?: readonly number[];
  /** An attempt without a welcome this long after it started is abandoned and retried, ms. @defaultValue 10_000 */
  welcomeDeadlineMs?: number;
  /** `close()` resolves at the latest this long after it was called, ms. @defaultValue 5_000 */
  closeDeadlineMs?: number;
  /** Options for `ws` (e.g. `{ localAddress }`). `perMessageDeflate` defaults to false. */
  wsOptions?: WebSocket.ClientOptions;
  /** Path of the WebSocket endpoint under `url`. @defaultValue '/v1/ws' */
  path?: string;
  /** Uniform [0, 1) source for the backoff jitter (tests). @defaultValue Math.random */
  random?: () => number;
}

function isKnownCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(ERRORS, code);
}

/**
 * One game process's connection to a channel. See the module comment.
 */
export class GameClient extends TypedEmitter<GameEvents> {
  readonly #url: string;
  readonly #apiKey: string;
  readonly #channel: string;
  readonly #backoff: BackoffOptions;
  readonly #autoReconnect: boolean;
  readonly #noReconnect: ReadonlySet<number>;
  readonly #welcomeDeadlineMs: number;
  readonly #closeDeadlineMs: number;
  readonly #wsOptions: WebSocket.ClientOptions;
  readonly #random: () => number;

  #state: ConnectionState = 'idle';
  #sock: WebSocket | null = null;
  #attempt = 0;
  #welcome: Welcome | null = null;
  #failure: CrowdplayError | null = null;
  #declared: string | null = null;
  #declaredActions: ActionSpec[] | null = null;
  #gameState: string | null = null;
  #reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  #welcomeTimer: ReturnType<typeof setTimeout> | undefined;
  #connectPromise: Promise<Welcome> | null = null;
  #connectSettle: { resolve: (w: Welcome) => void; reject: (err: CrowdplayError) => void } | null = null;
  #userClosed = false;
  #closePromise: Promise<void> | null = null;
  #closeResolve: (() => void) | null = null;

  /**
   * @throws CrowdplayError CP_ERR_CHANNEL_INVALID_ID, CP_ERR_AUTH_MISSING (empty
   *   apiKey), CP_ERR_CONFIG_INVALID (bad url or numbers)
   */
  constructor(options: GameClientOptions) {
    super();
    if (!CHANNEL_ID_RE.test(options.channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
    if (!options.apiKey) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
    this.#url = buildWsUrl(options.url, options.path ?? '/v1/ws', { role: 'game', channel: options.channel, key: options.apiKey });
    this.#backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    if (!(this.#backoff.initialMs >= 0 && this.#backoff.maxMs >= this.#backoff.initialMs)) {
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['backoff: need 0 ≤ initialMs ≤ maxMs']);
    }
    this.#welcomeDeadlineMs = options.welcomeDeadlineMs ?? 10_000;
    this.#closeDeadlineMs = options.closeDeadlineMs ?? 5_000;
    if (!(this.#welcomeDeadlineMs > 0) || !(this.#closeDeadlineMs >= 0)) {
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['welcomeDeadlineMs must be > 0 and closeDeadlineMs ≥ 0']);
    }
    this.#apiKey = options.apiKey;
    this.#channel = options.channel;
    this.#autoReconnect = options.autoReconnect ?? true;
    this.#noReconnect = new Set(options.noReconnectCloseCodes ?? NO_RECONNECT_CLOSE_CODES);
    this.#wsOptions = { perMessageDeflate: false, ...options.wsOptions };
    this.#random = options.random ?? Math.random;
  }

  /** Current connection state. */
  get state(): ConnectionState {
    return this.#state;
  }

  /** The latest welcome frame, or null before the first one. */
  get welcome(): Welcome | null {
    return this.#welcome;
  }

  /** The channel this client serves. */
  get channel(): string {
    return this.#channel;
  }

  /** The actions last passed to `declare()` (re-sent after every reconnect), or null. */
  get actions(): readonly ActionSpec[] | null {
    return this.#declaredActions;
  }

  /**
   * Connects (once; later calls return the same promise).
   *
   * @returns the first welcome frame; a declaration made before it is sent right after it
   * @throws (rejects) CrowdplayError when the client ends up closed before a welcome:
   *   the server's error code (e.g. CP_ERR_AUTH_INVALID before a 4001),
   *   CP_ERR_CLIENT_WELCOME_TIMEOUT, CP_ERR_CLIENT_CLOSED, or CP_ERR_CLIENT_NOT_OPEN after `close()`
   */
  connect(): Promise<Welcome> {
    if (this.#connectPromise) return this.#connectPromise;
    if (this.#userClosed) return Promise.reject(new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', ['closed']));
    this.#connectPromise = new Promise<Welcome>((resolve, reject) => {
      this.#connectSettle = { resolve, reject };
    });
    this.#setState('connecting');
    this.#openSocket();
    return this.#connectPromise;
  }

  /**
   * Declares the game's actions (replacing any earlier declaration; the
   * server restarts the cumulative tally). Sent now when open, else right
   * after the next welcome; re-sent after every reconnect.
   *
   * @param actions 1–32 ActionSpecs (`{name, maxPerTick, options?, cost?}`, see libs/protocol)
   * @throws CrowdplayError CP_ERR_GAME_INVALID_DECLARE (schema mismatch; nothing is sent or
   *   remembered), CP_ERR_CLIENT_NOT_OPEN after `close()`
   */
  declare(actions: ActionSpec[]): void {
    if (this.#userClosed) throw new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', ['closed']);
    const msg: GameDeclare = { t: 'declare', actions };
    const raw = JSON.stringify(msg);
    try {
      parseInbound('game', raw);
    } catch (err) {
      if (isCrowdplayError(err)) throw new CrowdplayError('CP_ERR_GAME_INVALID_DECLARE', [err.message], { cause: err });
      throw err;
    }
    this.#declared = raw;
    this.#declaredActions = structuredClone(actions);
    if (this.#state === 'open') this.#send(raw);
  }

  /**
   * Publishes game-owned state, shown to viewers in the next update (the
   * server caps its size at MAX_GAME_STATE_BYTES). The latest state is re-sent
   * after every reconnect.
   *
   * @param state a JSON object (not an array)
   * @returns true when it was sent now, false when it waits for the next welcome
   * @throws CrowdplayError CP_ERR_PROTO_INVALID (not a plain object / not JSON-serialisable),
   *   CP_ERR_CLIENT_NOT_OPEN after `close()`
   */
  publishState(state: Record<string, unknown>): boolean {
    if (this.#userClosed) throw new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', ['closed']);
    if (typeof state !== 'object' || state === null || Array.isArray(state)) {
      throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['/state must be a JSON object']);
    }
    const msg: GameState = { t: 'state', state };
    let raw: string;
    try {
      raw = JSON.stringify(msg);
    } catch (err) {
      throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['/state is not JSON-serialisable'], { cause: err });
    }
    this.#gameState = raw;
    if (this.#state !== 'open') return false;
    this.#send(raw);
    return true;
  }

  /**
   * Closes for good: stops reconnecting, rejects an unsettled `connect()` with
   * CP_ERR_CLIENT_CLOSED, closes the socket. Idempotent (same promise); resolves
   * when the socket has closed or after `closeDeadlineMs`.
   */
  close(code: number = CloseCode.normal, reason = 'client closed'): Promise<void> {
    if (this.#closePromise) return this.#closePromise;
    this.#userClosed = true;
    clearTimeout(this.#reconnectTimer);
    clearTimeout(this.#welcomeTimer);
    this.#connectSettle?.reject(new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, ': closed by the client']));
    this.#connectSettle = null;
    const sock = this.#sock;
    if (sock === null) {
      this.#closePromise = Promise.resolve();
    } else {
      this.#closePromise = new Promise<void>((resolve) => {
        const deadline = setTimeout(() => {
          this.#closeResolve = null;
          sock.terminate();
          resolve();
        }, this.#closeDeadlineMs);
        this.#closeResolve = () => {
          clearTimeout(deadline);
          resolve();
        };
      });
      sock.close(code, reason);
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

  #send(raw: string): void {
    const sock = this.#sock;
    if (!sock || sock.readyState !== WebSocket.OPEN) return;
    sock.send(raw, (err) => {
      if (err && this.#sock === sock) this.emit('error', new CrowdplayError('CP_ERR_CLIENT_SOCKET', [err.message], { cause: err }));
    });
  }

  #openSocket(): void {
    this.#failure = null;
    if (this.#userClosed) return;
    const sock = new WebSocket(this.#url, this.#wsOptions);
    this.#sock = sock;
    this.#welcomeTimer = setTimeout(() => {
      if (this.#sock !== sock) return;
      const e = new CrowdplayError('CP_ERR_CLIENT_WELCOME_TIMEOUT', [this.#welcomeDeadlineMs]);
      this.#failure = e;
      this.emit('error', e);
      sock.terminate();
    }, this.#welcomeDeadlineMs);
    sock.on('message', (data, isBinary) => {
      if (this.#sock === sock) this.#onFrame(data, isBinary);
    });
    sock.on('error', (err) => {
      if (this.#sock !== sock || this.#userClosed) return;
      const e = new CrowdplayError('CP_ERR_CLIENT_SOCKET', [err.message], { cause: err });
      if (this.#failure === null && this.#state !== 'open') this.#failure = e;
      this.emit('error', e);
    });
    sock.on('close', (code, reasonBuf) => {
      if (this.#sock !== sock) return;
      this.#sock = null;
      clearTimeout(this.#welcomeTimer);
      const reason = reasonBuf.toString();
      this.emit('close', code, reason);
      if (this.#userClosed) {
        this.#closeResolve?.();
        this.#closeResolve = null;
        return;
      }
      this.#afterDrop(code, reason, this.#noReconnect.has(code));
    });
  }

  #afterDrop(code: number, reason: string, fatal: boolean): void {
    if (fatal || !this.#autoReconnect) {
      const err = this.#failure ?? new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, reason ? `: ${reason}` : '']);
      this.#userClosed = true;
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

  #onFrame(data: WebSocket.RawData, isBinary: boolean): void {
    const receivedAtMs = Date.now();
    if (isBinary) {
      this.emit('error', new CrowdplayError('CP_ERR_PROTO_MALFORMED'));
      return;
    }
    const raw = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
    let msg: unknown;
    try {
      msg = JSON.parse(raw.toString('utf8'));
    } catch {
      this.emit('error', new CrowdplayError('CP_ERR_PROTO_MALFORMED'));
      return;
    }
    if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) {
      this.emit('error', new CrowdplayError('CP_ERR_PROTO_MALFORMED'));
      return;
    }
    const t = (msg as { t?: unknown }).t;
    switch (t) {
      case 'welcome': {
        const w = msg as Welcome;
        if (typeof w.serverTime !== 'number') {
          this.emit('error', new CrowdplayError('CP_ERR_PROTO_INVALID', ['welcome without serverTime']));
          return;
        }
        clearTimeout(this.#welcomeTimer);
        this.#attempt = 0;
        this.#failure = null;
        this.#welcome = w;
        this.#setState('open');
        if (this.#declared !== null) this.#send(this.#declared);
        if (this.#gameState !== null) this.#send(this.#gameState);
        this.emit('welcome', w);
        this.#connectSettle?.resolve(w);
        this.#connectSettle = null;
        return;
      }
      case 'batch': {
        const b = msg as Batch;
        if (typeof b.ev !== 'number' || typeof b.actions !== 'object' || b.actions === null) {
          this.emit('error', new CrowdplayError('CP_ERR_PROTO_INVALID', ['batch without numeric ev / actions object']));
          return;
        }
        this.emit('batch', b, { receivedAtMs, bytes: raw.length });
        return;
      }
      case 'error': {
        const frame = msg as ErrorFrame;
        const err = isKnownCode(frame.code) ? new CrowdplayError(frame.code) : new CrowdplayError('CP_ERR_INTERNAL');
        if (typeof frame.message === 'string') err.message = frame.message;
        this.#failure = err;
        this.emit('error', err, frame);
        return;
      }
      case 'update':
        // a game may be sent its channel's viewer updates; it has no use for them here
        return;
      default:
        this.emit('error', new CrowdplayError('CP_ERR_PROTO_UNKNOWN_TYPE', [String(t).slice(0, 32), 'game']));
    }
  }

  /** For logs: the URL without the API key. */
  override toString(): string {
    return `GameClient(${this.#url.replace(encodeURIComponent(this.#apiKey), '***')})`;
  }
}
