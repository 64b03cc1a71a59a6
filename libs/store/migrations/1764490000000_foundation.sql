-- Up Migration

-- Tenants (licensees). API keys are 192-bit random strings, so a plain
-- SHA-256 is enough to store them (no password stretching needed); the
-- signing secret verifies viewer JWTs (HS256) and must be readable.
CREATE TABLE tenants (
  id text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$'),
  name text NOT NULL,
  api_key_hash bytea NOT NULL UNIQUE,
  api_key_prefix text NOT NULL,
  signing_secret text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  key_rotated_at timestamptz
);

-- Channels: the unit of sharding. `epoch` is the fencing token; `owner` the
-- shard that acquired it at that epoch (NULL when released).
CREATE TABLE channels (
  id text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$'),
  tenant_id text NOT NULL REFERENCES tenants (id),
  epoch bigint NOT NULL DEFAULT 0,
  owner text,
  acquired_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX channels_owner_idx ON channels (owner) WHERE owner IS NOT NULL;
CREATE INDEX channels_tenant_idx ON channels (tenant_id);

-- Fencing: a durable write of a channel carries the epoch it was made at;
-- Postgres refuses it unless that is the channel's current epoch. FOR SHARE
-- waits for a concurrent acquire, so a write racing a move sees the new epoch.
CREATE FUNCTION cp_check_epoch() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  current_epoch bigint;
BEGIN
  SELECT epoch INTO current_epoch FROM channels WHERE id = NEW.channel_id FOR SHARE;
  IF current_epoch IS NULL OR NEW.epoch <> current_epoch THEN
    RAISE EXCEPTION 'stale epoch % for channel % (current %)', NEW.epoch, NEW.channel_id, current_epoch
      USING ERRCODE = 'CP409';
  END IF;
  RETURN NEW;
END
$$;

-- The last snapshot of a channel's state, written by its owner.
CREATE TABLE channel_snapshots (
  channel_id text PRIMARY KEY REFERENCES channels (id),
  epoch bigint NOT NULL,
  event_id bigint NOT NULL,
  state jsonb NOT NULL,
  saved_at timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER channel_snapshots_fence BEFORE INSERT OR UPDATE ON channel_snapshots
  FOR EACH ROW EXECUTE FUNCTION cp_check_epoch();

-- The sequencer's high-water mark: every event id ever handed out is <= it.
CREATE TABLE sequencer (
  name text PRIMARY KEY,
  high_water bigint NOT NULL CHECK (high_water >= 0)
);
INSERT INTO sequencer (name, high_water) VALUES ('events', 0);

-- Down Migration
DROP TABLE sequencer;
DROP TABLE channel_snapshots;
DROP FUNCTION cp_check_epoch();
DROP TABLE channels;
DROP TABLE tenants;
