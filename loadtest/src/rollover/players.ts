/**
 * The players of the rollover scenario: one WebSocket per player
 * (`/v1/ws?role=crowd&initData=…`, signed initData carrying its chat's start
 * parameter), opened at the rollover through a bounded number of concurrent
 * connects, then a closed loop of guesses (think, send, wait for the ack).
 */
import WebSocket from 'ws';
import { newHistogram, recordUs, type Histogram } from '../hist.ts';
import { score } from '@crowdplay/crowd-engine';

/** Guesses a player makes at most (the puzzle's MAX_GUESSES). */
export const MAX_GUESSES = 6;
/** Welcome deadline of a connect, ms. */
export const WELCOME_TIMEOUT_MS = 15_000;

/** One player to run. */
export interface PlayerSpec {
  chat: number;
  /** ws://host:port of the gateway this player connects to (default: the run's `wsBase`). */
  wsBase?: string;
  userId: number;
  /** Display name the gateway takes from initData (first_name). */
  name: string;
  initData: string;
  /** Local source address (127.0.0.x) of the socket. */
  localAddress: string;
  /** The guesses, in order; the last one is the answer. */
  words: string[];
}

/** What one chat's players did, for the board check. */
export interface ChatOutcome {
  /** Accepted guesses' marks per player (`tg:<user id>`), in order. */
  players: Map<string, { name: string; marks: string[]; solved: boolean }>;
  /** Date.now() when the last accepted guess's ack arrived, ms; null when none. */
  lastChangeMs: number | null;
  /** Date.now() of the first accepted guess's ack, ms. */
  firstChangeMs: number | null;
  /** Date.now() of every accepted guess's ack, in arrival order, ms. */
  changesMs: number[];
  /** A guess went unanswered: the server's state of this chat is unknown. */
  unknown: boolean;
}

/** Counters of the whole crowd. */
export class CrowdStats {
  connected = 0;
  connectFailed = 0;
  connectFailedByCode: Record<string, number> = {};
  dropped = 0;
  sent = 0;
  served = 0;
  refused = 0;
  refusedByCode: Record<string, number> = {};
  failed = 0;
  failedByCode: Record<string, number> = {};
  skipped = 0;
  marksMismatches = 0;
  done = 0;
  firstOpenMs: number | null = null;
  lastAnswerMs: number | null = null;
  readonly guessUs: Histogram = newHistogram();
  readonly connectUs: Histogram = newHistogram();
}

const bump = (m: Record<string, number>, k: string): void => void (m[k] = (m[k] ?? 0) + 1);

/** A counting semaphore. */
class Gate {
  private waiting: Array<() => void> = [];
  constructor(private free: number) {}
  async take(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return;
    }
    await new Promise<void>((r) => this.waiting.push(r));
  }
  give(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.free++;
  }
}

export interface CrowdRunOptions {
  wsBase: string;
  answer: string;
  connectConcurrency: number;
  thinkMs: readonly [number, number];
  ackTimeoutMs: number;
  /** No guess is sent after this time (ms since epoch): the next rollover would score it against another answer. */
  stopSendingAtMs: number;
  chats: ChatOutcome[];
  stats: CrowdStats;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Runs every player to the end: connect (bounded), then up to six guesses in
 * a closed loop. Never rejects; every outcome is counted in `o.stats`.
 */
export async function runPlayers(specs: readonly PlayerSpec[], o: CrowdRunOptions): Promise<void> {
  const gate = new Gate(o.connectConcurrency);
  await Promise.all(specs.map((s) => runPlayer(s, o, gate)));
}

async function runPlayer(s: PlayerSpec, o: CrowdRunOptions, gate: Gate): Promise<void> {
  const st = o.stats;
  const chat = o.chats[s.chat]!;
  await gate.take();
  const t0 = performance.now();
  st.firstOpenMs ??= Date.now();
  let ws: WebSocket;
  let closedByUs = false;
  let pending: { seq: number; resolve: (f: Record<string, unknown> | string) => void } | null = null;
  try {
    ws = new WebSocket(`${s.wsBase ?? o.wsBase}/v1/ws?role=crowd&initData=${encodeURIComponent(s.initData)}`, {
      localAddress: s.localAddress,
    });
  } catch (err) {
    gate.give();
    st.connectFailed++;
    bump(st.connectFailedByCode, `socket: ${(err as Error).message}`);
    st.done++;
    return;
  }
  const welcomed = await new Promise<string | null>((resolve) => {
    const timer = setTimeout(() => resolve('welcome timeout'), WELCOME_TIMEOUT_MS);
    ws.on('message', (d: Buffer) => {
      let f: Record<string, unknown>;
      try {
        f = JSON.parse(d.toString()) as Record<string, unknown>;
      } catch {
        return;
      }
      if (f.t === 'welcome') {
        clearTimeout(timer);
        resolve(null);
      } else if (f.t === 'error' && pending === null) {
        clearTimeout(timer);
        resolve(typeof f.code === 'string' ? f.code : 'error frame');
      } else if (f.t === 'ack' && pending && f.seq === pending.seq) {
        const p = pending;
        pending = null;
        p.resolve(f);
      }
    });
    ws.on('error', (err) => {
      clearTimeout(timer);
      resolve(`socket error: ${err.message}`);
      if (pending) {
        const p = pending;
        pending = null;
        p.resolve(`socket error: ${err.message}`);
      }
    });
    ws.on('close', (code) => {
      clearTimeout(timer);
      resolve(`closed ${code}`);
      if (!closedByUs) {
        if (pending) {
          const p = pending;
          pending = null;
          p.resolve(`closed ${code}`);
        }
      }
    });
  });
  gate.give();
  if (welcomed !== null) {
    st.connectFailed++;
    bump(st.connectFailedByCode, welcomed);
    ws.terminate();
    st.done++;
    return;
  }
  recordUs(st.connectUs, (performance.now() - t0) * 1000);
  st.connected++;
  ws.on('close', () => {
    if (!closedByUs) st.dropped++;
  });
  const key = `tg:${s.userId}`;
  for (let i = 0; i < s.words.length; i++) {
    const [lo, hi] = o.thinkMs;
    await sleep(lo + Math.random() * (hi - lo));
    if (Date.now() >= o.stopSendingAtMs) {
      st.skipped += s.words.length - i;
      break;
    }
    if (ws.readyState !== WebSocket.OPEN) {
      st.failed++;
      bump(st.failedByCode, 'socket closed before the send');
      chat.unknown = true;
      break;
    }
    const word = s.words[i]!;
    const seq = i + 1;
    const sentAt = performance.now();
    const answer = new Promise<Record<string, unknown> | string>((resolve) => {
      pending = { seq, resolve };
      setTimeout(() => {
        if (pending?.seq === seq) {
          pending = null;
          resolve('timeout');
        }
      }, o.ackTimeoutMs);
    });
    ws.send(JSON.stringify({ t: 'guess', seq, word }));
    st.sent++;
    const a = await answer;
    st.lastAnswerMs = Date.now();
    if (typeof a === 'string') {
      st.failed++;
      bump(st.failedByCode, a);
      chat.unknown = true;
      break;
    }
    recordUs(st.guessUs, (performance.now() - sentAt) * 1000);
    if (a.ok !== true) {
      st.refused++;
      bump(st.refusedByCode, typeof a.code === 'string' ? a.code : 'no-code');
      break;
    }
    st.served++;
    const marks = typeof a.marks === 'string' ? a.marks : '';
    if (marks !== score(word, o.answer)) st.marksMismatches++;
    let p = chat.players.get(key);
    if (!p) chat.players.set(key, (p = { name: s.name, marks: [], solved: false }));
    p.marks.push(marks);
    p.solved = marks === 'ggggg';
    const now = Date.now();
    chat.lastChangeMs = now;
    chat.firstChangeMs ??= now;
    chat.changesMs.push(now);
    if (p.solved) break;
  }
  closedByUs = true;
  ws.close();
  st.done++;
}

/**
 * The guesses of one player: `solveAt` − 1 random dictionary words other
 * than the answer, then the answer (solveAt uniform in 2…6).
 */
export function playerWords(answer: string, pool: readonly string[], rand: () => number = Math.random): string[] {
  const solveAt = 2 + Math.floor(rand() * (MAX_GUESSES - 1));
  const out: string[] = [];
  while (out.length < solveAt - 1) {
    const w = pool[Math.floor(rand() * pool.length)]!;
    if (w !== answer) out.push(w);
  }
  out.push(answer);
  return out;
}
