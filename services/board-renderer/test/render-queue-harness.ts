/**
 * Harnesses for the render-queue suite: a queue (in process, or BullMQ under
 * a unique prefix deleted on close) started with a RenderPool whose threads
 * are the gate fixture (fixtures/render-worker.ts), and a recorder of what
 * reaches the `onRendered` callback.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { deleteRedisKeys } from '@crowdplay/testing';
import { RenderPool, type BoardMetrics, type RenderPoolOptions } from '@crowdplay/board';
import { renderQueueKeys } from '@crowdplay/sendq';
import { BullmqRenderQueue, MemoryRenderQueue, type RenderQueue } from '../src/index.ts';

export const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const WORKER = new URL('./fixtures/render-worker.ts', import.meta.url);

/** A RenderPool on the gate fixture; `s` are its threads' shared counters. */
export function gatePool(concurrency: number, maxQueue?: number, latest?: RenderPoolOptions['latest']) {
  const s = new Int32Array(new SharedArrayBuffer(6 * 4));
  const pool = new RenderPool({
    concurrency,
    ...(maxQueue ? { maxQueue } : {}),
    ...(latest ? { latest } : {}),
    workerFile: WORKER,
    workerData: { sab: s.buffer },
  });
  return {
    pool,
    started: () => Atomics.load(s, 2),
    maxInFlight: () => Atomics.load(s, 1),
    threw: () => Atomics.load(s, 4),
    open: () => {
      Atomics.store(s, 3, 1);
      Atomics.notify(s, 3);
    },
  };
}

export type Gate = ReturnType<typeof gatePool>;

export interface Delivered {
  /** Delivery order across every harness of this process. */
  seq: number;
  chatId: number;
  version: number;
  png: Buffer;
}

/** Records every metric written. */
export function fakeMetrics() {
  const counters: Record<string, Array<[number, Record<string, string> | undefined]>> = {};
  const histograms: Record<string, number[]> = {};
  const gauges: Record<string, () => number | Array<[number, Record<string, string>]>> = {};
  const metrics: BoardMetrics = {
    counter: (name) => ({ add: (v, a) => void (counters[name] ??= []).push([v, a]) }),
    histogram: (name) => ({ record: (v) => void (histograms[name] ??= []).push(v) }),
    gauge: (name, read) => (gauges[name] = read),
  };
  const sum = (name: string): number => (counters[name] ?? []).reduce((a, [v]) => a + v, 0);
  return { metrics, counters, histograms, gauges, sum };
}

export interface RQHarness {
  readonly queue: RenderQueue;
  readonly gate: Gate;
  readonly delivered: Delivered[];
  readonly metrics: ReturnType<typeof fakeMetrics>;
  readonly errors: Array<[unknown, string]>;
  /** The consumer's `onFailed` calls: [chat, version] of jobs that handed no board on. */
  readonly failed: Array<[number, number]>;
  /** Delivered versions of one chat, in delivery order. */
  versions(chatId: number): number[];
  close(): Promise<void>;
}

export interface RQOptions {
  concurrency?: number;
  maxQueue?: number;
  maxJobBytes?: number;
  /** The pool's late binding (RenderPoolOptions.latest). */
  latest?: RenderPoolOptions['latest'];
  /** BullMQ: jobs the worker holds at once (RenderConsumer.jobConcurrency). @defaultValue the pool's slots */
  jobConcurrency?: number;
}

export type RQFactory = (opts?: RQOptions) => Promise<RQHarness>;

/** Waits until `cond()` holds. @throws Error naming `what` after `ms` */
export async function waitFor(what: string | (() => string), cond: () => boolean, ms = 8_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${typeof what === 'string' ? what : what()}`);
    await sleep(5);
  }
}

let deliverySeq = 0;

function harness(
  queue: RenderQueue,
  gate: Gate,
  m: ReturnType<typeof fakeMetrics>,
  errors: Array<[unknown, string]>,
  after: () => Promise<void>,
  jobConcurrency?: number,
): RQHarness {
  const delivered: Delivered[] = [];
  const failed: Array<[number, number]> = [];
  queue.start({
    pool: gate.pool,
    ...(jobConcurrency !== undefined ? { jobConcurrency } : {}),
    onFailed: (chatId, version) => failed.push([chatId, version]),
    onRendered: async (chatId, version, png) => {
      await sleep(1);
      delivered.push({ seq: deliverySeq++, chatId, version, png });
    },
  });
  let closing: Promise<void> | undefined;
  return {
    queue,
    gate,
    delivered,
    metrics: m,
    errors,
    failed,
    versions: (chatId) => delivered.filter((d) => d.chatId === chatId).map((d) => d.version),
    close() {
      closing ??= (async () => {
        gate.open();
        await queue.close();
        await gate.pool.close();
        await after();
      })();
      return closing;
    },
  };
}

export const memoryFactory: RQFactory = (opts = {}) => {
  const m = fakeMetrics();
  const errors: Array<[unknown, string]> = [];
  const gate = gatePool(opts.concurrency ?? 2, opts.maxQueue, opts.latest);
  const queue = new MemoryRenderQueue({
    ...(opts.maxJobBytes ? { maxJobBytes: opts.maxJobBytes } : {}),
    metrics: m.metrics,
    onError: (e, c) => void errors.push([e, c]),
  });
  return Promise.resolve(harness(queue, gate, m, errors, async () => {}));
};

let seq = 0;
/** A unique prefix per test (the suite's keys never meet another run's). */
export function uniquePrefix(): string {
  return `t_render_${process.pid}_${Date.now().toString(36)}_${seq++}`;
}

/** Deletes the render queue's keys under `prefix` (SCAN, not KEYS). */
export async function deleteKeys(prefix: string): Promise<void> {
  await deleteRedisKeys(renderQueueKeys(prefix).base, REDIS_URL);
}

export function bullmqFactory(prefix?: string): RQFactory {
  return async (opts = {}) => {
    const p = prefix ?? uniquePrefix();
    const m = fakeMetrics();
    const errors: Array<[unknown, string]> = [];
    const gate = gatePool(opts.concurrency ?? 2, undefined, opts.latest);
    const queue = await BullmqRenderQueue.open({
      redisUrl: REDIS_URL,
      prefix: p,
      ...(opts.maxQueue ? { maxQueue: opts.maxQueue } : {}),
      ...(opts.maxJobBytes ? { maxJobBytes: opts.maxJobBytes } : {}),
      metrics: m.metrics,
      onError: (e, c) => void errors.push([e, c]),
    });
    return harness(queue, gate, m, errors, () => (prefix ? Promise.resolve() : deleteKeys(p)), opts.jobConcurrency);
  };
}
