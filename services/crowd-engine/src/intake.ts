/**
 * A shard's intake, the hot path: the intent batches gateways publish on `ch.C.in` are checked against the
 * declared actions, listed in the channels' open ticks (or charged first, when paid) and acked to
 * `gw.<id>.acks` in one AckBatch per batch.
 */
import { decodeJson, encodeJson, type BusMessage } from '@crowdplay/bus';
import {
  isCrowdplayError,
  type AckBatch,
  type BalanceFrame,
  type BusAck,
  type BusTrade,
  type ErrorCode,
  type IntentBatch,
} from '@crowdplay/protocol';
import { tracer, tracingOn } from '@crowdplay/telemetry';
import { context, SpanKind, trace } from '@opentelemetry/api';
import type { ChargeFn, Owned, ShardState } from './shard-state.ts';

const noWallet: ChargeFn = () => Promise.resolve({ ok: false, code: 'CP_ERR_INTENT_INSUFFICIENT_FUNDS' });

/** Takes the owned channels' intents and acks them. */
export class Intake {
  private readonly charge: ChargeFn;

  constructor(private readonly s: ShardState) {
    this.charge = s.deps.charge ?? (s.deps.ledger ? (req) => this.chargeFromWallet(req) : noWallet);
  }

  private async chargeFromWallet(req: Parameters<ChargeFn>[0]): Promise<{ ok: true } | { ok: false; code: ErrorCode }> {
    const o = this.s.owned.get(req.channel);
    if (!o?.rounds) return { ok: false, code: 'CP_ERR_CHANNEL_NOT_OWNED' };
    try {
      await o.rounds.chargeAction(req.viewer, req.cost, req.idempotencyKey);
      return { ok: true };
    } catch (err) {
      return { ok: false, code: isCrowdplayError(err) ? err.code : 'CP_ERR_INTERNAL' };
    }
  }

  onIntents(o: Owned, msg: BusMessage): void {
    if (!tracingOn() || trace.getSpan(context.active()) === undefined) {
      this.takeIntents(o, msg);
      return;
    }
    // Traced (the batch carries a traceparent; join-only batches do not): a child of the gateway's batch publish span (the bus runs this handler in the context of the
    // message's traceparent); the AckBatch published inside carries this span's context back to the gateway.
    tracer().startActiveSpan(
      'crowdplay.intent_batch.process',
      { kind: SpanKind.CONSUMER, attributes: { 'crowdplay.channel': o.rt.id, 'crowdplay.shard': this.s.id, 'crowdplay.epoch': o.epoch } },
      (span) => {
        try {
          this.takeIntents(o, msg);
        } finally {
          span.end();
        }
      },
    );
  }

  private takeIntents(o: Owned, msg: BusMessage): void {
    let batch: IntentBatch;
    try {
      batch = decodeJson<IntentBatch>(msg.data);
    } catch {
      this.s.deps.telemetry.refusals.refuse('engine', 'CP_ERR_PROTO_MALFORMED', { channel: o.rt.id });
      return;
    }
    const { config, telemetry } = this.s.deps;
    if (o.moving) {
      // Moving to another shard: nothing is taken here. Each intent goes back with its refusal (and the joins with it), so the
      // gateway publishes them again and the new owner takes them; the viewer sees the refusal only if the move outlasts
      // INTENT_MOVE_RESEND_MS.
      const acks: BusAck[] = batch.intents.map((it) => ({
        conn: it.conn,
        seq: it.seq,
        ok: false,
        code: 'CP_ERR_CHANNEL_UNAVAILABLE',
        resend: it,
      }));
      const joins = batch.joins ?? [];
      if (acks.length > 0) {
        this.s.m.intents.add(acks.length, { outcome: 'refused', reason: 'CP_ERR_CHANNEL_UNAVAILABLE' });
        telemetry.refusals.refuse('engine', 'CP_ERR_CHANNEL_UNAVAILABLE', { channel: o.rt.id, reason: 'moving' }, acks.length);
      }
      if (acks.length > 0 || joins.length > 0) {
        const back: AckBatch = { acks };
        if (joins.length > 0) back.rejoin = joins;
        this.s.deps.bus.publish(this.s.deps.subjects.gatewayAcks(batch.gw), encodeJson(back));
      }
      return;
    }
    this.s.intentsSinceBeat += batch.intents.length;
    // Joins first: a stake in the same batch waits for the viewer's welcome grant.
    if (batch.joins && batch.joins.length > 0 && o.rounds) void o.rounds.join(batch.gw, batch.joins);
    const maxPending = config.engine.maxPendingIntents;
    const now = this.s.now();
    const acks: AckBatch['acks'] = [];
    const paid: Array<Promise<void>> = [];
    let listed = 0;
    let dropped = 0;
    for (const it of batch.intents) {
      if (it.guess !== undefined) {
        const g = o.game?.guess;
        if (!g) {
          acks.push({ conn: it.conn, seq: it.seq, ok: false, code: 'CP_ERR_INTENT_UNKNOWN_ACTION' });
          continue;
        }
        try {
          const r = g.call(o.game, it.viewer, it.guess, now, it.name);
          acks.push({ conn: it.conn, seq: it.seq, ok: true, cost: 0, marks: r.marks, solved: r.solved, left: r.left });
          this.s.m.intents.add(1, { outcome: 'accepted' });
          this.s.m.actAckMs.record(Math.max(0, now - it.at));
        } catch (err) {
          const code: ErrorCode = isCrowdplayError(err) ? err.code : 'CP_ERR_INTERNAL';
          acks.push({ conn: it.conn, seq: it.seq, ok: false, code });
          this.s.m.intents.add(1, { outcome: 'refused', reason: code });
          telemetry.refusals.refuse('engine', code, { channel: o.rt.id });
        }
        continue;
      }
      if (it.trade) {
        if (o.rounds) o.rounds.take(batch.gw, it as typeof it & { trade: BusTrade });
        else acks.push({ conn: it.conn, seq: it.seq, ok: false, code: 'CP_ERR_ROUND_UNKNOWN' });
        continue;
      }
      const checked = o.rt.check(it);
      if (!checked.ok) {
        acks.push({ conn: it.conn, seq: it.seq, ok: false, code: checked.code });
        this.s.m.intents.add(1, { outcome: 'refused', reason: checked.code });
        telemetry.refusals.refuse('engine', checked.code, { channel: o.rt.id });
        continue;
      }
      if (this.s.pendingIntents >= maxPending) {
        acks.push({ conn: it.conn, seq: it.seq, ok: false, code: 'CP_ERR_INTENT_OVERLOADED' });
        this.s.m.intents.add(1, { outcome: 'refused', reason: 'CP_ERR_INTENT_OVERLOADED' });
        telemetry.refusals.refuse('engine', 'CP_ERR_INTENT_OVERLOADED', { limit: 'SHARD_MAX_PENDING_INTENTS', value: maxPending });
        continue;
      }
      if (checked.cost > 0) {
        paid.push(this.takePaid(o, batch.gw, it, checked.cost));
        continue;
      }
      if (this.accept(o, it.viewer, it.action, it.option, it.at)) listed++;
      else dropped++;
      acks.push({ conn: it.conn, seq: it.seq, ok: true, cost: 0 });
      this.s.m.actAckMs.record(Math.max(0, now - it.at));
    }
    this.countIntake(o, listed, dropped);
    if (acks.length > 0) this.s.deps.bus.publish(this.s.deps.subjects.gatewayAcks(batch.gw), encodeJson({ acks } satisfies AckBatch));
    if (paid.length > 0) void Promise.all(paid);
  }

  sendAcks(gw: string, acks: BusAck[], balances?: Array<{ conn: number; frame: BalanceFrame }>): void {
    const msg: AckBatch = { acks };
    if (balances && balances.length > 0) msg.balances = balances;
    this.s.deps.bus.publish(this.s.deps.subjects.gatewayAcks(gw), encodeJson(msg));
  }

  /** A paid intent: acked only after the charge is committed (never before). */
  private async takePaid(o: Owned, gw: string, it: IntentBatch['intents'][number], cost: number): Promise<void> {
    let ack: AckBatch['acks'][number];
    try {
      const r = await this.charge({
        channel: o.rt.id,
        epoch: o.epoch,
        viewer: it.viewer,
        action: it.action,
        cost,
        idempotencyKey: `${gw}:${it.conn}:${it.seq}`,
      });
      if (r.ok && this.s.owned.get(o.rt.id) === o) {
        const isListed = this.accept(o, it.viewer, it.action, it.option, it.at);
        this.countIntake(o, isListed ? 1 : 0, isListed ? 0 : 1);
        ack = { conn: it.conn, seq: it.seq, ok: true, cost };
      } else {
        const code: ErrorCode = r.ok ? 'CP_ERR_CHANNEL_NOT_OWNED' : r.code;
        ack = { conn: it.conn, seq: it.seq, ok: false, code };
        this.s.m.intents.add(1, { outcome: 'refused', reason: code });
        this.s.deps.telemetry.refusals.refuse('engine', code, { channel: o.rt.id });
      }
    } catch (err) {
      this.s.deps.telemetry.logger.error({ err, channel: o.rt.id }, 'charge failed');
      ack = { conn: it.conn, seq: it.seq, ok: false, code: 'CP_ERR_INTERNAL' };
    }
    this.s.m.actAckMs.record(Math.max(0, this.s.now() - it.at));
    this.s.deps.bus.publish(this.s.deps.subjects.gatewayAcks(gw), encodeJson({ acks: [ack] } satisfies AckBatch));
  }

  /**
   * Adds a checked intent to the open tick.
   * @returns true when listed, false when over maxPerTick (tallied, not listed);
   *   the caller counts both with countIntake (once per batch, not per intent)
   */
  accept(o: Owned, viewer: string, action: string, option: string | undefined, atMs: number): boolean {
    // The tick's first intent puts the channel in the tick set; a channel with open intents never leaves it (rests()).
    if (!o.rt.hasOpenIntents) this.s.wake(o);
    if (!o.rt.add(viewer, action, option, atMs)) return false;
    this.s.pendingIntents++;
    return true;
  }

  /** Metrics for a batch's accepted intents, added once per batch: attribute hashing per intent was measurable at 10,000/s. */
  countIntake(o: Owned, listed: number, dropped: number): void {
    if (listed > 0) this.s.m.intents.add(listed, { outcome: 'accepted' });
    if (dropped > 0) {
      this.s.m.intents.add(dropped, { outcome: 'dropped_over_cap' });
      this.s.deps.telemetry.refusals.refuse('engine', 'CP_ERR_INTENT_OVER_CAP', { channel: o.rt.id }, dropped);
    }
  }
}
