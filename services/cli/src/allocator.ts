/**
 * Process-wide allocator options that must be in the environment before a
 * native module reads them (main.ts applies them first).
 *
 * @napi-rs/canvas 1.1 links mimalloc 2.5 (its Rust allocator: `MIMALLOC_VERBOSE=1`
 * prints its options at load), which reads two of our settings itself:
 * - `allow_thp` (MIMALLOC_ALLOW_THP) defaults to on, and Linux then backs the
 *   1 GiB arena it reserves with 2 MiB transparent huge pages, so every partly
 *   used 2 MiB counts in full towards the resident memory (docs/benchmarks.md).
 * - `purge_delay` (MIMALLOC_PURGE_DELAY, ms) defaults to 10, and mimalloc
 *   purges only when it next allocates or frees: memory a render freed stays
 *   resident while its thread waits for the next job. At 0 it is returned at
 *   once.
 */

import { schema } from '@crowdplay/config';

/** The settings that document and validate them (libs/config): their names and how their values are read. */
const MIMALLOC_SETTINGS = [schema.runtime.allocatorHugePages, schema.runtime.allocatorPurgeDelayMs] as const;

/**
 * A value as the digits mimalloc reads: a boolean as 0 / 1, a number as plain decimal digits (mimalloc takes `1_000`
 * and ` 20 ` as invalid, so its default, and an empty value as 1; `MIMALLOC_VERBOSE=1` prints what it read).
 */
const forMimalloc = (value: boolean | number): string => String(Number(value));

/** Environment variables set when absent, and their values. */
export const ALLOCATOR_DEFAULTS: Readonly<Record<string, string>> = Object.freeze(
  Object.fromEntries(MIMALLOC_SETTINGS.map((s) => [s.env, forMimalloc(s.default)])),
);

/**
 * Sets each of MIMALLOC_ALLOW_THP and MIMALLOC_PURGE_DELAY when `env` does not
 * have it, or has it empty (mimalloc would read an empty value as 1: huge
 * pages on, a 1 ms delay), and rewrites a value the setting accepts
 * (`" false "`, `On`, `1_000`: libs/config's parsers) to the digits mimalloc
 * reads the same way (it takes `1_000` as invalid and keeps its default). Anything else is left for loadConfig to
 * refuse by name. Call it before any native module is loaded: mimalloc reads
 * its options once, at load.
 * @param env the environment to complete (process.env: Node passes each assignment to setenv(3))
 * @returns the names set or rewritten, in order
 */
export function applyAllocatorDefaults(env: NodeJS.ProcessEnv): string[] {
  const changed: string[] = [];
  for (const setting of MIMALLOC_SETTINGS) {
    const raw = env[setting.env];
    const parsed = raw === undefined || raw.trim() === '' ? { ok: true as const, value: setting.default } : setting.parse(raw);
    if (!parsed.ok) continue;
    const next = forMimalloc(parsed.value);
    if (next === raw) continue;
    env[setting.env] = next;
    changed.push(setting.env);
  }
  return changed;
}

/** What this process was started with of the settings scripts/start.sh applies (SEMI_SPACE_MB, MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_). */
export interface ProcessStartSettings {
  /** node's --max-semi-space-size, MiB; null: not given (Node's default, 16 MiB on Node 20). */
  semiSpaceMb: number | null;
  /** MALLOC_ARENA_MAX as glibc reads it; null: unset, 0 or unreadable (glibc's default, 8 arenas per core). */
  mallocArenaMax: number | null;
  /** MALLOC_MMAP_THRESHOLD_ as glibc reads it, bytes; null: unset or unreadable (glibc's dynamic threshold). */
  mallocMmapThreshold: number | null;
}

/**
 * The process-start settings as this process got them: they take effect only
 * when a process starts (V8 sizes its young generation, glibc reads its
 * tunables), so they are read back here for the start-up log and a gauge,
 * not applied. A --max-semi-space-size on the command line (`execArgv`) wins
 * over one in NODE_OPTIONS, as in node; the last one given counts.
 * @param execArgv process.execArgv
 * @param env process.env
 */
export function processStartSettings(execArgv: readonly string[], env: NodeJS.ProcessEnv): ProcessStartSettings {
  const semi = (args: readonly string[]): number | null => {
    let v: number | null = null;
    for (let i = 0; i < args.length; i++) {
      const m = /^--max[-_]semi[-_]space[-_]size(?:=(.*))?$/.exec(args[i]!);
      if (!m) continue;
      const n = Number(m[1] ?? args[i + 1]);
      if (Number.isFinite(n) && n > 0) v = n;
    }
    return v;
  };
  return {
    semiSpaceMb: semi(execArgv) ?? semi((env.NODE_OPTIONS ?? '').split(/\s+/).filter(Boolean)),
    mallocArenaMax: glibcNumber(env.MALLOC_ARENA_MAX) || null,
    mallocMmapThreshold: glibcNumber(env.MALLOC_MMAP_THRESHOLD_),
  };
}

/** A glibc tunable's value as glibc reads it (C's base prefixes, measured: MALLOC_ARENA_MAX=010 → 8 arenas, 08 → invalid, its default), or null. */
function glibcNumber(value: string | undefined): number | null {
  const raw = (value ?? '').trim();
  if (/^0x[0-9a-f]+$/i.test(raw)) return parseInt(raw.slice(2), 16);
  if (/^0[0-7]*$/.test(raw)) return parseInt(raw, 8);
  if (/^[1-9]\d*$/.test(raw)) return Number(raw);
  return null;
}

/**
 * Lets the isolates created from now on (worker threads: the render pool's,
 * which ask for `resourceLimits.maxYoungGenerationSizeMb` 4) size their young
 * generation from their own limits: an explicit --max-semi-space-size
 * (SEMI_SPACE_MB, given by scripts/start.sh) wins over resourceLimits in
 * every isolate V8 creates while it is set (measured, Node 20: a worker's
 * heap 12.9 MB → 23.9 MB at 8). The main isolate keeps the size it started
 * with: V8 reads the flag when an isolate is created.
 * @param settings what the process started with ({@link processStartSettings})
 * @param setFlags v8.setFlagsFromString (injectable for tests)
 * @returns whether the flag was reset
 */
export function releaseSemiSpaceFlag(settings: ProcessStartSettings, setFlags: (flags: string) => void): boolean {
  if (settings.semiSpaceMb === null) return false;
  setFlags('--max-semi-space-size=0'); // 0: V8's "not set"
  return true;
}
