/**
 * The board's fonts: shipped as npm packages (OFL-1.1), registered with
 * @napi-rs/canvas at start-up. Without a registered font, text silently draws
 * nothing (or, with system fonts, whatever the host has), so the renderer
 * names only these families, and `registerBoardFonts()` fails loudly when a
 * file is missing.
 *
 * What @napi-rs/canvas 1.1.1's GlobalFonts accepts: TTF, WOFF and WOFF2 (OTF
 * untested). Registrations are
 * process-wide: a font registered on the main thread is seen by every worker
 * thread, so each thread calls `registerBoardFonts()` and only the first
 * registers anything.
 *
 * Families (one per script group; a family may hold several files split by
 * Unicode range, and the text stack lists every family, so a glyph comes from
 * the first family that has it):
 * - `Board Sans`: @fontsource-variable/noto-sans (Latin, Latin Extended, Cyrillic, Greek, Vietnamese)
 * - `Board Arabic`, `Board Hebrew`: @fontsource-variable/noto-sans-arabic / -hebrew (RTL names)
 * - `Board SC`: @fontsource-variable/noto-sans-sc (Han, kana: 97 files by Unicode range)
 * - `Board KR`: @fontsource-variable/noto-sans-kr (Hangul: 120 files)
 * - `Board Emoji`: twemoji-colr-font (colour emoji, COLR/CPAL, 0.5 MB; Noto
 *   Color Emoji costs ~85 MB of memory at first use, measured, so it is not used)
 *
 * The CJK and Hangul families are registered on demand, file by file: a
 * board's text registers the files whose Unicode ranges (the package's
 * `unicode.json`) hold a character no family ahead of them has
 * (`ensureBoardGlyphs`). Registered up front, their 217 files cost ~42 MB
 * once Skia first drew text (measured: 77 → 119 MB resident in a process
 * drawing one Latin line); boards of Latin names now pay nothing for them,
 * and a Chinese name costs the few files its characters fall in (~0.5 MB
 * each). One registry shared by every thread (a SharedArrayBuffer the pool
 * hands its threads) registers each file once per process.
 *
 * Only the `wght` variable files at their default instance (400) are used:
 * every text on the board is drawn at weight 400, because each other weight
 * instantiates every file again (~11 MB and ~100 ms more, measured).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { GlobalFonts } from '@napi-rs/canvas';

/** The CSS font-family list every text on the board is drawn with. */
export const FONT_STACK = '"Board Sans", "Board Arabic", "Board Hebrew", "Board SC", "Board KR", "Board Emoji"';

interface FontSource {
  readonly family: string;
  readonly pkg: string;
  /** Files to register from the package's directory (relative path pattern). */
  readonly dir: string;
  readonly file: RegExp;
  /** Registered file by file when a text needs one (ensureBoardGlyphs), not at start-up. */
  readonly lazy?: true;
}

const SOURCES: readonly FontSource[] = [
  {
    family: 'Board Sans',
    pkg: '@fontsource-variable/noto-sans',
    dir: 'files',
    file: /^noto-sans-(latin|latin-ext|cyrillic|cyrillic-ext|greek|greek-ext|vietnamese)-wght-normal\.woff2$/,
  },
  {
    family: 'Board Arabic',
    pkg: '@fontsource-variable/noto-sans-arabic',
    dir: 'files',
    file: /^noto-sans-arabic-arabic-wght-normal\.woff2$/,
  },
  {
    family: 'Board Hebrew',
    pkg: '@fontsource-variable/noto-sans-hebrew',
    dir: 'files',
    file: /^noto-sans-hebrew-hebrew-wght-normal\.woff2$/,
  },
  { family: 'Board SC', pkg: '@fontsource-variable/noto-sans-sc', dir: 'files', file: /^noto-sans-sc-\d+-wght-normal\.woff2$/, lazy: true },
  { family: 'Board KR', pkg: '@fontsource-variable/noto-sans-kr', dir: 'files', file: /^noto-sans-kr-\d+-wght-normal\.woff2$/, lazy: true },
  { family: 'Board Emoji', pkg: 'twemoji-colr-font', dir: '.', file: /^twemoji\.woff2$/ },
];

/** What `registerBoardFonts()` did. */
export interface FontRegistration {
  /** Files registered by this call (0 when another thread or call already had). */
  readonly files: number;
  /** The families of FONT_STACK registered up front (the others: `lazyFamilies`). */
  readonly families: readonly string[];
  /** The families of FONT_STACK registered file by file on demand (ensureBoardGlyphs). */
  readonly lazyFamilies: readonly string[];
  /** Time this call took (ms). */
  readonly ms: number;
}

const require = createRequire(import.meta.url);

function packageDir(pkg: string): string {
  return dirname(require.resolve(`${pkg}/package.json`));
}

/** The font files of each family, as absolute paths (for tests and docs). */
export function boardFontFiles(): ReadonlyMap<string, readonly string[]> {
  const out = new Map<string, string[]>();
  for (const s of SOURCES) {
    const dir = join(packageDir(s.pkg), s.dir);
    const files = readdirSync(dir)
      .filter((f) => s.file.test(f))
      .sort()
      .map((f) => join(dir, f));
    out.set(s.family, [...(out.get(s.family) ?? []), ...files]);
  }
  return out;
}

/**
 * Registers the board's fonts with @napi-rs/canvas, once per process (every
 * thread may call it: a family already registered is skipped): the families
 * registered up front (Latin, Cyrillic, Greek, Arabic, Hebrew, emoji: 10
 * files); the CJK and Hangul ones come file by file with `ensureBoardGlyphs`.
 * The first text drawn afterwards costs Skia's one-time loading, which
 * `warmUpFonts()` pays at start-up rather than in the first render.
 * @throws Error when a font package is missing, has no matching file, or a file is refused
 */
export function registerBoardFonts(): FontRegistration {
  const t0 = performance.now();
  let files = 0;
  const files0 = boardFontFiles();
  for (const s of SOURCES) {
    const paths = files0.get(s.family) ?? [];
    if (paths.length === 0) throw new Error(`no font files for ${s.family}: is its package installed?`);
    if (s.lazy || GlobalFonts.has(s.family)) continue;
    for (const p of paths) {
      if (GlobalFonts.registerFromPath(p, s.family) === null) throw new Error(`@napi-rs/canvas refused the font file ${p}`);
      files++;
    }
  }
  return {
    files,
    families: SOURCES.filter((s) => !s.lazy).map((s) => s.family),
    lazyFamilies: SOURCES.filter((s) => s.lazy).map((s) => s.family),
    ms: performance.now() - t0,
  };
}

// ---------------------------------------------------------------------------
// On-demand families

/** One file of an on-demand family and the code points it holds (inclusive ranges, sorted). */
interface LazyFile {
  readonly family: string;
  readonly path: string;
  readonly ranges: ReadonlyArray<readonly [number, number]>;
}

/**
 * Script blocks the up-front families are taken to hold in full where their
 * `unicode.json` declares them: Latin (with Latin-1, Extended-A/B, IPA,
 * Extended Additional), combining marks, Greek (and Extended), Cyrillic,
 * Hebrew, Arabic (and its supplement, extended and presentation forms).
 * Everything else a slice declares is not trusted: Noto Sans's `latin` slice
 * declares U+2000–206F and arrows it does not all have (‧ U+2027, ※, ‰ are
 * missing from every up-front file, present in the SC slices), so those go to
 * the on-demand families as they did when every file was registered.
 */
const SCRIPT_BLOCKS: ReadonlyArray<readonly [number, number]> = [
  [0x0080, 0x02af],
  [0x0300, 0x036f],
  [0x0370, 0x03ff],
  [0x0400, 0x052f],
  [0x0590, 0x05ff],
  [0x0600, 0x06ff],
  [0x0750, 0x077f],
  [0x08a0, 0x08ff],
  [0x1e00, 0x1fff],
  [0xfb1d, 0xfdff],
  [0xfe70, 0xfeff],
];

/** The on-demand files (registry index = position), and the code points the up-front families ahead of them in FONT_STACK hold. */
interface LazyIndex {
  readonly files: readonly LazyFile[];
  readonly ahead: ReadonlyArray<readonly [number, number]>;
}

let lazyIndex: LazyIndex | null = null;

/** Parses a fontsource `unicode.json` value: `U+0000-00ff,U+0131,…` → inclusive ranges. */
function parseUnicodeRanges(spec: string): Array<[number, number]> {
  return spec.split(',').map((part) => {
    const [lo, hi] = part.trim().replace(/^U\+/i, '').split('-');
    const a = parseInt(lo!, 16);
    return [a, hi === undefined ? a : parseInt(hi, 16)];
  });
}

/** The subset key of a fontsource file name (`noto-sans-latin-ext-wght-normal.woff2` → `latin-ext`, `noto-sans-sc-12-wght-normal.woff2` → `[12]`). */
function subsetKey(pkg: string, file: string): string {
  const base = pkg.slice(pkg.indexOf('/') + 1);
  const k = file.slice(base.length + 1, file.indexOf('-wght-normal'));
  return /^\d+$/.test(k) ? `[${k}]` : k;
}

function loadLazyIndex(): LazyIndex {
  if (lazyIndex) return lazyIndex;
  const files: LazyFile[] = [];
  const ahead: Array<[number, number]> = [];
  const firstLazy = SOURCES.findIndex((s) => s.lazy);
  SOURCES.forEach((s, i) => {
    if (!s.lazy && i > firstLazy) return; // behind the on-demand families in FONT_STACK: they do not hide them
    const dir = join(packageDir(s.pkg), s.dir);
    const unicode = JSON.parse(readFileSync(join(packageDir(s.pkg), 'unicode.json'), 'utf8')) as Record<string, string>;
    for (const f of readdirSync(dir)
      .filter((x) => s.file.test(x))
      .sort()) {
      const spec = unicode[subsetKey(s.pkg, f)];
      if (spec === undefined) throw new Error(`${s.pkg}: no unicode range for ${f} in unicode.json`);
      const ranges = mergeRanges(parseUnicodeRanges(spec));
      if (s.lazy) files.push({ family: s.family, path: join(dir, f), ranges });
      else
        for (const [a, b] of ranges) for (const [x, y] of SCRIPT_BLOCKS) if (a <= y && b >= x) ahead.push([Math.max(a, x), Math.min(b, y)]);
    }
  });
  lazyIndex = { files, ahead: mergeRanges(ahead) };
  return lazyIndex;
}

/** Sorted, disjoint ranges covering the same code points as `ranges`. */
function mergeRanges(ranges: Array<[number, number]>): Array<[number, number]> {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const out: Array<[number, number]> = [];
  for (const [a, b] of sorted) {
    const last = out.at(-1);
    if (last && a <= last[1] + 1) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

/** Whether `cp` is in `ranges` (sorted and disjoint: mergeRanges). */
function inRanges(ranges: ReadonlyArray<readonly [number, number]>, cp: number): boolean {
  let lo = 0;
  let hi = ranges.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const [a, b] = ranges[mid]!;
    if (cp < a) hi = mid - 1;
    else if (cp > b) lo = mid + 1;
    else return true;
  }
  return false;
}

/** Registry states, one Int32 per on-demand file. */
const NONE = 0;
const REGISTERING = 1;
const DONE = 2;

let registry: Int32Array | null = null;

function theRegistry(): Int32Array {
  registry ??= new Int32Array(new SharedArrayBuffer(4 * loadLazyIndex().files.length));
  return registry;
}

/**
 * This process's registry of on-demand font files, to hand to render threads
 * (`adoptFontRegistry`), so each file is registered once per process whichever
 * thread needs it first.
 */
export function shareFontRegistry(): SharedArrayBuffer {
  return theRegistry().buffer as SharedArrayBuffer;
}

/**
 * Uses the registry another thread shared (`shareFontRegistry`) instead of this thread's own.
 * @throws RangeError when it is not a registry of this build's on-demand files
 */
export function adoptFontRegistry(buffer: SharedArrayBuffer): void {
  const r = new Int32Array(buffer);
  if (r.length !== loadLazyIndex().files.length)
    throw new RangeError(`font registry of ${r.length} files, expected ${loadLazyIndex().files.length}`);
  registry = r;
}

/** Code points this thread already ensured (names repeat render after render). */
const ensured = new Set<number>();

/**
 * Registers the on-demand font files (CJK, Hangul) that hold a character of
 * `text` which no family ahead of them in FONT_STACK has, once per process:
 * the slices of the first on-demand family that declares the character (a
 * Han character takes an SC slice, not a KR one too, as FONT_STACK would
 * draw it). The registry is shared between threads: a thread that finds a
 * slice being registered by another waits for it (at most 5 s; then it
 * registers the slice itself, so a thread that died mid-registration does not
 * leave the slice stuck). Cheap when nothing is new: one set lookup per
 * character; a character is remembered only once its slices are registered.
 * @returns the files this call registered
 * @throws Error when @napi-rs/canvas refuses a file (the slice stays unregistered, tried again next time)
 */
export function ensureBoardGlyphs(text: string): number {
  let added = 0;
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    if (ensured.has(cp)) continue;
    const index = loadLazyIndex();
    if (cp >= 0x80 && !inRanges(index.ahead, cp)) {
      const reg = theRegistry();
      let family: string | null = null;
      for (let i = 0; i < index.files.length; i++) {
        const f = index.files[i]!;
        if ((family !== null && f.family !== family) || !inRanges(f.ranges, cp)) continue;
        family = f.family;
        if (registerOnce(reg, i, f)) added++;
      }
    }
    ensured.add(cp);
  }
  return added;
}

/** Registers on-demand file `i` unless the registry says it is; waits for another thread registering it. @returns true when this call registered it */
function registerOnce(reg: Int32Array, i: number, f: LazyFile): boolean {
  for (;;) {
    const prev = Atomics.compareExchange(reg, i, NONE, REGISTERING);
    if (prev === DONE) return false;
    if (prev === REGISTERING) {
      if (Atomics.wait(reg, i, REGISTERING, 5_000) !== 'timed-out') continue;
      // Nobody finished it in 5 s (its thread was terminated mid-registration): register it here.
      Atomics.store(reg, i, REGISTERING);
    }
    let ok = false;
    try {
      ok = GlobalFonts.registerFromPath(f.path, f.family) !== null;
    } finally {
      Atomics.store(reg, i, ok ? DONE : NONE);
      Atomics.notify(reg, i);
    }
    if (!ok) throw new Error(`@napi-rs/canvas refused the font file ${f.path}`);
    return true;
  }
}

/** On-demand font files registered in this process so far (the shared registry), in all and by family, and how many there are. */
export function onDemandFontFiles(): { registered: number; total: number; byFamily: Record<string, number> } {
  const reg = theRegistry();
  const files = loadLazyIndex().files;
  const byFamily: Record<string, number> = {};
  let n = 0;
  for (let i = 0; i < reg.length; i++) {
    if (Atomics.load(reg, i) !== DONE) continue;
    n++;
    byFamily[files[i]!.family] = (byFamily[files[i]!.family] ?? 0) + 1;
  }
  return { registered: n, total: reg.length, byFamily };
}
