/**
 * `crowdplay` with words it does not take: refused with exit 2 before
 * anything starts (no config read, nothing listened on, nothing written),
 * naming the word.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));

function cli(args: string[], env: Record<string, string> = {}): { code: number | null; stderr: string; stdout: string } {
  // A DATABASE_URL nothing listens on: a command that got as far as the store would fail differently (or hang for its timeout).
  const r = spawnSync(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    env: { ...process.env, DATABASE_URL: 'postgres://127.0.0.1:1/none', PORT: '0', ...env },
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { code: r.status, stderr: r.stderr, stdout: r.stdout };
}

/** Each case exits 2 with stderr matching, before the store is opened, and prints nothing on stdout. */
function refusedBeforeTheStore(cases: ReadonlyArray<[string[], RegExp]>): void {
  for (const [args, re] of cases) {
    const r = cli(args);
    assert.equal(r.code, 2, `${args.join(' ')}: exit ${r.code}\n${r.stderr}`);
    assert.match(r.stderr, re, args.join(' '));
    assert.doesNotMatch(r.stderr, /CP_ERR_STORE/, `${args.join(' ')}: refused before the store is opened`);
    assert.equal(r.stdout, '', `${args.join(' ')}: nothing written, nothing printed`);
  }
}

describe('crowdplay arguments', () => {
  it('an unknown command, an unknown service and a stray argument are named, exit 2', () => {
    const cases: Array<[string[], RegExp]> = [
      [['bogus'], /^crowdplay: unknown command "bogus"/],
      [['service', 'gatway'], /^crowdplay service: unknown service "gatway" \(one of: gateway, /],
      [['cluster', 'extra'], /crowdplay cluster: unexpected argument "extra"/],
      [['start', 'now'], /crowdplay start: unexpected argument "now"/],
      [['ledger', 'verify', 'twice'], /crowdplay ledger: unexpected argument "twice"/],
    ];
    for (const [args, re] of cases) {
      const r = cli(args);
      assert.equal(r.code, 2, `${args.join(' ')}: exit ${r.code}\n${r.stderr}`);
      assert.match(r.stderr, re, args.join(' '));
      assert.match(r.stderr, /usage:/);
      assert.equal(r.stdout, '', 'nothing started, nothing printed');
    }
  });

  it('start: a setting that cannot work is named with CP_ERR_CONFIG_INVALID, exit 2, no stack trace', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cp-args-'));
    writeFileSync(join(dir, 'a-file'), 'x');
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ PORT: 'abc' }, /^crowdplay: CP_ERR_CONFIG_INVALID: invalid configuration:\nPORT: /m],
      [
        { DATABASE_URL: '', PGLITE_DIR: join(dir, 'a-file') },
        /^crowdplay: CP_ERR_CONFIG_INVALID: invalid configuration:\nPGLITE_DIR: .*a-file/m,
      ],
    ];
    for (const [env, re] of cases) {
      const r = cli(['start'], env);
      assert.equal(r.code, 2, `${JSON.stringify(env)}: exit ${r.code}\n${r.stderr}`);
      assert.match(r.stderr, re, JSON.stringify(env));
      assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
    }
    assert.deepEqual(readdirSync(dir), ['a-file'], 'nothing was created');
  });

  it('start: HEALTH_PORT in use by another process is CP_ERR_CONFIG_INVALID naming it, exit 2, before the store', async () => {
    const other = createServer();
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const taken = (other.address() as AddressInfo).port;
    try {
      const r = cli(['start'], { HEALTH_HOST: '127.0.0.1', HEALTH_PORT: String(taken) });
      assert.equal(r.code, 2, r.stderr);
      assert.match(
        r.stderr,
        new RegExp(
          `^crowdplay: CP_ERR_CONFIG_INVALID: invalid configuration:\\nHEALTH_PORT: 127\\.0\\.0\\.1:${taken} is in use by another process \\(EADDRINUSE\\)`,
          'm',
        ),
      );
      assert.doesNotMatch(r.stderr, /CP_ERR_STORE|\n\s+at /, 'refused before the store is opened, no stack trace');
    } finally {
      other.close();
    }
  });

  it('start: a demo round length outside the round bounds is named, exit 2, before anything starts', () => {
    const cases: Array<Record<string, string>> = [
      { ROUND_MIN_DURATION_MS: '60000' }, // the demo's 30 s rounds below the shortest
      { DEMO_ROUND_MS: '90000000' }, // above the longest (1 day)
      { DEMO_ROUND_MS: '5000', ROUND_MAX_DURATION_MS: '4000' },
    ];
    for (const env of cases) {
      const r = cli(['start'], env);
      assert.equal(r.code, 2, `${JSON.stringify(env)}: exit ${r.code}\n${r.stderr}`);
      assert.match(r.stderr, /DEMO_ROUND_MS: must be within ROUND_MIN_DURATION_MS and ROUND_MAX_DURATION_MS/, JSON.stringify(env));
      assert.doesNotMatch(r.stderr, /CP_ERR_STORE/, 'refused before the store is opened');
      assert.equal(r.stdout, '', 'nothing started, nothing printed');
    }
    // Without the demo the same bounds are fine: the process goes on to the (unreachable) store.
    const r = cli(['start'], { ROUND_MIN_DURATION_MS: '60000', DEMO_ENABLED: 'false' });
    assert.doesNotMatch(r.stderr, /DEMO_ROUND_MS/);
    assert.notEqual(r.code, 0);
  });

  it('tenant create: a name with control or bidi characters, blank or over 100 code points is named, exit 2, before the store', () => {
    for (const name of ['a\nb', 'red\u001b[31m', 'x\u202Ey', '  ', 'n'.repeat(101)]) {
      const r = cli(['tenant', 'create', 'acme6', '--name', name]);
      assert.equal(r.code, 2, `${JSON.stringify(name)}: exit ${r.code}\n${r.stderr}`);
      assert.match(r.stderr, /crowdplay tenant create: --name: tenant name /, JSON.stringify(name));
      assert.doesNotMatch(r.stderr, /CP_ERR_STORE/, 'refused before the store is opened');
      assert.equal(r.stdout, '', 'nothing created, nothing printed');
    }
  });

  it('tenant: a missing or unknown subcommand, a missing, stray or malformed tenant id are named, exit 2, before the store', () => {
    const cases: Array<[string[], RegExp]> = [
      [['tenant'], /crowdplay tenant: name what to do \(create, rotate-key, rotate-secret, list, quota, bot\)/],
      [['tenant', 'frobnicate', 'x'], /crowdplay tenant: unknown subcommand "frobnicate"/],
      [['tenant', 'create'], /crowdplay tenant create: a tenant id is required/],
      [['tenant', 'rotate-key'], /crowdplay tenant rotate-key: a tenant id is required/],
      [['tenant', 'quota'], /crowdplay tenant quota: a tenant id is required/],
      [['tenant', 'list', 'acme'], /crowdplay tenant list: unexpected argument "acme"/],
      [['tenant', 'create', '../evil'], /crowdplay tenant create: a tenant id is 1–64 ASCII letters, digits, _ or -/],
      [['tenant', 'create', '--', '--name'], /^crowdplay tenant create: a new tenant id starts with a letter or a digit/],
      [['tenant', 'create', '_x'], /^crowdplay tenant create: a new tenant id starts with a letter or a digit/],
      [['tenant', 'rotate-secret', 'x'.repeat(65)], /crowdplay tenant rotate-secret: a tenant id is 1–64/],
      [['tenant', 'quota', '🎉'], /crowdplay tenant quota: a tenant id is 1–64/],
    ];
    refusedBeforeTheStore(cases);
  });

  it('a missing or unknown subcommand is named with what the command takes, exit 2, before anything starts', () => {
    const cases: Array<[string[], RegExp]> = [
      [['service'], /^crowdplay service: name the service \(one of: gateway, router, /],
      [['ledger'], /^crowdplay ledger: name what to do \(verify\)/],
      [['ledger', 'check'], /^crowdplay ledger: unknown subcommand "check" \(verify\)/],
      [['telegram'], /^crowdplay telegram: name what to do \(setup\)/],
      [['tenant', 'bot'], /^crowdplay tenant bot: name what to do \(set, list, remove\)/],
      [['tenant', 'bot', 'frob', 'acme'], /^crowdplay tenant bot: unknown subcommand "frob" \(set, list, remove\)/],
      [['tenant', 'bot', 'list'], /^crowdplay tenant bot list: a tenant id is required/],
      [['tenant', 'bot', 'remove', 'acme'], /^crowdplay tenant bot remove: a bot id is required/],
      [
        ['tenant', 'bot', 'remove', 'acme', 'abc'],
        /^crowdplay tenant bot remove: CP_ERR_PROTO_INVALID: .*a bot id is a positive integer, got "abc"/,
      ],
      [['tenant', 'bot', 'list', '../evil'], /^crowdplay tenant bot list: a tenant id is 1–64/],
    ];
    refusedBeforeTheStore(cases);
  });

  it('an option it does not know, one without its value or a value it does not take is named in one line, exit 2', () => {
    const cases: Array<[string[], RegExp]> = [
      [['tenant', 'list', '--bogus'], /^crowdplay: unknown option --bogus\nusage:/],
      [['start', '-x'], /^crowdplay: unknown option -x\nusage:/],
      [['tenant', 'quota', 'acme', '--channels'], /^crowdplay: option --channels needs a value\nusage:/],
      [
        ['tenant', 'quota', 'acme', '--channels', '-1'],
        /^crowdplay: option --channels needs a value; one that starts with "-" is given as --channels=VALUE\nusage:/,
      ],
      [['telegram', 'setup', '--dry-run=yes'], /^crowdplay: option --dry-run takes no value\nusage:/],
    ];
    refusedBeforeTheStore(cases);
  });

  it('an option the command does not take, or one given twice, is refused, exit 2, before anything is opened', () => {
    const cases: Array<[string[], RegExp]> = [
      [
        ['tenant', 'rotate-key', 'zz2', '--dry-run'],
        /^crowdplay tenant rotate-key: option --dry-run is not one it takes \(it takes none\)/,
      ],
      [['tenant', 'create', 'zz2', '--dry-run'], /^crowdplay tenant create: option --dry-run is not one it takes \(it takes --name\)/],
      [['tenant', 'rotate-secret', 'acme', '--name', 'New'], /^crowdplay tenant rotate-secret: option --name is not one it takes/],
      [['tenant', 'rotate-key', 'acme', '--channels', '3'], /^crowdplay tenant rotate-key: option --channels is not one it takes/],
      [['tenant', 'bot', 'list', 'acme', '--token', '1:a'], /^crowdplay tenant bot list: option --token is not one it takes/],
      [['ledger', 'verify', '--name', 'x'], /^crowdplay ledger verify: option --name is not one it takes \(it takes none\)/],
      [['tenant', 'list', '--gateways', '3'], /^crowdplay tenant list: option --gateways is not one it takes/],
      [['start', '--shards', '3'], /^crowdplay start: option --shards is not one it takes/],
      [['service', 'router', '--public-url', 'https://x'], /^crowdplay service: option --public-url is not one it takes/],
      [
        ['cluster', '--name', 'x'],
        /^crowdplay cluster: option --name is not one it takes \(it takes --gateways, --shards, --routers, --renderers\)/,
      ],
      [['tenant', 'quota', 'acme', '--channels', '5', '--channels', '6'], /^crowdplay: option --channels is given more than once/],
    ];
    refusedBeforeTheStore(cases);
  });

  it('--help and help print the usage and exit 0', () => {
    for (const args of [['--help'], ['help'], ['tenant', '--help']]) {
      const r = cli(args);
      assert.equal(r.code, 0, args.join(' '));
      assert.match(r.stderr, /crowdplay start/, args.join(' '));
    }
  });
});
