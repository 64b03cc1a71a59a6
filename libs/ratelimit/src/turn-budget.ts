/**
 * A time budget per event-loop turn: how long one kind of work (publishing
 * viewer updates, taking WebSocket upgrades, ticking channels) may hold the
 * loop before the rest of it waits for a later turn.
 *
 * Why: Node runs every timer that is due, and every I/O event one poll
 * returned, in one pass. When thousands of them fall due together (every chat
 * rolling over at once, every player opening the app at the rollover), that
 * pass is one long task and every socket waits for it (over 100 ms at a
 * 1,000-chat rollover: docs/benchmarks.md). With a budget, the work past it
 * goes to a later turn (setImmediate), and the I/O polled in between (acks,
 * other players' frames) is not held up.
 *
 * A "turn" here ends when the loop reaches its check phase (setImmediate
 * callbacks): the clock starts at the turn's first `spent()` and is cleared by
 * an immediate scheduled then. Work deferred with setImmediate after that
 * first call therefore runs after the clear, on a fresh budget. The clock is
 * wall time since the turn's first ask: other callbacks that run in between
 * count too (what matters is how long the loop has been busy).
 */

/** A time budget per event-loop turn. Not shared between kinds of work: one instance each. */
export class TurnBudget {
  private startMs: number | null = null;
  private reset: NodeJS.Immediate | null = null;

  /**
   * @param budgetMs ms of one turn this work may take; 0 = no limit (`spent()` is always false)
   * @param now clock, ms (performance.now by default; tests pass their own)
   * @throws RangeError when budgetMs is not a finite number ≥ 0
   */
  constructor(
    readonly budgetMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    if (!Number.isFinite(budgetMs) || budgetMs < 0) throw new RangeError(`budgetMs must be a finite number ≥ 0, got ${budgetMs}`);
  }

  /**
   * Whether this turn has spent the budget, asked before each piece of work.
   * The first call in a turn starts the turn's clock and answers false, so
   * every turn does at least one piece.
   */
  spent(): boolean {
    if (this.budgetMs === 0) return false;
    const now = this.now();
    if (this.startMs === null) {
      this.startMs = now;
      this.reset ??= setImmediate(() => {
        this.reset = null;
        this.startMs = null;
      });
      return false;
    }
    return now - this.startMs >= this.budgetMs;
  }

  /** Drops the pending reset (shutdown: nothing is left scheduled). */
  close(): void {
    if (this.reset) clearImmediate(this.reset);
    this.reset = null;
    this.startMs = null;
  }
}
