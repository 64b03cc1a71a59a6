/**
 * The failover scenario's game side: one sdk-game client per channel (in
 * the coordinator's process), declaring the free `vote` action with
 * maxPerTick above the offered load and a welcome grant, running pool rounds
 * one after another (open, settle after the deadline, retried through moves
 * and reconnects), and recording every batch it receives: per channel, the
 * event ids in arrival order (duplicates, non-monotonic ids), when each id
 * arrived, the intents counted per viewer and option (intentsLost), and
 * the first arrival of each probe's intent (probe.ts: recovery).
 *
 * A game whose connect fails (a fatal close, or no welcome before the
 * harness's deadline) is not fatal to the run: `connect` retries with a new
 * client after a jittered backoff until the deadline and reports false when
 * the game never got in.
 */
import { GameClient } from '@crowdplay/sdk-game';
import { isCrowdplayError, type Batch } from '@crowdplay/protocol';
import { ACTION, OPTIONS } from './ipc.ts';
import { PROBE_PREFIX } from './probe.ts';

/** The outcomes of every round. */
export const ROUND_OUTCOMES = ['x', 'y'] as const;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A round the game opened, and how it ended as the game saw it. */
export interface GameRound {
  channel: string;
  id: string;
  /** `settled` / `final` (already settled or cancelled: CP_ERR_ROUND_ALREADY_FINAL) / `open` (never settled by the game). */
  end: 'settled' | 'final' | 'open';
}

/** What one channel's game client saw. */
export class ChannelGame {
  /** The current client (replaced by `connect` after a failed attempt). */
  client: GameClient;
  /** Welcomed at least once. */
  connected = false;
  /** Connect attempts that failed (the client ended before a welcome), by error code. */
  readonly connectFailedByCode: Record<string, number> = {};
  /** First arrival of an intent of each probe viewer (probe.ts), ms since epoch. */
  readonly probeArrivals = new Map<string, number>();
  /** Batch event ids in arrival order. */
  readonly evs: number[] = [];
  /** First arrival of each event id, ms since epoch. */
  readonly arrivedAt = new Map<number, number>();
  duplicates = 0;
  nonMonotonic = 0;
  /** Intents listed in first-seen batches, per viewer id and option index. */
  readonly counted = new Map<string, number[]>();
  intents = 0;
  /** Σ tally − Σ listed intents over first-seen batches (intents over maxPerTick: tallied, not listed). */
  dropped = 0;
  resyncs = 0;
  welcomes = 0;
  errors: Record<string, number> = {};
  /** Socket closes by close code (also the ones followed by a reconnect). */
  readonly closesByCode: Record<string, number> = {};
  /** The newest batch arrival, ms since epoch (null before the first). */
  lastArrivalAt: number | null = null;
  readonly rounds: GameRound[] = [];
  private maxEv = -1;
  private running = true;
  private loop: Promise<void> | null = null;

  constructor(
    readonly channel: string,
    private readonly url: string,
    private readonly apiKey: string,
    private readonly o: { welcomeGrant: number; roundMs: number; welcomeDeadlineMs: number },
  ) {
    this.client = this.newClient();
  }

  private newClient(): GameClient {
    const client = new GameClient({
      url: this.url,
      channel: this.channel,
      apiKey: this.apiKey,
      backoff: { initialMs: 250, maxMs: 2_000 },
      welcomeDeadlineMs: this.o.welcomeDeadlineMs,
      requestTimeoutMs: 5_000,
    });
    client.on('batch', (b, info) => this.onBatch(b, info.receivedAtMs));
    client.on('welcome', () => {
      this.welcomes++;
      this.connected = true;
    });
    client.on('resync', () => this.resyncs++);
    client.on('error', (e) => (this.errors[e.code] = (this.errors[e.code] ?? 0) + 1));
    client.on('close', (code) => (this.closesByCode[code] = (this.closesByCode[code] ?? 0) + 1));
    client.declare([{ name: ACTION, options: [...OPTIONS], maxPerTick: 100_000 }], { welcomeGrant: this.o.welcomeGrant });
    return client;
  }

  /**
   * Connects, retrying until `deadline`: the client retries refused sockets and missed welcomes itself (jittered
   * backoff); when it ends without a welcome (a fatal close code, or CP_ERR_CLIENT_NOT_OPEN) a new client is made
   * after a jittered backoff (full jitter, 250 ms doubling to 4 s).
   * @param deadline ms since epoch
   * @param late resolves at the deadline (one shared timer for every game)
   * @returns true once welcomed; false when the deadline passed first (the client is closed then)
   */
  async connect(deadline: number, late: Promise<void>): Promise<boolean> {
    for (let attempt = 0; ; attempt++) {
      const p = this.client.connect();
      const r = await Promise.race([
        p.then(
          () => true,
          (err: unknown) => err,
        ),
        late.then(() => false),
      ]);
      if (r === true) return true;
      if (r !== false) {
        const code = isCrowdplayError(r) ? r.code : r instanceof Error ? r.name : 'unknown';
        this.connectFailedByCode[code] = (this.connectFailedByCode[code] ?? 0) + 1;
      }
      await this.client.close().catch(() => undefined);
      if (r === false || Date.now() >= deadline) return false;
      await Promise.race([sleep(Math.random() * Math.min(4_000, 250 * 2 ** attempt)), late]);
      if (Date.now() >= deadline) return false;
      this.client = this.newClient();
    }
  }

  private onBatch(b: Batch, at: number): void {
    this.evs.push(b.ev);
    if (this.arrivedAt.has(b.ev)) {
      this.duplicates++;
      return;
    }
    this.arrivedAt.set(b.ev, at);
    this.lastArrivalAt = at;
    if (b.ev < this.maxEv) this.nonMonotonic++;
    else this.maxEv = b.ev;
    const a = b.actions[ACTION];
    if (!a) return;
    let tallied = 0;
    for (const n of Object.values(a.tally)) tallied += n;
    this.dropped += tallied - a.intents.length;
    for (const it of a.intents) {
      if (it.viewer.startsWith(PROBE_PREFIX) && !this.probeArrivals.has(it.viewer)) this.probeArrivals.set(it.viewer, at);
      const k = OPTIONS.indexOf(it.option as (typeof OPTIONS)[number]);
      if (k < 0) continue;
      let row = this.counted.get(it.viewer);
      if (!row) this.counted.set(it.viewer, (row = [0, 0, 0]));
      row[k]!++;
      this.intents++;
    }
  }

  /** Starts the round loop: open a pool round, settle it after its deadline, repeat until `stopRounds`. */
  startRounds(): void {
    this.loop ??= this.roundLoop();
  }

  /** No new round; resolves when the current one is settled (or given up after `deadlineMs`). */
  async stopRounds(deadlineMs: number): Promise<void> {
    this.running = false;
    if (this.loop) await Promise.race([this.loop, sleep(deadlineMs)]);
  }

  private async roundLoop(): Promise<void> {
    for (let n = 1; this.running; n++) {
      const id = `r${n}`;
      const round: GameRound = { channel: this.channel, id, end: 'open' };
      let deadline: number | null = null;
      while (this.running && deadline === null) {
        try {
          deadline = (await this.client.openRound({ round: id, kind: 'pool', outcomes: [...ROUND_OUTCOMES], durationMs: this.o.roundMs }))
            .deadline;
        } catch (err) {
          if (isCrowdplayError(err, 'CP_ERR_ROUND_EXISTS'))
            deadline = Date.now() + this.o.roundMs; // an earlier try opened it
          else await sleep(300);
        }
      }
      if (deadline === null) return;
      this.rounds.push(round);
      await sleep(Math.max(0, deadline - Date.now()) + 300);
      const winner = ROUND_OUTCOMES[n % ROUND_OUTCOMES.length]!;
      // Settled through moves and reconnects: retried until the server says it is final (the loop ends only then).
      for (;;) {
        try {
          await this.client.settleRound(id, winner);
          round.end = 'settled';
          break;
        } catch (err) {
          if (isCrowdplayError(err, 'CP_ERR_ROUND_ALREADY_FINAL')) {
            round.end = 'final';
            break;
          }
          if (this.client.state === 'closed') return;
          await sleep(300);
        }
      }
      if (this.running) await sleep(300);
    }
  }

  /** One line on the client's life for a report sample: its state now, welcomes, closes by code, the last batch's arrival (ms after `t0`). */
  describe(t0: number): string {
    const last = this.lastArrivalAt === null ? '–' : `+${this.lastArrivalAt - t0} ms`;
    return `game ${this.client.state}, ${this.welcomes} welcomes, closes ${JSON.stringify(this.closesByCode)}, last batch ${last}`;
  }

  /** The first arrival of a batch with an id in `evs` (ms since epoch), or null. */
  firstArrivalOf(evs: Iterable<number>): number | null {
    let best: number | null = null;
    for (const ev of evs) {
      const t = this.arrivedAt.get(ev);
      if (t !== undefined && (best === null || t < best)) best = t;
    }
    return best;
  }
}
