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

/** Spellings of a boolean that libs/config accepts (trimmed, any case), as mimalloc reads them. */
const AS_MIMALLOC: Readonly<Record<string, string>> = { true: '1', '1': '1', yes: '1', on: '1', false: '0', '0': '0', no: '0', off: '0' };

/**
 * Sets every {@link ALLOCATOR_DEFAULTS} entry that `env` does not have, or
 * has empty, and rewrites an operator's value that libs/config accepts as a
 * boolean (`" false "`, `On`) to the `0` / `1` mimalloc reads the same way
 * (mimalloc ignores what it cannot parse, and reads an empty value as on).
 * Anything else is left for loadConfig to refuse by name. Call it before any
 * native module is loaded: mimalloc reads its options once, at load.
 * @param env the environment to complete (process.env: Node passes each assignment to setenv(3))
 * @returns the names set or rewritten, in order
 */
export function applyAllocatorDefaults(env: NodeJS.ProcessEnv): string[] {
  const set: string[] = [];
  for (const [name, value] of Object.entries(ALLOCATOR_DEFAULTS)) {
    const own = env[name]?.trim().toLowerCase();
    const next = own === undefined || own === '' ? value : AS_MIMALLOC[own];
    if (next === undefined || next === env[name]) continue;
    env[name] = next;
    set.push(name);
  }
  return set;
}
