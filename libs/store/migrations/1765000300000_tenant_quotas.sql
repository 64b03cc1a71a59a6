-- Up Migration

-- Per-tenant quota overrides: a NULL column means the deployment-wide
-- default (the TENANT_MAX_* settings). Written by `crowdplay tenant quota`.
CREATE TABLE tenant_quotas (
  tenant_id text PRIMARY KEY REFERENCES tenants (id),
  max_channels bigint CHECK (max_channels >= 0),
  max_connections bigint CHECK (max_connections >= 0),
  max_intents_per_s bigint CHECK (max_intents_per_s >= 0),
  max_grant_points_per_day bigint CHECK (max_grant_points_per_day >= 0),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Points granted through POST /v1/grants per tenant and UTC day: reserved
-- by a conditional upsert before the ledger transfer (the row lock makes two
-- gateways' grants see each other), given back when the grant is a replay
-- or fails.
CREATE TABLE tenant_grant_days (
  tenant_id text NOT NULL REFERENCES tenants (id),
  day date NOT NULL,
  points bigint NOT NULL DEFAULT 0 CHECK (points >= 0),
  PRIMARY KEY (tenant_id, day)
);

-- Down Migration
DROP TABLE tenant_grant_days;
DROP TABLE tenant_quotas;
