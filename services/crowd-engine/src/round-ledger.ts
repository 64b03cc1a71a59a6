/**
 * The rounds' ledger writer: builds and commits a round's transfers (a
 * market's subsidy, stakes into escrow, buys and sells against the maker,
 * payouts, refunds, clawbacks, the house take, the maker's close) and
 * retries a transfer whose outcome is unknown.
 *
 * ## Transfer ids
 *
 * `<uid>:<letter>:<h>` where uid = `<channel>/<round>` (the ledger's round
 * id) and h = base64url(SHA-256(viewer, key))[0..22): deterministic, so a
 * payout, refund or stake sent twice (after a crash, a retry) is a replay.
 * Letters: m subsidy, s stake, b buy, x sell, t take, p payout, r refund,
 * c clawback, z maker close.
 */
import { createHash } from 'node:crypto';
import type { TransferRequest, TransferResult } from '@crowdplay/ledger';
import { TransferKinds, settlePool } from '@crowdplay/ledger';
import { isCrowdplayError, type BalanceFrame } from '@crowdplay/protocol';
import type { RoundsContext } from './round-context.ts';
import type { Round } from './round-state.ts';

/** Balance frames for viewers whose wallet a round's payouts or refunds changed. */
export type WalletFrames = Array<{ viewer: string; frame: BalanceFrame }>;

/** The idempotency id of a viewer's key: base64url(SHA-256(viewer ␀ key)), 22 characters. */
export function hashOf(viewer: string, key: string): string {
  return createHash('sha256').update(viewer).update('\u0000').update(key).digest('base64url').slice(0, 22);
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Writes one channel's round transfers to the ledger and mirrors their effect in the wallet mirror. */
export class RoundLedger {
  constructor(private readonly s: RoundsContext) {}

  /**
   * Sends a transfer; a CP_ERR_LEDGER_UNAVAILABLE answer (the commit may or
   * may not have happened) is retried with the same id, with backoff, until
   * the ledger answers or the channel closes.
   * @throws the ledger's refusal (CrowdplayError), or CP_ERR_LEDGER_UNAVAILABLE once the channel closed
   */
  async send(req: TransferRequest): Promise<TransferResult> {
    const d = this.s.d;
    for (let attempt = 0; ; attempt++) {
      try {
        return await d.ledger.transfer({ ...req, epoch: req.channelId === undefined ? undefined : d.epoch() });
      } catch (err) {
        if (!isCrowdplayError(err, 'CP_ERR_LEDGER_UNAVAILABLE') || this.s.closed) throw err;
        d.metrics.ledgerRetries.add(1);
        if (attempt === 0) d.telemetry.logger.warn({ err, id: req.id }, 'ledger unavailable; sending the transfer again');
        await sleep(Math.min(2_000, 50 * 2 ** Math.min(attempt, 6)));
      }
    }
  }

  /** A transfer of the round at the channel's epoch (amount in points). */
  transfer(r: Round, id: string, from: TransferRequest['from'], to: TransferRequest['to'], amount: number, kind: string): TransferRequest {
    const d = this.s.d;
    return { id, tenantId: d.tenant, from, to, amount, kind, channelId: d.channel, epoch: d.epoch(), roundId: r.row.uid };
  }

  /**
   * Funds a new market round's maker account with its subsidy (treasury → maker).
   * @throws the ledger's refusal
   */
  async fundMaker(r: Round): Promise<void> {
    const d = this.s.d;
    const row = r.row;
    await this.send({
      id: `${row.uid}:m`,
      tenantId: d.tenant,
      from: { kind: 'treasury', owner: '' },
      to: { kind: 'maker', owner: row.uid },
      amount: r.market!.subsidy,
      kind: TransferKinds.subsidy,
      channelId: d.channel,
      epoch: d.epoch(),
      roundId: row.uid,
    });
  }

  /**
   * Commits a stake: `points` from the viewer's wallet into the round's escrow, id `<uid>:s:<h>`.
   * @throws the ledger's refusal (CP_ERR_LEDGER_INSUFFICIENT_FUNDS, ...)
   */
  stake(r: Round, viewer: string, h: string, points: number): Promise<TransferResult> {
    const uid = r.row.uid;
    return this.send(
      this.transfer(r, `${uid}:s:${h}`, { kind: 'wallet', owner: viewer }, { kind: 'escrow', owner: uid }, points, TransferKinds.stake),
    );
  }

  /**
   * Commits a market trade: a buy's cost from the wallet to the maker (`<uid>:b:<h>`) or a sell's
   * proceeds from the maker to the wallet (`<uid>:x:<h>`), in points.
   * @throws the ledger's refusal
   */
  trade(r: Round, k: 'buy' | 'sell', viewer: string, h: string, points: number): Promise<TransferResult> {
    const uid = r.row.uid;
    const wallet = { kind: 'wallet', owner: viewer } as const;
    const maker = { kind: 'maker', owner: uid } as const;
    return k === 'sell'
      ? this.send(this.transfer(r, `${uid}:x:${h}`, maker, wallet, points, TransferKinds.sell))
      : this.send(this.transfer(r, `${uid}:b:${h}`, wallet, maker, points, TransferKinds.buy));
  }

  /**
   * Pays a settled round from its book (again after a crash: replays are no-ops): the house take,
   * each winner's payout (or a pool's refunds when nobody backed the winner), then a market's maker
   * account is closed. Resolves with the viewers' balance frames.
   * @throws the ledger's refusal
   */
  async payOut(r: Round): Promise<WalletFrames> {
    const d = this.s.d;
    const book = r.book!;
    const w = r.winner!;
    const uid = r.row.uid;
    const payouts = new Map<string, number>();
    let reason = 'payout';
    let take = 0;
    if (book.kind === 'pool') {
      const s = settlePool(
        book.stakes.map(([viewer, outcome, amount]) => ({ viewer, outcome, amount })),
        w,
        r.row.takeBps,
      );
      if (s.refunded) reason = 'refund';
      take = s.take;
      for (const p of s.payouts) if (p.amount > 0) payouts.set(p.viewer, (payouts.get(p.viewer) ?? 0) + p.amount);
    } else {
      for (const [viewer, shares] of book.positions) if ((shares[w] ?? 0) > 0) payouts.set(viewer, shares[w]!);
    }
    const from = book.kind === 'pool' ? ({ kind: 'escrow', owner: uid } as const) : ({ kind: 'maker', owner: uid } as const);
    const kind = reason === 'refund' ? TransferKinds.refund : TransferKinds.payout;
    const letter = reason === 'refund' ? 'r' : 'p';
    const jobs: Array<Promise<void>> = [];
    if (take > 0) {
      jobs.push(
        this.send(this.transfer(r, `${uid}:t`, from, { kind: 'house', owner: '' }, take, TransferKinds.take)).then(() => undefined),
      );
    }
    const wallet: WalletFrames = [];
    for (const [viewer, amount] of [...payouts].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
      const tr = this.transfer(r, `${uid}:${letter}:${hashOf(viewer, '#')}`, from, { kind: 'wallet', owner: viewer }, amount, kind);
      jobs.push(
        this.send(tr).then((res) => {
          if (!res.replayed) d.wallets.credited(d.tenant, viewer, amount, res.toBalance);
          wallet.push({ viewer, frame: this.balanceFrame(viewer, reason, amount, r.id, res.toBalance) });
        }),
      );
    }
    await Promise.all(jobs);
    if (book.kind === 'market') await this.closeMaker(r);
    return wallet;
  }

  /**
   * Refunds every viewer's net from the ledger's transfers of the round (a profitable cash-out is
   * clawed back while the viewer holds it); a market's maker account is then closed. Resolves with
   * the viewers' balance frames.
   * @param why logged with the refunds ('cancelled', 'expired', 'drained', 'open_failed', 'recovered')
   * @throws the ledger's refusal
   */
  async refundAll(r: Round, why: string): Promise<WalletFrames> {
    const d = this.s.d;
    const uid = r.row.uid;
    const isPool = r.row.kind === 'pool';
    const nets = await d.ledger.roundNets(
      d.tenant,
      uid,
      isPool ? [TransferKinds.stake] : [TransferKinds.buy],
      isPool ? [] : [TransferKinds.sell],
    );
    const from = isPool ? ({ kind: 'escrow', owner: uid } as const) : ({ kind: 'maker', owner: uid } as const);
    const wallet: WalletFrames = [];
    const jobs = nets.map(async ([viewer, net]) => {
      const h = hashOf(viewer, '#');
      if (net > 0) {
        const res = await this.send(this.transfer(r, `${uid}:r:${h}`, from, { kind: 'wallet', owner: viewer }, net, TransferKinds.refund));
        if (!res.replayed) d.wallets.credited(d.tenant, viewer, net, res.toBalance);
        wallet.push({ viewer, frame: this.balanceFrame(viewer, 'refund', net, r.id, res.toBalance) });
        return;
      }
      // A profitable cash-out is taken back if the viewer still holds it (through the mirror, which never goes below zero).
      const claw = -net;
      await d.wallets.ensure(d.tenant, viewer);
      if (!d.wallets.reserve(d.tenant, viewer, claw)) {
        await d.wallets.refreshIfStale(d.tenant, viewer);
        if (!d.wallets.reserve(d.tenant, viewer, claw)) return this.unrecovered(r, viewer, claw);
      }
      try {
        const res = await this.send(
          this.transfer(r, `${uid}:c:${h}`, { kind: 'wallet', owner: viewer }, from, claw, TransferKinds.clawback),
        );
        d.wallets.debited(d.tenant, viewer, res.fromBalance);
        wallet.push({ viewer, frame: this.balanceFrame(viewer, 'clawback', -claw, r.id, res.fromBalance) });
      } catch (err) {
        d.wallets.released(d.tenant, viewer, claw, true);
        if (!isCrowdplayError(err, 'CP_ERR_LEDGER_INSUFFICIENT_FUNDS')) throw err;
        this.unrecovered(r, viewer, claw);
      }
    });
    await Promise.all(jobs);
    if (!isPool) await this.closeMaker(r);
    d.telemetry.logger.info({ channel: d.channel, round: r.id, why, refunds: nets.length }, 'round cancelled and refunded');
    return wallet;
  }

  private unrecovered(r: Round, viewer: string, points: number): void {
    const d = this.s.d;
    d.metrics.unrecovered.add(points);
    d.telemetry.logger.warn(
      { channel: d.channel, round: r.id, viewer, points },
      'cancel: a profitable cash-out was already spent; the maker bears it',
    );
  }

  /** Moves what the maker account holds back to the treasury (or covers its loss from it). */
  private async closeMaker(r: Round): Promise<void> {
    const d = this.s.d;
    const uid = r.row.uid;
    const bal = await d.ledger.balance(d.tenant, { kind: 'maker', owner: uid });
    if (bal === 0) return;
    const maker = { kind: 'maker', owner: uid } as const;
    const treasury = { kind: 'treasury', owner: '' } as const;
    await this.send(
      bal > 0
        ? this.transfer(r, `${uid}:z`, maker, treasury, bal, TransferKinds.makerClose)
        : this.transfer(r, `${uid}:z`, treasury, maker, -bal, TransferKinds.makerClose),
    );
  }

  private balanceFrame(viewer: string, reason: string, delta: number, round: string, after: number | null): BalanceFrame {
    const d = this.s.d;
    const points = d.wallets.available(d.tenant, viewer) ?? after ?? 0;
    return { t: 'balance', points, reason, delta, round };
  }
}
