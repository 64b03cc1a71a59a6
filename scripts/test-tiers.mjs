// Which test files need services (PostgreSQL, Redis, NATS, a browser, a
// child process), for `npm test -- --unit` (scripts/test.mjs).
//
// Decided from the code, so nothing has to be kept in step by hand: a test
// file needs services when it, or a test-side module it imports (relative
// imports outside any `src/` and scripts/, followed transitively), does any of:
//   - imports a client of a service: pg, ioredis, bullmq, nats,
//     playwright(-core), testcontainers
//   - imports a service helper of @crowdplay/testing (serviceUrls,
//     testSchema, stopServices, containerRuntimeAnswers)
//   - reads process.env.DATABASE_URL, REDIS_URL or NATS_URL (a suite that
//     hands the URL to a library's own client)
//   - imports node:child_process (a child product, a build, a shell script)
//   - says so in a line comment `// @services` (what the scan cannot see)
// The scan over-approximates on purpose (importing test/helpers.ts counts,
// whatever is used from it): a file wrongly left out of the unit tier costs
// a little coverage there, one wrongly in it would fail without services.
// The unit tier also runs under scripts/unit-guard.mjs, which refuses every
// connection to a service port, so a file the scan misses fails loudly.
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';

const CLIENTS = new Map([
  ['pg', 'postgres'],
  ['ioredis', 'redis'],
  ['bullmq', 'redis'],
  ['nats', 'nats'],
  ['playwright', 'browser'],
  ['playwright-core', 'browser'],
  ['testcontainers', 'containers'],
  ['@testcontainers/postgresql', 'containers'],
  ['node:child_process', 'process'],
  ['child_process', 'process'],
]);
const TESTING_SERVICE_HELPERS = new Map([
  ['serviceUrls', 'postgres/redis/nats'],
  ['testSchema', 'postgres'],
  ['stopServices', 'containers'],
  ['containerRuntimeAnswers', 'containers'],
]);
const URL_VARS = new Map([
  ['DATABASE_URL', 'postgres'],
  ['REDIS_URL', 'redis'],
  ['NATS_URL', 'nats'],
]);

const IMPORT_RE =
  /(?:^|[\s;])(?:import|export)\s+(?:type\s+)?([^'";]*?)\s*from\s*['"]([^'"]+)['"]|(?:^|[\s;(])import\s*(?:\(\s*)?['"]([^'"]+)['"]/g;

/**
 * The import specifiers of a module's source, each with the names it imports
 * (`*` for a namespace, default or side-effect import; none for a type-only one).
 * @param {string} source TypeScript or JavaScript source
 * @returns {Array<{ spec: string, names: string[] }>}
 */
export function importsOf(source) {
  const out = [];
  for (const m of source.matchAll(IMPORT_RE)) {
    if (m[2] !== undefined) {
      const clause = m[1] ?? '';
      if (/(?:import|export)\s+type\s/.test(m[0])) {
        out.push({ spec: m[2], names: [] });
        continue;
      }
      const braced = /\{([^}]*)\}/.exec(clause);
      const names = braced
        ? braced[1]
            .split(',')
            .map((n) => n.trim())
            .filter((n) => n && !n.startsWith('type '))
            .map((n) => n.split(/\s+as\s+/)[0].trim())
        : [];
      if (!braced || /^[\w$]+\s*,|\*/.test(clause)) names.push('*');
      out.push({ spec: m[2], names });
    } else if (m[3] !== undefined) out.push({ spec: m[3], names: ['*'] });
  }
  return out;
}

/**
 * Why one module's own source needs services (its imports of clients, helpers and URLs; not what it imports).
 * @param {string} source
 * @returns {string[]} reasons such as `postgres (imports pg)`, empty when none
 */
export function ownNeeds(source) {
  const reasons = [];
  for (const { spec, names } of importsOf(source)) {
    if (names.length === 0) continue; // type-only
    const client = CLIENTS.get(spec);
    if (client) reasons.push(`${client} (imports ${spec})`);
    if (spec === '@crowdplay/testing') {
      for (const n of names) {
        const need = TESTING_SERVICE_HELPERS.get(n);
        if (need) reasons.push(`${need} (imports ${n} from @crowdplay/testing)`);
      }
    }
  }
  for (const [v, need] of URL_VARS) {
    if (new RegExp(`process\\.env(?:\\.${v}\\b|\\[['"]${v}['"]\\])`).test(source)) reasons.push(`${need} (reads process.env.${v})`);
  }
  if (/^\s*\/\/\s*@services\b/m.test(source)) reasons.push('marked // @services');
  return reasons;
}

/**
 * Why a test file needs services: its own reasons and those of every
 * test-side module it reaches through relative imports (outside `src/`).
 * @param {string} root repository root
 * @param {string} file path relative to root
 * @returns {string[]} reasons, each prefixed by the module that has it; empty: the file runs in the unit tier
 */
export function serviceNeeds(root, file) {
  const reasons = [];
  const seen = new Set();
  const scripts = join(root, 'scripts') + sep; // the test runner's own tooling (this scanner, the guard)
  const visit = (abs) => {
    if (seen.has(abs)) return;
    seen.add(abs);
    let source;
    try {
      source = readFileSync(abs, 'utf8');
    } catch {
      return;
    }
    const rel = relative(root, abs);
    for (const r of ownNeeds(source)) reasons.push(`${rel}: ${r}`);
    for (const { spec, names } of importsOf(source)) {
      if (names.length === 0 || !spec.startsWith('.')) continue;
      const target = resolve(dirname(abs), spec);
      if (target.split(sep).includes('src') || target.includes(`${sep}node_modules${sep}`) || target.startsWith(scripts)) continue;
      visit(target);
    }
  };
  visit(join(root, file));
  return reasons;
}
