/**
 * The `multigame` load scenario: one external game process serving N Telegram chats over one connection
 * (a multi-channel game socket, sdk-game's MultiGameClient). The product runs standalone as its own process on the
 * machine's PostgreSQL (a schema of its own); N chat channels of the dev tenant are created in it; the game process
 * (game.ts, forked) attaches every chat of the tenant (`chats: true`), which takes each chat over from the word
 * puzzle, and declares one action for all of them; one viewer per chat acts about once a second; the game answers
 * every batch with that chat's state and runs a round in every `roundEvery`-th chat. Reports the game process's CPU
 * and memory per chat over the steady window (README "multigame").
 */
import { randomBytes } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { defaultConfig } from '@crowdplay/config';
import { openStore } from '@crowdplay/store';
import { machineInfo } from '../crowd/scenario.ts';
import { forkTs, tsxImport, waitExit } from '../fork.ts';
import { clockTicksPerSecond, processCpuMs } from '../proc.ts';
import { dropSchema, readRss, startProduct, type Product } from '../rollover/product.ts';
import { DEFAULT_DATABASE_URL } from '../rollover/scenario.ts';
import { createTokenMinter } from '../tokens.ts';
import type { GameFigures } from './game.ts';
import type { MultigameReport } from './report.ts';

/** Most chats one run creates (one viewer socket each in this process). */
export const MAX_MULTIGAME_CHATS = 10_000;
/** Chat channel ids: `tgn<CHAT_BASE + i>` (a group chat's channel). */
const CHAT_BASE = 1_009_100_000_000;

export interface MultigameOptions {
  chats: number;
  /** Steady window, seconds. */
  durationS: number;
  /** A round in every this-many-th chat (1 = every chat). @defaultValue 10 */
  roundEvery?: number;
  databaseUrl?: string;
  onProgress?: (line: string) => void;
  command?: string;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Runs the scenario once and returns its report.
 * @throws RangeError on bad options; Error on a failed setup (the product or the game does not start)
 */
export async function runMultigameScenario(o: MultigameOptions): Promise<MultigameReport> {
  const log = o.onProgress ?? ((): void => {});
  if (!Number.isInteger(o.chats) || o.chats < 1 || o.chats > MAX_MULTIGAME_CHATS)
    throw new RangeError(`chats must be an integer in 1…${MAX_MULTIGAME_CHATS}, got ${o.chats}`);
  if (!(o.durationS > 0)) throw new RangeError(`duration must be > 0 s, got ${o.durationS}`);
  const roundEvery = o.roundEvery ?? 10;
  if (!Number.isInteger(roundEvery) || roundEvery < 1) throw new RangeError(`round-every must be a positive integer, got ${roundEvery}`);
  const databaseUrl = o.databaseUrl ?? DEFAULT_DATABASE_URL;
  const run = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
  const schema = `multigame_${run}`;
  const { tenantKey, tenantSecret } = defaultConfig().standalone;
  const chats = Array.from({ length: o.chats }, (_, i) => `tgn${CHAT_BASE + i}`);
  const warnings: string[] = [];
  let product: Product | null = null;
  let game: ChildProcess | null = null;
  const viewers: WebSocket[] = [];
  let actTimer: NodeJS.Timeout | null = null;
  try {
    log(`starting the product (schema ${schema})`);
    product = await startProduct(
      {
        DATABASE_URL: databaseUrl,
        DATABASE_SCHEMA: schema,
        NATS_URL: '',
        REDIS_URL: '',
        BUS_SUBJECT_PREFIX: schema,
        DEMO_ENABLED: 'false',
      },
      null,
    );
    const url = product.url;
    const store = await openStore({ url: databaseUrl, schema, poolMax: 2, pgliteDir: 'memory' });
    try {
      for (const ch of chats) await store.channels.ensure(ch, 'dev');
    } finally {
      await store.close();
    }
    log(`product on ${url}; ${o.chats} chats created; forking the game`);

    // The game: one process, one connection, every chat.
    const figures = new Promise<GameFigures>((resolve, reject) => {
      const child = forkTs(fileURLToPath(new URL('./game.ts', import.meta.url)), [url, tenantKey, String(roundEvery)], {
        stdio: 'inherit',
        execArgv: ['--import', tsxImport(), '--expose-gc'],
      });
      game = child;
      child.on('message', (m: { t: string; stack?: string } & Partial<GameFigures> & { attached?: number; refused?: number }) => {
        if (m.t === 'ready') {
          log(`game attached ${m.attached} chats (${m.refused} refused), RSS ${m.rssMb} MiB`);
          if (m.attached !== o.chats) warnings.push(`the game attached ${m.attached} of ${o.chats} chats`);
          readyResolve();
        } else if (m.t === 'figures') {
          const { t: _, ...fig } = m;
          resolve(fig as GameFigures);
        } else if (m.t === 'fatal') reject(new Error(`game process failed: ${m.stack}`));
      });
      child.once('exit', (code) => reject(new Error(`game process exited with ${code}`)));
    });
    let readyResolve!: () => void;
    const ready = new Promise<void>((r) => (readyResolve = r));
    await Promise.race([ready, figures, sleep(120_000).then(() => Promise.reject(new Error('the game did not attach within 120 s')))]);

    // One viewer per chat, acting about once a second.
    const minter = await createTokenMinter('dev', tenantSecret);
    const wsBase = url.replace(/^http/, 'ws');
    let acked = 0;
    let refused = 0;
    /** Chats whose viewer had an act accepted: the game's declaration reached them. */
    const playing = new Set<string>();
    const refusals: Record<string, number> = {};
    for (let i = 0; i < chats.length; i += 100) {
      await Promise.all(
        chats.slice(i, i + 100).map(async (ch, j) => {
          const token = await minter.mint(`v${i + j}`);
          const ws = new WebSocket(`${wsBase}/v1/ws?role=crowd&channel=${ch}&token=${token}`, { perMessageDeflate: false });
          viewers.push(ws);
          ws.on('message', (raw) => {
            const f = JSON.parse(String(raw)) as { t: string; ok?: boolean; code?: string };
            if (f.t !== 'ack') return;
            if (f.ok) {
              acked++;
              playing.add(ch);
            } else {
              refused++;
              refusals[f.code ?? '?'] = (refusals[f.code ?? '?'] ?? 0) + 1;
            }
          });
          ws.on('error', () => undefined);
          await new Promise<void>((resolve) => {
            ws.once('open', () => resolve());
            ws.once('error', () => resolve());
          });
        }),
      );
    }
    log(`${viewers.filter((w) => w.readyState === WebSocket.OPEN).length} viewers connected`);
    let seq = 0;
    actTimer = setInterval(() => {
      for (const ws of viewers) {
        if (ws.readyState !== WebSocket.OPEN || Math.random() > 0.25) continue; // ~1/s each at 4 turns a second
        ws.send(JSON.stringify({ t: 'act', seq: ++seq, action: 'vote', option: Math.random() < 0.5 ? 'a' : 'b' }));
      }
    }, 250);
    // The window opens once every chat plays the game (its declaration reached the chat: one ctl request each).
    const settleBy = Date.now() + 60_000;
    while (playing.size < chats.length && Date.now() < settleBy) await sleep(250);
    if (playing.size < chats.length) warnings.push(`${chats.length - playing.size} chats took no vote within 60 s`);
    log(`${playing.size} chats playing; refusals before the window ${JSON.stringify(refusals)}`);
    const refusedBefore = refused;
    for (const k of Object.keys(refusals)) delete refusals[k];

    const ticks = clockTicksPerSecond();
    const productPid = product.pids()[0]?.pid;
    const productCpu0 = productPid ? processCpuMs(productPid, ticks) : null;
    const acked0 = acked;
    const t0 = performance.now();
    (game as ChildProcess | null)?.send({ t: 'measure' });
    for (let s = 0; s < o.durationS; s += 5) {
      await sleep(Math.min(5, o.durationS - s) * 1_000);
      log(`  ${Math.round((performance.now() - t0) / 1000)} s: acks ${acked - acked0}, refused ${refused}`);
    }
    const productCpu1 = productPid ? processCpuMs(productPid, ticks) : null;
    const windowS = (performance.now() - t0) / 1_000;
    (game as ChildProcess | null)?.send({ t: 'stop' });
    const g = await figures;
    const rssProduct = productPid ? readRss(productPid) : null;
    if (g.chatsWithBatches < o.chats) warnings.push(`${o.chats - g.chatsWithBatches} chats had no batch in the window`);
    const perChat = (x: number): number => Math.round((x / Math.max(1, g.chats)) * 1_000) / 1_000;
    return {
      scenario: 'multigame',
      command: o.command ?? '',
      machine: machineInfo(),
      chats: o.chats,
      durationS: Math.round(windowS * 10) / 10,
      roundEvery,
      game: {
        ...g,
        cpuPct: Math.round((g.cpuMs / g.windowMs) * 1_000) / 10,
        cpuMsPerChatPerS: perChat(g.cpuMs / (g.windowMs / 1_000)),
        rssKbPerChat: Math.round(((g.rssMb - g.rssBeforeAttachMb) * 1_024) / Math.max(1, g.chats)),
        heapKbPerChat: Math.round(((g.heapUsedMb - g.heapBeforeAttachMb) * 1_024 * 10) / Math.max(1, g.chats)) / 10,
        batchesPerS: Math.round(g.batches / (g.windowMs / 1_000)),
      },
      viewers: { connected: viewers.length, acksPerS: Math.round((acked - acked0) / windowS), refused: refused - refusedBefore, refusals },
      product: {
        cpuPct:
          productCpu0 !== null && productCpu1 !== null ? Math.round(((productCpu1 - productCpu0) / (windowS * 1_000)) * 1_000) / 10 : null,
        rssMb: rssProduct ? Math.round(rssProduct.rssMb) : null,
      },
      warnings,
    };
  } finally {
    if (actTimer) clearInterval(actTimer);
    for (const ws of viewers) ws.terminate();
    const child = game as ChildProcess | null;
    if (child) {
      child.kill('SIGTERM');
      await waitExit(child, 5_000);
    }
    await product?.stop();
    await dropSchema(databaseUrl, schema).catch(() => undefined);
  }
}
