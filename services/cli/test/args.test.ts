/**
 * `crowdplay` with words it does not take: refused with exit 2 before
 * anything starts (no config read, nothing listened on, nothing written),
 * naming the word.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));

function cli(args: string[]): { code: number | null; stderr: string; stdout: string } {
  // A DATABASE_URL nothing listens on: a command that got as far as the store would fail differently (or hang for its timeout).
  const r = spawnSync(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    env: { ...process.env, DATABASE_URL: 'postgres://127.0.0.1:1/none', PORT: '0' },
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { code: r.status, stderr: r.stderr, stdout: r.stdout };
}

describe('crowdplay arguments', () => {
  it('an unknown command, an unknown service and a stray argument are named, exit 2', () => {
    const cases: Array<[string[], RegExp]> = [
      [['bogus'], /unknown command "bogus"/],
      [['service', 'gatway'], /unknown service "gatway" \(one of: gateway, /],
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

  it('--help prints the usage and exits 0', () => {
    const r = cli(['--help']);
    assert.equal(r.code, 0);
    assert.match(r.stderr, /crowdplay start/);
  });
});
