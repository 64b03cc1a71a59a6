#!/usr/bin/env node
// Builds the runnable product: `dist/crowdplay.js` (the `crowdplay` CLI, every
// service; its body in `dist/cli-<hash>.js`, loaded after the allocator defaults are
// set: services/cli/src/main.ts) and `dist/render-worker.js` (the board render
// thread), bundled with
// esbuild from the TypeScript sources. `npm start` runs the bundle, not tsx:
// measured idle here (standalone, PostgreSQL + Redis + Telegram on, after
// 12 s, /proc VmRSS): 203 MB instead of 286 MB under tsx with 2 render
// threads, 156 MB instead of 198 MB with boards off (tsx's ESM hooks run
// on a loader thread beside the main thread and beside each render
// thread). Tests and `npm run crowdplay` keep running the sources under tsx.
//
// What the bundle holds: every @crowdplay/* package; npm packages stay
// outside (imported from node_modules at run time) unless they are installed
// only inside a workspace (then they are bundled: node_modules/ at the root
// would not find them). `import.meta.url` in a source file is rewritten to
// that file's own URL (relative to the bundle), so paths a module computes
// beside itself (migrations, public/, fonts' packages) stay right; the render
// pool's thread module becomes render-worker.js beside the bundle. Beside it
// too: `sdk-viewer.js`, the hosted viewer client (libs/sdk-viewer built by
// scripts/build-sdk.mjs, with the package version in its banner), which the
// gateway serves at GET /sdk-viewer.js (services/gateway/src/http.ts
// SDK_VIEWER_PREBUILT, whose URL is left relative to the bundle).
//
// Usage: node scripts/build.mjs [--outdir DIR]   (default: dist/)
// Exits non-zero (and writes nothing usable) on any build error.
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { buildHostedViewer } from './build-sdk.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const POOL_WORKER = "new URL('./worker.ts', import.meta.url)";
const SDK_VIEWER_PREBUILT = "new URL('./sdk-viewer.js', import.meta.url)";

/**
 * Builds the bundle into `outdir`.
 * @param {{ outdir?: string, quiet?: boolean }} [o]
 * @returns {Promise<{ main: string, worker: string, ms: number }>} absolute paths of the two entries (their chunks and
 *   sdk-viewer.js beside them)
 * @throws Error on a build error, or when libs/board/src/pool.ts no longer names its worker as POOL_WORKER, or
 *   services/gateway/src/http.ts its prebuilt viewer client as SDK_VIEWER_PREBUILT
 */
export async function buildProduct(o = {}) {
  const t0 = performance.now();
  const { build } = await import('esbuild');
  const outdir = resolve(o.outdir ?? join(ROOT, 'dist'));
  const sources = {
    name: 'crowdplay-sources',
    setup(b) {
      b.onLoad({ filter: /[\\/](libs|services)[\\/][^\\/]+[\\/]src[\\/].*\.ts$/ }, (args) => {
        let src = readFileSync(args.path, 'utf8');
        if (src.startsWith('#!')) src = src.slice(src.indexOf('\n') + 1); // the bundle is run with node, not the sources' tsx
        if (args.path.endsWith(join('libs', 'board', 'src', 'pool.ts'))) {
          if (!src.includes(POOL_WORKER))
            throw new Error(`libs/board/src/pool.ts no longer contains ${POOL_WORKER}: update scripts/build.mjs`);
          // The bundle's own URL here: the thread module is render-worker.js beside it.
          src = src.replace(POOL_WORKER, "new URL('./render-worker.js', import.meta.url)");
        } else if (src.includes('import.meta.url')) {
          const gatewayHttp = args.path.endsWith(join('services', 'gateway', 'src', 'http.ts'));
          if (gatewayHttp && !src.includes(SDK_VIEWER_PREBUILT))
            throw new Error(`services/gateway/src/http.ts no longer contains ${SDK_VIEWER_PREBUILT}: update scripts/build.mjs`);
          // The prebuilt viewer client is beside the bundle: that URL keeps the bundle's own import.meta.url.
          if (gatewayHttp) src = src.replace(SDK_VIEWER_PREBUILT, '__crowdplaySdkViewerPrebuilt__');
          const rel = relative(outdir, args.path).split('\\').join('/');
          src = src.replaceAll('import.meta.url', `new URL(${JSON.stringify(rel)}, import.meta.url).href`);
          if (gatewayHttp) src = src.replace('__crowdplaySdkViewerPrebuilt__', SDK_VIEWER_PREBUILT);
        }
        return { contents: src, loader: 'ts' };
      });
    },
  };
  const packages = {
    name: 'crowdplay-packages',
    setup(b) {
      b.onResolve({ filter: /^[^./]/ }, (args) => {
        if (args.path.startsWith('@crowdplay/') || args.path.startsWith('node:')) return undefined;
        const parts = args.path.split('/');
        const name = args.path.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
        return existsSync(join(ROOT, 'node_modules', name)) ? { path: args.path, external: true } : undefined;
      });
    },
  };
  const result = await build({
    absWorkingDir: ROOT,
    metafile: true,
    entryPoints: { crowdplay: 'services/cli/src/main.ts', 'render-worker': 'libs/board/src/worker.ts' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    outdir,
    // main.ts imports cli.ts dynamically so that the allocator defaults are in the environment before
    // @napi-rs/canvas loads (services/cli/src/allocator.ts): with splitting, cli.ts and its npm imports
    // stay in their own chunk instead of being hoisted above main.ts's code.
    splitting: true,
    // Chunks beside the entries: import.meta.url rewrites (above) are relative to outdir.
    chunkNames: '[name]-[hash]',
    plugins: [sources, packages],
    logLevel: o.quiet ? 'error' : 'warning',
    // Bundled CommonJS dependencies may call require().
    banner: {
      js: "import { createRequire as __crowdplayRequire } from 'node:module'; const require = __crowdplayRequire(import.meta.url);",
    },
  });
  writeFileSync(join(outdir, 'sdk-viewer.js'), await buildHostedViewer());
  // Chunk names carry a content hash: drop the chunks an earlier build left (npm start rebuilds every time).
  const written = new Set(Object.keys(result.metafile.outputs).map((f) => resolve(ROOT, f)));
  for (const f of readdirSync(outdir)) {
    if (/^(cli|chunk)-[A-Z0-9]+\.js$/.test(f) && !written.has(join(outdir, f))) rmSync(join(outdir, f), { force: true });
  }
  return { main: join(outdir, 'crowdplay.js'), worker: join(outdir, 'render-worker.js'), ms: performance.now() - t0 };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const i = process.argv.indexOf('--outdir');
  buildProduct(i > 0 ? { outdir: process.argv[i + 1] } : {}).then(
    (r) => console.log(`[crowdplay] built ${relative(process.cwd(), r.main)} in ${Math.round(r.ms)} ms`),
    (err) => {
      console.error(err instanceof Error ? err.message : err);
      process.exit(1);
    },
  );
}
