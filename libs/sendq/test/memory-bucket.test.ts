import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError } from '@crowdplay/protocol';
import { MemoryBucket, MemorySendQueue } from '../src/index.ts';
import { bucketSuite } from './bucket-suite.ts';

bucketSuite('memory', (limits, clock) =>
  Promise.resolve({ bucket: new MemoryBucket({ limits, clock }), cleanup: () => Promise.resolve() }),
);

void test('memory - bad limits and options throw CP_ERR_CONFIG_INVALID naming every bad field', () => {
  assert.throws(
    () => new MemoryBucket({ limits: { botRatePerS: 0, groupRatePerMin: 20, chatRatePerS: 1.5 } }),
    (e: unknown) =>
      isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') &&
      /botRatePerS/.test(e.message) &&
      /chatRatePerS/.test(e.message) &&
      !/groupRatePerMin/.test(e.message),
  );
  assert.throws(
    () => new MemorySendQueue({ limits: { botRatePerS: 30, groupRatePerMin: 20, chatRatePerS: 1 }, concurrency: 0, maxRetries: -1 }),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') && /concurrency/.test(e.message) && /maxRetries/.test(e.message),
  );
});
