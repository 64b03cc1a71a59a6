/**
 * examples/first-game as a tenant runs it, outside the repository: both SDKs
 * packed with `npm pack` (their prepack builds dist/), the example copied to
 * a temporary folder and installed from the tarballs with no workspace link,
 * its JavaScript type-checked against the packages' .d.ts, then game.js and
 * crowd.js run against the product `npm start` runs (standalone, free port).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { cpSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultConfig } from '@crowdplay/config';
import { uniqueName } from '@crowdplay/testing';
import { ROOT, spawnCrowdplay, until, type ChildServer } from '../helpers.ts';

const EXAMPLE = join(ROOT, 'examples', 'first-game');
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';

/** This process's environment without npm's lifecycle variables (`npm test` sets npm_config_*, which npm would read). */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k) && k !== 'NODE_OPTIONS') env[k] = v;
  return { ...env, ...extra };
}

function run(cmd: string, args: string[], cwd: string, timeoutMs: number): SpawnSyncReturns<string> {
  const r = spawnSync(cmd, args, { cwd, env: cleanEnv(), encoding: 'utf8', timeout: timeoutMs });
  assert.equal(r.status, 0, `${cmd} ${args.join(' ')} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  return r;
}

interface Proc {
  out: () => string;
  exited: Promise<number | null>;
  kill: () => void;
}

function start(script: string, args: string[], cwd: string, env: Record<string, string>): Proc {
  const child = spawn(process.execPath, [script, ...args], { cwd, env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { out: () => out, exited, kill: () => child.kill('SIGKILL') };
}

describe('examples/first-game (the packed SDKs outside the workspace)', () => {
  const work = mkdtempSync(join(tmpdir(), 'crowdplay-first-game-'));
  const app = join(work, 'first-game');
  let server: ChildServer | undefined;
  const procs: Proc[] = [];

  before(() => {
    cpSync(EXAMPLE, app, { recursive: true, filter: (src) => !/node_modules|\.tgz$|package-lock\.json$/.test(src) });
  });

  after(async () => {
    for (const p of procs) p.kill();
    if (server) await server.stop();
    rmSync(work, { recursive: true, force: true });
  });

  it('is no workspace of the repository', () => {
    const root = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { workspaces: string[] };
    assert.ok(
      root.workspaces.every((w) => !w.startsWith('examples')),
      `root workspaces ${JSON.stringify(root.workspaces)} include examples/`,
    );
    const lock = readFileSync(join(ROOT, 'package-lock.json'), 'utf8');
    assert.doesNotMatch(lock, /"examples\//, 'the root lockfile names no example');
  });

  it('is the code docs/guides/first-game.md shows', () => {
    const guide = readFileSync(join(ROOT, 'docs', 'guides', 'first-game.md'), 'utf8');
    const shown = /<!-- file: examples\/first-game\/game\.js -->\n```js\n([\s\S]*?)```\n/.exec(guide);
    assert.ok(shown, 'the guide has a ```js block after <!-- file: examples/first-game/game.js -->');
    assert.equal(shown[1], readFileSync(join(EXAMPLE, 'game.js'), 'utf8'), 'the guide shows game.js as it is');
    assert.ok(guide.includes(readFileSync(join(EXAMPLE, 'package.json'), 'utf8')), 'the guide shows package.json as it is');
  });

  it(
    'packs both SDKs, installs them from the tarballs alone, declares, gets batches, opens and settles a round',
    { timeout: 600_000 },
    async () => {
      // 1. npm pack: each SDK's prepack builds its dist/ first.
      run(NPM, ['pack', '-w', '@crowdplay/sdk-viewer', '-w', '@crowdplay/sdk-game', '--pack-destination', app, '--silent'], ROOT, 300_000);
      const tarballs = readdirSync(app)
        .filter((f) => f.endsWith('.tgz'))
        .sort();
      const version = (sdk: string): string =>
        (JSON.parse(readFileSync(join(ROOT, 'libs', sdk, 'package.json'), 'utf8')) as { version: string }).version;
      assert.deepEqual(tarballs, [`crowdplay-sdk-game-${version('sdk-game')}.tgz`, `crowdplay-sdk-viewer-${version('sdk-viewer')}.tgz`]);
      const manifest = JSON.parse(readFileSync(join(app, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
      assert.deepEqual(
        [manifest.dependencies['@crowdplay/sdk-game'], manifest.dependencies['@crowdplay/sdk-viewer']],
        tarballs.map((t) => `file:${t}`),
        'examples/first-game/package.json names the tarballs npm pack writes (update it with the SDK version)',
      );

      // 2. npm install in the copy: the tarballs and ws (from the npm cache when it has them), no link into the repository.
      run(NPM, ['install', '--prefer-offline', '--no-audit', '--no-fund'], app, 180_000);
      for (const sdk of ['sdk-game', 'sdk-viewer']) {
        const dir = join(app, 'node_modules', '@crowdplay', sdk);
        assert.ok(!lstatSync(dir).isSymbolicLink(), `${sdk} is installed, not linked`);
        const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
          private?: boolean;
          dependencies?: Record<string, string>;
        };
        assert.notEqual(pkg.private, true, `${sdk} is not private`);
        assert.deepEqual(
          Object.keys(pkg.dependencies ?? {}).filter((d) => d.startsWith('@crowdplay/')),
          [],
          `${sdk} depends on no @crowdplay package`,
        );
        assert.deepEqual(readdirSync(dir).sort(), ['README.md', 'dist', 'package.json'], `${sdk}: only dist/ is packed`);
      }
      assert.deepEqual(readdirSync(join(app, 'node_modules', '@crowdplay')).sort(), ['sdk-game', 'sdk-viewer']);

      // 3. The example type-checks against the packages' own .d.ts (self-contained: no library check skipped).
      const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
      const check = [
        '--noEmit',
        '--allowJs',
        '--checkJs',
        '--strict',
        '--module',
        'nodenext',
        '--moduleResolution',
        'nodenext',
        '--target',
        'es2022',
      ];
      run(process.execPath, [tsc, ...check, 'game.js', 'crowd.js'], app, 120_000);
      // The check can fail: a game client without its API key is a type error from the package's .d.ts.
      writeFileSync(
        join(app, 'probe.js'),
        "import { GameClient } from '@crowdplay/sdk-game';\nnew GameClient({ url: 'http://x', channel: 'c' });\n",
      );
      const probe = spawnSync(process.execPath, [tsc, ...check, 'probe.js'], {
        cwd: app,
        env: cleanEnv(),
        encoding: 'utf8',
        timeout: 120_000,
      });
      rmSync(join(app, 'probe.js'));
      assert.notEqual(probe.status, 0, 'tsc accepted a GameClient without apiKey');
      assert.match(probe.stdout, /probe\.js.*apiKey/s, probe.stdout);

      // 4. The product as npm start runs it; its hosted client is the packed viewer's browser build.
      server = await spawnCrowdplay({}, 180_000); // PGlite's start is slow on a busy machine
      const hosted = await (await fetch(`${server.baseUrl}/sdk-viewer.js`)).text();
      assert.ok(hosted.startsWith(`/*! @crowdplay/sdk-viewer ${version('sdk-viewer')} `), hosted.slice(0, 120));
      assert.equal(hosted, readFileSync(join(app, 'node_modules/@crowdplay/sdk-viewer/dist/sdk-viewer.min.js'), 'utf8'));

      // 5. The game, then the crowd once its round is open.
      const env = {
        CROWDPLAY_URL: server.baseUrl,
        CROWDPLAY_API_KEY: defaultConfig().standalone.tenantKey,
        CROWDPLAY_CHANNEL: uniqueName('first'),
        ROUND_MS: '8000',
      };
      const game = start('game.js', [], app, env);
      procs.push(game);
      await until(() => /^round \S+ open until/m.test(game.out()) || /error|Error/.test(game.out()), 'the game opening its round', 60_000);
      assert.match(game.out(), /^declared vote \(red, blue\) on channel first/m);
      assert.match(game.out(), /^round \S+ open until/m, game.out());
      const crowd = start('crowd.js', ['3'], app, env);
      procs.push(crowd);
      const [gameCode, crowdCode] = await Promise.all([game.exited, crowd.exited]);
      assert.equal(gameCode, 0, `game.js:\n${game.out()}`);
      assert.equal(crowdCode, 0, `crowd.js:\n${crowd.out()}`);

      // fan-1 and fan-2 vote blue 3 times each, fan-3 red: every press reached the game in its batches.
      const batches = [...game.out().matchAll(/^batch ev=\d+: .* \(red (\d+), blue (\d+)\)$/gm)];
      assert.ok(batches.length > 0, `no batch line:\n${game.out()}`);
      assert.deepEqual(batches.at(-1)!.slice(1), ['3', '6'], game.out());
      assert.match(game.out(), /^round \S+ settled: blue wins, pool \[100,200\], 3 stakes$/m);
      assert.match(crowd.out(), /^fan-1 voted blue 3 times, staked 100 on blue: balance 900$/m);
      assert.match(game.out(), /^it asks "Which colour gets more votes\?"$/m);
      assert.match(crowd.out(), /^fan-3 saw round \S+ settled \(winner Blue\): you lost 100; balance 900$/m);
      assert.match(crowd.out(), /^fan-1 saw round \S+ settled \(winner Blue\): you won 50; balance 1050$/m);
      // The pool of 300 goes to the two blue stakes, 150 each.
      assert.doesNotMatch(game.out(), /^error /m);
    },
  );
});
