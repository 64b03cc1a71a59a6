/**
 * `npm run bench -- lmsr [--json FILE] [--min-ms 2000] [--warmup-ms 500] [--b 1000]`
 *
 * Trades per second on one core through the Market's own path: validation,
 * idempotency (a distinct id per trade, recorded), delta-form cost, integer
 * rounding, and reservation/credit against an InMemoryWallet. The shape of a
 * cash-out market under load: each iteration funds 500 viewers, opens
 * a market and runs 10,000 trades (60 % buy, 30 % sell = cash-out of shares
 * held, 10 % buy-for-budget), all inside the timed region; iterations repeat
 * for at least `--min-ms` after `--warmup-ms` of warm-up. Reported for n = 2
 * and n = 10 outcomes; `tradesPerSecond` in the JSON is the lower of the two.
 * Every trade must succeed and points must be conserved, or the bench fails.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { InMemoryWallet, Market } from '../src/index.ts';

const TRADES = 10_000;
const VIEWERS = 500;
const FUNDS_PER_VIEWER = 1e9;
const MAX_SHARES = 100;
const OUTCOMES = [2, 10] as const;

const BUY = 0;
const SELL = 1;
const BUDGET = 2;

/** A fixed trade list: typed arrays and pre-built strings, so the timed loop allocates nothing of its own. */
interface Plan {
  readonly n: number;
  readonly kind: Uint8Array;
  readonly viewer: string[];
  readonly outcome: Uint8Array;
  readonly amount: Float64Array;
  readonly ids: string[];
}

/** mulberry32: a small deterministic PRNG, so every run trades the same list. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** 60 % buys of 1..100 shares, 30 % sells of 1..all of a held position, 10 % budgets of 1..100 points. */
function plan(n: number, seed: number): Plan {
  const rand = rng(seed);
  const names = Array.from({ length: VIEWERS }, (_, v) => `viewer-${v}`);
  const held = Array.from({ length: VIEWERS }, () => new Array<number>(n).fill(0));
  const p: Plan = {
    n,
    kind: new Uint8Array(TRADES),
    viewer: [],
    outcome: new Uint8Array(TRADES),
    amount: new Float64Array(TRADES),
    ids: [],
  };
  for (let t = 0; t < TRADES; t++) {
    const v = Math.floor(rand() * VIEWERS);
    const i = Math.floor(rand() * n);
    const r = rand();
    const h = held[v]!;
    let kind = r < 0.6 ? BUY : r < 0.9 ? SELL : BUDGET;
    if (kind === SELL && h[i]! === 0) kind = BUY;
    let amount: number;
    if (kind === SELL) {
      amount = 1 + Math.floor(rand() * h[i]!);
      h[i] = h[i]! - amount;
    } else {
      amount = 1 + Math.floor(rand() * MAX_SHARES);
      // Budget trades' shares are only known when run; they are never sold here.
      if (kind === BUY) h[i] = h[i]! + amount;
    }
    p.kind[t] = kind;
    p.viewer.push(names[v]!);
    p.outcome[t] = i;
    p.amount[t] = amount;
    p.ids.push(`trade-${t}`);
  }
  return p;
}

/** One iteration: fund the viewers, open a market, run every trade. Returns the market (checked outside the timing). */
function iteration(p: Plan, b: number, names: readonly string[]): { market: Market; wallet: InMemoryWallet } {
  const wallet = new InMemoryWallet();
  for (const v of names) wallet.fund(v, FUNDS_PER_VIEWER);
  const market = new Market({ b, outcomes: p.n, wallet });
  const { kind, viewer, outcome, amount, ids } = p;
  for (let t = 0; t < TRADES; t++) {
    const k = kind[t];
    if (k === BUY) market.buy(ids[t]!, viewer[t]!, outcome[t]!, amount[t]!, Number.MAX_SAFE_INTEGER);
    else if (k === SELL) market.sell(ids[t]!, viewer[t]!, outcome[t]!, amount[t]!, 0);
    else market.buyForBudget(ids[t]!, viewer[t]!, outcome[t]!, amount[t]!);
  }
  return { market, wallet };
}

/** Conservation and completeness after an iteration (untimed). */
function check(market: Market, wallet: InMemoryWallet): void {
  if (market.tradeCount !== TRADES) throw new Error(`only ${market.tradeCount} of ${TRADES} trades recorded`);
  const total = wallet.total() + market.makerBalance;
  const expected = VIEWERS * FUNDS_PER_VIEWER + market.subsidy;
  if (total !== expected) throw new Error(`points not conserved: ${total} ≠ ${expected}`);
}

/** One row of the table (and of `runs` in the JSON). */
export interface LmsrBenchRun {
  readonly outcomes: number;
  readonly iterations: number;
  readonly trades: number;
  readonly elapsedMs: number;
  readonly tradesPerSecond: number;
  /** Fastest single iteration of 10,000 trades (ms). */
  readonly bestIterationMs: number;
  /** Median iteration (ms). */
  readonly medianIterationMs: number;
}

function measure(n: number, b: number, warmupMs: number, minMs: number): LmsrBenchRun {
  const p = plan(n, 0x5eed + n);
  const names = Array.from({ length: VIEWERS }, (_, v) => `viewer-${v}`);
  const warmEnd = performance.now() + warmupMs;
  do {
    const { market, wallet } = iteration(p, b, names);
    check(market, wallet);
  } while (performance.now() < warmEnd);
  const times: number[] = [];
  let elapsed = 0;
  while (elapsed < minMs) {
    const t0 = performance.now();
    const { market, wallet } = iteration(p, b, names);
    const dt = performance.now() - t0;
    check(market, wallet);
    times.push(dt);
    elapsed += dt;
  }
  times.sort((x, y) => x - y);
  return {
    outcomes: n,
    iterations: times.length,
    trades: times.length * TRADES,
    elapsedMs: Math.round(elapsed * 10) / 10,
    tradesPerSecond: Math.round((times.length * TRADES) / (elapsed / 1000)),
    bestIterationMs: Math.round(times[0]! * 1000) / 1000,
    medianIterationMs: Math.round(times[Math.floor(times.length / 2)]! * 1000) / 1000,
  };
}

function num(name: string, v: string): number {
  const x = Number(v);
  if (!Number.isFinite(x) || x < 0) throw new Error(`--${name} must be a number ≥ 0, got ${v}`);
  return x;
}

/**
 * Runs the bench and prints the table; writes the JSON report to `--json FILE`.
 * @returns the process exit code (0)
 */
export async function main(args: readonly string[]): Promise<number> {
  const { values } = parseArgs({
    args: [...args],
    options: {
      json: { type: 'string' },
      'min-ms': { type: 'string', default: '2000' },
      'warmup-ms': { type: 'string', default: '500' },
      b: { type: 'string', default: '1000' },
    },
  });
  const params = {
    tradesPerIteration: TRADES,
    viewers: VIEWERS,
    fundsPerViewer: FUNDS_PER_VIEWER,
    b: num('b', values.b),
    mix: { buy: 0.6, sell: 0.3, budget: 0.1 },
    sharesPerTrade: `1..${MAX_SHARES} (sells: 1..held)`,
    minMs: num('min-ms', values['min-ms']),
    warmupMs: num('warmup-ms', values['warmup-ms']),
    outcomes: [...OUTCOMES],
  };
  const runs = OUTCOMES.map((n) => measure(n, params.b, params.warmupMs, params.minMs));
  const tradesPerSecond = Math.min(...runs.map((r) => r.tradesPerSecond));
  const machine = cpus()[0]?.model ?? 'unknown';
  console.log(
    `lmsr: ${TRADES.toLocaleString('en-US')} trades × ${VIEWERS} funded viewers per iteration, b = ${params.b}, buy/sell/budget 60/30/10 %, one core (${machine}, node ${process.version})`,
  );
  console.log('| n | iterations | trades | elapsed ms | trades/s | best 10k ms | median 10k ms |');
  console.log('|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of runs) {
    console.log(
      `| ${r.outcomes} | ${r.iterations} | ${r.trades.toLocaleString('en-US')} | ${r.elapsedMs} | ${r.tradesPerSecond.toLocaleString('en-US')} | ${r.bestIterationMs} | ${r.medianIterationMs} |`,
    );
  }
  console.log(`tradesPerSecond (lower of n = 2 and n = 10): ${tradesPerSecond.toLocaleString('en-US')}`);
  if (values.json !== undefined) {
    const file = resolve(values.json);
    mkdirSync(dirname(file), { recursive: true });
    const report = {
      bench: 'lmsr',
      tradesPerSecond,
      runs,
      params,
      machine,
      node: process.version,
      date: new Date().toISOString(),
      command: `npm run bench -- lmsr ${args.join(' ')}`.trim(),
    };
    writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
    console.error(`report written to ${file}`);
  }
  return 0;
}
