/**
 * The crowd load scenario at smoke size against the real product, with the
 * product's latency targets, so the rig cannot rot. Full sizes are recorded in
 * docs/benchmarks.md, never asserted here.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runCrowdScenario } from '@crowdplay/loadtest';
import { startStandalone, type InProcess } from '../helpers.ts';

describe('crowd scenario (smoke) against standalone', () => {
  let s: InProcess;
  before(async () => {
    s = await startStandalone();
  });
  after(() => s?.stop());

  it('300 viewers: 0 failed, every intent acked or refused with a code, act ack p95 ≤ 50 ms, batch lag p95 ≤ 300 ms', async () => {
    const r = await runCrowdScenario({
      url: s.baseUrl,
      viewers: 300,
      channels: 3,
      durationS: 4,
      workers: 2,
      rampS: 1,
      drainS: 5,
      command: 'e2e smoke',
    });
    assert.equal(r.viewers.requested, 300);
    assert.equal(r.viewers.failed, 0, JSON.stringify(r.viewers.failedByCode));
    assert.equal(r.viewers.connected, 300);
    assert.ok(r.intents.sent > 300, `intents sent: ${r.intents.sent}`);
    assert.equal(r.intents.sent, r.intents.acked + r.intents.refused, 'every intent answered');
    assert.equal(r.intents.lost + r.intents.inFlight, 0);
    for (const code of Object.keys(r.intents.refusedByCode)) assert.match(code, /^CP_ERR_/);
    assert.equal(r.intents.tallied, r.intents.acked + r.intents.probe, 'the game saw every accepted intent in its tallies');
    assert.ok(r.actAckMs.p95 !== null && r.actAckMs.p95 <= 50, `act ack p95 ${r.actAckMs.p95} ms`);
    assert.ok(r.batchLagMs.p95 !== null && r.batchLagMs.p95 <= 300, `batch lag p95 ${r.batchLagMs.p95} ms`);
    assert.ok(r.updatesPerSecond > 0 && (r.bytesPerBroadcast ?? 0) > 0);
  });
});
