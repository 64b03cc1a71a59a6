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
