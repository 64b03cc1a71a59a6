/**
 * The `multigame` scenario's game process (forked by scenario.ts): one MultiGameClient attached to every Telegram
 * chat of the tenant over one connection. It declares one action for all chats, answers every chat's batches with
 * that chat's state, opens a round in every `roundEvery`-th chat and settles each when it locks. Its own CPU
 * (process.cpuUsage) and RSS are what the scenario reports per chat, measured over the window the parent names.
 *
 * IPC: parent → `{t:'measure'}` (start of the window), `{t:'stop'}`; child → `{t:'ready', attached, refused, rssMb}`,
 * `{t:'figures', …GameFigures}`, `{t:'fatal', stack}`.
 */
import { MultiGameClient } from '@crowdplay/sdk-game';
import { guardWorker, sendToParent } from '../fork.ts';

/** What the game process measured over the window (README "multigame"). */
export interface GameFigures {
  chats: number;
  windowMs: number;
  /** User + system CPU of the game process over the window, ms. */
  cpuMs: number;
  /** RSS at the end of the window, and right after the welcome (before any chat was attached), MiB. */
  rssMb: number;
  rssBeforeAttachMb: number;
  /** V8 heap in use after a full GC at the end of the window, and after the welcome, MiB. */
  heapUsedMb: number;
  heapBeforeAttachMb: number;
  /** Batches received over the window, and the chats that had at least one. */
  batches: number;
  chatsWithBatches: number;
  /** `state` frames sent (one per batch: each chat answered with its own state). */
  statesSent: number;
  roundsOpened: number;
  roundsSettled: number;
  /** Error frames and failed requests, by code. */
  errors: Record<string, number>;
}

const [url = '', apiKey = '', roundEveryArg = '10', roundMsArg = '4000'] = process.argv.slice(2);
const roundEvery = Number(roundEveryArg);
const roundMs = Number(roundMsArg);
const mib = (b: number): number => Math.round((b / 1_048_576) * 10) / 10;

guardWorker((stack) => ({ t: 'fatal', stack }));

const errors: Record<string, number> = {};
const countError = (code: string): void => void (errors[code] = (errors[code] ?? 0) + 1);
const game = new MultiGameClient({ url, apiKey, chats: true, requestTimeoutMs: 30_000 });
game.on('error', (err) => countError(err.code));
game.declare([{ name: 'vote', maxPerTick: 100, options: ['a', 'b'] }]);

let measuring = false;
let batches = 0;
let statesSent = 0;
let roundsOpened = 0;
let roundsSettled = 0;
const seen = new Set<string>();
const totals = new Map<string, { a: number; b: number }>();
let roundSeq = 0;

game.on('batch', (b) => {
  const t = totals.get(b.channel) ?? { a: 0, b: 0 };
  t.a += b.actions.vote?.tally.a ?? 0;
  t.b += b.actions.vote?.tally.b ?? 0;
  totals.set(b.channel, t);
  game.setState(b.channel, { a: t.a, b: t.b });
  if (!measuring) return;
  batches++;
  statesSent++;
  seen.add(b.channel);
});
game.on('round', (channel, round) => {
  if (round.state !== 'locked') return;
  const t = totals.get(channel) ?? { a: 0, b: 0 };
  game.settleRound(channel, round.id, t.a >= t.b ? 'a' : 'b').then(
    () => void (measuring && roundsSettled++),
    (err: { code?: string }) => countError(err.code ?? 'settle'),
  );
});

/** Opens a round in every `roundEvery`-th attached chat (a fresh id each time). */
function openRounds(): void {
  const chats = game.attached;
  roundSeq++;
  for (let i = 0; i < chats.length; i += roundEvery) {
    game.openRound({ channel: chats[i]!, round: `r${roundSeq}`, kind: 'pool', outcomes: ['a', 'b'], durationMs: roundMs }).then(
      () => void (measuring && roundsOpened++),
      (err: { code?: string }) => countError(err.code ?? 'open'),
    );
  }
}

/** A full GC when the process runs with --expose-gc (scenario.ts forks it so): heap figures without garbage. */
const gc = (): void => (globalThis as { gc?: () => void }).gc?.();
let before = { rss: 0, heap: 0 };
game.once('welcome', () => {
  gc();
  const m = process.memoryUsage();
  before = { rss: m.rss, heap: m.heapUsed };
});
let roundTimer: NodeJS.Timeout | null = null;
let window: { cpu: NodeJS.CpuUsage; at: number } | null = null;
game.once('attached', (channels, refused) => {
  sendToParent({ t: 'ready', attached: channels.length, refused: refused.length, rssMb: mib(process.memoryUsage().rss) });
});
process.on('message', (m: { t: string }) => {
  if (m.t === 'measure') {
    measuring = true;
    window = { cpu: process.cpuUsage(), at: performance.now() };
    openRounds();
    roundTimer = setInterval(openRounds, roundMs * 2);
  } else if (m.t === 'stop') {
    measuring = false;
    if (roundTimer) clearInterval(roundTimer);
    const cpu = process.cpuUsage(window?.cpu);
    gc();
    const mem = process.memoryUsage();
    const figures: GameFigures = {
      chats: game.attached.length,
      windowMs: Math.round(performance.now() - (window?.at ?? performance.now())),
      cpuMs: Math.round((cpu.user + cpu.system) / 1_000),
      rssMb: mib(mem.rss),
      rssBeforeAttachMb: mib(before.rss),
      heapUsedMb: mib(mem.heapUsed),
      heapBeforeAttachMb: mib(before.heap),
      batches,
      chatsWithBatches: seen.size,
      statesSent,
      roundsOpened,
      roundsSettled,
      errors,
    };
    sendToParent({ t: 'figures', ...figures }, () => void game.close().finally(() => process.exit(0)));
  }
});
game.connect().catch((err: unknown) => {
  sendToParent({ t: 'fatal', stack: String(err) }, () => process.exit(1));
});
