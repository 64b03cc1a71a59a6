-- Up Migration

-- The ledger (libs/ledger): double entry in integer points.
--
-- Accounts. `kind` and `owner`:
--   wallet    one per (tenant, viewer)        owner = viewer id
--   escrow    one per parimutuel round        owner = round id (holds the stakes until settle/cancel)
--   maker     one per LMSR market round       owner = round id (the market maker's subsidy and takings)
--   treasury  one per tenant                  owner = ''  (the issuance account, see below)
--   house     one per tenant                  owner = ''  (receives the house take)
--
-- Every transfer moves `amount` points from one account to another (one
-- balance goes down, one goes up by the same amount), so the sum of ALL
-- balances is always zero. Points enter the economy only as transfers out of
-- the tenant's treasury (a grant debits the treasury and credits a wallet), so
-- the treasury's balance is minus the points in circulation: it is the one
-- account that is expected to be negative.
--
-- Postgres itself refuses a wallet or an escrow below zero (CHECK below),
-- inside the group-commit transaction.
CREATE TABLE accounts (
  id bigserial PRIMARY KEY,
  tenant_id text NOT NULL REFERENCES tenants (id),
  kind text NOT NULL CHECK (kind IN ('wallet', 'escrow', 'maker', 'treasury', 'house')),
  owner text COLLATE "C" NOT NULL CHECK (length(owner) <= 128),
  balance bigint NOT NULL DEFAULT 0,
  CONSTRAINT accounts_non_negative CHECK (kind NOT IN ('wallet', 'escrow') OR balance >= 0),
  CONSTRAINT accounts_owner_shape CHECK ((kind IN ('treasury', 'house')) = (owner = '')),
  UNIQUE (tenant_id, kind, owner)
);

-- Transfers: one row per transfer; `id` is the caller's idempotency id and
-- `fingerprint` a SHA-256 of the transfer's fields (tenant, accounts, amount,
-- kind, channel, round; not the epoch), so a replay with the same id is
-- recognised as identical or as a conflict. A transfer made for a channel
-- carries the channel's epoch and is fenced by cp_check_epoch() (below).
-- `id` uses the C collation: byte-wise comparison keeps the primary-key
-- index cheap on the group-commit path.
--
-- No per-row foreign keys: each is a trigger that runs one query per row,
-- and four of them cost more than the insert itself (measured with
-- auto_explain on a batch of 500: the four FK triggers took ~3.5× the insert;
-- dropping them took `npm run bench -- ledger` from ~14,000 to ~17,000
-- transfers/s with one commit at a time). One statement-level
-- trigger (transfers_integrity, below) checks every row of the statement in
-- one set-based query instead, and checks more than the keys would: both
-- accounts exist AND belong to the transfer's tenant (which therefore
-- exists). Rows of accounts, tenants and channels are never deleted;
-- verifyLedger reports any transfer whose accounts are missing.
CREATE TABLE transfers (
  id text COLLATE "C" PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 128),
  tenant_id text NOT NULL,
  channel_id text,
  epoch bigint,
  from_account bigint NOT NULL,
  to_account bigint NOT NULL,
  amount bigint NOT NULL CHECK (amount > 0),
  kind text NOT NULL CHECK (kind ~ '^[a-z][a-z_]{0,31}$'),
  round_id text COLLATE "C",
  created_at timestamptz NOT NULL DEFAULT now(),
  fingerprint bytea NOT NULL CHECK (length(fingerprint) = 32),
  CHECK (from_account <> to_account),
  CHECK ((channel_id IS NULL) = (epoch IS NULL))
);
-- Per-round queries (settle, refunds, verify's escrow check).
CREATE INDEX transfers_round_idx ON transfers (round_id, kind) WHERE round_id IS NOT NULL;
-- An account's history (statements, verify of one account).
CREATE INDEX transfers_from_idx ON transfers (from_account);
CREATE INDEX transfers_to_idx ON transfers (to_account);

-- Fencing: the foundation's cp_check_epoch() reads NEW.channel_id / NEW.epoch
-- (an unknown channel is refused too); transfers without a channel (grants
-- from the treasury) are not fenced.
CREATE TRIGGER transfers_fence BEFORE INSERT OR UPDATE ON transfers
  FOR EACH ROW WHEN (NEW.channel_id IS NOT NULL) EXECUTE FUNCTION cp_check_epoch();

-- Referential integrity of a statement's transfers, set-based (see above).
CREATE FUNCTION cp_transfers_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  bad record;
BEGIN
  SELECT n.id, n.tenant_id, f.tenant_id AS from_tenant, t.tenant_id AS to_tenant INTO bad
  FROM new_rows n
  LEFT JOIN accounts f ON f.id = n.from_account
  LEFT JOIN accounts t ON t.id = n.to_account
  WHERE f.tenant_id IS DISTINCT FROM n.tenant_id OR t.tenant_id IS DISTINCT FROM n.tenant_id
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'transfer % of tenant % refers to accounts of tenant % and %', bad.id, bad.tenant_id,
      coalesce(bad.from_tenant, '(missing)'), coalesce(bad.to_tenant, '(missing)')
      USING ERRCODE = 'foreign_key_violation';
  END IF;
  SELECT n.id, n.channel_id INTO bad
  FROM new_rows n JOIN channels c ON c.id = n.channel_id
  WHERE c.tenant_id <> n.tenant_id
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'transfer % is for channel % of another tenant', bad.id, bad.channel_id USING ERRCODE = 'foreign_key_violation';
  END IF;
  RETURN NULL;
END
$$;
-- (A trigger with a transition table takes one event, hence two.)
CREATE TRIGGER transfers_integrity_insert AFTER INSERT ON transfers
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION cp_transfers_check();
CREATE TRIGGER transfers_integrity_update AFTER UPDATE ON transfers
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION cp_transfers_check();

-- One group commit: the whole batch in ONE statement (so one round trip and,
-- called outside an explicit transaction, one transaction with one COMMIT).
--
-- Input, in queue order, one element per transfer: p_ids, p_fps (the 32-byte
-- fingerprints, concatenated), p_from / p_to (1-based indices into
-- p_accounts), p_amounts, p_ctx (1-based index into the p_ctx_* arrays: the
-- batch's distinct (tenant, channel, epoch, kind, round) combinations, so
-- the per-transfer arrays stay few and short). p_accounts holds the batch's
-- distinct accounts: first the wallets and escrows (1..p_checked: may not go
-- below zero), then the other non-hot accounts (makers; ..p_nonhot), then the
-- hot ones (treasury, house).
--
-- Output: one row of arrays: status per transfer (0 committed, 1 replay of an
-- identical committed transfer, 2 idempotency conflict, 3 insufficient funds,
-- 4 stale epoch, 5 unknown channel, 6 channel of another tenant), and the
-- from / to balances after each committed transfer (NULL for hot accounts,
-- whose running value here is only the batch's delta).
--
-- Order of locks, the same in every caller, so concurrent committers (other
-- processes) never deadlock: (1) channel rows FOR SHARE, by id; (2) the
-- non-hot accounts FOR NO KEY UPDATE, by id; (3) the hot accounts, by id, only
-- at the very end, one UPDATE each with the batch's net delta, so the
-- treasury's row lock is held from its single update to COMMIT, not for the
-- whole batch. (The integrity trigger only reads; no foreign-key check
-- takes row locks on accounts.)
--
-- A refused transfer refuses only itself: the balances are computed here, in
-- queue order, against the locked rows, so a debit that would take a wallet
-- or escrow below zero is marked 3 and skipped (later transfers still see the
-- balance it did not take). The CHECK constraint on accounts stays the last
-- line: if it ever fired, the statement would fail as a whole and the caller
-- retries each transfer on its own.
CREATE FUNCTION cp_ledger_commit(
  p_ids text[],
  p_fps bytea,
  p_from int[],
  p_to int[],
  p_amounts bigint[],
  p_ctx int[],
  p_ctx_tenants text[],
  p_ctx_channels text[],
  p_ctx_epochs bigint[],
  p_ctx_kinds text[],
  p_ctx_rounds text[],
  p_accounts bigint[],
  p_checked int,
  p_nonhot int
) RETURNS TABLE (status smallint[], from_balance bigint[], to_balance bigint[])
LANGUAGE plpgsql AS $$
DECLARE
  n int := coalesce(cardinality(p_ids), 0);
  m int := coalesce(cardinality(p_ctx_tenants), 0);
  k int := coalesce(cardinality(p_accounts), 0);
  st smallint[] := array_fill(0::smallint, ARRAY[n]);
  cst smallint[] := array_fill(0::smallint, ARRAY[m]);
  fb bigint[] := array_fill(NULL::bigint, ARRAY[n]);
  tb bigint[] := array_fill(NULL::bigint, ARRAY[n]);
  bal bigint[] := array_fill(0::bigint, ARRAY[k]);
  orig bigint[] := array_fill(0::bigint, ARRAY[k]);
  r record;
  i int;
  f int;
  t int;
  amt bigint;
BEGIN
  IF n = 0 THEN
    RETURN QUERY SELECT st, fb, tb;
    RETURN;
  END IF;

  -- Idempotency: ids that are already committed.
  FOR r IN
    SELECT u.ord::int AS ord, x.fingerprint = substring(p_fps FROM (u.ord::int - 1) * 32 + 1 FOR 32) AS same
    FROM unnest(p_ids) WITH ORDINALITY AS u(id, ord)
    JOIN transfers x ON x.id = u.id
  LOOP
    st[r.ord] := CASE WHEN r.same THEN 1 ELSE 2 END;
  END LOOP;

  -- Fencing: lock the batch's channels (FOR SHARE waits for a concurrent
  -- acquire) and refuse the contexts whose epoch is not the current one. The
  -- trigger on transfers checks the same again for every inserted row.
  PERFORM 1 FROM channels c
    WHERE c.id IN (SELECT DISTINCT x FROM unnest(p_ctx_channels) AS x WHERE x IS NOT NULL)
    ORDER BY c.id FOR SHARE;
  FOR r IN
    SELECT u.ord::int AS ord, c.epoch, c.tenant_id, u.ep, u.tn
    FROM unnest(p_ctx_channels, p_ctx_epochs, p_ctx_tenants) WITH ORDINALITY AS u(ch, ep, tn, ord)
    LEFT JOIN channels c ON c.id = u.ch
    WHERE u.ch IS NOT NULL
  LOOP
    IF r.epoch IS NULL THEN
      cst[r.ord] := 5;
    ELSIF r.tenant_id <> r.tn THEN
      cst[r.ord] := 6;
    ELSIF r.epoch <> r.ep THEN
      cst[r.ord] := 4;
    END IF;
  END LOOP;

  -- Lock the non-hot accounts in id order and read their balances.
  IF p_nonhot > 0 THEN
    FOR r IN
      SELECT u.ord::int AS ord, a.balance
      FROM unnest(p_accounts[1:p_nonhot]) WITH ORDINALITY AS u(id, ord)
      JOIN accounts a ON a.id = u.id
      ORDER BY a.id
      FOR NO KEY UPDATE OF a
    LOOP
      bal[r.ord] := r.balance;
      orig[r.ord] := r.balance;
    END LOOP;
  END IF;

  -- Apply the batch in queue order against the in-transaction balances.
  FOR i IN 1..n LOOP
    IF st[i] = 0 THEN
      st[i] := cst[p_ctx[i]];
    END IF;
    CONTINUE WHEN st[i] <> 0;
    f := p_from[i];
    t := p_to[i];
    amt := p_amounts[i];
    IF f <= p_checked AND bal[f] < amt THEN
      st[i] := 3;
      CONTINUE;
    END IF;
    bal[f] := bal[f] - amt;
    bal[t] := bal[t] + amt;
    IF f <= p_nonhot THEN fb[i] := bal[f]; END IF;
    IF t <= p_nonhot THEN tb[i] := bal[t]; END IF;
  END LOOP;

  INSERT INTO transfers (id, tenant_id, channel_id, epoch, from_account, to_account, amount, kind, round_id, fingerprint)
  SELECT u.id, p_ctx_tenants[u.cx], p_ctx_channels[u.cx], p_ctx_epochs[u.cx], p_accounts[u.f], p_accounts[u.t], u.amt,
    p_ctx_kinds[u.cx], p_ctx_rounds[u.cx], substring(p_fps FROM (u.ord::int - 1) * 32 + 1 FOR 32)
  FROM unnest(p_ids, p_from, p_to, p_amounts, p_ctx) WITH ORDINALITY AS u(id, f, t, amt, cx, ord)
  WHERE st[u.ord] = 0;

  -- Non-hot accounts: already locked; one set-based update.
  IF p_nonhot > 0 THEN
    UPDATE accounts a SET balance = a.balance + (u.b - u.o)
    FROM unnest(p_accounts[1:p_nonhot], bal[1:p_nonhot], orig[1:p_nonhot]) AS u(id, b, o)
    WHERE a.id = u.id AND u.b <> u.o;
  END IF;

  -- Hot accounts: one update each with the batch's net delta, in id order, last.
  FOR r IN
    SELECT u.id, u.b AS delta
    FROM unnest(p_accounts[p_nonhot + 1:k], bal[p_nonhot + 1:k]) AS u(id, b)
    WHERE u.b <> 0
    ORDER BY u.id
  LOOP
    UPDATE accounts SET balance = balance + r.delta WHERE id = r.id;
  END LOOP;

  RETURN QUERY SELECT st, fb, tb;
END
$$;

-- Down Migration
DROP FUNCTION cp_ledger_commit(text[], bytea, int[], int[], bigint[], int[], text[], text[], bigint[], text[], text[], bigint[], int, int);
DROP TABLE transfers;
DROP FUNCTION cp_transfers_check();
DROP TABLE accounts;
