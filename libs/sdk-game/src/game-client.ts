/**
 * The game client (`role=game`, Node): declares the game's actions, receives
 * one batch per tick, publishes game state for the viewers' updates, runs
 * rounds (open, settle, cancel: request/answer by `ref`), and reconnects with
 * jittered backoff, re-sending its declaration and its latest state after
 * every reconnect (the server keeps neither per socket). A declaration or a
 * state whose frame is over `maxFrameBytes` is refused before it is sent, and
 * one the server closes the socket over (1009) is not re-sent: either would
 * otherwise close every reconnected socket again.
 *
 * @example
 *   const game = new GameClient({ url: 'http://127.0.0.1:8080', channel: 'demo', apiKey });
 *   game.on('batch', (b) => apply(b.actions.vote?.tally));
 *   game.on('round', (r) => r.state === 'locked' && decide(r));
 *   await game.connect();
 *   game.declare([{ name: 'vote', options: ['a', 'b', 'c'], maxPerTick: 1_000 }], { welcomeGrant: 1_000 });
 *   await game.openRound({ round: 'r1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 30_000 });
 *   await game.settleRound('r1', 'a');
 */
import WebSocket from 'ws';
import type {
  ActionSpec,
  Batch,
  ErrorFrame,
  GameDeclare,
  GameState,
  ResultFrame,
  RoundCancel,
  RoundFrame,
  RoundOpen,
  RoundSettle,
  RoundView,
  ChannelUpdate,
  ResyncFrame,
  Welcome,
} from '@crowdplay/protocol';
import { CHANNEL_ID_RE, CloseCode, CrowdplayError, isCrowdplayError, isRetryable, parseInbound } from '@crowdplay/protocol';
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
import { PendingRequests } from './pending.ts';

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
  /** One tick's intents (after a reconnect: first the missed ones, replayed from the event log). */
  batch: (batch: Batch, info: BatchInfo) => void;
  /**
   * The gateway could not replay what was missed since `lastEventId` (frame
   * `reason`): the `snapshot` event follows with the channel's current state.
   */
  resync: (frame: ResyncFrame) => void;
  /** The channel's current update (tally, game state, rounds), sent after a `resync`. */
  snapshot: (update: ChannelUpdate) => void;
  /**
   * A round of this channel changed state (locked at its deadline, settled, cancelled, expired), once per
   * change. A `round` frame missed while disconnected (e.g. the server cancelled the round while it drained)
   * is made up for by the first channel update after the reconnect (see `GameClient`, "Rounds after a reconnect").
   */
  round: (round: RoundView) => void;
  /** A connection state change (see the viewer SDK's ConnectionState). */
  state: (state: ConnectionState, previous: ConnectionState) => void;
  /**
   * Socket errors, unusable frames (CP_ERR_PROTO_*), a missed welcome, or a
   * server `error` frame (passed as 2nd argument). An error frame that
   * answers a pending round request (by `ref`) rejects that request instead.
   */
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
   * 4009 (another game connection, CP_ERR_CHANNEL_GAME_CONNECTED) ends the client only when it closes an attempt
   * of `connect()` before the first welcome (`connect()` rejects with that code): another game serves the
   * channel. After a successful connect it is retried with backoff: after a network drop the server may not
   * have noticed this game's old socket yet (its ping timeout frees the channel).
   */
  noReconnectCloseCodes?: readonly number[];
  /**
   * `connect()` rejects with CP_ERR_CLIENT_WELCOME_TIMEOUT (the last attempt's failure in its message and
   * `cause`) and the client closes when no welcome arrived this long after `connect()`, across the attempts
   * retried meanwhile (connection refused, 1001, 4500, HTTP 503, …), ms; Infinity: retry until `close()`.
   * Reconnects after a successful connect are not limited.
   * @defaultValue DEFAULT_CONNECT_TIMEOUT_MS (60_000)
   */
  connectTimeoutMs?: number;
  /** An attempt without a welcome this long after it started is abandoned and retried, ms. @defaultValue 10_000 */
  welcomeDeadlineMs?: number;
  /** `close()` resolves at the latest this long after it was called, ms. @defaultValue 5_000 */
  closeDeadlineMs?: number;
  /** Options for `ws` (e.g. `{ localAddress }`). `perMessageDeflate` defaults to false. */
  wsOptions?: WebSocket.ClientOptions;
  /** Path of the WebSocket endpoint under `url`. @defaultValue '/v1/ws' */
  path?: string;
  /**
   * Resume point for the first connect (the newest batch `ev` the game
   * applied); afterwards every reconnect sends the newest batch `ev` seen, and
   * the gateway replays the batches missed meanwhile from the event log, or
   * sends a `resync` frame and the channel's snapshot (docs/protocol.md "Resume").
   */
  lastEventId?: number;
  /** Uniform [0, 1) source for the backoff jitter (tests). @defaultValue Math.random */
  random?: () => number;
  /**
   * How long `openRound`/`settleRound`/`cancelRound` wait for their `result`
   * or `error` frame before rejecting with CP_ERR_CLIENT_REQUEST_TIMEOUT, ms.
   * @defaultValue DEFAULT_REQUEST_TIMEOUT_MS (10_000)
   */
  requestTimeoutMs?: number;
  /**
   * How long a round request refused with a retryable code (RETRYABLE_CODES:
   * the channel is moving or being placed, the ledger or the database is
   * briefly unavailable) is sent again, with jittered backoff (`backoff`),
   * before it rejects with that code, ms; 0: never retried. Round requests
   * are idempotent by round id (a retried open answers CP_ERR_ROUND_EXISTS
   * if the first went through; settle and cancel answer the same round).
   * @defaultValue DEFAULT_RETRY_DEADLINE_MS (10_000)
   */
  retryDeadlineMs?: number;
  /**
   * Largest frame `declare` and `publishState` send, bytes (UTF-8): a larger one is refused before it is
   * sent. Raise it only for a gateway known to accept larger game frames (its WS_MAX_MESSAGE_BYTES or
   * MAX_GAME_STATE_BYTES + 1 KiB over 64 KiB): the welcome does not tell the limit.
   * @defaultValue GAME_FRAME_MAX_BYTES (65_536)
   */
  maxFrameBytes?: number;
}

/** Default of `requestTimeoutMs`, ms. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;
/**
 * Default of `connectTimeoutMs`, ms: long enough for a server that is starting
 * or restarting (several backoff attempts), short enough that a game started
 * against a wrong URL fails within a minute.
 */
export const DEFAULT_CONNECT_TIMEOUT_MS = 60_000;
/** Default of `retryDeadlineMs`, ms. */
export const DEFAULT_RETRY_DEADLINE_MS = 10_000;
/**
 * Default of `maxFrameBytes`: the game socket's frame limit every gateway guarantees, bytes (UTF-8). A
 * gateway accepts game frames up to max(WS_MAX_MESSAGE_BYTES, MAX_GAME_STATE_BYTES + 1 KiB, 64 KiB)
 * (docs/protocol.md, close code 1009; GAME_MIN_MESSAGE_BYTES in services/gateway/src/upgrade-admission.ts)
 * and closes the socket with 1009 over it.
 */
export const GAME_FRAME_MAX_BYTES = 65_536;

/** Bytes of a `state` frame around its state: `{"t":"state","state":` and `}`. */
const STATE_ENVELOPE_BYTES = '{"t":"state","state":}'.length;

/** Final round states remembered to drop a late duplicate `round` frame. */
const FINAL_ROUNDS_KEPT = 64;

/** What `openRound` takes (the `round.open` frame without `t` and `ref`). */
export interface OpenRoundOptions {
  /** Round id, `^[A-Za-z0-9_.-]{1,32}$`, never reused in the channel. */
  round: string;
  /** `pool`: parimutuel stakes; `market`: an LMSR market (buy / sell shares). */
  kind: 'pool' | 'market';
  /** 2–10 distinct outcome names. */
  outcomes: string[];
  /** Time from now to the deadline (stakes and trades stop), ms; within ROUND_MIN/MAX_DURATION_MS. */
  durationMs: number;
  /** The question viewers see (at most 120 code points; plain text, any script). */
  title?: string;
  /** What viewers see for each outcome, by outcome name (at most 64 code points each). */
  labels?: Record<string, string>;
  /** Market only: LMSR liquidity b, shares (default ROUND_DEFAULT_LIQUIDITY); the treasury pays ceil(b·ln n) points. */
  liquidity?: number;
}

/** Options of `declare`. */
export interface DeclareOptions {
  /** Points granted once per (channel, viewer) from the tenant's treasury on the viewer's first join (0 / absent = none). */
  welcomeGrant?: number;
}

/** The largest declaration or state frame sent on a socket: what a 1009 close of it was about. */
interface LargestSent {
  sock: WebSocket;
  kind: 'declare' | 'state';
  raw: string;
  bytes: number;
}

/**
 * One game process's connection to a channel. See the module comment. The
 * connection lifecycle (welcome deadline, states, backoff, close codes) is the
 * viewer SDK's ReconnectingSocket over `ws`; this class adds the declaration,
 * the game state and batches.
 *
 * Rounds after a reconnect: `round` frames are not replayed on resume. The
 * client remembers the rounds it knows as open or locked (opened here, or
 * from `round` frames), and the first channel update after every welcome
 * (the snapshot after a `resync`, or any `update`) settles them: a round
 * listed with another state is emitted as listed; a round not listed is
 * finished (an update lists every open and locked round, then only the
 * newest finished ones, and a shard that restarted keeps no finished round)
 * and is emitted with state `cancelled` and its last known figures, since
 * only a game settles a round: unless a `settleRound` of it from this client
 * went unanswered (closed or timed out), then nothing is emitted and calling
 * `settleRound` again tells (idempotent for the same outcome). Each change is
 * emitted once: a late `round` frame with the state already emitted is dropped.
 * The gateway sends a resuming game (one that received a batch before) the
 * channel's current update after the replayed batches or the `resync`.
 */
export class GameClient extends TypedEmitter<GameEvents> {
  readonly #url: string;
  readonly #apiKey: string;
  readonly #channel: string;
  readonly #conn: ReconnectingSocket<WebSocket>;
  #lastEventId: number | undefined;
  #resyncing = false;
  #declared: string | null = null;
  #declaredActions: ActionSpec[] | null = null;
  #gameState: string | null = null;
  readonly #maxFrameBytes: number;
  #largestSent: LargestSent | null = null;
  readonly #retryDeadlineMs: number;
  readonly #retryBackoff: BackoffOptions;
  readonly #random: () => number;
  #nextRef = 0;
  readonly #pending: PendingRequests<RoundView>;
  /** Rounds known as open or locked: their last known view (the state last emitted or opened). */
  readonly #liveRounds = new Map<string, RoundView>();
  /** Final states emitted lately, by round id (a late duplicate `round` frame is dropped), oldest first. */
  readonly #finalRounds = new Map<string, RoundView['state']>();
  /** Rounds whose `settleRound` went unanswered: a missing one may have been settled. */
  readonly #settleInDoubt = new Set<string>();
  /** Set by every welcome: the next channel update reconciles {@link #liveRounds}. */
  #reconcileRounds = false;

  /**
   * @throws CrowdplayError CP_ERR_CHANNEL_INVALID_ID, CP_ERR_AUTH_MISSING (empty
   *   apiKey), CP_ERR_CONFIG_INVALID (bad url or numbers)
   */
  constructor(options: GameClientOptions) {
    super();
    if (!CHANNEL_ID_RE.test(options.channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
    if (!options.apiKey) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
    const requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    if (!(requestTimeoutMs > 0)) throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['requestTimeoutMs must be > 0']);
    this.#pending = new PendingRequests<RoundView>(requestTimeoutMs);
    this.#retryDeadlineMs = options.retryDeadlineMs ?? DEFAULT_RETRY_DEADLINE_MS;
    if (!(this.#retryDeadlineMs >= 0) || !Number.isFinite(this.#retryDeadlineMs))
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['retryDeadlineMs must be a finite number >= 0']);
    this.#maxFrameBytes = options.maxFrameBytes ?? GAME_FRAME_MAX_BYTES;
    if (!(Number.isSafeInteger(this.#maxFrameBytes) && this.#maxFrameBytes > STATE_ENVELOPE_BYTES))
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [`maxFrameBytes must be an integer > ${STATE_ENVELOPE_BYTES}`]);
    this.#retryBackoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    this.#random = options.random ?? Math.random;
    const url = buildWsUrl(options.url, options.path ?? '/v1/ws', { role: 'game', channel: options.channel, key: options.apiKey });
    this.#url = url;
    if (options.lastEventId !== undefined && !(Number.isSafeInteger(options.lastEventId) && options.lastEventId >= 0))
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['lastEventId must be a non-negative integer']);
    this.#lastEventId = options.lastEventId;
    this.#apiKey = options.apiKey;
    this.#channel = options.channel;
    this.#conn = new ReconnectingSocket<WebSocket>(
      {
        ...options, // backoff, autoReconnect, noReconnectCloseCodes, the deadlines, random: same names and meaning
        connectTimeoutMs: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
        noRetryBeforeWelcomeCloseCodes: [CloseCode.gameConflict],
        url: () => (this.#lastEventId === undefined ? url : `${url}&lastEventId=${this.#lastEventId}`),
        WebSocket,
        wsOptions: { perMessageDeflate: false, ...options.wsOptions },
        terminate: (sock) => sock.terminate(),
      },
      {
        checkWelcome: (w) => (typeof w.serverTime !== 'number' ? 'welcome without serverTime' : undefined),
        onState: (state, previous) => this.emit('state', state, previous),
        onWelcome: (w) => {
          this.#reconcileRounds = true;
          if (this.#declared !== null) this.#send(this.#declared, 'declare');
          if (this.#gameState !== null) this.#send(this.#gameState, 'state');
          this.emit('welcome', w);
        },
        onFrame: (t, msg, info) => this.#onFrame(t, msg, info),
        onError: (err, frame) => this.#onError(err, frame),
        onClose: (code, reason) => {
          const largest = this.#largestSent;
          this.#largestSent = null;
          this.#pending.rejectAll(new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, reason ? `: ${reason}` : '']));
          if (code === CloseCode.messageTooBig) this.#onTooBig(largest);
          this.emit('close', code, reason);
        },
      },
    );
  }

  /** Newest batch `ev` received (or the `lastEventId` option until one arrives): the resume point of the next reconnect. */
  get lastEventId(): number | undefined {
    return this.#lastEventId;
  }

  /** Current connection state. */
  get state(): ConnectionState {
    return this.#conn.state;
  }

  /** The latest welcome frame, or null before the first one. */
  get welcome(): Welcome | null {
    return this.#conn.welcome;
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
   *   the server's error code when it refuses the game for good (CP_ERR_AUTH_* before a 4001,
   *   CP_ERR_AUTH_FORBIDDEN_CHANNEL before a 4003, CP_ERR_CHANNEL_* before a 4004,
   *   CP_ERR_CHANNEL_GAME_CONNECTED before a 4009); CP_ERR_CLIENT_WELCOME_TIMEOUT when
   *   `connectTimeoutMs` passed while transient failures were retried; CP_ERR_CLIENT_CLOSED,
   *   or CP_ERR_CLIENT_NOT_OPEN after `close()`
   */
  connect(): Promise<Welcome> {
    return this.#conn.connect();
  }

  /** Round requests sent and not yet answered. */
  get pendingRequests(): number {
    return this.#pending.size;
  }

  /**
   * Declares the game's actions (replacing any earlier declaration; the
   * server restarts the cumulative tally unless the actions are the ones
   * already declared). Sent now when open, else right after the next
   * welcome; re-sent after every reconnect (the same actions: nothing is reset).
   *
   * @param actions 1–32 ActionSpecs (`{name, maxPerTick, options?, cost?}`, see libs/protocol)
   * @param options `welcomeGrant`: points (integer ≥ 0, at most WELCOME_GRANT_MAX_POINTS)
   *   granted once per (channel, viewer) from the tenant's treasury on the viewer's first join
   * @throws CrowdplayError CP_ERR_GAME_INVALID_DECLARE (schema mismatch, or a frame over
   *   `maxFrameBytes`: display labels in every script can make a valid declaration larger than
   *   the game frame limit; nothing is sent or remembered), CP_ERR_CLIENT_NOT_OPEN after `close()`
   */
  declare(actions: ActionSpec[], options: DeclareOptions = {}): void {
    if (this.#conn.ended) throw new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', ['closed']);
    const msg: GameDeclare = { t: 'declare', actions };
    if (options.welcomeGrant !== undefined) msg.welcomeGrant = options.welcomeGrant;
    const raw = JSON.stringify(msg);
    try {
      parseInbound('game', raw);
    } catch (err) {
      if (isCrowdplayError(err)) throw new CrowdplayError('CP_ERR_GAME_INVALID_DECLARE', [err.message], { cause: err });
      throw err;
    }
    const bytes = Buffer.byteLength(raw, 'utf8');
    if (bytes > this.#maxFrameBytes) {
      throw new CrowdplayError('CP_ERR_GAME_INVALID_DECLARE', [
        `a frame of ${bytes} bytes, over the ${this.#maxFrameBytes}-byte game frame limit`,
      ]);
    }
    this.#declared = raw;
    this.#declaredActions = structuredClone(actions);
    if (this.#conn.state === 'open') this.#send(raw, 'declare');
  }

  /**
   * Publishes game-owned state, shown to viewers in the next update. The
   * latest state is re-sent after every reconnect.
   *
   * Two limits apply. The server refuses a state over its MAX_GAME_STATE_BYTES
   * (default 16,384) with an `error` event CP_ERR_GAME_STATE_TOO_BIG and keeps
   * the socket. A `state` frame over the game socket's frame limit would make
   * the server close the socket (1009), so one over `maxFrameBytes` (default
   * GAME_FRAME_MAX_BYTES, 65,536 bytes UTF-8: a state of at most 65,514 bytes
   * as JSON) is refused here, and a state the server closed the socket over
   * anyway is dropped: an `error` event CP_ERR_PROTO_TOO_BIG, and it is not
   * re-sent after the reconnect (the next `publishState` is).
   *
   * @param state a JSON object (not an array)
   * @returns true when it was sent now, false when it waits for the next welcome
   * @throws CrowdplayError CP_ERR_PROTO_INVALID (not a plain object / not JSON-serialisable),
   *   CP_ERR_GAME_STATE_TOO_BIG (its frame is over `maxFrameBytes`), CP_ERR_CLIENT_NOT_OPEN
   *   after `close()`; when it throws, nothing is sent and the state published before stays
   *   the one re-sent after a reconnect
   */
  publishState(state: Record<string, unknown>): boolean {
    if (this.#conn.ended) throw new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', ['closed']);
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
    if (Buffer.byteLength(raw, 'utf8') > this.#maxFrameBytes) {
      throw new CrowdplayError('CP_ERR_GAME_STATE_TOO_BIG', [this.#maxFrameBytes - STATE_ENVELOPE_BYTES]);
    }
    this.#gameState = raw;
    if (this.#conn.state !== 'open') return false;
    this.#send(raw, 'state');
    return true;
  }

  /**
   * Opens a round (`round.open`). The server sets its deadline to now +
   * `durationMs`; a market's maker subsidy comes from the tenant's treasury.
   *
   * @returns the round as the server opened it (state `open`, `openedAt`, `deadline`)
   * @throws (rejects) CrowdplayError: CP_ERR_ROUND_INVALID when the options do
   *   not match the schema, CP_ERR_LABEL_INVALID for a bad title or label
   *   (nothing is sent in either case); the server's refusal code
   *   (CP_ERR_ROUND_EXISTS, CP_ERR_ROUND_TOO_MANY, CP_ERR_ROUND_INVALID,
   *   CP_ERR_LEDGER_*, CP_ERR_CHANNEL_UNAVAILABLE, …); CP_ERR_CLIENT_REQUEST_TIMEOUT
   *   after `requestTimeoutMs` without an answer; CP_ERR_CLIENT_NOT_OPEN when not
   *   open; CP_ERR_CLIENT_CLOSED when the socket closes first (the round may or
   *   may not have opened: look for it in the next update, or retry and treat
   *   CP_ERR_ROUND_EXISTS as done)
   */
  openRound(options: OpenRoundOptions): Promise<RoundView> {
    const { round, kind, outcomes, durationMs, liquidity, title, labels } = options;
    return this.#request('round.open', (ref): RoundOpen => {
      const msg: RoundOpen = { t: 'round.open', ref, round, kind, outcomes, durationMs };
      if (liquidity !== undefined) msg.liquidity = liquidity;
      if (title !== undefined) msg.title = title;
      if (labels !== undefined) msg.labels = labels;
      return msg;
    }).then((view) => {
      if ((view.state === 'open' || view.state === 'locked') && !this.#liveRounds.has(view.id)) this.#liveRounds.set(view.id, view);
      return view;
    });
  }

  /**
   * Settles a round on its winning `outcome` (`round.settle`): locks it if
   * still open, then pays the winners. Idempotent for the same outcome.
   *
   * @returns the settled round (`state: 'settled'`, `winner`)
   * @throws (rejects) as `openRound`, with the server's codes
   *   CP_ERR_ROUND_UNKNOWN, CP_ERR_ROUND_UNKNOWN_OUTCOME, CP_ERR_ROUND_ALREADY_FINAL
   */
  settleRound(round: string, outcome: string): Promise<RoundView> {
    this.#settleInDoubt.add(round);
    return this.#request('round.settle', (ref): RoundSettle => ({ t: 'round.settle', ref, round, outcome })).then(
      (view) => {
        this.#settleInDoubt.delete(round);
        this.#liveRounds.delete(round); // its `round` frame is still emitted
        return view;
      },
      (err: unknown) => {
        const unanswered =
          isCrowdplayError(err) && ['CP_ERR_CLIENT_CLOSED', 'CP_ERR_CLIENT_REQUEST_TIMEOUT', 'CP_ERR_CLIENT_SOCKET'].includes(err.code);
        if (!unanswered) this.#settleInDoubt.delete(round);
        throw err;
      },
    );
  }

  /**
   * Cancels a round and refunds every stake and trade exactly (`round.cancel`). Idempotent.
   *
   * @returns the cancelled round (`state: 'cancelled'`)
   * @throws (rejects) as `openRound`, with the server's codes CP_ERR_ROUND_UNKNOWN, CP_ERR_ROUND_ALREADY_FINAL
   */
  cancelRound(round: string): Promise<RoundView> {
    return this.#request('round.cancel', (ref): RoundCancel => ({ t: 'round.cancel', ref, round })).then((view) => {
      this.#liveRounds.delete(round); // its `round` frame is still emitted
      return view;
    });
  }

  /** Emits `round` unless `view`'s state is the one last emitted for it; remembers it. */
  #emitRound(view: RoundView): void {
    const known = this.#liveRounds.get(view.id)?.state ?? this.#finalRounds.get(view.id);
    if (known === view.state) return;
    if (view.state === 'open' || view.state === 'locked') this.#liveRounds.set(view.id, view);
    else {
      this.#liveRounds.delete(view.id);
      this.#finalRounds.delete(view.id);
      this.#finalRounds.set(view.id, view.state);
      if (this.#finalRounds.size > FINAL_ROUNDS_KEPT) this.#finalRounds.delete(this.#finalRounds.keys().next().value!);
    }
    this.emit('round', view);
  }

  /** The first update after a welcome: rounds known as open or locked that changed meanwhile (see the class comment). */
  #reconcile(update: ChannelUpdate): void {
    const listed = new Map<string, RoundView>();
    for (const r of Array.isArray(update.rounds) ? update.rounds : []) {
      if (typeof r === 'object' && r !== null && typeof r.id === 'string' && typeof r.state === 'string') listed.set(r.id, r);
    }
    for (const [id, known] of [...this.#liveRounds]) {
      const now = listed.get(id);
      if (now !== undefined) this.#emitRound(now);
      else if (this.#settleInDoubt.has(id)) this.#liveRounds.delete(id);
      else this.#emitRound({ ...known, state: 'cancelled' });
    }
  }

  /**
   * Closes for good: stops reconnecting, rejects an unsettled `connect()` and
   * pending round requests with CP_ERR_CLIENT_CLOSED, closes the socket.
   * Idempotent (same promise); resolves when the socket has closed or after
   * `closeDeadlineMs` (then the socket is terminated).
   */
  close(code: number = CloseCode.normal, reason = 'client closed'): Promise<void> {
    this.#pending.rejectAll(new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, ': closed by the client']));
    return this.#conn.close(code, reason);
  }

  /**
   * {@link #requestOnce}, again with jittered backoff while the server refuses with a retryable code (RETRYABLE_CODES)
   * and the retry deadline allows another attempt; the last refusal rejects. Each attempt has a fresh `ref`.
   */
  async #request(op: string, build: (ref: string) => RoundOpen | RoundSettle | RoundCancel): Promise<RoundView> {
    const deadline = Date.now() + this.#retryDeadlineMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#requestOnce(op, build);
      } catch (err) {
        if (!isCrowdplayError(err) || !isRetryable(err.code)) throw err;
        const delay = Math.max(1, backoffDelayMs(attempt, this.#retryBackoff, this.#random));
        if (Date.now() + delay > deadline || this.#conn.state !== 'open') throw err;
        await new Promise((r) => setTimeout(r, delay));
        if (this.#conn.state !== 'open') throw err;
      }
    }
  }

  /** Sends one round request with a fresh `ref` and waits for its `result` or `error` frame. */
  #requestOnce(op: string, build: (ref: string) => RoundOpen | RoundSettle | RoundCancel): Promise<RoundView> {
    const ref = `g${++this.#nextRef}`;
    const raw = JSON.stringify(build(ref));
    try {
      parseInbound('game', raw);
    } catch (err) {
      if (isCrowdplayError(err, 'CP_ERR_LABEL_INVALID')) return Promise.reject(err); // the server's own code for it
      const cause = isCrowdplayError(err) ? err.message : String(err);
      return Promise.reject(new CrowdplayError('CP_ERR_ROUND_INVALID', [cause], { cause: err }));
    }
    const sock = this.#conn.socket;
    if (this.#conn.state !== 'open' || sock === null || sock.readyState !== WS_OPEN) {
      return Promise.reject(new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', [this.#conn.state]));
    }
    return this.#pending.wait(ref, op, (failed) =>
      sock.send(raw, (err) => {
        if (err) failed(err);
      }),
    );
  }

  /** A server error frame answering a pending request (`ref`) rejects it; any other error is an `error` event. */
  #onError(err: CrowdplayError, frame?: ErrorFrame): void {
    if (!this.#pending.reject(frame?.ref, err)) this.emit('error', err, frame);
  }

  /** A `result` frame: resolves its request (a late answer after a timeout is dropped). */
  #onResult(frame: ResultFrame): void {
    if (typeof frame.ref !== 'string') {
      this.emit('error', new CrowdplayError('CP_ERR_PROTO_INVALID', ['result without ref']));
      return;
    }
    if (!this.#pending.has(frame.ref)) return;
    const round = frame.round;
    if (frame.ok !== true || typeof round !== 'object' || round === null || typeof round.id !== 'string') {
      const err = new CrowdplayError('CP_ERR_PROTO_INVALID', [`result ${frame.ref} without ok:true and a round`]);
      this.emit('error', err);
      this.#pending.reject(frame.ref, err);
      return;
    }
    this.#pending.resolve(frame.ref, round);
  }

  /**
   * The server closed the socket with 1009 (a frame over its limit; ws sends no reason). Only a declaration or a
   * state can be that large (round frames are a few KB at most), and if one was, the largest sent on that socket
   * was: if it is still the one kept for re-sending, it is dropped, else every reconnect would be closed again.
   */
  #onTooBig(largest: LargestSent | null): void {
    let what = "the server's limit, in";
    if (largest !== null) {
      what = `the server's limit: the ${largest.kind} frame of ${largest.bytes}`;
      if (largest.kind === 'state' && largest.raw === this.#gameState) this.#gameState = null;
      if (largest.kind === 'declare' && largest.raw === this.#declared) {
        this.#declared = null;
        this.#declaredActions = null;
      }
    }
    this.emit('error', new CrowdplayError('CP_ERR_PROTO_TOO_BIG', [what]));
  }

  /** Sends on the open socket (dropped when there is none); a failed write is reported as CP_ERR_CLIENT_SOCKET. */
  #send(raw: string, kind: LargestSent['kind']): void {
    const sock = this.#conn.socket;
    if (!sock || sock.readyState !== WS_OPEN) return;
    const bytes = Buffer.byteLength(raw, 'utf8');
    if (this.#largestSent?.sock !== sock || bytes >= this.#largestSent.bytes) this.#largestSent = { sock, kind, raw, bytes };
    sock.send(raw, (err) => {
      if (err && this.#conn.socket === sock) this.emit('error', new CrowdplayError('CP_ERR_CLIENT_SOCKET', [err.message], { cause: err }));
    });
  }

  /** Frames other than `welcome` and `error` (those are the ReconnectingSocket's). */
  #onFrame(t: unknown, msg: object, info: FrameInfo): void {
    switch (t) {
      case 'batch': {
        const b = msg as Batch;
        if (typeof b.ev !== 'number' || typeof b.actions !== 'object' || b.actions === null) {
          this.emit('error', new CrowdplayError('CP_ERR_PROTO_INVALID', ['batch without numeric ev / actions object']));
          return;
        }
        if (this.#lastEventId === undefined || b.ev > this.#lastEventId) this.#lastEventId = b.ev;
        this.emit('batch', b, { receivedAtMs: info.receivedAtMs, bytes: Buffer.byteLength(info.raw, 'utf8') });
        return;
      }
      case 'resync':
        this.#resyncing = true;
        this.emit('resync', msg as ResyncFrame);
        return;
      case 'result':
        this.#onResult(msg as ResultFrame);
        return;
      case 'round': {
        const round = (msg as RoundFrame).round;
        if (typeof round !== 'object' || round === null || typeof round.id !== 'string' || typeof round.state !== 'string') {
          this.emit('error', new CrowdplayError('CP_ERR_PROTO_INVALID', ['round frame without a round {id, state}']));
          return;
        }
        this.#emitRound(round);
        return;
      }
      case 'update':
        // After a resync: the snapshot. Otherwise a game has no use for its channel's viewer updates.
        if (this.#resyncing) {
          this.#resyncing = false;
          this.emit('snapshot', msg as ChannelUpdate);
        }
        if (this.#reconcileRounds) {
          this.#reconcileRounds = false;
          this.#reconcile(msg as ChannelUpdate);
        }
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
