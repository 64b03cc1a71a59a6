/**
 * A private PostgreSQL for suites and load scenarios that stop, restart or
 * kill the database (the machine's shared one is never touched): see
 * {@link ownPostgres}.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports.ts';

/** The directory of the newest PostgreSQL server binaries (`/usr/lib/postgresql/<major>/bin`), or '' to use PATH. */
function postgresBinDir(): string {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return '';
  const majors = readdirSync(root)
    .filter((d) => /^\d+$/.test(d) && existsSync(join(root, d, 'bin', 'postgres')))
    .sort((a, b) => Number(b) - Number(a));
  return majors[0] ? join(root, majors[0], 'bin') : '';
}

/** uid and gid of the `postgres` OS user, when this process is root (the server refuses to run as root); else null (run as this user). */
function postgresUser(): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  const id = (flag: string): number => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

/** Runs `cmd` to its end as `user`; resolves with its exit code and output. */
function runTo(
  cmd: string,
  args: string[],
  user: { uid: number; gid: number } | null,
  cwd: string,
): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], ...(user ?? {}) });
    let out = '';
    p.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    p.once('error', reject);
    p.once('close', (code) => resolve({ code, out }));
  });
}

/** A private PostgreSQL server (see {@link ownPostgres}). */
export interface OwnPostgres {
  /** `postgresql://postgres@127.0.0.1:<port>/<database>` (trust auth). */
  url: string;
  port: number;
  database: string;
  /** Starts the server again on the same port and data directory; resolves once it accepts connections (pg_isready), after crash recovery if it was killed. @throws Error when it is not ready within 30 s or exits first */
  start(): Promise<void>;
  /** Fast shutdown (SIGINT: open sessions are ended, a checkpoint is written); resolves when the server has exited. No-op when it is not running. */
  stop(): Promise<void>;
  /** A crash: SIGKILL to the postmaster and every server process, no checkpoint; resolves when all are gone. No-op when it is not running. */
  kill(): Promise<void>;
  /** Stops the server (fast) and removes its directory. Safe to call twice. */
  close(): Promise<void>;
  /** The server's log (stderr and stdout), every start so far. */
  output(): string;
}

/** The pids of `pid`'s child processes (read from /proc). */
function childPids(pid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      // /proc/<pid>/stat: "pid (comm) state ppid …"; comm may hold spaces and parentheses, so read after the last ')'.
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(d));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** True while `pid` runs (a zombie, killed and not yet reaped by its new parent, counts as gone). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/**
 * A private PostgreSQL for suites and load scenarios that stop, restart or
 * kill it (the machine's shared one is never touched): `initdb` (trust auth,
 * UTF8, C locale) into a temp directory, `postgres` on a free port on
 * 127.0.0.1 with its socket in that directory, `fsync=off` and
 * `shared_buffers=32MB` unless `settings` says otherwise (a test server: the
 * machine does not crash, only the server), run as the `postgres` OS user
 * when this process is root, and `database` created. Resolves once it
 * accepts connections; every later start waits the same way (pg_isready,
 * polled until a deadline).
 * @param database the database created for the product (default `test`)
 * @param settings server settings (`postgres -c name=value`) over those defaults, e.g. `{ fsync: 'on' }` for a load
 *   scenario that measures it like the machine's server
 * @throws Error when initdb, the first start or createdb fails
 */
export async function ownPostgres(database = 'test', settings: Readonly<Record<string, string>> = {}): Promise<OwnPostgres> {
  const serverSettings = { fsync: 'off', shared_buffers: '32MB', ...settings, listen_addresses: '127.0.0.1' };
  const bin = postgresBinDir();
  const tool = (name: string): string => (bin ? join(bin, name) : name);
  const user = postgresUser();
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'cp-postgres-'));
  const data = join(dir, 'data');
  const sock = join(dir, 'sock');
  mkdirSync(sock);
  if (user) {
    chownSync(dir, user.uid, user.gid);
    chownSync(sock, user.uid, user.gid);
  }
  let out = '';
  let proc: ChildProcess | null = null;
  let closed = false;
  const running = (): boolean => proc !== null && proc.exitCode === null && proc.signalCode === null;
  const exitOf = (p: ChildProcess): Promise<void> =>
    p.exitCode !== null || p.signalCode !== null ? Promise.resolve() : new Promise((r) => p.once('exit', () => r()));
  const ready = async (ms: number): Promise<void> => {
    const deadline = Date.now() + ms;
    for (;;) {
      if (!running()) throw new Error(`postgres exited before accepting connections:\n${out}`);
      // 0: accepting; 1: rejecting (starting up, crash recovery); 2: no answer yet.
      const r = await runTo(
        tool('pg_isready'),
        ['-q', '-h', '127.0.0.1', '-p', String(port), '-d', 'postgres', '-U', 'postgres'],
        null,
        dir,
      );
      if (r.code === 0) return;
      if (Date.now() > deadline) throw new Error(`postgres not accepting on ${port} within ${ms} ms:\n${out}`);
      await new Promise((res) => setTimeout(res, 50));
    }
  };
  const start = async (): Promise<void> => {
    if (running()) return;
    const args = ['-D', data, '-p', String(port), '-k', sock, ...Object.entries(serverSettings).flatMap(([k, v]) => ['-c', `${k}=${v}`])];
    const p = spawn(tool('postgres'), args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], ...(user ?? {}) });
    p.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    p.once('error', (err) => (out += `spawn: ${err.message}\n`));
    proc = p;
    await ready(30_000);
  };
  const stop = async (): Promise<void> => {
    const p = proc;
    if (!p || !running()) return;
    const gone = exitOf(p);
    p.kill('SIGINT');
    await gone;
  };
  const kill = async (): Promise<void> => {
    const p = proc;
    if (!p || !running() || p.pid === undefined) return;
    // Every server process is its own process group's leader (postmaster children call setsid), so list them before the
    // postmaster dies and they are re-parented; a backend left over would keep the shared memory and refuse the next start.
    const children = childPids(p.pid);
    const gone = exitOf(p);
    p.kill('SIGKILL');
    for (const c of children) {
      try {
        process.kill(c, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await gone;
    const deadline = Date.now() + 10_000;
    while (children.some(alive)) {
      if (Date.now() > deadline) throw new Error(`postgres processes ${children.filter(alive).join(', ')} still alive 10 s after SIGKILL`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  // A test process that ends without close() (a failed suite) leaves no server and no directory behind.
  process.once('exit', () => {
    if (proc?.pid !== undefined && running()) {
      for (const pid of [...childPids(proc.pid), proc.pid]) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
    rmSync(dir, { recursive: true, force: true });
  });
  const fail = async (what: string, r: { code: number | null; out: string }): Promise<never> => {
    await stop();
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`${what} exited ${r.code}:\n${r.out}${out}`);
  };
  const init = await runTo(
    tool('initdb'),
    ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync'],
    user,
    dir,
  );
  if (init.code !== 0) return fail('initdb', init);
  try {
    await start();
  } catch (err) {
    return fail('postgres', { code: null, out: String(err) });
  }
  const created = await runTo(tool('createdb'), ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', database], null, dir);
  if (created.code !== 0) return fail('createdb', created);
  return {
    url: `postgresql://postgres@127.0.0.1:${port}/${database}`,
    port,
    database,
    start,
    stop,
    kill,
    async close() {
      if (closed) return;
      closed = true;
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
    output: () => out,
  };
}
