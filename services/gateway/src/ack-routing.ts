/**
 * Answers from the shards and the ledger back to the right socket: the
 * `AckBatch` on `gw.<id>.acks` (acks, joins sent back by a moving channel,
 * join balances) and the grants on `wallet.credit` (a `balance` frame to every
 * local socket of that viewer). Each entry names its connection id; an entry
 * whose socket is gone or not writable is dropped.
 */
import { decodeJson, type Subscription } from '@crowdplay/bus';
import type { AckBatch, BalanceFrame, WalletCredit } from '@crowdplay/protocol';
import { tracer, tracingOn } from '@crowdplay/telemetry';
import { context, SpanKind, trace, type Span } from '@opentelemetry/api';
import { ackFrame } from './connection.ts';
import type { CrowdSession } from './crowd-session.ts';
import { viewerKey, type GatewayContext } from './gateway-context.ts';

/** This gateway's ack and credit subscriptions. One per gateway. */
export class AckRouter {
  private ackSub: Subscription | undefined;
  private creditSub: Subscription | undefined;

  constructor(
    private readonly ctx: GatewayContext,
    private readonly crowd: CrowdSession,
  ) {}

  /**
   * Subscribes to `gw.<id>.acks` (traced: the shard's span is the parent of
   * `crowdplay.ack_batch.deliver`) and to the wallet credits.
   * @throws the bus error when a subscription fails
   */
  start(): void {
    const { bus, subjects, id } = this.ctx;
    this.ackSub = bus.subscribe(subjects.gatewayAcks(id), (msg) => {
      // Traced: the shard's span (in the message's headers) is the parent; the loop from the intent closes here.
      if (tracingOn() && trace.getSpan(context.active()) !== undefined) {
        tracer().startActiveSpan(
          'crowdplay.ack_batch.deliver',
          { kind: SpanKind.CONSUMER, attributes: { 'crowdplay.gateway': id } },
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
    this.creditSub = bus.subscribe(subjects.walletCredits(), (msg) => this.onCredit(msg.data));
  }

  /** Unsubscribes both (nothing is delivered afterwards). Idempotent. */
  close(): void {
    this.ackSub?.unsubscribe();
    this.creditSub?.unsubscribe();
  }

  /**
   * One AckBatch: each ack as an ack frame to its socket (an intent sent back
   * by a moving channel is published again instead: CrowdSession.resendOnMove),
   * each join sent back the same way joined again, each balance frame sent as
   * is. An undecodable batch is logged and dropped.
   */
  private onAcks(data: Uint8Array, span?: Span): void {
    const { conns, batcher } = this.ctx;
    let batch: AckBatch;
    try {
      batch = decodeJson<AckBatch>(data);
    } catch (err) {
      this.ctx.logger.warn({ err }, 'undecodable AckBatch dropped');
      return;
    }
    if (Array.isArray(batch.acks)) {
      span?.setAttribute('messaging.batch.message_count', batch.acks.length);
      for (const a of batch.acks) {
        const conn = conns.get(a.conn);
        if (!conn?.writable) continue;
        const intent = a.resend;
        if (intent?.conn === conn.id && this.crowd.resendOnMove(conn, Date.now() - intent.at, (channel) => batcher.add(channel, intent)))
          continue;
        conn.ws.send(ackFrame(a.seq, a.ok, a.cost, a.code, a));
      }
    }
    if (Array.isArray(batch.rejoin)) {
      for (const j of batch.rejoin) {
        const conn = conns.get(j?.conn);
        // A socket joins when it opens: its age is how long its join has waited.
        if (conn?.writable)
          this.crowd.resendOnMove(conn, performance.now() - conn.upgradedAt, (channel) => batcher.join(channel, conn.id, conn.viewer));
      }
    }
    if (Array.isArray(batch.balances)) {
      for (const b of batch.balances) {
        const conn = conns.get(b?.conn);
        if (!conn?.writable || typeof b.frame !== 'object' || b.frame === null || b.frame.t !== 'balance') continue;
        conn.ws.send(JSON.stringify(b.frame));
      }
    }
  }

  /** A grant committed (any gateway): a `balance` frame to this gateway's sockets of that viewer. */
  private onCredit(data: Uint8Array): void {
    let c: WalletCredit;
    try {
      c = decodeJson<WalletCredit>(data);
    } catch (err) {
      this.ctx.logger.warn({ err }, 'undecodable WalletCredit dropped');
      return;
    }
    const set = this.ctx.byViewer.get(viewerKey(c.tenant, c.viewer));
    if (!set || typeof c.balance !== 'number' || typeof c.points !== 'number') return;
    const text = JSON.stringify({ t: 'balance', points: c.balance, reason: 'grant', delta: c.points } satisfies BalanceFrame);
    for (const conn of set) if (conn.writable) conn.ws.send(text);
  }
}
