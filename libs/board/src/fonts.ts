/**
 * The board's fonts: shipped as npm packages (OFL-1.1), registered with
 * @napi-rs/canvas at start-up. Without a registered font, text silently draws
 * nothing (or, with system fonts, whatever the host has), so the renderer
 * names only these families, and `registerBoardFonts()` fails loudly when a
 * file is missing.
 *
 * What @napi-rs/canvas 1.1.1's GlobalFonts accepts (measured here): TTF, WOFF
 * and WOFF2 (OTF not tested: no OTF file on this machine). Registrations are
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
 * Only the `wght` variable files at their default instance (400) are used:
 * every text on the board is drawn at weight 400, because each other weight
 * instantiates every file again (~11 MB and ~100 ms more, measured).
 */
import { readdirSync } from 'node:fs';
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
  { family: 'Board SC', pkg: '@fontsource-variable/noto-sans-sc', dir: 'files', file: /^noto-sans-sc-\d+-wght-normal\.woff2$/ },
  { family: 'Board KR', pkg: '@fontsource-variable/noto-sans-kr', dir: 'files', file: /^noto-sans-kr-\d+-wght-normal\.woff2$/ },
  { family: 'Board Emoji', pkg: 'twemoji-colr-font', dir: '.', file: /^twemoji\.woff2$/ },
];

/** What `registerBoardFonts()` did. */
export interface FontRegistration {
  /** Files registered by this call (0 when another thread or call already had). */
  readonly files: number;
  /** The families of FONT_STACK, all registered. */
  readonly families: readonly string[];
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
 * thread may call it: a family already registered is skipped). About 160 ms
 * and 12 MB for 230 files; the first text drawn afterwards costs another
 * ~300 ms and ~45 MB once per process (Skia loading the files), so
 * `warmUpFonts()` does that at start-up rather than in the first render.
 * @throws Error when a font package is missing, has no matching file, or a file is refused
 */
export function registerBoardFonts(): FontRegistration {
  const t0 = performance.now();
  let files = 0;
  for (const [family, paths] of boardFontFiles()) {
    if (paths.length === 0) throw new Error(`no font files for ${family}: is its package installed?`);
    if (GlobalFonts.has(family)) continue;
    for (const p of paths) {
      if (GlobalFonts.registerFromPath(p, family) === null) throw new Error(`@napi-rs/canvas refused the font file ${p}`);
      files++;
    }
  }
  return { files, families: SOURCES.map((s) => s.family), ms: performance.now() - t0 };
}
