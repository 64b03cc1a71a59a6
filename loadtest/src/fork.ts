/**
 * Forking TypeScript children: `fork(file, args, { execArgv: ['--import', tsx] })`
 * with tsx resolved to an absolute URL, so the child works from any cwd.
 */
import { fork, type ChildProcess, type ForkOptions } from 'node:child_process';

/** `--import` value for tsx: its resolved loader URL, else the bare name. */
export function tsxImport(): string {
  try {
    return import.meta.resolve('tsx');
  } catch {
    return 'tsx';
  }
}

/** Forks the TypeScript module `file` (absolute path) through tsx with an IPC channel. */
export function forkTs(file: string, args: string[] = [], options: ForkOptions = {}): ChildProcess {
  return fork(file, args, { execArgv: ['--import', tsxImport()], serialization: 'json', ...options });
}

/**
 * Waits until `child` has exited, or kills it with SIGKILL after `deadlineMs`.
 * Only ever signals `child` itself (by its pid), never a process group.
 */
export async function waitExit(child: ChildProcess, deadlineMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
    }, deadlineMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/**
 * Sends `msg` to the parent over the IPC channel; `cb` once it is handed to the OS.
 * @throws Error when this process was not forked with an IPC channel
 */
export function sendToParent(msg: unknown, cb?: () => void): void {
  if (!process.send) throw new Error(`${process.argv[1] ?? 'this worker'} must be forked with an IPC channel`);
  process.send(msg, undefined, {}, () => cb?.());
}

/**
 * The guards of a forked load worker: it exits 2 when its parent goes away, and on an uncaught exception it sends
 * `fatal(stack)` to the parent and exits 1 (at once if even that fails).
 */
export function guardWorker(fatal: (stack: string) => unknown): void {
  process.on('disconnect', () => process.exit(2));
  process.on('uncaughtException', (err) => {
    try {
      sendToParent(fatal(err.stack ?? String(err)), () => process.exit(1));
    } catch {
      process.exit(1);
    }
  });
}
