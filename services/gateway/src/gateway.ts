/**
 * The gateway: fastify (HTTP) + ws (WebSocket) edge of crowdplay. See
 * docs/architecture.md (data flow) and PROTOCOL-NOTES.md (every frame, close
 * code and route implemented here).
 *
 * `createGateway(deps)` builds the app without listening (tests use
 * `gateway.app.inject()`); `listen()` starts serving; `drain()` is the ordered
 * shutdown; `close()` releases everything (idempotent).
 *
 * One connection, in order:
 * 1. Upgrade request on `/v1/ws`: refused with a raw HTTP response when the
 *    gateway is not serving (503), the client address (/64 for IPv6) is over
 *    its connection bucket (429 + Retry-After), or the gateway holds
 *    WS_MAX_CONNECTIONS sockets (503).
 * 2. Upgrade (ws, noServer, perMessageDeflate off, maxPayload =
 *    WS_MAX_MESSAGE_BYTES for crowd). Frames arriving from here on are
 *    buffered (bounded) until the welcome.
 * 3. Auth (so that a refusal reaches the client as an error frame and a
 *    documented close code), then `router.assign(channel)`, then `welcome`.
 * 4. Crowd: member of the channel's fan-out (`ch.<C>.out` updates,
 *    `ch.<C>.wallet` balance frames) and listed as a join in the channel's
 *    next IntentBatch (the shard answers with a balance frame); `act`,
 *    `stake`, `buy` and `sell` frames are rate limited per viewer and
 *    micro-batched onto `ch.<C>.in`; acks (and join balances) come back on
 *    `gw.<id>.acks`. A crowd frame that fails validation gets an error frame
 *    and, when it carries a usable `seq`, a refused ack. Game: `declare`,
 *    `state` and `round.open|settle|cancel` become `ch.<C>.ctl` requests (in
 *    order); a request with `ref` is answered with a `result` or an `error`
 *    frame carrying that `ref`; `ch.<C>.game` messages are forwarded as they are.
 */
import type { Ledger } from '@crowdplay/ledger';
import { registerFundingRoutes } from './funding.ts';
import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import { WebSocketServer, type RawData, type ServerOptions, type WebSocket } from 'ws';
import {
  CHANNEL_ID_RE,
  CloseCode,
  CrowdplayError,
  isCrowdplayError,
  isRetryable,
  formatMessage,
  inboundContext,
  parseInbound,
  PROTOCOL_VERSION,
  type AckBatch,
  type BalanceFrame,
  type BusAck,
  type BusIntent,
  type BusTrade,
  type CrowdBuy,
  type CrowdSell,
  type CrowdStake,
  type ErrorCode,
  type GameInbound,
  type ResultFrame,
  type ResyncFrame,
  type WalletCredit,
  type Welcome,
} from '@crowdplay/protocol';
import type { Config } from '@crowdplay/config';
import { decodeJson, encodeJson, subjects as makeSubjects, type Bus, type Subjects, type Subscription } from '@crowdplay/bus';
import type { Store } from '@crowdplay/store';
import { tracer, tracingOn, type Logger, type Telemetry } from '@crowdplay/telemetry';
import { context, SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import { addressKey, KeyedLimiter, TurnBudget } from '@crowdplay/ratelimit';
import type { RouterApi } from '@crowdplay/router';
import type { ChannelCtlReply, ChannelCtlRequest } from '@crowdplay/crowd-engine';
import { Authenticator } from './auth.ts';
import type { SharedUpdates } from '@crowdplay/telegram';
import { TelegramAuth } from './telegram-auth.ts';
import { registerTelegramWebhook, type TelegramUpdate } from './telegram-webhook.ts';
import { closeWithError, Conn, sendErrorFrame, TEXT_FRAME, type ConnRole } from './connection.ts';
import { ChannelFanout } from './fanout.ts';
import { registerRoutes } from './http.ts';
import { IntentBatcher } from './intents.ts';
import { createGatewayMetrics, type GatewayMetrics } from './metrics.ts';

/** Path of the WebSocket endpoint. */
export const WS_PATH = '/v1/ws';
/**
 * Frames a client may send before its welcome (they are replayed in order
 * after it). More closes the socket with 4400: a client must wait for the
 * welcome, this bound only absorbs an eager SDK. The buffered bytes are also
 * capped at this × WS_MAX_MESSAGE_BYTES (a game socket's larger frame limit
 * does not raise it).
 */
export const PRE_AUTH_MAX_FRAMES = 32;
/**
 * Game messages (`declare`, `state`, `round.*`) queued for their `ch.<C>.ctl` request; at
 * this length the gateway stops reading the game socket (TCP backpressure)
 * until half of it is done.
 */
export const GAME_QUEUE_MAX = 64;
/**
 * Largest game frame, bytes, unless WS_MAX_MESSAGE_BYTES is larger: a full
 * `declare` (32 actions × 32 options of 32 characters, messages.ts) is ~40 KB,
 * and a `state` may carry MAX_GAME_STATE_BYTES plus its envelope.
 */
export const GAME_MIN_MESSAGE_BYTES = 65_536;
/**
 * How long a closing socket may take to finish the close handshake before it
 * is destroyed, ms (ws' `closeTimeout`; its default of 30 s would hold a slow
 * consumer's send buffer that long).
 */
export const CLOSE_HANDSHAKE_MS = 5_000;
/** Backoff bounds of an intent sent back by a moving channel, ms (a drain move took ≤ 452 ms: docs/benchmarks.md "Failover"). */
const MOVE_RESEND_MIN_MS = 20;
const MOVE_RESEND_MAX_MS = 500;
/** First and largest pause between sends of a game's declare or state refused as retryable, ms (doubling, jittered). */
const GAME_CTL_RETRY_MIN_MS = 50;
const GAME_CTL_RETRY_MAX_MS = 1_000;

/** What the gateway needs from the process. It owns none of these (it never closes them). */
export interface GatewayDeps {
  config: Config;
  bus: Bus;
  store: Store;
  router: RouterApi;
  telemetry: Telemetry;
  /** Handles the Telegram webhook's updates (served when given and TELEGRAM_BOT_TOKEN is set). */
  onTelegramUpdate?: (update: TelegramUpdate) => Promise<void>;
  /** The webhook's shared de-duplication and per-chat order across gateways (REDIS_URL; services/telegram startTelegram). */
  telegramUpdates?: SharedUpdates;
  /** When given, the funding routes (grants, balances) are served. */
  ledger?: Ledger;
  /** Clock of the upgrade budget, ms (performance.now; tests). */
  now?: () => number;
}

/** `created` (not listening) → `ready` (serving) → `draining` → `closed`. */
export type GatewayState = 'created' | 'ready' | 'draining' | 'closed';

/** Counts for tests and operators. */
export interface GatewayStats {
  /** Sockets this gateway holds (authenticating, open or closing). */
  sockets: number;
  /** Channels with local viewers (one `ch.<C>.out` subscription each). */
  channels: number;
  /** Channels with a local game connection. */
  games: number;
  /** Intents waiting in micro-batches. */
  pendingIntents: number;
}

/** A gateway instance. */
export interface Gateway {
  /** GATEWAY_ID: this gateway's id on the bus (acks come back on `gw.<id>.acks`). */
  readonly id: string;
  /** The fastify instance (routes registered; `inject()` works before `listen()`). */
  readonly app: FastifyInstance;
  readonly state: GatewayState;
  stats(): GatewayStats;
  /**
   * Subscribes to this gateway's acks and listens on HOST:PORT (PORT 0 = any free port).
   * @returns the bound port
   * @throws the listen error (e.g. EADDRINUSE); Error when called after drain/close
   */
  listen(): Promise<{ port: number }>;
  /**
   * First phase of a shutdown: readiness false, upgrades refused, new acts,
   * stakes and trades refused (CP_ERR_LIMIT_DRAINING in the ack), accepted
   * intents published; sockets stay open for acks and final batches. Idempotent.
   */
  pauseIntake(): void;
  /**
   * Ordered shutdown: readiness turns false (/readyz 503) and new upgrades get
   * 503; every socket gets an error frame CP_ERR_LIMIT_DRAINING and close 1001;
   * pending micro-batches are published; then waits (at most
   * min(SHUTDOWN_DEADLINE_MS, CLOSE_HANDSHAKE_MS)) for the sockets to close and
   * destroys the rest. HTTP keeps answering until `close()`. Safe to call twice.
   */
  drain(): Promise<void>;
  /** Drains (if not yet), unsubscribes and closes the HTTP server. Idempotent. */
  close(): Promise<void>;
}

/**
 * Builds a gateway. See the module comment for the connection lifecycle.
 * @throws RangeError on limiter settings that are out of range (config validates them first)
 */
export function createGateway(deps: GatewayDeps): Gateway {
  return new GatewayImpl(deps);
}

/** Writes a plain HTTP response on a socket whose upgrade is refused, then destroys it. */
function rejectUpgrade(socket: Duplex, status: number, code: ErrorCode, message: string, headers: Record<string, string> = {}): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const body = JSON.stringify({ code, message });
  const lines = [
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}`,
    'Connection: close',
    'Content-Type: application/json; charset=utf-8',
    `Content-Length: ${Buffer.byteLength(body)}`,
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
  ];
  socket.once('finish', () => socket.destroy());
  socket.end(`${lines.join('\r\n')}\r\n\r\n${body}`);
}

/** The resume point from the query (`lastEventId`). */
function parseLastEventId(query: URLSearchParams): number | undefined {
  const raw = query.get('lastEventId');
  if (raw === null || raw === '') return undefined;
  const n = /^\d{1,16}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n)) throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['lastEventId must be a non-negative integer']);
  return n;
}

/** The start of a batch frame as the shard encodes it (`{t, channel, ev, …}`: crowd-engine channel.ts). */
const BATCH_HEAD = /^\{"t":"batch","channel":"[A-Za-z0-9_-]{1,64}","ev":(\d{1,16})[,}]/;

/**
 * The `ev` of a batch frame's bytes, undefined for other frames (round frames carry none). Every live batch to a
 * game socket passes here: the shard's own encoding is read from the frame's first bytes (channel ids are
 * `CHANNEL_ID_PATTERN`, so no quote precedes `ev`); anything else is parsed in full.
 */
export function frameEv(data: Uint8Array): number | undefined {
  const head = BATCH_HEAD.exec(Buffer.from(data.buffer, data.byteOffset, Math.min(data.byteLength, 128)).toString('latin1'));
  if (head) return Number(head[1]);
  try {
    const f = JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8')) as { t?: unknown; ev?: unknown };
    return f.t === 'batch' && typeof f.ev === 'number' ? f.ev : undefined;
  } catch {
    return undefined;
  }
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

class GatewayImpl implements Gateway {
  readonly id: string;
  readonly app: FastifyInstance;
  private lifecycle: GatewayState = 'created';
  private readonly config: Config;
  private readonly bus: Bus;
  private readonly router: RouterApi;
  private readonly telemetry: Telemetry;
  private readonly store: Store;
  private readonly logger: Logger;
  private readonly subjects: Subjects;
  private readonly metrics: GatewayMetrics;
  private readonly auth: Authenticator;
  private readonly telegramAuth: TelegramAuth;
  private telegramWebhook: { drain(): Promise<void> } | undefined;
  private readonly fanout: ChannelFanout;
  private readonly batcher: IntentBatcher;
  /** Timers of `later` (intents and joins sent back by a moving channel), cleared on close. */
  private readonly laterTimers = new Set<ReturnType<typeof setTimeout>>();
  /** Upgrade requests waiting for a turn with WS_UPGRADE_TURN_BUDGET_MS left (onUpgrade), oldest first. */
  private readonly upgradesWaiting: Array<{ req: IncomingMessage; socket: Duplex; head: Buffer; at: number }> = [];
  /** The clock of the upgrade budget and of WS_UPGRADE_WAIT_MS, ms. */
  private readonly clock: () => number;
  private upgradeDrain: NodeJS.Immediate | null = null;
  /** The event-loop time upgrades may take per turn (WS_UPGRADE_TURN_BUDGET_MS). */
  private readonly upgradeBudget: TurnBudget;
  private readonly connLimiter: KeyedLimiter;
  private readonly intentLimiter: KeyedLimiter;
  private readonly crowdWss: WebSocketServer;
  private readonly gameWss: WebSocketServer;
  private readonly conns = new Map<number, Conn>();
  /** The local game connection of each channel (at most one per channel per gateway). */
  private readonly games = new Map<string, Conn>();
  /** In-flight `router.assign` per channel (a join storm makes one call). */
  private readonly assigning = new Map<string, Promise<void>>();
  /** In-flight snapshot request per channel. */
  private readonly snapshotting = new Map<string, Promise<Buffer | undefined>>();
  private idleWaiters: Array<() => void> = [];
  private nextConnId = 0;
  private ackSub: Subscription | undefined;
  private creditSub: Subscription | undefined;
  /** Open crowd sockets by tenant and viewer (grants are pushed to them). */
  private readonly byViewer = new Map<string, Set<Conn>>();
  private listening: Promise<{ port: number }> | undefined;
  private pingTimer: NodeJS.Timeout | undefined;
  private intakeClosed = false;
  private draining: Promise<void> | undefined;
  private closing: Promise<void> | undefined;

  constructor(deps: GatewayDeps) {
    const { config, bus, store, router, telemetry } = deps;
    this.config = config;
    this.bus = bus;
    this.router = router;
    this.telemetry = telemetry;
    this.store = store;
    this.id = config.gateway.id;
    this.logger = telemetry.logger.child({ component: 'gateway', gatewayId: this.id });
    this.subjects = makeSubjects(config.bus.subjectPrefix);
    const g = config.gateway;
    this.clock = deps.now ?? (() => performance.now());
    this.upgradeBudget = new TurnBudget(g.upgradeTurnBudgetMs, this.clock);
    this.metrics = createGatewayMetrics(
      telemetry.metrics,
      () => this.fanout.size,
      () => {
        let sum = 0;
        for (const c of this.conns.values()) sum += c.ws.bufferedAmount;
        return sum;
      },
      () => this.upgradesWaiting.length,
    );
    this.auth = new Authenticator(store, { clockSkewS: g.tokenClockSkewS });
    this.telegramAuth = new TelegramAuth(config.telegram, store);
    this.fanout = new ChannelFanout(
      bus,
      this.subjects,
      { maxBufferedBytes: g.maxBufferedBytes, skipBufferedBytes: g.skipBufferedBytes },
      this.metrics,
      this.logger,
      (conn) => this.slowConsumer(conn),
    );
    this.batcher = new IntentBatcher(
      bus,
      this.subjects,
      { gatewayId: this.id, batchMs: g.intentBatchMs, batchMax: g.intentBatchMax },
      this.metrics,
      this.logger,
    );
    this.connLimiter = new KeyedLimiter({ ratePerS: g.connRatePerS, burst: g.connBurst });
    this.intentLimiter = new KeyedLimiter({ ratePerS: g.intentRatePerS, burst: g.intentBurst });
    const wsOptions = (maxPayload: number): ServerOptions & { closeTimeout: number } => ({
      noServer: true,
      clientTracking: false,
      perMessageDeflate: false,
      maxPayload,
      closeTimeout: CLOSE_HANDSHAKE_MS,
    });
    this.crowdWss = new WebSocketServer(wsOptions(g.maxMessageBytes));
    this.gameWss = new WebSocketServer(
      wsOptions(Math.max(g.maxMessageBytes, config.engine.maxGameStateBytes + 1_024, GAME_MIN_MESSAGE_BYTES)),
    );

    this.app = Fastify({
      loggerInstance: telemetry.logger.child({ component: 'http' }),
      // Per-request lines would drown the log (every /metrics scrape); errors are still logged.
      logController: new LogController({ disableRequestLogging: true }),
      // Bodies are validated as sent: "5" is not the integer 5 and an unknown field is an error (fastify coerces and strips by default).
      ajv: { customOptions: { coerceTypes: false, removeAdditional: false } },
      // Path parameters carry viewer ids of up to 128 characters (GET /v1/balances/:viewer), percent-encoded.
      routerOptions: { maxParamLength: 1_024 },
    }) as unknown as FastifyInstance;
    registerRoutes(this.app, {
      config,
      telemetry,
      ready: () => this.lifecycle === 'ready',
      state: () => this.lifecycle,
    });
    if (deps.onTelegramUpdate && config.telegram.botToken) {
      this.telegramWebhook = registerTelegramWebhook(this.app, {
        secret: config.telegram.webhookSecret,
        handle: deps.onTelegramUpdate,
        telemetry,
        maxQueued: config.telegram.webhookMaxQueued,
        dedupeSize: config.telegram.webhookDedupeSize,
        bodyLimitBytes: config.telegram.webhookMaxBodyBytes,
        ...(deps.telegramUpdates ? { shared: deps.telegramUpdates } : {}),
      });
    }
    if (deps.ledger) {
      registerFundingRoutes(this.app, {
        store,
        ledger: deps.ledger,
        auth: this.auth,
        telemetry,
        onGranted: (credit) => this.bus.publish(this.subjects.walletCredits(), encodeJson(credit)),
      });
    }
    this.app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.onUpgrade(req, socket, head));
  }

  get state(): GatewayState {
    return this.lifecycle;
  }

  stats(): GatewayStats {
    return { sockets: this.conns.size, channels: this.fanout.size, games: this.games.size, pendingIntents: this.batcher.waiting };
  }

  listen(): Promise<{ port: number }> {
    this.listening ??= this.start();
    return this.listening;
  }

  /**
   * First phase of an ordered shutdown: readiness turns false, new upgrades
   * are refused, new acts are refused in their act ack (CP_ERR_LIMIT_DRAINING),
   * and the intents already accepted are published. Sockets stay open so the
   * acks and the shard's final batches still reach them; `drain()` closes them.
   * Safe to call twice.
   */
  pauseIntake(): void {
    if (this.lifecycle === 'created' || this.lifecycle === 'ready') this.lifecycle = 'draining';
    this.intakeClosed = true;
    this.batcher.flushAll();
  }

  drain(): Promise<void> {
    this.draining ??= this.doDrain();
    return this.draining;
  }

  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  // ------------------------------------------------------------------ lifecycle

  private async start(): Promise<{ port: number }> {
    if (this.lifecycle !== 'created') throw new Error(`gateway cannot listen: it is ${this.lifecycle}`);
    this.ackSub = this.bus.subscribe(this.subjects.gatewayAcks(this.id), (msg) => {
      // Traced: the shard's span (in the message's headers) is the parent; the loop from the intent closes here.
      if (tracingOn() && trace.getSpan(context.active()) !== undefined) {
        tracer().startActiveSpan(
          'crowdplay.ack_batch.deliver',
          { kind: SpanKind.CONSUMER, attributes: { 'crowdplay.gateway': this.id } },
          (span) => {
            try {
              this.onAcks(msg.data, span);
            } finally {
              span.end();
            }
          },
        );
      } else this.onAcks(msg.data);
    });
    this.creditSub = this.bus.subscribe(this.subjects.walletCredits(), (msg) => this.onCredit(msg.data));
    const { host, port } = this.config.http;
    await this.app.listen({ host, port, backlog: this.config.http.listenBacklog });
    const addr = this.app.server.address();
    const bound = typeof addr === 'object' && addr !== null ? addr.port : port;
    if (this.lifecycle === 'created') this.lifecycle = 'ready';
    const pingMs = this.config.gateway.pingIntervalMs;
    if (pingMs > 0) this.pingTimer = setInterval(() => this.pingAll(), pingMs);
    this.logger.info({ host, port: bound, bus: this.bus.kind }, 'gateway listening');
    return { port: bound };
  }

  private async doDrain(): Promise<void> {
    // Updates already taken from Telegram are handled (their replies queued) before the process stops.
    await this.telegramWebhook?.drain();
    if (this.lifecycle === 'created' || this.lifecycle === 'ready') this.lifecycle = 'draining';
    const open = [...this.conns.values()].filter((c) => c.state === 'auth' || c.state === 'open');
    for (const conn of open) this.end(conn, 'CP_ERR_LIMIT_DRAINING');
    this.batcher.flushAll();
    const waitMs = Math.min(this.config.gateway.shutdownMs, CLOSE_HANDSHAKE_MS);
    await this.waitForSockets(waitMs);
    const left = this.conns.size;
    for (const conn of [...this.conns.values()]) conn.ws.terminate();
    this.logger.info({ closed: open.length, destroyed: left }, 'gateway drained');
  }

  /**
   * Heartbeat: a socket that did not answer the previous ping is terminated
   * (counted as CP_ERR_LIMIT_PING_TIMEOUT); every other one is pinged again.
   * One timer for all sockets, WS_PING_INTERVAL_MS apart.
   */
  private pingAll(): void {
    for (const conn of this.conns.values()) {
      if (!conn.alive) {
        this.refuse('CP_ERR_LIMIT_PING_TIMEOUT', conn);
        conn.ws.terminate();
        continue;
      }
      conn.alive = false;
      try {
        conn.ws.ping();
      } catch {
        // not open yet or already closing: the close handler cleans up
      }
    }
  }

  private async doClose(): Promise<void> {
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.pingTimer = undefined;
    await this.drain();
    this.lifecycle = 'closed';
    if (this.upgradeDrain) clearImmediate(this.upgradeDrain);
    this.upgradeDrain = null;
    this.upgradeBudget.close();
    // Upgrades still waiting for their turn: refused as any upgrade arriving now (503, draining).
    for (const u of this.upgradesWaiting.splice(0)) this.takeUpgrade(u.req, u.socket, u.head);
    this.ackSub?.unsubscribe();
    this.creditSub?.unsubscribe();
    for (const t of this.laterTimers) clearTimeout(t);
    this.laterTimers.clear();
    this.batcher.close();
    this.fanout.close();
    this.crowdWss.close();
    this.gameWss.close();
    await this.app.close();
  }

  /** Resolves when no socket is left, or after `ms`. */
  private waitForSockets(ms: number): Promise<void> {
    if (this.conns.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.idleWaiters.push(done);
    });
  }

  // ------------------------------------------------------------------ upgrade and auth

  /**
   * An upgrade request: taken now while this event-loop turn has spent less
   * than WS_UPGRADE_TURN_BUDGET_MS on upgrades, else queued behind the ones
   * already waiting and taken in a later turn (setImmediate: the I/O polled in
   * between, the acks of players already connected among it, goes first). A
   * burst of connects (a rollover) then costs the loop at most the budget per
   * turn instead of every upgrade one poll returned. Waiting sockets count
   * towards WS_MAX_CONNECTIONS (one past it is refused at once, 503); one
   * reset or destroyed while it waits is skipped (a client's FIN is not seen
   * until its turn: the socket is not read while it waits). One that waited
   * longer than WS_UPGRADE_WAIT_MS is answered 503 CP_ERR_LIMIT_OVERLOADED
   * (retryable) at its turn, without authentication: a gateway that has
   * fallen behind spends its turns on clients still waiting for an answer,
   * and the others retry with backoff instead of timing out in silence.
   */
  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => undefined); // a reset during the handshake must not crash the process
    if (this.upgradesWaiting.length > 0 || this.upgradeBudget.spent()) {
      if (this.conns.size + this.upgradesWaiting.length >= this.config.gateway.maxConnections) {
        this.refuseOverMaxConnections(socket, req.socket.remoteAddress ?? '');
        return;
      }
      this.upgradesWaiting.push({ req, socket, head, at: this.clock() });
      this.metrics.upgradesDeferred.add(1);
      this.upgradeDrain ??= setImmediate(() => this.drainUpgrades());
      return;
    }
    this.takeUpgrade(req, socket, head);
  }

  /** Takes waiting upgrades, oldest first, until this turn's budget is spent; the rest wait for the next turn. */
  private drainUpgrades(): void {
    this.upgradeDrain = null;
    let taken = 0;
    const waitMs = this.config.gateway.upgradeWaitMs;
    while (this.upgradesWaiting.length > taken && !this.upgradeBudget.spent()) {
      const u = this.upgradesWaiting[taken++]!;
      if (u.socket.destroyed) continue;
      if (waitMs > 0 && this.clock() - u.at > waitMs) this.refuseOverloaded(u.socket, u.req.socket.remoteAddress ?? '');
      else this.takeUpgrade(u.req, u.socket, u.head);
    }
    this.upgradesWaiting.splice(0, taken);
    if (this.upgradesWaiting.length > 0) this.upgradeDrain = setImmediate(() => this.drainUpgrades());
  }

  /** Answers an upgrade that waited past WS_UPGRADE_WAIT_MS for its turn: 503 CP_ERR_LIMIT_OVERLOADED, counted. */
  private refuseOverloaded(socket: Duplex, address: string): void {
    const waitMs = this.config.gateway.upgradeWaitMs;
    this.metrics.connectionsRefused.add(1, { reason: 'CP_ERR_LIMIT_OVERLOADED' });
    this.telemetry.refusals.refuse('gateway', 'CP_ERR_LIMIT_OVERLOADED', { limit: 'WS_UPGRADE_WAIT_MS', value: waitMs, address });
    rejectUpgrade(socket, 503, 'CP_ERR_LIMIT_OVERLOADED', formatMessage('CP_ERR_LIMIT_OVERLOADED', [waitMs]));
  }

  /** Answers an upgrade over WS_MAX_CONNECTIONS (sockets held and waiting): 503, counted. */
  private refuseOverMaxConnections(socket: Duplex, address: string): void {
    this.metrics.connectionsRefused.add(1, { reason: 'CP_ERR_LIMIT_MAX_CONNECTIONS' });
    this.telemetry.refusals.refuse('gateway', 'CP_ERR_LIMIT_MAX_CONNECTIONS', {
      address,
      sockets: this.conns.size,
      waiting: this.upgradesWaiting.length,
    });
    rejectUpgrade(
      socket,
      503,
      'CP_ERR_LIMIT_MAX_CONNECTIONS',
      formatMessage('CP_ERR_LIMIT_MAX_CONNECTIONS', [this.config.gateway.maxConnections]),
    );
  }

  private takeUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://gateway.invalid');
    } catch {
      rejectUpgrade(socket, 400, 'CP_ERR_PROTO_INVALID', 'bad request URL');
      return;
    }
    if (url.pathname !== WS_PATH) {
      rejectUpgrade(socket, 404, 'CP_ERR_PROTO_INVALID', `the WebSocket endpoint is ${WS_PATH}`);
      return;
    }
    const address = req.socket.remoteAddress ?? '';
    if (this.lifecycle !== 'ready') {
      this.metrics.connectionsRefused.add(1, { reason: 'CP_ERR_LIMIT_DRAINING' });
      this.telemetry.refusals.refuse('gateway', 'CP_ERR_LIMIT_DRAINING', { address });
      rejectUpgrade(socket, 503, 'CP_ERR_LIMIT_DRAINING', formatMessage('CP_ERR_LIMIT_DRAINING', []));
      return;
    }
    let key: string;
    try {
      key = addressKey(address);
    } catch {
      key = address;
    }
    const decision = this.connLimiter.take(key);
    if (!decision.allowed) {
      this.metrics.connectionsRefused.add(1, { reason: 'CP_ERR_LIMIT_CONNECTION_RATE' });
      this.telemetry.refusals.refuse('gateway', 'CP_ERR_LIMIT_CONNECTION_RATE', { address: key });
      rejectUpgrade(socket, 429, 'CP_ERR_LIMIT_CONNECTION_RATE', formatMessage('CP_ERR_LIMIT_CONNECTION_RATE', []), {
        'Retry-After': String(Math.max(1, Math.ceil(decision.retryAfterMs / 1_000))),
      });
      return;
    }
    if (this.conns.size >= this.config.gateway.maxConnections) {
      this.refuseOverMaxConnections(socket, key);
      return;
    }
    const wss = url.searchParams.get('role') === 'game' ? this.gameWss : this.crowdWss;
    wss.handleUpgrade(req, socket, head, (ws) => this.onSocket(ws, url, address));
  }

  private onSocket(ws: WebSocket, url: URL, address: string): void {
    const roleParam = url.searchParams.get('role');
    const role: ConnRole = roleParam === 'crowd' || roleParam === 'game' ? roleParam : 'invalid';
    const conn = new Conn(++this.nextConnId, ws, role, url.searchParams.get('channel') ?? '', address);
    this.conns.set(conn.id, conn);
    ws.on('message', (data: RawData, isBinary: boolean) => this.onMessage(conn, data, isBinary));
    ws.on('error', (err: Error) => this.onSocketError(conn, err));
    ws.on('close', () => this.onClose(conn));
    ws.on('pong', () => {
      conn.alive = true;
    });
    void this.authenticate(conn, url.searchParams);
  }

  private async authenticate(conn: Conn, query: URLSearchParams): Promise<void> {
    try {
      if (conn.role === 'invalid') throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['query parameter role must be crowd or game']);
      const initData = conn.role === 'crowd' ? query.get('initData') : null;
      if (initData !== null) {
        // A Telegram Mini App: the channel is the one its signed start parameter names.
        conn.lastEventId = parseLastEventId(query);
        const id = await this.telegramAuth.crowd(initData, conn.channel);
        conn.channel = id.channel;
        conn.tenantId = id.tenantId;
        conn.viewer = id.viewer;
        conn.displayName = id.name;
      } else if (!CHANNEL_ID_RE.test(conn.channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
      else if (conn.role === 'crowd') {
        conn.lastEventId = parseLastEventId(query);
        const id = await this.auth.crowd(conn.channel, query.get('token'));
        conn.tenantId = id.tenantId;
        conn.viewer = id.viewer;
      } else {
        conn.lastEventId = parseLastEventId(query);
        conn.tenantId = (await this.auth.game(conn.channel, query.get('key'))).tenantId;
        if (conn.state !== 'auth') return;
        if (this.games.has(conn.channel)) throw new CrowdplayError('CP_ERR_CHANNEL_GAME_CONNECTED', [conn.channel]);
        this.games.set(conn.channel, conn);
      }
      if (conn.state !== 'auth') return;
      try {
        await this.assign(conn.channel);
      } catch (err) {
        if (initData === null || !isCrowdplayError(err, 'CP_ERR_CHANNEL_MIGRATED')) throw err;
        // The chat moved (group → supergroup) since this gateway cached its channel: look again, once.
        const id = await this.telegramAuth.crowd(initData, '', Date.now(), true);
        conn.channel = id.channel;
        if (conn.state !== 'auth') return;
        await this.assign(conn.channel);
      }
      if (conn.state !== 'auth') return;
      if (this.lifecycle !== 'ready') throw new CrowdplayError('CP_ERR_LIMIT_DRAINING');
      this.open(conn);
    } catch (err) {
      const e = err instanceof CrowdplayError ? err : new CrowdplayError('CP_ERR_INTERNAL', [], { cause: err });
      if (e.code === 'CP_ERR_INTERNAL') this.logger.error({ err, channel: conn.channel, role: conn.role }, 'connection setup failed');
      else this.refuse(e.code, conn);
      if (conn.state === 'auth') {
        this.metrics.connectionsRefused.add(1, { reason: e.code });
        const closeCode = e.closeCode ?? (e.code === 'CP_ERR_PROTO_INVALID' ? CloseCode.protocolViolation : CloseCode.internal);
        this.end(conn, e.code, e.message, closeCode);
      }
    }
  }

  /** `router.assign`, one call in flight per channel. @throws CrowdplayError (CP_ERR_CHANNEL_UNAVAILABLE when the router fails without one) */
  private assign(channel: string): Promise<void> {
    let p = this.assigning.get(channel);
    if (!p) {
      p = this.router
        .assign(channel)
        .then(
          () => undefined,
          (err: unknown) => {
            throw err instanceof CrowdplayError ? err : new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [channel], { cause: err });
          },
        )
        .finally(() => this.assigning.delete(channel));
      this.assigning.set(channel, p);
    }
    return p;
  }

  /** Auth passed: welcome, membership, initial update, replay of early frames. */
  private open(conn: Conn): void {
    try {
      // Subscribe before the welcome: nothing can be delivered in between (delivery is asynchronous).
      if (conn.role === 'crowd') this.fanout.join(conn);
      else {
        // Resuming: live batches wait until the missed ones are replayed (or the resync is sent).
        if (conn.lastEventId !== undefined) conn.resumeBuffer = [];
        conn.gameSub = this.bus.subscribe(this.subjects.channelGame(conn.channel), (msg) => this.sendToGame(conn, msg.data));
      }
    } catch (err) {
      this.logger.error({ err, channel: conn.channel }, 'bus subscribe failed');
      this.end(conn, 'CP_ERR_INTERNAL');
      return;
    }
    conn.state = 'open';
    conn.counted = true;
    if (conn.role === 'crowd') {
      const k = viewerKey(conn.tenantId, conn.viewer);
      let set = this.byViewer.get(k);
      if (!set) this.byViewer.set(k, (set = new Set()));
      set.add(conn);
    }
    const attrs = { role: conn.role };
    this.metrics.connections.add(1, attrs);
    this.metrics.opened.add(1, attrs);
    const welcome: Welcome = {
      t: 'welcome',
      v: PROTOCOL_VERSION,
      role: conn.role === 'game' ? 'game' : 'crowd',
      channel: conn.channel,
      serverTime: Date.now(),
      tickMs: this.config.engine.tickMs,
    };
    if (conn.role === 'crowd') welcome.viewer = conn.viewer;
    conn.ws.send(JSON.stringify(welcome));
    this.metrics.connectSetupMs.record(performance.now() - conn.upgradedAt, attrs);
    if (conn.role === 'crowd') {
      // Before the replay of early frames: a stake sent with the join rides in the same batch, after it.
      this.batcher.join(conn.channel, conn.id, conn.viewer);
      void this.sendInitialUpdate(conn);
    } else if (conn.resumeBuffer) void this.resumeGame(conn);
    const early = conn.early ?? [];
    conn.early = null;
    for (const f of early) {
      if (conn.state !== 'open') break;
      this.handleFrame(conn, f.data, f.isBinary);
    }
  }

  /**
   * The joining viewer's first update: the newest one this gateway holds for
   * the channel, else the shard's current one (`ch.<C>.ctl` snapshot, one
   * request in flight per channel). Skipped when it is not newer than the
   * viewer's `lastEventId`, or when a broadcast reached the viewer first.
   */
  private async sendInitialUpdate(conn: Conn): Promise<void> {
    let latest = this.fanout.latest(conn.channel);
    if (!latest) {
      let bytes: Buffer | undefined;
      try {
        bytes = await this.snapshot(conn.channel);
      } catch (err) {
        this.logger.debug({ err, channel: conn.channel }, 'snapshot request failed; the viewer gets the next update');
        return;
      }
      if (!bytes || !conn.writable || conn.gotUpdate) return;
      this.fanout.offerSnapshot(conn.channel, bytes);
      latest = this.fanout.latest(conn.channel);
      if (!latest) return;
    }
    if (conn.lastEventId !== undefined) {
      // Updates are full states: the newest one is everything a viewer missed. A viewer ahead of the channel
      // saw changes that were lost (a shard died before its snapshot): it must replace its state.
      if (conn.lastEventId > latest.ev) {
        this.metrics.resumes.add(1, { role: 'crowd', outcome: 'resync_ahead' });
        this.sendResync(conn, 'ahead');
      } else {
        this.metrics.resumes.add(1, { role: 'crowd', outcome: 'current' });
        if (latest.ev === conn.lastEventId) return;
      }
    }
    this.fanout.sendTo(conn, latest.bytes);
  }

  private sendResync(conn: Conn, reason: ResyncFrame['reason']): void {
    if (!conn.writable) return;
    const frame: ResyncFrame = { t: 'resync', channel: conn.channel, from: conn.lastEventId ?? 0, reason };
    conn.ws.send(JSON.stringify(frame));
  }

  /**
   * A game socket that reconnected with `lastEventId`: the batches it missed
   * from the event log (at most EVENT_LOG_RESUME_MAX_EVENTS), then the live
   * ones held meanwhile (without those already replayed). When the log cannot
   * serve it (pruned, too far behind, unreadable): a `resync` frame, the
   * channel's current update (the snapshot), then the live batches. A shard
   * logs a batch before it publishes it, so a batch the replay read can reach
   * this gateway live after the replay: `conn.lastBatchEv` keeps sendToGame
   * from sending it twice. The log is read only once the bus confirmed the
   * subscription (`flush`: NATS answers its PING after the SUB): a batch logged
   * after the read is then published to a live subscription, never into the
   * gap between the two (a busy gateway's SUB can wait seconds in its buffer).
   */
  private async resumeGame(conn: Conn): Promise<void> {
    const from = conn.lastEventId ?? 0;
    let replayedUpTo = from;
    let reason: ResyncFrame['reason'] | null = null;
    try {
      await this.bus.flush();
      const s = await this.store.events.since(conn.channel, from, this.config.eventLog.resumeMaxEvents);
      if (from < s.floor) reason = 'pruned';
      else if (s.more) reason = 'behind';
      else {
        for (const e of s.events) {
          this.sendToGameNow(conn, Buffer.from(e.body, 'utf8'));
          replayedUpTo = e.eventId;
        }
        this.metrics.eventsReplayed.add(s.events.length);
      }
    } catch (err) {
      this.logger.warn({ err, channel: conn.channel }, 'event log read failed; the game resyncs');
      reason = 'unavailable';
    }
    this.metrics.resumes.add(1, { role: 'game', outcome: reason ? `resync_${reason}` : 'replayed' });
    if (reason) {
      this.sendResync(conn, reason);
      const bytes = await this.snapshot(conn.channel).catch(() => undefined);
      if (bytes) this.sendToGameNow(conn, bytes);
    }
    const held = conn.resumeBuffer ?? [];
    conn.resumeBuffer = null;
    // Only batches the replay sent can come live afterwards: with nothing replayed (a game ahead of the log, e.g. a
    // fresh database), live batches are not held back against its lastEventId.
    if (replayedUpTo > from) conn.lastBatchEv = replayedUpTo;
    for (const data of held) {
      const ev = frameEv(data);
      if (ev !== undefined && ev <= replayedUpTo) this.metrics.replayedLiveSkipped.add(1);
      else this.sendLiveToGame(conn, data, ev);
    }
  }

  private snapshot(channel: string): Promise<Buffer | undefined> {
    let p = this.snapshotting.get(channel);
    if (!p) {
      p = this.requestSnapshot(channel).finally(() => this.snapshotting.delete(channel));
      this.snapshotting.set(channel, p);
    }
    return p;
  }

  private async requestSnapshot(channel: string): Promise<Buffer | undefined> {
    const req: ChannelCtlRequest = { op: 'snapshot' };
    const msg = await this.bus.request(this.subjects.channelCtl(channel), encodeJson(req), { timeoutMs: this.config.bus.requestTimeoutMs });
    const reply = decodeJson<ChannelCtlReply>(msg.data);
    return reply.ok && typeof reply.update === 'string' ? Buffer.from(reply.update, 'utf8') : undefined;
  }

  // ------------------------------------------------------------------ inbound frames

  private onMessage(conn: Conn, data: RawData, isBinary: boolean): void {
    if (conn.state === 'auth') {
      const early = conn.early;
      if (!early) return;
      const buf = toBuffer(data);
      conn.earlyBytes += buf.length;
      if (early.length >= PRE_AUTH_MAX_FRAMES || conn.earlyBytes > PRE_AUTH_MAX_FRAMES * this.config.gateway.maxMessageBytes) {
        this.refuse('CP_ERR_PROTO_VIOLATIONS', conn, { why: 'frames before the welcome' });
        this.end(conn, 'CP_ERR_PROTO_VIOLATIONS', `more than ${PRE_AUTH_MAX_FRAMES} frames (or their bytes) before the welcome`);
        return;
      }
      early.push({ data: buf, isBinary });
      return;
    }
    if (conn.state !== 'open') return;
    this.handleFrame(conn, toBuffer(data), isBinary);
  }

  private handleFrame(conn: Conn, data: Buffer, isBinary: boolean): void {
    if (isBinary) {
      this.protocolError(conn, new CrowdplayError('CP_ERR_PROTO_INVALID', ['binary frames are not accepted: send JSON text']));
      return;
    }
    if (conn.role === 'crowd') this.onCrowdText(conn, data.toString('utf8'));
    else this.onGameText(conn, data.toString('utf8'));
  }

  private onCrowdText(conn: Conn, text: string): void {
    if (tracingOn()) {
      this.onCrowdTextTraced(conn, text);
      return;
    }
    this.takeCrowdText(conn, text, undefined);
  }

  /**
   * One crowd frame inside its `crowdplay.intent` span (a new trace; tracing on only). The span ends
   * once the intent is in its micro-batch (or refused); the batch's publish span links it.
   */
  private onCrowdTextTraced(conn: Conn, text: string): void {
    const span = tracer().startSpan('crowdplay.intent', {
      kind: SpanKind.SERVER,
      attributes: { 'crowdplay.channel': conn.channel, 'crowdplay.gateway': this.id, 'crowdplay.conn': conn.id },
    });
    try {
      context.with(trace.setSpan(context.active(), span), () => this.takeCrowdText(conn, text, span));
    } finally {
      span.end();
    }
  }

  private takeCrowdText(conn: Conn, text: string, span: Span | undefined): void {
    let msg;
    try {
      msg = parseInbound('crowd', text);
    } catch (err) {
      span?.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof CrowdplayError ? err.code : 'CP_ERR_PROTO_MALFORMED' });
      this.protocolError(conn, err, text);
      return;
    }
    span?.setAttributes({ 'crowdplay.frame': msg.t, 'crowdplay.seq': msg.seq });
    if (this.intakeClosed) {
      span?.setStatus({ code: SpanStatusCode.ERROR, message: 'CP_ERR_LIMIT_DRAINING' });
      this.refuse('CP_ERR_LIMIT_DRAINING', conn);
      conn.ws.send(ackFrame(msg.seq, false, undefined, 'CP_ERR_LIMIT_DRAINING'));
      return;
    }
    const decision = this.intentLimiter.take(`${conn.tenantId}|${conn.viewer}`);
    if (!decision.allowed) {
      span?.setStatus({ code: SpanStatusCode.ERROR, message: 'CP_ERR_INTENT_RATE_LIMITED' });
      this.refuse('CP_ERR_INTENT_RATE_LIMITED', conn);
      conn.ws.send(ackFrame(msg.seq, false, undefined, 'CP_ERR_INTENT_RATE_LIMITED'));
      return;
    }
    let intent: BusIntent;
    if (msg.t === 'act') {
      intent = { conn: conn.id, viewer: conn.viewer, seq: msg.seq, action: msg.action, at: Date.now() };
      if (msg.option !== undefined) intent.option = msg.option;
    } else if (msg.t === 'guess') {
      intent = { conn: conn.id, viewer: conn.viewer, seq: msg.seq, action: '', guess: msg.word, at: Date.now() };
      if (conn.displayName !== undefined) intent.name = conn.displayName;
    } else {
      intent = { conn: conn.id, viewer: conn.viewer, seq: msg.seq, action: '', trade: busTrade(msg), at: Date.now() };
    }
    this.batcher.add(conn.channel, intent, span?.spanContext());
  }

  private onGameText(conn: Conn, text: string): void {
    let msg: GameInbound;
    try {
      msg = parseInbound('game', text);
    } catch (err) {
      this.protocolError(conn, err, text);
      return;
    }
    conn.gameQueue.push(msg);
    if (conn.gameQueue.length >= GAME_QUEUE_MAX && !conn.ws.isPaused) conn.ws.pause();
    if (!conn.gamePumping) void this.pumpGame(conn);
  }

  /** Sends the game's messages to the shard one at a time, in order. Never rejects. */
  private async pumpGame(conn: Conn): Promise<void> {
    conn.gamePumping = true;
    try {
      for (let msg = conn.gameQueue.shift(); msg !== undefined && conn.state === 'open'; msg = conn.gameQueue.shift()) {
        if (conn.ws.isPaused && conn.gameQueue.length <= GAME_QUEUE_MAX / 2) conn.ws.resume();
        await this.forwardGame(conn, msg);
      }
    } finally {
      conn.gamePumping = false;
    }
  }

  /**
   * One game message as a `ch.<C>.ctl` request. Declare/state: success is
   * silent, a refusal is an error frame. Round ops carry the game's tenant; a
   * request with `ref` is answered with `{t:'result', ref, ok:true, round?}`
   * or an error frame with `ref` (without `ref`, success is silent too).
   */
  private async forwardGame(conn: Conn, msg: GameInbound): Promise<void> {
    const { req, ref } = ctlRequest(conn, msg);
    // Declare and state have no answer the game could retry on: a retryable refusal (the channel moving, no owner
    // yet) is sent again here, in order, until GAME_CTL_RETRY_MS; a state with a newer one queued behind it is not.
    const retries = req.op === 'declare' || req.op === 'state';
    const limitMs = this.config.gateway.gameCtlRetryMs;
    const t0 = performance.now();
    let backoffMs = GAME_CTL_RETRY_MIN_MS;
    let reply: ChannelCtlReply;
    for (;;) {
      reply = await this.ctlOnce(conn, req);
      if (reply.ok || !retries || !isRetryable(reply.code) || limitMs === 0) break;
      if (req.op === 'state' && conn.gameQueue.some((m) => m.t === 'state')) return; // superseded
      const leftMs = limitMs - (performance.now() - t0);
      if (leftMs <= 0 || this.intakeClosed || conn.state !== 'open') {
        this.metrics.gameCtlRetried.add(1, { outcome: 'expired' });
        break;
      }
      this.metrics.gameCtlRetried.add(1, { outcome: 'resent' });
      const delayMs = Math.min(leftMs, backoffMs * (0.5 + Math.random() / 2));
      backoffMs = Math.min(GAME_CTL_RETRY_MAX_MS, backoffMs * 2);
      await new Promise<void>((resolve) => this.later(resolve, delayMs));
      if (conn.state !== 'open') return;
    }
    if (!reply.ok) {
      sendErrorFrame(conn, reply.code, reply.message, ref);
      return;
    }
    if (ref === undefined || !conn.writable) return;
    const result: ResultFrame = { t: 'result', ref, ok: true };
    if (reply.round !== undefined) result.round = reply.round;
    conn.ws.send(JSON.stringify(result));
  }

  /**
   * One `ch.<C>.ctl` request; a bus failure (no owner answering, a timeout) is CP_ERR_CHANNEL_UNAVAILABLE, counted
   * as a refusal (logged once per interval: under overload every game's retries fail alike). Never rejects.
   */
  private async ctlOnce(conn: Conn, req: ChannelCtlRequest): Promise<ChannelCtlReply> {
    try {
      const res = await this.bus.request(this.subjects.channelCtl(conn.channel), encodeJson(req), {
        timeoutMs: this.config.bus.requestTimeoutMs,
      });
      return decodeJson<ChannelCtlReply>(res.data);
    } catch (err) {
      this.refuse('CP_ERR_CHANNEL_UNAVAILABLE', conn, { op: req.op, bus: (err as { code?: string }).code ?? String(err) });
      return { ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: formatMessage('CP_ERR_CHANNEL_UNAVAILABLE', [conn.channel]) };
    }
  }

  /**
   * Reports a bad frame (error frame + refusal); at WS_PROTOCOL_ERROR_LIMIT
   * errors the socket is closed with 4400 CP_ERR_PROTO_VIOLATIONS. When the
   * frame's `text` carries a usable `seq` (crowd), the request is also
   * answered with a refused ack of the same code; a game frame's `ref` is put
   * in the error frame.
   */
  private protocolError(conn: Conn, err: unknown, text?: string): void {
    const e = err instanceof CrowdplayError ? err : new CrowdplayError('CP_ERR_PROTO_MALFORMED', [], { cause: err });
    this.refuse(e.code, conn);
    const ctx = text === undefined ? {} : inboundContext(text);
    if (conn.role === 'game') sendErrorFrame(conn, e.code, e.message, ctx.ref);
    else {
      sendErrorFrame(conn, e.code, e.message);
      if (ctx.seq !== undefined && conn.ws.readyState === 1) conn.ws.send(ackFrame(ctx.seq, false, undefined, e.code));
    }
    if (++conn.protocolErrors >= this.config.gateway.protocolErrorLimit) {
      this.refuse('CP_ERR_PROTO_VIOLATIONS', conn);
      this.end(conn, 'CP_ERR_PROTO_VIOLATIONS');
    }
  }

  private onSocketError(conn: Conn, err: Error): void {
    const code = (err as { code?: unknown }).code;
    if (code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') {
      // ws has already closed the socket with 1009 (no error frame can precede it).
      this.refuse('CP_ERR_PROTO_TOO_BIG', conn, { maxMessageBytes: this.config.gateway.maxMessageBytes });
    } else if (typeof code === 'string' && code.startsWith('WS_ERR_')) {
      this.refuse('CP_ERR_PROTO_MALFORMED', conn, { wsError: code });
    } else {
      this.logger.debug({ err, conn: conn.id }, 'socket error');
    }
    this.detach(conn);
  }

  // ------------------------------------------------------------------ outbound

  private onAcks(data: Uint8Array, span?: Span): void {
    let batch: AckBatch;
    try {
      batch = decodeJson<AckBatch>(data);
    } catch (err) {
      this.logger.warn({ err }, 'undecodable AckBatch dropped');
      return;
    }
    if (Array.isArray(batch.acks)) {
      span?.setAttribute('messaging.batch.message_count', batch.acks.length);
      for (const a of batch.acks) {
        const conn = this.conns.get(a.conn);
        if (!conn?.writable) continue;
        const intent = a.resend;
        if (intent?.conn === conn.id && this.resendOnMove(conn, Date.now() - intent.at, (channel) => this.batcher.add(channel, intent)))
          continue;
        conn.ws.send(ackFrame(a.seq, a.ok, a.cost, a.code, a));
      }
    }
    if (Array.isArray(batch.rejoin)) {
      for (const j of batch.rejoin) {
        const conn = this.conns.get(j?.conn);
        // A socket joins when it opens: its age is how long its join has waited.
        if (conn?.writable)
          this.resendOnMove(conn, performance.now() - conn.upgradedAt, (channel) => this.batcher.join(channel, conn.id, conn.viewer));
      }
    }
    if (Array.isArray(batch.balances)) {
      for (const b of batch.balances) {
        const conn = this.conns.get(b?.conn);
        if (!conn?.writable || typeof b.frame !== 'object' || b.frame === null || b.frame.t !== 'balance') continue;
        conn.ws.send(JSON.stringify(b.frame));
      }
    }
  }

  /**
   * An intent or join the shard sent back because its channel is moving:
   * `publish` runs again after a backoff (half the time it has waited,
   * 20–500 ms) unless INTENT_MOVE_RESEND_MS has passed since the gateway
   * received it (`waitedMs`), or the gateway is draining; at run time, only
   * if the socket is still open on the same channel. Counted:
   * crowdplay_intents_move_resent_total{outcome}.
   * @returns true when it will be published again (no ack to the viewer yet)
   */
  private resendOnMove(conn: Conn, waitedMs: number, publish: (channel: string) => void): boolean {
    const limitMs = this.config.gateway.intentMoveResendMs;
    if (limitMs === 0 || this.intakeClosed || !(waitedMs < limitMs)) {
      if (limitMs > 0) this.metrics.intentsResent.add(1, { outcome: 'expired' });
      return false;
    }
    const channel = conn.channel;
    const delayMs = Math.min(MOVE_RESEND_MAX_MS, Math.max(MOVE_RESEND_MIN_MS, waitedMs / 2), limitMs - waitedMs);
    this.later(() => {
      if (!conn.writable || this.intakeClosed || conn.channel !== channel) return;
      this.metrics.intentsResent.add(1, { outcome: 'resent' });
      publish(channel);
    }, delayMs);
    return true;
  }

  /** Runs `fn` after `ms` unless the gateway closes first. */
  private later(fn: () => void, ms: number): void {
    const t = setTimeout(() => {
      this.laterTimers.delete(t);
      fn();
    }, ms);
    this.laterTimers.add(t);
  }

  /** A grant committed (any gateway): a `balance` frame to this gateway's sockets of that viewer. */
  private onCredit(data: Uint8Array): void {
    let c: WalletCredit;
    try {
      c = decodeJson<WalletCredit>(data);
    } catch (err) {
      this.logger.warn({ err }, 'undecodable WalletCredit dropped');
      return;
    }
    const set = this.byViewer.get(viewerKey(c.tenant, c.viewer));
    if (!set || typeof c.balance !== 'number' || typeof c.points !== 'number') return;
    const text = JSON.stringify({ t: 'balance', points: c.balance, reason: 'grant', delta: c.points } satisfies BalanceFrame);
    for (const conn of set) if (conn.writable) conn.ws.send(text);
  }

  /** Forwards one `ch.<C>.game` message (Batch bytes) to the game socket as a text frame. */
  private sendToGame(conn: Conn, data: Uint8Array): void {
    if (conn.resumeBuffer) {
      conn.resumeBuffer.push(data);
      if (conn.resumeBuffer.length > this.config.eventLog.resumeMaxEvents) this.slowConsumer(conn);
      return;
    }
    this.sendLiveToGame(conn, data, frameEv(data));
  }

  /**
   * One live `ch.<C>.game` message: a batch whose `ev` is at most the newest
   * this socket was sent (`conn.lastBatchEv`) is one the game has and is
   * skipped (counted); round frames (no `ev`) always go.
   * @param ev the frame's `ev` ({@link frameEv}: read once by the caller)
   */
  private sendLiveToGame(conn: Conn, data: Uint8Array, ev: number | undefined): void {
    if (ev !== undefined) {
      if (conn.lastBatchEv !== null && ev <= conn.lastBatchEv) {
        this.metrics.replayedLiveSkipped.add(1);
        return;
      }
      conn.lastBatchEv = ev;
    }
    this.sendToGameNow(conn, data);
  }

  private sendToGameNow(conn: Conn, data: Uint8Array): void {
    if (!conn.writable) return;
    if (conn.ws.bufferedAmount > this.config.gateway.maxBufferedBytes) {
      this.slowConsumer(conn);
      return;
    }
    conn.ws.send(Buffer.from(data.buffer, data.byteOffset, data.byteLength), TEXT_FRAME);
  }

  private slowConsumer(conn: Conn): void {
    if (conn.state !== 'open') return;
    const max = this.config.gateway.maxBufferedBytes;
    this.metrics.slowConsumerCloses.add(1);
    this.refuse('CP_ERR_LIMIT_SLOW_CONSUMER', conn, { bufferedBytes: conn.ws.bufferedAmount, maxBufferedBytes: max });
    this.end(conn, 'CP_ERR_LIMIT_SLOW_CONSUMER', formatMessage('CP_ERR_LIMIT_SLOW_CONSUMER', [max]));
  }

  // ------------------------------------------------------------------ teardown

  /** Ends a socket with an error frame and close code (default: the catalogue's). */
  private end(conn: Conn, code: ErrorCode, message?: string, closeCode?: number): void {
    this.detach(conn);
    closeWithError(conn, code, message, closeCode);
  }

  /** Stops all traffic to a socket: leaves its channel, drops its game subscription and slot. Idempotent. */
  private detach(conn: Conn): void {
    if (conn.state === 'auth' || conn.state === 'open') conn.state = 'closing';
    conn.early = null;
    this.fanout.leave(conn);
    if (conn.role === 'crowd') {
      const k = viewerKey(conn.tenantId, conn.viewer);
      const set = this.byViewer.get(k);
      if (set?.delete(conn) && set.size === 0) this.byViewer.delete(k);
    }
    conn.gameSub?.unsubscribe();
    conn.gameSub = undefined;
    conn.gameQueue.length = 0;
    if (this.games.get(conn.channel) === conn) this.games.delete(conn.channel);
  }

  private onClose(conn: Conn): void {
    if (conn.state === 'closed') return;
    this.detach(conn);
    conn.state = 'closed';
    this.conns.delete(conn.id);
    if (conn.counted) {
      conn.counted = false;
      this.metrics.connections.add(-1, { role: conn.role });
    }
    if (this.conns.size === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  /** Counts (and rate-logs) a refusal in area `gateway`. */
  private refuse(code: ErrorCode, conn: Conn, detail?: Record<string, unknown>): void {
    this.telemetry.refusals.refuse('gateway', code, {
      channel: conn.channel.slice(0, 64),
      role: conn.role,
      viewer: conn.viewer || undefined,
      address: conn.address,
      ...detail,
    });
  }
}

/**
 * The act ack frame (ActAck) as JSON text, built without JSON.stringify: it is
 * written once per intent, the hottest send after broadcasts. Numbers are
 * checked so a malformed AckBatch cannot inject text.
 *
 * @param extra the BusAck itself (or any object) whose trade fields `shares`,
 *   `proceeds`, `position`, `balance` (shares and points, finite numbers) and
 *   guess fields `marks`, `solved`, `left` are appended when present; a plain
 *   act ack has none and costs a few property reads
 */
export function ackFrame(
  seq: number,
  ok: boolean,
  cost: number | undefined,
  code: string | undefined,
  extra?: Pick<BusAck, 'shares' | 'proceeds' | 'position' | 'balance' | 'marks' | 'solved' | 'left'>,
): string {
  const s = Number.isSafeInteger(seq) ? seq : -1;
  let text = `{"t":"ack","seq":${s},"ok":${ok === true}`;
  if (cost !== undefined && Number.isSafeInteger(cost)) text += `,"cost":${cost}`;
  if (code !== undefined) text += `,"code":${JSON.stringify(String(code))}`;
  if (extra !== undefined) {
    const { shares, proceeds, position, balance } = extra;
    if (shares !== undefined && Number.isFinite(shares)) text += `,"shares":${shares}`;
    if (proceeds !== undefined && Number.isFinite(proceeds)) text += `,"proceeds":${proceeds}`;
    if (position !== undefined && Number.isFinite(position)) text += `,"position":${position}`;
    if (balance !== undefined && Number.isFinite(balance)) text += `,"balance":${balance}`;
    const { marks, solved, left } = extra;
    if (typeof marks === 'string') text += `,"marks":${JSON.stringify(marks)}`;
    if (typeof solved === 'boolean') text += `,"solved":${solved}`;
    if (left !== undefined && Number.isFinite(left)) text += `,"left":${left}`;
  }
  return `${text}}`;
}

/**
 * A stake or trade frame as the BusTrade the shard receives: the frame's
 * fields without `t` and `seq`, with `k` = the frame's `t` (`key` only when
 * the frame has one). The frame is already validated (parseInbound).
 */
export function busTrade(msg: CrowdStake | CrowdBuy | CrowdSell): BusTrade {
  let trade: BusTrade;
  switch (msg.t) {
    case 'stake':
      trade = { k: 'stake', round: msg.round, outcome: msg.outcome, points: msg.points };
      break;
    case 'buy':
      trade =
        'budget' in msg
          ? { k: 'buy', round: msg.round, outcome: msg.outcome, budget: msg.budget }
          : { k: 'buy', round: msg.round, outcome: msg.outcome, shares: msg.shares, maxCost: msg.maxCost };
      break;
    case 'sell':
      trade = { k: 'sell', round: msg.round, outcome: msg.outcome, shares: msg.shares, minProceeds: msg.minProceeds };
      break;
  }
  if (msg.key !== undefined) trade.key = msg.key;
  return trade;
}

/**
 * The `ch.<C>.ctl` request for one game message, and the `ref` to answer.
 * Round ops carry the tenant the game authenticated as; `declare` passes
 * `welcomeGrant` through when set.
 */
function ctlRequest(conn: Conn, msg: GameInbound): { req: ChannelCtlRequest; ref: string | undefined } {
  switch (msg.t) {
    case 'declare': {
      const req: ChannelCtlRequest = { op: 'declare', actions: msg.actions };
      if (msg.welcomeGrant !== undefined) req.welcomeGrant = msg.welcomeGrant;
      return { req, ref: msg.ref };
    }
    case 'state':
      return { req: { op: 'state', state: msg.state }, ref: msg.ref };
    case 'round.open': {
      const { t: op, ref, ...fields } = msg;
      return { req: { op, tenant: conn.tenantId, ...fields }, ref };
    }
    case 'round.settle': {
      const { t: op, ref, ...fields } = msg;
      return { req: { op, tenant: conn.tenantId, ...fields }, ref };
    }
    case 'round.cancel': {
      const { t: op, ref, ...fields } = msg;
      return { req: { op, tenant: conn.tenantId, ...fields }, ref };
    }
  }
}

function viewerKey(tenant: string, viewer: string): string {
  return `${tenant}\u0000${viewer}`;
}
