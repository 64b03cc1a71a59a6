/**
 * One WebSocket connection as the gateway tracks it, and the helpers that
 * write frames to it. Internal to the gateway.
 */
import type { WebSocket } from 'ws';
import {
  CloseCode,
  ERRORS,
  formatMessage,
  type BusAck,
  type ErrorCode,
  type ErrorFrame,
  type ErrorSpec,
  type GameInbound,
} from '@crowdplay/protocol';
import type { Subscription } from '@crowdplay/bus';

/** `auth` until the welcome; `open` while serving; `closing` after we (or the peer) started the close; `closed` at the end. */
export type ConnState = 'auth' | 'open' | 'closing' | 'closed';

/** A client role, or `invalid` when the query did not name one. */
export type ConnRole = 'crowd' | 'game' | 'invalid';

/** `ws.send` options for text frames (updates arrive from the bus as bytes and go out as text). */
export const TEXT_FRAME = Object.freeze({ binary: false });

/** What a game channel's queue holds: the game's messages, and the `release` a multi-channel socket's `detach` sends. */
export type LinkMsg = GameInbound | { t: 'release' };

/**
 * One channel a game socket serves: the socket itself for a single-channel game (its fields below), or a
 * {@link ChannelLink} of a multi-channel one. Batches, resume and the queue of `ch.<C>.ctl` requests are per link.
 */
export interface GameLink {
  readonly channel: string;
  /** Resume point (the newest batch `ev` the game applied here), if any. */
  lastEventId: number | undefined;
  /** Live `ch.<C>.game` messages held while the missed ones are read from the event log. */
  resumeBuffer: Uint8Array[] | null;
  /** The newest batch `ev` sent for this channel (see Conn.lastBatchEv). */
  lastBatchEv: number | null;
  gameSub: Subscription | undefined;
  /** Messages waiting for their `ch.<C>.ctl` request (processed one at a time, in order). */
  readonly gameQueue: LinkMsg[];
  gamePumping: boolean;
  /** Called when the pump has emptied the queue (a multi-channel `detach` waits for it). */
  onIdle?: (() => void) | undefined;
}

/** A channel attached to a multi-channel game socket (multi-game-session.ts). */
export class ChannelLink implements GameLink {
  resumeBuffer: Uint8Array[] | null = null;
  lastBatchEv: number | null = null;
  gameSub: Subscription | undefined;
  readonly gameQueue: LinkMsg[] = [];
  gamePumping = false;
  onIdle: (() => void) | undefined;
  /** Being detached: new messages for it are refused, it leaves the socket once its queue is done. */
  detaching = false;
  /** Declared by the socket's class-wide declaration (a `declare` without `channel`). */
  declaredByDefault = false;

  constructor(
    readonly channel: string,
    public lastEventId: number | undefined,
  ) {}
}

/** One frame received before authentication finished; replayed in order after the welcome. */
export interface EarlyFrame {
  data: Buffer;
  isBinary: boolean;
}

/** A gateway connection. Mutable fields are owned by the gateway. */
export class Conn {
  state: ConnState = 'auth';
  /** Viewer id (`sub` of the token) for crowd; empty for game. */
  viewer = '';
  /** Tenant id, set by auth. */
  tenantId = '';
  /** Resume point from the query (crowd and game), if any. */
  lastEventId: number | undefined;
  /** Game resuming: live `ch.<C>.game` messages held while the missed ones are read from the event log. */
  resumeBuffer: Uint8Array[] | null = null;
  /**
   * Game: the newest batch `ev` this socket was sent (from the event log or live), null before the first. A channel's
   * batch ids only rise (a new owner's ids are above the old one's), so a live batch at or below it is one the game
   * has: the live copy of a batch a resume replayed (a shard logs a batch before it publishes it), or the previous
   * owner's last batch a new owner sends again (it may have died between the two). Not sent twice.
   */
  lastBatchEv: number | null = null;
  /** Frames received before the welcome, or null once they were replayed. */
  early: EarlyFrame[] | null = [];
  /** Bytes held in `early`. */
  earlyBytes = 0;
  /** Protocol errors made on this socket (closed with 4400 at WS_PROTOCOL_ERROR_LIMIT). */
  protocolErrors = 0;
  /** Counted in crowdplay_connections (after the welcome). */
  counted = false;
  /** Crowd: member of its channel's fan-out set. */
  joined = false;
  /** Crowd: an update (broadcast or snapshot) was delivered or is pending; a late snapshot reply is then dropped. */
  gotUpdate = false;
  /** Crowd: the newest update skipped while the send buffer was over the skip limit. */
  pendingUpdate: Buffer | undefined;
  /** Game: the `ch.<C>.game` subscription. */
  gameSub: Subscription | undefined;
  /** Game: inbound messages waiting for their `ch.<C>.ctl` request (processed one at a time, in order). */
  readonly gameQueue: LinkMsg[] = [];
  /** Game: a queue pump is running. */
  gamePumping = false;
  /** Multi-channel game socket (`multi=1`): its channels by id; null on every other socket. */
  links: Map<string, ChannelLink> | null = null;
  /** Multi-channel game socket: messages queued across its channels (GAME_MULTI_QUEUED_MAX pauses the socket). */
  multiQueued = 0;
  /** Multi-channel game socket: attached to every Telegram chat of its tenant, new ones too (`attach` with `chats`). */
  chats = false;
  /** Multi-channel game socket: its class-wide declaration (a `declare` without `channel`), sent to each channel attached. */
  defaultDeclare: GameInbound | undefined;
  /** Answered the last ping (or was just opened). */
  alive = true;
  /** Crowd: the id of the read-only watch token it opened with (watch-tokens.ts); such a socket never acts. */
  watchToken: string | undefined;
  /** Crowd: holds one of its tenant's connection slots on this gateway (tenant-quotas.ts), given back on detach. */
  quotaSlot = false;
  /** Display name (Telegram Mini App sessions: the user's first and last name), sent with guesses for the board. */
  displayName: string | undefined;
  /** performance.now() when the upgrade completed (for crowdplay_connect_setup_ms). */
  readonly upgradedAt = performance.now();

  constructor(
    readonly id: number,
    readonly ws: WebSocket,
    readonly role: ConnRole,
    /** From the URL; a Mini App socket gets its chat's channel at authentication (then fixed). */
    public channel: string,
    readonly address: string,
  ) {}

  /** True while frames may be written (`open`, and the socket is OPEN). */
  get writable(): boolean {
    return this.state === 'open' && this.ws.readyState === 1;
  }
}

/**
 * Serialises an error frame `{"t":"error","code","message","ref"?,"channel"?}`; `ref` is
 * the game request it answers, `channel` its channel on a multi-channel game socket (each omitted when undefined).
 */
export function errorFrame(code: string, message: string, ref?: string, channel?: string): string {
  const frame: ErrorFrame = ref === undefined ? { t: 'error', code, message } : { t: 'error', code, message, ref };
  if (channel !== undefined) frame.channel = channel;
  return JSON.stringify(frame);
}

/**
 * Sends an error frame (with `ref` and `channel` when given) if the socket is still OPEN
 * (state `auth`, `open` or `closing` before the close frame went out). Never throws.
 */
export function sendErrorFrame(conn: Conn, code: string, message: string, ref?: string, channel?: string): void {
  if (conn.ws.readyState !== 1) return;
  conn.ws.send(errorFrame(code, message, ref, channel));
}

/**
 * Ends a connection with an error: sends the error frame, then closes with
 * `closeCode` (default: the catalogue's close code of `code`, else 4500).
 * The close reason is the error code (at most 123 bytes by RFC 6455; codes are short).
 */
export function closeWithError(conn: Conn, code: ErrorCode, message: string = formatMessage(code, []), closeCode?: number): void {
  const spec: ErrorSpec = ERRORS[code];
  const wsCode = closeCode ?? spec.closeCode ?? CloseCode.internal;
  if (conn.state !== 'closed') conn.state = 'closing';
  if (conn.ws.readyState !== 1) return;
  conn.ws.send(errorFrame(code, message));
  conn.ws.close(wsCode, code);
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
