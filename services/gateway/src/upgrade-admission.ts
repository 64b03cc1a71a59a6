/**
 * Upgrade admission: from an HTTP upgrade request on `/v1/ws` to an
 * authenticated socket. Refused with a raw HTTP response when the gateway is
 * not serving (503), the client address (/64 for IPv6) is over its connection
 * bucket (429 + Retry-After), or the gateway holds WS_MAX_CONNECTIONS sockets
 * (503). Upgrades are paced per event-loop turn (WS_UPGRADE_TURN_BUDGET_MS)
 * and one that waited past WS_UPGRADE_WAIT_MS is answered 503 before
 * authentication. After the upgrade the socket authenticates (token, game
 * key or Telegram initData), its channel is assigned (`router.assign`), and
 * the gateway's `open` hook welcomes it.
 */
import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type ServerOptions, type WebSocket } from 'ws';
import { CHANNEL_ID_RE, CloseCode, CrowdplayError, formatMessage, isCrowdplayError, type ErrorCode } from '@crowdplay/protocol';
import { addressKey, KeyedLimiter, TurnBudget } from '@crowdplay/ratelimit';
import type { RouterApi } from '@crowdplay/router';
import { TenantQuotaError } from '@crowdplay/store';
import type { Authenticator } from './auth.ts';
import { Conn, type ConnRole } from './connection.ts';
import { endConn, refuse, type GatewayContext } from './gateway-context.ts';
import { TelegramAuth } from './telegram-auth.ts';
import type { TenantBots } from './tenant-bot-webhooks.ts';

/** Path of the WebSocket endpoint. */
export const WS_PATH = '/v1/ws';
/**
 * Largest game frame, bytes, unless WS_MAX_MESSAGE_BYTES is larger: a full
 * `declare` without labels (32 actions × 32 options of 32 characters,
 * messages.ts) is ~40 KB, and a `state` may carry MAX_GAME_STATE_BYTES plus its
 * envelope. A `declare` labelling every action and option with long labels can
 * pass it (up to ~350 KB): sdk-game refuses such a frame before sending it
 * (GAME_FRAME_MAX_BYTES), and a larger WS_MAX_MESSAGE_BYTES admits it.
 */
export const GAME_MIN_MESSAGE_BYTES = 65_536;
/**
 * How long a closing socket may take to finish the close handshake before it
 * is destroyed, ms (ws' `closeTimeout`; its default of 30 s would hold a slow
 * consumer's send buffer that long).
 */
export const CLOSE_HANDSHAKE_MS = 5_000;

/** What admission hands back to the gateway. */
export interface AdmissionHooks {
  /** A socket was upgraded and registered in `conns`: wire its events (message, error, close, pong). */
  attach(conn: Conn): void;
  /** The socket authenticated and its channel is assigned (state still `auth`, gateway ready): welcome it. */
  open(conn: Conn): void;
}

/** What {@link UpgradeAdmission} needs besides the shared context. */
export interface AdmissionDeps {
  router: RouterApi;
  /** Token and game-key checks (shared with the funding routes). */
  auth: Authenticator;
  /** Clock of the upgrade budget and of WS_UPGRADE_WAIT_MS, ms (performance.now unless a test gives one). */
  clock: () => number;
  hooks: AdmissionHooks;
  /** The tenants' own bots whose Mini Apps may connect. @defaultValue none */
  tenantBots?: TenantBots;
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

/** The resume point from the query (`lastEventId`). @throws CrowdplayError CP_ERR_PROTO_INVALID when it is not a non-negative integer */
function parseLastEventId(query: URLSearchParams): number | undefined {
  const raw = query.get('lastEventId');
  if (raw === null || raw === '') return undefined;
  const n = /^\d{1,16}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n)) throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['lastEventId must be a non-negative integer']);
  return n;
}

/**
 * Upgrade requests to authenticated sockets: the wait queue and its budget,
 * the refusals, the WebSocket servers, authentication and channel assignment.
 * @throws RangeError from the constructor on connection limiter settings out of range
 */
export class UpgradeAdmission {
  /** Upgrade requests waiting for a turn with WS_UPGRADE_TURN_BUDGET_MS left (onUpgrade), oldest first. */
  private readonly upgradesWaiting: Array<{ req: IncomingMessage; socket: Duplex; head: Buffer; at: number }> = [];
  private upgradeDrain: NodeJS.Immediate | null = null;
  /** The event-loop time upgrades may take per turn (WS_UPGRADE_TURN_BUDGET_MS). */
  private readonly upgradeBudget: TurnBudget;
  private readonly connLimiter: KeyedLimiter;
  private readonly crowdWss: WebSocketServer;
  private readonly gameWss: WebSocketServer;
  private readonly telegramAuth: TelegramAuth;
  /** In-flight `router.assign` per channel (a join storm makes one call). */
  private readonly assigning = new Map<string, Promise<void>>();
  private nextConnId = 0;

  constructor(
    private readonly ctx: GatewayContext,
    private readonly deps: AdmissionDeps,
  ) {
    const { config, store } = ctx;
    const g = config.gateway;
    this.upgradeBudget = new TurnBudget(g.upgradeTurnBudgetMs, deps.clock);
    const bots = deps.tenantBots;
    this.telegramAuth = new TelegramAuth(config.telegram, store, config.quota.channels, bots ? () => bots.miniAppBots() : undefined);
    this.connLimiter = new KeyedLimiter({ ratePerS: g.connRatePerS, burst: g.connBurst });
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
  }

  /** Upgrade requests waiting for their turn (crowdplay_upgrades_waiting). */
  get waiting(): number {
    return this.upgradesWaiting.length;
  }

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
  onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => undefined); // a reset during the handshake must not crash the process
    if (this.upgradesWaiting.length > 0 || this.upgradeBudget.spent()) {
      if (this.ctx.conns.size + this.upgradesWaiting.length >= this.ctx.config.gateway.maxConnections) {
        this.refuseOverMaxConnections(socket, req.socket.remoteAddress ?? '');
        return;
      }
      this.upgradesWaiting.push({ req, socket, head, at: this.deps.clock() });
      this.ctx.metrics.upgradesDeferred.add(1);
      this.upgradeDrain ??= setImmediate(() => this.drainUpgrades());
      return;
    }
    this.takeUpgrade(req, socket, head);
  }

  /**
   * Called once the gateway is `closed`: stops pacing, answers the upgrades
   * still waiting as any upgrade arriving now (503, draining), closes the WebSocket servers.
   */
  close(): void {
    if (this.upgradeDrain) clearImmediate(this.upgradeDrain);
    this.upgradeDrain = null;
    this.upgradeBudget.close();
    for (const u of this.upgradesWaiting.splice(0)) this.takeUpgrade(u.req, u.socket, u.head);
    this.crowdWss.close();
    this.gameWss.close();
  }

  /** Takes waiting upgrades, oldest first, until this turn's budget is spent; the rest wait for the next turn. */
  private drainUpgrades(): void {
    this.upgradeDrain = null;
    let taken = 0;
    const waitMs = this.ctx.config.gateway.upgradeWaitMs;
    while (this.upgradesWaiting.length > taken && !this.upgradeBudget.spent()) {
      const u = this.upgradesWaiting[taken++]!;
      if (u.socket.destroyed) continue;
      if (waitMs > 0 && this.deps.clock() - u.at > waitMs) this.refuseOverloaded(u.socket, u.req.socket.remoteAddress ?? '');
      else this.takeUpgrade(u.req, u.socket, u.head);
    }
    this.upgradesWaiting.splice(0, taken);
    if (this.upgradesWaiting.length > 0) this.upgradeDrain = setImmediate(() => this.drainUpgrades());
  }

  /** Answers an upgrade that waited past WS_UPGRADE_WAIT_MS for its turn: 503 CP_ERR_LIMIT_OVERLOADED, counted. */
  private refuseOverloaded(socket: Duplex, address: string): void {
    const waitMs = this.ctx.config.gateway.upgradeWaitMs;
    this.ctx.metrics.connectionsRefused.add(1, { reason: 'CP_ERR_LIMIT_OVERLOADED' });
    this.ctx.telemetry.refusals.refuse('gateway', 'CP_ERR_LIMIT_OVERLOADED', { limit: 'WS_UPGRADE_WAIT_MS', value: waitMs, address });
    rejectUpgrade(socket, 503, 'CP_ERR_LIMIT_OVERLOADED', formatMessage('CP_ERR_LIMIT_OVERLOADED', [waitMs]));
  }

  /** Answers an upgrade over WS_MAX_CONNECTIONS (sockets held and waiting): 503, counted. */
  private refuseOverMaxConnections(socket: Duplex, address: string): void {
    this.ctx.metrics.connectionsRefused.add(1, { reason: 'CP_ERR_LIMIT_MAX_CONNECTIONS' });
    this.ctx.telemetry.refusals.refuse('gateway', 'CP_ERR_LIMIT_MAX_CONNECTIONS', {
      address,
      sockets: this.ctx.conns.size,
      waiting: this.upgradesWaiting.length,
    });
    rejectUpgrade(
      socket,
      503,
      'CP_ERR_LIMIT_MAX_CONNECTIONS',
      formatMessage('CP_ERR_LIMIT_MAX_CONNECTIONS', [this.ctx.config.gateway.maxConnections]),
    );
  }

  /** One upgrade at its turn: path, lifecycle, address bucket and WS_MAX_CONNECTIONS checked, then the WebSocket handshake. */
  private takeUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const { ctx } = this;
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
    if (ctx.state() !== 'ready') {
      ctx.metrics.connectionsRefused.add(1, { reason: 'CP_ERR_LIMIT_DRAINING' });
      ctx.telemetry.refusals.refuse('gateway', 'CP_ERR_LIMIT_DRAINING', { address });
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
      ctx.metrics.connectionsRefused.add(1, { reason: 'CP_ERR_LIMIT_CONNECTION_RATE' });
      ctx.telemetry.refusals.refuse('gateway', 'CP_ERR_LIMIT_CONNECTION_RATE', { address: key });
      rejectUpgrade(socket, 429, 'CP_ERR_LIMIT_CONNECTION_RATE', formatMessage('CP_ERR_LIMIT_CONNECTION_RATE', []), {
        'Retry-After': String(Math.max(1, Math.ceil(decision.retryAfterMs / 1_000))),
      });
      return;
    }
    if (ctx.conns.size >= ctx.config.gateway.maxConnections) {
      this.refuseOverMaxConnections(socket, key);
      return;
    }
    const wss = url.searchParams.get('role') === 'game' ? this.gameWss : this.crowdWss;
    wss.handleUpgrade(req, socket, head, (ws) => this.onSocket(ws, url, address));
  }

  /** An upgraded socket: registered in `conns`, wired by the gateway, then authenticated. */
  private onSocket(ws: WebSocket, url: URL, address: string): void {
    const roleParam = url.searchParams.get('role');
    const role: ConnRole = roleParam === 'crowd' || roleParam === 'game' ? roleParam : 'invalid';
    const conn = new Conn(++this.nextConnId, ws, role, url.searchParams.get('channel') ?? '', address);
    this.ctx.conns.set(conn.id, conn);
    this.deps.hooks.attach(conn);
    void this.authenticate(conn, url.searchParams);
  }

  /**
   * Identifies the socket (crowd: token or Telegram initData; game: key, one
   * game per channel per gateway; a multi-channel game: key only, no channel yet), assigns its channel, then hands it to the
   * `open` hook. A refusal ends the socket with an error frame and the
   * documented close code. Never rejects.
   */
  private async authenticate(conn: Conn, query: URLSearchParams): Promise<void> {
    const { ctx } = this;
    try {
      // One value per parameter, as the HTTP routes take them: which of two would count is not the client's to guess.
      for (const k of new Set(query.keys()))
        if (query.getAll(k).length > 1) throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`query parameter ${k.slice(0, 32)} is repeated`]);
      if (conn.role === 'invalid') throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['query parameter role must be crowd or game']);
      const multi = query.get('multi');
      if (multi !== null && (conn.role !== 'game' || (multi !== '1' && multi !== '0')))
        throw new CrowdplayError('CP_ERR_PROTO_INVALID', [
          conn.role === 'game'
            ? 'query parameter multi must be 1 (a multi-channel game) or 0'
            : 'query parameter multi is for role=game only',
        ]);
      const initData = conn.role === 'crowd' ? query.get('initData') : null;
      if (initData !== null) {
        // A Telegram Mini App: the channel is the one its signed start parameter names.
        conn.lastEventId = parseLastEventId(query);
        const id = await this.telegramAuth.crowd(initData, conn.channel);
        conn.channel = id.channel;
        conn.tenantId = id.tenantId;
        conn.viewer = id.viewer;
        conn.displayName = id.name;
      } else if (conn.role === 'game' && query.get('multi') === '1') {
        // A multi-channel game: its channels come in `attach` frames (multi-game-session.ts).
        if (conn.channel !== '') throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['a multi-channel game socket names no channel']);
        conn.tenantId = (await this.deps.auth.gameKey(query.get('key'))).tenantId;
        conn.links = new Map();
      } else if (!CHANNEL_ID_RE.test(conn.channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
      else if (conn.role === 'crowd') {
        conn.lastEventId = parseLastEventId(query);
        if (!(await this.ctx.watch.authenticate(conn, query.get('token')))) {
          const id = await this.deps.auth.crowd(conn.channel, query.get('token'));
          conn.tenantId = id.tenantId;
          conn.viewer = id.viewer;
        }
      } else {
        conn.lastEventId = parseLastEventId(query);
        conn.tenantId = (await this.deps.auth.game(conn.channel, query.get('key'))).tenantId;
        if (conn.state !== 'auth') return;
        if (ctx.games.has(conn.channel)) throw new CrowdplayError('CP_ERR_CHANNEL_GAME_CONNECTED', [conn.channel]);
        ctx.games.set(conn.channel, conn);
      }
      if (conn.state !== 'auth') return;
      if (conn.role === 'crowd' && !(await this.takeTenantSlot(conn))) return;
      try {
        if (!conn.links) await this.assign(conn.channel);
      } catch (err) {
        if (initData === null || !isCrowdplayError(err, 'CP_ERR_CHANNEL_MIGRATED')) throw err;
        // The chat moved (group → supergroup) since this gateway cached its channel: look again, once.
        const id = await this.telegramAuth.crowd(initData, '', Date.now(), true);
        conn.channel = id.channel;
        if (conn.state !== 'auth') return;
        await this.assign(conn.channel);
      }
      if (conn.state !== 'auth') return;
      if (ctx.state() !== 'ready') throw new CrowdplayError('CP_ERR_LIMIT_DRAINING');
      this.deps.hooks.open(conn);
    } catch (err) {
      const e = err instanceof CrowdplayError ? err : new CrowdplayError('CP_ERR_INTERNAL', [], { cause: err });
      if (e.code === 'CP_ERR_INTERNAL') ctx.logger.error({ err, channel: conn.channel, role: conn.role }, 'connection setup failed');
      else if (e instanceof TenantQuotaError)
        ctx.quotas.refuse('gateway', e.tenant, e.quota, { channel: conn.channel, role: conn.role, limit: e.limit });
      else refuse(ctx, e.code, conn);
      if (conn.state === 'auth') {
        ctx.metrics.connectionsRefused.add(1, { reason: e.code });
        const closeCode = e.closeCode ?? (e.code === 'CP_ERR_PROTO_INVALID' ? CloseCode.protocolViolation : CloseCode.internal);
        endConn(ctx, conn, e.code, e.message, closeCode);
      }
    }
  }

  /**
   * Takes one of the viewer socket's tenant's connection slots on this gateway (TENANT_MAX_CONNECTIONS or the
   * tenant's override); over it the socket is refused and closed with 4030 CP_ERR_TENANT_QUOTA.
   * @returns false when the socket was refused or closed meanwhile (nothing more to do)
   */
  private async takeTenantSlot(conn: Conn): Promise<boolean> {
    const { ctx } = this;
    const quotas = await ctx.quotas.load(conn.tenantId);
    if (conn.state !== 'auth') return false;
    if (ctx.quotas.takeConnection(conn.tenantId, quotas)) {
      conn.quotaSlot = true;
      return true;
    }
    ctx.quotas.refuse('gateway', conn.tenantId, 'connections', { channel: conn.channel, limit: quotas.connections, address: conn.address });
    ctx.metrics.connectionsRefused.add(1, { reason: 'CP_ERR_TENANT_QUOTA' });
    endConn(ctx, conn, 'CP_ERR_TENANT_QUOTA', formatMessage('CP_ERR_TENANT_QUOTA', [conn.tenantId, 'connections', quotas.connections]));
    return false;
  }

  /** `router.assign`, one call in flight per channel. @throws CrowdplayError (CP_ERR_CHANNEL_UNAVAILABLE when the router fails without one) */
  private assign(channel: string): Promise<void> {
    let p = this.assigning.get(channel);
    if (!p) {
      p = this.deps.router
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
}
