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
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
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
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return null;
  }
  for (const pid of pids) {
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
