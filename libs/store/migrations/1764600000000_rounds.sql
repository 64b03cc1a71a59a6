-- Up Migration

-- Rounds of a channel (services/crowd-engine/src/rounds.ts): the durable
-- part of a pool (parimutuel) or market (LMSR) round. The ledger holds the
-- money (transfers name the round by `uid`); this row holds what the ledger
-- cannot: the outcomes, the deadline, the state, the winner and, from the
-- moment the round locks, its final book (every stake, or every position),
-- so payouts can be recomputed after a crash.
--
-- Life of a row, every write carrying the writer's channel epoch (fenced by
-- cp_check_epoch(), so a cut-off shard cannot settle or cancel a channel that
-- moved):
--   INSERT  state 'open'                            (round.open; after the maker's subsidy committed)
--   UPDATE  state 'locked', book                    (deadline passed; no transfer of the round is in flight)
--   UPDATE  state 'settled', winner                 (round.settle; before any payout is sent)
--   UPDATE  state 'cancelled'                       (round.cancel, expiry, drain, or recovery of an open round)
--   UPDATE  paid = true                             (every payout, refund and maker close committed)
-- A round found 'open' after a crash is cancelled (its book was never
-- written; the ledger's stakes are refunded). 'locked' resumes. 'settled' or
-- 'cancelled' with paid = false has its payouts or refunds sent again (their
-- transfer ids are deterministic, so what committed before is a replay).
CREATE TABLE rounds (
  channel_id text NOT NULL REFERENCES channels (id),
  id text COLLATE "C" NOT NULL CHECK (id ~ '^[A-Za-z0-9_.-]{1,32}$'),
  -- The ledger's round_id: '<channel>/<id>'.
  uid text COLLATE "C" NOT NULL UNIQUE,
  tenant_id text NOT NULL REFERENCES tenants (id),
  kind text NOT NULL CHECK (kind IN ('pool', 'market')),
  outcomes jsonb NOT NULL,
  -- LMSR liquidity b (market rounds).
  liquidity double precision,
  -- House take of a pool, basis points, fixed when the round opens.
  take_bps integer NOT NULL DEFAULT 0 CHECK (take_bps BETWEEN 0 AND 10000),
  opened_at timestamptz NOT NULL,
  deadline_at timestamptz NOT NULL,
  state text NOT NULL CHECK (state IN ('open', 'locked', 'settled', 'cancelled')),
  -- Index into outcomes (settled rounds).
  winner integer,
  book jsonb,
  paid boolean NOT NULL DEFAULT false,
  epoch bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (channel_id, id),
  CHECK ((state = 'settled') = (winner IS NOT NULL)),
  CHECK (state = 'open' OR state = 'cancelled' OR book IS NOT NULL)
);
-- Recovery: the unfinished rounds (a small set) of every channel.
CREATE INDEX rounds_unfinished_idx ON rounds (channel_id) WHERE NOT paid;

CREATE TRIGGER rounds_fence BEFORE INSERT OR UPDATE ON rounds
  FOR EACH ROW EXECUTE FUNCTION cp_check_epoch();

-- Down Migration
DROP TABLE rounds;
