/**
 * The failover scenario at smoke size, through the CLI exactly as
 * `npm run loadtest -- failover` runs it: a cluster of 2 gateways and 3
 * shards (the bundle) on the machine's NATS, Redis and PostgreSQL (its own
 * schema, subject prefix and Redis prefix, removed after), 300 channels with
 * one viewer each for 15 s, a SIGKILL and a drain, every moved channel
 * probed; and a PostgreSQL stop and start on a server of the run's own at 30
 * channels. Asserts the correctness figures, not timing. Serial:
 * eight processes on two cores. Also the arithmetic of intentsLost, the
 * stake hash, the viewers' gateway spread and the `--faults` parser.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { loadtestCli } from './cli.ts';
import { lostIntents, msFigures, runFailoverScenario, stakeHash, type FailoverOptions, type FailoverReport } from '@crowdplay/loadtest';
import { parseFaults } from '../src/failover/scenario.ts';
import { viewerGateway } from '../src/failover/ipc.ts';

describe('loadtest failover - helpers', () => {
  it('lostIntents: acked minus counted per viewer and option, never offset by a surplus elsewhere', () => {
    const acked = new Map([
      ['v1', [3, 2, 0]],
      ['v2', [1, 1, 1]],
    ]);
    const counted = new Map([
      ['v1', [3, 1, 5]], // one b lost; the surplus of c (acks lost with a socket) does not hide it
      ['v3', [9, 9, 9]],
    ]);
    assert.equal(lostIntents(acked, counted), 1 + 3);
    assert.equal(lostIntents(new Map(), counted), 0);
  });

  it('msFigures: nearest-rank p50 and max; nulls without samples', () => {
    assert.deepEqual(msFigures([40, 10, 30, 20]), { count: 4, p50: 20, max: 40 });
    assert.deepEqual(msFigures([]), { count: 0, p50: null, max: null });
  });

  it('viewerGateway: one viewer per channel still spreads over every gateway; G viewers of a channel sit on G gateways', () => {
    const spread = (viewers: number, C: number, G: number): number[] => {
      const n = Array.from({ length: G }, () => 0);
      for (let i = 0; i < viewers; i++) n[viewerGateway(i, C, G)]!++;
      return n;
    };
    assert.deepEqual(spread(3000, 3000, 2), [1500, 1500]);
    assert.deepEqual(spread(10, 10, 3), [4, 3, 3]);
    // 2 channels (a multiple of G) with 2 viewers each: each channel has one on each gateway.
    const C = 2;
    for (let ch = 0; ch < C; ch++) assert.deepEqual([ch, ch + C].map((i) => viewerGateway(i, C, 2)).sort(), [0, 1]);
  });

  it('parseFaults: names in the order given; unknown, repeated or empty names refused', () => {
    assert.deepEqual(parseFaults('drain,kill'), ['drain', 'kill']);
    assert.deepEqual(parseFaults('kill, drain ,gateway,router'), ['kill', 'drain', 'gateway', 'router']);
    assert.deepEqual(parseFaults('kill,postgres'), ['kill', 'postgres']);
    assert.throws(() => parseFaults('kill,meteor'), /unknown fault "meteor"/);
    assert.throws(() => parseFaults('kill,kill'), /kill named twice/);
    assert.throws(() => parseFaults(''), /unknown fault ""/);
  });

  it('stakeHash: sha256 of viewer, NUL, key; base64url, 22 characters', () => {
    const h = stakeHash('fv-1', 's-r1');
    assert.equal(h, createHash('sha256').update('fv-1\u0000s-r1').digest('base64url').slice(0, 22));
    assert.notEqual(h, stakeHash('fv-1', 's-r2'));
  });
});

describe('loadtest failover - bad options', () => {
  it('bad counts, durations or faults: refused with the reason (exit 2 from the CLI), before anything starts', async () => {
    const schemas = async (): Promise<number> => {
      const c = new pg.Client({ connectionString: process.env.DATABASE_URL || 'postgresql://postgres@127.0.0.1:5432/test' });
      await c.connect();
      try {
        const { rows } = await c.query<{ n: string }>(
          "SELECT count(*) AS n FROM information_schema.schemata WHERE schema_name LIKE 'failover\\_%'",
        );
        return Number(rows[0]!.n);
      } finally {
        await c.end();
      }
    };
    const before = await schemas();
    // Through the CLI once (exit code 2 and the usage), the other refusals in-process (the same checks, no process start).
    const res = await loadtestCli(
      ['failover', '--viewers', '10', '--channels', '2', '--duration', '10', '--faults', 'kill,meteor'],
      90_000,
    );
    assert.equal(res.code, 2, res.stderr);
    assert.match(res.stderr, /unknown fault "meteor"/);
    assert.doesNotMatch(res.stderr, /building the bundle/, 'nothing started');
    const base = { gateways: 2, shards: 3, viewers: 10, channels: 2, durationS: 10 };
    const cases = [
      [{ shards: 2 }, /shards must be an integer in \[3, 32\], got 2/],
      [{ gateways: 1 }, /gateways must be an integer in \[2, 32\], got 1/],
      [{ durationS: 2 }, /duration must be ≥ 5 s, got 2/],
      [{ rampS: -1 }, /ramp must be ≥ 0 s, got -1/],
      [{ channels: 10_001 }, /channels must be an integer in \[1, 10000\], got 10001/],
      [{ faults: [] }, /faults: name at least one/],
      [{ faults: ['kill', 'drain'], faultsAt: [0.5, 0.4] }, /faultsAt must be 2 increasing fractions in \(0, 1\), got 0.5,0.4/],
      [{ faults: ['kill'], faultsAt: [0.2, 0.4] }, /faultsAt must be 1 increasing fractions/],
      [
        { faults: ['postgres'], databaseUrl: 'postgresql://postgres@127.0.0.1:5432/test' },
        /the postgres fault stops a PostgreSQL the rig starts itself: leave out the database URL/,
      ],
      [{ faults: ['postgres'], postgresDownMs: -1 }, /postgresDownMs must be an integer in \[0, 60000\], got -1/],
    ] as const;
    const started: string[] = [];
    for (const [extra, re] of cases) {
      await assert.rejects(
        runFailoverScenario({ ...base, ...extra, onProgress: (line) => started.push(line) } as FailoverOptions),
        (err: Error) => (err as { code?: string }).code === 'CP_ERR_CONFIG_INVALID' && re.test(err.message),
      );
    }
    assert.deepEqual(started, [], 'nothing started');
    assert.equal(await schemas(), before, 'no schema created');
  });
});

describe('loadtest failover - smoke against crowdplay cluster (2 gateways, 3 shards)', () => {
  it(
    'SIGKILL and drain at 300 channels: nothing acked is lost, every moved channel recovers, ledger verifies',
    { timeout: 170_000 },
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'failover-smoke-'));
      try {
        const file = join(dir, 'report.json');
        const res = await loadtestCli(
          [
            'failover',
            '--gateways',
            '2',
            '--shards',
            '3',
            '--viewers',
            '300',
            '--channels',
            '300',
            '--duration',
            '15',
            '--faults',
            'kill,drain',
            '--round-ms',
            '4000',
            '--json',
            file,
          ],
          170_000,
        );
        assert.equal(res.code, 0, `exit ${res.code}\n${res.stdout}\n${res.stderr.slice(-3000)}`);
        const r = JSON.parse(readFileSync(file, 'utf8')) as FailoverReport;
        const why = JSON.stringify({
          targets: r.targets,
          warnings: r.warnings,
          lost: r.intentsLostSamples,
          stakes: r.stakesLostSamples,
          notRecovered: [r.recoveryMs.kill.notRecovered, r.recoveryMs.drain.notRecovered],
        });
        assert.equal(r.scenario, 'failover');
        assert.equal(r.correct, true, why);
        assert.equal(r.games.connected, 300, JSON.stringify(r.games));
        assert.equal(r.connections.connected, 300);
        assert.ok(r.timeline.killed && r.timeline.drained && r.timeline.killed !== r.timeline.drained, 'a kill and a drain');
        assert.deepEqual(r.timeline.unexpectedExits, []);
        assert.ok(r.channelsMoved.killed >= 1 && r.channelsMoved.drained >= 1, JSON.stringify(r.channelsMoved));
        // Every channel of the killed and of the drained shard was probed and batches again.
        for (const f of [r.recoveryMs.kill, r.recoveryMs.drain]) {
          assert.ok(f.channels >= 1, JSON.stringify(f));
          assert.deepEqual(f.notRecovered, []);
          assert.equal(f.recovered, f.channels);
          assert.equal(f.count, f.channels);
        }
        // The same channels probed at the shard: each one's owner takes intents again.
        for (const f of [r.recoveryMs.kill.atShard, r.recoveryMs.drain.atShard]) {
          assert.ok(f, 'shard probes ran');
          assert.deepEqual(f.notRecovered, []);
          assert.equal(f.recovered, f.channels);
        }
        assert.equal(r.recoveryMs.kill.atShard!.channels, r.recoveryMs.kill.channels);
        assert.equal(r.recoveryMs.kill.channels, r.channelsMoved.killed);
        assert.equal(r.recoveryMs.drain.channels, r.channelsMoved.drained);
        assert.ok(r.recoveryMs.kill.detectionMs !== null, 'the router declared the killed shard dead');
        assert.equal(r.recoveryMs.kill.moveMs.count, r.recoveryMs.kill.channels);
        assert.equal(r.intentsLost.drained, 0, why);
        assert.equal(r.intentsLost.other, 0, why);
        assert.equal(r.batchesNotReceived, 0, r.batchesNotReceivedSamples.join('\n'));
        assert.equal(r.intents.droppedOverCap, 0);
        assert.ok(r.intents.acked > 0 && r.intents.counted > 0);
        assert.ok(r.stakes.acked > 0, 'viewers staked');
        assert.equal(r.stakesLost, 0, r.stakesLostSamples.join('\n'));
        assert.equal(r.rounds.unpaidAtEnd, 0);
        assert.equal(r.duplicateEventIds, 0);
        assert.equal(r.nonMonotonicEventIds, 0);
        assert.equal(r.ledgerVerify, 'ok');
        assert.equal(r.viewersFailed, 0);
        assert.equal(r.viewersReconnected, r.viewersDropped);
        assert.equal(r.timeline.restartedGateway, null, 'only the faults asked for');
        assert.equal(r.errorLogLines, 0, r.errorLogSamples.join('\n'));
        assert.equal(r.games.ended, 0, r.games.endedSample.join('\n'));
        // Steady-phase CPU: every cluster process, NATS, PostgreSQL, the workers and the harness, each read.
        assert.ok(r.steadyCpu && r.steadyCpu.seconds > 0 && r.steadyCpu.channels === 300, JSON.stringify(r.steadyCpu));
        const cpuNames = r.steadyCpu.processes.map((p) => p.name);
        for (const n of ['sequencer', 'router', 'shard-1', 'gw-1', 'nats-server', 'postgres', 'viewer workers', 'harness (games, probes)'])
          assert.ok(cpuNames.includes(n), `${n} in ${cpuNames.join(', ')}`);
        for (const p of r.steadyCpu.processes)
          assert.ok(p.cpuPct !== null && p.cpuPct >= 0 && p.usPerChannelSecond !== null, JSON.stringify(p));
        assert.ok(r.steadyCpu.machineBusyPct !== null && r.steadyCpu.machineBusyPct > 0);
        // The run removed its schema.
        const c = new pg.Client({ connectionString: process.env.DATABASE_URL || 'postgresql://postgres@127.0.0.1:5432/test' });
        await c.connect();
        try {
          const { rows } = await c.query('SELECT 1 FROM information_schema.schemata WHERE schema_name = $1', [r.config.databaseSchema]);
          assert.equal(rows.length, 0, `schema ${r.config.databaseSchema} dropped`);
        } finally {
          await c.end();
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  it(
    'a PostgreSQL stop and start at 30 channels, on a server of the run: nothing acked is lost, every round is paid, the ledger verifies',
    { timeout: 150_000 },
    async () => {
      const privateDirs = (): number => readdirSync(tmpdir()).filter((n) => n.startsWith('cp-postgres-')).length;
      const dirsBefore = privateDirs();
      const dir = mkdtempSync(join(tmpdir(), 'failover-smoke-pg-'));
      try {
        const file = join(dir, 'report.json');
        const res = await loadtestCli(
          [
            'failover',
            '--viewers',
            '60',
            '--channels',
            '30',
            '--duration',
            '12',
            '--round-ms',
            '4000',
            '--faults',
            'postgres',
            '--postgres-down-ms',
            '2000',
            '--json',
            file,
          ],
          150_000,
        );
        assert.equal(res.code, 0, `exit ${res.code}\n${res.stdout}\n${res.stderr.slice(-3000)}`);
        const r = JSON.parse(readFileSync(file, 'utf8')) as FailoverReport;
        const why = JSON.stringify({ targets: r.targets, warnings: r.warnings, stakes: r.stakesLostSamples, timeline: r.timeline });
        assert.equal(r.correct, true, why);
        assert.match(r.config.postgresServer, /^private, fsync=on/);
        assert.deepEqual(r.config.faults, ['postgres']);
        assert.ok(r.timeline.postgresStoppedAtMs !== null && r.timeline.postgresStopMs !== null, why);
        assert.ok(r.timeline.postgresBackMs !== null && r.timeline.postgresBackMs >= 2_000, `down at least --postgres-down-ms: ${why}`);
        assert.equal(r.timeline.killed, null, 'only the fault asked for');
        // Stakes and batches were written again once the server was back.
        assert.ok(r.recoveryMs.postgres?.firstStakeMs !== null && r.recoveryMs.postgres?.firstStakeMs !== undefined, why);
        assert.ok(r.recoveryMs.postgres?.firstBatchLoggedMs !== null && r.recoveryMs.postgres?.firstBatchLoggedMs !== undefined, why);
        assert.ok(r.stakes.acked > 0, 'viewers staked');
        assert.equal(r.stakesLost, 0, r.stakesLostSamples.join('\n'));
        assert.equal(r.intentsLost.other, 0, r.intentsLostSamples.join('\n'));
        assert.equal(r.rounds.unpaidAtEnd, 0);
        assert.equal(r.ledgerVerify, 'ok');
        assert.deepEqual(r.timeline.unexpectedExits, []);
        assert.equal(r.games.notConnected, 0);
        assert.equal(r.viewersFailed, 0);
        assert.equal(privateDirs(), dirsBefore, 'the private PostgreSQL and its directory are gone');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});
