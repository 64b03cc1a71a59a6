/**
 * The `rounds` table (migration 1764600000000_rounds.sql): the durable part
 * of a channel's rounds. Every write carries the writer's channel epoch; a
 * stale one is refused by Postgres (CP_ERR_CHANNEL_STALE_EPOCH).
 */
import { CrowdplayError } from '@crowdplay/protocol';
import type { Db } from './db.ts';
import { RoundUpdates } from './round-updates.ts';
import { int8Array, textArray } from './array-params.ts';

export type RoundKind = 'pool' | 'market';
export type RoundState = 'open' | 'locked' | 'settled' | 'cancelled';

/** A row of `rounds`. Times are ms since epoch. */
export interface RoundRow {
  channelId: string;
  id: string;
  /** The ledger's round id: `<channel>/<id>`. */
  uid: string;
  tenantId: string;
  kind: RoundKind;
  /** The question viewers see, or null. */
  title: string | null;
  outcomes: string[];
  /** Display label by outcome, or null. */
  labels: Record<string, string> | null;
  /** LMSR liquidity b (market rounds), else null. */
  liquidity: number | null;
  takeBps: number;
  openedAt: number;
  deadlineAt: number;
  state: RoundState;
  /** Index of the winning outcome (settled rounds), else null. */
  winner: number | null;
  /** The final book, written when the round locks (shape owned by the crowd engine). */
  book: unknown;
  paid: boolean;
  epoch: number;
}

interface Row {
  channel_id: string;
  id: string;
  uid: string;
  tenant_id: string;
  kind: RoundKind;
  title: string | null;
  outcomes: string[];
  labels: Record<string, string> | null;
  liquidity: number | null;
  take_bps: number;
  opened_at: Date;
  deadline_at: Date;
  state: RoundState;
  winner: number | null;
  book: unknown;
  paid: boolean;
  epoch: string;
}

const COLUMNS =
  'channel_id, id, uid, tenant_id, kind, title, outcomes, labels, liquidity, take_bps, opened_at, deadline_at, state, winner, book, paid, epoch';

function toRound(r: Row): RoundRow {
  return {
    channelId: r.channel_id,
    id: r.id,
    uid: r.uid,
    tenantId: r.tenant_id,
    kind: r.kind,
    title: r.title,
    outcomes: r.outcomes,
    labels: r.labels,
    liquidity: r.liquidity === null ? null : Number(r.liquidity),
    takeBps: r.take_bps,
    openedAt: new Date(r.opened_at).getTime(),
    deadlineAt: new Date(r.deadline_at).getTime(),
    state: r.state,
    winner: r.winner,
    book: r.book,
    paid: r.paid,
    epoch: Number(r.epoch),
  };
}

/** Where a page of {@link RoundRepository.listRecent} continues: the last row's opening time (ms) and id. */
export interface RoundCursor {
  openedAt: number;
  id: string;
}

/** A cursor as text (`<openedAt>.<id>`), for a URL. */
export function roundCursor(c: RoundCursor): string {
  return `${c.openedAt}.${c.id}`;
}

/** Reads {@link roundCursor}'s text back, or undefined when it is not one. */
export function parseRoundCursor(text: string): RoundCursor | undefined {
  const m = /^(\d{1,16})\.([A-Za-z0-9_.-]{1,32})$/.exec(text);
  return m ? { openedAt: Number(m[1]), id: m[2]! } : undefined;
}

export class RoundRepository {
  private readonly updates: RoundUpdates;

  constructor(private readonly db: Db) {
    this.updates = new RoundUpdates(db);
  }

  /**
   * Inserts an open round.
   * @throws CrowdplayError CP_ERR_ROUND_EXISTS (the channel already had a round with this id),
   *   CP_ERR_CHANNEL_STALE_EPOCH
   */
  async insert(
    r: Omit<RoundRow, 'state' | 'winner' | 'book' | 'paid' | 'title' | 'labels'> & Partial<Pick<RoundRow, 'title' | 'labels'>>,
  ): Promise<void> {
    try {
      await this.db.query(
        `INSERT INTO rounds (channel_id, id, uid, tenant_id, kind, outcomes, liquidity, take_bps, opened_at, deadline_at, state, epoch, title, labels)
         VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, to_timestamp($9::double precision / 1000), to_timestamp($10::double precision / 1000), 'open', $11,
                 $12, $13::jsonb)`,
        [
          r.channelId,
          r.id,
          r.uid,
          r.tenantId,
          r.kind,
          JSON.stringify(r.outcomes),
          r.liquidity,
          r.takeBps,
          r.openedAt,
          r.deadlineAt,
          r.epoch,
          r.title ?? null,
          r.labels ? JSON.stringify(r.labels) : null,
        ],
      );
    } catch (err) {
      if ((err as { code?: unknown }).code === '23505') throw new CrowdplayError('CP_ERR_ROUND_EXISTS', [r.id], { cause: err });
      throw err; // the Db maps a stale epoch to CP_ERR_CHANNEL_STALE_EPOCH
    }
  }

  /** The round, or null. */
  async get(channelId: string, id: string): Promise<RoundRow | null> {
    const { rows } = await this.db.query<Row>(`SELECT ${COLUMNS} FROM rounds WHERE channel_id = $1 AND id = $2`, [channelId, id]);
    return rows[0] ? toRound(rows[0]) : null;
  }

  /** The channel's rounds whose payouts or refunds are not all committed (paid = false), oldest first. */
  async listUnfinished(channelId: string): Promise<RoundRow[]> {
    const { rows } = await this.db.query<Row>(`SELECT ${COLUMNS} FROM rounds WHERE channel_id = $1 AND NOT paid ORDER BY opened_at, id`, [
      channelId,
    ]);
    return rows.map(toRound);
  }

  /** The unfinished rounds of each channel that has one (one query, for a bulk acquire), each list as {@link listUnfinished} orders it. */
  async listUnfinishedMany(channelIds: readonly string[]): Promise<Map<string, RoundRow[]>> {
    const out = new Map<string, RoundRow[]>();
    if (channelIds.length === 0) return out;
    const { rows } = await this.db.query<Row>(
      `SELECT ${COLUMNS} FROM rounds WHERE channel_id = ANY($1::text[]) AND NOT paid ORDER BY channel_id, opened_at, id`,
      [textArray([...channelIds])],
    );
    for (const r of rows.map(toRound)) {
      const list = out.get(r.channelId);
      if (list) list.push(r);
      else out.set(r.channelId, [r]);
    }
    return out;
  }

  /**
   * Writes the handed-off books of many open rounds in one statement (a bulk handoff): each row's book and
   * epoch, only where the round is still `open` and `epoch` is its channel's current one (the channels'
   * rows are share-locked in id order first, so the fencing trigger agrees and no epoch bump interleaves).
   * @param rows at most a few thousand; `book` is any JSON value
   * @returns the `<channel>/<id>` keys written; a row left out was stale or not open
   */
  async handOffMany(rows: ReadonlyArray<{ channelId: string; id: string; epoch: number; book: unknown }>): Promise<Set<string>> {
    if (rows.length === 0) return new Set();
    const res = await this.db.query<{ channel_id: string; id: string }>(
      `WITH u AS (
         SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS u(channel_id, id, epoch, book)
       ), fenced AS (
         SELECT c.id, c.epoch FROM channels c WHERE c.id IN (SELECT channel_id FROM u) ORDER BY c.id FOR SHARE
       )
       UPDATE rounds r SET book = u.book::jsonb, epoch = u.epoch, updated_at = now()
         FROM u JOIN fenced f ON f.id = u.channel_id AND f.epoch = u.epoch
         WHERE r.channel_id = u.channel_id AND r.id = u.id AND r.state = 'open'
         RETURNING r.channel_id, r.id`,
      [
        textArray(rows.map((r) => r.channelId)),
        textArray(rows.map((r) => r.id)),
        int8Array(rows.map((r) => r.epoch)),
        textArray(rows.map((r) => JSON.stringify(r.book))),
      ],
    );
    return new Set(res.rows.map((r) => `${r.channel_id}/${r.id}`));
  }

  /**
   * A page of the channel's rounds, newest first (by opening time, then id).
   * @param opts.limit rows per page, 1–100
   * @param opts.before the cursor of the previous page's last row ({@link roundCursor}); absent = the newest
   * @returns the rows and, when more remain, the cursor of the next page
   */
  async listRecent(channelId: string, opts: { limit: number; before?: RoundCursor }): Promise<{ rows: RoundRow[]; next?: RoundCursor }> {
    const limit = Math.max(1, Math.min(100, Math.trunc(opts.limit)));
    const params: unknown[] = [channelId, limit + 1];
    let after = '';
    if (opts.before) {
      params.push(opts.before.openedAt, opts.before.id);
      after = 'AND (opened_at, id) < (to_timestamp($3::double precision / 1000), $4::text)';
    }
    const { rows } = await this.db.query<Row>(
      `SELECT ${COLUMNS} FROM rounds WHERE channel_id = $1 ${after} ORDER BY opened_at DESC, id DESC LIMIT $2`,
      params,
    );
    const page = rows.slice(0, limit).map(toRound);
    const last = page[page.length - 1];
    return rows.length > limit && last ? { rows: page, next: { openedAt: last.openedAt, id: last.id } } : { rows: page };
  }

  /** Channels that hold an unfinished round (recovery at start-up). */
  async channelsWithUnfinished(): Promise<string[]> {
    const { rows } = await this.db.query<{ channel_id: string }>('SELECT DISTINCT channel_id FROM rounds WHERE NOT paid ORDER BY 1');
    return rows.map((r) => r.channel_id);
  }

  /**
   * Moves the round to `state` at `epoch`, with its book (locked), winner
   * (settled) or paid flag. Only forward moves apply: the update is skipped
   * (returns false) when the row is already final in another way. The changes
   * of one event-loop turn go to Postgres in one statement (round-updates.ts).
   * @throws CrowdplayError CP_ERR_CHANNEL_STALE_EPOCH
   */
  update(
    channelId: string,
    id: string,
    epoch: number,
    change: { state: RoundState; book?: unknown; winner?: number | null; paid?: boolean },
  ): Promise<boolean> {
    return this.updates.update({ channelId, id, epoch, ...change });
  }
}
