-- Up Migration

-- The event log: the events a game connection receives (batches), kept so a
-- client that reconnects with its last event id gets what it missed
-- (services/gateway, docs/protocol.md "Resume"). One row per event; `body` is
-- the frame exactly as it was published (text, so a replay sends the same
-- bytes). The shard writes a tick's rows BEFORE it publishes them, fenced by
-- the channel's epoch like every durable write of a channel.
CREATE TABLE channel_events (
  channel_id text NOT NULL,
  event_id bigint NOT NULL,
  epoch bigint NOT NULL,
  kind text NOT NULL CHECK (kind ~ '^[a-z]{1,16}$'),
  body text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (channel_id, event_id)
);
-- Retention (EVENT_LOG_RETENTION_MS): the pruner deletes the oldest rows first.
CREATE INDEX channel_events_created_idx ON channel_events (created_at);
CREATE TRIGGER channel_events_fence BEFORE INSERT OR UPDATE ON channel_events
  FOR EACH ROW EXECUTE FUNCTION cp_check_epoch();

-- Events of a channel with ids <= events_floor may be missing from the log
-- (pruned, or a log write failed): a resume from below it must resync.
ALTER TABLE channels ADD COLUMN events_floor bigint NOT NULL DEFAULT 0;

-- Down Migration
ALTER TABLE channels DROP COLUMN events_floor;
DROP TABLE channel_events;
