/**
 * The board refresh scheduler: which chats' boards to render and send now.
 *
 * The seed's open problem: a per-chat interval counts chats while the cost
 * scales with cards (4 cards ≈ 19 ms, 40 ≈ 171 ms there). Here boards are
 * handed out from two global budgets, each board charged its own cost:
 * BOARD_SEND_BUDGET_PER_S sends and BOARD_RENDER_BUDGET_MS_PER_S render
 * milliseconds (renderMs = the measured cost model of libs/board,
 * `renderCost(cards).ms`), both refilled continuously and holding at most one
 * second's worth. At every call the dirty chats (state changed since their
 * board was last queued; an unchanged chat is never re-rendered and costs
 * nothing) go oldest change first while both budgets last, and no chat more
 * often than minIntervalMs (Telegram's 20/min per group: 3,000 ms). So one
 * 40-card board spends as much render budget as the ~8 four-card boards it
 * costs, and boards leave at an even pace instead of in bursts.
 *
 * The interval exported (crowdplay_board_interval_ms) is the time one pass
 * over the dirty chats takes at that pace — how stale a board may get:
 *
 *   intervalMs = max( minIntervalMs,
 *                     1000 × Σ_dirty renderMs(cards_i) ÷ BOARD_RENDER_BUDGET_MS_PER_S,
 *                     1000 × N_dirty ÷ BOARD_SEND_BUDGET_PER_S )
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
  /** What is left of each budget (refilled by the clock, at most one second's worth). */
  private sendTokens: number;
  private renderTokensMs: number;
  private refilledAtMs: number | null = null;

  constructor(private readonly o: RefreshSchedulerOptions) {
    for (const [k, v] of Object.entries({ renderBudgetMsPerS: o.renderBudgetMsPerS, sendBudgetPerS: o.sendBudgetPerS })) {
      if (!(v > 0)) throw new RangeError(`${k} must be > 0`);
    }
    this.intervalMs = o.minIntervalMs;
    this.sendTokens = o.sendBudgetPerS;
    this.renderTokensMs = o.renderBudgetMsPerS;
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
   * The chats to render and queue now, oldest change first, within what is
   * left of both budgets (each one taken is charged to them); updates
   * `intervalMs`.
   */
  due(nowMs: number): Array<{ chatId: number; version: number; cards: number }> {
    if (this.refilledAtMs !== null) {
      const s = Math.max(0, nowMs - this.refilledAtMs) / 1000;
      this.sendTokens = Math.min(this.o.sendBudgetPerS, this.sendTokens + s * this.o.sendBudgetPerS);
      this.renderTokensMs = Math.min(this.o.renderBudgetMsPerS, this.renderTokensMs + s * this.o.renderBudgetMsPerS);
    }
    this.refilledAtMs = nowMs;
    let costMs = 0;
    let dirty = 0;
    const ready: Array<{ chatId: number; e: ChatEntry; cost: number }> = [];
    for (const [chatId, e] of this.chats) {
      if (e.version === e.sentVersion) continue;
      const cost = this.o.costMs(e.cards);
      dirty++;
      costMs += cost;
      if (nowMs - e.lastSentMs >= this.o.minIntervalMs) ready.push({ chatId, e, cost });
    }
    const raw = Math.max(this.o.minIntervalMs, (1000 * costMs) / this.o.renderBudgetMsPerS, (1000 * dirty) / this.o.sendBudgetPerS);
    // Whole ms, rounded up (after dropping float noise below a µs).
    this.intervalMs = Math.ceil(Math.round(raw * 1000) / 1000);
    ready.sort((a, b) => a.e.dirtySinceMs - b.e.dirtySinceMs);
    const out: Array<{ chatId: number; version: number; cards: number }> = [];
    for (const r of ready) {
      // A board costlier than a whole second's budget goes when the budget is full.
      const charge = Math.min(r.cost, this.o.renderBudgetMsPerS);
      if (this.sendTokens < 1 || this.renderTokensMs < charge) break;
      this.sendTokens -= 1;
      this.renderTokensMs -= charge;
      out.push({ chatId: r.chatId, version: r.e.version, cards: r.e.cards });
    }
    return out;
  }
}
