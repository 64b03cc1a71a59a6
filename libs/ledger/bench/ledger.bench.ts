/**
 * `npm run bench -- ledger [--json FILE] [--seconds 5] [--warmup-seconds 2]
 *   [--requesters 4000] [--channels 8] [--viewers 5000] [--batch 500]
 *   [--commit-ms 2] [--commit-concurrency 2] [--pool 4]`
 *   (batch, commit-ms and commit-concurrency default to LEDGER_COMMIT_MAX_TRANSFERS,
 *   LEDGER_COMMIT_MS and LEDGER_COMMIT_CONCURRENCY's defaults)
 *
 * Durable transfers per second into this machine's Postgres (DATABASE_URL, or
 * the local test Postgres; a schema of its own, dropped at the end) through
 * the Ledger's own group-commit path: synchronous_commit on (checked), logged
 * tables (checked), idempotency ids (every transfer distinct, fingerprinted and
 * looked up), wallet and escrow balance checks, fencing by epoch on every
 * channel transfer. The mix, drawn at random per transfer, over `--channels`
 * channels (each acquired, so each has its epoch) and one open pool round per
 * channel:
 *
 *   70 % stake   wallet → escrow          (channel, epoch, round)
 *   15 % payout  escrow → wallet          (channel, epoch, round)
 *   10 % take    escrow → house           (channel, epoch, round)  hot account
 *    5 % grant   treasury → wallet        (no channel)             hot account
 *
 * so 15 % of transfers touch the house or the treasury. `--requesters`
 * concurrent loops each send one transfer and wait for its ack before the
 * next. After a warm-up, transfers acked during `--seconds` are counted; the
 * ledger is then drained and verified (verifyLedger must be ok).
 *
 * Prints a table and, with --json FILE, writes { transfersPerSecond,
 * commitBatch, commitMs, ackMs, params, machine, verify }.
 */
import { writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { defaultConfig } from '@crowdplay/config';
import { openStore } from '@crowdplay/store';
import { testSchema } from '@crowdplay/testing';
import { Ledger, verifyLedger, type TransferRequest } from '../src/index.ts';

// The commit settings default to the product's defaults (LEDGER_* in libs/config).
const LEDGER_DEFAULTS = defaultConfig().ledger;

const OPTIONS = {
  json: { type: 'string' },
  seconds: { type: 'string', default: '5' },
  'warmup-seconds': { type: 'string', default: '2' },
  requesters: { type: 'string', default: '4000' },
  channels: { type: 'string', default: '8' },
  viewers: { type: 'string', default: '5000' },
  batch: { type: 'string', default: String(LEDGER_DEFAULTS.commitMaxTransfers) },
  'commit-ms': { type: 'string', default: String(LEDGER_DEFAULTS.commitMs) },
  'commit-concurrency': { type: 'string', default: String(LEDGER_DEFAULTS.commitConcurrency) },
  pool: { type: 'string', default: '4' },
} as const;

function percentile(sorted: Float64Array | number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function sortedCopy(xs: number[]): Float64Array {
  return Float64Array.from(xs).sort();
}

const TENANT = 'bench';
const FUNDING = 1_000_000_000;

/**
 * Runs the benchmark (see the module doc for the options).
 * @returns the process exit code: 0, or 1 when verifyLedger failed after the run
 */
export async function main(args: readonly string[]): Promise<number> {
  const { values } = parseArgs({ args: [...args], options: OPTIONS, allowPositionals: true });
  const intArg = (name: keyof typeof OPTIONS, min: number): number => {
    const v = Number(values[name]);
    if (!Number.isSafeInteger(v) || v < min) throw new Error(`--${name} must be an integer ≥ ${min}`);
    return v;
  };
  const params = {
    seconds: intArg('seconds', 1),
    warmupSeconds: intArg('warmup-seconds', 0),
    requesters: intArg('requesters', 1),
    channels: intArg('channels', 1),
    viewers: intArg('viewers', 2),
    commitMaxTransfers: intArg('batch', 1),
    commitMs: intArg('commit-ms', 0),
    commitConcurrency: intArg('commit-concurrency', 1),
    poolMax: intArg('pool', 2),
    mix: { stake: 0.7, payout: 0.15, take: 0.1, grant: 0.05 },
    synchronousCommit: 'on',
  };

  const schema = await testSchema();
  const store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: params.poolMax, pgliteDir: 'memory' });
  let exitCode = 0;
  try {
    // The run is only meaningful durable: check the server's settings and the tables.
    const sc = await store.db.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
    const fsync = await store.db.query<{ fsync: string }>('SHOW fsync');
    const version = await store.db.query<{ server_version: string }>('SHOW server_version');
    const persistence = await store.db.query<{ relname: string; relpersistence: string }>(
      "SELECT relname, relpersistence FROM pg_class WHERE relname IN ('transfers', 'accounts') AND relnamespace = current_schema()::regnamespace",
    );
    if (sc.rows[0]?.synchronous_commit !== 'on') throw new Error(`synchronous_commit is ${sc.rows[0]?.synchronous_commit}, not on`);
    if (persistence.rows.length !== 2 || persistence.rows.some((r) => r.relpersistence !== 'p'))
      throw new Error('ledger tables are not logged tables');

    await store.tenants.create(TENANT, 'Bench');
    const channels: Array<{ id: string; epoch: number; round: string }> = [];
    for (let c = 0; c < params.channels; c++) {
      const id = `bench-${c}`;
      await store.channels.ensure(id, TENANT);
      const epoch = await store.channels.acquire(id, 'bench-shard');
      channels.push({ id, epoch, round: `round-${c}` });
    }

    const commits: Array<{ t: number; transfers: number; commitMs: number }> = [];
    const ledger = new Ledger(store.db, {
      commitMs: params.commitMs,
      commitMaxTransfers: params.commitMaxTransfers,
      maxQueued: Math.max(50_000, params.requesters * 2),
      commitConcurrency: params.commitConcurrency,
      onCommit: (i) => commits.push({ t: performance.now(), transfers: i.transfers, commitMs: i.commitMs }),
    });

    // Fund every viewer, and seed each round's escrow so payouts and takes have points to move.
    const funding: Array<Promise<unknown>> = [];
    for (let v = 0; v < params.viewers; v++) funding.push(ledger.grant(TENANT, `v${v}`, FUNDING, `fund-${v}`));
    await Promise.all(funding);
    await Promise.all(
      channels.map((ch, c) =>
        ledger.transfer({
          id: `seed-${c}`,
          tenantId: TENANT,
          from: { kind: 'wallet', owner: `v${c % params.viewers}` },
          to: { kind: 'escrow', owner: ch.round },
          amount: 1_000_000,
          kind: 'stake',
          channelId: ch.id,
          epoch: ch.epoch,
          roundId: ch.round,
        }),
      ),
    );

    let seq = 0;
    const next = (): TransferRequest => {
      const n = seq++;
      const ch = channels[n % channels.length]!;
      const viewer = `v${Math.floor(Math.random() * params.viewers)}`;
      const r = Math.random();
      const base = { id: `t-${n}`, tenantId: TENANT, amount: 1 + Math.floor(Math.random() * 10) };
      const fenced = { channelId: ch.id, epoch: ch.epoch, roundId: ch.round };
      if (r < 0.7)
        return { ...base, ...fenced, from: { kind: 'wallet', owner: viewer }, to: { kind: 'escrow', owner: ch.round }, kind: 'stake' };
      if (r < 0.85)
        return { ...base, ...fenced, from: { kind: 'escrow', owner: ch.round }, to: { kind: 'wallet', owner: viewer }, kind: 'payout' };
      if (r < 0.95)
        return { ...base, ...fenced, from: { kind: 'escrow', owner: ch.round }, to: { kind: 'house', owner: '' }, kind: 'take' };
      return { ...base, from: { kind: 'treasury', owner: '' }, to: { kind: 'wallet', owner: viewer }, kind: 'grant' };
    };

    let phase: 'warmup' | 'measure' | 'stop' = 'warmup';
    let acked = 0;
    let refused = 0;
    let hot = 0;
    const ackMs: number[] = [];
    const requester = async (): Promise<void> => {
      while (phase !== 'stop') {
        const req = next();
        const t0 = performance.now();
        try {
          await ledger.transfer(req);
          if (phase === 'measure') {
            acked++;
            ackMs.push(performance.now() - t0);
            if (req.from.kind === 'treasury' || req.to.kind === 'house') hot++;
          }
        } catch {
          if (phase === 'measure') refused++;
        }
      }
    };

    const loops = Array.from({ length: params.requesters }, () => requester());
    await new Promise((r) => setTimeout(r, params.warmupSeconds * 1_000));
    const commitsBefore = commits.length;
    phase = 'measure';
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    await new Promise((r) => setTimeout(r, params.seconds * 1_000));
    const elapsedMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const measuredAcked = acked;
    phase = 'stop';
    await Promise.all(loops);
    await ledger.close();

    const measuredCommits = commits.slice(commitsBefore).filter((c) => c.t <= t0 + elapsedMs);
    const sizes = sortedCopy(measuredCommits.map((c) => c.transfers));
    const times = sortedCopy(measuredCommits.map((c) => c.commitMs));
    const acks = sortedCopy(ackMs);
    const verify = await verifyLedger(store.db);
    const { rows: countRows } = await store.db.query<{ n: string | number }>('SELECT count(*) AS n FROM transfers');

    const transfersPerSecond = Math.round((measuredAcked / elapsedMs) * 1_000);
    const result = {
      transfersPerSecond,
      acked: measuredAcked,
      refused,
      hotShare: measuredAcked > 0 ? Number((hot / measuredAcked).toFixed(3)) : 0,
      elapsedMs: Math.round(elapsedMs),
      commits: measuredCommits.length,
      commitBatch: {
        p50: percentile(sizes, 50),
        p95: percentile(sizes, 95),
        mean: sizes.length ? Math.round(sizes.reduce((a, b) => a + b, 0) / sizes.length) : 0,
      },
      commitMs: { p50: Number(percentile(times, 50).toFixed(2)), p95: Number(percentile(times, 95).toFixed(2)) },
      ackMs: {
        p50: Number(percentile(acks, 50).toFixed(2)),
        p95: Number(percentile(acks, 95).toFixed(2)),
        p99: Number(percentile(acks, 99).toFixed(2)),
      },
      nodeCpuShare: Number(((cpu.user + cpu.system) / 1_000 / elapsedMs).toFixed(2)),
      transfersInLedger: Number(countRows[0]?.n ?? 0),
      verify,
      params,
      machine: {
        cpu: cpus()[0]?.model ?? 'unknown',
        cores: cpus().length,
        memoryGiB: Math.round(totalmem() / 2 ** 30),
        node: process.version,
        postgres: version.rows[0]?.server_version ?? 'unknown',
        synchronousCommit: sc.rows[0]?.synchronous_commit,
        fsync: fsync.rows[0]?.fsync,
      },
    };

    const rows: Array<[string, string]> = [
      ['transfers/s (durable)', transfersPerSecond.toLocaleString('en-US')],
      ['acked in window', `${measuredAcked.toLocaleString('en-US')} in ${result.elapsedMs} ms (${refused} refused)`],
      ['touching house/treasury', `${(result.hotShare * 100).toFixed(1)} %`],
      ['commits', String(result.commits)],
      ['batch p50 / p95 / mean', `${result.commitBatch.p50} / ${result.commitBatch.p95} / ${result.commitBatch.mean}`],
      ['commit ms p50 / p95', `${result.commitMs.p50} / ${result.commitMs.p95}`],
      ['ack ms p50 / p95 / p99', `${result.ackMs.p50} / ${result.ackMs.p95} / ${result.ackMs.p99}`],
      ['node CPU (cores)', String(result.nodeCpuShare)],
      ['ledger verify', verify.ok ? 'ok' : `${verify.failures.length} failures`],
      [
        'params',
        `requesters ${params.requesters}, channels ${params.channels}, viewers ${params.viewers}, batch ${params.commitMaxTransfers}, commitMs ${params.commitMs}, concurrency ${params.commitConcurrency}`,
      ],
      [
        'machine',
        `${result.machine.cpu} × ${result.machine.cores}, Postgres ${result.machine.postgres}, synchronous_commit ${result.machine.synchronousCommit}`,
      ],
    ];
    const w = Math.max(...rows.map(([k]) => k.length));
    process.stdout.write(`\nledger bench\n${rows.map(([k, v]) => `  ${k.padEnd(w)}  ${v}`).join('\n')}\n`);
    if (!verify.ok) {
      for (const f of verify.failures) process.stdout.write(`  verify ${f.check}: ${f.detail}\n`);
      exitCode = 1;
    }
    if (values.json) writeFileSync(values.json, `${JSON.stringify(result, null, 2)}\n`);
  } finally {
    await store.close();
    await schema.drop();
  }
  return exitCode;
}

// Run directly: node --import tsx libs/ledger/bench/ledger.bench.ts [options]
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
