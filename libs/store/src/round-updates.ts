/**
 * Round state changes (lock, settle, cancel, paid, a handed-off book) coalesced into one statement per
 * event-loop turn: an autocommitted single-row UPDATE costs Postgres about ten times the CPU of a row in a shared
 * statement (decision 0043, `npm run bench -- round-updates`), and a shard of channels
 * whose rounds open and close together issues hundreds a second.
 *
 * Each change keeps the answer a single statement gave: true when applied, false when the row is already final
 * in another way (only forward moves apply), CP_ERR_CHANNEL_STALE_EPOCH when its epoch is not the channel's
 * current one. The fencing is set-based, as the event log's is (migration 1764900000000_set_fencing.sql): the
 * channels' rows are share-locked in id order, only the rows at their channel's epoch are written, the others
 * are named; one stale channel does not fail the statement for the rest. A statement Postgres refuses for a
 * row's data (a CHECK) is replayed one row at a time, so only that change fails.
 */
import { CrowdplayError } from '@crowdplay/protocol';
import type { Db } from './db.ts';
import type { RoundState } from './rounds.ts';
import { int8Array, textArray } from './array-params.ts';

/** A change of one round: the state it moves to, at `epoch`, with its book (locked), winner (settled) or paid flag. */
export interface RoundChange {
  channelId: string;
  id: string;
  epoch: number;
  state: RoundState;
  book?: unknown;
  winner?: number | null;
  paid?: boolean;
}

/** Rows in one statement at most: a turn with more writes them in several, side by side. */
const ROUND_UPDATE_BATCH_MAX = 1_000;

/** The states a round may move to `state` from: forward moves only (a repeat of the same move applies again). */
const ALLOWED_FROM: Record<RoundState, string> = {
  open: 'open',
  locked: 'open,locked',
  settled: 'open,locked,settled',
  cancelled: 'open,locked,cancelled',
};

const UPDATE_MANY = `WITH u AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::int[], $7::bool[], $8::text[], $9::int[])
      AS u(channel_id, id, epoch, state, book, winner, paid, allowed, i)
  ), fenced AS (
    SELECT c.id, c.epoch FROM channels c WHERE c.id IN (SELECT channel_id FROM u) ORDER BY c.id FOR SHARE
  ), upd AS (
    UPDATE rounds r SET state = u.state, book = COALESCE(u.book::jsonb, r.book), winner = COALESCE(u.winner, r.winner),
        paid = r.paid OR u.paid, epoch = u.epoch, updated_at = now()
      FROM u JOIN fenced f ON f.id = u.channel_id AND f.epoch = u.epoch
      WHERE r.channel_id = u.channel_id AND r.id = u.id AND r.state = ANY(string_to_array(u.allowed, ','))
      RETURNING u.i
  )
  SELECT u.i, f.epoch IS NOT NULL AS fenced_ok, EXISTS (SELECT 1 FROM upd WHERE upd.i = u.i) AS applied
    FROM u LEFT JOIN fenced f ON f.id = u.channel_id AND f.epoch = u.epoch`;

const UPDATE_ONE = `UPDATE rounds SET state = $3, book = COALESCE($4::jsonb, book), winner = COALESCE($5, winner), paid = paid OR $6,
    epoch = $7, updated_at = now()
  WHERE channel_id = $1 AND id = $2 AND state = ANY(string_to_array($8, ','))`;

interface Pending {
  change: RoundChange;
  resolve: (applied: boolean) => void;
  reject: (err: unknown) => void;
}

/** The coalescer of one store's round changes (see the module comment). */
export class RoundUpdates {
  private pending: Pending[] = [];
  private scheduled = false;

  constructor(private readonly db: Db) {}

  /**
   * Queues a change for this turn's statement.
   * @returns true when applied, false when the round is already final in another way
   * @throws CrowdplayError CP_ERR_CHANNEL_STALE_EPOCH; the store's errors (CP_ERR_STORE_UNAVAILABLE when unreachable)
   */
  update(change: RoundChange): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.pending.push({ change, resolve, reject });
      if (this.scheduled) return;
      this.scheduled = true;
      setImmediate(() => void this.flush());
    });
  }

  /**
   * Applies many changes at once (in the order given for the same round: the n-th change of a round goes in the
   * n-th statement).
   * @returns per change, in order: 'applied', 'skipped' (final in another way) or 'stale' (the channel moved on)
   * @throws the store's error when a statement fails for a reason other than a row's data
   */
  private async updateMany(changes: readonly RoundChange[]): Promise<Array<'applied' | 'skipped' | 'stale'>> {
    const out = new Array<'applied' | 'skipped' | 'stale'>(changes.length);
    for (const wave of waves(changes)) {
      const chunks: number[][] = [];
      for (let k = 0; k < wave.length; k += ROUND_UPDATE_BATCH_MAX) chunks.push(wave.slice(k, k + ROUND_UPDATE_BATCH_MAX));
      await Promise.all(
        chunks.map(async (idx) => {
          const { rows } = await this.db.query<{ i: number; fenced_ok: boolean; applied: boolean }>(UPDATE_MANY, [
            textArray(idx.map((i) => changes[i]!.channelId)),
            textArray(idx.map((i) => changes[i]!.id)),
            int8Array(idx.map((i) => changes[i]!.epoch)),
            textArray(idx.map((i) => changes[i]!.state)),
            textArray(idx.map((i) => (changes[i]!.book === undefined ? null : JSON.stringify(changes[i]!.book)))),
            idx.map((i) => changes[i]!.winner ?? null),
            idx.map((i) => changes[i]!.paid ?? false),
            textArray(idx.map((i) => ALLOWED_FROM[changes[i]!.state])),
            idx,
          ]);
          for (const r of rows) out[r.i] = r.applied ? 'applied' : r.fenced_ok ? 'skipped' : 'stale';
        }),
      );
    }
    return out;
  }

  private async flush(): Promise<void> {
    const batch = this.pending;
    this.pending = [];
    this.scheduled = false;
    let results: Array<'applied' | 'skipped' | 'stale'>;
    try {
      results = await this.updateMany(batch.map((p) => p.change));
    } catch (err) {
      // The Db maps a lost or refused connection to CP_ERR_STORE_UNAVAILABLE: each change alone would fail the same way.
      if (err instanceof CrowdplayError && err.code === 'CP_ERR_STORE_UNAVAILABLE') {
        for (const p of batch) p.reject(err);
        return;
      }
      // A row's data refused the statement (a CHECK): each change alone, so only that one fails.
      for (const p of batch) this.updateOne(p.change).then(p.resolve, p.reject);
      return;
    }
    batch.forEach((p, i) => {
      const r = results[i];
      if (r === 'stale') p.reject(new CrowdplayError('CP_ERR_CHANNEL_STALE_EPOCH', [p.change.channelId, String(p.change.epoch)]));
      else p.resolve(r === 'applied');
    });
  }

  /** One change in a statement of its own (the trigger fences it). */
  private async updateOne(c: RoundChange): Promise<boolean> {
    const res = await this.db.query(UPDATE_ONE, [
      c.channelId,
      c.id,
      c.state,
      c.book === undefined ? null : JSON.stringify(c.book),
      c.winner ?? null,
      c.paid ?? false,
      c.epoch,
      ALLOWED_FROM[c.state],
    ]);
    return (res.rowCount ?? 0) > 0;
  }
}

/** Indexes of `changes` split so no statement holds one round twice: the n-th change of each round in wave n. */
function waves(changes: readonly RoundChange[]): number[][] {
  const seen = new Map<string, number>();
  const out: number[][] = [];
  changes.forEach((c, i) => {
    const key = `${c.channelId}\u0000${c.id}`;
    const n = seen.get(key) ?? 0;
    seen.set(key, n + 1);
    (out[n] ??= []).push(i);
  });
  return out;
}
