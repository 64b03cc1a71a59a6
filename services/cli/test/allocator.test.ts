/**
 * The fixed allocator options (services/cli/src/allocator.ts): set before
 * @napi-rs/canvas loads, in the bundle `npm start` and the image run and under
 * tsx; a value already in the environment is mimalloc's own and stays. Checked through mimalloc itself: with
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
  it('sets each option that is absent or empty, keeps one already set, and reports what it set', () => {
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

  it('the built product (npm start) loads @napi-rs/canvas with huge pages off and no purge delay, unless set', async () => {
    const bundle = await builtProduct();
    assert.deepEqual(mimallocOptions([bundle], {}), { allowThp: 0, purgeDelay: 0 });
    assert.equal(mimallocOptions([bundle], { MIMALLOC_PURGE_DELAY: '1000' }).purgeDelay, 1000);
    assert.equal(allowThp([bundle], { MIMALLOC_ALLOW_THP: '1' }), 1);
  });

  it('the sources under tsx (npm run crowdplay, the tests) do the same', () => {
    assert.deepEqual(mimallocOptions(['--import', 'tsx', MAIN], {}), { allowThp: 0, purgeDelay: 0 });
    assert.equal(allowThp(['--import', 'tsx', MAIN], { MIMALLOC_ALLOW_THP: '1' }), 1);
  });
});
