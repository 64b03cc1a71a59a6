/**
 * Recovery probes at the shard: for each channel a fault moves, an intent
 * published on `ch.<C>.in` as a gateway publishes it (gateway id of its own,
 * one socket index per channel, a free action) every `intervalMs` until the
 * channel's owner takes one again. The ack comes back on that gateway's ack
 * subject straight from the shard, so the figure is the control plane's
 * (detection, move, acquire, intake live again), not the gateways' and
 * sockets' queueing under the viewers' load, which the viewer-path probes
 * (probe.ts) measure beside it.
 *
 * Per channel, the gap: from the last instant the channel was known to take
 * intents to the first ack of its owner that takes one again.
 * - `dead` (the owner was killed): from the fault; every ack that arrives is
 *   the new owner's, so the first one other than CP_ERR_CHANNEL_UNAVAILABLE
 *   closes the gap.
 * - `moving` (the owner drains): the channel keeps taking intents until its
 *   handoff, then refuses them with CP_ERR_CHANNEL_UNAVAILABLE (moving) until
 *   the new owner serves it. The gap opens at the send of the last probe
 *   taken before the first refusal (or the fault) and closes at the first ack
 *   taking a probe sent after that refusal. A channel whose probes never
 *   met a refusal moved between two probes (a gap under `intervalMs`) and
 *   counts 0 once its old owner is gone (`ownerGone()`).
 * One interval drives every probe of a set; a channel's probes go at most
 * one per `intervalMs`, the first at `arm()`.
 */
import { decodeJson, encodeJson, type Bus, type Subscription, type Subjects } from '@crowdplay/bus';
import type { AckBatch, IntentBatch } from '@crowdplay/protocol';
import { ACTION, OPTIONS } from './ipc.ts';
import { msFigures, type MsFigures } from './report.ts';

/** How the faulted owner goes: killed (answers nothing) or draining (refuses while moving, then hands off). */
export type ShardProbeMode = 'dead' | 'moving';

/** What the probes of one channel saw. */
export interface ShardProbeResult {
  channel: string;
  /** Gap start, ms since epoch (see the module comment). */
  gapFromMs: number;
  /** Gap end: arrival of the ack that closed it, ms since epoch; null when none did by `stop()`. */
  recoveredAt: number | null;
  /** Probes that met the moving refusal (CP_ERR_CHANNEL_UNAVAILABLE). */
  refused: number;
  sent: number;
  /** Acks by code (`ok` for an intent taken). */
  acksByCode: Record<string, number>;
}

export interface ShardProbeOptions {
  bus: Bus;
  subjects: Subjects;
  /** Gateway id the probes publish as (their acks come back on its ack subject); unique to this set. */
  gateway: string;
  channels: readonly string[];
  mode: ShardProbeMode;
  /** Interval between one channel's probes, ms (≤ 100 for the recovery's resolution). */
  intervalMs: number;
  /** Viewer id of the probe of channel index `i` (the game records its intents' arrival). */
  viewerOf: (i: number) => string;
}

interface Probe extends ShardProbeResult {
  /** Send time of the probe whose ack was the first refusal, ms (moving mode); null: none yet. */
  refusedSentAt: number | null;
  /** Send time of the newest probe taken before any refusal, ms (moving mode). */
  lastTakenSentAt: number | null;
  done: boolean;
}

const MOVING = 'CP_ERR_CHANNEL_UNAVAILABLE';

/** A set of shard-level probes for one fault. */
export class ShardProbeSet {
  private readonly probes: Probe[];
  /** Send time of each probe, by seq. */
  private readonly sentAt = new Map<number, { i: number; at: number }>();
  private readonly sub: Subscription;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private seq = 0;
  private left: number;
  private armedAt = 0;

  /**
   * Subscribes to the probes' ack subject (call before the fault; `arm()` at it).
   * @throws BusError when the bus is closed
   */
  constructor(private readonly o: ShardProbeOptions) {
    if (!(o.intervalMs >= 10 && o.intervalMs <= 1_000)) throw new RangeError(`intervalMs must be in 10…1000, got ${o.intervalMs}`);
    this.probes = o.channels.map((channel) => ({
      channel,
      gapFromMs: 0,
      recoveredAt: null,
      refused: 0,
      sent: 0,
      acksByCode: {},
      refusedSentAt: null,
      lastTakenSentAt: null,
      done: false,
    }));
    this.left = this.probes.length;
    this.sub = o.bus.subscribe(o.subjects.gatewayAcks(o.gateway), (msg) => this.onAcks(decodeJson<AckBatch>(msg.data)));
  }

  /**
   * Starts probing: every channel now and every `intervalMs` until its gap closed.
   * @param atMs the fault's instant, ms since epoch (a gap starts there at the latest). @defaultValue now
   */
  arm(atMs: number = Date.now()): void {
    if (this.timer !== undefined) return;
    this.armedAt = atMs;
    for (const p of this.probes) p.gapFromMs = this.armedAt;
    this.timer = setInterval(() => this.tick(), this.o.intervalMs);
    this.tick();
  }

  /** Channels whose gap has not closed yet. */
  get pending(): number {
    return this.left;
  }

  /** Resolves once every gap closed, or at `deadline` (ms since epoch), whichever is first. */
  async settle(deadline: number): Promise<void> {
    while (this.left > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  }

  /**
   * The drained owner exited: every channel whose probes it took and never refused moved between two probes (a gap
   * under `intervalMs`): its gap counts 0 and its probing stops.
   */
  ownerGone(): void {
    for (const p of this.probes) {
      if (p.done || p.refused > 0 || p.lastTakenSentAt === null) continue;
      p.recoveredAt = p.gapFromMs;
      p.done = true;
      this.left--;
    }
  }

  /**
   * Stops probing.
   * @returns one result per channel, in `channels` order
   */
  stop(): ShardProbeResult[] {
    clearInterval(this.timer);
    this.timer = undefined;
    if (!this.stopped) this.sub.unsubscribe();
    this.stopped = true;
    return this.probes.map((p) => ({
      channel: p.channel,
      gapFromMs: p.gapFromMs,
      recoveredAt: p.recoveredAt,
      refused: p.refused,
      sent: p.sent,
      acksByCode: p.acksByCode,
    }));
  }

  private tick(): void {
    for (const [i, p] of this.probes.entries()) {
      if (p.done) continue;
      const at = Date.now();
      const seq = ++this.seq;
      this.sentAt.set(seq, { i, at });
      p.sent++;
      const batch: IntentBatch = {
        gw: this.o.gateway,
        intents: [{ conn: i, viewer: this.o.viewerOf(i), seq, action: ACTION, option: OPTIONS[0], at }],
      };
      this.o.bus.publish(this.o.subjects.channelIn(p.channel), encodeJson(batch));
    }
    if (this.left === 0) clearInterval(this.timer);
  }

  private onAcks(batch: AckBatch): void {
    const now = Date.now();
    for (const a of batch.acks) {
      const s = this.sentAt.get(a.seq);
      if (!s || s.i !== a.conn) continue;
      this.sentAt.delete(a.seq);
      const p = this.probes[s.i]!;
      const code = a.ok ? 'ok' : (a.code ?? 'no-code');
      p.acksByCode[code] = (p.acksByCode[code] ?? 0) + 1;
      if (p.done) continue;
      if (code === MOVING) {
        p.refused++;
        if (this.o.mode === 'moving' && p.refusedSentAt === null) {
          p.refusedSentAt = s.at;
          p.gapFromMs = p.lastTakenSentAt ?? this.armedAt;
        }
        continue;
      }
      if (this.o.mode === 'moving' && (p.refusedSentAt === null || s.at <= p.refusedSentAt)) {
        // Taken by the draining owner before its handoff: the gap has not opened yet.
        if (p.refusedSentAt === null) p.lastTakenSentAt = Math.max(p.lastTakenSentAt ?? 0, s.at);
        continue;
      }
      p.recoveredAt = now;
      p.done = true;
      this.left--;
    }
  }
}

/**
 * Recovery at the shard of the channels one fault moved (see the module comment): per channel the gap, ms.
 * `moveMs` is the router's declared-dead instant → the gap's end (a kill; null otherwise).
 */
export interface ShardRecoveryFigures extends MsFigures {
  /** Channels probed. */
  channels: number;
  /** Channels whose gap closed before the end. */
  recovered: number;
  /** Of those, channels that moved between two probes (no refusal seen; gap 0). */
  movedBetweenProbes: number;
  moveMs: MsFigures;
  /** Probe intents published, and acks by code over every channel. */
  probes: { sent: number; acksByCode: Record<string, number> };
  /** Up to 50 channels whose gap did not close: `channel: sent n, {acks by code}`. */
  notRecovered: string[];
}

/**
 * The figures of one fault's shard probes.
 * @param deadAtMs the router's declared-dead instant (ms since epoch), null for a drain
 */
export function shardRecoveryFigures(results: readonly ShardProbeResult[], deadAtMs: number | null): ShardRecoveryFigures {
  const gaps: number[] = [];
  const moves: number[] = [];
  const notRecovered: string[] = [];
  const acksByCode: Record<string, number> = {};
  let sent = 0;
  let between = 0;
  for (const p of results) {
    sent += p.sent;
    for (const [k, v] of Object.entries(p.acksByCode)) acksByCode[k] = (acksByCode[k] ?? 0) + v;
    if (p.recoveredAt === null) {
      if (notRecovered.length < 50) notRecovered.push(`${p.channel}: sent ${p.sent}, ${JSON.stringify(p.acksByCode)}`);
      continue;
    }
    gaps.push(Math.max(0, p.recoveredAt - p.gapFromMs));
    if (p.recoveredAt === p.gapFromMs && p.refused === 0) between++;
    if (deadAtMs !== null) moves.push(Math.max(0, p.recoveredAt - deadAtMs));
  }
  return {
    ...msFigures(gaps),
    channels: results.length,
    recovered: gaps.length,
    movedBetweenProbes: between,
    moveMs: msFigures(moves),
    probes: { sent, acksByCode },
    notRecovered,
  };
}
