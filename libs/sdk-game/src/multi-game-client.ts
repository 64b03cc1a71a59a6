/**
 * The multi-channel game client (`role=game&multi=1`, Node): one connection serving many channels, such as every
 * Telegram chat of the tenant's bot (docs/protocol.md "Multi-channel games"). It attaches its channels (a list, or
 * `chats: true` for every chat of the tenant, new ones included), declares once for all of them (or per channel),
 * receives batches tagged by channel, publishes state and runs rounds per channel. After every reconnect it attaches
 * again, resuming each channel from the newest batch `ev` it saw there, then re-sends its declarations and the
 * latest state of each channel.
 *
 * @example
 *   const game = new MultiGameClient({ url: 'http://127.0.0.1:8080', apiKey, chats: true });
 *   game.declare([{ name: 'vote', options: ['a', 'b'], maxPerTick: 100 }]);
 *   game.on('batch', (b) => tally(b.channel, b.actions.vote?.tally));
 *   await game.connect();
 *   await game.openRound({ channel: 'tg123', round: 'r1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 30_000 });
 */
import WebSocket from 'ws';
import type {
  ActionSpec,
  AttachedFrame,
  Batch,
  ChannelUpdate,
  DetachedFrame,
  ErrorFrame,
  GameDeclare,
  GameInbound,
  ResultFrame,
  ResyncFrame,
  RoundFrame,
  RoundView,
  Welcome,
} from '@crowdplay/protocol';
import {
  CHANNEL_ID_RE,
  CloseCode,
  CrowdplayError,
  GAME_ATTACH_MAX,
  isCrowdplayError,
  isRetryable,
  parseInbound,
} from '@crowdplay/protocol';
import {
  backoffDelayMs,
  buildWsUrl,
  DEFAULT_BACKOFF,
  ReconnectingSocket,
  TypedEmitter,
  WS_OPEN,
  type BackoffOptions,
  type ConnectionState,
  type FrameInfo,
} from '@crowdplay/sdk-viewer';
import {
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_REQUEST_TIMEOUT_MS,
  DEFAULT_RETRY_DEADLINE_MS,
  GAME_FRAME_MAX_BYTES,
  type BatchInfo,
  type DeclareOptions,
  type OpenRoundOptions,
} from './game-client.ts';
import { PendingRequests } from './pending.ts';

/** Events of a {@link MultiGameClient}. */
export interface MultiGameEvents {
  /** Every welcome (first connect and each reconnect; the channels are attached again right after). */
  welcome: (welcome: Welcome) => void;
  /** Channels now served (answers to attach, and each chat attached later by `chats`), and those refused with why. */
  attached: (channels: string[], refused: NonNullable<AttachedFrame['refused']>) => void;
  /** One tick's intents of one channel (`batch.channel`). */
  batch: (batch: Batch, info: BatchInfo) => void;
  /** The gateway could not replay what `batch.channel` missed: the `snapshot` event for that channel follows. */
  resync: (frame: ResyncFrame) => void;
  /** A channel's current update, after a `resync` of it. */
  snapshot: (update: ChannelUpdate) => void;
  /** A round of `channel` changed state (locked, settled, cancelled). */
  round: (channel: string, round: RoundView) => void;
  state: (state: ConnectionState, previous: ConnectionState) => void;
  /** Socket errors, unusable frames, or a server `error` frame not answering a pending request (its `channel` says where). */
  error: (err: CrowdplayError, frame?: ErrorFrame) => void;
  close: (code: number, reason: string) => void;
}

/** Options of a {@link MultiGameClient}. */
export interface MultiGameClientOptions {
  /** Base URL of the gateway: `http(s)://host:port[/prefix]` or `ws(s)://…`. */
  url: string;
  /** The tenant's API key (`cpk_…`). */
  apiKey: string;
  /** Channels to serve (each `^[A-Za-z0-9_-]{1,64}$`); more can be attached later with `attach`. */
  channels?: string[];
  /** Serve every Telegram chat channel of the tenant, and each new one as it appears. @defaultValue false */
  chats?: boolean;
  /** Resume points by channel for the first connect (the newest batch `ev` applied there). */
  lastEventIds?: Record<string, number>;
  backoff?: Partial<BackoffOptions>;
  autoReconnect?: boolean;
  connectTimeoutMs?: number;
  welcomeDeadlineMs?: number;
  closeDeadlineMs?: number;
  wsOptions?: WebSocket.ClientOptions;
  /** @defaultValue '/v1/ws' */
  path?: string;
  random?: () => number;
  /** How long a request waits for its answer, ms. @defaultValue DEFAULT_REQUEST_TIMEOUT_MS */
  requestTimeoutMs?: number;
  /** How long a round request refused with a retryable code is sent again, ms. @defaultValue DEFAULT_RETRY_DEADLINE_MS */
  retryDeadlineMs?: number;
  /**
   * Largest declaration or state frame sent, bytes (UTF-8): one over it is refused before it is sent or kept, as
   * `GameClient`'s `maxFrameBytes` (the gateway closes a socket with 1009 over its frame limit, and a frame kept for
   * reconnects would close every one). @defaultValue GAME_FRAME_MAX_BYTES (65,536)
   */
  maxFrameBytes?: number;
}

/** A round request: the `round.*` frame without `t`, `ref`; `channel` required. */
type RoundRequest = { t: 'round.open' | 'round.settle' | 'round.cancel' } & Record<string, unknown>;

/**
 * One game process's connection to many channels. See the module comment. Round frames missed while disconnected
 * are not reconciled here (unlike `GameClient`): after a reconnect, a channel's `resync`/`snapshot` or its next
 * `update` lists its rounds.
 */
export class MultiGameClient extends TypedEmitter<MultiGameEvents> {
  readonly #apiKey: string;
  readonly #url: string;
  readonly #conn: ReconnectingSocket<WebSocket>;
  /** Channels asked for (attached again after every reconnect). */
  readonly #wanted = new Set<string>();
  #chats: boolean;
  /** Channels the server attached on this connection. */
  readonly #attached = new Set<string>();
  readonly #lastEventIds = new Map<string, number>();
  #classDeclare: string | null = null;
  readonly #declares = new Map<string, string>();
  readonly #states = new Map<string, string>();
  readonly #retryDeadlineMs: number;
  readonly #maxFrameBytes: number;
  readonly #retryBackoff: BackoffOptions;
  readonly #random: () => number;
  #nextRef = 0;
  readonly #pending: PendingRequests<ResultFrame | AttachedFrame | DetachedFrame>;

  /** @throws CrowdplayError CP_ERR_CHANNEL_INVALID_ID, CP_ERR_AUTH_MISSING, CP_ERR_CONFIG_INVALID */
  constructor(options: MultiGameClientOptions) {
    super();
    if (!options.apiKey) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
    for (const ch of options.channels ?? []) {
      if (!CHANNEL_ID_RE.test(ch)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
      this.#wanted.add(ch);
    }
    for (const [ch, ev] of Object.entries(options.lastEventIds ?? {})) {
      if (!CHANNEL_ID_RE.test(ch) || !(Number.isSafeInteger(ev) && ev >= 0))
        throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['lastEventIds: channel ids to non-negative integers']);
      this.#lastEventIds.set(ch, ev);
    }
    this.#chats = options.chats === true;
    const requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    if (!(requestTimeoutMs > 0)) throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['requestTimeoutMs must be > 0']);
    this.#pending = new PendingRequests(requestTimeoutMs);
    this.#maxFrameBytes = options.maxFrameBytes ?? GAME_FRAME_MAX_BYTES;
    if (!(Number.isSafeInteger(this.#maxFrameBytes) && this.#maxFrameBytes > 0))
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['maxFrameBytes must be a positive integer']);
    this.#retryDeadlineMs = options.retryDeadlineMs ?? DEFAULT_RETRY_DEADLINE_MS;
    this.#retryBackoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    this.#random = options.random ?? Math.random;
    this.#apiKey = options.apiKey;
    const url = buildWsUrl(options.url, options.path ?? '/v1/ws', { role: 'game', multi: 1, key: options.apiKey });
    this.#url = url;
    this.#conn = new ReconnectingSocket<WebSocket>(
      {
        ...options,
        connectTimeoutMs: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
        url: () => url,
        WebSocket,
        wsOptions: { perMessageDeflate: false, ...options.wsOptions },
        terminate: (sock) => sock.terminate(),
      },
      {
        checkWelcome: (w) => (w.multi !== true ? 'welcome of a single-channel socket' : undefined),
        onState: (state, previous) => this.emit('state', state, previous),
        onWelcome: (w) => {
          this.#attached.clear();
          if (this.#classDeclare !== null) this.#send(this.#classDeclare);
          void this.#attachWanted();
          this.emit('welcome', w);
        },
        onFrame: (t, msg, info) => this.#onFrame(t, msg, info),
        onError: (err, frame) => this.#onError(err, frame),
        onClose: (code, reason) => {
          this.#pending.rejectAll(new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, reason ? `: ${reason}` : '']));
          this.emit('close', code, reason);
        },
      },
    );
  }

  /** Connects (once); the channels are attached right after each welcome. @throws (rejects) as `GameClient.connect` */
  connect(): Promise<Welcome> {
    return this.#conn.connect();
  }

  get state(): ConnectionState {
    return this.#conn.state;
  }

  /** Channels attached on the current connection. */
  get attached(): readonly string[] {
    return [...this.#attached];
  }

  /** The newest batch `ev` received per channel: the resume points of the next reconnect. */
  get lastEventIds(): ReadonlyMap<string, number> {
    return this.#lastEventIds;
  }

  /**
   * Attaches more channels (remembered for reconnects). With `chats`, every Telegram chat of the tenant.
   * @returns the channels attached and those refused (with codes)
   * @throws (rejects) CrowdplayError CP_ERR_CHANNEL_INVALID_ID (nothing sent), CP_ERR_CLIENT_* as a request
   */
  async attach(channels: string[], opts: { chats?: boolean } = {}): Promise<AttachedFrame> {
    for (const ch of channels) if (!CHANNEL_ID_RE.test(ch)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
    const list = [...new Set(channels)]; // a channel named twice is asked for once
    for (const ch of list) this.#wanted.add(ch);
    if (opts.chats) this.#chats = true;
    const frames = await this.#attachFrames(list, opts.chats === true);
    return frames.reduce<AttachedFrame>(
      (all, f) => ({ t: 'attached', channels: [...all.channels, ...f.channels], refused: [...(all.refused ?? []), ...(f.refused ?? [])] }),
      { t: 'attached', channels: [], refused: [] },
    );
  }

  /**
   * Gives channels up (with `chats`: every chat, and no new ones): a Telegram chat plays the built-in puzzle again.
   * @returns the channels that left
   */
  async detach(channels: string[], opts: { chats?: boolean } = {}): Promise<string[]> {
    const list = [...new Set(channels)];
    for (const ch of list) {
      this.#wanted.delete(ch);
      this.#declares.delete(ch);
      this.#states.delete(ch);
    }
    if (opts.chats) this.#chats = false;
    // An empty list is left out (the frame's `channels`, when given, names at least one).
    const f = (await this.#requestOnce({
      t: 'detach',
      ...(list.length > 0 ? { channels: list } : {}),
      ...(opts.chats ? { chats: true } : {}),
    })) as DetachedFrame;
    for (const ch of f.channels) this.#attached.delete(ch);
    return f.channels;
  }

  /**
   * Declares actions for one channel (`options.channel`), or, without it, for every channel attached now and later
   * (one frame). Re-sent after every reconnect.
   * @throws CrowdplayError CP_ERR_GAME_INVALID_DECLARE (schema mismatch: nothing sent), CP_ERR_CLIENT_NOT_OPEN after close
   */
  declare(actions: ActionSpec[], options: DeclareOptions & { channel?: string } = {}): void {
    if (this.#conn.ended) throw new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', ['closed']);
    const msg: GameDeclare = { t: 'declare', actions };
    if (options.channel !== undefined) msg.channel = options.channel;
    if (options.welcomeGrant !== undefined) msg.welcomeGrant = options.welcomeGrant;
    const raw = this.#checked(msg, 'CP_ERR_GAME_INVALID_DECLARE');
    if (options.channel === undefined) this.#classDeclare = raw;
    else this.#declares.set(options.channel, raw);
    if (options.channel === undefined || this.#attached.has(options.channel)) this.#send(raw);
  }

  /**
   * Publishes one channel's game state (shown to its viewers in the next update); the latest per channel is
   * re-sent after every reconnect. @returns true when sent now
   * @throws CrowdplayError CP_ERR_PROTO_INVALID (not a JSON object), CP_ERR_GAME_STATE_TOO_BIG (its frame is over
   *   `maxFrameBytes`: nothing is sent or kept), CP_ERR_CLIENT_NOT_OPEN after close
   */
  setState(channel: string, state: Record<string, unknown>): boolean {
    if (this.#conn.ended) throw new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', ['closed']);
    const raw = this.#checked({ t: 'state', channel, state }, 'CP_ERR_PROTO_INVALID');
    this.#states.set(channel, raw);
    if (!this.#attached.has(channel)) return false;
    this.#send(raw);
    return true;
  }

  /** Opens a round in `options.channel`. @returns the round as opened @throws (rejects) as `GameClient.openRound` */
  async openRound(options: OpenRoundOptions & { channel: string }): Promise<RoundView> {
    return this.#round({ t: 'round.open', ...options });
  }

  /** Settles a round of `channel` on `outcome`. @throws (rejects) as `GameClient.settleRound` */
  settleRound(channel: string, round: string, outcome: string): Promise<RoundView> {
    return this.#round({ t: 'round.settle', channel, round, outcome });
  }

  /** Cancels (refunds) a round of `channel`. @throws (rejects) as `GameClient.cancelRound` */
  cancelRound(channel: string, round: string): Promise<RoundView> {
    return this.#round({ t: 'round.cancel', channel, round });
  }

  /** Closes for good; pending requests reject with CP_ERR_CLIENT_CLOSED. Idempotent. */
  close(code: number = CloseCode.normal, reason = 'client closed'): Promise<void> {
    this.#pending.rejectAll(new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, ': closed by the client']));
    return this.#conn.close(code, reason);
  }

  /**
   * After a welcome: attaches every channel wanted (and the chats); `#onAttached` then re-sends their declarations
   * and states. A retryable refusal (the server's store briefly unavailable) is retried with backoff on this socket.
   */
  async #attachWanted(): Promise<void> {
    const sock = this.#conn.socket;
    for (let attempt = 0; ; attempt++) {
      try {
        await this.#attachFrames([...this.#wanted], this.#chats);
        return;
      } catch (err) {
        if (!isCrowdplayError(err) || err.code === 'CP_ERR_CLIENT_CLOSED') return;
        if (!isRetryable(err.code) || this.#conn.socket !== sock) {
          this.emit('error', err);
          return;
        }
        await new Promise((r) => setTimeout(r, Math.max(1, backoffDelayMs(attempt, this.#retryBackoff, this.#random))));
        if (this.#conn.socket !== sock || this.#conn.state !== 'open') return;
      }
    }
  }

  /** Sends attach frames of at most GAME_ATTACH_MAX channels each (the first with `chats`), resume points included. */
  async #attachFrames(channels: string[], chats: boolean): Promise<AttachedFrame[]> {
    const out: AttachedFrame[] = [];
    for (let i = 0; i === 0 || i < channels.length; i += GAME_ATTACH_MAX) {
      const part = channels.slice(i, i + GAME_ATTACH_MAX);
      const frame: Record<string, unknown> = { t: 'attach' };
      if (part.length > 0) frame.channels = part;
      if (chats && i === 0) frame.chats = true;
      if (part.length === 0 && !frame.chats) break;
      const resume = Object.fromEntries(part.filter((c) => this.#lastEventIds.has(c)).map((c) => [c, this.#lastEventIds.get(c)!]));
      if (Object.keys(resume).length > 0) frame.lastEventIds = resume;
      out.push((await this.#requestOnce(frame)) as AttachedFrame);
    }
    return out;
  }

  /** Channels attached: remembered, told, and their declarations and states (re-)sent. */
  #onAttached(f: AttachedFrame): void {
    for (const ch of f.channels) {
      this.#attached.add(ch);
      const d = this.#declares.get(ch);
      if (d !== undefined) this.#send(d);
      const s = this.#states.get(ch);
      if (s !== undefined) this.#send(s);
    }
    this.emit('attached', f.channels, f.refused ?? []);
  }

  /** A round request, sent again with backoff while refused with a retryable code (until `retryDeadlineMs`). */
  async #round(msg: RoundRequest): Promise<RoundView> {
    const deadline = Date.now() + this.#retryDeadlineMs;
    for (let attempt = 0; ; attempt++) {
      try {
        const res = (await this.#requestOnce(msg, true)) as ResultFrame;
        if (!res.round) throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`result ${res.ref} without a round`]);
        return res.round;
      } catch (err) {
        if (!isCrowdplayError(err) || !isRetryable(err.code)) throw err;
        const delay = Math.max(1, backoffDelayMs(attempt, this.#retryBackoff, this.#random));
        if (Date.now() + delay > deadline || this.#conn.state !== 'open') throw err;
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  /** Sends one frame with a fresh `ref` and waits for the frame answering it (`result`, `attached`, `detached` or `error`). */
  #requestOnce(msg: Record<string, unknown>, validate = false): Promise<ResultFrame | AttachedFrame | DetachedFrame> {
    const ref = `m${++this.#nextRef}`;
    const frame = { ...msg, ref };
    const raw = JSON.stringify(frame);
    if (validate) {
      try {
        parseInbound('multigame', raw);
      } catch (err) {
        if (isCrowdplayError(err, 'CP_ERR_LABEL_INVALID')) return Promise.reject(err);
        return Promise.reject(
          new CrowdplayError('CP_ERR_ROUND_INVALID', [isCrowdplayError(err) ? err.message : String(err)], { cause: err }),
        );
      }
    }
    const sock = this.#conn.socket;
    if (this.#conn.state !== 'open' || sock === null || sock.readyState !== WS_OPEN)
      return Promise.reject(new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', [this.#conn.state]));
    return this.#pending.wait(ref, String(msg.t), (failed) =>
      sock.send(raw, (err) => {
        if (err) failed(err);
      }),
    );
  }

  /**
   * A frame validated against the schema and the frame limit, as text.
   * @throws CrowdplayError `code` with the schema's reason; a state over `maxFrameBytes` CP_ERR_GAME_STATE_TOO_BIG,
   *   a declaration over it CP_ERR_GAME_INVALID_DECLARE
   */
  #checked(msg: GameInbound, code: 'CP_ERR_GAME_INVALID_DECLARE' | 'CP_ERR_PROTO_INVALID'): string {
    let raw: string;
    try {
      raw = JSON.stringify(msg);
      parseInbound('multigame', raw);
    } catch (err) {
      throw new CrowdplayError(code, [isCrowdplayError(err) ? err.message : String(err)], { cause: err });
    }
    const bytes = Buffer.byteLength(raw, 'utf8');
    if (bytes > this.#maxFrameBytes) {
      if (msg.t === 'state')
        throw new CrowdplayError('CP_ERR_GAME_STATE_TOO_BIG', [
          this.#maxFrameBytes - (bytes - Buffer.byteLength(JSON.stringify(msg.state), 'utf8')),
        ]);
      throw new CrowdplayError('CP_ERR_GAME_INVALID_DECLARE', [
        `a frame of ${bytes} bytes, over the ${this.#maxFrameBytes}-byte game frame limit`,
      ]);
    }
    return raw;
  }

  #send(raw: string): void {
    const sock = this.#conn.socket;
    if (sock && sock.readyState === WS_OPEN) sock.send(raw);
  }

  #onError(err: CrowdplayError, frame?: ErrorFrame): void {
    if (!this.#pending.reject(frame?.ref, err)) this.emit('error', err, frame);
  }

  #onFrame(t: unknown, msg: object, info: FrameInfo): void {
    switch (t) {
      case 'batch': {
        const b = msg as Batch;
        if (typeof b.ev !== 'number' || typeof b.channel !== 'string') {
          this.emit('error', new CrowdplayError('CP_ERR_PROTO_INVALID', ['batch without numeric ev / channel']));
          return;
        }
        if (!(b.ev <= (this.#lastEventIds.get(b.channel) ?? -1))) this.#lastEventIds.set(b.channel, b.ev);
        this.emit('batch', b, { receivedAtMs: info.receivedAtMs, bytes: Buffer.byteLength(info.raw, 'utf8') });
        return;
      }
      case 'attached': {
        const f = msg as AttachedFrame;
        this.#onAttached(f);
        this.#pending.resolve(f.ref, f);
        return;
      }
      case 'detached':
        this.#pending.resolve((msg as DetachedFrame).ref, msg as DetachedFrame);
        return;
      case 'result':
        this.#pending.resolve((msg as ResultFrame).ref, msg as ResultFrame);
        return;
      case 'round': {
        const f = msg as RoundFrame;
        if (typeof f.channel === 'string' && typeof f.round === 'object' && f.round !== null) this.emit('round', f.channel, f.round);
        return;
      }
      case 'resync':
        this.emit('resync', msg as ResyncFrame);
        return;
      case 'update':
        this.emit('snapshot', msg as ChannelUpdate);
        return;
      default:
        this.emit('error', new CrowdplayError('CP_ERR_PROTO_UNKNOWN_TYPE', [String(t).slice(0, 32), 'game']));
    }
  }

  /** For logs: the URL without the API key. */
  override toString(): string {
    return `MultiGameClient(${this.#url.replace(encodeURIComponent(this.#apiKey), '***')})`;
  }
}
