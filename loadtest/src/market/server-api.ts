/**
 * What the market scenario asks of the server outside the WebSockets:
 * funding (POST /v1/grants), wallet reads (GET /v1/balances/:viewer), both
 * with the tenant API key, and `crowdplay ledger verify` run as the CLI
 * (a child process reading the server's PostgreSQL).
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { CrowdplayError } from '@crowdplay/protocol';
import { tsxImport } from '../fork.ts';

/** The CLI entry point (services/cli/src/main.ts) in this repository. */
export const CLI_MAIN = fileURLToPath(new URL('../../../services/cli/src/main.ts', import.meta.url));

/** `http(s)://host:port[/prefix]` for a gateway URL given as http(s) or ws(s). */
export function httpBase(url: string): string {
  const u = new URL(url);
  if (u.protocol === 'ws:') u.protocol = 'http:';
  else if (u.protocol === 'wss:') u.protocol = 'https:';
  return u.toString().replace(/\/+$/, '');
}

function httpError(what: string, status: number, body: string): CrowdplayError {
  let code = '';
  try {
    code = String((JSON.parse(body) as { code?: unknown }).code ?? '');
  } catch {
    // not JSON
  }
  return new CrowdplayError('CP_ERR_INTERNAL', [], {
    cause: new Error(`${what}: HTTP ${status}${code ? ` ${code}` : ''}: ${body.slice(0, 200)}`),
  });
}

/**
 * Grants `points` to `viewer` (POST /v1/grants, idempotency id `id`).
 *
 * @returns the viewer's wallet balance after the grant, points
 * @throws CrowdplayError CP_ERR_INTERNAL with the HTTP status and the server's
 *   code in its cause (e.g. 401 CP_ERR_AUTH_INVALID for a wrong key), or the fetch error
 */
export async function grant(base: string, apiKey: string, viewer: string, points: number, id: string): Promise<number> {
  const res = await fetch(`${base}/v1/grants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ viewer, points, id }),
    signal: AbortSignal.timeout(30_000),
  });
  const body = await res.text();
  if (res.status !== 200) throw httpError(`grant to ${viewer}`, res.status, body);
  return (JSON.parse(body) as { balance: number }).balance;
}

/**
 * The viewer's wallet balance (GET /v1/balances/:viewer), points.
 * @throws CrowdplayError CP_ERR_INTERNAL as {@link grant}
 */
export async function balanceOf(base: string, apiKey: string, viewer: string): Promise<number> {
  const res = await fetch(`${base}/v1/balances/${encodeURIComponent(viewer)}`, {
    headers: { authorization: `Bearer ${apiKey}` },
    signal: AbortSignal.timeout(30_000),
  });
  const body = await res.text();
  if (res.status !== 200) throw httpError(`balance of ${viewer}`, res.status, body);
  return (JSON.parse(body) as { balance: number }).balance;
}

/** Runs `fn` over `items`, `concurrency` at a time, in order of start. */
export async function eachLimited<T>(items: readonly T[], concurrency: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, worker));
}

/** The outcome of `crowdplay ledger verify`. */
export interface VerifyOutcome {
  /** `ok`, or the failure lines the CLI printed (one per failed invariant, then its summary), or `error: …` when it could not run. */
  result: string;
  ms: number;
}

/**
 * Runs `node --import tsx services/cli/src/main.ts ledger verify` with
 * DATABASE_URL / DATABASE_SCHEMA set, and waits for it (killed by pid after
 * `timeoutMs`). The rest of this process's environment is passed through.
 */
export async function ledgerVerify(databaseUrl: string, databaseSchema: string, timeoutMs = 120_000): Promise<VerifyOutcome> {
  const t0 = performance.now();
  const child = spawn(process.execPath, ['--import', tsxImport(), CLI_MAIN, 'ledger', 'verify'], {
    env: { ...process.env, DATABASE_URL: databaseUrl, DATABASE_SCHEMA: databaseSchema, LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill('SIGKILL');
  }, timeoutMs);
  const code = await new Promise<number | null>((resolve) => {
    child.once('error', (e) => {
      err += e.message;
      resolve(null);
    });
    child.once('exit', (c) => resolve(c));
  });
  clearTimeout(timer);
  const ms = Math.round(performance.now() - t0);
  const text = out.trim();
  if (code === 0 && /^ledger verify: ok$/m.test(text)) return { result: 'ok', ms };
  if (code === 1 && /ledger verify: \d+ failure/.test(text)) return { result: text, ms };
  const why = timedOut ? `no answer within ${timeoutMs} ms` : `exit ${code}`;
  return { result: `error: ${why}: ${(err.trim() || text).split('\n').slice(0, 5).join(' | ')}`, ms };
}
