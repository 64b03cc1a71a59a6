/**
 * Recovery probes of the failover scenario: right after a fault, one
 * sdk-viewer per probed channel (a viewer id of its own, `fp-<fault>-<k>`)
 * sends an intent every `intervalMs` until the channel's game client has
 * received one of its intents in a batch. The probe's recovery is fault →
 * that batch's arrival at the game: the channel accepts, batches and
 * delivers again, measured per channel whatever the viewers do.
 *
 * One interval drives every probe of a set (no timer per probe); each probe
 * keeps at most `MAX_IN_FLIGHT` acts unanswered (acts to a dead owner are
 * never answered: they time out after `ackTimeoutMs`).
 */
import WebSocket from 'ws';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import { isCrowdplayError } from '@crowdplay/protocol';
import { ACTION, OPTIONS } from './ipc.ts';

/** Viewer ids of probes start with this (the game clients record their intents' first arrival). */
export const PROBE_PREFIX = 'fp-';

/** Unanswered acts one probe may have at once. */
const MAX_IN_FLIGHT = 4;

/** The probe viewer id of channel index `k` for fault `fault` (kill, drain, router…). */
export const probeViewerId = (fault: string, k: number): string => `${PROBE_PREFIX}${fault}-${k}`;

/** What one probe saw. */
export interface ProbeResult {
  channel: string;
  viewer: string;
  /** First arrival of one of its intents at the game, ms since epoch; null when none arrived by `stop()`. */
  arrivedAt: number | null;
  /** First accepted ack, ms since epoch (null: none). */
  firstAckAt: number | null;
  sent: number;
  acked: number;
  /** Refusals and rejections by code (CP_ERR_INTENT_NO_OWNER, CP_ERR_CLIENT_REQUEST_TIMEOUT…). */
  failedByCode: Record<string, number>;
}

export interface ProbeSetOptions {
  /** Gateway URL of each probe (by position in `channels`). */
  urlOf: (i: number) => string;
  channels: string[];
  /** Probe viewer ids, same positions. */
  viewers: string[];
  /** Viewer tokens, same positions. */
  tokens: string[];
  /** First arrival at the game of an intent of `viewer` on `channel` (ms since epoch), or undefined. */
  arrivalOf: (channel: string, viewer: string) => number | undefined;
  /** Interval between one probe's intents, ms (≤ 100 for the recovery's resolution). */
  intervalMs: number;
  ackTimeoutMs: number;
  /** Source address of the probes' sockets (outside the viewers' so that their connection budget is their own). */
  localAddress?: string;
}

interface Probe extends ProbeResult {
  client: ViewerClient;
  inFlight: number;
  done: boolean;
}

function bump(map: Record<string, number>, key: string): void {
  map[key] = (map[key] ?? 0) + 1;
}

/** A set of probes started together (one fault). */
export class ProbeSet {
  private readonly probes: Probe[];
  private timer: NodeJS.Timeout | undefined;
  private left: number;

  /**
   * Opens every probe's socket (reconnecting with jittered backoff); `arm()` starts sending.
   * @throws CrowdplayError CP_ERR_CONFIG_INVALID when a channel or URL is invalid (from the SDK)
   */
  constructor(private readonly o: ProbeSetOptions) {
    this.probes = o.channels.map((channel, i) => {
      const p: Probe = {
        channel,
        viewer: o.viewers[i]!,
        client: null as unknown as ViewerClient,
        inFlight: 0,
        done: false,
        arrivedAt: null,
        firstAckAt: null,
        sent: 0,
        acked: 0,
        failedByCode: {},
      };
      p.client = this.open(p, i);
      return p;
    });
    this.left = this.probes.length;
  }

  /** A probe's socket: reconnects by itself; one that ends for good (a fatal close code) is replaced at the next tick. */
  private open(p: Probe, i: number): ViewerClient {
    const client = new ViewerClient({
      url: this.o.urlOf(i),
      channel: p.channel,
      token: this.o.tokens[i]!,
      WebSocket,
      autoReconnect: true,
      backoff: { initialMs: 100, maxMs: 1_000 },
      // Long: a probe that gives up on a slow welcome starts over at the back of the gateway's queue.
      welcomeDeadlineMs: 30_000,
      closeDeadlineMs: 2_000,
      ackTimeoutMs: this.o.ackTimeoutMs,
      wsOptions: { perMessageDeflate: false, ...(this.o.localAddress ? { localAddress: this.o.localAddress } : {}) },
    });
    client.on('error', () => undefined); // counted from the acts' outcomes and the closes
    client.on('close', (code) => {
      if (!p.done) bump(p.failedByCode, `close ${code}`);
    });
    client.connect().catch(() => undefined); // ends only on close() or a fatal close code
    return client;
  }

  /** Resolves once every probe's socket is open, or at `deadline` (ms since epoch). */
  async welcomed(deadline: number): Promise<void> {
    while (Date.now() < deadline && this.probes.some((p) => p.client.state !== 'open')) await new Promise((r) => setTimeout(r, 100));
  }

  /** Starts sending: every probe acts now and every `intervalMs` until its intent reached the game. */
  arm(): void {
    if (this.timer !== undefined || this.left === 0) return;
    this.timer = setInterval(() => this.tick(), this.o.intervalMs);
    this.tick();
  }

  /** Probes whose socket is open (welcomed) now. */
  get welcomedNow(): number {
    return this.probes.filter((p) => p.client.state === 'open').length;
  }

  /** Probes whose intent has not reached the game yet. */
  get pending(): number {
    return this.left;
  }

  private tick(): void {
    for (const [i, p] of this.probes.entries()) {
      if (p.done) continue;
      if (p.client.state === 'closed') {
        bump(p.failedByCode, 'reopened');
        p.client = this.open(p, i);
      }
      const at = this.o.arrivalOf(p.channel, p.viewer);
      if (at !== undefined) {
        p.arrivedAt = at;
        this.finish(p);
        continue;
      }
      if (p.client.state !== 'open' || p.inFlight >= MAX_IN_FLIGHT) continue;
      p.sent++;
      p.inFlight++;
      const client = p.client;
      client.act(ACTION, OPTIONS[0]).then(
        (ack) => {
          p.inFlight--;
          if (ack.ok) {
            p.acked++;
            p.firstAckAt ??= Date.now();
          } else bump(p.failedByCode, ack.code ?? 'no-code');
          this.closeIfDone(p, client);
        },
        (err: unknown) => {
          p.inFlight--;
          bump(p.failedByCode, isCrowdplayError(err) ? err.code : 'unknown');
          this.closeIfDone(p, client);
        },
      );
    }
    if (this.left === 0) clearInterval(this.timer);
  }

  /**
   * The probe's intent reached the game: it stops sending, and its socket closes once its acts in flight are
   * answered (a batch can reach the game before the ack reaches the probe; closing first would refuse that ack).
   */
  private finish(p: Probe): void {
    p.done = true;
    this.left--;
    this.closeIfDone(p, p.client);
  }

  private closeIfDone(p: Probe, client: ViewerClient): void {
    if (p.done && (p.inFlight === 0 || client !== p.client)) void client.close().catch(() => undefined);
  }

  /** Resolves once every probe's intent reached the game, or at `deadline` (ms since epoch), whichever is first. */
  async settle(deadline: number): Promise<void> {
    while (this.left > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
  }

  /**
   * Stops every probe (a last look at the game's arrivals first) and closes its socket.
   * @returns one result per probe, in `channels` order
   */
  async stop(): Promise<ProbeResult[]> {
    clearInterval(this.timer);
    for (const [i, p] of this.probes.entries()) {
      if (p.done) continue;
      if (p.client.state === 'closed') {
        bump(p.failedByCode, 'reopened');
        p.client = this.open(p, i);
      }
      const at = this.o.arrivalOf(p.channel, p.viewer);
      if (at !== undefined) p.arrivedAt = at;
      this.finish(p);
    }
    await Promise.all(this.probes.map((p) => p.client.close().catch(() => undefined)));
    return this.probes.map(({ channel, viewer, arrivedAt, firstAckAt, sent, acked, failedByCode }) => ({
      channel,
      viewer,
      arrivedAt,
      firstAckAt,
      sent,
      acked,
      failedByCode,
    }));
  }
}
