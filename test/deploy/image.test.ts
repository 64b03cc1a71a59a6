/**
 * infra/Dockerfile, offline (no Docker engine here): the parsed file's
 * invariants, a deliberately broken copy reported, and the runtime stage
 * reproduced in a temporary directory — its COPY instructions applied from
 * the repository and the build stage's outputs (the bundle built by
 * scripts/build.mjs, the manifests of infra/prod-manifests.mjs), its RUN
 * executed (npm ci --omit=dev from the local npm cache) — then the bundle run
 * from there: no dev dependency installed, the fonts load in a render thread,
 * and a gateway started by the image's ENTRYPOINT and CMD (scripts/start.sh)
 * on PostgreSQL + NATS + Redis exports the process settings npm start gives,
 * migrates, serves /readyz, the viewer page and the SDK bundle, and drains on SIGTERM.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serviceUrls, testSchema, uniqueName, type TestSchema } from '@crowdplay/testing';
import { buildProduct } from '../../scripts/build.mjs';
import { writeProdManifests } from '../../infra/prod-manifests.mjs';
import { ROOT } from '../helpers.ts';
import { args, dockerfileProblems, flags, repoDockerfile, stages } from './dockerfile.ts';
import { npmStartSettings, scrapedStartSettings, withoutProcessStartVariables } from './process-start.ts';

describe('infra/Dockerfile (parsed)', () => {
  it('multi-stage on a pinned node:20 Debian image, non-root numeric USER, npm ci --omit=dev, COPY paths exist and are not ignored', () => {
    const d = repoDockerfile(ROOT);
    assert.deepEqual(dockerfileProblems(d.text, ROOT, d.ignore), []);
    const s = stages(d.text);
    assert.deepEqual(
      s.map((x) => x.name),
      ['build', 'runtime'],
    );
  });

  it('a broken Dockerfile is reported: root user, dev dependencies, a missing path, an unpinned base, an ignored path, node as the entry point', () => {
    const d = repoDockerfile(ROOT);
    const broken = d.text
      .replace('USER 1000:1000', 'USER 0')
      .replace('--omit=dev ', '')
      .replace('COPY libs/protocol/src/', 'COPY libs/no-such-lib/src/')
      .replace('ARG NODE_IMAGE=node:20.20.2-bookworm-slim', 'ARG NODE_IMAGE=node:latest')
      .replace('ENTRYPOINT ["sh", "scripts/start.sh"]', 'ENTRYPOINT ["node", "dist/crowdplay.js"]')
      .replace('COPY scripts/start.sh scripts/start.sh\n', '');
    const problems = dockerfileProblems(broken, ROOT, `${d.ignore}\nservices/gateway/public\n`);
    for (const p of [
      /runtime: USER is root/,
      /runtime: no `npm ci --omit=dev`/,
      /installs without --omit=dev/,
      /libs\/no-such-lib\/src\/: no such path/,
      /base image node:latest/,
      /services\/gateway\/public\/: excluded by .dockerignore/,
      /runtime: ENTRYPOINT is not \["sh","scripts\/start.sh"\]/,
      /runtime: scripts\/start.sh is not copied/,
    ])
      assert.ok(
        problems.some((x) => p.test(x)),
        `${p} not in ${JSON.stringify(problems)}`,
      );
    assert.deepEqual(dockerfileProblems(d.text, ROOT, d.ignore), []); // the file itself is unchanged
  });
});

describe('infra/Dockerfile runtime stage, reproduced in a directory', () => {
  const work = mkdtempSync(join(tmpdir(), 'crowdplay-image-'));
  const app = join(work, 'app');
  // Built at the depth of dist/ so the bundle's paths beside itself (../libs/…) are the image's.
  const outdir = join(ROOT, `.image-test-dist-${process.pid}`);
  let schema: TestSchema | undefined;

  before(async () => {
    await buildProduct({ outdir, quiet: true });
    const manifests = join(work, 'manifests');
    writeProdManifests(manifests);
    const runtime = stages(repoDockerfile(ROOT).text).at(-1)!;
    mkdirSync(app, { recursive: true });
    const build = (p: string): string => {
      if (p.startsWith('/src/dist')) return join(outdir, p.slice('/src/dist'.length));
      if (p.startsWith('/manifests')) return join(manifests, p.slice('/manifests'.length));
      throw new Error(`unknown build-stage path ${p}: teach this test where the build stage makes it`);
    };
    for (const i of runtime.instructions) {
      const kw = i.getKeyword();
      if (kw === 'COPY') {
        const a = args(i);
        const dest = join(app, a.at(-1)!);
        for (const src of a.slice(0, -1)) cpSync(flags(i).from ? build(src) : join(ROOT, src), dest, { recursive: true });
      } else if (kw === 'RUN') {
        const r = spawnSync('sh', ['-c', i.getArgumentsContent()!], {
          cwd: app,
          encoding: 'utf8',
          // The local npm cache (filled by the checkout's npm install) instead of the registry where it can.
          env: { ...process.env, npm_config_prefer_offline: 'true' },
          timeout: 120_000,
        });
        assert.equal(r.status, 0, `RUN ${i.getArgumentsContent()}\n${r.stdout}\n${r.stderr}`);
      }
    }
  });

  after(async () => {
    rmSync(work, { recursive: true, force: true });
    rmSync(outdir, { recursive: true, force: true });
    await schema?.drop();
  });

  it('holds production dependencies only, the font packages, and no source it does not need', () => {
    const nm = join(app, 'node_modules');
    for (const dev of ['typescript', 'eslint', 'tsx', 'testcontainers', 'fast-check', 'prettier', 'hdr-histogram-js'])
      assert.ok(!existsSync(join(nm, dev)), `${dev} installed in the runtime stage`);
    for (const prod of ['@napi-rs/canvas', '@fontsource-variable/noto-sans-sc', 'twemoji-colr-font', 'esbuild', 'fastify', 'pg', 'bullmq'])
      assert.ok(existsSync(join(nm, prod)), `${prod} missing in the runtime stage`);
    assert.ok(!existsSync(join(app, 'services/gateway/src')), 'service sources copied (the bundle holds them)');
  });

  it('the render thread registers every board font from there (a missing font package throws)', () => {
    const r = spawnSync(
      process.execPath,
      [
        '-e',
        "const w = new (require('node:worker_threads').Worker)('./dist/render-worker.js'); w.on('error', (e) => { console.error(e); process.exit(1); });",
      ],
      { cwd: app, encoding: 'utf8', timeout: 60_000 },
    );
    assert.equal(r.status, 0, r.stderr);
  });

  it('its ENTRYPOINT + CMD (`service gateway`) from there: the settings of npm start, migrates, /readyz 200, the page and /sdk-viewer.js, exit 0 on SIGTERM', async () => {
    const urls = await serviceUrls();
    schema = await testSchema();
    const runtime = stages(repoDockerfile(ROOT).text).at(-1)!;
    const exec = (kw: string): string[] =>
      JSON.parse(
        runtime.instructions
          .filter((i) => i.getKeyword() === kw)
          .at(-1)!
          .getArgumentsContent()!,
      ) as string[];
    const [command, ...argv] = [...exec('ENTRYPOINT'), ...exec('CMD')];
    const child = spawn(command!, argv, {
      cwd: app,
      env: {
        ...withoutProcessStartVariables({ PATH: process.env.PATH }),
        CROWDPLAY_MODE: 'cluster',
        DATABASE_URL: urls.databaseUrl,
        DATABASE_SCHEMA: schema.schema,
        NATS_URL: urls.natsUrl,
        REDIS_URL: urls.redisUrl,
        BUS_SUBJECT_PREFIX: uniqueName('img'),
        HOST: '127.0.0.1',
        PORT: '0',
        METRICS_ON_PORT: 'true',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    try {
      const deadline = Date.now() + 60_000;
      let m: RegExpExecArray | null;
      while (!(m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out))) {
        assert.ok(Date.now() < deadline && child.exitCode === null, `gateway not listening:\n${out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const base = m[1]!;
      assert.equal((await fetch(`${base}/readyz`)).status, 200);
      // The process started as npm start starts it: the same values read back and exported.
      assert.deepEqual(scrapedStartSettings(await (await fetch(`${base}/metrics`)).text()), npmStartSettings(ROOT));
      const page = await fetch(`${base}/`);
      assert.equal(page.status, 200);
      assert.match(await page.text(), /<html/i);
      const sdk = await fetch(`${base}/sdk-viewer.js`);
      assert.equal(sdk.status, 200, out);
      assert.match(await sdk.text(), /ViewerClient/);
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      child.kill('SIGTERM');
      assert.equal(await exited, 0, out);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});
