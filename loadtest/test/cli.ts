/** The load-test CLI as the smoke tests run it. */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LOADTEST_MAIN = join(ROOT, 'loadtest/src/main.ts');

/**
 * Runs `npm run loadtest -- <args>` as `node --import tsx loadtest/src/main.ts <args>`;
 * resolves with its exit code and output (never rejects).
 * @param hardMs SIGKILL after this long, ms
 */
export function loadtestCli(args: string[], hardMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', LOADTEST_MAIN, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const hard = setTimeout(() => child.kill('SIGKILL'), hardMs);
  return new Promise((resolve) =>
    child.once('exit', (code) => {
      clearTimeout(hard);
      resolve({ code, stdout, stderr });
    }),
  );
}
