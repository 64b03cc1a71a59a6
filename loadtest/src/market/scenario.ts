/**
 * The `market` scenario: funded viewers trading in LMSR market rounds and
 * staking in pool rounds through the real server, then settlement and
 * `crowdplay ledger verify`.
 *
 * 1. One game client per channel (`market-0 …`) declares an action and opens
 *    a `market` round (LMSR, outcomes a/b/c) and a `pool` round, both lasting
 *    the run's budget + 60 s. Round, viewer and grant ids carry a run id, so
 *    runs never collide on a long-lived server.
 * 2. Every viewer is funded over HTTP (POST /v1/grants, tenant API key).
 * 3. The viewers connect (viewers.ts) and trade in closed loops until
 *    `trades` trades were sent and answered (or the budget ran out).
 * 4. The game settles each market round on `a` and each pool round on `b`
 *    (payouts committed before the answer); the viewers' payout frames and
 *    wallets (GET /v1/balances/:viewer) are checked against their own books.
 * 5. `crowdplay ledger verify` runs against the server's PostgreSQL.
 *
 * Bounded: trading stops at `budgetS`; every request has a deadline; rounds
 * left unsettled by a failure are cancelled (refunds) on the way out.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { CrowdplayError, type ActionSpec, type RoundView } from '@crowdplay/protocol';
import { GameClient } from '@crowdplay/sdk-game';
import { summarize } from '../hist.ts';
import { clockTicksPerSecond, findListeningPid, machineCpuTicks, processCpuMs } from '../proc.ts';
import { createTokenMinter } from '../tokens.ts';
import { DEV_TENANT, GENERATOR_BOUND_PCT, MACHINE_SATURATED_PCT, machineInfo } from '../crowd/scenario.ts';
import type { MarketReport, SettledRound } from './report.ts';
import { MarketCrowd, MIX_PCT, type ChannelRounds } from './viewers.ts';
import { balanceOf, eachLimited, grant, httpBase, ledgerVerify } from './server-api.ts';

/** Options of {@link runMarketScenario}. */
export interface MarketOptions {
  /** Gateway base URL, e.g. `http://127.0.0.1:8080`. */
  url: string;
  /** Viewers (≥ 1), all in this process (at most MAX_MARKET_VIEWERS). */
  viewers: number;
  /** Trades to send in all (≥ 1). */
  trades: number;
  /** Channels `market-0 … market-(K-1)`; viewer i trades in channel i mod K. @defaultValue 1 */
  channels?: number;
  /** @defaultValue DEV_TENANT.id */
  tenantId?: string;
  /** Tenant signing secret for viewer JWTs. @defaultValue DEV_TENANT.secret */
  tenantSecret?: string;
  /** Tenant API key: game clients, grants, balance reads. @defaultValue DEV_TENANT.key */
  tenantKey?: string;
  /**
   * The server's PostgreSQL (for `ledger verify`). Required unless
   * `skipVerify`: a server on embedded PGlite holds its data directory
   * locked, so the ledger cannot be verified while it runs.
   */
  databaseUrl?: string;
  /** The server's DATABASE_SCHEMA. @defaultValue 'public' */
  databaseSchema?: string;
  /** Skip `ledger verify` (reported as `skipped`). @defaultValue false */
  skipVerify?: boolean;
  /** Points granted to each viewer. @defaultValue 100_000 */
  grantPoints?: number;
  /**
   * LMSR liquidity b of the market rounds, shares. The default keeps the
   * prices of the last update (≤ CHANNEL_UPDATE_MS old) within the viewers'
   * 5 % slippage limits at thousands of trades per second; with b = 1,000
   * most share buys and sells are refused for slippage. @defaultValue 100_000
   */
  liquidity?: number;
  /** Most trades per second one viewer sends; 0 = unpaced (raise the server's INTENT_RATE_PER_S). @defaultValue 10 */
  ratePerViewer?: number;
  /** A trade without an ack this long after its send counts as failed, ms. @defaultValue 10_000 */
  ackTimeoutMs?: number;
  /** Trading stops after this many seconds even if not every trade was sent. @defaultValue 300 */
  budgetS?: number;
  /** Per-connection welcome deadline, ms. @defaultValue 15_000 */
  welcomeDeadlineMs?: number;
  /** Channel name prefix. @defaultValue 'market-' */
  channelPrefix?: string;
  /** Server pid for serverCpuPct; else the process listening on the URL's port. */
  serverPid?: number;
  /** Receives the progress line every 2 s. */
  onProgress?: (line: string) => void;
  /** Recorded in the report as `command`. */
  command?: string;
}

/** Viewers one market run holds (one process; the sockets' file descriptors and one event loop). */
export const MAX_MARKET_VIEWERS = 10_000;
/** The outcomes of every round. */
export const MARKET_OUTCOMES = ['a', 'b', 'c'] as const;
/** Market rounds settle on this outcome, pool rounds on the next. */
const MARKET_WINNER = 0;
const POOL_WINNER = 1;
/** Rounds last the budget plus this, ms. */
const ROUND_SLACK_MS = 60_000;
const GAME_ACTION: ActionSpec[] = [{ name: 'cheer', maxPerTick: 100 }];
const FUNDING_CONCURRENCY = 16;
const PAYOUT_FRAMES_DEADLINE_MS = 5_000;
const GAME_REQUEST_TIMEOUT_MS = 60_000;

interface Resolved {
  url: string;
  viewers: number;
  trades: number;
  channels: number;
  tenantId: string;
  tenantSecret: string;
  tenantKey: string;
  databaseUrl: string | null;
  databaseSchema: string;
  grantPoints: number;
  liquidity: number;
  ratePerViewer: number;
  ackTimeoutMs: number;
  budgetS: number;
  welcomeDeadlineMs: number;
  channelPrefix: string;
  serverPid: number | undefined;
  onProgress: (line: string) => void;
  command: string;
}

function invalid(msg: string): CrowdplayError {
  return new CrowdplayError('CP_ERR_CONFIG_INVALID', [msg]);
}

function resolveOptions(o: MarketOptions): Resolved {
  const int = (name: string, v: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    if (!Number.isInteger(v) || v < min || v > max) throw invalid(`${name} must be an integer from ${min} to ${max}, got ${v}`);
    return v;
  };
  try {
    const u = new URL(o.url);
    if (!['http:', 'https:', 'ws:', 'wss:'].includes(u.protocol)) throw new Error(u.protocol);
  } catch (err) {
    throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [`url: ${o.url}`], { cause: err });
  }
  const budgetS = o.budgetS ?? 300;
  if (!(budgetS > 0 && budgetS <= 3_000)) throw invalid(`budgetS must be in (0, 3000], got ${budgetS}`);
  const skip = o.skipVerify ?? false;
  const databaseUrl = o.databaseUrl ? o.databaseUrl : null;
  if (!skip && databaseUrl === null) {
    throw invalid(
      'ledger verify needs the PostgreSQL of the server: pass databaseUrl (--database-url, or DATABASE_URL); a server on embedded PGlite locks its data directory (use skipVerify / --skip-verify)',
    );
  }
  if (databaseUrl !== null && !/^postgres(ql)?:\/\//.test(databaseUrl))
    throw invalid(`databaseUrl must be postgres://…, got ${databaseUrl}`);
  const databaseSchema = o.databaseSchema ?? 'public';
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(databaseSchema))
    throw invalid(`databaseSchema must be a lower-case SQL identifier, got ${databaseSchema}`);
  const rate = o.ratePerViewer ?? 10;
  if (!(rate >= 0 && rate <= 1_000)) throw invalid(`ratePerViewer must be in [0, 1000], got ${rate}`);
  return {
    url: o.url,
    viewers: int('viewers', o.viewers, 1, MAX_MARKET_VIEWERS),
    trades: int('trades', o.trades, 1, 100_000_000),
    channels: int('channels', o.channels ?? 1, 1, 1_000),
    tenantId: o.tenantId ?? DEV_TENANT.id,
    tenantSecret: o.tenantSecret ?? DEV_TENANT.secret,
    tenantKey: o.tenantKey ?? DEV_TENANT.key,
    databaseUrl: skip ? null : databaseUrl,
    databaseSchema,
    grantPoints: int('grantPoints', o.grantPoints ?? 100_000, 1, 1_000_000_000_000),
    liquidity: int('liquidity', o.liquidity ?? 100_000, 1, 1_000_000_000),
    ratePerViewer: rate,
    ackTimeoutMs: int('ackTimeoutMs', o.ackTimeoutMs ?? 10_000, 1),
    budgetS,
    welcomeDeadlineMs: int('welcomeDeadlineMs', o.welcomeDeadlineMs ?? 15_000, 1),
    channelPrefix: o.channelPrefix ?? 'market-',
    serverPid: o.serverPid,
    onProgress: o.onProgress ?? (() => {}),
    command: o.command ?? `runMarketScenario(${JSON.stringify({ url: o.url, viewers: o.viewers, trades: o.trades })})`,
  };
}

function urlPort(url: string): number {
  const u = new URL(url);
  if (u.port) return Number(u.port);
  return u.protocol === 'https:' || u.protocol === 'wss:' ? 443 : 80;
}

/** The URL with its password replaced by `***`. */
function maskUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable)';
  }
}

function withDeadline<T>(p: Promise<T>, ms: number, what: () => string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new CrowdplayError('CP_ERR_INTERNAL', [], { cause: new Error(`${what()}: no answer within ${ms} ms`) })),
      ms,
    );
  });
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
}

const round2 = (n: number): number => Math.round(n * 100) / 100;
const sum = (m: Record<string, number>): number => Object.values(m).reduce((a, b) => a + b, 0);

/**
 * Runs the market scenario against `opts.url` (see the module comment).
 *
 * @returns the report (README "market"); a run whose trades failed or whose
 *   ledger does not verify still returns its report (`complete`, `ledgerVerify`, `warnings`)
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID for bad options (before anything
 *   starts); CP_ERR_INTERNAL when the setup fails (a game client, a round or a
 *   grant refused, no viewer connected), with the server's answer in its cause;
 *   a game client's error code (e.g. CP_ERR_AUTH_INVALID for a wrong key)
 */
export async function runMarketScenario(opts: MarketOptions): Promise<MarketReport> {
  const o = resolveOptions(opts);
  const startedAt = new Date();
  const wall0 = performance.now();
  const warnings: string[] = [];
  const runId = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
  const base = httpBase(o.url);
  const outcomes = [...MARKET_OUTCOMES];
  const roundDurationMs = Math.ceil(o.budgetS * 1000) + ROUND_SLACK_MS;
  const rounds: ChannelRounds[] = Array.from({ length: o.channels }, (_, k) => ({
    channel: `${o.channelPrefix}${k}`,
    market: `mkt-${runId}`,
    pool: `pool-${runId}`,
  }));

  let serverPid: number | null = o.serverPid ?? null;
  let serverPidSource: MarketReport['serverPidSource'] = o.serverPid !== undefined ? 'flag' : null;
  if (serverPid === null) {
    serverPid = findListeningPid(urlPort(o.url));
    if (serverPid !== null) serverPidSource = 'port';
  }
  const ticksPerS = clockTicksPerSecond();

  let lastGameError = 'none';
  const games = rounds.map((r) => {
    const g = new GameClient({
      url: o.url,
      channel: r.channel,
      apiKey: o.tenantKey,
      backoff: { initialMs: 250, maxMs: 2_000 },
      welcomeDeadlineMs: o.welcomeDeadlineMs,
      requestTimeoutMs: GAME_REQUEST_TIMEOUT_MS,
    });
    g.on('error', (e) => (lastGameError = `${e.code}: ${e.message}`));
    g.declare(GAME_ACTION);
    return g;
  });
  /** Rounds opened and not yet settled: cancelled on the way out if anything fails. */
  const unfinished: Array<{ game: GameClient; round: string }> = [];
  let crowd: MarketCrowd | null = null;
  try {
    await withDeadline(
      Promise.all(games.map((g) => g.connect())),
      o.welcomeDeadlineMs + 5_000,
      () => `game clients (last error: ${lastGameError})`,
    );
    for (const [k, g] of games.entries()) {
      const r = rounds[k]!;
      await g.openRound({ round: r.market, kind: 'market', outcomes, durationMs: roundDurationMs, liquidity: o.liquidity });
      unfinished.push({ game: g, round: r.market });
      await g.openRound({ round: r.pool, kind: 'pool', outcomes, durationMs: roundDurationMs });
      unfinished.push({ game: g, round: r.pool });
    }
    o.onProgress(
      `[market] ${o.channels} channel(s): rounds ${rounds[0]!.market} and ${rounds[0]!.pool} open for ${roundDurationMs / 1000} s`,
    );

    // funding
    const viewerIds = Array.from({ length: o.viewers }, (_, i) => `mk-${runId}-${i}`);
    const f0 = performance.now();
    let fundedOther = 0;
    await eachLimited(viewerIds, FUNDING_CONCURRENCY, async (id, i) => {
      const balance = await grant(base, o.tenantKey, id, o.grantPoints, `loadtest-market-${runId}-${i}`);
      if (balance !== o.grantPoints) fundedOther++;
    });
    const fundingMs = Math.round(performance.now() - f0);
    if (fundedOther > 0) warnings.push(`${fundedOther} viewers' balance after the grant was not the grant (not fresh wallets?)`);
    o.onProgress(`[market] funded ${o.viewers} viewers with ${o.grantPoints} points each in ${fundingMs} ms`);

    // viewers
    const minter = await createTokenMinter(o.tenantId, o.tenantSecret);
    const tokens: string[] = [];
    for (let k = 0; k < viewerIds.length; k += 1_000) {
      tokens.push(...(await Promise.all(viewerIds.slice(k, k + 1_000).map((id) => minter.mint(id, Math.ceil(o.budgetS) + 900)))));
    }
    crowd = new MarketCrowd({
      url: o.url,
      viewers: viewerIds.map((id, i) => ({ id, token: tokens[i]!, channel: i % o.channels })),
      rounds,
      outcomes,
      grantPoints: o.grantPoints,
      liquidity: o.liquidity,
      trades: o.trades,
      ratePerViewer: o.ratePerViewer,
      ackTimeoutMs: o.ackTimeoutMs,
      welcomeDeadlineMs: o.welcomeDeadlineMs,
    });
    const c = crowd;
    await c.connectAll();
    o.onProgress(`[market] connected ${c.connected}/${o.viewers} viewers (failed ${c.connectFailed})`);
    if (c.connected === 0) {
      throw new CrowdplayError('CP_ERR_INTERNAL', [], {
        cause: new Error(`no viewer connected: ${JSON.stringify(c.connectFailedByCode)}`),
      });
    }

    // trading, with CPU samples around it
    const server0 = serverPid === null ? null : processCpuMs(serverPid, ticksPerS);
    const machine0 = machineCpuTicks();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    let prevAcked = 0;
    const progress = setInterval(() => {
      const s = summarize(c.ack);
      o.onProgress(
        `[market ${((performance.now() - t0) / 1000).toFixed(1).padStart(6)} s] sent ${c.counts.sent}/${o.trades} acked ${c.counts.acked} ok ${c.counts.ok}` +
          ` refused ${sum(c.counts.refused)} failed ${c.counts.failed} | acked/s ${Math.round((c.counts.acked - prevAcked) / 2)}` +
          ` | ack p95 ${s.p95 ?? 'n/a'} ms | dropped ${c.dropped}`,
      );
      prevAcked = c.counts.acked;
    }, 2_000);
    const budget = setTimeout(() => {
      warnings.push(`the budget of ${o.budgetS} s ran out after ${c.issued} of ${o.trades} trades`);
      c.stop();
    }, o.budgetS * 1000);
    try {
      await c.trade();
    } finally {
      clearTimeout(budget);
      clearInterval(progress);
    }
    const windowMs = performance.now() - t0;
    const server1 = serverPid === null ? null : processCpuMs(serverPid, ticksPerS);
    const machine1 = machineCpuTicks();
    const cpu = process.cpuUsage(cpu0);
    const trading = c.result();
    const tradingMs = trading.firstSendAt !== null && trading.lastAnswerAt !== null ? trading.lastAnswerAt - trading.firstSendAt : 0;
    o.onProgress(`[market] trading done: ${trading.counts.acked} acked in ${(tradingMs / 1000).toFixed(2)} s; settling`);

    // settle: market on MARKET_WINNER, pool on POOL_WINNER
    const settleOne = async (
      g: GameClient,
      channel: string,
      round: string,
      kind: 'pool' | 'market',
      winner: string,
    ): Promise<SettledRound> => {
      const s0 = performance.now();
      try {
        const v: RoundView = await g.settleRound(round, winner);
        const i = unfinished.findIndex((u) => u.round === round && u.game === g);
        if (i >= 0) unfinished.splice(i, 1);
        const out: SettledRound = { channel, round, kind, winner, entries: v.entries, settleMs: Math.round(performance.now() - s0) };
        if (v.q) out.q = v.q;
        if (v.prices) out.prices = v.prices.map((p) => Math.round(p * 10_000) / 10_000);
        if (v.pool) out.pool = v.pool;
        return out;
      } catch (err) {
        const code = err instanceof CrowdplayError ? `${err.code}: ${err.message}` : String(err);
        warnings.push(`settling ${kind} round ${round} in ${channel} failed: ${code}`);
        return { channel, round, kind, winner, entries: null, settleMs: null, error: code };
      }
    };
    const settle = {
      market: await Promise.all(
        games.map((g, k) => settleOne(g, rounds[k]!.channel, rounds[k]!.market, 'market', outcomes[MARKET_WINNER]!)),
      ),
      pool: await Promise.all(games.map((g, k) => settleOne(g, rounds[k]!.channel, rounds[k]!.pool, 'pool', outcomes[POOL_WINNER]!))),
    };
    await c.waitForPayouts(MARKET_WINNER, POOL_WINNER, PAYOUT_FRAMES_DEADLINE_MS);
    const marketPayouts = c.marketPayouts(MARKET_WINNER);
    const poolPayouts = c.poolPayouts();
    const balances = await c.checkBalances(MARKET_WINNER, (id) => balanceOf(base, o.tenantKey, id));
    o.onProgress(`[market] settled; balances: ${balances.mismatches} wrong of ${balances.checked}; running ledger verify`);

    // ledger verify
    let ledger = 'skipped: --skip-verify';
    let ledgerVerifyMs: number | null = null;
    if (o.databaseUrl !== null) {
      const v = await ledgerVerify(o.databaseUrl, o.databaseSchema);
      ledger = v.result;
      ledgerVerifyMs = v.ms;
    }

    // warnings
    const t = trading.counts;
    if (t.failed > 0) warnings.push(`${t.failed} trades failed (no ack within ${o.ackTimeoutMs} ms, or the socket closed first)`);
    if (trading.unexpected > 0) warnings.push(`${trading.unexpected} trades refused with an unexpected code (not a market reason)`);
    if (c.connectFailed > 0) warnings.push(`${c.connectFailed} viewers did not connect: ${JSON.stringify(c.connectFailedByCode)}`);
    if (c.dropped > 0) warnings.push(`${c.dropped} viewers lost their socket: ${JSON.stringify(c.droppedByCode)}`);
    if (trading.acks.mismatches > 0) warnings.push(`${trading.acks.mismatches} acks disagree with the viewer's own book`);
    if (balances.mismatches > 0) warnings.push(`${balances.mismatches} wallets disagree with grant − costs + proceeds + payouts`);
    if (marketPayouts.paid !== marketPayouts.expected) {
      warnings.push(`market payouts: ${marketPayouts.paid} points in balance frames, ${marketPayouts.expected} winning shares held`);
    }
    if (poolPayouts.paid !== poolPayouts.staked) {
      warnings.push(
        `pool payouts: ${poolPayouts.paid} points paid back of ${poolPayouts.staked} staked (equal unless LEDGER_HOUSE_TAKE_BPS > 0)`,
      );
    }
    if (ledger !== 'ok' && !ledger.startsWith('skipped')) warnings.push(`ledger verify: ${ledger.split('\n')[0]}`);
    const tradesPerSecond = tradingMs > 0 ? round2(t.ok / (tradingMs / 1000)) : 0;
    const ackedPerSecond = tradingMs > 0 ? round2(t.acked / (tradingMs / 1000)) : 0;
    if (o.ratePerViewer > 0 && ackedPerSecond >= 0.9 * c.connected * o.ratePerViewer) {
      warnings.push(
        `pacing-bound: ${ackedPerSecond} acked/s is near viewers × ratePerViewer = ${c.connected * o.ratePerViewer}/s; the server may do more (more viewers, or --rate 0 with a higher INTENT_RATE_PER_S)`,
      );
    }
    const generatorCpuPct = windowMs > 0 ? round2(((cpu.user + cpu.system) / 1000 / windowMs) * 100) : 0;
    const generatorBound = generatorCpuPct > GENERATOR_BOUND_PCT;
    if (generatorBound) warnings.push("generator-bound: this process was near one full core; latencies may be the generator's");
    const machineCpuPct =
      machine0 && machine1 && machine1.total > machine0.total
        ? round2(((machine1.busy - machine0.busy) / (machine1.total - machine0.total)) * 100)
        : null;
    if (machineCpuPct !== null && machineCpuPct > MACHINE_SATURATED_PCT) {
      warnings.push(`machine CPU ${machineCpuPct} % of all cores: server and generator compete for cores`);
    }
    const serverCpuMs = server0 !== null && server1 !== null ? server1 - server0 : null;
    const settledAll = [...settle.market, ...settle.pool].every((s) => s.error === undefined);

    return {
      scenario: 'market',
      command: o.command,
      startedAt: startedAt.toISOString(),
      url: o.url,
      machine: machineInfo(),
      config: {
        viewers: o.viewers,
        trades: o.trades,
        channels: o.channels,
        outcomes,
        grantPoints: o.grantPoints,
        liquidity: o.liquidity,
        ratePerViewer: o.ratePerViewer,
        ackTimeoutMs: o.ackTimeoutMs,
        budgetS: o.budgetS,
        roundDurationMs,
        tenantId: o.tenantId,
        runId,
        mixPct: { ...MIX_PCT },
        databaseUrl: o.databaseUrl === null ? null : maskUrl(o.databaseUrl),
        databaseSchema: o.databaseSchema,
      },
      rounds,
      funding: { viewers: o.viewers, points: o.grantPoints, ms: fundingMs },
      viewers: {
        requested: o.viewers,
        connected: c.connected,
        failed: c.connectFailed,
        failedByCode: c.connectFailedByCode,
        dropped: c.dropped,
        droppedByCode: c.droppedByCode,
      },
      trades: {
        ...t,
        unexpected: trading.unexpected,
        failedByCode: trading.failedByCode,
        late: trading.late,
        byKind: trading.byKind,
        volume: trading.volume,
      },
      tradesPerSecond,
      ackedPerSecond,
      tradingS: round2(tradingMs / 1000),
      ackMs: trading.ack,
      ackMsByKind: trading.ackByKind,
      connectMs: summarize(c.connect),
      checks: { acks: trading.acks, balances, marketPayouts, poolPayouts },
      settle,
      ledgerVerify: ledger,
      ledgerVerifyMs,
      serverPid,
      serverPidSource,
      serverCpuPct: serverCpuMs === null || windowMs <= 0 ? null : round2((serverCpuMs / windowMs) * 100),
      serverCpuMsPerTrade: serverCpuMs === null || t.acked === 0 ? null : Math.round((serverCpuMs / t.acked) * 10_000) / 10_000,
      generatorCpuPct,
      machineCpuPct,
      generatorBound,
      elapsedS: round2((performance.now() - wall0) / 1000),
      complete: t.sent === o.trades && t.failed === 0 && c.connectFailed === 0 && settledAll,
      warnings,
    };
  } finally {
    // a failed run leaves no open round behind (ROUND_MAX_OPEN per channel)
    await Promise.allSettled(unfinished.map((u) => u.game.cancelRound(u.round)));
    await crowd?.close();
    await Promise.all(games.map((g) => g.close()));
  }
}
