/**
 * A viewer's (crowd) socket once it is welcomed: its channel's fan-out and
 * join, its initial update, its frames (`act`, `guess`, `stake`, `buy`,
 * `sell`) rate limited per viewer and added to the channel's micro-batch, and
 * the re-send of an intent or join that the shard sent back because its
 * channel was moving. Answers (acks, balances) reach the socket through
 * ack-routing.ts.
 */
import { context, SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import {
  CrowdplayError,
  parseInbound,
  type BusIntent,
  type BusTrade,
  type CrowdBuy,
  type CrowdSell,
  type CrowdStake,
} from '@crowdplay/protocol';
import { KeyedLimiter } from '@crowdplay/ratelimit';
import { tracer, tracingOn } from '@crowdplay/telemetry';
import { ackFrame, type Conn } from './connection.ts';
import { protocolError, refuse, viewerKey, type GatewayContext } from './gateway-context.ts';
import type { Snapshots } from './snapshots.ts';

/** Backoff bounds of an intent sent back by a moving channel, ms (a drain move took ≤ 452 ms: docs/benchmarks.md "Failover"). */
const MOVE_RESEND_MIN_MS = 20;
const MOVE_RESEND_MAX_MS = 500;

/**
 * The crowd side of the gateway: one per gateway, for every crowd socket.
 * @throws RangeError from the constructor on intent limiter settings out of range
 */
export class CrowdSession {
  private readonly intentLimiter: KeyedLimiter;

  constructor(
    private readonly ctx: GatewayContext,
    private readonly snapshots: Snapshots,
  ) {
    const g = ctx.config.gateway;
    this.intentLimiter = new KeyedLimiter({ ratePerS: g.intentRatePerS, burst: g.intentBurst });
  }

  /**
   * Before the welcome: the socket joins its channel's fan-out (nothing can be
   * delivered before the welcome goes out: delivery is asynchronous).
   * @throws the bus error when the channel's first subscription fails
   */
  subscribe(conn: Conn): void {
    this.ctx.fanout.join(conn);
  }

  /**
   * After the welcome, before the replay of early frames: the socket is listed
   * for grants, its join rides in the channel's next micro-batch (a stake sent
   * with the join then follows it in the same batch), and its initial update is sent.
   */
  start(conn: Conn): void {
    if (conn.watchToken !== undefined) {
      // A watch socket joins nothing (no wallet, no welcome grant): it only gets the channel's updates.
      void this.snapshots.sendInitialUpdate(conn);
      return;
    }
    const k = viewerKey(conn.tenantId, conn.viewer);
    let set = this.ctx.byViewer.get(k);
    if (!set) this.ctx.byViewer.set(k, (set = new Set()));
    set.add(conn);
    this.ctx.batcher.join(conn.channel, conn.id, conn.viewer);
    void this.snapshots.sendInitialUpdate(conn);
  }

  /** One text frame of an open crowd socket (inside its `crowdplay.intent` span when tracing is on). */
  onText(conn: Conn, text: string): void {
    if (tracingOn()) {
      this.onTextTraced(conn, text);
      return;
    }
    this.take(conn, text, undefined);
  }

  /**
   * One crowd frame inside its `crowdplay.intent` span (a new trace; tracing on only). The span ends
   * once the intent is in its micro-batch (or refused); the batch's publish span links it.
   */
  private onTextTraced(conn: Conn, text: string): void {
    const span = tracer().startSpan('crowdplay.intent', {
      kind: SpanKind.SERVER,
      attributes: { 'crowdplay.channel': conn.channel, 'crowdplay.gateway': this.ctx.id, 'crowdplay.conn': conn.id },
    });
    try {
      context.with(trace.setSpan(context.active(), span), () => this.take(conn, text, span));
    } finally {
      span.end();
    }
  }

  private take(conn: Conn, text: string, span: Span | undefined): void {
    if (conn.watchToken !== undefined) {
      protocolError(this.ctx, conn, new CrowdplayError('CP_ERR_AUTH_READ_ONLY'), text);
      return;
    }
    let msg;
    try {
      msg = parseInbound('crowd', text);
    } catch (err) {
      span?.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof CrowdplayError ? err.code : 'CP_ERR_PROTO_MALFORMED' });
      protocolError(this.ctx, conn, err, text);
      return;
    }
    span?.setAttributes({ 'crowdplay.frame': msg.t, 'crowdplay.seq': msg.seq });
    if (this.ctx.intakeClosed()) {
      span?.setStatus({ code: SpanStatusCode.ERROR, message: 'CP_ERR_LIMIT_DRAINING' });
      refuse(this.ctx, 'CP_ERR_LIMIT_DRAINING', conn);
      conn.ws.send(ackFrame(msg.seq, false, undefined, 'CP_ERR_LIMIT_DRAINING'));
      return;
    }
    const decision = this.intentLimiter.take(`${conn.tenantId}|${conn.viewer}`);
    if (!decision.allowed) {
      span?.setStatus({ code: SpanStatusCode.ERROR, message: 'CP_ERR_INTENT_RATE_LIMITED' });
      refuse(this.ctx, 'CP_ERR_INTENT_RATE_LIMITED', conn);
      conn.ws.send(ackFrame(msg.seq, false, undefined, 'CP_ERR_INTENT_RATE_LIMITED'));
      return;
    }
    // After the viewer's own bucket: a viewer over its limit spends none of its tenant's intents.
    if (!this.ctx.quotas.takeIntent(conn.tenantId)) {
      span?.setStatus({ code: SpanStatusCode.ERROR, message: 'CP_ERR_TENANT_QUOTA' });
      this.ctx.quotas.refuse('gateway', conn.tenantId, 'intentsPerS', { channel: conn.channel, viewer: conn.viewer });
      conn.ws.send(ackFrame(msg.seq, false, undefined, 'CP_ERR_TENANT_QUOTA'));
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
    this.ctx.batcher.add(conn.channel, intent, span?.spanContext());
  }

  /**
   * An intent or join the shard sent back because its channel is moving:
   * `publish` runs again after a backoff (half the time it has waited,
   * 20–500 ms) unless INTENT_MOVE_RESEND_MS has passed since the gateway
   * received it (`waitedMs`, ms), or the gateway is draining; at run time, only
   * if the socket is still open on the same channel. Counted:
   * crowdplay_intents_move_resent_total{outcome}.
   * @returns true when it will be published again (no ack to the viewer yet)
   */
  resendOnMove(conn: Conn, waitedMs: number, publish: (channel: string) => void): boolean {
    const { ctx } = this;
    const limitMs = ctx.config.gateway.intentMoveResendMs;
    if (limitMs === 0 || ctx.intakeClosed() || !(waitedMs < limitMs)) {
      if (limitMs > 0) ctx.metrics.intentsResent.add(1, { outcome: 'expired' });
      return false;
    }
    const channel = conn.channel;
    const delayMs = Math.min(MOVE_RESEND_MAX_MS, Math.max(MOVE_RESEND_MIN_MS, waitedMs / 2), limitMs - waitedMs);
    ctx.later(() => {
      if (!conn.writable || ctx.intakeClosed() || conn.channel !== channel) return;
      ctx.metrics.intentsResent.add(1, { outcome: 'resent' });
      publish(channel);
    }, delayMs);
    return true;
  }
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
