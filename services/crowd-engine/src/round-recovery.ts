/**
 * Recovery on acquire: restores a channel's unfinished rounds from their
 * rows and finishes what a crash interrupted.
 *
 * Rows not `paid`: 'open' with a handed-off book (round-handoff.ts: the
 * previous owner moved the channel) → resumes open once the ledger's
 * transfer ids of the round are exactly the book's; 'open' otherwise (a
 * crash: book never written, or a book the ledger disagrees with) →
 * cancelled, refunds from the ledger; 'locked' → resumes (the game may
 * settle it; expiry applies); 'settled' → payouts sent again from the book;
 * 'cancelled' → refunds sent again.
 */
import { TransferKinds } from '@crowdplay/ledger';
import { Market } from '@crowdplay/lmsr';
import type { RoundRow } from '@crowdplay/store';
import type { ChannelRoundsDeps, RoundsContext } from './round-context.ts';
import type { RoundLifecycle } from './round-lifecycle.ts';
import { Round } from './round-state.ts';

/** The committed transfers (id, kind) of handed-off rounds, by round uid. */
export type CommittedTransfers = ReadonlyMap<string, ReadonlyArray<{ id: string; kind: string }>>;

/**
 * What an acquire with no unfinished round to recover does. The channel's first owner (epoch 1) marks no change: no
 * owner ever published rounds of it, so the empty list viewers have stands (a change takes an event id and publishes
 * one more viewer update, for every channel of a burst of first joins). A later owner marks one: the previous one may
 * have published rounds that have finished since, and its update replaces what the gateways cached.
 */
export function recoveredNone(d: ChannelRoundsDeps): void {
  if (d.epoch() > 1) d.changed();
}

/** Restores one channel's rounds after an acquire. */
export class RoundRecovery {
  /** The refunds and payouts {@link recover} left running. */
  private recovering: Promise<void> = Promise.resolve();
  /** During {@link recover}: the handed-off rounds' committed transfers, read for the whole acquire batch at once. */
  private committed: CommittedTransfers | null = null;

  constructor(
    private readonly s: RoundsContext,
    private readonly life: RoundLifecycle,
  ) {}

  /**
   * Restores the channel's unfinished rounds after an acquire (see the module
   * comment) and finishes what a crash interrupted. Resolves when the rounds
   * that must be paid or refunded are.
   * @param preloaded the channel's unfinished rounds, read by a bulk acquire (else read here)
   * @param committed the committed transfers of its handed-off open rounds by round uid, read by a bulk acquire
   *   (else each is read when it resumes)
   * @throws the store's error reading the rows
   */
  async recover(preloaded?: readonly RoundRow[], committed?: CommittedTransfers): Promise<void> {
    const s = this.s;
    const d = s.d;
    const rows = preloaded ?? (await d.store.rounds.listUnfinished(d.channel));
    if (rows.length === 0) return recoveredNone(d);
    this.committed = committed ?? null;
    const resumed: Array<Promise<unknown>> = [];
    const finishing: Array<Promise<unknown>> = [];
    const finish = (r: Round, p: Promise<unknown>): void => void finishing.push(p.catch((err: unknown) => s.logFail(r, err)));
    for (const row of rows) {
      const r = new Round(row);
      s.rounds.set(r.id, r);
      d.metrics.roundEvents.add(1, { kind: row.kind, event: 'recovered' });
      if (row.state === 'open' && r.handedOff) resumed.push(this.resume(r));
      else if (row.state === 'open') finish(r, this.life.cancelRound(r, 'cancelled'));
      else if (row.state === 'settled')
        finish(
          r,
          s.serial(r, () => this.life.pay(r)),
        );
      else if (row.state === 'cancelled')
        finish(
          r,
          s.serial(r, () => this.life.finishCancel(r, 'recovered')),
        );
      // 'locked' resumes: settle, cancel or expiry finish it.
    }
    // Per channel at debug: a bulk acquire of 1,500 channels would log a line each; its batch line counts the rounds.
    if (rows.length > 0) d.telemetry.logger.debug({ channel: d.channel, rounds: rows.length }, 'recovering unfinished rounds');
    // A handed-off round is checked before the channel serves (it stays open). Refunds and payouts of what a
    // crashed owner left are written in the background: each round's steps are serialised (`serial`), it
    // refuses stakes once it is not open, and a move of a channel waiting for them would otherwise last as long
    // as every refund of its batch.
    await Promise.all(resumed);
    this.recovering = Promise.all(finishing).then(() => undefined);
    this.committed = null;
    s.forgetOld();
    d.changed();
  }

  /** Resolves once the refunds and payouts that {@link recover} started have finished (tests, drain). Never rejects. */
  async recovered(): Promise<void> {
    await this.recovering;
  }

  /**
   * Takes over an open round handed off by the channel's previous owner:
   * rebuilds its book (a market from its trades) and checks it against the
   * ledger: the round's committed stake / buy / sell transfer ids must be
   * exactly the book's. Then the round stays open (same deadline, book and
   * idempotency ids); else (a book the ledger disagrees with, or one that
   * does not rebuild) it is cancelled and refunded from the ledger as a
   * round that was never handed off.
   */
  private async resume(r: Round): Promise<unknown> {
    const s = this.s;
    const d = s.d;
    const book = r.handedOff!;
    const uid = r.row.uid;
    let expected: string[];
    let kinds: string[];
    try {
      if (book.kind === 'pool') {
        expected = book.stakes.map((st) => `${uid}:s:${st[3] ?? '?'}`);
        kinds = [TransferKinds.stake];
      } else {
        if (!book.market) throw new Error('a market handoff without its trades');
        r.market = Market.restore({ b: r.row.liquidity ?? 1, outcomes: r.row.outcomes.length, wallet: s.wallet }, book.market);
        expected = book.market.trades.filter((t) => t.points > 0).map((t) => `${uid}:${t.kind === 'sell' ? 'x' : 'b'}:${t.id}`);
        kinds = [TransferKinds.buy, TransferKinds.sell];
      }
      // A bulk acquire read every handed-off round's transfers in one query (Ledger.roundTransferIdsMany).
      const preread = this.committed;
      const committed = preread
        ? (preread.get(uid) ?? []).filter((t) => kinds.includes(t.kind)).map((t) => t.id)
        : await d.ledger.roundTransferIds(d.tenant, uid, kinds);
      expected.sort();
      if (committed.length !== expected.length || committed.some((id, i) => id !== expected[i])) {
        throw new Error(`the ledger holds ${committed.length} transfers of the round, the handed-off book ${expected.length}`);
      }
    } catch (err) {
      d.metrics.roundEvents.add(1, { kind: r.row.kind, event: 'handoff_mismatch' });
      d.telemetry.logger.error({ err, channel: d.channel, round: r.id }, 'handed-off round does not match the ledger; refunding it');
      r.market = null;
      return this.life.cancelRound(r, 'cancelled');
    }
    d.metrics.roundEvents.add(1, { kind: r.row.kind, event: 'resumed' });
    d.telemetry.logger.debug({ channel: d.channel, round: r.id, entries: r.entries }, 'handed-off round resumed open');
    return undefined;
  }
}
