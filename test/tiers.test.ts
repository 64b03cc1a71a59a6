import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { ownNeeds, serviceNeeds } from '../scripts/test-tiers.mjs';

const ROOT_DIR = fileURLToPath(new URL('..', import.meta.url));
/** Source text for the scanner: % stands for a quote and ~ for process.env, so that this file's own scan finds neither. */
const q = (s: string): string => s.replaceAll('%', "'").replaceAll('~', 'process.env');

test('test tiers - a client of a service, a service helper, a URL read or a marker puts a module in the service tier', () => {
  assert.deepEqual(ownNeeds(q(`import pg from %pg%;`)), ['postgres (imports pg)']);
  assert.deepEqual(ownNeeds(q(`import { Redis } from %ioredis%;\nimport { chromium } from %playwright-core%;`)), [
    'redis (imports ioredis)',
    'browser (imports playwright-core)',
  ]);
  assert.deepEqual(ownNeeds(q(`import { nextEvent, testSchema as schema } from %@crowdplay/testing%;`)), [
    'postgres (imports testSchema from @crowdplay/testing)',
  ]);
  assert.deepEqual(ownNeeds(q(`const url = ~.NATS_URL || %nats://127.0.0.1:4222%;`)), [q('nats (reads ~.NATS_URL)')]);
  assert.deepEqual(ownNeeds(q(`import { spawn } from %node:child_process%;`)), ['process (imports node:child_process)']);
  assert.deepEqual(ownNeeds(q(`// @services: a Bot API stub in Docker\nimport x from %./x.ts%;`)), ['marked // @services']);
});

test('test tiers - type-only imports, other helpers and a URL named as data keep a module in the unit tier', () => {
  assert.deepEqual(ownNeeds(q(`import type { Pool } from %pg%;`)), []);
  assert.deepEqual(ownNeeds(q(`import { nextEvent, within, type TestSchema } from %@crowdplay/testing%;`)), []);
  assert.deepEqual(ownNeeds(q(`parse({ DATABASE_URL: %postgres://x%, NATS_URL: %nats://y% });`)), []);
  assert.deepEqual(ownNeeds(q(`import { until } from %../src/index.ts%;`)), []);
});

test('test tiers - needs are followed through test-side imports, not into src/ or scripts/', () => {
  assert.deepEqual(serviceNeeds(ROOT_DIR, 'test/tiers.test.ts'), [], 'this file, which imports the scanner and the guard');
  assert.deepEqual(serviceNeeds(ROOT_DIR, 'libs/lmsr/test/lmsr.test.ts'), [], 'pure functions');
  assert.deepEqual(serviceNeeds(ROOT_DIR, 'libs/bus/test/in-process-bus.test.ts'), [], 'src/ imports the nats client: not followed');
  assert.ok(
    serviceNeeds(ROOT_DIR, 'libs/bus/test/nats-bus.test.ts').includes(q('libs/bus/test/nats-bus.test.ts: nats (reads ~.NATS_URL)')),
  );
  assert.ok(
    serviceNeeds(ROOT_DIR, 'services/gateway/test/crowd.test.ts').includes(
      'services/gateway/test/helpers.ts: postgres (imports testSchema from @crowdplay/testing)',
    ),
    'through the suite helper',
  );
});

test('test tiers - a file whose children the scan cannot see says so', () => {
  assert.deepEqual(serviceNeeds(ROOT_DIR, 'loadtest/test/crowd-smoke.test.ts'), ['loadtest/test/crowd-smoke.test.ts: marked // @services']);
});

test('test tiers - the unit guard refuses a connection to a service port, naming the service', async () => {
  await import('../scripts/unit-guard.mjs');
  const sock = connect({ host: '127.0.0.1', port: 5432 });
  const [err] = (await once(sock, 'error').catch((e: unknown) => [e])) as [Error & { code?: string }];
  assert.equal(err.code, 'ECONNREFUSED');
  assert.match(err.message, /^unit tier: connection to postgres \(port 5432\) refused/);
});
