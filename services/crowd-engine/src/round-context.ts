/**
 * The state a channel's round parts share (lifecycle, intake, ledger
 * writer, recovery, handoff): the shard's dependencies, the rounds in
 * memory, the channel's serving flags, the market wallet port and the
 * round metrics. The `ChannelRounds` façade (rounds.ts) builds one and
 * hands it to each part.
 */
import type { Counter, Histogram } from '@opentelemetry/api';
import type { Config } from '@crowdplay/config';
import type { Ledger } from '@crowdplay/ledger';
import type { Wallet } from '@crowdplay/lmsr';
import {
  CrowdplayError,
  isCrowdplayError,
  type BalanceFrame,
  type BusAck,
  type RoundResultFrame,
  type RoundView,
} from '@crowdplay/protocol';
import type { Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import type { Round } from './round-state.ts';
import type { WalletMirror } from './wallets.ts';

/** Metrics shared by every channel of a shard. */
export interface RoundMetrics {
  roundEvents: Counter;
  trades: Counter;
  tradeAckMs: Histogram;
  ledgerRetries: Counter;
  payRetries: Counter;
  unrecovered: Counter;
}

/** Creates the shard's round metrics (once per shard). */
export function roundMetrics(telemetry: Telemetry): RoundMetrics {
  const m = telemetry.metrics;
  return {
    roundEvents: m.counter('crowdplay_round_events_total'),
    trades: m.counter('crowdplay_trades_total'),
    tradeAckMs: m.histogram('crowdplay_trade_ack_ms'),
    ledgerRetries: m.counter('crowdplay_round_ledger_retries_total'),
    payRetries: m.counter('crowdplay_round_pay_retries_total'),
    unrecovered: m.counter('crowdplay_round_unrecovered_points_total'),
  };
}

/** Everything a channel's rounds need from their shard. */
export interface ChannelRoundsDeps {
  config: Config;
  ledger: Ledger;
  store: Store;
  telemetry: Telemetry;
  wallets: WalletMirror;
  metrics: RoundMetrics;
  channel: string;
  tenant: string;
  /** The channel's current epoch (fencing). */
  epoch: () => number;
  now: () => number;
  /** Sends acks and balance frames to a gateway. */
  sendAcks: (gw: string, acks: BusAck[], balances?: Array<{ conn: number; frame: BalanceFrame }>) => void;
  /** Sends balance frames to every socket of these viewers in the channel. */
  sendWallet: (entries: Array<{ viewer: string; frame: BalanceFrame | RoundResultFrame }>) => void;
  /** A round changed state: tell the game. */
  sendRound: (view: RoundView) => void;
  /** Something viewers see changed (the shard sends an update on its next tick). */
  changed: () => void;
}

/** Wallet port of the LMSR market: reserves in the mirror; credits are applied after their commit. */
export class MirrorWallet implements Wallet {
  constructor(
    private readonly wallets: WalletMirror,
    private readonly tenant: string,
  ) {}
  reserve(viewer: string, points: number): boolean {
    return this.wallets.reserve(this.tenant, viewer, points);
  }
  credit(): void {
    // Sell proceeds reach the mirror when their transfer commits (RoundIntake.execMarket).
  }
}

/** One channel's round state; its parts read and change it in place. */
export class RoundsContext {
  readonly rounds = new Map<string, Round>();
  readonly wallet: MirrorWallet;
  /** Closed: nothing is taken, ledger retries stop. */
  closed = false;
  /** Draining: new stakes and trades are refused, open and locked rounds are cancelled. */
  draining = false;
  /** Handing off: the channel is moving to another shard (new stakes, trades and opens: CP_ERR_CHANNEL_UNAVAILABLE). */
  moving = false;

  constructor(readonly d: ChannelRoundsDeps) {
    this.wallet = new MirrorWallet(d.wallets, d.tenant);
  }

  /** Rounds not settled or cancelled. */
  get unfinished(): number {
    let n = 0;
    for (const r of this.rounds.values()) if (!r.final) n++;
    return n;
  }

  /** Whether a tick has work here: a round not yet final (a deadline to lock at, an expiry) or final and not yet paid (a retry). */
  get needsTick(): boolean {
    for (const r of this.rounds.values()) if (!r.final || !r.paid) return true;
    return false;
  }

  /** The ledger's id of a round: `<channel>/<round>`. */
  uid(id: string): string {
    return `${this.d.channel}/${id}`;
  }

  /** @throws CrowdplayError CP_ERR_AUTH_FORBIDDEN_CHANNEL when `tenant` is not the channel's */
  checkTenant(tenant: string): void {
    if (tenant !== this.d.tenant) throw new CrowdplayError('CP_ERR_AUTH_FORBIDDEN_CHANNEL', [this.d.channel]);
  }

  /** Runs `fn` after the round's previous lock, settle, cancel or payout step (whether it failed or not). */
  serial<T>(r: Round, fn: () => Promise<T>): Promise<T> {
    const p = r.op.then(fn, fn);
    r.op = p.catch(() => undefined);
    return p;
  }

  /** Drops finished, paid rounds beyond ROUND_RECENT_SHOWN from memory (their rows stay). */
  forgetOld(): void {
    const done = [...this.rounds.values()].filter((r) => r.final && r.paid);
    for (const r of done.slice(0, Math.max(0, done.length - this.d.config.rounds.recentShown))) this.rounds.delete(r.id);
  }

  /** Logs a failed background step of a round (CP_ERR_ROUND_ALREADY_FINAL is not a failure). */
  logFail(r: Round, err: unknown): void {
    if (isCrowdplayError(err, 'CP_ERR_ROUND_ALREADY_FINAL')) return;
    this.d.telemetry.logger.error(
      { err, channel: this.d.channel, round: r.id },
      'round step failed; it is retried on the next tick or at recovery',
    );
  }
}
