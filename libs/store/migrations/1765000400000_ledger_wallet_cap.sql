-- Up Migration

-- A grant may not take a wallet above p_wallet_max points (the ledger
-- passes MAX_POINTS, 10^15, the largest amount the protocol carries): the
-- check joins the non-negative one, in queue order against the locked
-- wallet rows, so concurrent grants to one wallet cannot overshoot it.
-- Status 7 refuses only that transfer (CP_ERR_LEDGER_BALANCE_LIMIT).
-- Only grants (kind 'grant') are capped: payouts, refunds and sale proceeds
-- hand back points already in the economy and are never refused. Wallets
-- already above the cap are left as they are (no constraint is added).
-- Otherwise the function is the one of 1764500000000_ledger.sql.
DROP FUNCTION cp_ledger_commit(text[], bytea, int[], int[], bigint[], int[], text[], text[], bigint[], text[], text[], bigint[], int, int);

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
  p_nonhot int,
  p_wallet_max bigint
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
  wal boolean[] := array_fill(false, ARRAY[k]);
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
      SELECT u.ord::int AS ord, a.balance, a.kind = 'wallet' AS w
      FROM unnest(p_accounts[1:p_nonhot]) WITH ORDINALITY AS u(id, ord)
      JOIN accounts a ON a.id = u.id
      ORDER BY a.id
      FOR NO KEY UPDATE OF a
    LOOP
      bal[r.ord] := r.balance;
      orig[r.ord] := r.balance;
      wal[r.ord] := r.w;
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
    IF t <= p_nonhot AND wal[t] AND p_ctx_kinds[p_ctx[i]] = 'grant' AND bal[t] > p_wallet_max - amt THEN
      st[i] := 7;
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
DROP FUNCTION cp_ledger_commit(text[], bytea, int[], int[], bigint[], int[], text[], text[], bigint[], text[], text[], bigint[], int, int, bigint);

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
