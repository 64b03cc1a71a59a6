// @services: forks the reference server and the load workers (child processes), and asserts throughput
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError } from '@crowdplay/protocol';
import { formatReport, runCrowdScenario, runCrowdWithBaseline, spawnReferenceServer, type CrowdReport } from '@crowdplay/loadtest';

/** Generous: loopback on a 2-core CI box with the generator sharing the cores. */
const ACT_ACK_P95_LIMIT_MS = 250;

function get(obj: unknown, path: string): unknown {
  return path
    .split('.')
    .reduce<unknown>((o, k) => (typeof o === 'object' && o !== null ? (o as Record<string, unknown>)[k] : undefined), obj);
}

const NUMERIC_FIELDS = [
  'viewers.requested',
  'viewers.connected',
  'viewers.failed',
  'intents.sent',
  'intents.acked',
  'intents.refused',
  'intents.lost',
  'intents.inFlight',
  'intents.tallied',
  'actAckMs.p50',
  'actAckMs.p95',
  'actAckMs.p99',
  'actAckMs.max',
  'batchLagMs.p50',
  'batchLagMs.p95',
  'batchLagMs.p99',
  'batchLagMs.max',
  'batchLagMs.intakeOffsetMs',
  'updateLagMs.p50',
  'updateLagMs.p95',
  'updatesPerSecond',
  'bytesPerBroadcast',
  'droppedOverCap',
  'serverCpuPct',
  'serverCpuMsPerIntent',
  'coordinatorCpuPct',
  'machineCpuPct',
  'durationS',
  'elapsedS',
  'machine.cpuCount',
  'machine.memoryBytes',
];

function assertShape(r: CrowdReport): void {
  for (const f of NUMERIC_FIELDS) assert.equal(typeof get(r, f), 'number', `${f} is a number (got ${JSON.stringify(get(r, f))})`);
  assert.equal(typeof r.intents.refusedByCode, 'object');
  assert.equal(typeof r.generatorBound, 'boolean');
  assert.ok(Array.isArray(r.generatorCpuPct) && r.generatorCpuPct.every((p) => typeof p === 'number'));
  assert.equal(typeof r.command, 'string');
  assert.equal(typeof r.machine.cpuModel, 'string');
  assert.equal(typeof r.machine.nodeVersion, 'string');
}

test('loadtest crowd - smoke against the reference server: 2 workers, nothing lost', async (t) => {
  const ref = await spawnReferenceServer();
  t.after(() => ref.close());
  const progress: string[] = [];
  const r = await runCrowdScenario({
    url: ref.url,
    viewers: 200,
    channels: 2,
    durationS: 4,
    workers: 2,
    drainS: 5,
    watchPids: [{ name: 'coordinator', pid: process.pid }],
    onProgress: (l) => progress.push(l),
  });
  // JSON round trip: what --json writes is what is checked
  const report = JSON.parse(JSON.stringify(r)) as CrowdReport;
  assertShape(report);

  assert.equal(report.complete, true, `warnings: ${report.warnings.join('; ')}`);
  assert.equal(report.config.workers, 2);
  assert.equal(report.generatorCpuPct.length, 2, 'one CPU figure per worker');
  assert.equal(report.viewers.connected, 200);
  assert.equal(report.viewers.failed, 0);
  assert.equal(report.viewers.dropped, 0);
  // every intent answered: sent = acked + refused (+ lost + in flight, both 0 after the drain)
  assert.ok(report.intents.sent > 0);
  assert.equal(report.intents.inFlight, 0);
  assert.equal(report.intents.lost, 0);
  assert.equal(report.intents.sent, report.intents.acked + report.intents.refused);
  const refusedWithCode = Object.values(report.intents.refusedByCode).reduce((a, b) => a + b, 0);
  assert.equal(refusedWithCode, report.intents.refused, 'every refusal has a code');
  // ~1 act per viewer per second over ramp + 4 s
  assert.ok(report.intents.sent >= 200 * 3, `sent ${report.intents.sent}`);
  // the games saw every accepted intent (plus the probes')
  assert.equal(report.intents.tallied, report.intents.acked + report.intents.probe);
  assert.ok(report.actAckMs.p95 !== null && report.actAckMs.p95 < ACT_ACK_P95_LIMIT_MS, `act ack p95 ${report.actAckMs.p95}`);
  // batch lag is about one tick (250 ms): a uniform draw in [0, tick] plus the intake estimate
  assert.ok(report.batchLagMs.p95 !== null && report.batchLagMs.p95 <= 250 + 100, `batch lag p95 ${report.batchLagMs.p95}`);
  assert.ok(report.batches > 0);
  assert.equal(report.droppedOverCap, 0, '200 viewers never pass maxPerTick 1,000');
  assert.ok(report.updatesPerSecond > 0 && report.bytesPerBroadcast !== null && report.bytesPerBroadcast > 50);
  // the server pid was found from the URL's port
  assert.equal(report.serverPid, ref.pid);
  // the server and each --watch-pid process measured over the same window: CPU and RSS
  assert.deepEqual(
    report.processes.map((p) => [p.name, p.pid]),
    [
      ['server', ref.pid],
      ['coordinator', process.pid],
    ],
  );
  for (const p of report.processes) {
    assert.ok(p.cpuPct !== null && p.cpuPct > 0, `${p.name} cpu ${p.cpuPct}`);
    assert.ok(p.rssStartBytes !== null && p.rssEndBytes !== null && p.rssPeakBytes !== null, p.name);
    assert.ok(p.rssPeakBytes >= p.rssStartBytes && p.rssPeakBytes >= p.rssEndBytes && p.rssStartBytes > 10_000_000, JSON.stringify(p));
  }
  assert.equal(typeof report.serverRssBytesPerViewer, 'number');
  assert.equal(report.serverPidSource, 'port');
  assert.ok(progress.length >= 1 && progress.some((l) => l.includes('connected 200/200')), progress.join('\n'));
  assert.match(formatReport(report), /act ack ms\s+p50/);
});

test('loadtest crowd - --baseline reports ours/reference ratios', async (t) => {
  const ours = await spawnReferenceServer(); // stands in for the product here
  t.after(() => ours.close());
  const r = await runCrowdWithBaseline({
    url: ours.url,
    serverPid: ours.pid,
    viewers: 60,
    channels: 1,
    durationS: 2,
    workers: 2,
    drainS: 5,
  });
  assert.ok(r.baseline, 'baseline present');
  assert.ok(r.ratios, 'ratios present');
  assertShape(r.baseline);
  assert.notEqual(r.baseline.url, r.url, 'baseline ran against its own server');
  assert.equal(r.baseline.viewers.connected, 60);
  assert.equal(r.baseline.serverPidSource, 'flag');
  assert.equal(typeof r.ratios.actAckP95, 'number');
  assert.equal(typeof r.ratios.serverCpuPerIntent, 'number');
  assert.match(formatReport(r), /ratio act ack p95/);
});

test('loadtest crowd - bad options are refused before anything starts', async () => {
  const cases = [
    { viewers: 0, channels: 1, durationS: 1 },
    { viewers: 10, channels: 0, durationS: 1 },
    { viewers: 10, channels: 1, durationS: 0 },
    { viewers: 40_000, channels: 1, durationS: 1, workers: 2 }, // 20,000 sockets per worker > 18,000
  ];
  for (const c of cases) {
    await assert.rejects(
      runCrowdScenario({ url: 'http://127.0.0.1:1', ...c }),
      (err: unknown) => isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID'),
      JSON.stringify(c),
    );
  }
  await assert.rejects(runCrowdScenario({ url: 'ftp://x', viewers: 1, channels: 1, durationS: 1 }), (err: unknown) =>
    isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID'),
  );
});
