/**
 * hedgedRequest on the in-process bus: a queue group with a member that
 * never answers (a paused process) and one that does. The in-process bus
 * hands a queue group's messages round robin from its first member, so the
 * silent member, subscribed first, gets the first request and the other one
 * the re-send.
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { BusError, InProcessBus, MAX_HEDGES, hedgedRequest, type Bus, type BusMessage } from '../src/index.ts';
import { randomPrefix } from './bus-suite.ts';

const enc = new TextEncoder();
const dec = new TextDecoder();
const text = (s: string): Uint8Array => enc.encode(s);
const str = (d: Uint8Array): string => dec.decode(d);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const HEDGE_MS = 50;
const TIMEOUT_MS = 2_000;

function setup(t: TestContext): { bus: Bus; subject: string } {
  const bus = new InProcessBus();
  t.after(() => bus.close());
  return { bus, subject: `${randomPrefix()}.work` };
}

/** A queue member that keeps every request and never answers. */
function silent(bus: Bus, subject: string): BusMessage[] {
  const got: BusMessage[] = [];
  bus.subscribe(subject, (m) => got.push(m), { queue: 'q' });
  return got;
}

/** A queue member that answers `name:<data>` after `delayMs` (0: at once). */
function answering(bus: Bus, subject: string, name: string, delayMs = 0): BusMessage[] {
  const got: BusMessage[] = [];
  bus.subscribe(
    subject,
    (m) => {
      got.push(m);
      const reply = (): void => m.respond(text(`${name}:${str(m.data)}`));
      if (delayMs > 0) setTimeout(reply, delayMs);
      else reply();
    },
    { queue: 'q' },
  );
  return got;
}

async function rejectsWithCode(p: Promise<unknown>, code: BusError['code']): Promise<void> {
  await assert.rejects(p, (err: unknown) => err instanceof BusError && err.code === code);
}

void test('hedge - a silent member: the re-send is answered after about hedgeAfterMs, not the timeout', async (t) => {
  const { bus, subject } = setup(t);
  const hung = silent(bus, subject);
  const live = answering(bus, subject, 'live');
  const hedges: number[] = [];
  const started = performance.now();
  const reply = await hedgedRequest(bus, subject, text('x'), {
    timeoutMs: TIMEOUT_MS,
    hedgeAfterMs: HEDGE_MS,
    headers: { 'x-h': '1' },
    onHedge: (n) => hedges.push(n),
  });
  const took = performance.now() - started;
  assert.equal(str(reply.data), 'live:x');
  assert.ok(took >= HEDGE_MS - 5 && took < TIMEOUT_MS / 2, `answered in ${took.toFixed(0)} ms`);
  assert.deepEqual(hedges, [1]);
  assert.equal(hung.length, 1, 'the first request went to the silent member');
  assert.equal(live.length, 1, 'the re-send to the other one');
  assert.equal(str(live[0]!.data), 'x', 'same data');
  assert.equal(live[0]!.headers?.['x-h'], '1', 'same headers');
  assert.notEqual(live[0]!.reply, hung[0]!.reply, 'a new request (its own reply subject)');
});

void test('hedge - a prompt answer sends nothing more', async (t) => {
  const { bus, subject } = setup(t);
  const live = answering(bus, subject, 'live');
  let hedges = 0;
  const reply = await hedgedRequest(bus, subject, text('x'), { timeoutMs: TIMEOUT_MS, hedgeAfterMs: HEDGE_MS, onHedge: () => hedges++ });
  assert.equal(str(reply.data), 'live:x');
  await sleep(HEDGE_MS * 3);
  assert.equal(hedges, 0);
  assert.equal(live.length, 1);
});

void test('hedge - first answer wins; the later one is ignored', async (t) => {
  const { bus, subject } = setup(t);
  answering(bus, subject, 'slow', HEDGE_MS * 3);
  answering(bus, subject, 'fast');
  const reply = await hedgedRequest(bus, subject, text('x'), { timeoutMs: TIMEOUT_MS, hedgeAfterMs: HEDGE_MS });
  assert.equal(str(reply.data), 'fast:x');
  await sleep(HEDGE_MS * 4); // the slow answer arrives now and goes nowhere
});

void test('hedge - nobody answers: bounded re-sends, fails with timeout at the overall deadline', async (t) => {
  const { bus, subject } = setup(t);
  const a = silent(bus, subject);
  const b = silent(bus, subject);
  const timeoutMs = 400;
  const hedges: number[] = [];
  const started = performance.now();
  await rejectsWithCode(
    hedgedRequest(bus, subject, text('x'), { timeoutMs, hedgeAfterMs: HEDGE_MS, maxHedges: 2, onHedge: (n) => hedges.push(n) }),
    'timeout',
  );
  const took = performance.now() - started;
  assert.ok(took >= timeoutMs - 5 && took < timeoutMs + 150, `failed after ${took.toFixed(0)} ms`);
  assert.deepEqual(hedges, [1, 2], 'maxHedges re-sends, no more');
  assert.equal(a.length + b.length, 3);
});

void test('hedge - no re-send when hedgeAfterMs is not below timeoutMs, or maxHedges is 0', async (t) => {
  const { bus, subject } = setup(t);
  const got = silent(bus, subject);
  let hedges = 0;
  await rejectsWithCode(hedgedRequest(bus, subject, text('x'), { timeoutMs: 100, hedgeAfterMs: 100, onHedge: () => hedges++ }), 'timeout');
  await rejectsWithCode(
    hedgedRequest(bus, subject, text('x'), { timeoutMs: 150, hedgeAfterMs: 20, maxHedges: 0, onHedge: () => hedges++ }),
    'timeout',
  );
  assert.equal(hedges, 0);
  assert.equal(got.length, 2);
});

void test('hedge - no responders fails at once, without a re-send', async (t) => {
  const { bus, subject } = setup(t);
  let hedges = 0;
  const started = performance.now();
  await rejectsWithCode(
    hedgedRequest(bus, subject, text('x'), { timeoutMs: TIMEOUT_MS, hedgeAfterMs: HEDGE_MS, onHedge: () => hedges++ }),
    'no_responders',
  );
  assert.ok(performance.now() - started < HEDGE_MS, 'before the hedge delay');
  await sleep(HEDGE_MS * 2);
  assert.equal(hedges, 0, 'the pending re-send was cancelled');
});

void test('hedge - a re-send that finds no responders does not fail a request still in flight', async (t) => {
  const { bus, subject } = setup(t);
  // The only member answers late and leaves once it got the first request: the re-send has no responders.
  const sub = bus.subscribe(
    subject,
    (m) => {
      sub.unsubscribe();
      setTimeout(() => m.respond(text('late')), HEDGE_MS * 3);
    },
    { queue: 'q' },
  );
  let hedges = 0;
  const reply = await hedgedRequest(bus, subject, text('x'), { timeoutMs: TIMEOUT_MS, hedgeAfterMs: HEDGE_MS, onHedge: () => hedges++ });
  assert.equal(str(reply.data), 'late');
  assert.equal(hedges, 1);
});

void test('hedge - closed bus fails with closed; pending requests fail with closed at close()', async (t) => {
  const { bus, subject } = setup(t);
  silent(bus, subject);
  const pending = hedgedRequest(bus, subject, text('x'), { timeoutMs: TIMEOUT_MS, hedgeAfterMs: HEDGE_MS });
  await sleep(HEDGE_MS * 2);
  await bus.close();
  await rejectsWithCode(pending, 'closed');
  await rejectsWithCode(hedgedRequest(bus, subject, text('x'), { timeoutMs: TIMEOUT_MS, hedgeAfterMs: HEDGE_MS }), 'closed');
});

void test('hedge - bad options are RangeErrors and send nothing', async (t) => {
  const { bus, subject } = setup(t);
  const got = silent(bus, subject);
  const bad = [
    { timeoutMs: 0, hedgeAfterMs: HEDGE_MS },
    { timeoutMs: TIMEOUT_MS, hedgeAfterMs: 0 },
    { timeoutMs: TIMEOUT_MS, hedgeAfterMs: Number.NaN },
    { timeoutMs: TIMEOUT_MS, hedgeAfterMs: HEDGE_MS, maxHedges: -1 },
    { timeoutMs: TIMEOUT_MS, hedgeAfterMs: HEDGE_MS, maxHedges: MAX_HEDGES + 1 },
    { timeoutMs: TIMEOUT_MS, hedgeAfterMs: HEDGE_MS, maxHedges: 1.5 },
  ];
  for (const opts of bad) await assert.rejects(hedgedRequest(bus, subject, text('x'), opts), RangeError, JSON.stringify(opts));
  await bus.flush();
  assert.equal(got.length, 0);
});
