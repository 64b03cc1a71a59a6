import type { Db } from './db.ts';
import { int8Array, textArray } from './array-params.ts';

/** One event as the owner of its channel logs it. */
export interface LoggedEvent {
  channel: string;
  eventId: number;
  /** The channel's epoch the event was made at (fenced: a stale epoch is refused). */
  epoch: number;
  /** What the body is, `[a-z]{1,16}` (e.g. 'batch'). */
  kind: string;
  /** The frame exactly as published (JSON text). */
  body: string;
}

/** What the log holds for a resume: the floor and the events after the resume point. */
export interface EventsSince {
  /** Events of the channel with ids <= floor may be missing (pruned, or a log write failed); 0 when none is. */
  floor: number;
  /** Events with ids > the resume point, oldest first, at most `limit`. */
  events: Array<{ eventId: number; kind: string; body: string }>;
  /** True when more than `limit` events follow the resume point. */
  more: boolean;
}

/**
 * The event log's hot queries, as the repository runs them (libs/store/test/explain.test.ts checks with EXPLAIN that
 * they use their indexes): a channel's events after an id ($1 channel, $2 id, $3 limit), its floor ($1 channel), and
 * the rows a pruning pass takes ($1 cut-off time, $2 max rows).
 */
export const EVENT_SQL = {
  since: 'SELECT event_id, kind, body FROM channel_events WHERE channel_id = $1 AND event_id > $2 ORDER BY event_id LIMIT $3',
  floor: 'SELECT events_floor FROM channels WHERE id = $1',
  latest: 'SELECT event_id, epoch, body FROM channel_events WHERE channel_id = $1 AND kind = $2 ORDER BY event_id DESC LIMIT 1',
  latestMany: `SELECT c.id AS channel_id, l.event_id, l.epoch, l.body FROM unnest($1::text[]) AS c(id)
    CROSS JOIN LATERAL (SELECT event_id, epoch, body FROM channel_events
      WHERE channel_id = c.id AND kind = $2 ORDER BY event_id DESC LIMIT 1) l`,
  /** The set-fenced append ($1–$5: channel, event id, epoch, kind, body arrays): writes the rows at their channel's current epoch, returns the other channels. */
  append: `WITH r AS (
      SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[]) AS r(channel_id, event_id, epoch, kind, body)
    ), cur AS (
      SELECT id, epoch FROM channels WHERE id IN (SELECT DISTINCT channel_id FROM r) ORDER BY id FOR SHARE
    ), ins AS (
      INSERT INTO channel_events (channel_id, event_id, epoch, kind, body)
      SELECT r.channel_id, r.event_id, r.epoch, r.kind, r.body FROM r JOIN cur ON cur.id = r.channel_id AND cur.epoch = r.epoch
      ORDER BY r.channel_id, r.event_id
      ON CONFLICT (channel_id, event_id) DO NOTHING
      RETURNING 1
    )
    SELECT DISTINCT r.channel_id FROM r LEFT JOIN cur ON cur.id = r.channel_id AND cur.epoch = r.epoch
    WHERE cur.id IS NULL ORDER BY 1`,
  pruneVictims: 'SELECT channel_id, event_id FROM channel_events WHERE created_at < $1 ORDER BY created_at LIMIT $2',
} as const;

/**
 * The event log (table channel_events, migrations/…_event_log.sql): the
 * events a game connection receives, kept EVENT_LOG_RETENTION_MS so a client
 * that reconnects with its last event id gets what it missed.
 */
export class EventLogRepository {
  constructor(private readonly db: Db) {}

  /**
   * Appends events in one statement (one transaction), fenced as a set: the
   * rows of a channel whose current epoch is not the row's are dropped and the
   * channel is named in the result; every other row is written. The check
   * locks each named channel row FOR SHARE (in id order, as the bulk acquire
   * locks them), so an epoch bump waits for this statement and no row at an
   * old epoch is written once the bump commits. A re-sent event (same channel
   * and id) is ignored.
   * @param events at most a tick's batches: one row per (channel, event id)
   * @returns the channels whose rows were refused (stale epoch, or an unknown channel), sorted; empty when all were written
   * @throws the pg error (nothing is written)
   */
  async append(events: readonly LoggedEvent[]): Promise<string[]> {
    if (events.length === 0) return [];
    const { rows } = await this.db.query<{ channel_id: string }>(EVENT_SQL.append, [
      textArray(events.map((e) => e.channel)),
      int8Array(events.map((e) => e.eventId)),
      int8Array(events.map((e) => e.epoch)),
      textArray(events.map((e) => e.kind)),
      textArray(events.map((e) => e.body)),
    ]);
    return rows.map((r) => r.channel_id);
  }

  /**
   * The newest logged event of kind `kind` of each channel (one query; an
   * index scan per channel), for a bulk acquire. Channels with none are absent.
   */
  async latestMany(channels: readonly string[], kind: string): Promise<Map<string, { eventId: number; epoch: number; body: string }>> {
    const out = new Map<string, { eventId: number; epoch: number; body: string }>();
    if (channels.length === 0) return out;
    const { rows } = await this.db.query<{ channel_id: string; event_id: string; epoch: string; body: string }>(EVENT_SQL.latestMany, [
      textArray([...channels]),
      kind,
    ]);
    for (const r of rows) out.set(r.channel_id, { eventId: Number(r.event_id), epoch: Number(r.epoch), body: r.body });
    return out;
  }

  /**
   * The newest logged event of `channel` of kind `kind` (index scan on the
   * primary key, backwards), or null when it has none.
   */
  async latest(channel: string, kind: string): Promise<{ eventId: number; epoch: number; body: string } | null> {
    const { rows } = await this.db.query<{ event_id: string; epoch: string; body: string }>(EVENT_SQL.latest, [channel, kind]);
    const r = rows[0];
    return r ? { eventId: Number(r.event_id), epoch: Number(r.epoch), body: r.body } : null;
  }

  /**
   * The events of `channel` after `afterEventId`, oldest first (index scan on
   * the primary key), at most `limit`, and the channel's floor.
   * @throws RangeError for a limit that is not a positive integer
   */
  async since(channel: string, afterEventId: number, limit: number): Promise<EventsSince> {
    if (!Number.isSafeInteger(limit) || limit < 1) throw new RangeError(`limit must be a positive integer, got ${limit}`);
    const floor = await this.floor(channel);
    const { rows } = await this.db.query<{ event_id: string; kind: string; body: string }>(EVENT_SQL.since, [
      channel,
      afterEventId,
      limit + 1,
    ]);
    const more = rows.length > limit;
    return { floor, events: rows.slice(0, limit).map((r) => ({ eventId: Number(r.event_id), kind: r.kind, body: r.body })), more };
  }

  /** The channel's floor (0 for an unknown channel): a resume from below it cannot be served from the log. */
  async floor(channel: string): Promise<number> {
    const { rows } = await this.db.query<{ events_floor: string }>(EVENT_SQL.floor, [channel]);
    return rows[0] ? Number(rows[0].events_floor) : 0;
  }

  /**
   * Marks events up to `eventId` as possibly missing (a log write failed, so
   * a resume from below must resync). Only ever raises the floor; not fenced
   * (raising it is always safe).
   */
  async raiseFloor(channel: string, eventId: number): Promise<void> {
    await this.db.query('UPDATE channels SET events_floor = GREATEST(events_floor, $2) WHERE id = $1', [channel, eventId]);
  }

  /**
   * One pruning pass: deletes at most `maxRows` of the oldest events logged
   * before `before` and raises each touched channel's floor to the newest id
   * it deleted, in one statement (so a resume never sees a hole without the
   * floor that reports it).
   * @returns rows deleted (equal to maxRows: more may be due)
   * @throws RangeError for a maxRows that is not a positive integer
   */
  async prune(before: Date, maxRows: number): Promise<number> {
    if (!Number.isSafeInteger(maxRows) || maxRows < 1) throw new RangeError(`maxRows must be a positive integer, got ${maxRows}`);
    const { rows } = await this.db.query<{ deleted: string }>(
      `WITH victims AS (
         ${EVENT_SQL.pruneVictims}
       ), del AS (
         DELETE FROM channel_events e USING victims v
         WHERE e.channel_id = v.channel_id AND e.event_id = v.event_id
         RETURNING e.channel_id, e.event_id
       ), floors AS (
         UPDATE channels c SET events_floor = GREATEST(c.events_floor, m.mx)
         FROM (SELECT channel_id, max(event_id) AS mx FROM del GROUP BY channel_id) m
         WHERE c.id = m.channel_id
         RETURNING 1
       )
       SELECT (SELECT count(*) FROM del) AS deleted, (SELECT count(*) FROM floors) AS channels`,
      [before, maxRows],
    );
    return Number(rows[0]?.deleted ?? 0);
  }
}
