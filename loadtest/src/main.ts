/**
 * Load test CLI (`npm run loadtest -- <scenario> …`, i.e. `tsx loadtest/src/main.ts`).
 *
 *   crowd --url http://127.0.0.1:8080 --viewers N --duration S --channels K --json FILE
 *         [--tenant-id dev] [--tenant-secret S] [--tenant-key KEY] [--ramp-s R]
 *         [--workers W] [--viewers-per-address A] [--server-pid P] [--baseline]
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

const USAGE = `usage: npm run loadtest -- crowd --url http://127.0.0.1:8080 --viewers N --duration S --channels K --json FILE
       [--tenant-id dev] [--tenant-secret S] [--tenant-key KEY] [--ramp-s R] [--workers W]
       [--viewers-per-address A] [--server-pid P] [--baseline]`;

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

/** The command as typed (shell-quoted), with the tenant secret and key masked. */
function commandLine(argv: string[]): string {
  const quote = (a: string): string => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`);
  const masked = argv.map((a, i) => (i > 0 && (argv[i - 1] === '--tenant-secret' || argv[i - 1] === '--tenant-key') ? '***' : a));
  return `npm run loadtest -- ${masked.map(quote).join(' ')}`;
}

async function main(argv: string[]): Promise<number> {
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
    onProgress: (line) => console.error(line),
    command: commandLine(argv),
  };
  const report = values.baseline ? await runCrowdWithBaseline(opts) : await runCrowdScenario(opts);
  console.log(formatReport(report));
  if (values.json) {
    const file = resolve(values.json);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
    console.error(`report written to ${file}`);
  }
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
