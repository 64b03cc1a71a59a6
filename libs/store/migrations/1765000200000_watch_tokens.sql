-- Up Migration

-- Read-only watch tokens: a tenant mints one for a stream overlay (or any
-- embed that only watches) with its API key. A token opens exactly one
-- channel of its tenant, receives what a viewer sees and can never act.
-- Only the SHA-256 of the token is stored (tokens are 256-bit random, so no
-- stretching is needed). `revoked_at` is the shared revocation state every
-- gateway checks: a revoked or expired token is refused at connect, and the
-- sockets open with it are closed.
CREATE TABLE watch_tokens (
  id text COLLATE "C" PRIMARY KEY CHECK (id ~ '^wt_[A-Za-z0-9_-]{1,64}$'),
  tenant_id text NOT NULL REFERENCES tenants (id),
  channel_id text NOT NULL REFERENCES channels (id),
  label text NOT NULL DEFAULT '' CHECK (length(label) <= 100),
  token_hash bytea NOT NULL UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  revoked_at timestamptz
);
-- The tenant's listing, paged by id (and the count of a channel's live tokens).
CREATE INDEX watch_tokens_tenant_idx ON watch_tokens (tenant_id, channel_id, id);

-- Down Migration
DROP TABLE watch_tokens;
