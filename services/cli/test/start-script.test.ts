/**
 * scripts/start.sh (`npm start`, the image's entry point): applies SEMI_SPACE_MB
 * and the fixed glibc values when node starts, execs node (same pid), refuses a
 * bad SEMI_SPACE_MB before node runs (its default and range are the setting's,
 * libs/config). And processStartSettings reads them back as node and glibc do.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { schema } from '@crowdplay/config';
import { processStartSettings, releaseSemiSpaceFlag } from '../src/allocator.ts';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const SCRIPT = join(ROOT, 'scripts', 'start.sh');

interface Seen {
  pid: number;
  execArgv: string[];
  args: string[];
  arena: string | null;
  mmap: string | null;
  semi: string | null;
}

/** Runs start.sh with a stand-in bundle that reports what node got. */
async function run(
  env: Record<string, string | undefined>,
): Promise<{ code: number | null; stderr: string; pid: number; seen: Seen | null }> {
  const dir = mkdtempSync(join(tmpdir(), 'crowdplay-start-'));
  try {
    const marker = join(dir, 'ran.json');
    const bundle = join(dir, 'bundle.mjs');
    writeFileSync(
      bundle,
      `import { writeFileSync } from 'node:fs';
writeFileSync(${JSON.stringify(marker)}, JSON.stringify({ pid: process.pid, execArgv: process.execArgv, args: process.argv.slice(2),
  arena: process.env.MALLOC_ARENA_MAX ?? null, mmap: process.env.MALLOC_MMAP_THRESHOLD_ ?? null, semi: process.env.SEMI_SPACE_MB ?? null }));\n`,
    );
    const base: Record<string, string | undefined> = { ...process.env, CROWDPLAY_BUNDLE: bundle, CROWDPLAY_NODE: process.execPath };
    delete base.SEMI_SPACE_MB;
    delete base.MALLOC_ARENA_MAX;
    delete base.MALLOC_MMAP_THRESHOLD_;
    const child = spawn('sh', [SCRIPT, 'start'], { env: { ...base, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((res) => child.once('exit', (c) => res(c)));
    const seen = existsSync(marker) ? (JSON.parse(readFileSync(marker, 'utf8')) as Seen) : null;
    return { code, stderr, pid: child.pid!, seen };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('cli - scripts/start.sh (npm start, the image)', () => {
  it('starts node itself (same pid) with --max-semi-space-size=4, MALLOC_ARENA_MAX=2 and a 1 MiB mmap threshold, passing the arguments on', async () => {
    const r = await run({});
    assert.equal(r.code, 0, r.stderr);
    assert.ok(r.seen);
    assert.equal(r.seen.pid, r.pid, 'exec: the started process is node');
    assert.deepEqual(r.seen.execArgv, ['--max-semi-space-size=4']);
    assert.deepEqual(r.seen.args, ['start']);
    assert.equal(r.seen.arena, '2');
    assert.equal(r.seen.mmap, '1048576');
    assert.equal(r.seen.semi, '4');
  });

  it('takes SEMI_SPACE_MB in the forms libs/config reads (passed on as plain digits); leaves glibc its own variables when they are set', async () => {
    for (const [env, want] of [
      [{ SEMI_SPACE_MB: '16' }, { semi: '16', arena: '2', mmap: '1048576' }],
      [{ SEMI_SPACE_MB: ' 0_8 ' }, { semi: '8', arena: '2', mmap: '1048576' }],
      [
        { MALLOC_ARENA_MAX: '4', MALLOC_MMAP_THRESHOLD_: '262144' },
        { semi: '4', arena: '4', mmap: '262144' },
      ],
      [
        { SEMI_SPACE_MB: '', MALLOC_ARENA_MAX: '' },
        { semi: '4', arena: '2', mmap: '1048576' },
      ],
    ] as const) {
      const r = await run(env);
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(r.seen?.execArgv, [`--max-semi-space-size=${want.semi}`], JSON.stringify(env));
      assert.deepEqual([r.seen?.semi, r.seen?.arena, r.seen?.mmap], [want.semi, want.arena, want.mmap], JSON.stringify(env));
    }
    // What the process passes on is what libs/config reads from the same variable.
    assert.deepEqual(schema.runtime.semiSpaceMb.parse(' 0_8 '), { ok: true, value: 8 });
  });

  it("puts CROWDPLAY_NODE_ARGS, split at spaces and not expanded, before the script (the local cluster's children)", async () => {
    const r = await run({ CROWDPLAY_NODE_ARGS: '--stack-trace-limit=20  --no-deprecation *' });
    assert.equal(r.code, 1, 'node takes "*" as the script: the bundle never runs');
    assert.match(r.stderr, /Cannot find module .*\*/, 'the pattern reached node as it is, not expanded');
    const ok = await run({ CROWDPLAY_NODE_ARGS: '--stack-trace-limit=20  --no-deprecation' });
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(ok.seen?.pid, ok.pid, 'still exec: the started process is node');
    assert.deepEqual(ok.seen?.execArgv, ['--stack-trace-limit=20', '--no-deprecation', '--max-semi-space-size=4']);
    assert.deepEqual(ok.seen?.args, ['start']);
  });

  it('refuses a bad SEMI_SPACE_MB by name with exit code 2, and node never runs', async () => {
    for (const value of ['abc', '0', '2048', '99999999999999999999', '8 --inspect', '1 0', '__', ' ', '0_000', '1e3', '-1']) {
      const r = await run({ SEMI_SPACE_MB: value });
      assert.equal(r.code, 2, `SEMI_SPACE_MB=${value}`);
      assert.match(r.stderr, /SEMI_SPACE_MB must be a whole number 1–1024/, `SEMI_SPACE_MB=${value}`);
      assert.equal(r.seen, null, `SEMI_SPACE_MB=${value}: node did not run`);
      assert.equal(schema.runtime.semiSpaceMb.parse(value).ok, false, `libs/config refuses ${JSON.stringify(value)} too`);
    }
  });

  it('has the setting’s default and range (libs/config), and is what npm start runs', () => {
    const text = readFileSync(SCRIPT, 'utf8');
    const semi = schema.runtime.semiSpaceMb;
    assert.ok(text.includes(`semi="\${SEMI_SPACE_MB:-${semi.default}}"`), 'SEMI_SPACE_MB default');
    const range = (type: string): string => /^integer (\d+)–(\d+)$/.exec(type)!.slice(1).join(' ');
    assert.ok(text.includes(`check SEMI_SPACE_MB "$semi" ${range(semi.type)}`), 'SEMI_SPACE_MB range');
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    assert.equal(pkg.scripts.start, 'exec sh scripts/start.sh start');
  });
});

describe('cli - processStartSettings', () => {
  it('reads --max-semi-space-size from the command line over NODE_OPTIONS (last one given), MALLOC_ARENA_MAX from the environment', () => {
    const none = { semiSpaceMb: null, mallocArenaMax: null, mallocMmapThreshold: null, mimallocAllowThp: null, mimallocPurgeDelayMs: null };
    assert.deepEqual(processStartSettings([], {}), none);
    assert.deepEqual(
      processStartSettings(['--max-semi-space-size=8'], {
        MALLOC_ARENA_MAX: '2',
        MALLOC_MMAP_THRESHOLD_: '1048576',
        MIMALLOC_ALLOW_THP: '0',
        MIMALLOC_PURGE_DELAY: '0',
      }),
      { semiSpaceMb: 8, mallocArenaMax: 2, mallocMmapThreshold: 1_048_576, mimallocAllowThp: 0, mimallocPurgeDelayMs: 0 },
    );
    assert.deepEqual(
      processStartSettings(['--max_semi_space_size', '12'], { NODE_OPTIONS: '--max-semi-space-size=4', MALLOC_ARENA_MAX: '0' }),
      { ...none, semiSpaceMb: 12 },
    );
    assert.deepEqual(processStartSettings([], { NODE_OPTIONS: '--max-semi-space-size=4 --max-semi-space-size=6' }).semiSpaceMb, 6);
    assert.deepEqual(
      processStartSettings(['--max-semi-space-size=x'], {
        MALLOC_ARENA_MAX: 'two',
        MALLOC_MMAP_THRESHOLD_: '1M',
        MIMALLOC_ALLOW_THP: 'on',
        MIMALLOC_PURGE_DELAY: ' 5',
      }),
      none,
    );
  });
});

describe('cli - releaseSemiSpaceFlag', () => {
  /** A node started with --max-semi-space-size=8 (as by start.sh): the young generation a worker with a 4 MB limit gets, MB. */
  async function workerNewSpaceMb(release: boolean): Promise<number> {
    const allocator = fileURLToPath(new URL('../src/allocator.ts', import.meta.url));
    const code = `
      import { setFlagsFromString, getHeapSpaceStatistics } from 'node:v8';
      import { Worker } from 'node:worker_threads';
      const { processStartSettings, releaseSemiSpaceFlag } = await import(${JSON.stringify(allocator)});
      if (${release}) releaseSemiSpaceFlag(processStartSettings(process.execArgv, process.env), setFlagsFromString);
      const src = "Promise.all([import('node:v8'), import('node:worker_threads')]).then(([v8, wt]) => {" +
        " const keep = []; for (let i = 0; i < 2e6; i++) { const o = { i }; if (i % 100 === 0) keep.push(o); }" +
        " wt.parentPort.postMessage(v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size); });";
      const w = new Worker(src, { eval: true, resourceLimits: { maxYoungGenerationSizeMb: 4 } });
      w.once('message', (n) => { process.stdout.write(String(n / 1048576)); void w.terminate(); });`;
    const child = spawn(process.execPath, ['--import', 'tsx', '--max-semi-space-size=8', '--input-type=module', '-e', code], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    await new Promise((res) => child.once('exit', res));
    return Number(out);
  }

  it('resets the flag only when the process started with one; then a worker gets the young generation its resourceLimits ask for', async () => {
    const calls: string[] = [];
    const started = { semiSpaceMb: null, mallocArenaMax: 2, mallocMmapThreshold: null, mimallocAllowThp: 0, mimallocPurgeDelayMs: 0 };
    assert.equal(
      releaseSemiSpaceFlag({ ...started, semiSpaceMb: null }, (f) => calls.push(f)),
      false,
    );
    assert.equal(calls.length, 0);
    assert.equal(
      releaseSemiSpaceFlag({ ...started, semiSpaceMb: 8 }, (f) => calls.push(f)),
      true,
    );
    assert.deepEqual(calls, ['--max-semi-space-size=0']);
    const [kept, released] = await Promise.all([workerNewSpaceMb(false), workerNewSpaceMb(true)]);
    assert.ok(kept > 4, `without the reset the flag wins over resourceLimits: ${kept} MB`);
    assert.ok(released > 0 && released <= 4, `with it, the worker's own limit: ${released} MB`);
  });
});
