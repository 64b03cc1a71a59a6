/**
 * Process-wide allocator options that must be in the environment before a
 * native module reads them (main.ts applies them first). They are fixed for
 * every deployment, not settings: docs/tuning.md, and
 * docs/decisions/0101-memory-settings.md for the measurements.
 *
 * @napi-rs/canvas 1.1 links mimalloc 2.5 (its Rust allocator: `MIMALLOC_VERBOSE=1`
 * prints its options at load), which reads two options itself:
 * - `allow_thp` (MIMALLOC_ALLOW_THP) defaults to on, and Linux then backs the
 *   1 GiB arena it reserves with 2 MiB transparent huge pages, so every partly
 *   used 2 MiB counts in full towards the resident memory: 0.
 * - `purge_delay` (MIMALLOC_PURGE_DELAY, ms) defaults to 10, and mimalloc
 *   purges only when it next allocates or frees: memory a render freed stays
 *   resident while its thread waits for the next job. 0 returns it at once.
 */

/** The mimalloc options crowdplay fixes, as the digits mimalloc reads. */
export const ALLOCATOR_DEFAULTS: Readonly<Record<string, string>> = Object.freeze({
  MIMALLOC_ALLOW_THP: '0',
  MIMALLOC_PURGE_DELAY: '0',
});

/**
 * Sets MIMALLOC_ALLOW_THP and MIMALLOC_PURGE_DELAY to {@link ALLOCATOR_DEFAULTS}
 * when `env` does not have them or has them empty (mimalloc would read an
 * empty value as 1: huge pages on, a 1 ms delay). A value already there is
 * mimalloc's own and left as it is (mimalloc reads plain digits; anything else
 * it ignores, keeping its own default). Call it before any native module is
 * loaded: mimalloc reads its options once, at load.
 * @param env the environment to complete (process.env: Node passes each assignment to setenv(3))
 * @returns the names set, in order
 */
export function applyAllocatorDefaults(env: NodeJS.ProcessEnv): string[] {
  const changed: string[] = [];
  for (const [name, value] of Object.entries(ALLOCATOR_DEFAULTS)) {
    if ((env[name] ?? '').trim() !== '') continue;
    env[name] = value;
    changed.push(name);
  }
  return changed;
}

/**
 * What this process was started with of the values read only at start-up: those scripts/start.sh applies
 * (SEMI_SPACE_MB, MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_) and the mimalloc options main.ts puts in the environment.
 */
export interface ProcessStartSettings {
  /** node's --max-semi-space-size, MiB; null: not given (Node's default, 16 MiB on Node 20). */
  semiSpaceMb: number | null;
  /** MALLOC_ARENA_MAX as glibc reads it; null: unset, 0 or unreadable (glibc's default, 8 arenas per core). */
  mallocArenaMax: number | null;
  /** MALLOC_MMAP_THRESHOLD_ as glibc reads it, bytes; null: unset or unreadable (glibc's dynamic threshold). */
  mallocMmapThreshold: number | null;
  /** MIMALLOC_ALLOW_THP (0 / 1); null: unset or not plain digits (mimalloc's own reading, or its default: on). */
  mimallocAllowThp: number | null;
  /** MIMALLOC_PURGE_DELAY, ms; null: unset or not plain digits (mimalloc's own reading, or its default: 10). */
  mimallocPurgeDelayMs: number | null;
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
    mimallocAllowThp: mimallocNumber(env.MIMALLOC_ALLOW_THP),
    mimallocPurgeDelayMs: mimallocNumber(env.MIMALLOC_PURGE_DELAY),
  };
}

/** A mimalloc option given as plain decimal digits (what applyAllocatorDefaults sets), or null for anything else. */
function mimallocNumber(value: string | undefined): number | null {
  return value !== undefined && /^\d+$/.test(value) ? Number(value) : null;
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
