/**
 * The viewer client (`role=crowd`): connect, act with act-ack promises,
 * stakes and trades in rounds (`stake`, `buy`, `sell`, acked after the
 * ledger commit), balance frames, channel updates (with their `rounds`),
 * resume from the last event id, reconnect with jittered backoff. Runs in browsers (global `WebSocket`) and in Node (pass the `ws`
 * package's `WebSocket` class as `options.WebSocket`); it imports neither
 * `ws` nor Node's `events`.
 *
 * @example
 *   import WebSocket from 'ws';
 *   const viewer = new ViewerClient({ url: 'http://127.0.0.1:8080', channel: 'demo', token, WebSocket });
 *   viewer.on('update', (u) => render(u.tally));
 *   await viewer.connect();
 *   const ack = await viewer.act('pull', 'left'); // { t: 'ack', seq: 1, ok: true, cost: 0 }
 *   const stake = await viewer.stake('r1', 'left', 50); // { t: 'ack', seq: 2, ok: true, cost: 50, balance: 950 }
 */
import type {
  ActAck,
  BalanceFrame,
  ChannelUpdate,
  CrowdAct,
  CrowdBuy,
  CrowdInbound,
  CrowdSell,
  CrowdStake,
  ErrorFrame,
  ResyncFrame,
  RoundResultFrame,
  Welcome,
} from '@crowdplay/protocol';
import { CHANNEL_ID_RE, CloseCode, CrowdplayError, MAX_POINTS, NAME_PATTERN, isRetryable } from '@crowdplay/protocol';
import { backoffDelayMs, DEFAULT_BACKOFF, type BackoffOptions } from './backoff.ts';
import { TypedEmitter } from './emitter.ts';
import { ReconnectingSocket, type ConnectionState, type FrameInfo } from './reconnecting-socket.ts';
import { WS_OPEN, type WebSocketConstructor } from './socket.ts';

/** Events of a {@link ViewerClient}; subscribe with `on(name, listener)`. */
export interface ViewerEvents {
  /** Every welcome (the first one and one per reconnect). */
  welcome: (welcome: Welcome) => void;
  /** A channel update (full state); `lastEventId` is already advanced to `update.ev`. */
  update: (update: ChannelUpdate, info: FrameInfo) => void;
  /**
   * The gateway could not resume from `lastEventId` (`reason` 'ahead': the
   * channel's state is older than what this client saw): drop the state and
   * take the update that follows as the truth. `lastEventId` is reset.
   */
  resync: (frame: ResyncFrame) => void;
  /** Every ack (act, stake, buy, sell), just before the matching promise resolves. */
  ack: (ack: ActAck) => void;
  /**
   * The viewer's available points changed outside an ack (welcome grant,
   * payout, refund) or were reported on joining the channel (`reason: 'join'`);
   * `balance` is already updated.
   */
  balance: (frame: BalanceFrame) => void;
  /**
   * This viewer's result in a round that finished: points `staked`, `paid`
   * back and `net` (`net` > 0: "you won net"); sent once the round's payouts
   * and refunds committed, to the viewers that took part.
   */
  roundResult: (frame: RoundResultFrame) => void;
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
  /** Reconnect backoff (full jitter). @defaultValue DEFAULT_BACKOFF (250 ms doubling to 30 s) */
  backoff?: Partial<BackoffOptions>;
  /** Reconnect after a drop. @defaultValue true */
  autoReconnect?: boolean;
  /** Close codes after which the client never reconnects. @defaultValue NO_RECONNECT_CLOSE_CODES (4001, 4003, 4004) */
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
  /**
   * How long an act, stake or trade waits for its ack before rejecting with
   * CP_ERR_CLIENT_REQUEST_TIMEOUT, ms. The bus between the gateway and the
   * channel's shard delivers at most once: an intent in flight when NATS
   * restarts, or routed to a shard that died, gets no ack. Its outcome is
   * then unknown: a stake or trade sent again with the same `key` is a
   * replay if the first one went through. An ack that still arrives later
   * is emitted as an `ack` event only.
   * @defaultValue DEFAULT_ACK_TIMEOUT_MS (10_000)
   */
  ackTimeoutMs?: number;
  /**
   * How long an act, stake or trade refused with a retryable code
   * (RETRYABLE_CODES: the channel is moving or being placed, a queue is at its
   * bound) is sent again, with jittered backoff (`backoff`), before the
   * refusal is returned, ms; 0: never retried. A stake or trade is retried
   * with its `key` (a replay if it went through); a refused act was not taken.
   * @defaultValue DEFAULT_RETRY_DEADLINE_MS (5_000)
   */
  retryDeadlineMs?: number;
}

/** Default of `ackTimeoutMs`, ms. */
export const DEFAULT_ACK_TIMEOUT_MS = 10_000;
/** Default of `retryDeadlineMs`, ms. */
export const DEFAULT_RETRY_DEADLINE_MS = 5_000;

/** Seqs of acts that timed out, kept so that their late acks are not reported as protocol errors. */
const LATE_ACKS_KEPT = 1_024;

const DEFAULT_PATH = '/v1/ws';

/** Options of a stake or trade. */
export interface TradeOptions {
  /**
   * Idempotency key, unique per viewer and round (`^[A-Za-z0-9_.:-]{1,64}$`):
   * the same key with the same fields returns the first result, with other
   * fields it is refused (CP_ERR_ROUND_DUPLICATE_ID).
   */
  key?: string;
}

/** What a `buy` spends: `shares` whole shares for at most `maxCost` points, or as many whole shares as `budget` points buy. */
export type BuyAmount = { shares: number; maxCost: number } | { budget: number };

const NAME_RE = new RegExp(NAME_PATTERN);
/** The pattern of a stake or trade key (messages.ts). */
const KEY_RE = /^[A-Za-z0-9_.:-]{1,64}$/;

/** Throws CP_ERR_PROTO_INVALID unless `value` is a round/outcome name. */
function checkName(field: string, value: unknown): void {
  if (typeof value !== 'string' || !NAME_RE.test(value)) {
    throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`/${field} must match ${NAME_PATTERN}`]);
  }
}

/** Throws CP_ERR_PROTO_INVALID unless `value` is an integer from `min` (0 or 1) to MAX_POINTS. */
function checkAmount(field: string, value: unknown, min: 0 | 1): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > MAX_POINTS) {
    throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`/${field} must be an integer from ${min} to ${MAX_POINTS}, got ${String(value)}`]);
  }
}

function checkKey(opts: TradeOptions | undefined): string | undefined {
  const key = opts?.key;
  if (key !== undefined && (typeof key !== 'string' || !KEY_RE.test(key))) {
    throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`/key must match ${KEY_RE.source}`]);
  }
  return key;
}

interface PendingAct {
  resolve: (ack: ActAck) => void;
  reject: (err: CrowdplayError) => void;
  timer: ReturnType<typeof setTimeout> | undefined;
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
 * Acts, stakes and trades are numbered by the client (`seq` 1, 2, … for the
 * client's lifetime); each `act()`/`stake()`/`buy()`/`sell()` promise
 * resolves with the matching ack (accepted or refused with a code) and
 * rejects with CP_ERR_CLIENT_CLOSED if the socket closes first (nothing is
 * ever re-sent on the next socket: resend a stake or trade yourself, with the
 * same `key` to make the resend idempotent). The connection
 * lifecycle (welcome deadline, states, backoff, close codes) is a
 * {@link ReconnectingSocket}.
 */
export class ViewerClient extends TypedEmitter<ViewerEvents> {
  readonly #conn: ReconnectingSocket;
  #seq = 0;
  readonly #pending = new Map<number, PendingAct>();
  /** Seqs whose act timed out (oldest first, at most LATE_ACKS_KEPT). */
  readonly #timedOut = new Set<number>();
  readonly #ackTimeoutMs: number;
  readonly #retryDeadlineMs: number;
  readonly #retryBackoff: BackoffOptions;
  readonly #random: () => number;
  #lastEventId: number | undefined;
  #balance: number | null = null;

  /**
   * @throws CrowdplayError CP_ERR_CONFIG_INVALID (bad url, no WebSocket class,
   *   bad numbers), CP_ERR_CHANNEL_INVALID_ID, CP_ERR_AUTH_MISSING (neither
   *   `token` nor `getToken`)
   */
  constructor(options: ViewerClientOptions) {
    super();
    if (!CHANNEL_ID_RE.test(options.channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
    if (options.token === undefined && options.getToken === undefined) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
    this.#ackTimeoutMs = options.ackTimeoutMs ?? DEFAULT_ACK_TIMEOUT_MS;
    this.#retryDeadlineMs = options.retryDeadlineMs ?? DEFAULT_RETRY_DEADLINE_MS;
    if (!(this.#retryDeadlineMs >= 0) || !Number.isFinite(this.#retryDeadlineMs))
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['retryDeadlineMs must be a finite number >= 0']);
    this.#retryBackoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    this.#random = options.random ?? Math.random;
    if (!(this.#ackTimeoutMs > 0) || !Number.isFinite(this.#ackTimeoutMs))
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['ackTimeoutMs must be a finite number > 0']);
    const WS = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WS)
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['WebSocket: no global WebSocket here; pass the `ws` class as options.WebSocket']);
    const path = options.path ?? DEFAULT_PATH;
    buildWsUrl(options.url, path, {}); // validates the URL now rather than on the first connect
    const { token, getToken } = options;
    this.#lastEventId = options.lastEventId;
    this.#conn = new ReconnectingSocket(
      {
        ...options, // backoff, autoReconnect, noReconnectCloseCodes, the deadlines, wsOptions, random: same names and meaning
        WebSocket: WS,
        url: async () => {
          let t: string;
          try {
            t = getToken ? await getToken() : (token ?? '');
          } catch (err) {
            throw err instanceof CrowdplayError ? err : new CrowdplayError('CP_ERR_AUTH_MISSING', [], { cause: err });
          }
          return buildWsUrl(options.url, path, { role: 'crowd', channel: options.channel, token: t, lastEventId: this.#lastEventId });
        },
      },
      {
        checkWelcome: (w) =>
          typeof w.serverTime !== 'number' || typeof w.channel !== 'string' ? 'welcome without serverTime/channel' : undefined,
        onState: (state, previous) => this.emit('state', state, previous),
        onWelcome: (w) => this.emit('welcome', w),
        onFrame: (t, msg, info) => this.#onFrame(t, msg, info),
        onError: (err, frame) => this.emit('error', err, frame),
        onClose: (code, reason) => {
          this.#rejectPending(new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, reason ? `: ${reason}` : '']));
          this.emit('close', code, reason);
        },
      },
    );
  }

  /** Current connection state. */
  get state(): ConnectionState {
    return this.#conn.state;
  }

  /** Newest event id seen in an update (or the `lastEventId` option until one arrives). */
  get lastEventId(): number | undefined {
    return this.#lastEventId;
  }

  /** The latest welcome frame, or null before the first one. */
  get welcome(): Welcome | null {
    return this.#conn.welcome;
  }

  /**
   * The viewer's available points as last reported (a `balance` frame or an
   * ack's `balance`), or null before the first report.
   */
  get balance(): number | null {
    return this.#balance;
  }

  /** Acts, stakes and trades sent on the current socket and not yet acked. */
  get pendingActs(): number {
    return this.#pending.size;
  }

  /** Bytes queued on the socket and not yet sent (0 when there is no socket). */
  get bufferedAmount(): number {
    return this.#conn.socket?.bufferedAmount ?? 0;
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
    return this.#conn.connect();
  }

  /**
   * Sends one intent `{t:'act', seq, action, option?}`.
   *
   * @returns the act ack for this `seq`: `ok: true` (with `cost`, points) or
   *   `ok: false` with a refusal `code` (CP_ERR_INTENT_*, CP_ERR_LIMIT_DRAINING; CP_ERR_PROTO_* when the
   *   gateway found the frame invalid). A refusal resolves, it does not reject.
   * @throws (rejects) CrowdplayError CP_ERR_CLIENT_NOT_OPEN when not `open`;
   *   CP_ERR_CLIENT_CLOSED when the socket closes before the ack; CP_ERR_CLIENT_REQUEST_TIMEOUT when no ack
   *   came within `ackTimeoutMs` (outcome unknown: send a stake or trade again with the same key);
   *   CP_ERR_CLIENT_SOCKET when the send itself throws.
   */
  act(action: string, option?: string): Promise<ActAck> {
    return this.#request((seq): CrowdAct => (option === undefined ? { t: 'act', seq, action } : { t: 'act', seq, action, option }));
  }

  /**
   * Stakes `points` on `outcome` of a `pool` round: `{t:'stake', seq, round, outcome, points, key?}`.
   *
   * @param points integer points, 1 to MAX_POINTS (1e15)
   * @returns the ack, sent after the ledger commit: `ok: true` with `cost`
   *   (= points) and `balance` (points left), or `ok: false` with a refusal
   *   `code` (CP_ERR_ROUND_* such as CP_ERR_ROUND_CLOSED,
   *   CP_ERR_ROUND_INSUFFICIENT_FUNDS, CP_ERR_ROUND_WRONG_KIND;
   *   CP_ERR_INTENT_RATE_LIMITED; CP_ERR_LIMIT_DRAINING). A refusal resolves, as for `act`.
   * @throws (rejects) CrowdplayError CP_ERR_PROTO_INVALID for a bad argument
   *   (nothing is sent); otherwise as `act`: CP_ERR_CLIENT_NOT_OPEN,
   *   CP_ERR_CLIENT_CLOSED, CP_ERR_CLIENT_SOCKET
   */
  stake(round: string, outcome: string, points: number, options?: TradeOptions): Promise<ActAck> {
    let key: string | undefined;
    try {
      checkName('round', round);
      checkName('outcome', outcome);
      checkAmount('points', points, 1);
      key = checkKey(options);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#request((seq): CrowdStake => {
      const frame: CrowdStake = { t: 'stake', seq, round, outcome, points };
      if (key !== undefined) frame.key = key;
      return frame;
    });
  }

  /**
   * Buys shares of `outcome` in a `market` round: `{shares, maxCost}` (exactly
   * `shares` whole shares, refused with CP_ERR_MARKET_SLIPPAGE if they cost
   * more than `maxCost` points) or `{budget}` (as many whole shares as
   * `budget` points buy).
   *
   * @param amount shares and budget 1 to MAX_POINTS, maxCost 0 to MAX_POINTS (integers)
   * @returns the ack after the ledger commit: `ok: true` with `cost` (points
   *   paid), `shares` (bought), `position` (shares of that outcome held now)
   *   and `balance`; or `ok: false` with a refusal `code` (CP_ERR_ROUND_*,
   *   CP_ERR_MARKET_*, CP_ERR_INTENT_RATE_LIMITED, CP_ERR_LIMIT_DRAINING). A refusal resolves.
   * @throws (rejects) as `stake`
   */
  buy(round: string, outcome: string, amount: BuyAmount, options?: TradeOptions): Promise<ActAck> {
    let key: string | undefined;
    try {
      checkName('round', round);
      checkName('outcome', outcome);
      if (typeof amount !== 'object' || amount === null)
        throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['buy needs {shares, maxCost} or {budget}']);
      if ('budget' in amount) {
        if ('shares' in amount || 'maxCost' in amount) {
          throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['buy takes {shares, maxCost} or {budget}, not both']);
        }
        checkAmount('budget', amount.budget, 1);
      } else {
        checkAmount('shares', amount.shares, 1);
        checkAmount('maxCost', amount.maxCost, 0);
      }
      key = checkKey(options);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#request((seq): CrowdBuy => {
      const frame: CrowdBuy =
        'budget' in amount
          ? { t: 'buy', seq, round, outcome, budget: amount.budget }
          : { t: 'buy', seq, round, outcome, shares: amount.shares, maxCost: amount.maxCost };
      if (key !== undefined) frame.key = key;
      return frame;
    });
  }

  /**
   * Sells (cashes out) `shares` whole shares of `outcome` in a `market` round,
   * refused with CP_ERR_MARKET_SLIPPAGE if they would bring fewer than `minProceeds` points.
   *
   * @param shares 1 to MAX_POINTS; @param minProceeds 0 to MAX_POINTS (integers; 0 = any price)
   * @returns the ack after the ledger commit: `ok: true` with `shares` (sold),
   *   `proceeds` (points received), `position` and `balance`; or `ok: false`
   *   with a refusal `code` (CP_ERR_MARKET_INSUFFICIENT_SHARES, CP_ERR_ROUND_*, …). A refusal resolves.
   * @throws (rejects) as `stake`
   */
  sell(round: string, outcome: string, shares: number, minProceeds: number, options?: TradeOptions): Promise<ActAck> {
    let key: string | undefined;
    try {
      checkName('round', round);
      checkName('outcome', outcome);
      checkAmount('shares', shares, 1);
      checkAmount('minProceeds', minProceeds, 0);
      key = checkKey(options);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#request((seq): CrowdSell => {
      const frame: CrowdSell = { t: 'sell', seq, round, outcome, shares, minProceeds };
      if (key !== undefined) frame.key = key;
      return frame;
    });
  }

  /**
   * {@link #send}, again with jittered backoff while the ack is a retryable refusal (RETRYABLE_CODES) and the
   * retry deadline allows another attempt. A retry refused CP_ERR_INTENT_RATE_LIMITED (the retries themselves
   * spent the viewer's intent budget) is retried too, and never returned in place of the server's own answer:
   * past the deadline the last other refusal is. A first attempt refused so is returned at once (the app sends
   * too fast). Each attempt has a fresh `seq`.
   */
  async #request(build: (seq: number) => CrowdInbound): Promise<ActAck> {
    const deadline = Date.now() + this.#retryDeadlineMs;
    let answer: ActAck | undefined;
    for (let attempt = 0; ; attempt++) {
      const ack = await this.#send(build);
      const throttled = attempt > 0 && ack.code === 'CP_ERR_INTENT_RATE_LIMITED';
      if (!throttled) answer = ack;
      if (ack.ok || !(throttled || isRetryable(ack.code))) return ack;
      const delay = Math.max(1, backoffDelayMs(attempt, this.#retryBackoff, this.#random));
      if (Date.now() + delay > deadline || this.#conn.state !== 'open') return answer ?? ack;
      await new Promise((r) => setTimeout(r, delay));
      if (this.#conn.state !== 'open') return answer ?? ack;
    }
  }

  /** Sends the frame built for the next `seq` and waits for its ack (see `act`). */
  #send(build: (seq: number) => CrowdInbound): Promise<ActAck> {
    const sock = this.#conn.socket;
    if (this.#conn.state !== 'open' || sock === null || sock.readyState !== WS_OPEN) {
      return Promise.reject(new CrowdplayError('CP_ERR_CLIENT_NOT_OPEN', [this.#conn.state]));
    }
    const seq = ++this.#seq;
    const frame = build(seq);
    return new Promise<ActAck>((resolve, reject) => {
      const timer = setTimeout(() => {
        if (!this.#pending.delete(seq)) return;
        this.#timedOut.add(seq);
        if (this.#timedOut.size > LATE_ACKS_KEPT) this.#timedOut.delete(this.#timedOut.values().next().value!);
        reject(new CrowdplayError('CP_ERR_CLIENT_REQUEST_TIMEOUT', [`${frame.t} (seq ${seq})`, this.#ackTimeoutMs]));
      }, this.#ackTimeoutMs);
      this.#pending.set(seq, { resolve, reject, timer });
      try {
        sock.send(JSON.stringify(frame));
      } catch (err) {
        clearTimeout(timer);
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
    this.#rejectPending(new CrowdplayError('CP_ERR_CLIENT_CLOSED', [code, ': closed by the client']));
    return this.#conn.close(code, reason);
  }

  #rejectPending(err: CrowdplayError): void {
    if (this.#pending.size === 0) return;
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pending) {
      clearTimeout(p.timer);
      p.reject(err);
    }
  }

  #protoError(code: 'CP_ERR_PROTO_INVALID' | 'CP_ERR_PROTO_UNKNOWN_TYPE', args: readonly unknown[]): void {
    this.emit('error', new CrowdplayError(code, args));
  }

  /** Frames other than `welcome` and `error` (those are the ReconnectingSocket's). */
  #onFrame(t: unknown, msg: object, info: FrameInfo): void {
    switch (t) {
      case 'ack':
        this.#onAck(msg as ActAck);
        return;
      case 'update':
        this.#onUpdate(msg as ChannelUpdate, info);
        return;
      case 'balance':
        this.#onBalance(msg as BalanceFrame);
        return;
      case 'roundResult': {
        const r = msg as RoundResultFrame;
        if (typeof r.round !== 'string' || typeof r.net !== 'number' || typeof r.staked !== 'number' || typeof r.paid !== 'number') {
          this.#protoError('CP_ERR_PROTO_INVALID', ['roundResult without string round / numeric staked, paid, net']);
          return;
        }
        this.emit('roundResult', r);
        return;
      }
      case 'resync':
        // The next update replaces the state; it may carry an older ev than the one seen.
        this.#lastEventId = undefined;
        this.emit('resync', msg as ResyncFrame);
        return;
      default:
        this.#protoError('CP_ERR_PROTO_UNKNOWN_TYPE', [String(t).slice(0, 32), 'crowd']);
    }
  }

  #onAck(ack: ActAck): void {
    if (typeof ack.seq !== 'number' || typeof ack.ok !== 'boolean') {
      this.#protoError('CP_ERR_PROTO_INVALID', ['ack without numeric seq / boolean ok']);
      return;
    }
    const p = this.#pending.get(ack.seq);
    if (!p && this.#timedOut.delete(ack.seq)) {
      // Its act already rejected with CP_ERR_CLIENT_REQUEST_TIMEOUT: the outcome, for whoever listens.
      this.emit('ack', ack);
      return;
    }
    if (!p) {
      this.#protoError('CP_ERR_PROTO_INVALID', [`ack for unknown seq ${ack.seq}`]);
      return;
    }
    this.#pending.delete(ack.seq);
    clearTimeout(p.timer);
    if (typeof ack.balance === 'number') this.#balance = ack.balance;
    this.emit('ack', ack);
    p.resolve(ack);
  }

  #onBalance(frame: BalanceFrame): void {
    if (typeof frame.points !== 'number' || typeof frame.reason !== 'string') {
      this.#protoError('CP_ERR_PROTO_INVALID', ['balance without numeric points / string reason']);
      return;
    }
    this.#balance = frame.points;
    this.emit('balance', frame);
  }

  #onUpdate(u: ChannelUpdate, info: FrameInfo): void {
    if (typeof u.ev !== 'number' || typeof u.at !== 'number') {
      this.#protoError('CP_ERR_PROTO_INVALID', ['update without numeric ev/at']);
      return;
    }
    if (this.#lastEventId === undefined || u.ev > this.#lastEventId) this.#lastEventId = u.ev;
    this.emit('update', u, info);
  }
}
