/**
 * The bot's result message in a chat when one of its rounds finishes: a
 * short text (the question and the winner, or the refund) posted on the
 * send queue's transactional lane, like a command reply, so it never waits
 * behind board edits.
 *
 * It reads the rounds of each update the chat's live board receives
 * (ChatBoards: the one gateway holding the chat's board, so one message per
 * round across gateways) and posts when a round it saw open or locked is
 * settled or cancelled. A round first seen already finished (the board
 * started, or this gateway took the chat over, after it ended) is not
 * announced: the board shows its result; nor is one nobody took part in
 * (a quiet group is not told every day that its round had no stakes). The send queue key
 * `round:<chat>:<round>` makes a second message for the same round, queued
 * meanwhile, replace the first.
 */
import type { RoundView } from '@crowdplay/protocol';
import type { EnqueueResult } from '@crowdplay/sendq';
import type { TelegramClient } from '@crowdplay/telegram';
import type { Telemetry } from '@crowdplay/telemetry';

/** The text the bot posts when round `r` finished (settled or cancelled), or null while it has not or when nobody took part. */
export function roundResultText(r: RoundView): string | null {
  if (r.entries === 0) return null;
  const question = r.title ?? (r.kind === 'market' ? 'Market' : 'Pool');
  const label = (o: string): string => r.labels?.[o] ?? o;
  if (r.state === 'cancelled') return `Round cancelled: ${question}\nEvery stake is refunded.`;
  if (r.state !== 'settled' || r.winner === undefined) return null;
  const pool = r.kind === 'pool' && Array.isArray(r.pool) ? r.pool.reduce((a, b) => a + b, 0) : 0;
  const tail = r.kind === 'pool' ? `${pool} points shared by the winners.` : 'Winning shares pay 1 point each.';
  return `Round result: ${question}\nWinner: ${label(r.winner)}. ${tail}`;
}

/** What {@link RoundResults} sends through: the bot client's queued calls. */
export type RoundResultSender = Pick<TelegramClient, 'enqueueCall'>;

/** Rounds' states per chat, and the result messages they call for. */
export class RoundResults {
  /** Per chat: round id → its state in the chat's last update. */
  private readonly known = new Map<number, Map<string, RoundView['state']>>();
  private readonly posted;

  constructor(
    private readonly client: RoundResultSender,
    private readonly telemetry: Telemetry,
  ) {
    this.posted = telemetry.metrics.counter('crowdplay_telegram_round_results_total');
  }

  /**
   * A chat's update listed `rounds`: posts the result of each round that was
   * open or locked in the chat's previous update and is settled or cancelled
   * now. Never throws (a refused or failed send is logged).
   */
  seen(chatId: number, rounds: readonly RoundView[]): void {
    const before = this.known.get(chatId);
    const now = new Map<string, RoundView['state']>();
    for (const r of rounds) {
      if (!r || typeof r.id !== 'string') continue;
      now.set(r.id, r.state);
      const was = before?.get(r.id);
      if (was !== 'open' && was !== 'locked') continue;
      const text = roundResultText(r);
      if (text !== null) this.post(chatId, r, text);
    }
    this.known.set(chatId, now);
  }

  /** The chat's board stopped (or moved): its rounds are forgotten. */
  forget(chatId: number): void {
    this.known.delete(chatId);
  }

  private post(chatId: number, r: RoundView, text: string): void {
    const outcome = r.state === 'cancelled' ? 'cancelled' : 'settled';
    const logFail = (err: unknown): void => this.telemetry.logger.warn({ err, chat: chatId, round: r.id }, 'round result message failed');
    void this.client
      .enqueueCall('sendMessage', { chat_id: chatId, text }, { lane: 'tx', key: `round:${chatId}:${r.id}` })
      .then((q: EnqueueResult) => {
        // A refusal (chat deactivated, queue full) is counted by the send queue.
        if (q.status === 'refused') return logFail(new Error(`refused: ${q.reason}`));
        this.posted.add(1, { outcome });
        void q.result.then((res) => {
          if (res.status === 'failed' || res.status === 'dropped') logFail(new Error(`${res.status}`));
        });
      }, logFail);
  }
}
