#!/usr/bin/env node
// `npm test`: type check, lint, then every test file with node's test runner
// (through tsx): first the `*.serial.test.ts` files alone, one after the
// other (the load smoke test asserts latency thresholds, which another suite
// sharing the two cores would make flaky), then every other `*.test.ts` two
// at a time. Integration suites use the PostgreSQL, Redis and NATS named by
// DATABASE_URL / REDIS_URL / NATS_URL (defaults: this machine's), or
// testcontainers where a container runtime answers (libs/testing).
//
//   npm test                 everything
//   npm test -- libs/bus     only test files under these paths
//   npm test -- --unit       only the unit tier: the files that need no
//                            services (no PostgreSQL, Redis or NATS, no
//                            browser, no child process), decided from their
//                            imports by scripts/test-tiers.mjs; run under
//                            scripts/unit-guard.mjs, which refuses any
//                            connection to a service port. Combines with paths.
//   SKIP_STATIC=1 npm test   skip tsc and eslint (quick local loops)
// Every part prints its time; the last line is the total.
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serviceNeeds } from './test-tiers.mjs';

const root = join(fileURLToPath(import.meta.url), '..', '..');
const argv = process.argv.slice(2);
const unit = argv.includes('--unit');
const filters = argv.filter((a) => a !== '--unit');
const started = Date.now();

function run(cmd, args) {
  const t0 = Date.now();
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', env: process.env });
  console.log(`[test] ${cmd} ${args.slice(0, 3).join(' ')} … exit ${r.status} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return r.status ?? 1;
}

function walk(dir, out) {
  let entries;
  try {
    entries = readdirSync(dir);
  } catch {
    return;
  }
  for (const e of entries) {
    if (e === 'node_modules' || e.startsWith('.')) continue;
    const p = join(dir, e);
    if (statSync(p).isDirectory()) walk(p, out);
    else if (e.endsWith('.test.ts')) out.push(relative(root, p));
  }
}

const files = [];
for (const top of ['libs', 'services', 'loadtest', 'test']) walk(join(root, top), files);
const matched = files.filter((f) => filters.length === 0 || filters.some((x) => f.startsWith(x))).sort();
const selected = unit ? matched.filter((f) => serviceNeeds(root, f).length === 0) : matched;
if (unit) console.log(`[test] unit tier: ${selected.length} of ${matched.length} files need no services`);
const serial = selected.filter((f) => f.endsWith('.serial.test.ts'));
const parallel = selected.filter((f) => !f.endsWith('.serial.test.ts'));
if (selected.length === 0) {
  console.error('[test] no test files matched', filters);
  process.exit(1);
}

let status = 0;
if (!process.env.SKIP_STATIC) {
  status ||= run('npx', ['tsc', '-p', 'tsconfig.json', '--noEmit']);
  status ||= run('npx', ['eslint', '--max-warnings=0', '.']);
  if (status !== 0) process.exit(status);
}
const guard = unit ? ['--import', './scripts/unit-guard.mjs'] : [];
const runner = (concurrency, list) =>
  run(process.execPath, [
    '--import',
    'tsx',
    ...guard,
    '--test',
    `--test-concurrency=${concurrency}`,
    '--test-timeout=180000',
    '--test-reporter=spec',
    ...list,
  ]);
// Serial files first, on a quiet machine; the big run's summary is the last thing printed.
if (serial.length > 0) status = runner(1, serial);
if (parallel.length > 0) status = runner(2, parallel) || status;
console.log(`[test] total ${((Date.now() - started) / 1000).toFixed(1)} s, exit ${status}`);
process.exit(status);
