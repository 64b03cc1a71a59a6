-- Up Migration

-- What viewers read of a round (docs/protocol.md "Display labels"): its title
-- (the question) and a display label per outcome, as the game sent them in
-- round.open; checked at the edge (code points, no control or bidi
-- characters). Kept with the round so they survive moves and restarts.
ALTER TABLE rounds ADD COLUMN title text CHECK (length(title) BETWEEN 1 AND 120);
ALTER TABLE rounds ADD COLUMN labels jsonb;

-- The recent rounds of a channel, newest first (GET /v1/channels/:channel/rounds).
CREATE INDEX rounds_recent_idx ON rounds (channel_id, opened_at DESC, id DESC);

-- Down Migration
DROP INDEX rounds_recent_idx;
ALTER TABLE rounds DROP COLUMN labels;
ALTER TABLE rounds DROP COLUMN title;
