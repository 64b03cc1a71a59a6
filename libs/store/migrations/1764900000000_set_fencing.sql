-- Up Migration

-- The event log and the snapshots are written for many channels in one
-- statement (a tick's batches; a bulk release's final snapshots). Their
-- fencing moves from a per-row trigger into those statements
-- (EVENT_SQL.append, CHANNEL_SQL.saveSnapshots): the channel rows are locked
-- FOR SHARE in id order, the rows at the current epoch are written and the
-- stale channels named, so one moved channel no longer fails the statement
-- for every other one. The rounds and the ledger keep their triggers.
DROP TRIGGER channel_events_fence ON channel_events;
DROP TRIGGER channel_snapshots_fence ON channel_snapshots;

-- Down Migration
CREATE TRIGGER channel_snapshots_fence BEFORE INSERT OR UPDATE ON channel_snapshots
  FOR EACH ROW EXECUTE FUNCTION cp_check_epoch();
CREATE TRIGGER channel_events_fence BEFORE INSERT OR UPDATE ON channel_events
  FOR EACH ROW EXECUTE FUNCTION cp_check_epoch();
