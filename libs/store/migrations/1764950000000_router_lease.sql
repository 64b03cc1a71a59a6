-- Up Migration

-- The router lease: several router processes run, one is active. Each tries
-- every ROUTER_LEASE_MS / 3 to take or renew the row named 'router' with one
-- conditional statement (services/router/src/lease.ts): it wins when it
-- holds the row already or the row has expired (Postgres's clock decides).
-- `term` rises each time a tenure starts (another holder, or the same one
-- after its lease lapsed), so a holder that sees a new term knows it was
-- not active all along. Channel ownership stays fenced by the channel epochs.
CREATE TABLE router_lease (
  name text PRIMARY KEY,
  holder text NOT NULL,
  expires_at timestamptz NOT NULL,
  term bigint NOT NULL CHECK (term > 0)
);

-- Down Migration
DROP TABLE router_lease;
