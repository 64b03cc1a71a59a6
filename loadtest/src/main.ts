/**
 * Load test CLI (`npm run loadtest -- <scenario> …`, i.e. `tsx loadtest/src/main.ts`).
 *
 *   crowd --url http://127.0.0.1:8080 --viewers N --duration S --channels K --json FILE
 *         [--tenant-id dev] [--tenant-secret S] [--tenant-key KEY] [--ramp-s R]
 *         [--workers W] [--viewers-per-address A] [--server-pid P] [--watch-pid NAME=PID]… [--baseline]
 *
 *   market --url http://127.0.0.1:8080 --viewers N --trades T --json FILE
 *         [--channels K] [--database-url URL] [--database-schema S] [--skip-verify]
 *         [--tenant-id dev] [--tenant-secret S] [--tenant-key KEY] [--grant P]
 *         [--liquidity B] [--rate R] [--ack-timeout-ms MS] [--budget-s S] [--server-pid P]
 *
 *   rollover --chats N --players P [--period-s S] [--no-boards] [--json FILE]
 *   chatrounds --chats N --players P [--kind pool|market] [--json FILE]
 *         [--database-url URL] [--redis-url URL] [--connect-concurrency C]
 *         [--think-ms LO,HI] [--avatars photo|none] [--no-pin]
 *         [--cluster [--gateways G] [--shards S] [--nats-url URL]] [--product-log FILE] [--board-trace FILE]
 *         [--product-cpu-prof DIR]
 *
 *   failover --gateways 2 --shards 3 --viewers N --channels C --duration S [--json FILE]
 *         [--ramp-s R] [--round-ms MS] [--round-unsettled-ms MS] [--workers W] [--viewers-per-address A] [--log FILE]
 *         [--faults kill,drain,gateway,router,postgres] [--postgres-down-ms MS]
 *         (NATS_URL, REDIS_URL, DATABASE_URL: the cluster's services; defaults this machine's. With the postgres
 *         fault the run starts a PostgreSQL of its own, which it stops and starts, and DATABASE_URL is not used)
 *
 *   multigame --chats N --duration S [--round-every K] [--json FILE]
 *         (DATABASE_URL: the product's PostgreSQL; default this machine's)
 *
 * Prints a table to stdout (progress lines go to stderr) and writes the JSON
 * report to --json. Fields: loadtest/README.md.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { isCrowdplayError } from '@crowdplay/protocol';
import { formatReport } from './crowd/report.ts';
import { runCrowdScenario, runCrowdWithBaseline, type CrowdOptions } from './crowd/scenario.ts';
import { formatMarketReport } from './market/report.ts';
import { runMarketScenario, type MarketOptions } from './market/scenario.ts';
import { formatRolloverReport } from './rollover/report.ts';
import { runRolloverScenario, type RolloverOptions } from './rollover/scenario.ts';
import { parseContention } from './rollover/contend.ts';
import { runChatRoundsScenario } from './chatrounds/scenario.ts';
import { parseWatchPid } from './proc.ts';
import { formatFailoverReport } from './failover/report.ts';
import { parseFaults, runFailoverScenario } from './failover/scenario.ts';
import { formatMultigameReport } from './multigame/report.ts';
import { runMultigameScenario } from './multigame/scenario.ts';

const USAGE = `usage: npm run loadtest -- crowd --url http://127.0.0.1:8080 --viewers N --duration S --channels K --json FILE
       [--tenant-id dev] [--tenant-secret S] [--tenant-key KEY] [--ramp-s R] [--workers W]
       [--viewers-per-address A] [--server-pid P] [--watch-pid NAME=PID]… [--baseline]
     npm run loadtest -- market --url http://127.0.0.1:8080 --viewers N --trades T --json FILE
       [--channels K] [--database-url URL] [--database-schema S] [--skip-verify]
       [--tenant-id dev] [--tenant-secret S] [--tenant-key KEY] [--grant P] [--liquidity B]
       [--rate R] [--ack-timeout-ms MS] [--budget-s S] [--server-pid P]
     npm run loadtest -- rollover --chats N --players P [--period-s S] [--no-boards] [--json FILE]
     npm run loadtest -- chatrounds --chats N --players P [--kind pool|market] [--no-pin] [--json FILE]
       [--database-url URL] [--redis-url URL] [--connect-concurrency C] [--think-ms LO,HI] [--avatars photo|none] [--no-pin]
       [--cluster [--gateways G] [--shards S] [--nats-url URL]] [--product-log FILE] [--board-trace FILE]
       [--product-cpu-prof DIR] (a V8 CPU profile of the standalone product, written when it stops)
       [--contend BUSY,IDLE] (a competing load on the product's CPU: busy BUSY ms, idle IDLE ms, over and over)
     npm run loadtest -- failover --gateways 2 --shards 3 --viewers N --channels C --duration S [--json FILE]
       [--ramp-s R] [--round-ms MS] [--round-unsettled-ms MS] [--workers W] [--viewers-per-address A] [--log FILE]
       [--faults kill,drain,gateway,router,postgres] (default kill,drain,gateway; applied in the order given)
       [--postgres-down-ms MS] (postgres: down this long, default 3000; on a PostgreSQL of the run's own)
     npm run loadtest -- multigame --chats N --duration S [--round-every K] [--json FILE]`;

function num(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`--${name} must be a number, got ${v}`);
  return n;
}

function required(name: string, v: number | undefined): number {
  if (v === undefined) throw new Error(`--${name} is required`);
  return v;
}

const SECRET_FLAGS = new Set(['--tenant-secret', '--tenant-key', '--database-url', '--redis-url', '--nats-url']);

/** The command as typed (shell-quoted), with the tenant secret, the key and the database URL masked. */
function commandLine(argv: string[]): string {
  const quote = (a: string): string => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`);
  const masked = argv.map((a, i) => (i > 0 && SECRET_FLAGS.has(argv[i - 1] ?? '') ? '***' : a));
  return `npm run loadtest -- ${masked.map(quote).join(' ')}`;
}

function writeJson(path: string | undefined, report: unknown): void {
  if (!path) return;
  const file = resolve(path);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
  console.error(`report written to ${file}`);
}

/**
 * `market`: exit 0 when every trade was answered, every check passed and
 * the ledger verified (or verify was skipped); 1 otherwise.
 */
async function marketMain(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv.slice(1),
    options: {
      url: { type: 'string', default: 'http://127.0.0.1:8080' },
      viewers: { type: 'string' },
      trades: { type: 'string' },
      channels: { type: 'string', default: '1' },
      json: { type: 'string' },
      'database-url': { type: 'string' },
      'database-schema': { type: 'string' },
      'skip-verify': { type: 'boolean', default: false },
      'tenant-id': { type: 'string' },
      'tenant-secret': { type: 'string' },
      'tenant-key': { type: 'string' },
      grant: { type: 'string' },
      liquidity: { type: 'string' },
      rate: { type: 'string' },
      'ack-timeout-ms': { type: 'string' },
      'budget-s': { type: 'string' },
      'server-pid': { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.error(USAGE);
    return 0;
  }
  const opts: MarketOptions = {
    url: values.url,
    viewers: required('viewers', num('viewers', values.viewers)),
    trades: required('trades', num('trades', values.trades)),
    channels: required('channels', num('channels', values.channels)),
    databaseUrl: values['database-url'] ?? process.env.DATABASE_URL,
    databaseSchema: values['database-schema'] ?? (process.env.DATABASE_SCHEMA || undefined),
    skipVerify: values['skip-verify'],
    tenantId: values['tenant-id'],
    tenantSecret: values['tenant-secret'],
    tenantKey: values['tenant-key'],
    grantPoints: num('grant', values.grant),
    liquidity: num('liquidity', values.liquidity),
    ratePerViewer: num('rate', values.rate),
    ackTimeoutMs: num('ack-timeout-ms', values['ack-timeout-ms']),
    budgetS: num('budget-s', values['budget-s']),
    serverPid: num('server-pid', values['server-pid']),
    onProgress: (line) => console.error(line),
    command: commandLine(argv),
  };
  const report = await runMarketScenario(opts);
  console.log(formatMarketReport(report));
  writeJson(values.json, report);
  const c = report.checks;
  const clean =
    report.complete &&
    report.trades.unexpected === 0 &&
    c.acks.mismatches === 0 &&
    c.balances.mismatches === 0 &&
    (report.ledgerVerify === 'ok' || report.ledgerVerify.startsWith('skipped'));
  return clean ? 0 : 1;
}

/**
 * `rollover`: exit 0 when the run is `complete` (no crash, every guess
 * answered, every chat's final board correct); 1 otherwise.
 */
async function rolloverMain(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv.slice(1),
    options: {
      chats: { type: 'string' },
      players: { type: 'string' },
      'period-s': { type: 'string' },
      'no-boards': { type: 'boolean', default: false },
      json: { type: 'string' },
      'database-url': { type: 'string' },
      'redis-url': { type: 'string' },
      'connect-concurrency': { type: 'string' },
      'think-ms': { type: 'string' },
      'ack-timeout-ms': { type: 'string' },
      'no-pin': { type: 'boolean', default: false },
      avatars: { type: 'string', default: 'photo' },
      cluster: { type: 'boolean', default: false },
      'product-log': { type: 'string' },
      'board-trace': { type: 'string' },
      'product-cpu-prof': { type: 'string' },
      contend: { type: 'string' },
      gateways: { type: 'string' },
      shards: { type: 'string' },
      'nats-url': { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.error(USAGE);
    return 0;
  }
  let thinkMs: [number, number] | undefined;
  if (values['think-ms'] !== undefined) {
    const [lo, hi] = values['think-ms'].split(',').map((x) => num('think-ms', x));
    if (lo === undefined || hi === undefined || lo < 0 || hi < lo)
      throw new Error(`--think-ms must be LO,HI with 0 ≤ LO ≤ HI, got ${values['think-ms']}`);
    thinkMs = [lo, hi];
  }
  if (values.avatars !== 'photo' && values.avatars !== 'none') throw new Error(`--avatars must be photo or none, got ${values.avatars}`);
  for (const flag of ['json', 'product-log', 'board-trace'] as const)
    if (values[flag] !== undefined && values[flag].trim() === '') throw new Error(`--${flag} must name a file`);
  if (values['product-cpu-prof'] !== undefined && values['product-cpu-prof'].trim() === '')
    throw new Error('--product-cpu-prof must name a directory');
  if (values.cluster && values['product-cpu-prof'] !== undefined)
    throw new Error('--product-cpu-prof profiles the standalone product: not with --cluster');
  if (!values.cluster && (values.gateways !== undefined || values.shards !== undefined || values['nats-url'] !== undefined))
    throw new Error('--gateways, --shards and --nats-url need --cluster');
  const cluster = values.cluster
    ? { gateways: num('gateways', values.gateways) ?? 1, shards: num('shards', values.shards) ?? 2 }
    : undefined;
  if (values.contend !== undefined && values['no-pin']) throw new Error('--contend runs on the product’s CPU: not with --no-pin');
  const opts: RolloverOptions = {
    cluster,
    ...(values.contend !== undefined ? { contend: parseContention(values.contend) } : {}),
    productLog: values['product-log'],
    boardTrace: values['board-trace'],
    productCpuProf: values['product-cpu-prof'],
    natsUrl: values['nats-url'] ?? (process.env.NATS_URL || undefined),
    avatars: values.avatars,
    chats: required('chats', num('chats', values.chats)),
    players: required('players', num('players', values.players)),
    periodS: num('period-s', values['period-s']),
    boards: !values['no-boards'],
    databaseUrl: values['database-url'] ?? (process.env.DATABASE_URL || undefined),
    redisUrl: values['redis-url'] ?? (process.env.REDIS_URL || undefined),
    connectConcurrency: num('connect-concurrency', values['connect-concurrency']),
    thinkMs,
    ackTimeoutMs: num('ack-timeout-ms', values['ack-timeout-ms']),
    pin: !values['no-pin'],
    onProgress: (line) => console.error(line),
    command: commandLine(argv),
  };
  const report = await runRolloverScenario(opts);
  console.log(formatRolloverReport(report));
  writeJson(values.json, report);
  return report.complete ? 0 : 1;
}

/**
 * `failover`: exit 0 when every correctness target is met (missed timing
 * targets are printed, not failed); 1 otherwise.
 */
async function failoverMain(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv.slice(1),
    options: {
      gateways: { type: 'string', default: '2' },
      shards: { type: 'string', default: '3' },
      viewers: { type: 'string' },
      channels: { type: 'string' },
      duration: { type: 'string' },
      json: { type: 'string' },
      'ramp-s': { type: 'string' },
      'round-ms': { type: 'string' },
      'round-unsettled-ms': { type: 'string' },
      log: { type: 'string' },
      workers: { type: 'string' },
      'viewers-per-address': { type: 'string' },
      faults: { type: 'string' },
      'postgres-down-ms': { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.error(USAGE);
    return 0;
  }
  const faults = values.faults === undefined ? undefined : parseFaults(values.faults);
  const report = await runFailoverScenario({
    faults,
    gateways: required('gateways', num('gateways', values.gateways)),
    shards: required('shards', num('shards', values.shards)),
    viewers: required('viewers', num('viewers', values.viewers)),
    channels: required('channels', num('channels', values.channels)),
    durationS: required('duration', num('duration', values.duration)),
    rampS: num('ramp-s', values['ramp-s']),
    roundMs: num('round-ms', values['round-ms']),
    roundUnsettledMaxMs: num('round-unsettled-ms', values['round-unsettled-ms']),
    logFile: values.log,
    workers: num('workers', values.workers),
    viewersPerAddress: num('viewers-per-address', values['viewers-per-address']),
    postgresDownMs: num('postgres-down-ms', values['postgres-down-ms']),
    natsUrl: process.env.NATS_URL || undefined,
    redisUrl: process.env.REDIS_URL || undefined,
    // The postgres fault needs a server it may stop: the run starts its own.
    databaseUrl: faults?.includes('postgres') ? undefined : process.env.DATABASE_URL || undefined,
    onProgress: (line) => console.error(line),
    command: commandLine(argv),
  });
  console.log(formatFailoverReport(report));
  writeJson(values.json, report);
  return report.correct ? 0 : 1;
}

async function chatRoundsMain(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv.slice(1),
    options: {
      chats: { type: 'string' },
      players: { type: 'string' },
      kind: { type: 'string', default: 'pool' },
      json: { type: 'string' },
      'database-url': { type: 'string' },
      'redis-url': { type: 'string' },
      'connect-concurrency': { type: 'string' },
      'no-pin': { type: 'boolean', default: false },
    },
  });
  if (values.kind !== 'pool' && values.kind !== 'market') throw new Error(`--kind must be pool or market, got ${values.kind}`);
  const report = await runChatRoundsScenario({
    chats: required('chats', num('chats', values.chats)),
    players: required('players', num('players', values.players)),
    kind: values.kind,
    databaseUrl: values['database-url'] ?? (process.env.DATABASE_URL || undefined),
    redisUrl: values['redis-url'] ?? (process.env.REDIS_URL || undefined),
    connectConcurrency: num('connect-concurrency', values['connect-concurrency']),
    pin: !values['no-pin'],
    onProgress: (line) => console.error(line),
    command: commandLine(argv),
  });
  console.log(JSON.stringify(report, null, 2));
  writeJson(values.json, report);
  return report.complete ? 0 : 1;
}

/** `multigame`: exit 0 when every chat was attached and had batches; 1 otherwise. */
async function multigameMain(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv.slice(1),
    options: {
      chats: { type: 'string' },
      duration: { type: 'string' },
      'round-every': { type: 'string' },
      json: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.error(USAGE);
    return 0;
  }
  const report = await runMultigameScenario({
    chats: required('chats', num('chats', values.chats)),
    durationS: required('duration', num('duration', values.duration)),
    roundEvery: num('round-every', values['round-every']),
    databaseUrl: process.env.DATABASE_URL || undefined,
    onProgress: (line) => console.error(line),
    command: commandLine(argv),
  });
  console.log(formatMultigameReport(report));
  writeJson(values.json, report);
  return report.warnings.length === 0 ? 0 : 1;
}

async function main(argv: string[]): Promise<number> {
  if (argv[0] === 'multigame') return multigameMain(argv);
  if (argv[0] === 'chatrounds') return chatRoundsMain(argv);
  if (argv[0] === 'failover') return failoverMain(argv);
  if (argv[0] === 'market') return marketMain(argv);
  if (argv[0] === 'rollover') return rolloverMain(argv);
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      url: { type: 'string', default: 'http://127.0.0.1:8080' },
      viewers: { type: 'string' },
      duration: { type: 'string' },
      channels: { type: 'string', default: '1' },
      json: { type: 'string' },
      'tenant-id': { type: 'string' },
      'tenant-secret': { type: 'string' },
      'tenant-key': { type: 'string' },
      'ramp-s': { type: 'string' },
      workers: { type: 'string' },
      'viewers-per-address': { type: 'string' },
      'server-pid': { type: 'string' },
      'watch-pid': { type: 'string', multiple: true },
      baseline: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help || positionals[0] !== 'crowd') {
    console.error(USAGE);
    return values.help ? 0 : 2;
  }
  const opts: CrowdOptions = {
    url: values.url,
    viewers: required('viewers', num('viewers', values.viewers)),
    durationS: required('duration', num('duration', values.duration)),
    channels: required('channels', num('channels', values.channels)),
    tenantId: values['tenant-id'],
    tenantSecret: values['tenant-secret'],
    tenantKey: values['tenant-key'],
    rampS: num('ramp-s', values['ramp-s']),
    workers: num('workers', values.workers),
    viewersPerAddress: num('viewers-per-address', values['viewers-per-address']),
    serverPid: num('server-pid', values['server-pid']),
    watchPids: (values['watch-pid'] ?? []).map(parseWatchPid),
    onProgress: (line) => console.error(line),
    command: commandLine(argv),
  };
  const report = values.baseline ? await runCrowdWithBaseline(opts) : await runCrowdScenario(opts);
  console.log(formatReport(report));
  writeJson(values.json, report);
  return report.complete ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    if (isCrowdplayError(err)) console.error(`${err.code}: ${err.message}${err.cause instanceof Error ? ` (${err.cause.message})` : ''}`);
    else console.error(err instanceof Error ? err.message : err);
    if (!isCrowdplayError(err) || err.code === 'CP_ERR_CONFIG_INVALID') console.error(USAGE);
    process.exit(2);
  },
);
