import { CHANNEL_ID_RE, CrowdplayError } from '@crowdplay/protocol';
import type { Db } from './db.ts';
import { MAX_QUOTA, TenantQuotaError } from './quotas.ts';
import { ChannelCreations } from './channel-creations.ts';
import { int8Array, textArray } from './array-params.ts';

/** A channel row: its tenant, its fencing epoch and current owner shard. */
export interface ChannelRow {
  id: string;
  tenantId: string;
  epoch: number;
  owner: string | null;
  /** The channel its chat became (a Telegram group upgraded to a supergroup), or null. Never changes once set. */
  migratedTo: string | null;
  /** When the move to `migratedTo` finished (the state was merged there); null while it is under way or never began. */
  migratedAt: Date | null;
}

/**
 * What {@link ChannelRepository.beginMigration} found:
 * - `none`: the old channel does not exist (the chat never played): nothing was written.
 * - `started`: the move is recorded now (`migrated_to` set, the new channel created for the same tenant).
 * - `resumed`: the same move was recorded before but not finished (a crash, a failed merge): carry it on.
 * - `done`: the same move finished before (a re-delivered request): nothing to do.
 */
export type MigrationBegin = 'none' | 'started' | 'resumed' | 'done';

/** A channel's last snapshot. */
export interface Snapshot {
  channelId: string;
  epoch: number;
  eventId: number;
  state: unknown;
  savedAt: Date;
}

interface Row {
  id: string;
  tenant_id: string;
  epoch: string;
  owner: string | null;
  migrated_to: string | null;
  migrated_at: Date | null;
}

const COLUMNS = 'id, tenant_id, epoch, owner, migrated_to, migrated_at';

/** The assignment look-ups (libs/store/test/explain.test.ts checks their indexes): a channel by id ($1), an owner's channels ($1 shard). */
export const CHANNEL_SQL = {
  byId: `SELECT ${COLUMNS} FROM channels WHERE id = $1`,
  byOwner: `SELECT ${COLUMNS} FROM channels WHERE owner = $1 ORDER BY id`,
  byIds: `SELECT ${COLUMNS} FROM channels WHERE id = ANY($1::text[])`,
  /** A tenant's Telegram chat channels (`tg<id>`, `tgn<id>`, its bots' `tb<bot>_[n]<id>`: isTelegramChannelId) not moved away ($2: at most). */
  telegramChatsOf: `SELECT id FROM channels
    WHERE tenant_id = $1 AND id ~ '^(tg|tb[1-9][0-9]{0,15}_)n?[1-9][0-9]{0,15}$' AND migrated_to IS NULL ORDER BY id LIMIT $2`,
  /**
   * The bulk acquire ($1 channel ids, $2 their new owners): locks the rows in id order (as the set-fenced writes lock
   * them FOR SHARE), bumps each epoch and sets its owner; a migrated or unknown channel is left out.
   */
  acquireMany: `WITH p AS (
      SELECT * FROM unnest($1::text[], $2::text[]) AS p(id, owner)
    ), locked AS (
      SELECT c.id FROM channels c JOIN p ON p.id = c.id WHERE c.migrated_to IS NULL ORDER BY c.id FOR UPDATE OF c
    )
    UPDATE channels c SET epoch = c.epoch + 1, owner = p.owner, acquired_at = now()
    FROM p WHERE c.id = p.id AND c.id IN (SELECT id FROM locked)
    RETURNING c.id, c.owner, c.epoch`,
  /** The bulk release ($1 ids, $2 owners, $3 epochs): clears each owner that still holds its channel at that epoch (rows locked in id order, as the bulk acquire locks them). */
  releaseMany: `WITH r AS (
      SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(id, owner, epoch)
    ), locked AS (
      SELECT c.id FROM channels c JOIN r ON r.id = c.id ORDER BY c.id FOR UPDATE OF c
    )
    UPDATE channels c SET owner = NULL
    FROM r WHERE c.id = r.id AND c.owner = r.owner AND c.epoch = r.epoch AND c.id IN (SELECT id FROM locked)
    RETURNING c.id`,
  snapshots: 'SELECT channel_id, epoch, event_id, state, saved_at FROM channel_snapshots WHERE channel_id = ANY($1::text[])',
  /**
   * The set-fenced snapshot write ($1 ids, $2 epochs, $3 event ids, $4 states as JSON text): writes the snapshots at
   * their channel's current epoch (rows locked FOR SHARE in id order), returns the other channels. Rows are upserted
   * in id order too: two writes of overlapping channels (a periodic pass and a handoff) otherwise deadlock on the index.
   */
  saveSnapshots: `WITH r AS (
      SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[]) AS r(channel_id, epoch, event_id, state)
    ), cur AS (
      SELECT id, epoch FROM channels WHERE id IN (SELECT channel_id FROM r) ORDER BY id FOR SHARE
    ), ins AS (
      INSERT INTO channel_snapshots (channel_id, epoch, event_id, state, saved_at)
      SELECT r.channel_id, r.epoch, r.event_id, r.state::jsonb, now() FROM r JOIN cur ON cur.id = r.channel_id AND cur.epoch = r.epoch
      ORDER BY r.channel_id
      ON CONFLICT (channel_id) DO UPDATE SET epoch = EXCLUDED.epoch, event_id = EXCLUDED.event_id, state = EXCLUDED.state, saved_at = now()
      RETURNING 1
    )
    SELECT r.channel_id FROM r LEFT JOIN cur ON cur.id = r.channel_id AND cur.epoch = r.epoch WHERE cur.id IS NULL ORDER BY 1`,
} as const;

/** One channel of a bulk acquire: the shard that becomes its owner. */
export interface Placement {
  channel: string;
  shard: string;
}

/** One channel of a bulk release: cleared only if `shard` still owns it at `epoch`. */
export interface Holding {
  channel: string;
  shard: string;
  epoch: number;
}

/** One snapshot of a bulk write, fenced by `epoch`. */
export interface SnapshotWrite {
  channel: string;
  epoch: number;
  eventId: number;
  state: unknown;
}

function toChannel(r: Row): ChannelRow {
  return { id: r.id, tenantId: r.tenant_id, epoch: Number(r.epoch), owner: r.owner, migratedTo: r.migrated_to, migratedAt: r.migrated_at };
}

/**
 * Channels, their epochs (the fencing tokens) and snapshots. The epoch lives
 * in the channel row that the fencing trigger reads, so a restart of anything
 * but Postgres never reuses one.
 */
export class ChannelRepository {
  private readonly creations: ChannelCreations;

  constructor(private readonly db: Db) {
    this.creations = new ChannelCreations(db);
  }

  /**
   * Returns the channel, creating it for `tenantId` if it does not exist and the tenant holds fewer channels
   * than its quota (its override in `tenant_quotas`, else `maxChannels`). The count and the insert run under
   * the tenant's advisory lock in one transaction, so concurrent creations (two gateways) never pass the quota;
   * the tenant's creations asked meanwhile share its next transaction (channel-creations.ts). An existing channel
   * is returned without the lock or the count.
   * @param maxChannels TENANT_MAX_CHANNELS (default: no limit but the tenant's override)
   * @throws CrowdplayError CP_ERR_CHANNEL_INVALID_ID, CP_ERR_AUTH_FORBIDDEN_CHANNEL (it belongs to another tenant),
   *   CP_ERR_TENANT_QUOTA (a new channel over the tenant's quota: nothing written)
   */
  async ensure(id: string, tenantId: string, maxChannels: number = MAX_QUOTA): Promise<ChannelRow> {
    if (!CHANNEL_ID_RE.test(id)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
    let row = await this.get(id);
    if (!row) {
      const r = await this.creations.create(id, tenantId, maxChannels);
      if (r.overQuota && !(await this.get(id))) throw new TenantQuotaError(tenantId, 'channels', r.limit);
      row = await this.get(id);
    }
    if (!row) throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [id]);
    if (row.tenantId !== tenantId) throw new CrowdplayError('CP_ERR_AUTH_FORBIDDEN_CHANNEL', [id]);
    return row;
  }

  /** The channel, or null. */
  async get(id: string): Promise<ChannelRow | null> {
    if (!CHANNEL_ID_RE.test(id)) return null;
    const { rows } = await this.db.query<Row>(CHANNEL_SQL.byId, [id]);
    return rows[0] ? toChannel(rows[0]) : null;
  }

  /**
   * The ids of a tenant's Telegram chat channels (`tg<id>`, `tgn<id>`, its own bots' `tb<bot>_[n]<id>`) that did not
   * move to another channel, in id order, at most `limit` (one query on the tenant index): what a game attaching "every chat" of its tenant serves.
   */
  async telegramChatsOf(tenantId: string, limit: number): Promise<string[]> {
    const { rows } = await this.db.query<{ id: string }>(CHANNEL_SQL.telegramChatsOf, [tenantId, limit]);
    return rows.map((r) => r.id);
  }

  /** The channels of `ids` that exist, by id (one query). Invalid ids are left out. */
  async getMany(ids: readonly string[]): Promise<Map<string, ChannelRow>> {
    const valid = ids.filter((id) => CHANNEL_ID_RE.test(id));
    const out = new Map<string, ChannelRow>();
    if (valid.length === 0) return out;
    const { rows } = await this.db.query<Row>(CHANNEL_SQL.byIds, [textArray(valid)]);
    for (const r of rows) out.set(r.id, toChannel(r));
    return out;
  }

  /**
   * Bulk acquire, one statement: each channel gets its placement's shard as
   * owner at a new epoch (`epoch + 1`), whoever owned it before (every write
   * a previous owner makes from then on is refused). Channels that are
   * unknown or migrated are left out of the result (nothing written for them).
   * @param placements at most one per channel
   * @returns the new epoch of each channel acquired, by id
   * @throws the pg error (nothing is written)
   */
  async acquireMany(placements: readonly Placement[]): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    const valid = placements.filter((p) => CHANNEL_ID_RE.test(p.channel));
    if (valid.length === 0) return out;
    const { rows } = await this.db.query<{ id: string; epoch: string }>(CHANNEL_SQL.acquireMany, [
      textArray(valid.map((p) => p.channel)),
      textArray(valid.map((p) => p.shard)),
    ]);
    for (const r of rows) out.set(r.id, Number(r.epoch));
    return out;
  }

  /**
   * Bulk release, one statement: clears each owner that still owns its channel at the given epoch.
   * @returns the channels released (the others moved on: nothing changed for them)
   */
  async releaseMany(items: readonly Holding[]): Promise<Set<string>> {
    if (items.length === 0) return new Set();
    const { rows } = await this.db.query<{ id: string }>(CHANNEL_SQL.releaseMany, [
      textArray(items.map((i) => i.channel)),
      textArray(items.map((i) => i.shard)),
      int8Array(items.map((i) => i.epoch)),
    ]);
    return new Set(rows.map((r) => r.id));
  }

  /**
   * Makes `shardId` the owner at a new epoch (`epoch + 1`), whoever owned it
   * before: every write the previous owner makes from now on is refused.
   * @returns the new epoch
   * @throws CrowdplayError CP_ERR_CHANNEL_UNKNOWN
   */
  async acquire(id: string, shardId: string): Promise<number> {
    const { rows } = await this.db.query<{ epoch: string }>(
      'UPDATE channels SET epoch = epoch + 1, owner = $2, acquired_at = now() WHERE id = $1 RETURNING epoch',
      [id, shardId],
    );
    if (!rows[0]) throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [id]);
    return Number(rows[0].epoch);
  }

  /**
   * Clears the owner if `shardId` still owns the channel at `epoch`.
   * @returns false when the channel moved on (nothing changed)
   */
  async release(id: string, shardId: string, epoch: number): Promise<boolean> {
    const { rowCount } = await this.db.query('UPDATE channels SET owner = NULL WHERE id = $1 AND owner = $2 AND epoch = $3', [
      id,
      shardId,
      epoch,
    ]);
    return rowCount === 1;
  }

  /**
   * Records that channel `from` became `to` (a Telegram group upgraded to a
   * supergroup), in one transaction: `to` is created for `from`'s tenant if
   * it does not exist, and `from.migrated_to` is set. From then on the old
   * channel is never served again (the router and the shards refuse it with
   * CP_ERR_CHANNEL_MIGRATED). Idempotent: the same move again answers
   * `resumed` (not finished) or `done`.
   * @throws CrowdplayError CP_ERR_CHANNEL_INVALID_ID (either id),
   *   CP_ERR_CHANNEL_MIGRATION_INVALID (`from` = `to`; `from` already moved to
   *   another channel; `to` belongs to another tenant; `to` itself moved on)
   */
  async beginMigration(from: string, to: string): Promise<MigrationBegin> {
    if (!CHANNEL_ID_RE.test(from) || !CHANNEL_ID_RE.test(to)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
    if (from === to) throw new CrowdplayError('CP_ERR_CHANNEL_MIGRATION_INVALID', [from, 'it would move to itself']);
    return this.db.tx(async (q) => {
      const { rows } = await q.query<Row>(`SELECT ${COLUMNS} FROM channels WHERE id = $1 FOR UPDATE`, [from]);
      const old = rows[0];
      if (!old) return 'none';
      if (old.migrated_to !== null) {
        if (old.migrated_to !== to)
          throw new CrowdplayError('CP_ERR_CHANNEL_MIGRATION_INVALID', [from, `it moved to ${old.migrated_to} before`]);
        return old.migrated_at === null ? 'resumed' : 'done';
      }
      await q.query('INSERT INTO channels (id, tenant_id) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING', [to, old.tenant_id]);
      const target = (await q.query<Row>(`SELECT ${COLUMNS} FROM channels WHERE id = $1 FOR UPDATE`, [to])).rows[0]!;
      if (target.tenant_id !== old.tenant_id)
        throw new CrowdplayError('CP_ERR_CHANNEL_MIGRATION_INVALID', [from, `${to} belongs to another tenant`]);
      if (target.migrated_to !== null)
        throw new CrowdplayError('CP_ERR_CHANNEL_MIGRATION_INVALID', [from, `${to} itself moved to ${target.migrated_to}`]);
      await q.query('UPDATE channels SET migrated_to = $2 WHERE id = $1', [from, to]);
      return 'started';
    });
  }

  /**
   * Marks the move of `from` finished (its state was merged into `migrated_to`).
   * @returns false when `from` has no move recorded (nothing changed)
   */
  async finishMigration(from: string): Promise<boolean> {
    const { rowCount } = await this.db.query(
      'UPDATE channels SET migrated_at = coalesce(migrated_at, now()) WHERE id = $1 AND migrated_to IS NOT NULL',
      [from],
    );
    return rowCount === 1;
  }

  /**
   * Fences the channel: a new epoch and no owner, so every write its last
   * owner might still make is refused (cp_check_epoch).
   * @returns the new epoch
   * @throws CrowdplayError CP_ERR_CHANNEL_UNKNOWN
   */
  async fence(id: string): Promise<number> {
    const { rows } = await this.db.query<{ epoch: string }>(
      'UPDATE channels SET epoch = epoch + 1, owner = NULL WHERE id = $1 RETURNING epoch',
      [id],
    );
    if (!rows[0]) throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [id]);
    return Number(rows[0].epoch);
  }

  /**
   * Clears `shardId` as owner of every channel (a shard starting: a process
   * that reuses a shard id owns nothing yet; what its predecessor held must
   * be assigned again, at a new epoch).
   * @returns how many channels it held
   */
  async disown(shardId: string): Promise<number> {
    const { rowCount } = await this.db.query('UPDATE channels SET owner = NULL WHERE owner = $1', [shardId]);
    return rowCount ?? 0;
  }

  /** Every channel that has an owner (the router rebuilds its assignments from them after a restart), by id. */
  async listAssigned(): Promise<ChannelRow[]> {
    const { rows } = await this.db.query<Row>(`SELECT ${COLUMNS} FROM channels WHERE owner IS NOT NULL ORDER BY id`);
    return rows.map(toChannel);
  }

  /** Channels owned by `shardId`. */
  async listOwned(shardId: string): Promise<ChannelRow[]> {
    const { rows } = await this.db.query<Row>(CHANNEL_SQL.byOwner, [shardId]);
    return rows.map(toChannel);
  }

  /**
   * Saves a channel's state at `epoch` (fenced: refused unless `epoch` is current).
   * @throws CrowdplayError CP_ERR_CHANNEL_STALE_EPOCH
   */
  async saveSnapshot(id: string, epoch: number, eventId: number, state: unknown): Promise<void> {
    const stale = await this.saveSnapshots([{ channel: id, epoch, eventId, state }]);
    if (stale.length > 0) throw new CrowdplayError('CP_ERR_CHANNEL_STALE_EPOCH', [id, epoch]);
  }

  /**
   * Saves many channels' states in one statement, fenced as a set: a
   * snapshot whose epoch is not its channel's current one is not written and
   * its channel is named in the result; the others are written.
   * @returns the channels refused (stale epoch or unknown), sorted
   * @throws the pg error (nothing is written)
   */
  async saveSnapshots(items: readonly SnapshotWrite[]): Promise<string[]> {
    if (items.length === 0) return [];
    const { rows } = await this.db.query<{ channel_id: string }>(CHANNEL_SQL.saveSnapshots, [
      textArray(items.map((i) => i.channel)),
      int8Array(items.map((i) => i.epoch)),
      int8Array(items.map((i) => i.eventId)),
      textArray(items.map((i) => JSON.stringify(i.state))),
    ]);
    return rows.map((r) => r.channel_id);
  }

  /** The last snapshot of each channel that has one, by id (one query). */
  async loadSnapshots(ids: readonly string[]): Promise<Map<string, Snapshot>> {
    const out = new Map<string, Snapshot>();
    if (ids.length === 0) return out;
    const { rows } = await this.db.query<{ channel_id: string; epoch: string; event_id: string; state: unknown; saved_at: Date }>(
      CHANNEL_SQL.snapshots,
      [textArray([...ids])],
    );
    for (const r of rows)
      out.set(r.channel_id, {
        channelId: r.channel_id,
        epoch: Number(r.epoch),
        eventId: Number(r.event_id),
        state: r.state,
        savedAt: r.saved_at,
      });
    return out;
  }

  /** The channel's last snapshot, or null. */
  async loadSnapshot(id: string): Promise<Snapshot | null> {
    const { rows } = await this.db.query<{ channel_id: string; epoch: string; event_id: string; state: unknown; saved_at: Date }>(
      'SELECT channel_id, epoch, event_id, state, saved_at FROM channel_snapshots WHERE channel_id = $1',
      [id],
    );
    const r = rows[0];
    return r ? { channelId: r.channel_id, epoch: Number(r.epoch), eventId: Number(r.event_id), state: r.state, savedAt: r.saved_at } : null;
  }
}
