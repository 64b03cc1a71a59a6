#!/usr/bin/env node
// Builds the two SDK packages for use outside the monorepo (`npm pack -w
// @crowdplay/sdk-viewer`, `-w @crowdplay/sdk-game` run it as their prepack):
//
//   libs/sdk-viewer/dist/index.js          ESM for Node and bundlers (es2022, not minified)
//   libs/sdk-viewer/dist/index.d.ts        its types, in one self-contained file
//   libs/sdk-viewer/dist/sdk-viewer.min.js the hosted browser client (ESM, minified, version banner):
//                                          what the gateway serves at GET /sdk-viewer.js
//   libs/sdk-game/dist/index.js, index.d.ts
//
// What a package holds: everything it uses from @crowdplay/protocol (and
// TypeBox, which protocol builds on) is bundled into its JS and inlined into
// its .d.ts, so it depends on nothing private. sdk-game also holds the
// viewer SDK's connection code (one copy of CrowdplayError with its own, so
// `isCrowdplayError` keeps recognising the errors the shared socket raises);
// its only runtime dependency is `ws`. Inside the monorepo nothing imports
// dist/: tsconfig.base.json's `paths` send tsc, tsx and esbuild to src/.
//
// Types: dts-bundle-generator over tsconfig.sdk.json, which then type-checks
// the file it wrote (skipLibCheck off).
//
// Usage: node scripts/build-sdk.mjs [sdk-viewer|sdk-game …]   (default: both)
// Exits non-zero on a build or type error.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** The SDK packages this script builds: folder under libs/ → what their JS leaves to node_modules. */
export const SDKS = {
  'sdk-viewer': { external: [] },
  'sdk-game': { external: ['ws'] },
};

/** The file name of the hosted browser client inside libs/sdk-viewer/dist/ (and beside the product bundle: sdk-viewer.js). */
export const HOSTED_VIEWER_FILE = 'sdk-viewer.min.js';

/**
 * The version of one SDK package, from its package.json.
 * @param {keyof typeof SDKS} sdk
 * @returns {string} e.g. `0.1.0`
 */
export function sdkVersion(sdk) {
  return JSON.parse(readFileSync(join(ROOT, 'libs', sdk, 'package.json'), 'utf8')).version;
}

/**
 * The first line of the hosted viewer client: names the package and its version.
 * @param {string} version the package version
 * @returns {string} a `/*! … *\/` comment (kept by minifiers)
 */
export function hostedViewerBanner(version) {
  return `/*! @crowdplay/sdk-viewer ${version} — the crowdplay viewer client for browsers (ESM). */`;
}

/**
 * The hosted browser client: libs/sdk-viewer bundled with what it uses of
 * @crowdplay/protocol, ESM, es2022, minified, behind its version banner.
 * @returns {Promise<string>} the JavaScript text
 * @throws the esbuild build error
 */
export async function buildHostedViewer() {
  const { build } = await import('esbuild');
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: ['libs/sdk-viewer/src/index.ts'],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    minify: true,
    write: false,
    logLevel: 'silent',
    banner: { js: hostedViewerBanner(sdkVersion('sdk-viewer')) },
  });
  const out = result.outputFiles[0];
  if (!out) throw new Error('esbuild produced no output for the hosted viewer client');
  return out.text;
}

/**
 * Builds one SDK package into `libs/<sdk>/dist/`.
 * @param {keyof typeof SDKS} sdk `sdk-viewer` or `sdk-game`
 * @returns {Promise<{ files: string[], ms: number }>} the files written (absolute paths) and the time taken
 * @throws Error for an unknown name, an esbuild error, or a type error in the generated declarations
 */
export async function buildSdk(sdk) {
  const spec = SDKS[sdk];
  if (!spec) throw new Error(`unknown SDK ${sdk}: one of ${Object.keys(SDKS).join(', ')}`);
  const t0 = performance.now();
  const dir = join(ROOT, 'libs', sdk);
  const dist = join(dir, 'dist');
  mkdirSync(dist, { recursive: true });
  const entry = join(dir, 'src', 'index.ts');
  const { build } = await import('esbuild');
  await build({
    absWorkingDir: ROOT,
    entryPoints: [entry],
    outfile: join(dist, 'index.js'),
    bundle: true,
    format: 'esm',
    platform: sdk === 'sdk-game' ? 'node' : 'neutral',
    mainFields: ['module', 'main'],
    target: sdk === 'sdk-game' ? 'node20' : 'es2022',
    external: spec.external,
    logLevel: 'warning',
    banner: { js: `// @crowdplay/${sdk} ${sdkVersion(sdk)}` },
  });
  const files = [join(dist, 'index.js')];
  const { generateDtsBundle } = await import('dts-bundle-generator');
  const [dts] = generateDtsBundle(
    [{ filePath: entry, libraries: { inlinedLibraries: ['@sinclair/typebox'] }, output: { exportReferencedTypes: false, noBanner: true } }],
    { preferredConfigPath: join(ROOT, 'tsconfig.sdk.json') },
  );
  writeFileSync(join(dist, 'index.d.ts'), `// @crowdplay/${sdk} ${sdkVersion(sdk)}\n${dts}`);
  files.push(join(dist, 'index.d.ts'));
  if (sdk === 'sdk-viewer') {
    writeFileSync(join(dist, HOSTED_VIEWER_FILE), await buildHostedViewer());
    files.push(join(dist, HOSTED_VIEWER_FILE));
  }
  return { files, ms: performance.now() - t0 };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const names = process.argv.slice(2);
  (async () => {
    for (const sdk of names.length > 0 ? names : Object.keys(SDKS)) {
      const r = await buildSdk(sdk);
      console.log(`[crowdplay] built @crowdplay/${sdk} (${r.files.length} files) in ${Math.round(r.ms)} ms`);
    }
  })().catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
