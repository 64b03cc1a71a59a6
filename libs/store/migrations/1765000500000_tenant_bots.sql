-- Up Migration

-- A tenant's own Telegram bots, keyed by Telegram's bot id (the number before
-- the token's colon, getMe's `id`): one bot belongs to one tenant. The token
-- and the webhook secret are stored encrypted (AES-256-GCM under
-- TELEGRAM_BOT_SECRETS_KEY, libs/telegram bot-secrets.ts), never in clear.
-- Written by `crowdplay tenant bot set`; read by the gateways' bot registry.
CREATE TABLE tenant_bots (
  bot_id bigint PRIMARY KEY CHECK (bot_id > 0),
  tenant_id text NOT NULL REFERENCES tenants (id),
  username text NOT NULL,
  token_enc text NOT NULL,
  webhook_secret_enc text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tenant_bots_tenant ON tenant_bots (tenant_id);

-- The quota of bots per tenant (NULL: TENANT_MAX_BOTS).
ALTER TABLE tenant_quotas ADD COLUMN max_bots bigint CHECK (max_bots >= 0);

-- Down Migration
ALTER TABLE tenant_quotas DROP COLUMN max_bots;
DROP TABLE tenant_bots;
