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

/** mimalloc's options as the process read them (`crowdplay settings` loads every module): allow_thp and purge_delay, null when not printed. */
function mimallocOptions(args: string[], extra: Record<string, string>): { allowThp: number | null; purgeDelay: number | null } {
  const env: NodeJS.ProcessEnv = { ...process.env, MIMALLOC_VERBOSE: '1', ...extra };
  for (const name of Object.keys(ALLOCATOR_DEFAULTS)) if (!(name in extra)) delete env[name];
  const r = spawnSync(process.execPath, [...args, 'settings'], { env, encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  const option = (name: string): number | null => {
    const m = new RegExp(`mimalloc: option '${name}': (\\d+)`).exec(r.stderr);
    return m ? Number(m[1]) : null;
  };
  return { allowThp: option('allow_thp'), purgeDelay: option('purge_delay') };
}
const allowThp = (args: string[], extra: Record<string, string>): number | null => mimallocOptions(args, extra).allowThp;

describe('allocator defaults', () => {
  it('sets each default that is absent or empty, keeps what the operator set, and reports what it set', () => {
    const env: NodeJS.ProcessEnv = { OTHER: 'x' };
    assert.deepEqual(applyAllocatorDefaults(env), Object.keys(ALLOCATOR_DEFAULTS));
    assert.deepEqual(env, { OTHER: 'x', ...ALLOCATOR_DEFAULTS });
    // A second call changes nothing.
    assert.deepEqual(applyAllocatorDefaults(env), []);
    const own: NodeJS.ProcessEnv = { MIMALLOC_ALLOW_THP: '1', MIMALLOC_PURGE_DELAY: '25' };
    assert.deepEqual(applyAllocatorDefaults(own), []);
    assert.deepEqual(own, { MIMALLOC_ALLOW_THP: '1', MIMALLOC_PURGE_DELAY: '25' });
    // mimalloc reads an empty value as 1 (huge pages on, a 1 ms delay): empty is absent here.
    const empty: NodeJS.ProcessEnv = { MIMALLOC_ALLOW_THP: '', MIMALLOC_PURGE_DELAY: ' ' };
    assert.deepEqual(applyAllocatorDefaults(empty), ['MIMALLOC_ALLOW_THP', 'MIMALLOC_PURGE_DELAY']);
    assert.deepEqual(empty, { MIMALLOC_ALLOW_THP: '0', MIMALLOC_PURGE_DELAY: '0' });
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
    const bad: NodeJS.ProcessEnv = { MIMALLOC_ALLOW_THP: 'maybe', MIMALLOC_PURGE_DELAY: '10' };
    assert.deepEqual(applyAllocatorDefaults(bad), []);
    assert.deepEqual(bad, { MIMALLOC_ALLOW_THP: 'maybe', MIMALLOC_PURGE_DELAY: '10' });
  });

  it('rewrites a purge delay libs/config accepts to the digits mimalloc reads (it would take 1_000 as invalid and keep 10), and leaves bad ones for loadConfig', () => {
    for (const [given, want] of [
      ['1_000', '1000'],
      [' 20 ', '20'],
    ] as const) {
      const env: NodeJS.ProcessEnv = { MIMALLOC_ALLOW_THP: '0', MIMALLOC_PURGE_DELAY: given };
      assert.deepEqual(applyAllocatorDefaults(env), ['MIMALLOC_PURGE_DELAY'], JSON.stringify(given));
      assert.equal(env.MIMALLOC_PURGE_DELAY, want, JSON.stringify(given));
    }
    for (const given of ['soon', '-1', '60001', '1.5']) {
      const env: NodeJS.ProcessEnv = { MIMALLOC_ALLOW_THP: '0', MIMALLOC_PURGE_DELAY: given };
      assert.deepEqual(applyAllocatorDefaults(env), [], given);
      assert.equal(env.MIMALLOC_PURGE_DELAY, given);
    }
  });

  it('the built product (npm start) loads @napi-rs/canvas with huge pages off and no purge delay, unless set', async () => {
    const bundle = await builtProduct();
    assert.deepEqual(mimallocOptions([bundle], {}), { allowThp: 0, purgeDelay: 0 });
    assert.equal(mimallocOptions([bundle], { MIMALLOC_PURGE_DELAY: '1_000' }).purgeDelay, 1000);
    assert.equal(allowThp([bundle], { MIMALLOC_ALLOW_THP: '1' }), 1);
    // What libs/config accepts as false reaches mimalloc as false (it would ignore " false " and keep huge pages on).
    assert.equal(allowThp([bundle], { MIMALLOC_ALLOW_THP: ' false ' }), 0);
  });

  it('the sources under tsx (npm run crowdplay, the tests) do the same', () => {
    assert.deepEqual(mimallocOptions(['--import', 'tsx', MAIN], {}), { allowThp: 0, purgeDelay: 0 });
    assert.equal(allowThp(['--import', 'tsx', MAIN], { MIMALLOC_ALLOW_THP: '1' }), 1);
  });

  it('a MIMALLOC_PURGE_DELAY that is not a whole number of ms in range is refused by name before anything starts', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', MAIN, 'start'], {
      env: {
        ...process.env,
        MIMALLOC_ALLOW_THP: '0',
        MIMALLOC_PURGE_DELAY: 'soon',
        PORT: '0',
        DATABASE_URL: 'postgres://127.0.0.1:1/none',
      },
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /MIMALLOC_PURGE_DELAY/);
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
