/**
 * Channel fan-out: per channel, the set of local viewer sockets and the
 * `ch.<C>.out` and `ch.<C>.wallet` subscriptions held while the set is not
 * empty. Each update
 * arrives as the bytes of a serialised `update` frame and is written, as the
 * same Buffer, to every member (serialised once, by the shard).
 *
 * Per socket, by its unsent bytes (`ws.bufferedAmount`):
 * - over `maxBufferedBytes` (WS_MAX_BUFFERED_BYTES): slow consumer, `onSlow`
 *   closes it with 4008;
 * - over `skipBufferedBytes` (WS_SKIP_BUFFERED_BYTES): the update is skipped
 *   and only the newest skipped one is remembered; it goes out on the next
 *   update or as soon as a write completes under the limit (newest state,
 *   never the backlog: updates are full states, see ChannelUpdate).
 *
 * Each `ch.<C>.wallet` message (WalletBatch: payouts, refunds) is routed per
 * entry to the members whose viewer it names, as a `balance` frame (one pass
 * over the members per message; nothing per socket on the update path).
 */
import { decodeJson, type Bus, type Subjects, type Subscription } from '@crowdplay/bus';
import type { WalletBatch } from '@crowdplay/protocol';
import type { Logger } from '@crowdplay/telemetry';
import { TEXT_FRAME, type Conn } from './connection.ts';
import type { GatewayMetrics } from './metrics.ts';

/** Options of {@link ChannelFanout}. */
export interface FanoutOptions {
  /** WS_MAX_BUFFERED_BYTES: over it a socket is a slow consumer (closed 4008), bytes. */
  maxBufferedBytes: number;
  /** WS_SKIP_BUFFERED_BYTES: over it a socket skips updates, bytes. */
  skipBufferedBytes: number;
}

/** One channel with local viewers. */
interface ChannelEntry {
  readonly channel: string;
  readonly members: Set<Conn>;
  sub: Subscription | undefined;
  /** `ch.<C>.wallet`: balance changes of the channel's viewers. */
  walletSub: Subscription | undefined;
  /** The newest update seen on this channel while subscribed (broadcast or snapshot reply). */
  latest: Buffer | undefined;
  /** `ev` of `latest`, parsed lazily (undefined until needed; NaN when it has none). */
  latestEv: number | undefined;
}

/** Outcome of writing one update to one socket (plain constants: no enums, so Node's type stripping runs this file). */
const Delivery = { Sent: 0, Skipped: 1, Dropped: 2 } as const;
type Delivery = (typeof Delivery)[keyof typeof Delivery];

/** Per-channel membership and update fan-out. See the module comment. */
/**
 * How often sockets that skipped an update are checked for room to take the
 * newest one, ms. Only sockets in the lagging set are looked at.
 */
export const LAG_SWEEP_MS = 50;

export class ChannelFanout {
  private readonly channels = new Map<string, ChannelEntry>();
  /** Sockets holding a skipped update (their send buffer was over the skip limit). */
  private readonly lagging = new Set<Conn>();
  private sweepTimer: NodeJS.Timeout | undefined;

  /**
   * @param onSlow closes a slow consumer (error frame + 4008) and removes it
   *   from its channel (through {@link leave}); called at most once per socket
   */
  constructor(
    private readonly bus: Bus,
    private readonly subjects: Subjects,
    private readonly opts: FanoutOptions,
    private readonly metrics: GatewayMetrics,
    private readonly logger: Logger,
    private readonly onSlow: (conn: Conn) => void,
  ) {}

  /** Channels with at least one local member. */
  get size(): number {
    return this.channels.size;
  }

  /** Local members of `channel` (0 when none). */
  members(channel: string): number {
    return this.channels.get(channel)?.members.size ?? 0;
  }

  /**
   * Adds a viewer socket to its channel; the first member subscribes to
   * `ch.<C>.out` and `ch.<C>.wallet`.
   * @throws BusError `closed` when the bus is closed (the caller ends the socket)
   */
  join(conn: Conn): void {
    let entry = this.channels.get(conn.channel);
    if (!entry) {
      const created: ChannelEntry = {
        channel: conn.channel,
        members: new Set(),
        sub: undefined,
        walletSub: undefined,
        latest: undefined,
        latestEv: undefined,
      };
      created.sub = this.bus.subscribe(this.subjects.channelOut(conn.channel), (msg) => this.broadcast(created, msg.data));
      try {
        created.walletSub = this.bus.subscribe(this.subjects.channelWallet(conn.channel), (msg) => this.wallet(created, msg.data));
      } catch (err) {
        created.sub.unsubscribe();
        throw err;
      }
      this.channels.set(conn.channel, created);
      entry = created;
    }
    entry.members.add(conn);
    conn.joined = true;
  }

  /** Removes a socket from its channel; the last member unsubscribes. Safe to call twice. */
  leave(conn: Conn): void {
    if (!conn.joined) return;
    conn.joined = false;
    conn.pendingUpdate = undefined;
    this.lagging.delete(conn);
    const entry = this.channels.get(conn.channel);
    if (!entry) return;
    entry.members.delete(conn);
    if (entry.members.size === 0) {
      entry.sub?.unsubscribe();
      entry.walletSub?.unsubscribe();
      this.channels.delete(conn.channel);
    }
  }

  /**
   * The newest update this gateway holds for the channel, if any, with its
   * `ev` (parsed once per update, only when asked).
   */
  latest(channel: string): { bytes: Buffer; ev: number } | undefined {
    const entry = this.channels.get(channel);
    if (!entry?.latest) return undefined;
    if (entry.latestEv === undefined) entry.latestEv = parseEv(entry.latest);
    return { bytes: entry.latest, ev: entry.latestEv };
  }

  /**
   * Remembers a snapshot reply as the channel's latest update unless a
   * broadcast arrived meanwhile (a broadcast is at least as new).
   */
  offerSnapshot(channel: string, bytes: Buffer): void {
    const entry = this.channels.get(channel);
    if (entry && entry.latest === undefined) {
      entry.latest = bytes;
      entry.latestEv = undefined;
    }
  }

  /**
   * Writes one update to one member (join-time snapshot or a replay).
   * Applies the same buffer limits as a broadcast.
   */
  sendTo(conn: Conn, bytes: Buffer): void {
    const r = this.deliver(conn, bytes);
    if (r === Delivery.Sent) this.metrics.updatesSent.add(1);
    else if (r === Delivery.Skipped) this.metrics.updatesSkipped.add(1);
  }

  /** Unsubscribes every channel (close). Members are ended by the gateway. */
  close(): void {
    if (this.sweepTimer) clearTimeout(this.sweepTimer);
    this.sweepTimer = undefined;
    this.lagging.clear();
    for (const entry of this.channels.values()) {
      entry.sub?.unsubscribe();
      entry.walletSub?.unsubscribe();
    }
    this.channels.clear();
  }

  private broadcast(entry: ChannelEntry, data: Uint8Array): void {
    // No copy: the bus payload's bytes are the frame.
    const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    entry.latest = bytes;
    entry.latestEv = undefined;
    this.metrics.broadcastBytes.record(bytes.length);
    let sent = 0;
    let skipped = 0;
    for (const conn of entry.members) {
      const r = this.deliver(conn, bytes);
      if (r === Delivery.Sent) sent++;
      else if (r === Delivery.Skipped) skipped++;
    }
    if (sent > 0) this.metrics.updatesSent.add(sent);
    if (skipped > 0) this.metrics.updatesSkipped.add(skipped);
  }

  /**
   * Routes one WalletBatch: each entry's frame (`balance` or `roundResult`) goes
   * to the members whose viewer it names (several entries for one viewer are
   * sent in order).
   * A socket over WS_MAX_BUFFERED_BYTES is a slow consumer, as for updates.
   */
  private wallet(entry: ChannelEntry, data: Uint8Array): void {
    let batch: WalletBatch;
    try {
      batch = decodeJson<WalletBatch>(data);
    } catch (err) {
      this.logger.warn({ err, channel: entry.channel }, 'undecodable WalletBatch dropped');
      return;
    }
    if (!Array.isArray(batch.entries) || batch.entries.length === 0) return;
    const byViewer = new Map<string, string[]>();
    for (const e of batch.entries) {
      if (typeof e?.viewer !== 'string' || typeof e.frame !== 'object' || e.frame === null) continue;
      if (e.frame.t !== 'balance' && e.frame.t !== 'roundResult') continue;
      const text = JSON.stringify(e.frame);
      const list = byViewer.get(e.viewer);
      if (list) list.push(text);
      else byViewer.set(e.viewer, [text]);
    }
    if (byViewer.size === 0) return;
    for (const conn of entry.members) {
      const frames = byViewer.get(conn.viewer);
      if (frames === undefined || !conn.writable) continue;
      if (conn.ws.bufferedAmount > this.opts.maxBufferedBytes) {
        this.onSlow(conn);
        continue;
      }
      try {
        for (const text of frames) conn.ws.send(text);
      } catch (err) {
        this.logger.debug({ err, conn: conn.id }, 'balance send failed');
      }
    }
  }

  private armSweep(): void {
    if (this.sweepTimer) return;
    this.sweepTimer = setTimeout(() => {
      this.sweepTimer = undefined;
      this.sweep();
    }, LAG_SWEEP_MS);
  }

  /** Sends each lagging socket its newest skipped update once its buffer is under the skip limit. */
  private sweep(): void {
    let sent = 0;
    for (const conn of this.lagging) {
      const bytes = conn.pendingUpdate;
      if (bytes === undefined || !conn.writable || !conn.joined) {
        this.lagging.delete(conn);
        continue;
      }
      if (this.deliver(conn, bytes) === Delivery.Sent) sent++;
    }
    if (sent > 0) this.metrics.updatesSent.add(sent);
    if (this.lagging.size > 0) this.armSweep();
  }

  private deliver(conn: Conn, bytes: Buffer): Delivery {
    if (!conn.writable) return Delivery.Dropped;
    conn.gotUpdate = true;
    const buffered = conn.ws.bufferedAmount;
    if (buffered > this.opts.maxBufferedBytes) {
      conn.pendingUpdate = undefined;
      this.onSlow(conn);
      return Delivery.Dropped;
    }
    if (buffered > this.opts.skipBufferedBytes) {
      conn.pendingUpdate = bytes;
      this.lagging.add(conn);
      this.armSweep();
      return Delivery.Skipped;
    }
    if (conn.pendingUpdate !== undefined) {
      conn.pendingUpdate = undefined;
      this.lagging.delete(conn);
    }
    try {
      // No write callback: a callback per send costs a nextTick per socket per broadcast.
      conn.ws.send(bytes, TEXT_FRAME);
    } catch (err) {
      this.logger.debug({ err, conn: conn.id }, 'update send failed');
      return Delivery.Dropped;
    }
    return Delivery.Sent;
  }
}

/** The `ev` field of a serialised update (NaN when absent or not JSON). */
function parseEv(bytes: Buffer): number {
  try {
    const ev = (JSON.parse(bytes.toString('utf8')) as { ev?: unknown }).ev;
    return typeof ev === 'number' ? ev : NaN;
  } catch {
    return NaN;
  }
}
