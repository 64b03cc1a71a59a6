/**
 * The state the gateway's parts share (upgrade admission, crowd and game
 * sessions, snapshots, ack routing) and the connection operations every part
 * uses: refuse, end, detach, slow consumer, protocol error. The `Gateway`
 * façade (gateway.ts) builds one context and hands it to each part; a part
 * reads and writes the shared maps through it, never another part's fields.
 */
import type { Bus, Subjects } from '@crowdplay/bus';
import type { Config } from '@crowdplay/config';
import { CrowdplayError, inboundContext, formatMessage, type ErrorCode } from '@crowdplay/protocol';
import type { Store } from '@crowdplay/store';
import type { Logger, Telemetry } from '@crowdplay/telemetry';
import { ackFrame, closeWithError, sendErrorFrame, type Conn, type GameLink } from './connection.ts';
import type { ChannelFanout } from './fanout.ts';
import type { IntentBatcher } from './intents.ts';
import type { GatewayMetrics } from './metrics.ts';
import type { TenantQuotas } from './tenant-quotas.ts';
import type { WatchSockets } from './watch-tokens.ts';

/** `created` (not listening) → `ready` (serving) → `draining` → `closed`. */
export type GatewayState = 'created' | 'ready' | 'draining' | 'closed';

/** What the gateway's parts share. Built once by the façade; the maps are mutated in place. */
export interface GatewayContext {
  /** GATEWAY_ID. */
  readonly id: string;
  readonly config: Config;
  readonly bus: Bus;
  readonly store: Store;
  readonly subjects: Subjects;
  readonly telemetry: Telemetry;
  /** The gateway's logger (`component: gateway`). */
  readonly logger: Logger;
  readonly metrics: GatewayMetrics;
  /** Crowd sockets by channel (`ch.<C>.out` subscriptions). */
  readonly fanout: ChannelFanout;
  /** Micro-batches of intents and joins (`ch.<C>.in`). */
  readonly batcher: IntentBatcher;
  /** Every socket this gateway holds (authenticating, open or closing), by connection id. */
  readonly conns: Map<number, Conn>;
  /** The local game connection of each channel (at most one per channel per gateway). */
  readonly games: Map<string, Conn>;
  /** Open crowd sockets by {@link viewerKey} (grants are pushed to them). */
  readonly byViewer: Map<string, Set<Conn>>;
  /** Sockets open with read-only watch tokens (watch-tokens.ts). */
  readonly watch: WatchSockets;
  /** Per-tenant quotas: effective values, viewer sockets and intent buckets of this gateway. */
  readonly quotas: TenantQuotas;
  /** The gateway's lifecycle state now. */
  state(): GatewayState;
  /** True once intake is paused (pauseIntake or drain): new intents are refused, nothing is sent again. */
  intakeClosed(): boolean;
  /** Runs `fn` after `ms` (milliseconds) unless the gateway closes first. */
  later(fn: () => void, ms: number): void;
}

/** The key of {@link GatewayContext.byViewer}: tenant id and viewer id. */
export function viewerKey(tenant: string, viewer: string): string {
  return `${tenant}\u0000${viewer}`;
}

/** Counts (and rate-logs) a refusal in area `gateway`, with the connection's channel, role, viewer and address. */
export function refuse(ctx: GatewayContext, code: ErrorCode, conn: Conn, detail?: Record<string, unknown>): void {
  ctx.telemetry.refusals.refuse('gateway', code, {
    channel: conn.channel.slice(0, 64),
    role: conn.role,
    viewer: conn.viewer || undefined,
    address: conn.address,
    ...detail,
  });
}

/** Ends a socket: {@link detach}, then an error frame and a close code (default: the catalogue's). */
export function endConn(ctx: GatewayContext, conn: Conn, code: ErrorCode, message?: string, closeCode?: number): void {
  detach(ctx, conn);
  closeWithError(conn, code, message, closeCode);
}

/**
 * Stops all traffic to a socket: state `closing` (unless already closed),
 * leaves its channel's fan-out and the viewer index, drops its game
 * subscription, queue and channel slot. Idempotent.
 */
export function detach(ctx: GatewayContext, conn: Conn): void {
  if (conn.state === 'auth' || conn.state === 'open') conn.state = 'closing';
  conn.early = null;
  ctx.fanout.leave(conn);
  ctx.watch.untrack(conn);
  if (conn.quotaSlot) {
    conn.quotaSlot = false;
    ctx.quotas.releaseConnection(conn.tenantId);
  }
  if (conn.role === 'crowd') {
    const k = viewerKey(conn.tenantId, conn.viewer);
    const set = ctx.byViewer.get(k);
    if (set?.delete(conn) && set.size === 0) ctx.byViewer.delete(k);
  }
  conn.gameSub?.unsubscribe();
  conn.gameSub = undefined;
  conn.gameQueue.length = 0;
  if (ctx.games.get(conn.channel) === conn) ctx.games.delete(conn.channel);
  if (conn.links) {
    for (const link of conn.links.values()) dropLink(ctx, conn, link);
    conn.links.clear();
    conn.multiQueued = 0;
    conn.chats = false;
  }
}

/**
 * Stops serving one channel of a multi-channel game socket: its `ch.<C>.game` subscription, its queue and its
 * channel slot (the caller removes it from `conn.links`). The channel's game state at the shard is left as it is.
 */
export function dropLink(ctx: GatewayContext, conn: Conn, link: GameLink): void {
  link.gameSub?.unsubscribe();
  link.gameSub = undefined;
  conn.multiQueued -= link.gameQueue.length;
  link.gameQueue.length = 0;
  link.resumeBuffer = null;
  if (ctx.games.get(link.channel) === conn) ctx.games.delete(link.channel);
}

/**
 * An open socket whose send buffer passed WS_MAX_BUFFERED_BYTES (or a resume
 * holding too many batches): counted, refused and ended with
 * CP_ERR_LIMIT_SLOW_CONSUMER. Does nothing unless the socket is `open`.
 */
export function slowConsumer(ctx: GatewayContext, conn: Conn): void {
  if (conn.state !== 'open') return;
  const max = ctx.config.gateway.maxBufferedBytes;
  ctx.metrics.slowConsumerCloses.add(1);
  refuse(ctx, 'CP_ERR_LIMIT_SLOW_CONSUMER', conn, { bufferedBytes: conn.ws.bufferedAmount, maxBufferedBytes: max });
  endConn(ctx, conn, 'CP_ERR_LIMIT_SLOW_CONSUMER', formatMessage('CP_ERR_LIMIT_SLOW_CONSUMER', [max]));
}

/**
 * Reports a bad frame (error frame + refusal); at WS_PROTOCOL_ERROR_LIMIT
 * errors the socket is closed with 4400 CP_ERR_PROTO_VIOLATIONS. When the
 * frame's `text` carries a usable `seq` (crowd), the request is also
 * answered with a refused ack of the same code; a game frame's `ref` is put
 * in the error frame. `err` that is not a CrowdplayError counts as CP_ERR_PROTO_MALFORMED.
 */
export function protocolError(ctx: GatewayContext, conn: Conn, err: unknown, text?: string): void {
  const e = err instanceof CrowdplayError ? err : new CrowdplayError('CP_ERR_PROTO_MALFORMED', [], { cause: err });
  refuse(ctx, e.code, conn);
  const frame = text === undefined ? {} : inboundContext(text);
  if (conn.role === 'game') sendErrorFrame(conn, e.code, e.message, frame.ref, conn.links ? frame.channel : undefined);
  else {
    sendErrorFrame(conn, e.code, e.message);
    if (frame.seq !== undefined && conn.ws.readyState === 1) conn.ws.send(ackFrame(frame.seq, false, undefined, e.code));
  }
  if (++conn.protocolErrors >= ctx.config.gateway.protocolErrorLimit) {
    refuse(ctx, 'CP_ERR_PROTO_VIOLATIONS', conn);
    endConn(ctx, conn, 'CP_ERR_PROTO_VIOLATIONS');
  }
}
