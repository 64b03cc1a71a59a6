/**
 * Linux /proc readers for the load report: CPU time of a process, and the pid
 * listening on a TCP port (best effort, for measuring the server under test).
 * Everything returns null where /proc is missing or unreadable.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** Kernel clock ticks per second (`getconf CLK_TCK`; 100 on every common Linux). */
export function clockTicksPerSecond(): number {
  try {
    const n = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isFinite(n) && n > 0 ? n : 100;
  } catch {
    return 100;
  }
}

/**
 * CPU time used so far by `pid` (user + system), in ms, from /proc/<pid>/stat
 * fields 14 and 15 (proc(5)); null when unreadable.
 */
export function processCpuMs(pid: number, ticksPerS: number): number | null {
  return statCpuMs(`/proc/${pid}/stat`, ticksPerS);
}

/**
 * CPU time used so far by the main thread of `pid` (the thread whose id is the process's: Node's event loop, the JS
 * and the GC work done on it), in ms, from /proc/<pid>/task/<pid>/stat (proc(5)); null when unreadable. The rest of
 * {@link processCpuMs} is the other threads': V8's helpers (parallel and concurrent GC, background JIT compiles)
 * and libuv's pool.
 */
export function mainThreadCpuMs(pid: number, ticksPerS: number): number | null {
  return statCpuMs(`/proc/${pid}/task/${pid}/stat`, ticksPerS);
}

/** utime + stime of a /proc stat file, ms; null when unreadable. */
function statCpuMs(path: string, ticksPerS: number): number | null {
  let stat: string;
  try {
    stat = readFileSync(path, 'utf8');
  } catch {
    return null;
  }
  // field 2 (comm) may contain spaces and parentheses: split after the last ')'
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) return null;
  return ((utime + stime) * 1000) / ticksPerS;
}

/** Every process id listed in /proc (empty when /proc is unreadable). */
function pidsInProc(): string[] {
  try {
    return readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return [];
  }
}

/**
 * CPU time used so far (user + system, ms) by every process whose
 * /proc/<pid>/comm is `comm` (e.g. `postgres`: every backend of the server,
 * whoever it serves), by pid. Empty when none is readable.
 */
export function cpuMsByComm(comm: string, ticksPerS: number): Map<number, number> {
  const out = new Map<number, number>();
  for (const d of pidsInProc()) {
    try {
      if (readFileSync(`/proc/${d}/comm`, 'utf8').trim() !== comm) continue;
    } catch {
      continue; // gone meanwhile
    }
    const ms = processCpuMs(Number(d), ticksPerS);
    if (ms !== null) out.set(Number(d), ms);
  }
  return out;
}

/**
 * CPU used between two readings of {@link cpuMsByComm}, ms: the sum of the
 * differences over the processes present in both (one that started or ended
 * in between is left out, never counted with its whole life). Null when none
 * was present in both.
 */
export function cpuDeltaMs(before: ReadonlyMap<number, number>, after: ReadonlyMap<number, number>): number | null {
  let sum = 0;
  let seen = 0;
  for (const [pid, ms] of after) {
    const was = before.get(pid);
    if (was === undefined) continue;
    sum += ms - was;
    seen++;
  }
  return seen === 0 ? null : sum;
}

/** Socket inodes in LISTEN state (st = 0A) on `port`, from /proc/net/tcp and tcp6. */
function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      const local = cols[1];
      if (!local || cols[3] !== '0A') continue;
      if (local.slice(local.lastIndexOf(':') + 1) === hexPort && cols[9]) inodes.add(cols[9]);
    }
  }
  return inodes;
}

/**
 * The pid of the process listening on TCP `port` (any local address): socket
 * inodes from /proc/net/tcp{,6}, then the process whose /proc/<pid>/fd links to
 * one of them. Best effort: null when not found or not readable (other users'
 * processes need root).
 */
export function findListeningPid(port: number): number | null {
  const inodes = listeningInodes(port);
  if (inodes.size === 0) return null;
  const targets = new Set([...inodes].map((i) => `socket:[${i}]`));
  for (const pid of pidsInProc()) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        if (targets.has(readlinkSync(`/proc/${pid}/fd/${fd}`))) return Number(pid);
      } catch {
        // fd closed while we looked
      }
    }
  }
  return null;
}

/**
 * Whole-machine CPU counters from the first line of /proc/stat (proc(5)), in
 * clock ticks summed over all cores: `busy` = total − idle − iowait. Null when
 * unreadable. Two samples give the machine's utilisation between them,
 * kernel time for loopback networking included.
 */
export function machineCpuTicks(): { busy: number; total: number } | null {
  let line: string | undefined;
  try {
    line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
  } catch {
    return null;
  }
  if (!line?.startsWith('cpu ')) return null;
  // user nice system idle iowait irq softirq steal (guest time is already inside user)
  const v = line.trim().split(/\s+/).slice(1, 9).map(Number);
  if (v.length < 8 || v.some((n) => !Number.isFinite(n))) return null;
  const total = v.reduce((a, b) => a + b, 0);
  return { busy: total - (v[3] ?? 0) - (v[4] ?? 0), total };
}

/**
 * Resident set size of `pid` in bytes (VmRSS in /proc/<pid>/status, proc(5));
 * null when unreadable (the process is gone, or another user's).
 */
export function processRssBytes(pid: number): number | null {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return null;
  }
  const m = /^VmRSS:\s+(\d+)\s+kB$/m.exec(status);
  return m ? Number(m[1]) * 1024 : null;
}

/** One watched process over a window: CPU (100 = one core) and resident memory, bytes. Nulls where /proc was unreadable. */
export interface ProcessSample {
  name: string;
  pid: number;
  cpuPct: number | null;
  /** CPU time used in the window, ms. */
  cpuMs: number | null;
  /** The part of cpuMs used by the main thread (see {@link mainThreadCpuMs}), ms. */
  mainThreadCpuMs: number | null;
  rssStartBytes: number | null;
  rssEndBytes: number | null;
  rssPeakBytes: number | null;
}

/**
 * Watches named processes between `start()` and `stop()`: CPU time from
 * /proc/<pid>/stat at both ends, VmRSS at both ends and its peak over samples
 * every `intervalMs`. For the per-process figures of a multi-process cluster
 * under load (docs/benchmarks.md).
 */
export class ProcessWatch {
  private readonly ticksPerS = clockTicksPerSecond();
  private timer: ReturnType<typeof setInterval> | undefined;
  private t0 = 0;
  private readonly state: Array<{
    name: string;
    pid: number;
    cpu0: number | null;
    main0: number | null;
    rss0: number | null;
    peak: number | null;
  }>;

  /**
   * @param procs name and pid of each process to watch
   * @param intervalMs RSS sampling interval, ms (default 1,000)
   */
  constructor(
    procs: ReadonlyArray<{ name: string; pid: number }>,
    private readonly intervalMs = 1_000,
  ) {
    this.state = procs.map((p) => ({ ...p, cpu0: null, main0: null, rss0: null, peak: null }));
  }

  /** Takes the first sample and starts sampling RSS. */
  start(): void {
    this.t0 = performance.now();
    for (const s of this.state) {
      s.cpu0 = processCpuMs(s.pid, this.ticksPerS);
      s.main0 = mainThreadCpuMs(s.pid, this.ticksPerS);
      s.rss0 = processRssBytes(s.pid);
      s.peak = s.rss0;
    }
    this.timer = setInterval(() => this.sampleRss(), this.intervalMs);
    this.timer.unref();
  }

  private sampleRss(): void {
    for (const s of this.state) {
      const r = processRssBytes(s.pid);
      if (r !== null && (s.peak === null || r > s.peak)) s.peak = r;
    }
  }

  /** Takes the last sample, stops sampling, and returns one entry per process. */
  stop(): ProcessSample[] {
    clearInterval(this.timer);
    const wallMs = performance.now() - this.t0;
    return this.state.map((s) => {
      const cpu1 = processCpuMs(s.pid, this.ticksPerS);
      const cpuMs = s.cpu0 === null || cpu1 === null ? null : cpu1 - s.cpu0;
      const main1 = mainThreadCpuMs(s.pid, this.ticksPerS);
      const mainMs = s.main0 === null || main1 === null ? null : main1 - s.main0;
      // The last sample is the end reading itself, so the peak is never below it.
      const end = processRssBytes(s.pid);
      if (end !== null && (s.peak === null || end > s.peak)) s.peak = end;
      return {
        name: s.name,
        pid: s.pid,
        cpuMs,
        mainThreadCpuMs: mainMs,
        cpuPct: cpuMs === null || wallMs <= 0 ? null : Math.round((cpuMs / wallMs) * 10_000) / 100,
        rssStartBytes: s.rss0,
        rssEndBytes: end,
        rssPeakBytes: s.peak,
      };
    });
  }
}

/**
 * Parses `name=pid` (the load CLIs' `--watch-pid`).
 * @throws Error on anything else (a name of letters, digits, `-`, `_`; a positive integer pid)
 */
export function parseWatchPid(arg: string): { name: string; pid: number } {
  const m = /^([A-Za-z0-9_-]{1,64})=(\d{1,9})$/.exec(arg);
  if (!m || Number(m[2]) <= 0) throw new Error(`--watch-pid wants name=pid (e.g. shard-1=1234), got "${arg}"`);
  return { name: m[1]!, pid: Number(m[2]) };
}
