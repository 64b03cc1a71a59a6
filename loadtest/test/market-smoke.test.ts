/**
 * The market scenario at smoke size against the real product (`crowdplay
 * start` as a child process on its own PostgreSQL schema), through the CLI
 * exactly as `npm run loadtest -- market` runs it: every trade answered,
 * nothing failed, the viewers' books, the wallets and the ledger agree.
 * The ack latency bound is loose (other suites share the cores); the target
 * figure (p95 ≤ 50 ms at 500 viewers) is measured at full size and recorded
 * in docs, not asserted here.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadtestCli } from './cli.ts';
import pg from 'pg';
import { isCrowdplayError } from '@crowdplay/protocol';
import { testSchema, type TestSchema } from '@crowdplay/testing';
import { CLI_MAIN, LEGIT_REFUSALS, TRADE_KINDS, ledgerVerify, runMarketScenario, type MarketReport } from '@crowdplay/loadtest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const VIEWERS = 50;
const TRADES = 1_000;
/** Loose: loopback on a 2-core box shared with other suites. */
const ACK_P95_LIMIT_MS = 1_000;

interface Server {
  child: ChildProcess;
  url: string;
  output: () => string;
}

/** `crowdplay start` on a free port, on `schema`, without the demo's bots; resolves once it listens. */
async function startServer(schema: TestSchema): Promise<Server> {
  const child = spawn(process.execPath, ['--import', 'tsx', CLI_MAIN, 'start'], {
    cwd: ROOT,
    env: {
      ...process.env,
      DATABASE_URL: schema.databaseUrl,
      DATABASE_SCHEMA: schema.schema,
      NATS_URL: '',
      REDIS_URL: '',
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'info',
      DEMO_MOTION: 'false',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`crowdplay did not start in 60 s:\n${out.slice(-2000)}`)), 60_000);
    const onData = (): void => {
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`crowdplay exited with ${code} before listening:\n${out.slice(-2000)}`));
    });
  });
  return { child, url, output: () => out };
}

async function stopServer(s: Server): Promise<void> {
  if (s.child.exitCode !== null || s.child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => s.child.once('exit', () => resolve()));
  s.child.kill('SIGTERM');
  const hard = setTimeout(() => s.child.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(hard);
}

const sumCodes = (m: Record<string, number>): number => Object.values(m).reduce((a, b) => a + b, 0);

describe('loadtest market - smoke against crowdplay start on PostgreSQL', () => {
  let schema: TestSchema;
  let server: Server;
  let dir: string;
  let db: pg.Client;
  let report: MarketReport;

  before(async () => {
    schema = await testSchema();
    server = await startServer(schema);
    dir = mkdtempSync(join(tmpdir(), 'market-smoke-'));
    db = new pg.Client({ connectionString: schema.databaseUrl });
    await db.connect();
    await db.query(`SET search_path TO "${schema.schema}"`);
  });
  after(async () => {
    await db?.end();
    if (server) await stopServer(server);
    await schema?.drop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it(`${VIEWERS} viewers, ${TRADES} trades: every trade acked, none failed, books, wallets and ledger agree`, async () => {
    const file = join(dir, 'sub', 'market.json');
    const r = await loadtestCli(
      [
        'market',
        '--url',
        server.url,
        '--viewers',
        String(VIEWERS),
        '--trades',
        String(TRADES),
        '--database-url',
        schema.databaseUrl,
        '--database-schema',
        schema.schema,
        '--json',
        file,
      ],
      120_000,
    );
    assert.equal(r.code, 0, `exit code; stderr:\n${r.stderr.slice(-3000)}\nstdout:\n${r.stdout.slice(-3000)}`);
    report = JSON.parse(readFileSync(file, 'utf8')) as MarketReport;
    const t = report.trades;

    assert.equal(report.scenario, 'market');
    assert.equal(report.complete, true, report.warnings.join('; '));
    assert.equal(report.viewers.connected, VIEWERS);
    assert.equal(report.viewers.failed + report.viewers.dropped, 0);
    // every trade sent and acked; none failed, none refused for a non-market reason
    assert.equal(t.sent, TRADES);
    assert.equal(t.acked, TRADES);
    assert.equal(t.failed, 0, JSON.stringify(t.failedByCode));
    assert.equal(t.late, 0);
    assert.equal(t.unexpected, 0, JSON.stringify(t.refused));
    for (const code of Object.keys(t.refused)) assert.ok(LEGIT_REFUSALS.has(code), `refusal ${code}`);
    assert.equal(t.ok + sumCodes(t.refused), t.acked);
    assert.ok(t.ok > 0);
    for (const k of ['sent', 'acked', 'ok', 'failed'] as const) {
      assert.equal(
        TRADE_KINDS.reduce((a, kind) => a + t.byKind[kind][k], 0),
        t[k],
        `byKind ${k} sums to the total`,
      );
    }
    for (const kind of TRADE_KINDS) assert.ok(t.byKind[kind].sent > 0, `some ${kind} trades`);
    // latency and rate: present and plausible
    assert.equal(report.ackMs.count, TRADES);
    assert.ok(report.ackMs.p95 !== null && report.ackMs.p95 < ACK_P95_LIMIT_MS, `ack p95 ${report.ackMs.p95} ms`);
    assert.ok(report.ackMs.p50! <= report.ackMs.p95! && report.ackMs.p95 <= report.ackMs.p99! && report.ackMs.p99! <= report.ackMs.max!);
    assert.ok(report.tradesPerSecond > 0 && report.tradesPerSecond <= report.ackedPerSecond);
    // self-checks: each ok ack and each join balance matched the viewer's book; wallets match after the payouts
    assert.equal(report.checks.acks.checked, t.ok + VIEWERS);
    assert.equal(report.checks.acks.mismatches, 0, report.checks.acks.samples.join('\n'));
    assert.equal(report.checks.balances.checked, VIEWERS);
    assert.equal(report.checks.balances.mismatches, 0, report.checks.balances.samples.join('\n'));
    assert.equal(report.checks.marketPayouts.paid, report.checks.marketPayouts.expected);
    assert.ok(report.checks.marketPayouts.expected > 0);
    assert.equal(report.checks.poolPayouts.staked, t.volume.stakePoints);
    assert.equal(report.checks.poolPayouts.paid, report.checks.poolPayouts.staked, 'LEDGER_HOUSE_TAKE_BPS is 0: the pool pays out exactly');
    // the rounds counted what the viewers saw accepted
    const market = report.settle.market[0]!;
    const pool = report.settle.pool[0]!;
    assert.equal(report.settle.market.length, 1);
    assert.equal(report.settle.pool.length, 1);
    assert.equal(market.error, undefined);
    assert.equal(pool.error, undefined);
    assert.equal(market.entries, t.byKind.budgetBuy.ok + t.byKind.sharesBuy.ok + t.byKind.sell.ok);
    assert.equal(pool.entries, t.byKind.stake.ok);
    assert.equal(
      pool.pool?.reduce((a, b) => a + b, 0),
      t.volume.stakePoints,
    );
    assert.equal(report.ledgerVerify, 'ok');
    assert.match(r.stdout, /^ledger verify\s+ok/m);
    assert.match(r.stderr, /^\[market\] trading done/m);
    assert.doesNotMatch(r.stdout, new RegExp(schema.databaseUrl.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')), 'the database URL is masked');

    // the ledger itself, independently of the report: the run's transfers by kind
    const uid = `${report.rounds[0]!.channel}/`;
    const q = await db.query<{ kind: string; n: string; points: string }>(
      `SELECT kind, count(*) AS n, sum(amount) AS points FROM transfers WHERE round_id IN ($1, $2) GROUP BY kind`,
      [uid + report.rounds[0]!.market, uid + report.rounds[0]!.pool],
    );
    const byKind = Object.fromEntries(q.rows.map((row) => [row.kind, { n: Number(row.n), points: Number(row.points) }]));
    assert.deepEqual(byKind.stake, { n: t.byKind.stake.ok, points: t.volume.stakePoints });
    assert.equal(byKind.buy?.n, t.byKind.budgetBuy.ok + t.byKind.sharesBuy.ok);
    assert.equal(byKind.buy?.points, t.volume.buyPoints);
    assert.equal(byKind.sell?.points ?? 0, t.volume.sellPoints);
    assert.equal(byKind.payout!.points, report.checks.marketPayouts.paid + report.checks.poolPayouts.paid);
    const grants = await db.query<{ n: string; points: string }>(
      `SELECT count(*) AS n, sum(amount) AS points FROM transfers WHERE kind = 'grant' AND id LIKE $1`,
      [`%loadtest-market-${report.config.runId}-%`],
    );
    assert.deepEqual(grants.rows[0], { n: String(VIEWERS), points: String(VIEWERS * report.config.grantPoints) });
  });

  it('ledgerVerify reports a broken ledger (one wallet off by one point)', async () => {
    assert.ok(report, 'the run above produced a report');
    const viewer = `mk-${report.config.runId}-0`;
    const upd = await db.query(`UPDATE accounts SET balance = balance + 1 WHERE kind = 'wallet' AND owner = $1`, [viewer]);
    assert.equal(upd.rowCount, 1);
    const v = await ledgerVerify(schema.databaseUrl, schema.schema);
    assert.match(v.result, /^sum_zero: tenant dev: balances sum to 1, not 0$/m);
    assert.match(
      v.result,
      new RegExp(
        `^balance_matches_transfers: tenant dev: wallet ${viewer} \\(account \\d+\\) has balance \\d+, its transfers net \\d+$`,
        'm',
      ),
    );
    assert.match(v.result, /ledger verify: \d+ failure\(s\)$/);
  });
});

describe('loadtest market - options', () => {
  it('bad options are refused before anything starts (nothing listens on port 1)', async () => {
    const base = { url: 'http://127.0.0.1:1', viewers: 10, trades: 10, skipVerify: true };
    const cases = [
      { ...base, viewers: 0 },
      { ...base, trades: 0 },
      { ...base, channels: 0 },
      { ...base, ratePerViewer: -1 },
      { ...base, budgetS: 0 },
      { ...base, url: 'ftp://x' },
      { ...base, skipVerify: false }, // no database URL: ledger verify could not run
      { ...base, skipVerify: false, databaseUrl: 'mysql://x/y' },
      { ...base, databaseSchema: 'Bad-Name' },
    ];
    for (const c of cases) {
      await assert.rejects(runMarketScenario(c), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID'), JSON.stringify(c));
    }
  });

  it('a server that is not there fails the setup with the socket error, not a report', async () => {
    await assert.rejects(
      runMarketScenario({ url: 'http://127.0.0.1:1', viewers: 1, trades: 1, skipVerify: true, welcomeDeadlineMs: 1_000 }),
      (err: unknown) =>
        isCrowdplayError(err, 'CP_ERR_INTERNAL') && err.cause instanceof Error && /game clients .*ECONNREFUSED/.test(err.cause.message),
    );
  });
});
