/**
 * The failover scenario's steady-phase CPU figures: every process of the rig
 * (the cluster's children, nats-server, the machine's PostgreSQL, the viewer
 * workers and this coordinator with its game clients and probes) watched from
 * the end of the ramp to the first fault, as a share of a core and as CPU µs per
 * channel-second, beside the whole machine's utilisation. They say which process
 * a run saturated and what one channel costs each, at the run's shape.
 */
import { cpus } from 'node:os';
import { clockTicksPerSecond, cpuDeltaMs, cpuMsByComm, machineCpuTicks, ProcessWatch, type ProcessSample } from '../proc.ts';

/** One watched process (or group: `postgres` sums every postgres process) over the steady phase. */
export interface SteadyCpuRow {
  name: string;
  /** 100 = one core. */
  cpuPct: number | null;
  /** CPU µs per channel-second: cpuMs × 1,000 ÷ (channels × seconds). */
  usPerChannelSecond: number | null;
}

/** The steady phase's CPU figures (FailoverReport.steadyCpu). */
export interface SteadyCpu {
  /** Length of the window, s (end of the ramp → the first fault, or the end of acting when no fault is selected). */
  seconds: number;
  channels: number;
  /** The machine's busy share of all its cores (/proc/stat: total − idle − iowait), %, and its core count. */
  machineBusyPct: number | null;
  cores: number;
  /** In the order the processes were given (first appearance of a name), then postgres. */
  processes: SteadyCpuRow[];
}

/**
 * Watches the named processes, the machine's PostgreSQL processes and the
 * machine between `start()` and `stop()`. PostgreSQL is summed over every
 * `postgres` process alive at both ends (backends that came or went between
 * are missed: the rig's pools are opened before the window).
 */
export class SteadyCpuWatch {
  private readonly ticksPerS = clockTicksPerSecond();
  private readonly watch: ProcessWatch;
  private t0 = 0;
  private pg0: ReadonlyMap<number, number> = new Map();
  private machine0: ReturnType<typeof machineCpuTicks> = null;
  private result: SteadyCpu | null = null;

  /**
   * @param procs name and pid of each process (a name given twice is summed: the viewer workers)
   * @param channels the run's channel count (the per-channel-second divisor)
   */
  constructor(
    procs: ReadonlyArray<{ name: string; pid: number }>,
    private readonly channels: number,
  ) {
    this.watch = new ProcessWatch(procs, 5_000);
  }

  start(): void {
    this.t0 = performance.now();
    this.pg0 = cpuMsByComm('postgres', this.ticksPerS);
    this.machine0 = machineCpuTicks();
    this.watch.start();
  }

  /** Ends the window (again: the first result). */
  stop(): SteadyCpu {
    if (this.result) return this.result;
    const samples: ProcessSample[] = this.watch.stop();
    const pg1 = cpuMsByComm('postgres', this.ticksPerS);
    const m1 = machineCpuTicks();
    const seconds = (performance.now() - this.t0) / 1000;
    const byName = new Map<string, number | null>();
    for (const s of samples) {
      const prev = byName.get(s.name);
      byName.set(s.name, s.cpuMs === null || prev === null ? null : (prev ?? 0) + s.cpuMs);
    }
    byName.set('postgres', cpuDeltaMs(this.pg0, pg1));
    const row = (name: string, cpuMs: number | null): SteadyCpuRow => ({
      name,
      cpuPct: cpuMs === null || seconds <= 0 ? null : Math.round(cpuMs / seconds / 10),
      usPerChannelSecond: cpuMs === null || seconds <= 0 ? null : Math.round((cpuMs * 1000) / (this.channels * seconds)),
    });
    const processes = [...byName].map(([name, ms]) => row(name, ms));
    const m0 = this.machine0;
    const machineBusyPct = m0 && m1 && m1.total > m0.total ? Math.round(((m1.busy - m0.busy) / (m1.total - m0.total)) * 100) : null;
    this.result = { seconds: Math.round(seconds * 10) / 10, channels: this.channels, machineBusyPct, cores: cpus().length, processes };
    return this.result;
  }
}
