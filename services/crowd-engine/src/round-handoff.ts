/**
 * Handoff of a channel's rounds before the channel moves to another shard:
 * each open round's live book is written to its row at the channel's epoch
 * so the next owner resumes it open (round-recovery.ts).
 */
import { CrowdplayError } from '@crowdplay/protocol';
import type { Store } from '@crowdplay/store';
import type { RoundsContext } from './round-context.ts';
import type { RoundBook, HandoffMark } from './round-state.ts';

/** Writes one open round's handed-off book at the channel's epoch; false when the row was not written. */
export type HandoffWrite = (row: { channelId: string; id: string; epoch: number; book: RoundBook }) => Promise<boolean>;

/** The default {@link HandoffWrite}: one UPDATE per round (a row no longer open is skipped). */
export function writeBookTo(store: Store): HandoffWrite {
  return async (row) => {
    await store.rounds.update(row.channelId, row.id, row.epoch, { state: 'open', book: row.book });
    return true;
  };
}

/**
 * Hands off a channel's rounds: new stakes, trades and opens are refused
 * with CP_ERR_CHANNEL_UNAVAILABLE (retryable; trades queued behind a
 * viewer's in-flight one too), the opens (`openJobs`) and trades in flight
 * finish (commit or are refused by the ledger), then each open round's live
 * book ({@link RoundBook} with `handoff`) is written with `write`; the row
 * stays `open`. Locked rounds finish their step in progress first (their rows
 * are then what the next owner needs); settled and cancelled ones are not
 * waited for: their rows are final and the next owner pays what is unpaid.
 * @returns the number of open rounds handed off
 * @throws CrowdplayError CP_ERR_CHANNEL_STALE_EPOCH when `write` resolves false; the store's error
 */
export async function handOffRounds(s: RoundsContext, openJobs: Iterable<Promise<unknown>>, write: HandoffWrite): Promise<number> {
  const d = s.d;
  s.moving = true;
  await Promise.allSettled([...openJobs]);
  let n = 0;
  const jobs: Array<Promise<void>> = [];
  for (const r of s.rounds.values()) {
    // A settled or cancelled round's row says so already; what may still run is its payouts or refunds, which the
    // next owner sends again from the row (transfer ids make them replays) while this owner's are fenced by the
    // epoch once the channel moves. Waiting for them held a loaded shard's handoff for seconds.
    if (r.final) continue;
    jobs.push(
      s.serial(r, async () => {
        if (r.state !== 'open') return;
        await r.idle();
        const mark: HandoffMark = { epoch: d.epoch(), atMs: d.now() };
        const book = r.handoffBook(mark);
        const epoch = d.epoch();
        if (!(await write({ channelId: d.channel, id: r.id, epoch, book })))
          throw new CrowdplayError('CP_ERR_CHANNEL_STALE_EPOCH', [d.channel, epoch]);
        d.metrics.roundEvents.add(1, { kind: r.row.kind, event: 'handed_off' });
        n++;
      }),
    );
  }
  await Promise.all(jobs);
  return n;
}
