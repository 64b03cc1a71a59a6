/**
 * A channel's current update for a socket that (re)joins: a viewer's initial
 * update, the snapshot a resyncing game gets, and the `resync` frame. The
 * shard's snapshot is asked for over `ch.<C>.ctl`, one request in flight per
 * channel, so a join storm costs the shard one request.
 */
import { decodeJson, encodeJson } from '@crowdplay/bus';
import type { ResyncFrame } from '@crowdplay/protocol';
import type { ChannelCtlReply, ChannelCtlRequest } from '@crowdplay/crowd-engine';
import type { Conn } from './connection.ts';
import type { GatewayContext } from './gateway-context.ts';

/** Channel snapshots and initial updates. One per gateway. */
export class Snapshots {
  /** In-flight snapshot request per channel. */
  private readonly snapshotting = new Map<string, Promise<Buffer | undefined>>();

  constructor(private readonly ctx: GatewayContext) {}

  /**
   * The joining viewer's first update: the newest one this gateway holds for
   * the channel, else the shard's current one (`ch.<C>.ctl` snapshot, one
   * request in flight per channel). Skipped when it is not newer than the
   * viewer's `lastEventId`, or when a broadcast reached the viewer first. A
   * viewer ahead of the channel gets a `resync` (reason `ahead`) first. Never rejects.
   */
  async sendInitialUpdate(conn: Conn): Promise<void> {
    const { fanout, metrics } = this.ctx;
    let latest = fanout.latest(conn.channel);
    if (!latest) {
      let bytes: Buffer | undefined;
      try {
        bytes = await this.snapshot(conn.channel);
      } catch (err) {
        this.ctx.logger.debug({ err, channel: conn.channel }, 'snapshot request failed; the viewer gets the next update');
        return;
      }
      if (!bytes || !conn.writable || conn.gotUpdate) return;
      fanout.offerSnapshot(conn.channel, bytes);
      latest = fanout.latest(conn.channel);
      if (!latest) return;
    }
    if (conn.lastEventId !== undefined) {
      // Updates are full states: the newest one is everything a viewer missed. A viewer ahead of the channel
      // saw changes that were lost (a shard died before its snapshot): it must replace its state.
      if (conn.lastEventId > latest.ev) {
        metrics.resumes.add(1, { role: 'crowd', outcome: 'resync_ahead' });
        this.sendResync(conn, 'ahead');
      } else {
        metrics.resumes.add(1, { role: 'crowd', outcome: 'current' });
        if (latest.ev === conn.lastEventId) return;
      }
    }
    fanout.sendTo(conn, latest.bytes);
  }

  /**
   * Sends `{t:'resync', channel, from: lastEventId ?? 0, reason}` if the socket is writable.
   * @param link the channel and resume point (default: the socket's own; a multi-channel game socket's attached channel)
   */
  sendResync(conn: Conn, reason: ResyncFrame['reason'], link: { channel: string; lastEventId: number | undefined } = conn): void {
    if (!conn.writable) return;
    const frame: ResyncFrame = { t: 'resync', channel: link.channel, from: link.lastEventId ?? 0, reason };
    conn.ws.send(JSON.stringify(frame));
  }

  /**
   * The channel's current update as the shard encodes it (UTF-8 JSON bytes), undefined when the shard has none.
   * One request in flight per channel: concurrent callers share it.
   * @throws the bus error (no owner answering, timeout after BUS_REQUEST_TIMEOUT_MS)
   */
  snapshot(channel: string): Promise<Buffer | undefined> {
    let p = this.snapshotting.get(channel);
    if (!p) {
      p = this.requestSnapshot(channel).finally(() => this.snapshotting.delete(channel));
      this.snapshotting.set(channel, p);
    }
    return p;
  }

  private async requestSnapshot(channel: string): Promise<Buffer | undefined> {
    const { bus, subjects, config } = this.ctx;
    const req: ChannelCtlRequest = { op: 'snapshot' };
    const msg = await bus.request(subjects.channelCtl(channel), encodeJson(req), { timeoutMs: config.bus.requestTimeoutMs });
    const reply = decodeJson<ChannelCtlReply>(msg.data);
    return reply.ok && typeof reply.update === 'string' ? Buffer.from(reply.update, 'utf8') : undefined;
  }
}
