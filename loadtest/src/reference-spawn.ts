/**
 * Runs the frozen reference server (reference-server.ts) as a child process,
 * so its CPU can be measured on its own and it never shares an event loop
 * with the load generator.
 */
import { fileURLToPath } from 'node:url';
import { CrowdplayError } from '@crowdplay/protocol';
import { forkTs, waitExit } from './fork.ts';

/** A reference server child. */
export interface SpawnedReferenceServer {
  url: string;
  port: number;
  pid: number;
  /** SIGTERM, then SIGKILL after 5 s; idempotent. */
  close(): Promise<void>;
}

const SERVER_FILE = fileURLToPath(new URL('./reference-server.ts', import.meta.url));

/**
 * Starts the reference server in a child process on a free loopback port.
 *
 * @param opts.channelUpdateMs update interval (CHANNEL_UPDATE_MS), ms; default 250
 * @param opts.tickMs batch period, ms; default 250
 * @param opts.startDeadlineMs how long the child may take to listen, ms; default 30_000
 * @throws CrowdplayError CP_ERR_INTERNAL when it does not listen in time or exits
 */
export async function spawnReferenceServer(
  opts: { channelUpdateMs?: number; tickMs?: number; startDeadlineMs?: number } = {},
): Promise<SpawnedReferenceServer> {
  const child = forkTs(
    SERVER_FILE,
    ['--port', '0', '--update-ms', String(opts.channelUpdateMs ?? 250), '--tick-ms', String(opts.tickMs ?? 250)],
    {
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    },
  );
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new CrowdplayError('CP_ERR_INTERNAL', [], { cause: new Error('reference server did not listen in time') }));
    }, opts.startDeadlineMs ?? 30_000);
    child.on('message', (m: unknown) => {
      const msg = m as { type?: string; port?: number };
      if (msg.type === 'listening' && typeof msg.port === 'number') {
        clearTimeout(timer);
        resolve(msg.port);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new CrowdplayError('CP_ERR_INTERNAL', [], { cause: new Error(`reference server exited with ${code}`) }));
    });
  });
  let closing: Promise<void> | null = null;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    pid: child.pid ?? -1,
    close: () => {
      closing ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
        await waitExit(child, 5_000);
      })();
      return closing;
    },
  };
}
