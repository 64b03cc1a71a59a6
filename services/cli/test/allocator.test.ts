/**
 * The allocator defaults (services/cli/src/allocator.ts): set before
 * @napi-rs/canvas loads, in the bundle `npm start` runs and under tsx, and an
 * operator's own value wins. Checked through mimalloc itself: with
 * MIMALLOC_VERBOSE=1 it prints each option it read when the module loads.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ALLOCATOR_DEFAULTS, applyAllocatorDefaults } from '../src/allocator.ts';
import { builtProduct } from '../../../test/helpers.ts';

const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));

/** The value of mimalloc's `allow_thp` option as the process read it (`crowdplay settings` loads every module), or null when not printed. */
function allowThp(args: string[], extra: Record<string, string>): number | null {
  const env: NodeJS.ProcessEnv = { ...process.env, MIMALLOC_VERBOSE: '1', ...extra };
  if (!('MIMALLOC_ALLOW_THP' in extra)) delete env.MIMALLOC_ALLOW_THP;
  const r = spawnSync(process.execPath, [...args, 'settings'], { env, encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  const m = /mimalloc: option 'allow_thp': (\d+)/.exec(r.stderr);
  return m ? Number(m[1]) : null;
}

describe('allocator defaults', () => {
  it('sets each default that is absent or empty, keeps what the operator set, and reports what it set', () => {
    const env: NodeJS.ProcessEnv = { OTHER: 'x' };
    assert.deepEqual(applyAllocatorDefaults(env), Object.keys(ALLOCATOR_DEFAULTS));
    assert.deepEqual(env, { OTHER: 'x', ...ALLOCATOR_DEFAULTS });
    // A second call changes nothing.
    assert.deepEqual(applyAllocatorDefaults(env), []);
    const own: NodeJS.ProcessEnv = { MIMALLOC_ALLOW_THP: '1' };
    assert.deepEqual(applyAllocatorDefaults(own), []);
    assert.deepEqual(own, { MIMALLOC_ALLOW_THP: '1' });
    // mimalloc reads an empty value as on: empty is absent here.
    const empty: NodeJS.ProcessEnv = { MIMALLOC_ALLOW_THP: '' };
    assert.deepEqual(applyAllocatorDefaults(empty), ['MIMALLOC_ALLOW_THP']);
    assert.equal(empty.MIMALLOC_ALLOW_THP, '0');
  });

  it("rewrites the booleans libs/config accepts to mimalloc's 0 / 1, and leaves anything else for loadConfig to refuse", () => {
    for (const [given, want] of [
      [' false ', '0'],
      ['Off', '0'],
      ['no', '0'],
      ['TRUE', '1'],
      [' on', '1'],
      ['yes', '1'],
    ] as const) {
      const env: NodeJS.ProcessEnv = { MIMALLOC_ALLOW_THP: given };
      applyAllocatorDefaults(env);
      assert.equal(env.MIMALLOC_ALLOW_THP, want, JSON.stringify(given));
    }
    const bad: NodeJS.ProcessEnv = { MIMALLOC_ALLOW_THP: 'maybe' };
    assert.deepEqual(applyAllocatorDefaults(bad), []);
    assert.deepEqual(bad, { MIMALLOC_ALLOW_THP: 'maybe' });
  });

  it('the built product (npm start) loads @napi-rs/canvas with huge pages off, unless MIMALLOC_ALLOW_THP=1', async () => {
    const bundle = await builtProduct();
    assert.equal(allowThp([bundle], {}), 0);
    assert.equal(allowThp([bundle], { MIMALLOC_ALLOW_THP: '1' }), 1);
    // What libs/config accepts as false reaches mimalloc as false (it would ignore " false " and keep huge pages on).
    assert.equal(allowThp([bundle], { MIMALLOC_ALLOW_THP: ' false ' }), 0);
  });

  it('the sources under tsx (npm run crowdplay, the tests) do the same', () => {
    assert.equal(allowThp(['--import', 'tsx', MAIN], {}), 0);
    assert.equal(allowThp(['--import', 'tsx', MAIN], { MIMALLOC_ALLOW_THP: '1' }), 1);
  });

  it('a MIMALLOC_ALLOW_THP that is not a boolean is refused by name before anything starts', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', MAIN, 'start'], {
      env: { ...process.env, MIMALLOC_ALLOW_THP: 'maybe', PORT: '0', DATABASE_URL: 'postgres://127.0.0.1:1/none' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /MIMALLOC_ALLOW_THP/);
  });
});
