import type { Db, Queryable, QueryResult } from '@crowdplay/store';

/**
 * A Db that forwards to `inner`, except that cp_ledger_commit statements can
 * be held at a gate (to observe what happens before the COMMIT returns) or
 * made to fail (fault injection).
 */
export class GatedDb implements Db {
  readonly kind: 'postgres' | 'pglite';
  /** cp_ledger_commit statements sent so far (including failed ones). */
  commits = 0;
  private gate: Promise<void> | null = null;
  private openGate: (() => void) | null = null;
  private held: Array<() => void> = [];
  private heldCount = 0;
  /** cp_ledger_commit statements that returned from the database (committed). */
  returned = 0;
  /** Errors to throw instead of running the next cp_ledger_commit statements, in order. */
  readonly failNext: Error[] = [];
  /** Errors to throw AFTER the next cp_ledger_commit statements ran and committed (a lost reply). */
  readonly failAfterNext: Error[] = [];

  constructor(private readonly inner: Db) {
    this.kind = inner.kind;
  }

  /** Holds every cp_ledger_commit statement until `open()`. */
  hold(): void {
    this.gate = new Promise((resolve) => (this.openGate = resolve));
  }

  /** Releases held statements (they then run on the real database). */
  open(): void {
    this.openGate?.();
    this.gate = null;
    this.openGate = null;
  }

  /** Resolves once `n` cp_ledger_commit statements are waiting at the gate. */
  async waitHeld(n: number): Promise<void> {
    while (this.heldCount < n) await new Promise<void>((resolve) => this.held.push(resolve));
  }

  async query<R = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<QueryResult<R>> {
    if (sql.includes('cp_ledger_commit(')) {
      this.commits++;
      const err = this.failNext.shift();
      if (err) throw err;
      if (this.gate) {
        this.heldCount++;
        const waiters = this.held;
        this.held = [];
        for (const w of waiters) w();
        await this.gate;
        this.heldCount--;
      }
      const r = await this.inner.query<R>(sql, params);
      this.returned++;
      const after = this.failAfterNext.shift();
      if (after) throw after;
      return r;
    }
    return this.inner.query<R>(sql, params);
  }

  tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T> {
    return this.inner.tx(fn);
  }

  async close(): Promise<void> {
    // The store owns the inner Db.
  }
}

/** A pg-like error with a SQLSTATE. */
export function sqlError(code: string, message = `injected ${code}`): Error {
  return Object.assign(new Error(message), { code });
}

/**
 * Every non-zero balance and the number of transfers: compare before/after to
 * prove nothing changed. (Accounts a refused transfer named may have been
 * created, with balance 0, before its commit: they are not listed.)
 */
export async function snapshot(db: Queryable): Promise<{ balances: Record<string, number>; transfers: number }> {
  const { rows } = await db.query<{ tenant_id: string; kind: string; owner: string; balance: string | number }>(
    'SELECT tenant_id, kind, owner, balance FROM accounts WHERE balance <> 0 ORDER BY id',
  );
  const balances: Record<string, number> = {};
  for (const r of rows) balances[`${r.tenant_id}/${r.kind}/${r.owner}`] = Number(r.balance);
  const t = await db.query<{ n: string | number }>('SELECT count(*) AS n FROM transfers');
  return { balances, transfers: Number(t.rows[0]!.n) };
}
