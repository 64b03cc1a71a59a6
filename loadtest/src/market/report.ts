/**
 * The market scenario's report: the JSON written by `--json` and the printed
 * table. Every field is defined in loadtest/README.md ("market").
 */
import type { LatencySummary } from '../hist.ts';
import type { MachineInfo } from '../crowd/report.ts';

/** The four kinds of trade a viewer makes. */
export type TradeKind = 'budgetBuy' | 'sharesBuy' | 'sell' | 'stake';
export const TRADE_KINDS: readonly TradeKind[] = ['budgetBuy', 'sharesBuy', 'sell', 'stake'];

/** Counts of one kind of trade (or of all of them). */
export interface TradeCounts {
  /** Frames written to a socket. */
  sent: number;
  /** Acks received in time (ok + refused). */
  acked: number;
  /** Acks with `ok: true` (committed to the ledger). */
  ok: number;
  /** Acks with `ok: false`, by `code`. */
  refused: Record<string, number>;
  /** Trades without an ack within `ackTimeoutMs`, or whose socket closed first. */
  failed: number;
}

/** One self-check of the server's answers: how many were checked, how many were wrong, the first few. */
export interface CheckResult {
  checked: number;
  mismatches: number;
  /** Up to 10 descriptions of mismatches. */
  samples: string[];
}

/** One round's settlement as the game saw it. */
export interface SettledRound {
  channel: string;
  round: string;
  kind: 'pool' | 'market';
  /** The outcome settled on. */
  winner: string;
  /** Stakes or trades the server counted in the round. */
  entries: number | null;
  /** round.settle request → its result (payouts committed), ms. */
  settleMs: number | null;
  /** Market: outstanding shares per outcome at the close. */
  q?: number[];
  /** Market: prices per outcome at the close. */
  prices?: number[];
  /** Pool: points staked per outcome. */
  pool?: number[];
  /** The refusal code when the settle failed. */
  error?: string;
}

export interface MarketReport {
  scenario: 'market';
  /** The command line (secret and key masked), or a description of the programmatic call. */
  command: string;
  /** ISO time the run started. */
  startedAt: string;
  url: string;
  machine: MachineInfo;
  config: {
    viewers: number;
    trades: number;
    channels: number;
    outcomes: string[];
    grantPoints: number;
    liquidity: number;
    ratePerViewer: number;
    ackTimeoutMs: number;
    budgetS: number;
    roundDurationMs: number;
    tenantId: string;
    /** Unique per run: round ids, viewer ids and grant ids carry it. */
    runId: string;
    /** Percent of trades of each kind (a sell without a position becomes a budget buy). */
    mixPct: Record<TradeKind, number>;
    /** Where `ledger verify` read (password masked), or null when skipped. */
    databaseUrl: string | null;
    databaseSchema: string;
  };
  rounds: Array<{ channel: string; market: string; pool: string }>;
  funding: { viewers: number; points: number; ms: number };
  viewers: {
    requested: number;
    connected: number;
    failed: number;
    failedByCode: Record<string, number>;
    dropped: number;
    droppedByCode: Record<string, number>;
  };
  trades: TradeCounts & {
    /** Refusals whose code is not a legitimate market outcome (see README): should be 0. */
    unexpected: number;
    /** `failed` by reason: `timeout`, or the client error code. */
    failedByCode: Record<string, number>;
    /** Acks that arrived after their trade had been counted as failed. */
    late: number;
    byKind: Record<TradeKind, TradeCounts>;
    /** Points moved by ok trades (from the acks): paid for buys, received for sells, staked. */
    volume: { buyPoints: number; sellPoints: number; stakePoints: number };
  };
  /** Committed trades (`ok`) per second of the trading window. */
  tradesPerSecond: number;
  /** Acked trades (ok + refused) per second of the trading window. */
  ackedPerSecond: number;
  /** First send → last ack (or the budget), s. */
  tradingS: number;
  /** Send → ack, every acked trade (ok and refused). */
  ackMs: LatencySummary;
  ackMsByKind: Record<TradeKind, LatencySummary>;
  connectMs: LatencySummary;
  checks: {
    /** Every ok ack against the viewer's own book: cost within its limit, shares, position, balance. */
    acks: CheckResult;
    /** Each viewer's wallet (GET /v1/balances/:viewer) after the payouts against grant − costs + proceeds + payouts. */
    balances: CheckResult & { skipped: number };
    /** Market payouts (balance frames, reason `payout`) against the winning positions held. */
    marketPayouts: { expected: number; paid: number; viewersExpected: number; viewersPaid: number };
    /** Pool payouts against the points staked (equal with LEDGER_HOUSE_TAKE_BPS = 0). */
    poolPayouts: { staked: number; paid: number; viewersPaid: number };
  };
  settle: { market: SettledRound[]; pool: SettledRound[] };
  /** `ok`, `skipped: …`, or the CLI's failure lines. */
  ledgerVerify: string;
  ledgerVerifyMs: number | null;
  serverPid: number | null;
  serverPidSource: 'flag' | 'port' | null;
  /** The server's CPU over the trading window, % of one core. */
  serverCpuPct: number | null;
  serverCpuMsPerTrade: number | null;
  /** This process (viewers, games) over the trading window, % of one core. */
  generatorCpuPct: number;
  machineCpuPct: number | null;
  generatorBound: boolean;
  elapsedS: number;
  /** Every trade sent and answered in time, and every round settled. */
  complete: boolean;
  warnings: string[];
}

const fmt = (n: number | null | undefined, unit = ''): string =>
  n === null || n === undefined ? 'n/a' : `${Number.isInteger(n) ? n.toLocaleString('en-US') : n.toFixed(2)}${unit}`;
const lat = (s: LatencySummary): string =>
  `p50 ${fmt(s.p50)}  p95 ${fmt(s.p95)}  p99 ${fmt(s.p99)}  max ${fmt(s.max)}  (n=${s.count.toLocaleString('en-US')})`;
const codes = (m: Record<string, number>): string => {
  const e = Object.entries(m);
  return e.length === 0 ? '' : `  [${e.map(([k, v]) => `${k}: ${v}`).join(', ')}]`;
};
const total = (m: Record<string, number>): number => Object.values(m).reduce((a, b) => a + b, 0);
const check = (c: CheckResult): string =>
  `${fmt(c.mismatches)} wrong of ${fmt(c.checked)}${c.samples[0] ? `  (first: ${c.samples[0]})` : ''}`;

/** The report as an aligned two-column text table. */
export function formatMarketReport(r: MarketReport): string {
  const rows: Array<[string, string]> = [
    ['command', r.command],
    ['url', r.url],
    [
      'machine',
      `${r.machine.cpuCount}× ${r.machine.cpuModel}, ${(r.machine.memoryBytes / 2 ** 30).toFixed(1)} GiB, node ${r.machine.nodeVersion}`,
    ],
    [
      'config',
      `${r.config.viewers} viewers, ${r.config.trades} trades, ${r.config.channels} channels, grant ${fmt(r.config.grantPoints)}, b ${fmt(r.config.liquidity)}, ${r.config.ratePerViewer || 'unpaced'}${r.config.ratePerViewer ? '/s per viewer' : ''}, run ${r.config.runId}`,
    ],
    ['viewers connected', `${fmt(r.viewers.connected)} / ${fmt(r.viewers.requested)}`],
    [
      'viewers failed / dropped',
      `${fmt(r.viewers.failed)}${codes(r.viewers.failedByCode)} / ${fmt(r.viewers.dropped)}${codes(r.viewers.droppedByCode)}`,
    ],
    ['funding', `${fmt(r.funding.viewers)} grants of ${fmt(r.funding.points)} in ${fmt(r.funding.ms)} ms`],
    ['trades sent', fmt(r.trades.sent)],
    ['trades acked', `${fmt(r.trades.acked)} (ok ${fmt(r.trades.ok)})`],
    ['trades refused', `${fmt(total(r.trades.refused))}${codes(r.trades.refused)}; unexpected ${fmt(r.trades.unexpected)}`],
    ['trades failed', `${fmt(r.trades.failed)}${codes(r.trades.failedByCode)}; late acks ${fmt(r.trades.late)}`],
    [
      'volume (points)',
      `bought ${fmt(r.trades.volume.buyPoints)}, sold ${fmt(r.trades.volume.sellPoints)}, staked ${fmt(r.trades.volume.stakePoints)}`,
    ],
    ['trades per second', `${fmt(r.tradesPerSecond)} ok (${fmt(r.ackedPerSecond)} acked) over ${fmt(r.tradingS)} s`],
    ['ack ms', lat(r.ackMs)],
  ];
  for (const k of Object.keys(r.ackMsByKind) as TradeKind[]) rows.push([`  ${k}`, lat(r.ackMsByKind[k])]);
  rows.push(
    ['connect ms', lat(r.connectMs)],
    ['check: acks', check(r.checks.acks)],
    ['check: balances', `${check(r.checks.balances)}; skipped ${fmt(r.checks.balances.skipped)}`],
    [
      'check: market payouts',
      `paid ${fmt(r.checks.marketPayouts.paid)} of ${fmt(r.checks.marketPayouts.expected)} expected, to ${fmt(r.checks.marketPayouts.viewersPaid)} of ${fmt(r.checks.marketPayouts.viewersExpected)} viewers`,
    ],
    [
      'check: pool payouts',
      `paid ${fmt(r.checks.poolPayouts.paid)} of ${fmt(r.checks.poolPayouts.staked)} staked, to ${fmt(r.checks.poolPayouts.viewersPaid)} viewers`,
    ],
  );
  for (const s of [...r.settle.market, ...r.settle.pool]) {
    rows.push([
      `settle ${s.kind} ${s.channel}`,
      s.error
        ? `FAILED ${s.error}`
        : `${s.round} on ${s.winner}: ${fmt(s.entries)} entries, ${fmt(s.settleMs)} ms${s.prices ? `, prices ${s.prices.map((p) => p.toFixed(3)).join('/')}` : ''}${s.pool ? `, pool ${s.pool.join('/')}` : ''}`,
    ]);
  }
  rows.push(
    ['ledger verify', `${r.ledgerVerify.split('\n')[0] ?? ''}${r.ledgerVerifyMs === null ? '' : ` (${fmt(r.ledgerVerifyMs)} ms)`}`],
    [
      'server cpu %',
      r.serverCpuPct === null
        ? 'unknown'
        : `${fmt(r.serverCpuPct)} (pid ${r.serverPid}, ${r.serverPidSource}); ${fmt(r.serverCpuMsPerTrade)} ms per trade`,
    ],
    ['generator cpu %', fmt(r.generatorCpuPct)],
    ['machine cpu % (all cores)', fmt(r.machineCpuPct)],
    ['generator bound', r.generatorBound ? 'YES: the load generator, not the server, may be the limit' : 'no'],
    ['elapsed s', fmt(r.elapsedS)],
    ['complete', r.complete ? 'yes' : 'NO'],
  );
  for (const line of r.ledgerVerify.split('\n').slice(1)) rows.push(['ledger verify', line]);
  for (const w of r.warnings) rows.push(['warning', w]);
  const width = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join('\n');
}
