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
import { formatMessage, isRetryable, parseInbound, type GameInbound, type ResultFrame, type ResyncFrame } from '@crowdplay/protocol';
import type { ChannelCtlReply, ChannelCtlRequest } from '@crowdplay/crowd-engine';
import { sendErrorFrame, TEXT_FRAME, type Conn } from './connection.ts';
import { protocolError, refuse, slowConsumer, type GatewayContext } from './gateway-context.ts';
import type { Snapshots } from './snapshots.ts';

/**
 * Game messages (`declare`, `state`, `round.*`) queued for their `ch.<C>.ctl` request; at
 * this length the gateway stops reading the game socket (TCP backpressure)
 * until half of it is done.
 */
export const GAME_QUEUE_MAX = 64;
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
    if (conn.lastEventId !== undefined) conn.resumeBuffer = [];
    conn.gameSub = this.ctx.bus.subscribe(this.ctx.subjects.channelGame(conn.channel), (msg) => this.sendToGame(conn, msg.data));
  }

  /**
   * After the welcome, before the replay of early frames: a resuming socket gets what it missed, then the
   * channel's current update, which lists the channel's rounds: a game learns of a round that changed while it
   * was away (a drain's cancel) without a `round` frame.
   */
  start(conn: Conn): void {
    if (conn.resumeBuffer) void this.resumeGame(conn);
  }

  /** One text frame of an open game socket: queued for its `ch.<C>.ctl` request (or a protocol error). */
  onText(conn: Conn, text: string): void {
    let msg: GameInbound;
    try {
      msg = parseInbound('game', text);
    } catch (err) {
      protocolError(this.ctx, conn, err, text);
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
    const { ctx } = this;
    const { req, ref } = ctlRequest(conn, msg);
    // Declare and state have no answer the game could retry on: a retryable refusal (the channel moving, no owner
    // yet) is sent again here, in order, until GAME_CTL_RETRY_MS; a state with a newer one queued behind it is not.
    const retries = req.op === 'declare' || req.op === 'state';
    const limitMs = ctx.config.gateway.gameCtlRetryMs;
    const t0 = performance.now();
    let backoffMs = GAME_CTL_RETRY_MIN_MS;
    let reply: ChannelCtlReply;
    for (;;) {
      reply = await this.ctlOnce(conn, req);
      if (reply.ok || !retries || !isRetryable(reply.code) || limitMs === 0) break;
      if (req.op === 'state' && conn.gameQueue.some((m) => m.t === 'state')) return; // superseded
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
    const { bus, subjects, config } = this.ctx;
    try {
      const res = await bus.request(subjects.channelCtl(conn.channel), encodeJson(req), {
        timeoutMs: config.bus.requestTimeoutMs,
      });
      return decodeJson<ChannelCtlReply>(res.data);
    } catch (err) {
      refuse(this.ctx, 'CP_ERR_CHANNEL_UNAVAILABLE', conn, { op: req.op, bus: (err as { code?: string }).code ?? String(err) });
      return { ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: formatMessage('CP_ERR_CHANNEL_UNAVAILABLE', [conn.channel]) };
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
  private async resumeGame(conn: Conn): Promise<void> {
    const { ctx } = this;
    const from = conn.lastEventId ?? 0;
    let replayedUpTo = from;
    let reason: ResyncFrame['reason'] | null = null;
    try {
      await ctx.bus.flush();
      const s = await ctx.store.events.since(conn.channel, from, ctx.config.eventLog.resumeMaxEvents);
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
      ctx.logger.warn({ err, channel: conn.channel }, 'event log read failed; the game resyncs');
      reason = 'unavailable';
    }
    ctx.metrics.resumes.add(1, { role: 'game', outcome: reason ? `resync_${reason}` : 'replayed' });
    if (reason) this.snapshots.sendResync(conn, reason);
    // After a resync the snapshot replaces the game's state; after a replay it tells the game its rounds' states.
    const bytes = await this.snapshots.snapshot(conn.channel).catch(() => undefined);
    if (bytes) this.sendToGameNow(conn, bytes);
    const held = conn.resumeBuffer ?? [];
    conn.resumeBuffer = null;
    // Only batches the replay sent can come live afterwards: with nothing replayed (a game ahead of the log, e.g. a
    // fresh database), live batches are not held back against its lastEventId.
    if (replayedUpTo > from) conn.lastBatchEv = replayedUpTo;
    for (const data of held) {
      const ev = frameEv(data);
      if (ev !== undefined && ev <= replayedUpTo) ctx.metrics.replayedLiveSkipped.add(1);
      else this.sendLiveToGame(conn, data, ev);
    }
  }

  /** Forwards one `ch.<C>.game` message (Batch bytes) to the game socket as a text frame. */
  private sendToGame(conn: Conn, data: Uint8Array): void {
    if (conn.resumeBuffer) {
      conn.resumeBuffer.push(data);
      if (conn.resumeBuffer.length > this.ctx.config.eventLog.resumeMaxEvents) slowConsumer(this.ctx, conn);
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
        this.ctx.metrics.replayedLiveSkipped.add(1);
        return;
      }
      conn.lastBatchEv = ev;
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
