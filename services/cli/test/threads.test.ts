/** HELPER_THREAD_NICE: niceHelperThreads lowers every thread but the event loop's, never raises one. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { Worker } from 'node:worker_threads';
import { niceHelperThreads } from '../src/threads.ts';

const linux = process.platform === 'linux';

/** Every thread of this process and its nice value. */
function niceValues(): Map<number, number> {
  const out = new Map<number, number>();
  for (const t of readdirSync('/proc/self/task')) out.set(Number(t), getPriority(Number(t)));
  return out;
}

describe('cli - helper thread nice (HELPER_THREAD_NICE)', { skip: !linux && 'thread priorities are per thread on Linux only' }, () => {
  it('refuses a value outside 0…19 and changes nothing; 0, another platform or no /proc change nothing', () => {
    const before = niceValues();
    for (const bad of [-1, 20, 1.5, Number.NaN])
      assert.throws(
        () => niceHelperThreads(bad),
        (e: unknown) => e instanceof RangeError && /0…19/.test(e.message),
        String(bad),
      );
    assert.deepEqual(niceHelperThreads(0), { niced: [], failed: [] });
    assert.deepEqual(niceHelperThreads(10, { platform: 'darwin' }), { niced: [], failed: [] });
    assert.deepEqual(niceHelperThreads(10, { taskDir: '/nonexistent/task' }), { niced: [], failed: [] });
    assert.deepEqual(niceValues(), before);
  });

  it('lowers every thread but the calling one to the value; one already lower stays lower', async () => {
    // A worker thread: one more thread to be niced, started after V8's and libuv's.
    const worker = new Worker('setInterval(() => {}, 1000)', { eval: true });
    await new Promise((r) => worker.once('online', r));
    try {
      const others = [...niceValues().keys()].filter((t) => t !== process.pid);
      assert.ok(others.length >= 2, `helper threads seen: ${others.length}`);
      const lower = others[0]!;
      setPriority(lower, 15);
      const mainBefore = getPriority(process.pid);
      const r = niceHelperThreads(7);
      assert.deepEqual(r.failed, []);
      assert.deepEqual([...r.niced].sort(), [...others].sort());
      const after = niceValues();
      assert.equal(after.get(process.pid), mainBefore, "the event loop's thread keeps its priority");
      for (const t of others) assert.equal(after.get(t), t === lower ? 15 : 7, `thread ${t}`);
    } finally {
      await worker.terminate();
    }
  });
});
