/**
 * Lowers the priority of the process's helper threads (HELPER_THREAD_NICE)
 * so that, on a saturated core, the event loop's thread runs first.
 *
 * Why: V8's platform workers run concurrent marking and parallel collection
 * at the event loop's priority. With the process on one core (the pinned
 * 1,000-chat rollover, docs/decisions/0101-memory-settings.md), they took the
 * core while the loop had work: 100–160 ms event-loop stalls in which the
 * loop's own thread ran 10–40 ms, each during a concurrent mark. At nice 10
 * they get ~10 % of a core the loop also wants (CFS weights 110 : 1024) and
 * all of it when the loop is idle, so collections finish later instead of
 * the loop waiting.
 *
 * The trade-off: those threads also help in the stop-the-world phases of a
 * collection (parallel marking, evacuation), where the loop waits for them;
 * the loop's thread does that work too, so a helper preempted there stretches
 * the pause rather than stopping it, and libuv's pool (fs, dns.lookup, async
 * crypto) gets the core after the loop as well. Measured net: stalls over
 * 100 ms during concurrent marking gone, guess p99 64–80 ms (was 84–114).
 *
 * Linux only: setpriority(2) on a thread id acts on that thread alone there
 * (elsewhere it would lower the whole process, so nothing is done).
 */
import { readdirSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';

/** What {@link niceHelperThreads} did. */
export interface HelperThreads {
  /** Thread ids now at the nice value (lowered by this call, or already there or lower in priority). */
  readonly niced: readonly number[];
  /** Thread ids whose priority could not be read or set (gone meanwhile, or not permitted). */
  readonly failed: readonly number[];
}

/**
 * Sets every thread of this process but the calling one (the event loop's,
 * whose id is the process id) to nice value `nice`, never raising a priority
 * (that needs CAP_SYS_NICE). Call it from the main thread at start-up: the
 * threads that exist then are V8's platform workers, libuv's pool (started by
 * the module loader) and native modules' runtimes; threads created later
 * (render threads: BOARD_RENDER_NICE) are not touched.
 * @param nice 0–19; 0 does nothing
 * @param opts.taskDir the directory listing the threads [/proc/self/task] (tests)
 * @returns the threads niced and the ones that failed; both empty when `nice` is 0 or the platform is not Linux
 * @throws RangeError when `nice` is not an integer in 0…19
 */
export function niceHelperThreads(nice: number, opts: { taskDir?: string; platform?: NodeJS.Platform } = {}): HelperThreads {
  if (!Number.isInteger(nice) || nice < 0 || nice > 19) throw new RangeError(`nice must be an integer in 0…19, got ${nice}`);
  if (nice === 0 || (opts.platform ?? process.platform) !== 'linux') return { niced: [], failed: [] };
  let tids: number[];
  try {
    tids = readdirSync(opts.taskDir ?? '/proc/self/task')
      .map(Number)
      .filter((t) => Number.isInteger(t) && t > 0 && t !== process.pid);
  } catch {
    return { niced: [], failed: [] };
  }
  const niced: number[] = [];
  const failed: number[] = [];
  for (const tid of tids) {
    try {
      if (getPriority(tid) < nice) setPriority(tid, nice);
      niced.push(tid);
    } catch {
      failed.push(tid);
    }
  }
  return { niced, failed };
}
