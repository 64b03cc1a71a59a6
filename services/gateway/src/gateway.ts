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
 *    A multi-channel game socket (`multi=1`) does the same per channel it
 *    attached (multi-game-session.ts).
 *
 * The parts, each given the shared {@link GatewayContext} (gateway-context.ts):
 * upgrade admission (upgrade-admission.ts: steps 1–3), the crowd and game
 * sessions (crowd-session.ts, game-session.ts: step 4), snapshots and initial
 * updates (snapshots.ts), and ack routing (ack-routing.ts). This file owns the
 * lifecycle, the welcome, the early frames and the socket events.
 */
import type { Ledger } from '@crowdplay/ledger';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import type { RawData } from 'ws';
import { CrowdplayError, PROTOCOL_VERSION, type Welcome } from '@crowdplay/protocol';
import { listenError, type Config } from '@crowdplay/config';
import { encodeJson, subjects as makeSubjects, type Bus } from '@crowdplay/bus';
import type { Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import type { RouterApi } from '@crowdplay/router';
import type { SharedUpdates } from '@crowdplay/telegram';
import { AckRouter } from './ack-routing.ts';
import { Authenticator } from './auth.ts';
import type { Conn } from './connection.ts';
import { CrowdSession } from './crowd-session.ts';
import { ChannelFanout } from './fanout.ts';
import { registerFundingRoutes } from './funding.ts';
import { registerRoundHistoryRoutes } from './round-history.ts';
import { registerWatchTokenRoutes, WatchSockets } from './watch-tokens.ts';
import { detach, endConn, protocolError, refuse, slowConsumer, type GatewayContext, type GatewayState } from './gateway-context.ts';
import { GameSession } from './game-session.ts';
import { MultiGameSession } from './multi-game-session.ts';
import { clientErrors, frameworkErrors, MAX_PARAM_LENGTH, registerRoutes, requestDeadlineOptions } from './http.ts';
import { IntentBatcher } from './intents.ts';
import { createGatewayMetrics, type GatewayMetrics } from './metrics.ts';
import { Snapshots } from './snapshots.ts';
import { TenantQuotas } from './tenant-quotas.ts';
import { registerTelegramWebhook, type TelegramUpdate } from './telegram-webhook.ts';
import { registerTenantBotWebhooks, type TenantBots } from './tenant-bot-webhooks.ts';
import { CLOSE_HANDSHAKE_MS, UpgradeAdmission } from './upgrade-admission.ts';

export { WS_PATH, GAME_MIN_MESSAGE_BYTES, CLOSE_HANDSHAKE_MS } from './upgrade-admission.ts';
export { GAME_QUEUE_MAX, frameEv } from './game-session.ts';
export { busTrade } from './crowd-session.ts';
export { ackFrame } from './connection.ts';
export type { GatewayState } from './gateway-context.ts';

/**
 * Frames a client may send before its welcome (they are replayed in order
 * after it). More closes the socket with 4400: a client must wait for the
 * welcome, this bound only absorbs an eager SDK. The buffered bytes are also
 * capped at this × WS_MAX_MESSAGE_BYTES (a game socket's larger frame limit
 * does not raise it).
 */
export const PRE_AUTH_MAX_FRAMES = 32;
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
  /** Tenants' own bots: their webhooks at /v1/telegram/webhook/<bot id> and their Mini App sessions (services/telegram BotRegistry). */
  tenantBots?: TenantBots;
  /** When given, the funding routes (grants, balances) are served. */
  ledger?: Ledger;
  /** Clock of the upgrade budget, ms (performance.now; tests). */
  now?: () => number;
}

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
   * @throws CrowdplayError CP_ERR_CONFIG_INVALID naming PORT or HOST when the address cannot be used (EADDRINUSE,
   *   EACCES, EADDRNOTAVAIL), else the listen error; Error when called after drain/close
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
  private readonly metrics: GatewayMetrics;
  /** The state the parts share (the maps below are its maps). */
  private readonly ctx: GatewayContext;
  private readonly conns = new Map<number, Conn>();
  private readonly games = new Map<string, Conn>();
  private readonly fanout: ChannelFanout;
  private readonly batcher: IntentBatcher;
  private readonly admission: UpgradeAdmission;
  private readonly crowd: CrowdSession;
  private readonly game: GameSession;
  private readonly multiGame: MultiGameSession;
  private readonly acks: AckRouter;
  private telegramWebhook: { drain(): Promise<void> } | undefined;
  private tenantBotWebhooks: { drain(): Promise<void> } | undefined;
  /** Timers of `later` (intents and joins sent back by a moving channel, game ctl retries), cleared on close. */
  private readonly laterTimers = new Set<ReturnType<typeof setTimeout>>();
  private idleWaiters: Array<() => void> = [];
  private listening: Promise<{ port: number }> | undefined;
  private pingTimer: NodeJS.Timeout | undefined;
  private intakeClosed = false;
  private draining: Promise<void> | undefined;
  private closing: Promise<void> | undefined;

  constructor(deps: GatewayDeps) {
    const { config, bus, store, router, telemetry } = deps;
    this.config = config;
    this.bus = bus;
    this.id = config.gateway.id;
    const logger = telemetry.logger.child({ component: 'gateway', gatewayId: this.id });
    const subjects = makeSubjects(config.bus.subjectPrefix);
    const g = config.gateway;
    this.metrics = createGatewayMetrics(
      telemetry.metrics,
      () => this.fanout.size,
      () => {
        let sum = 0;
        for (const c of this.conns.values()) sum += c.ws.bufferedAmount;
        return sum;
      },
      () => this.admission.waiting,
    );
    const auth = new Authenticator(store, { clockSkewS: g.tokenClockSkewS, maxChannels: config.quota.channels });
    this.fanout = new ChannelFanout(
      bus,
      subjects,
      { maxBufferedBytes: g.maxBufferedBytes, skipBufferedBytes: g.skipBufferedBytes },
      this.metrics,
      logger,
      (conn) => slowConsumer(this.ctx, conn),
    );
    this.batcher = new IntentBatcher(
      bus,
      subjects,
      { gatewayId: this.id, batchMs: g.intentBatchMs, batchMax: g.intentBatchMax },
      this.metrics,
      logger,
    );
    const watch = new WatchSockets({
      store,
      bus,
      subjects,
      logger,
      recheckMs: g.watchTokenRecheckMs,
      end: (conn, code) => {
        refuse(this.ctx, code, conn);
        endConn(this.ctx, conn, code);
      },
    });
    this.ctx = {
      id: this.id,
      config,
      bus,
      store,
      subjects,
      telemetry,
      logger,
      metrics: this.metrics,
      fanout: this.fanout,
      batcher: this.batcher,
      conns: this.conns,
      games: this.games,
      byViewer: new Map(),
      watch,
      quotas: new TenantQuotas(config.quota, store, telemetry, deps.now),
      state: () => this.lifecycle,
      intakeClosed: () => this.intakeClosed,
      later: (fn, ms) => this.later(fn, ms),
    };
    this.admission = new UpgradeAdmission(this.ctx, {
      router,
      auth,
      clock: deps.now ?? (() => performance.now()),
      hooks: { attach: (conn) => this.attach(conn), open: (conn) => this.open(conn) },
      ...(deps.tenantBots ? { tenantBots: deps.tenantBots } : {}),
    });
    const snapshots = new Snapshots(this.ctx);
    this.crowd = new CrowdSession(this.ctx, snapshots);
    this.game = new GameSession(this.ctx, snapshots);
    this.multiGame = new MultiGameSession(this.ctx, this.game, router);
    this.acks = new AckRouter(this.ctx, this.crowd);

    this.app = Fastify({
      loggerInstance: telemetry.logger.child({ component: 'http' }),
      // Per-request lines would drown the log (every /metrics scrape); errors are still logged.
      logController: new LogController({ disableRequestLogging: true }),
      // Bodies are validated as sent: "5" is not the integer 5 and an unknown field is an error (fastify coerces and strips by default).
      ajv: { customOptions: { coerceTypes: false, removeAdditional: false } },
      // Path parameters carry viewer ids of up to 128 characters (GET /v1/balances/:viewer), percent-encoded.
      routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
      // A longer one, or a path that does not decode: crowdplay's error shape, not fastify's (http.ts).
      frameworkErrors: frameworkErrors(telemetry),
      // Every request has a deadline (fastify's default of 0 turns node's off): a slow sender cannot hold a connection.
      requestTimeout: config.http.requestTimeoutMs,
      http: requestDeadlineOptions(config.http.requestTimeoutMs),
      clientErrorHandler: clientErrors(telemetry, config.http.requestTimeoutMs),
    }) as unknown as FastifyInstance;
    registerRoutes(this.app, {
      config,
      telemetry,
      ready: () => this.lifecycle === 'ready',
      state: () => this.lifecycle,
    });
    registerWatchTokenRoutes(this.app, { config, store, telemetry, onRevoked: (id) => watch.announce(id) });
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
    if (deps.tenantBots) {
      this.tenantBotWebhooks = registerTenantBotWebhooks(this.app, {
        bots: deps.tenantBots,
        telemetry,
        maxQueued: config.telegram.webhookMaxQueued,
        dedupeSize: config.telegram.webhookDedupeSize,
        bodyLimitBytes: config.telegram.webhookMaxBodyBytes,
      });
    }
    if (deps.ledger) {
      registerFundingRoutes(this.app, {
        store,
        ledger: deps.ledger,
        auth,
        telemetry,
        quotas: this.ctx.quotas,
        onGranted: (credit) => this.bus.publish(subjects.walletCredits(), encodeJson(credit)),
      });
    }
    registerRoundHistoryRoutes(this.app, { store, auth, telemetry, ...(deps.ledger ? { ledger: deps.ledger } : {}) });
    this.app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.admission.onUpgrade(req, socket, head));
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
    this.acks.start();
    this.ctx.watch.start();
    const { host, port } = this.config.http;
    try {
      await this.app.listen({ host, port, backlog: this.config.http.listenBacklog });
    } catch (err) {
      throw listenError(err, { portSetting: 'PORT', hostSetting: 'HOST', host, port });
    }
    const addr = this.app.server.address();
    const bound = typeof addr === 'object' && addr !== null ? addr.port : port;
    if (this.lifecycle === 'created') this.lifecycle = 'ready';
    const pingMs = this.config.gateway.pingIntervalMs;
    if (pingMs > 0) this.pingTimer = setInterval(() => this.pingAll(), pingMs);
    this.ctx.logger.info({ host, port: bound, bus: this.bus.kind }, 'gateway listening');
    return { port: bound };
  }

  private async doDrain(): Promise<void> {
    // Updates already taken from Telegram are handled (their replies queued) before the process stops.
    await this.telegramWebhook?.drain();
    await this.tenantBotWebhooks?.drain();
    if (this.lifecycle === 'created' || this.lifecycle === 'ready') this.lifecycle = 'draining';
    const open = [...this.conns.values()].filter((c) => c.state === 'auth' || c.state === 'open');
    for (const conn of open) endConn(this.ctx, conn, 'CP_ERR_LIMIT_DRAINING');
    this.batcher.flushAll();
    const waitMs = Math.min(this.config.gateway.shutdownMs, CLOSE_HANDSHAKE_MS);
    await this.waitForSockets(waitMs);
    const left = this.conns.size;
    for (const conn of [...this.conns.values()]) conn.ws.terminate();
    this.ctx.logger.info({ closed: open.length, destroyed: left }, 'gateway drained');
  }

  /**
   * Heartbeat: a socket that did not answer the previous ping is terminated
   * (counted as CP_ERR_LIMIT_PING_TIMEOUT); every other one is pinged again.
   * One timer for all sockets, WS_PING_INTERVAL_MS apart.
   */
  private pingAll(): void {
    for (const conn of this.conns.values()) {
      if (!conn.alive) {
        refuse(this.ctx, 'CP_ERR_LIMIT_PING_TIMEOUT', conn);
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
    // Upgrades still waiting for their turn: refused as any upgrade arriving now (503, draining).
    this.admission.close();
    this.acks.close();
    this.ctx.watch.close();
    this.multiGame.close();
    for (const t of this.laterTimers) clearTimeout(t);
    this.laterTimers.clear();
    this.batcher.close();
    this.fanout.close();
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

  /** Runs `fn` after `ms` unless the gateway closes first. */
  private later(fn: () => void, ms: number): void {
    const t = setTimeout(() => {
      this.laterTimers.delete(t);
      fn();
    }, ms);
    this.laterTimers.add(t);
  }

  // ------------------------------------------------------------------ a socket's life

  /** A socket admission registered: its frames, errors, close and pongs come here. */
  private attach(conn: Conn): void {
    const { ws } = conn;
    ws.on('message', (data: RawData, isBinary: boolean) => this.onMessage(conn, data, isBinary));
    ws.on('error', (err: Error) => this.onSocketError(conn, err));
    ws.on('close', () => this.onClose(conn));
    ws.on('pong', () => {
      conn.alive = true;
    });
  }

  /** Auth passed: membership, welcome, the session's start (initial update or resume), replay of early frames. */
  private open(conn: Conn): void {
    const session = this.sessionOf(conn);
    try {
      // Subscribe before the welcome: nothing can be delivered in between (delivery is asynchronous).
      session.subscribe(conn);
    } catch (err) {
      this.ctx.logger.error({ err, channel: conn.channel }, 'bus subscribe failed');
      endConn(this.ctx, conn, 'CP_ERR_INTERNAL');
      return;
    }
    conn.state = 'open';
    conn.counted = true;
    this.ctx.watch.track(conn);
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
    if (conn.links) welcome.multi = true;
    if (conn.watchToken !== undefined) welcome.readOnly = true;
    else if (conn.role === 'crowd') welcome.viewer = conn.viewer;
    conn.ws.send(JSON.stringify(welcome));
    this.metrics.connectSetupMs.record(performance.now() - conn.upgradedAt, attrs);
    // Before the replay of early frames: a stake sent with the join rides in the same batch, after it.
    session.start(conn);
    const early = conn.early ?? [];
    conn.early = null;
    for (const f of early) {
      if (conn.state !== 'open') break;
      this.handleFrame(conn, f.data, f.isBinary);
    }
  }

  private onMessage(conn: Conn, data: RawData, isBinary: boolean): void {
    if (conn.state === 'auth') {
      const early = conn.early;
      if (!early) return;
      const buf = toBuffer(data);
      conn.earlyBytes += buf.length;
      if (early.length >= PRE_AUTH_MAX_FRAMES || conn.earlyBytes > PRE_AUTH_MAX_FRAMES * this.config.gateway.maxMessageBytes) {
        refuse(this.ctx, 'CP_ERR_PROTO_VIOLATIONS', conn, { why: 'frames before the welcome' });
        endConn(this.ctx, conn, 'CP_ERR_PROTO_VIOLATIONS', `more than ${PRE_AUTH_MAX_FRAMES} frames (or their bytes) before the welcome`);
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
      protocolError(this.ctx, conn, new CrowdplayError('CP_ERR_PROTO_INVALID', ['binary frames are not accepted: send JSON text']));
      return;
    }
    if (conn.links) this.multiGame.onText(conn, data.toString('utf8'));
    else this.sessionOf(conn).onText(conn, data.toString('utf8'));
  }

  /** The session that serves a socket's role (a socket of role `invalid` never opens). */
  private sessionOf(conn: Conn): CrowdSession | GameSession {
    return conn.role === 'crowd' ? this.crowd : this.game;
  }

  private onSocketError(conn: Conn, err: Error): void {
    const code = (err as { code?: unknown }).code;
    if (code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') {
      // ws has already closed the socket with 1009 (no error frame can precede it).
      refuse(this.ctx, 'CP_ERR_PROTO_TOO_BIG', conn, { maxMessageBytes: this.config.gateway.maxMessageBytes });
    } else if (typeof code === 'string' && code.startsWith('WS_ERR_')) {
      refuse(this.ctx, 'CP_ERR_PROTO_MALFORMED', conn, { wsError: code });
    } else {
      this.ctx.logger.debug({ err, conn: conn.id }, 'socket error');
    }
    detach(this.ctx, conn);
  }

  private onClose(conn: Conn): void {
    if (conn.state === 'closed') return;
    detach(this.ctx, conn);
    if (conn.links) this.multiGame.forget(conn);
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
}
