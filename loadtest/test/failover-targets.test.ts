/** The failover scenario's drain target follows the run's shape: the 30-channel one's below 3,000 channels, 2 s from there on. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  DRAIN_TARGET_LARGE_CHANNELS,
  TARGET_DRAIN_RECOVERY_LARGE_MS,
  TARGET_DRAIN_RECOVERY_MS,
  drainTargetMs,
} from '../src/failover/scenario.ts';

describe('loadtest failover - drain target', () => {
  it('drainTargetMs - 1 s up to 2,999 channels, 2 s from 3,000 on', () => {
    assert.equal(TARGET_DRAIN_RECOVERY_MS, 1_000);
    assert.equal(TARGET_DRAIN_RECOVERY_LARGE_MS, 2_000);
    assert.equal(DRAIN_TARGET_LARGE_CHANNELS, 3_000);
    assert.equal(drainTargetMs(1), 1_000);
    assert.equal(drainTargetMs(30), 1_000);
    assert.equal(drainTargetMs(2_999), 1_000);
    assert.equal(drainTargetMs(3_000), 2_000);
    assert.equal(drainTargetMs(10_000), 2_000);
  });
});
