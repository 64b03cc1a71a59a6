-- Up Migration

-- A channel whose chat became another one (Telegram: a group upgraded to a
-- supergroup gets a new chat id, so a new channel). `migrated_to` is set
-- first, durably, and never changes afterwards: from then on the router and
-- the shards refuse to serve the old channel (CP_ERR_CHANNEL_MIGRATED) and
-- the gateway sends a Mini App opened from an old link to `migrated_to`.
-- `migrated_at` is set once the old channel's final state was merged into
-- the new channel's (router `migrate`); a move found with `migrated_to` set
-- and `migrated_at` NULL (a crash in between) is resumed by the next request.
ALTER TABLE channels
  ADD COLUMN migrated_to text REFERENCES channels (id),
  ADD COLUMN migrated_at timestamptz,
  ADD CONSTRAINT channels_migrated_elsewhere CHECK (migrated_to IS NULL OR migrated_to <> id),
  ADD CONSTRAINT channels_migrated_at_needs_target CHECK (migrated_at IS NULL OR migrated_to IS NOT NULL);

-- Down Migration
ALTER TABLE channels
  DROP CONSTRAINT channels_migrated_at_needs_target,
  DROP CONSTRAINT channels_migrated_elsewhere,
  DROP COLUMN migrated_at,
  DROP COLUMN migrated_to;
