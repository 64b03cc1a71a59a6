/**
 * Process-wide allocator options that must be in the environment before a
 * native module reads them (main.ts applies them first).
 *
 * @napi-rs/canvas 1.1 links mimalloc 2.5 (its Rust allocator: `MIMALLOC_VERBOSE=1`
 * prints its options at load). Its `allow_thp` option defaults to on, and Linux
 * then backs the 1 GiB arena it reserves with 2 MiB transparent huge pages, so
 * every partly used 2 MiB counts in full towards the resident memory. Measured
 * in the 1,000-chat rollover on one core (docs/benchmarks.md "Session 8"):
 * the arena held 298 MB resident at the peak, 280 MB of it huge pages; with
 * `MIMALLOC_ALLOW_THP=0`, 205 MB and none. An operator who wants huge pages
 * sets `MIMALLOC_ALLOW_THP=1` (the setting of the same name, libs/config).
 */

/** Environment variables set when absent, and their values. */
export const ALLOCATOR_DEFAULTS: Readonly<Record<string, string>> = Object.freeze({ MIMALLOC_ALLOW_THP: '0' });

/**
 * Sets every {@link ALLOCATOR_DEFAULTS} entry that `env` does not have
 * (an operator's own value, even an empty one, is kept). Call it before any
 * native module is loaded: mimalloc reads its options once, at load.
 * @param env the environment to complete (process.env: Node passes each assignment to setenv(3))
 * @returns the names set, in order
 */
export function applyAllocatorDefaults(env: NodeJS.ProcessEnv): string[] {
  const set: string[] = [];
  for (const [name, value] of Object.entries(ALLOCATOR_DEFAULTS)) {
    if (env[name] !== undefined) continue;
    env[name] = value;
    set.push(name);
  }
  return set;
}
