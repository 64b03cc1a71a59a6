/**
 * A game's socket once it is welcomed. Inbound: `declare`, `state` and
 * `round.open|settle|cancel` become `ch.<C>.ctl` requests, one at a time and
 * in order (the socket stops being read while GAME_QUEUE_MAX wait); a
 * retryable refusal of a declare or state is sent again until
 * GAME_CTL_RETRY_MS. Outbound: `ch.<C>.game` messages are forwarded as they
 * are; a game that resumes with `lastEventId` gets the batches it missed from
 * the event log (or a resync and the snapshot) before the live ones, and a
 * live batch it already has is skipped.
 */
import { decodeJson, encodeJson } from '@crowdplay/bus';
import { CrowdplayError, formatMessage, isRetryable, parseInbound, type ResultFrame, type ResyncFrame } from '@crowdplay/protocol';
import type { ChannelCtlReply, ChannelCtlRequest } from '@crowdplay/crowd-engine';
import { sendErrorFrame, TEXT_FRAME, type Conn, type GameLink, type LinkMsg } from './connection.ts';
import { protocolError, refuse, slowConsumer, type GatewayContext } from './gateway-context.ts';
import type { Snapshots } from './snapshots.ts';

/**
 * Game messages (`declare`, `state`, `round.*`) queued for their `ch.<C>.ctl` request; at
 * this length the gateway stops reading the game socket (TCP backpressure)
 * until half of it is done.
 */
export const GAME_QUEUE_MAX = 64;
/**
 * Game messages queued across all channels of a multi-channel game socket; at this count the gateway stops reading
 * the socket until half of them are done (each channel also holds at most GAME_QUEUE_MAX: one more is refused
 * CP_ERR_GAME_CHANNEL_BUSY, so one slow channel does not stall the others).
 */
export const GAME_MULTI_QUEUED_MAX = 4_096;
/** First and largest pause between sends of a game's declare or state refused as retryable, ms (doubling, jittered). */
const GAME_CTL_RETRY_MIN_MS = 50;
const GAME_CTL_RETRY_MAX_MS = 1_000;

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

/** The game side of the gateway: one per gateway, for every game socket. */
export class GameSession {
  constructor(
    private readonly ctx: GatewayContext,
    private readonly snapshots: Snapshots,
  ) {}

  /**
   * Before the welcome: subscribes the socket to `ch.<C>.game`; a resuming
   * socket (`lastEventId`) holds its live batches until {@link start} replayed the missed ones.
   * @throws the bus error when the subscription fails
   */
  subscribe(conn: Conn): void {
    if (!conn.links) this.subscribeLink(conn, conn);
  }

  /**
   * Subscribes one channel of a game socket (the socket itself, or a channel a multi-channel socket attached) to
   * `ch.<C>.game`; with a `lastEventId` its live batches are held until {@link startLink} replayed the missed ones.
   * @throws the bus error when the subscription fails
   */
  subscribeLink(conn: Conn, link: GameLink): void {
    if (link.lastEventId !== undefined) link.resumeBuffer = [];
    link.gameSub = this.ctx.bus.subscribe(this.ctx.subjects.channelGame(link.channel), (msg) => this.sendToGame(conn, link, msg.data));
  }

  /**
   * After the welcome, before the replay of early frames: a resuming socket gets what it missed, then the
   * channel's current update, which lists the channel's rounds: a game learns of a round that changed while it
   * was away (a drain's cancel) without a `round` frame.
   */
  start(conn: Conn): void {
    if (!conn.links) this.startLink(conn, conn);
  }

  /** {@link start} of one channel of a game socket. */
  startLink(conn: Conn, link: GameLink): void {
    if (link.resumeBuffer) void this.resumeGame(conn, link);
  }

  /**
   * One text frame of an open single-channel game socket: queued for its `ch.<C>.ctl` request (or a protocol
   * error). A `channel` in the frame must be the socket's. Multi-channel sockets: multi-game-session.ts.
   */
  onText(conn: Conn, text: string): void {
    let msg;
    try {
      msg = parseInbound('game', text);
    } catch (err) {
      protocolError(this.ctx, conn, err, text);
      return;
    }
    if (msg.channel !== undefined && msg.channel !== conn.channel) {
      protocolError(
        this.ctx,
        conn,
        new CrowdplayError('CP_ERR_PROTO_INVALID', [`/channel must be this socket's channel ${conn.channel}`]),
        text,
      );
      return;
    }
    conn.gameQueue.push(msg);
    if (conn.gameQueue.length >= GAME_QUEUE_MAX && !conn.ws.isPaused) conn.ws.pause();
    this.pump(conn, conn);
  }

  /** Starts the queue pump of one channel of a game socket unless it runs. */
  pump(conn: Conn, link: GameLink): void {
    if (!link.gamePumping) void this.pumpGame(conn, link);
  }

  /**
   * Sends one channel's game messages to the shard one at a time, in order. A single-channel socket paused at
   * GAME_QUEUE_MAX resumes at half of it; a multi-channel socket counts its messages across channels
   * (`conn.multiQueued`, MultiGameSession). Never rejects.
   */
  private async pumpGame(conn: Conn, link: GameLink): Promise<void> {
    link.gamePumping = true;
    try {
      for (let msg = link.gameQueue.shift(); msg !== undefined && conn.state === 'open'; msg = link.gameQueue.shift()) {
        if (conn.links) {
          conn.multiQueued--;
          if (conn.ws.isPaused && conn.multiQueued <= GAME_MULTI_QUEUED_MAX / 2) conn.ws.resume();
        } else if (conn.ws.isPaused && link.gameQueue.length <= GAME_QUEUE_MAX / 2) conn.ws.resume();
        await this.forwardGame(conn, link, msg);
      }
    } finally {
      link.gamePumping = false;
      link.onIdle?.();
    }
  }

  /**
   * One game message as a `ch.<C>.ctl` request. Declare/state: success is
   * silent, a refusal is an error frame. Round ops carry the game's tenant; a
   * request with `ref` is answered with `{t:'result', ref, ok:true, round?}`
   * or an error frame with `ref` (without `ref`, success is silent too).
   */
  private async forwardGame(conn: Conn, link: GameLink, msg: LinkMsg): Promise<void> {
    const { ctx } = this;
    const { req, ref } = ctlRequest(conn, msg);
    // Declare, state and release have no answer the game could retry on: a retryable refusal (the channel moving, no
    // owner yet) is sent again here, in order, until GAME_CTL_RETRY_MS; a state with a newer one queued behind it is not.
    const retries = req.op === 'declare' || req.op === 'state' || req.op === 'release';
    const limitMs = ctx.config.gateway.gameCtlRetryMs;
    const t0 = performance.now();
    let backoffMs = GAME_CTL_RETRY_MIN_MS;
    let reply: ChannelCtlReply;
    for (;;) {
      reply = await this.ctlOnce(conn, link.channel, req);
      if (reply.ok || !retries || !isRetryable(reply.code) || limitMs === 0) break;
      if (req.op === 'state' && link.gameQueue.some((m) => m.t === 'state')) return; // superseded
      const leftMs = limitMs - (performance.now() - t0);
      if (leftMs <= 0 || ctx.intakeClosed() || conn.state !== 'open') {
        ctx.metrics.gameCtlRetried.add(1, { outcome: 'expired' });
        break;
      }
      ctx.metrics.gameCtlRetried.add(1, { outcome: 'resent' });
      const delayMs = Math.min(leftMs, backoffMs * (0.5 + Math.random() / 2));
      backoffMs = Math.min(GAME_CTL_RETRY_MAX_MS, backoffMs * 2);
      await new Promise<void>((resolve) => ctx.later(resolve, delayMs));
      if (conn.state !== 'open') return;
    }
    const channel = conn.links ? link.channel : undefined;
    if (msg.t === 'release') return; // answered by the `detached` frame (multi-game-session.ts)
    if (!reply.ok) {
      sendErrorFrame(conn, reply.code, reply.message, ref, channel);
      return;
    }
    if (ref === undefined || !conn.writable) return;
    const result: ResultFrame = channel === undefined ? { t: 'result', ref, ok: true } : { t: 'result', ref, channel, ok: true };
    if (reply.round !== undefined) result.round = reply.round;
    conn.ws.send(JSON.stringify(result));
  }

  /**
   * One `ch.<C>.ctl` request; a bus failure (no owner answering, a timeout) is CP_ERR_CHANNEL_UNAVAILABLE, counted
   * as a refusal (logged once per interval: under overload every game's retries fail alike). Never rejects.
   */
  private async ctlOnce(conn: Conn, channel: string, req: ChannelCtlRequest): Promise<ChannelCtlReply> {
    const { bus, subjects, config } = this.ctx;
    try {
      const res = await bus.request(subjects.channelCtl(channel), encodeJson(req), {
        timeoutMs: config.bus.requestTimeoutMs,
      });
      return decodeJson<ChannelCtlReply>(res.data);
    } catch (err) {
      refuse(this.ctx, 'CP_ERR_CHANNEL_UNAVAILABLE', conn, {
        op: req.op,
        gameChannel: channel,
        bus: (err as { code?: string }).code ?? String(err),
      });
      return { ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: formatMessage('CP_ERR_CHANNEL_UNAVAILABLE', [channel]) };
    }
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
  private async resumeGame(conn: Conn, link: GameLink): Promise<void> {
    const { ctx } = this;
    const from = link.lastEventId ?? 0;
    let replayedUpTo = from;
    let reason: ResyncFrame['reason'] | null = null;
    try {
      await ctx.bus.flush();
      const s = await ctx.store.events.since(link.channel, from, ctx.config.eventLog.resumeMaxEvents);
      if (from < s.floor) reason = 'pruned';
      else if (s.more) reason = 'behind';
      else {
        for (const e of s.events) {
          this.sendToGameNow(conn, Buffer.from(e.body, 'utf8'));
          replayedUpTo = e.eventId;
        }
        ctx.metrics.eventsReplayed.add(s.events.length);
      }
    } catch (err) {
      ctx.logger.warn({ err, channel: link.channel }, 'event log read failed; the game resyncs');
      reason = 'unavailable';
    }
    ctx.metrics.resumes.add(1, { role: 'game', outcome: reason ? `resync_${reason}` : 'replayed' });
    if (reason) this.snapshots.sendResync(conn, reason, link);
    // After a resync the snapshot replaces the game's state; after a replay it tells the game its rounds' states.
    const bytes = await this.snapshots.snapshot(link.channel).catch(() => undefined);
    if (bytes) this.sendToGameNow(conn, bytes);
    const held = link.resumeBuffer ?? [];
    link.resumeBuffer = null;
    // Only batches the replay sent can come live afterwards: with nothing replayed (a game ahead of the log, e.g. a
    // fresh database), live batches are not held back against its lastEventId.
    if (replayedUpTo > from) link.lastBatchEv = replayedUpTo;
    for (const data of held) {
      const ev = frameEv(data);
      if (ev !== undefined && ev <= replayedUpTo) ctx.metrics.replayedLiveSkipped.add(1);
      else this.sendLiveToGame(conn, link, data, ev);
    }
  }

  /** Forwards one `ch.<C>.game` message (Batch bytes) to the game socket as a text frame. */
  private sendToGame(conn: Conn, link: GameLink, data: Uint8Array): void {
    if (link.resumeBuffer) {
      link.resumeBuffer.push(data);
      if (link.resumeBuffer.length > this.ctx.config.eventLog.resumeMaxEvents) slowConsumer(this.ctx, conn);
      return;
    }
    this.sendLiveToGame(conn, link, data, frameEv(data));
  }

  /**
   * One live `ch.<C>.game` message: a batch whose `ev` is at most the newest
   * this socket was sent (`conn.lastBatchEv`) is one the game has and is
   * skipped (counted); round frames (no `ev`) always go.
   * @param ev the frame's `ev` ({@link frameEv}: read once by the caller)
   */
  private sendLiveToGame(conn: Conn, link: GameLink, data: Uint8Array, ev: number | undefined): void {
    if (ev !== undefined) {
      if (link.lastBatchEv !== null && ev <= link.lastBatchEv) {
        this.ctx.metrics.replayedLiveSkipped.add(1);
        return;
      }
      link.lastBatchEv = ev;
    }
    this.sendToGameNow(conn, data);
  }

  /** Writes bytes as a text frame; a send buffer over WS_MAX_BUFFERED_BYTES ends the socket instead (slow consumer). */
  private sendToGameNow(conn: Conn, data: Uint8Array): void {
    if (!conn.writable) return;
    if (conn.ws.bufferedAmount > this.ctx.config.gateway.maxBufferedBytes) {
      slowConsumer(this.ctx, conn);
      return;
    }
    conn.ws.send(Buffer.from(data.buffer, data.byteOffset, data.byteLength), TEXT_FRAME);
  }
}

/**
 * The `ch.<C>.ctl` request for one game message, and the `ref` to answer.
 * Round ops carry the tenant the game authenticated as; `declare` passes
 * `welcomeGrant` through when set.
 */
function ctlRequest(conn: Conn, msg: LinkMsg): { req: ChannelCtlRequest; ref: string | undefined } {
  switch (msg.t) {
    case 'release':
      return { req: { op: 'release' }, ref: undefined };
    case 'declare': {
      const req: ChannelCtlRequest = { op: 'declare', actions: msg.actions };
      if (msg.welcomeGrant !== undefined) req.welcomeGrant = msg.welcomeGrant;
      return { req, ref: msg.ref };
    }
    case 'state':
      return { req: { op: 'state', state: msg.state }, ref: msg.ref };
    case 'round.open': {
      const { t: op, ref, channel: _, ...fields } = msg;
      return { req: { op, tenant: conn.tenantId, ...fields }, ref };
    }
    case 'round.settle': {
      const { t: op, ref, channel: _, ...fields } = msg;
      return { req: { op, tenant: conn.tenantId, ...fields }, ref };
    }
    case 'round.cancel': {
      const { t: op, ref, channel: _, ...fields } = msg;
      return { req: { op, tenant: conn.tenantId, ...fields }, ref };
    }
  }
}
