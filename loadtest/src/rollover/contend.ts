/**
 * A competing load on the product's CPU (`rollover --contend BUSY,IDLE`): one
 * process pinned where the product is, busy for BUSY ms then idle for IDLE ms,
 * over and over, until stopped. It gives the product's core less time, as a
 * busy neighbour on the host does, so a run can be made in the state where
 * connects and renders are slow on purpose rather than by chance.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { tasksetPath } from './product.ts';

/** A duty cycle: busy `busyMs`, then idle `idleMs`, ms. */
export interface Contention {
  busyMs: number;
  idleMs: number;
}

/**
 * Parses `BUSY,IDLE` (whole ms, BUSY 1–1,000, IDLE 0–1,000).
 * @throws RangeError naming the flag when the value is not two such numbers
 */
export function parseContention(raw: string): Contention {
  const parts = raw.split(',');
  const nums = parts.map((p) => (/^\d+$/.test(p.trim()) ? Number(p.trim()) : NaN));
  const [busyMs, idleMs] = nums;
  if (
    parts.length !== 2 ||
    busyMs === undefined ||
    idleMs === undefined ||
    !(busyMs >= 1 && busyMs <= 1_000) ||
    !(idleMs >= 0 && idleMs <= 1_000)
  )
    throw new RangeError(`--contend must be BUSY,IDLE in whole ms (BUSY 1–1000, IDLE 0–1000), got ${JSON.stringify(raw)}`);
  return { busyMs, idleMs };
}

/** A running contention; `stop` ends it (safe to call twice). */
export interface ContendingLoad {
  readonly pid: number | undefined;
  stop(): void;
}

/**
 * Starts the competing load pinned to `cpus` (`taskset -c`). It also ends by
 * itself after `maxMs`, so a run that dies leaves nothing spinning.
 * @throws Error when taskset is not found
 */
export function startContention(c: Contention, cpus: string, maxMs: number): ContendingLoad {
  const ts = tasksetPath();
  if (!ts) throw new Error('--contend needs taskset (the load runs on the product’s CPU)');
  const script =
    `const end = Date.now() + ${Math.round(maxMs)};` +
    `function cycle() { if (Date.now() > end) return; const t = Date.now() + ${c.busyMs}; while (Date.now() < t) {} setTimeout(cycle, ${c.idleMs}); }` +
    'cycle();';
  const child: ChildProcess = spawn(ts, ['-c', cpus, process.execPath, '-e', script], { stdio: 'ignore' });
  child.on('error', () => undefined);
  let stopped = false;
  return {
    pid: child.pid,
    stop() {
      if (stopped) return;
      stopped = true;
      child.kill('SIGKILL');
    },
  };
}
