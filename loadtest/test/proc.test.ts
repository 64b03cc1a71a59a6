import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { until } from '@crowdplay/testing';
import {
  clockTicksPerSecond,
  cpuDeltaMs,
  cpuMsByComm,
  mainThreadCpuMs,
  parseWatchPid,
  processCpuMs,
  processRssBytes,
  ProcessWatch,
} from '@crowdplay/loadtest';

test('parseWatchPid - name=pid, anything else throws naming the flag', () => {
  assert.deepEqual(parseWatchPid('shard-1=1234'), { name: 'shard-1', pid: 1234 });
  for (const bad of ['', 'shard', '=12', 'shard=', 'shard=0', 'shard=-3', 'shard=1.5', 'sh ard=12', 'a=b', 'shard=12=13']) {
    assert.throws(
      () => parseWatchPid(bad),
      (err: unknown) => err instanceof Error && err.message.includes('--watch-pid'),
      bad,
    );
  }
});

test('cpuDeltaMs - sums over the processes in both readings; one that came or went counts for nothing', () => {
  const before = new Map([
    [10, 1_000],
    [11, 5_000], // ended before the second reading: its 5 s must not come off the figure
  ]);
  const after = new Map([
    [10, 1_250],
    [12, 9_000], // started after the first reading: its whole life is not the window's
  ]);
  assert.equal(cpuDeltaMs(before, after), 250);
  assert.equal(cpuDeltaMs(new Map([[1, 5]]), new Map([[2, 7]])), null, 'no process in both');
});

test('cpuMsByComm - finds this process by its comm, and nothing for a comm no process has', () => {
  const comm = readFileSync(`/proc/${process.pid}/comm`, 'utf8').trim();
  const mine = cpuMsByComm(comm, clockTicksPerSecond());
  assert.ok(mine.has(process.pid), `pid ${process.pid} among ${[...mine.keys()].join(', ')}`);
  assert.equal(cpuMsByComm('no-such-comm-here', clockTicksPerSecond()).size, 0);
});

test('ProcessWatch - CPU and RSS of a busy process; nulls for one that is gone', async () => {
  // a child that holds ~64 MB, says so, then burns CPU until killed
  const child = spawn(
    process.execPath,
    [
      '-e',
      "const keep = Array.from({ length: 64 }, () => Buffer.alloc(1 << 20, 1)); process.stdout.write('go'); for (;;) keep.push(keep.shift());",
    ],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
  const exited = new Promise((r) => child.once('exit', r));
  await new Promise((r) => child.stdout.once('data', r));
  const dead = 2 ** 22 + 12_345; // above the default pid_max: never a live process
  const watch = new ProcessWatch(
    [
      { name: 'busy', pid: child.pid! },
      { name: 'gone', pid: dead },
    ],
    100,
  );
  watch.start();
  // Watch until the child's CPU time has moved (a clock tick or more); stop() takes the last sample.
  const ticks = clockTicksPerSecond();
  const cpu0 = processCpuMs(child.pid!, ticks) ?? 0;
  await until('the busy child to use CPU', () => (processCpuMs(child.pid!, ticks) ?? 0) > cpu0, { timeoutMs: 10_000, intervalMs: 20 });
  const [busy, gone] = watch.stop();
  child.kill('SIGKILL');
  await exited;
  assert.ok(busy && gone);
  assert.equal(busy.name, 'busy');
  // no latency or share asserted (a loaded machine may give it little): only that its CPU time moved
  assert.ok(busy.cpuPct !== null && busy.cpuPct > 0 && busy.cpuMs !== null && busy.cpuMs > 0, `busy cpu ${busy.cpuPct}`);
  assert.ok(busy.rssStartBytes !== null && busy.rssStartBytes > 40 * 1_048_576, `busy start ${busy.rssStartBytes}`);
  assert.ok(busy.rssPeakBytes !== null && busy.rssPeakBytes > 40 * 1_048_576, `busy peak ${busy.rssPeakBytes}`);
  assert.deepEqual([gone.cpuPct, gone.cpuMs, gone.rssStartBytes, gone.rssEndBytes, gone.rssPeakBytes], [null, null, null, null, null]);
  assert.equal(processRssBytes(dead), null);
  const own = processRssBytes(process.pid);
  assert.ok(own !== null && own > 10_000_000);
});

test('ProcessWatch - the main thread’s share: a worker thread’s CPU is not the main thread’s, the main thread’s is', async () => {
  // Two children: one burns CPU on a worker thread while its main thread waits, the other on its main thread.
  const burn = 'for (;;) Math.sqrt(Math.random());';
  const start = (code: string): ReturnType<typeof spawn> => spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'ignore'] });
  const onWorker = start(
    `const { Worker } = require('node:worker_threads'); const w = new Worker(${JSON.stringify(burn)}, { eval: true }); ` +
      "w.on('online', () => process.stdout.write('go')); setInterval(() => {}, 1000);",
  );
  const onMain = start(`process.stdout.write('go'); ${burn}`);
  const children = [onWorker, onMain];
  const exited = children.map((c) => new Promise((r) => c.once('exit', r)));
  await Promise.all(children.map((c) => new Promise((r) => c.stdout!.once('data', r))));
  const watch = new ProcessWatch(children.map((c, i) => ({ name: ['worker', 'main'][i]!, pid: c.pid! })));
  watch.start();
  const ticks = clockTicksPerSecond();
  const cpu0 = children.map((c) => processCpuMs(c.pid!, ticks) ?? 0);
  // Enough CPU for the 10 ms clock ticks not to blur the split.
  await until('both children to use 300 ms of CPU', () => children.every((c, i) => (processCpuMs(c.pid!, ticks) ?? 0) - cpu0[i]! >= 300), {
    timeoutMs: 20_000,
    intervalMs: 20,
  });
  const [worker, main] = watch.stop();
  for (const c of children) c.kill('SIGKILL');
  await Promise.all(exited);
  assert.ok(worker?.cpuMs && worker.mainThreadCpuMs !== null, JSON.stringify(worker));
  assert.ok(worker.mainThreadCpuMs < worker.cpuMs / 4, `worker-burning child: main ${worker.mainThreadCpuMs} of ${worker.cpuMs} ms`);
  assert.ok(main?.cpuMs && main.mainThreadCpuMs !== null, JSON.stringify(main));
  assert.ok(main.mainThreadCpuMs > (main.cpuMs * 3) / 4, `main-burning child: main ${main.mainThreadCpuMs} of ${main.cpuMs} ms`);
  assert.equal(mainThreadCpuMs(2 ** 22 + 12_345, ticks), null, 'a process that does not exist');
});
