/**
 * The players of the chat-rounds scenario: one Mini App socket per player
 * (signed initData naming its chat), which waits for the chat's round to
 * open and its welcome grant, then stakes (pool) or buys and cashes half
 * out (market); once every player of a chat is answered, the chat's first
 * player solves the word in one guess, which makes the game settle the
 * round; every player then waits for its `roundResult`.
 */
import WebSocket from 'ws';
import { newHistogram, recordUs, type Histogram } from '../hist.ts';

/** Welcome, round-open and result deadlines, ms. */
export const WAIT_MS = 30_000;

/** One player to run. */
export interface RoundPlayerSpec {
  chat: number;
  /** Index among its chat's players (player 0 solves the word). */
  index: number;
  userId: number;
  initData: string;
  localAddress: string;
}

/** What one player got back. */
export interface PlayerResult {
  /** Points put in and got back (the server's roundResult), or null when none came. */
  result: { state: string; winner?: string; staked: number; paid: number; net: number } | null;
  /** The last balance the server reported (after the result's payouts when one came). */
  balance: number | null;
  /** The welcome grant's balance. */
  granted: number | null;
}

/** One chat's shared state: players answered, the last update a socket saw. */
export interface ChatState {
  /** Players whose trades are answered (or who gave up): at `players`, player 0 solves. */
  answered: number;
  /** Player 0 sent the answer. */
  solved: boolean;
  /** The newest `update` frame seen in the chat (game and rounds), by event id. */
  last: { ev: number; game: unknown; rounds: unknown[] } | null;
  wake: Array<() => void>;
  results: PlayerResult[];
}

/** Counters of the whole crowd. */
export class RoundCrowdStats {
  connected = 0;
  connectFailed = 0;
  connectFailedByCode: Record<string, number> = {};
  tradesSent = 0;
  tradesAcked = 0;
  tradesRefused = 0;
  refusedByCode: Record<string, number> = {};
  failed = 0;
  failedByCode: Record<string, number> = {};
  results = 0;
  readonly tradeUs: Histogram = newHistogram();
}

const bump = (m: Record<string, number>, k: string): void => void (m[k] = (m[k] ?? 0) + 1);

export interface RoundCrowdOptions {
  wsBase: string;
  kind: 'pool' | 'market';
  /** The puzzle's answer (player 0's one guess). */
  answer: string;
  /** Players per chat. */
  players: number;
  connectConcurrency: number;
  chats: ChatState[];
  stats: RoundCrowdStats;
}

/** Runs every player to the end. Never rejects; every outcome is counted in `o.stats`. */
export async function runRoundPlayers(specs: readonly RoundPlayerSpec[], o: RoundCrowdOptions): Promise<void> {
  let free = o.connectConcurrency;
  const waiting: Array<() => void> = [];
  const gate = {
    take: async (): Promise<void> => {
      if (free > 0) free--;
      else await new Promise<void>((r) => waiting.push(r));
    },
    give: (): void => {
      const next = waiting.shift();
      if (next) next();
      else free++;
    },
  };
  await Promise.all(specs.map((s) => runPlayer(s, o, gate)));
}

/** A socket's frames, waited on by predicate. */
class Frames {
  readonly all: Array<Record<string, unknown>> = [];
  closed: string | null = null;
  private wake: Array<() => void> = [];
  push(f: Record<string, unknown>): void {
    this.all.push(f);
    this.notify();
  }
  close(why: string): void {
    this.closed ??= why;
    this.notify();
  }
  private notify(): void {
    const w = this.wake;
    this.wake = [];
    for (const f of w) f();
  }
  /** The first frame from `from` on matching `pred`, or the reason there was none (closed, timeout). */
  async next(pred: (f: Record<string, unknown>) => boolean, ms = WAIT_MS, from = 0): Promise<Record<string, unknown> | string> {
    const deadline = Date.now() + ms;
    for (;;) {
      const f = this.all.slice(from).find(pred);
      if (f) return f;
      if (this.closed) return this.closed;
      if (Date.now() > deadline) return 'timeout';
      await new Promise<void>((r) => {
        this.wake.push(r);
        setTimeout(r, 100);
      });
    }
  }
}

async function runPlayer(s: RoundPlayerSpec, o: RoundCrowdOptions, gate: { take(): Promise<void>; give(): void }): Promise<void> {
  const st = o.stats;
  const chat = o.chats[s.chat]!;
  const res: PlayerResult = { result: null, balance: null, granted: null };
  chat.results.push(res);
  await gate.take();
  const frames = new Frames();
  const ws = new WebSocket(`${o.wsBase}/v1/ws?role=crowd&initData=${encodeURIComponent(s.initData)}`, { localAddress: s.localAddress });
  ws.on('message', (d: Buffer) => {
    let f: Record<string, unknown>;
    try {
      f = JSON.parse(d.toString()) as Record<string, unknown>;
    } catch {
      return;
    }
    if (f.t === 'update' && typeof f.ev === 'number' && (chat.last === null || f.ev > chat.last.ev))
      chat.last = { ev: f.ev, game: f.game, rounds: Array.isArray(f.rounds) ? (f.rounds as unknown[]) : [] };
    if (f.t === 'balance' && typeof f.points === 'number') res.balance = f.points;
    if (f.t === 'ack' && typeof f.balance === 'number') res.balance = f.balance;
    frames.push(f);
  });
  ws.on('error', (err) => frames.close(`socket error: ${err.message}`));
  ws.on('close', (code) => frames.close(`closed ${code}`));
  const welcome = await frames.next((f) => f.t === 'welcome' || f.t === 'error', 15_000);
  gate.give();
  const fail = (why: string): void => {
    st.failed++;
    bump(st.failedByCode, why);
  };
  const answered = (): void => {
    if (++chat.answered === o.players) for (const w of chat.wake.splice(0)) w();
  };
  try {
    if (typeof welcome === 'string' || welcome.t !== 'welcome') {
      st.connectFailed++;
      bump(st.connectFailedByCode, typeof welcome === 'string' ? welcome : String(welcome.code));
      answered();
      return;
    }
    st.connected++;
    const open = await frames.next((f) => f.t === 'update' && openRound(f) !== null);
    const grant = await frames.next((f) => f.t === 'balance' && f.reason === 'welcome');
    if (typeof grant !== 'string') res.granted = grant.points as number;
    if (typeof open === 'string' || typeof grant === 'string') {
      fail(`no open round or welcome grant: ${typeof open === 'string' ? open : String(grant)}`);
      answered();
      return;
    }
    const round = openRound(open)!;
    let seq = 0;
    const trade = async (frame: Record<string, unknown>): Promise<Record<string, unknown> | null> => {
      const n = ++seq;
      const t0 = performance.now();
      ws.send(JSON.stringify({ ...frame, seq: n }));
      st.tradesSent++;
      const ack = await frames.next((f) => f.t === 'ack' && f.seq === n, 10_000);
      if (typeof ack === 'string') {
        fail(`trade: ${ack}`);
        return null;
      }
      recordUs(st.tradeUs, (performance.now() - t0) * 1000);
      if (ack.ok !== true) {
        st.tradesRefused++;
        bump(st.refusedByCode, String(ack.code));
        return null;
      }
      st.tradesAcked++;
      return ack;
    };
    const outcome = s.index % 3 === 2 ? 'no' : 'yes';
    if (o.kind === 'pool') await trade({ t: 'stake', round, outcome, points: 10 + s.index });
    else {
      const buy = await trade({ t: 'buy', round, outcome, budget: 20 });
      const held = typeof buy?.position === 'number' ? buy.position : 0;
      if (held >= 2) await trade({ t: 'sell', round, outcome, shares: Math.floor(held / 2), minProceeds: 0 });
    }
    answered();
    if (s.index === 0) {
      if (chat.answered < o.players) await new Promise<void>((r) => chat.wake.push(r));
      chat.solved = true;
      ws.send(JSON.stringify({ t: 'guess', seq: ++seq, word: o.answer }));
      const g = await frames.next((f) => f.t === 'ack' && f.seq === seq, 10_000);
      if (typeof g === 'string' || g.solved !== true) fail(`the solving guess: ${typeof g === 'string' ? g : String(g.code)}`);
    }
    const r = await frames.next((f) => f.t === 'roundResult' && f.round === round, 60_000);
    if (typeof r === 'string') return fail(`no roundResult: ${r}`);
    st.results++;
    res.result = {
      state: String(r.state),
      winner: r.winner as string | undefined,
      staked: Number(r.staked),
      paid: Number(r.paid),
      net: Number(r.net),
    };
    // The payout's balance frame follows the result (a loser's balance does not move).
    if (res.result.paid > 0) await frames.next((f) => f.t === 'balance' && f.round === round, 10_000, frames.all.indexOf(r));
    // Player 0 stays a little: the chat's last update (the settled round) reaches `chat.last`.
    if (s.index === 0) await frames.next((f) => f.t === 'update' && settledRound(f, round), 10_000);
  } finally {
    ws.close();
  }
}

function roundsOf(f: Record<string, unknown>): Array<{ id: string; state: string }> {
  return Array.isArray(f.rounds) ? (f.rounds as Array<{ id: string; state: string }>) : [];
}

/** The id of the puzzle's open round in an update, or null. */
function openRound(f: Record<string, unknown>): string | null {
  return roundsOf(f).find((r) => r.id.startsWith('puzzle-') && r.state === 'open')?.id ?? null;
}

function settledRound(f: Record<string, unknown>, id: string): boolean {
  return roundsOf(f).some((r) => r.id === id && (r.state === 'settled' || r.state === 'cancelled'));
}
