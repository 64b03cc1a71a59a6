/**
 * The failover scenario at smoke size, through the CLI exactly as
 * `npm run loadtest -- failover` runs it: a cluster of 2 gateways and 3
 * shards (the bundle) on the machine's NATS, Redis and PostgreSQL (its own
 * schema, subject prefix and Redis prefix, removed after), 60 viewers over 6
 * channels for 15 s, a SIGKILL, a drain and a gateway restart. Asserts the
 * correctness figures, not timing. Serial: eight processes on two cores.
 * About 50 s. Also the arithmetic of intentsLost and the stake hash.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { loadtestCli } from './cli.ts';
import { lostIntents, msFigures, stakeHash, type FailoverReport } from '@crowdplay/loadtest';

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

  it('stakeHash: sha256 of viewer, NUL, key; base64url, 22 characters', () => {
    const h = stakeHash('fv-1', 's-r1');
    assert.equal(h, createHash('sha256').update('fv-1\u0000s-r1').digest('base64url').slice(0, 22));
    assert.notEqual(h, stakeHash('fv-1', 's-r2'));
  });
});

describe('loadtest failover - bad options', () => {
  it('fewer than 3 shards or 2 gateways, or a short duration: exit 2 with the reason, before anything starts', async () => {
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
    const base = ['failover', '--viewers', '10', '--channels', '2'];
    const cases = [
      [['--shards', '2', '--duration', '10'], /shards must be an integer in \[3, 32\], got 2/],
      [['--gateways', '1', '--duration', '10'], /gateways must be an integer in \[2, 32\], got 1/],
      [['--duration', '2'], /duration must be ≥ 5 s, got 2/],
      [['--duration', '10', '--ramp-s=-1'], /ramp must be ≥ 0 s, got -1/],
    ] as const;
    const results = await Promise.all(cases.map(([args]) => loadtestCli([...base, ...args], 60_000)));
    results.forEach((res, i) => {
      assert.equal(res.code, 2, res.stderr);
      assert.match(res.stderr, cases[i]![1]);
      assert.doesNotMatch(res.stderr, /building the bundle/, 'nothing started');
    });
    assert.equal(await schemas(), before, 'no schema created');
  });
});

describe('loadtest failover - smoke against crowdplay cluster (2 gateways, 3 shards)', () => {
  it(
    'SIGKILL, drain and gateway restart: nothing acked is lost, ids unique and rising, ledger verifies',
    { timeout: 150_000 },
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
            '60',
            '--channels',
            '6',
            '--duration',
            '15',
            '--round-ms',
            '4000',
            '--json',
            file,
          ],
          150_000,
        );
        assert.equal(res.code, 0, `exit ${res.code}\n${res.stdout}\n${res.stderr.slice(-3000)}`);
        const r = JSON.parse(readFileSync(file, 'utf8')) as FailoverReport;
        const why = JSON.stringify({ targets: r.targets, warnings: r.warnings, lost: r.intentsLostSamples, stakes: r.stakesLostSamples });
        assert.equal(r.scenario, 'failover');
        assert.equal(r.correct, true, why);
        assert.equal(r.connections.connected, 60);
        assert.ok(r.timeline.killed && r.timeline.drained && r.timeline.killed !== r.timeline.drained, 'a kill and a drain');
        assert.deepEqual(r.timeline.unexpectedExits, []);
        assert.ok(r.channelsMoved.killed >= 1 && r.channelsMoved.drained >= 1, JSON.stringify(r.channelsMoved));
        assert.deepEqual([r.recoveryMs.kill.notRecovered, r.recoveryMs.drain.notRecovered], [[], []]);
        assert.equal(r.recoveryMs.kill.count, r.recoveryMs.kill.channels);
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
        assert.ok(r.viewersDropped > 0, 'the gateway restart dropped its viewers');
        assert.equal(r.viewersFailed, 0);
        assert.equal(r.viewersReconnected, r.viewersDropped);
        assert.equal(r.errorLogLines, 0, r.errorLogSamples.join('\n'));
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
});
