/**
 * The board refresh scheduler: which chats' boards to render and send now.
 *
 * The seed's open problem: a per-chat interval counts chats while the cost
 * scales with cards (4 cards ≈ 19 ms, 40 ≈ 171 ms there). Here one interval
 * is derived from a global budget, every chat's board counted at its own
 * cost:
 *
 *   intervalMs = max( minIntervalMs,
 *                     1000 × Σ_dirty renderMs(cards_i) ÷ BOARD_RENDER_BUDGET_MS_PER_S,
 *                     1000 × N_dirty ÷ BOARD_SEND_BUDGET_PER_S )
 *
 * where the sum runs over the chats whose board changed since it was last
 * sent (a chat with no change is never re-rendered and costs nothing) and
 * renderMs is the measured cost model of libs/board (`renderCost`). So one
 * 40-card board weighs as much as the ~8 four-card boards it costs, and
 * rendering every dirty board once per interval stays within the render
 * budget while sending them stays within the send budget. minIntervalMs is
 * Telegram's per-group pacing (20/min → 3,000 ms). A chat is due when it is
 * dirty and its last send is at least one interval old; due chats go oldest
 * change first. The interval chosen is exported (crowdplay_board_interval_ms).
 */

/** Options of {@link RefreshScheduler}. */
export interface RefreshSchedulerOptions {
  /** BOARD_RENDER_BUDGET_MS_PER_S: render CPU ms per second across all chats. */
  renderBudgetMsPerS: number;
  /** BOARD_SEND_BUDGET_PER_S: board sends per second across all chats. */
  sendBudgetPerS: number;
  /** Shortest interval of one chat, ms (Telegram's 20/min per group: 3,000). */
  minIntervalMs: number;
  /** Render cost of a board of `cards` cards, ms (libs/board `renderCost(cards).ms`). */
  costMs: (cards: number) => number;
}

interface ChatEntry {
  cards: number;
  /** Version of the newest state seen, and of the one last sent (rendered and queued). */
  version: number;
  sentVersion: number;
  dirtySinceMs: number;
  lastSentMs: number;
}

/** The scheduler's state: one entry per chat with a board. Pure: the caller passes the clock. */
export class RefreshScheduler {
  private readonly chats = new Map<number, ChatEntry>();
  /** The interval chosen at the last `due()`, ms. */
  intervalMs: number;

  constructor(private readonly o: RefreshSchedulerOptions) {
    for (const [k, v] of Object.entries({ renderBudgetMsPerS: o.renderBudgetMsPerS, sendBudgetPerS: o.sendBudgetPerS })) {
      if (!(v > 0)) throw new RangeError(`${k} must be > 0`);
    }
    this.intervalMs = o.minIntervalMs;
  }

  /** Chats tracked. */
  get size(): number {
    return this.chats.size;
  }

  /** A chat's state changed to `version` with `cards` cards (ignored when not newer). */
  changed(chatId: number, version: number, cards: number, nowMs: number): void {
    const e = this.chats.get(chatId);
    if (!e) {
      this.chats.set(chatId, { cards, version, sentVersion: -1, dirtySinceMs: nowMs, lastSentMs: -Infinity });
      return;
    }
    if (version <= e.version) return;
    if (e.version === e.sentVersion) e.dirtySinceMs = nowMs;
    e.version = version;
    e.cards = cards;
  }

  /** The chat's board at `version` was rendered and queued. */
  sent(chatId: number, version: number, nowMs: number): void {
    const e = this.chats.get(chatId);
    if (!e) return;
    e.sentVersion = Math.max(e.sentVersion, version);
    e.lastSentMs = nowMs;
  }

  /** The chat's send did not happen (render refused): it is dirty again. */
  failed(chatId: number): void {
    const e = this.chats.get(chatId);
    if (e) e.sentVersion = -1;
  }

  /** Forgets a chat (stopped, bot removed). */
  remove(chatId: number): void {
    this.chats.delete(chatId);
  }

  /**
   * The chats due now, oldest change first, and the interval the formula
   * chose (also kept in `intervalMs`).
   */
  due(nowMs: number): Array<{ chatId: number; version: number; cards: number }> {
    let costMs = 0;
    let dirty = 0;
    for (const e of this.chats.values()) {
      if (e.version === e.sentVersion) continue;
      dirty++;
      costMs += this.o.costMs(e.cards);
    }
    const raw = Math.max(this.o.minIntervalMs, (1000 * costMs) / this.o.renderBudgetMsPerS, (1000 * dirty) / this.o.sendBudgetPerS);
    // Whole ms, rounded up (after dropping float noise below a µs), so the budget is never overspent.
    this.intervalMs = Math.ceil(Math.round(raw * 1000) / 1000);
    const out: Array<{ chatId: number; version: number; cards: number; since: number }> = [];
    for (const [chatId, e] of this.chats) {
      if (e.version !== e.sentVersion && nowMs - e.lastSentMs >= this.intervalMs)
        out.push({ chatId, version: e.version, cards: e.cards, since: e.dirtySinceMs });
    }
    out.sort((a, b) => a.since - b.since);
    return out.map(({ chatId, version, cards }) => ({ chatId, version, cards }));
  }
}
