/**
 * `npm run bench -- render [--json FILE] [--iterations 20] [--warmup 5] [--fit] [--explore] [--memory]`
 *
 * One render on one thread (this one), drawing and PNG encoding included,
 * p50 of `--iterations` after `--warmup` renders, for the 4-, 10- and 40-card
 * sample boards (src/sample.ts: names in eight scripts, half the cards with a
 * 160 × 160 JPEG avatar, guesses at every stage), at the geometry of
 * src/layout.ts (docs/board.md). Also, for comparison, the same boards through
 * @napi-rs/canvas's own `encode('png')`.
 *
 * `--fit` measures 1–64 cards and fits the cost model's lines (src/cost.ts
 * holds the fitted numbers; the report shows model vs measured).
 * `--explore` measures encoder settings (mode, filter, level) on the 40-card board.
 * `--memory` measures only memory (run it in its own process): the resident memory added by
 * a RenderPool of 1 and of 3 threads (idle, and at peak rendering 60 / 120 40-card boards; and 600 queued at once on 1 thread),
 * then of canvases in flight (10 at once on this thread, drawn and encoded,
 * at 1000 × 1400 and at the 40-card size), and the memory 3,000 avatar
 * thumbnails add to a pool of 2 threads. Run with `NODE_OPTIONS=--expose-gc`
 * so each baseline is taken after a collection (the timings use it too: a
 * minor collection every 8 MiB of pixels read back, untimed, as worker.ts does).
 *
 * Targets: ≤ 10 ms for 4 cards; ≤ 60 ms and ≤ 100 KB for 40 cards. Exit code 0 either way (the table says which were met).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, totalmem } from 'node:os';
import { dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { createCanvas } from '@napi-rs/canvas';
import { RENDER_COST_MODEL, fitLine, renderCost } from '../src/cost.ts';
import { layout } from '../src/layout.ts';
import { BOARD_PNG_OPTIONS, encodePng, type PngOptions } from '../src/png.ts';
import { RenderPool } from '../src/pool.ts';
import { drawBoard, releaseThreadCaches, renderBoard, warmUpFonts, type RenderOptions } from '../src/render.ts';
import { sampleAvatar, sampleBoard } from '../src/sample.ts';

const CARDS = [4, 10, 40] as const;
const FIT_CARDS = [1, 2, 4, 6, 8, 10, 12, 16, 20, 24, 30, 36, 40, 48, 56, 64] as const;
const TARGETS = { ms4: 10, ms40: 60, bytes40: 100_000 } as const;

/** One row of the report. */
export interface RenderBenchRow {
  readonly cards: number;
  readonly width: number;
  readonly height: number;
  /** p50 of one render (draw + encode), ms. */
  readonly ms: number;
  readonly bytes: number;
  readonly drawMs: number;
  readonly encodeMs: number;
  readonly p90Ms: number;
  /** p50 with the thread's caches dropped before each render (avatars decoded, names fitted, canvas allocated again), ms. */
  readonly coldMs: number;
  /** The same board through @napi-rs/canvas `encode('png')`: p50 ms and bytes. */
  readonly skiaMs: number;
  readonly skiaBytes: number;
  /** What src/cost.ts predicts. */
  readonly modelMs: number;
  readonly modelBytes: number;
}

const p = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * q))]!;
};
const r1 = (x: number): number => Math.round(x * 10) / 10;

function measure(cards: number, iterations: number, warmup: number, opts: RenderOptions = {}, cold = false) {
  const board = sampleBoard(cards);
  for (let i = 0; i < warmup; i++) renderBoard(board, opts);
  const ms: number[] = [];
  const draw: number[] = [];
  const enc: number[] = [];
  let bytes = 0;
  let width = 0;
  let height = 0;
  let readBack = 0;
  for (let i = 0; i < iterations; i++) {
    if (cold) releaseThreadCaches();
    const t0 = performance.now();
    const r = renderBoard(board, opts);
    ms.push(performance.now() - t0);
    // As a render thread does (worker.ts), untimed: a minor collection every 8 MiB of pixels read back.
    readBack += r.width * r.height * 4;
    if (readBack >= 8 * 2 ** 20) {
      readBack = 0;
      minorGc();
    }
    draw.push(r.drawMs);
    enc.push(r.encodeMs);
    bytes = r.png.length;
    width = r.width;
    height = r.height;
  }
  return { ms: p(ms, 0.5), p90: p(ms, 0.9), drawMs: p(draw, 0.5), encodeMs: p(enc, 0.5), bytes, width, height };
}

function rssMb(): number {
  return process.memoryUsage().rss / 2 ** 20;
}

/** RSS growth per canvas with `n` drawn-and-encoded canvases of w × h alive at once on this thread (MiB). */
function gc(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

function minorGc(): void {
  (globalThis as { gc?: (o: { type: 'minor' }) => void }).gc?.({ type: 'minor' });
}

function canvasesInFlight(n: number, w: number, h: number, encoder: 'board' | 'skia'): number {
  gc();
  const before = rssMb();
  const keep: unknown[] = [];
  for (let i = 0; i < n; i++) {
    const c = createCanvas(w, h);
    const ctx = c.getContext('2d');
    ctx.fillStyle = '#eef0f3';
    ctx.fillRect(0, 0, w, h);
    ctx.fillStyle = '#6aaa64';
    for (let y = 0; y < h; y += 40) ctx.fillRect(0, y, w, 18);
    const data = c.data();
    keep.push(c, data, encoder === 'board' ? encodePng(data, w, h) : c.encodeSync('png'));
  }
  const grown = (rssMb() - before) / n;
  keep.length = 0;
  gc();
  return r1(grown);
}

async function poolMemory(
  threads: number,
  boards: number,
): Promise<{ idleRssMb: number; peakRssMb: number; threads: number; renderedPerS: number }> {
  gc();
  const before = rssMb();
  const pool = new RenderPool({ concurrency: threads });
  // Let the threads start and warm their fonts.
  const warm = sampleBoard(4);
  await Promise.all(Array.from({ length: threads }, (_, i) => pool.render(`warm-${i}`, 1, warm)));
  const idle = rssMb();
  let peak = idle;
  const timer = setInterval(() => (peak = Math.max(peak, rssMb())), 20);
  const board = sampleBoard(40);
  const t0 = performance.now();
  await Promise.all(Array.from({ length: boards }, (_, i) => pool.render(`chat-${i}`, 1, board)));
  const elapsed = performance.now() - t0;
  clearInterval(timer);
  peak = Math.max(peak, rssMb());
  await pool.close();
  return { idleRssMb: r1(idle - before), peakRssMb: r1(peak - before), threads, renderedPerS: Math.round((boards / elapsed) * 1000) };
}

/**
 * RSS added by `count` avatar thumbnails (160 px JPEGs, 8 in flight, as the
 * avatar reads' gate lets through) on a pool of `threads`: after the pool
 * warmed (baseline), at the end and at peak (MiB).
 */
async function thumbnailMemory(
  threads: number,
  count: number,
): Promise<{ threads: number; count: number; grownMb: number; peakMb: number }> {
  const pool = new RenderPool({ concurrency: threads });
  await Promise.all(Array.from({ length: threads }, (_, i) => pool.thumbnail(sampleAvatar(i))));
  gc();
  const before = rssMb();
  let peak = before;
  const timer = setInterval(() => (peak = Math.max(peak, rssMb())), 20);
  const inFlight = new Set<Promise<unknown>>();
  for (let i = 0; i < count; i++) {
    const t = pool.thumbnail(sampleAvatar(i)).finally(() => inFlight.delete(t));
    inFlight.add(t);
    if (inFlight.size >= 8) await Promise.race(inFlight);
  }
  await Promise.all(inFlight);
  clearInterval(timer);
  const end = rssMb();
  await pool.close();
  return { threads, count, grownMb: r1(end - before), peakMb: r1(Math.max(peak, end) - before) };
}

function writeReport(path: string, report: unknown): void {
  const file = resolve(path);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
  console.error(`report written to ${file}`);
}

/**
 * Runs the bench and prints the table; writes the JSON report to `--json FILE`.
 * @returns the process exit code (0)
 */
export async function main(args: readonly string[]): Promise<number> {
  const { values } = parseArgs({
    args: [...args],
    options: {
      json: { type: 'string' },
      iterations: { type: 'string', default: '20' },
      warmup: { type: 'string', default: '5' },
      fit: { type: 'boolean', default: false },
      explore: { type: 'boolean', default: false },
      memory: { type: 'boolean', default: false },
    },
  });
  const iterations = Number(values.iterations);
  const warmup = Number(values.warmup);
  if (!Number.isInteger(iterations) || iterations < 1) throw new Error(`--iterations must be a positive integer, got ${values.iterations}`);
  if (!Number.isInteger(warmup) || warmup < 0) throw new Error(`--warmup must be a non-negative integer, got ${values.warmup}`);
  const rssBeforeFonts = rssMb();
  const fontWarmMs = warmUpFonts();
  const fontRssMb = r1(rssMb() - rssBeforeFonts);
  const machine = {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: availableParallelism(),
    memGiB: r1(totalmem() / 2 ** 30),
    node: process.version,
  };
  console.log(
    `render: one thread, p50 of ${iterations} after ${warmup} warm-up renders (${machine.cpu}, ${machine.cores} cores, node ${machine.node})`,
  );

  if (values.memory) {
    // Memory only, in a fresh process: the timing loops below leave native buffers waiting for a collection.
    const l40 = layout(40);
    const n = 10;
    const rssMbAtStart = r1(rssMb());
    const pool1 = await poolMemory(1, 60);
    const pool3 = await poolMemory(3, 120);
    // A long backlog on one thread (the rollover's pinned product): the thread is handed task after task.
    const pool1Backlog = await poolMemory(1, 600);
    const thumbnails = await thumbnailMemory(2, 3000);
    const memory = {
      gcExposed: typeof (globalThis as { gc?: unknown }).gc === 'function',
      rssMbAtStart,
      fontWarmMs: r1(fontWarmMs),
      fontRssMb,
      pool1,
      pool3,
      pool1Backlog,
      thumbnails,
      canvasesAtOnce: n,
      perCanvas1000x1400SkiaPngMiB: canvasesInFlight(n, 1000, 1400, 'skia'),
      perCanvas1000x1400BoardPngMiB: canvasesInFlight(n, 1000, 1400, 'board'),
      perCanvas40CardsBoardPngMiB: canvasesInFlight(n, l40.width, l40.height, 'board'),
    };
    console.log('memory:', JSON.stringify(memory, null, 2));
    if (values.json !== undefined)
      writeReport(values.json, {
        bench: 'render',
        memory,
        machine,
        date: new Date().toISOString(),
        command: `npm run bench -- render ${args.join(' ')}`.trim(),
      });
    return 0;
  }

  // JIT warm-up of the whole path (a render thread is hot after its first boards): every size once more than `warmup`.
  for (const n of [...CARDS].reverse()) measure(n, 1, Math.max(warmup, 10));

  const boards: RenderBenchRow[] = CARDS.map((cards) => {
    const ours = measure(cards, iterations, warmup);
    const skia = measure(cards, iterations, warmup, { encoder: 'skia' });
    const cold = measure(cards, iterations, warmup, {}, true);
    const model = renderCost(cards);
    return {
      cards,
      width: ours.width,
      height: ours.height,
      ms: r1(ours.ms),
      bytes: ours.bytes,
      drawMs: r1(ours.drawMs),
      encodeMs: r1(ours.encodeMs),
      p90Ms: r1(ours.p90),
      coldMs: r1(cold.ms),
      skiaMs: r1(skia.ms),
      skiaBytes: skia.bytes,
      modelMs: r1(model.ms),
      modelBytes: model.bytes,
    };
  });
  console.log('| cards | canvas px | ms p50 | KB | draw ms | encode ms | ms p90 | cold ms | skia encoder ms / KB | model ms / KB |');
  console.log('|---:|---|---:|---:|---:|---:|---:|---:|---|---|');
  for (const b of boards) {
    console.log(
      `| ${b.cards} | ${b.width} × ${b.height} | ${b.ms} | ${r1(b.bytes / 1000)} | ${b.drawMs} | ${b.encodeMs} | ${b.p90Ms} | ${b.coldMs} | ${b.skiaMs} / ${r1(b.skiaBytes / 1000)} | ${b.modelMs} / ${r1(b.modelBytes / 1000)} |`,
    );
  }
  const b4 = boards.find((b) => b.cards === 4)!;
  const b40 = boards.find((b) => b.cards === 40)!;
  const targets = {
    ms4: { target: TARGETS.ms4, measured: b4.ms, met: b4.ms <= TARGETS.ms4 },
    ms40: { target: TARGETS.ms40, measured: b40.ms, met: b40.ms <= TARGETS.ms40 },
    bytes40: { target: TARGETS.bytes40, measured: b40.bytes, met: b40.bytes <= TARGETS.bytes40 },
  };
  for (const [k, t] of Object.entries(targets)) console.log(`target ${k}: ${t.measured} vs ≤ ${t.target}: ${t.met ? 'met' : 'MISSED'}`);

  let fit: Record<string, unknown> | undefined;
  if (values.fit) {
    const rows = FIT_CARDS.map((cards) => {
      const m = measure(cards, iterations, Math.max(2, warmup));
      const l = layout(cards);
      return { cards, mpx: (l.width * l.height) / 1e6, ms: m.ms, bytes: m.bytes };
    });
    const msLine = fitLine(
      rows.map((r) => r.mpx),
      rows.map((r) => r.ms),
    );
    const bytesLine = fitLine(
      rows.map((r) => r.cards),
      rows.map((r) => r.bytes),
    );
    console.log(`fit: ms = ${r1(msLine.a * 100) / 100} + ${r1(msLine.b * 100) / 100} × Mpx (r² ${msLine.r2.toFixed(3)})`);
    console.log(`fit: bytes = ${Math.round(bytesLine.a)} + ${Math.round(bytesLine.b)} × cards (r² ${bytesLine.r2.toFixed(3)})`);
    console.log('| cards | Mpx | ms p50 | model ms | bytes | model bytes |');
    console.log('|---:|---:|---:|---:|---:|---:|');
    for (const r of rows) {
      const m = renderCost(r.cards);
      console.log(`| ${r.cards} | ${r.mpx.toFixed(3)} | ${r1(r.ms)} | ${r1(m.ms)} | ${r.bytes} | ${m.bytes} |`);
    }
    fit = {
      rows: rows.map((r) => ({ ...r, ms: r1(r.ms), mpx: Math.round(r.mpx * 1000) / 1000 })),
      msPerMpx: msLine,
      bytesPerCard: bytesLine,
    };
  }

  let explore: unknown[] | undefined;
  if (values.explore) {
    const { canvas, layout: l } = drawBoard(sampleBoard(40), true);
    const data = canvas.data();
    const variants: Array<{ name: string; opts: PngOptions | 'skia' }> = [
      { name: 'skia encode(png)', opts: 'skia' },
      { name: 'rgb up L6', opts: { mode: 'rgb', filter: 'up', level: 6 } },
      { name: 'rgb none L6', opts: { mode: 'rgb', filter: 'none', level: 6 } },
      { name: 'rgb paeth L6', opts: { mode: 'rgb', filter: 'paeth', level: 6 } },
      { name: 'rgb up L9', opts: { mode: 'rgb', filter: 'up', level: 9 } },
      { name: 'indexed none L1', opts: { mode: 'indexed', filter: 'none', level: 1 } },
      { name: 'indexed none L3', opts: { mode: 'indexed', filter: 'none', level: 3 } },
      { name: 'indexed none L6 (default)', opts: { ...BOARD_PNG_OPTIONS } },
      { name: 'indexed up L6', opts: { mode: 'indexed', filter: 'up', level: 6 } },
      { name: 'indexed none L9', opts: { mode: 'indexed', filter: 'none', level: 9 } },
      { name: 'indexed none L6 rle', opts: { mode: 'indexed', filter: 'none', level: 6, strategy: 'rle' } },
      { name: 'indexed none L6 exact 64', opts: { mode: 'indexed', filter: 'none', level: 6, exactColours: 64 } },
      { name: 'indexed none L6 exact 192', opts: { mode: 'indexed', filter: 'none', level: 6, exactColours: 192 } },
      { name: 'jpeg q80 (seed: larger than PNG)', opts: 'skia' },
    ];
    explore = [];
    console.log(`explore: encoders on the 40-card board (${l.width} × ${l.height}), p50 of ${iterations}`);
    console.log('| encoder | ms p50 | KB |');
    console.log('|---|---:|---:|');
    for (const v of variants) {
      const jpeg = v.name.startsWith('jpeg');
      const run = (): Buffer =>
        v.opts === 'skia' ? (jpeg ? canvas.encodeSync('jpeg', 80) : canvas.encodeSync('png')) : encodePng(data, l.width, l.height, v.opts);
      for (let i = 0; i < warmup; i++) run();
      const ms: number[] = [];
      let bytes = 0;
      for (let i = 0; i < iterations; i++) {
        const t0 = performance.now();
        bytes = run().length;
        ms.push(performance.now() - t0);
      }
      explore.push({ encoder: v.name, ms: r1(p(ms, 0.5)), bytes });
      console.log(`| ${v.name} | ${r1(p(ms, 0.5))} | ${r1(bytes / 1000)} |`);
    }
  }

  if (values.json !== undefined) {
    writeReport(values.json, {
      bench: 'render',
      boards,
      targets,
      machine,
      params: {
        iterations,
        warmup,
        statistic: 'p50 of one render (draw + PNG encode) on one thread',
        board: 'sampleBoard(cards): 8 scripts in names, avatarShare 0.5 (160×160 JPEG), seed 1',
        png: BOARD_PNG_OPTIONS,
        geometry: 'libs/board/src/layout.ts GEOMETRY (docs/board.md)',
        fontWarmMs: r1(fontWarmMs),
        fontRssMb,
      },
      model: RENDER_COST_MODEL,
      ...(fit ? { fit } : {}),
      ...(explore ? { explore } : {}),
      date: new Date().toISOString(),
      command: `npm run bench -- render ${args.join(' ')}`.trim(),
    });
  }
  return 0;
}
