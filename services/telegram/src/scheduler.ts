/**
 * The board refresh scheduler: which chats' boards to render and send now.
 *
 * A per-chat interval would count chats while the cost scales with cards
 * (a 40-card board costs many times a 4-card one). Here boards are
 * handed out from two global budgets, each board charged its own cost:
 * BOARD_SEND_BUDGET_PER_S sends and BOARD_RENDER_BUDGET_MS_PER_S render
 * milliseconds (renderMs = the measured cost model of libs/board,
 * `renderCost(cards).ms`), both refilled continuously and holding at most one
 * second's worth. At every call the dirty chats (state changed since their
 * board was last queued; an unchanged chat is never re-rendered and costs
 * nothing) go while both budgets last, each chat no sooner than the send
 * bucket would grant it (`pacing`, the same GCRA arithmetic as libs/sendq's
 * gcra.ts, every chat paced as a group: boards are groups'): its chat
 * interval (TELEGRAM_CHAT_RATE_PER_S: 1 s) after its last board, and within
 * its group's GCRA (TELEGRAM_GROUP_RATE_PER_MIN with a burst of
 * TELEGRAM_GROUP_BURST: at the defaults, burst 1, every 3,000 ms; with a
 * burst of 2 a chat that was quiet may go 1 s after its last board, one
 * that keeps going every 3,157.895 ms, never more than 20 in a minute;
 * docs/decisions/0036-group-burst.md). They go quietest first: the chat
 * whose last change is the oldest, since a board drawn while its chat
 * still changes is stale again at once and is sent twice, while a
 * quiet chat's board is likely its last. Only state changes count as the
 * chat's last change: an avatar that arrives makes the board dirty but says
 * nothing of whether its players are still playing (`changed(…, cosmetic)`).
 * A chat that keeps changing is not starved: it ranks as if its last change
 * were one interval after it became dirty (`min(lastChange, dirtySince +
 * intervalMs)`), so it goes at most about one interval later than it would
 * have oldest-dirty-first. The order holds downstream: each board is handed
 * on with its rank (`quietMs`), and the render queue draws the lowest rank
 * first, so a chat its pacing held back (a change just after its board went)
 * does not wait again behind the younger boards of the look-ahead. So one
 * 40-card board spends as much render budget as the ~8 four-card boards it
 * costs, and boards leave at an even pace instead of in bursts.
 *
 * Downstream feedback: a board taken here is only handed on (render queue,
 * then the send queue's board lane); when the renderers or the sender fall
 * behind the budgets (a busy event loop, Telegram answering slowly), those
 * queues grow and a board taken now waits there, stale, where a newer
 * version of its chat can no longer replace it for free. So the caller
 * reports that backlog (`setBacklog`: boards handed on and not sent yet, and
 * of them those rendered and in the board lane) and at most
 * BOARD_MAX_BACKLOG − (boards in the lane) are taken; the rest stay dirty
 * here, where newer states merge into one render. A board waiting to render
 * is not stale (its render draws the newest state), so that wait is not
 * capped. From successive backlog
 * readings the scheduler estimates the rate boards actually leave
 * (drainPerS: backlog before + handed on since − backlog now, over the time
 * between readings, smoothed over ~5 s).
 *
 * Delivery: a board handed on is not yet a board shown. The caller reports
 * each board's end: `delivered` (Telegram shows it), or `undelivered` (the
 * send failed, was dropped or ran out of retries, or the render threw or
 * was refused): the chat is then dirty again and goes at the next pass, as
 * any change would, so a send that fails is never a dead end. With
 * `confirmTimeoutMs`, a board neither delivered nor undelivered by then (an
 * end not heard) counts as undelivered. So after an outage every chat whose
 * newest board did not land is handed on again, at most one interval after
 * Telegram answers.
 *
 * Late binding: a board handed on may be drawn at a newer version than it
 * was taken with (the render pool asks the gateway for the chat's newest
 * state as the render starts, ChatBoards.latest); once that board is on the
 * send queue, `upgraded` marks the chat clean up to it without a budget
 * token or a hand-on.
 *
 * The interval exported (crowdplay_board_interval_ms) is the time one pass
 * over the dirty chats and the backlog takes — how stale a board may get:
 *
 *   rate       = BOARD_SEND_BUDGET_PER_S while the backlog is empty,
 *                else clamp(drainPerS, 0.5, BOARD_SEND_BUDGET_PER_S)
 *   intervalMs = max( spacing + 1000 × backlog ÷ rate,
 *                     1000 × Σ_dirty renderMs(cards_i) ÷ BOARD_RENDER_BUDGET_MS_PER_S,
 *                     1000 × (N_dirty + backlog) ÷ rate )
 *   spacing    = the longest, over the chats, of max(chat interval, what the group's GCRA then allows)
 *                after the chat's next hand-on (at the earliest it may go)
 *
 * The first term is a chat that changes just after its board was handed on:
 * it may go again after max(chat interval 1 s, what its group's GCRA allows:
 * 3,000 ms for every chat with burst 1, the default; with a larger burst
 * nothing more for a group with its burst left, 3,157.895 ms for one that
 * keeps going at burst 2), and its next board then waits behind the backlog.
 *
 * The send budget is a floor, not a ceiling: the bucket (TELEGRAM_BOT_RATE_PER_S)
 * lets boards use every slot the transactional lane leaves idle (libs/sendq,
 * "Lanes"), and a board lane that runs dry wastes them. So with `aheadMs`
 * (BOARD_SEND_AHEAD_MS) boards beyond the send budget are handed on while the
 * backlog is below what the bot rate sends in `aheadMs`
 * (ceil(botRatePerS × aheadMs / 1000) − backlog − the boards the budget
 * granted this pass), each still charged its render cost (`ahead`, counted in
 * crowdplay_board_ahead_total). The backlog stays about one `aheadMs` deep, so
 * a board waits at most that long behind the others, and the drain rate the
 * interval assumes may reach the bot rate.
 *
 * A board that replaces one still waiting in the send queue (reported by
 * `queuedForSend`, and neither delivered nor undelivered since: the queue
 * supersedes it, and the new one takes its turn) adds no send, so it takes no send token, only its render
 * charge; those go first. So when a backlog of boards went stale (the chats
 * changed while their boards waited, as all do at the end of a rollover's
 * guessing), every one is redrawn at the render budget's pace and each chat
 * is sent once, not its stale board and then its fresh one.
 *
 * The budgets are the bot's, not a process's: with REDIS_URL every gateway's
 * scheduler takes its tokens from one Redis bucket (`RedisBoardBudget`,
 * budget-redis.ts; `dueFrom`), so N gateways together stay within them. The
 * interval is still each process's view (its own dirty chats).
 */
import { chatIntervalsOf, gcraGrant, gcraWaitUs, type ChatIntervals, type ChatLimits } from '@crowdplay/sendq';

/**
 * Where the scheduler's tokens come from: one send token and `charge` render
 * ms per board, granted in order while both last (a prefix of the list).
 */
export interface BoardBudget {
  readonly kind: 'memory' | 'redis';
  /**
   * @param chargesMs each board's render charge, ms (≤ BOARD_RENDER_BUDGET_MS_PER_S), in priority order
   * @param nowMs the caller's clock (the in-process budget; the Redis one reads Redis TIME unless given a test clock)
   * @param ahead once the send tokens run out, boards are still granted on their render charge alone while fewer
   *   than this many have been granted in all (the scheduler's look-ahead, BOARD_SEND_AHEAD_MS). @defaultValue 0
   * @param free the first this many boards replace one still queued (no send): render charge only. @defaultValue 0
   * @returns how many of the boards, from the first, were granted (their tokens are taken), and how many of
   *   those were granted beyond the send tokens
   */
  take(chargesMs: readonly number[], nowMs: number, ahead?: number, free?: number): Promise<BudgetGrant>;
}

/** Answer of {@link BoardBudget.take}. */
export interface BudgetGrant {
  /** Boards granted, from the first. */
  granted: number;
  /** Of those, the ones granted beyond the send tokens (on their render charge alone). */
  ahead: number;
}

/** The in-process budget: both buckets refilled continuously, holding at most one second's worth. */
export class MemoryBoardBudget implements BoardBudget {
  readonly kind = 'memory' as const;
  private sendTokens: number;
  private renderTokensMs: number;
  private refilledAtMs: number | null = null;

  /** @throws RangeError unless both budgets are > 0 */
  constructor(
    private readonly sendBudgetPerS: number,
    private readonly renderBudgetMsPerS: number,
  ) {
    for (const [k, v] of Object.entries({ renderBudgetMsPerS, sendBudgetPerS })) {
      if (!(v > 0)) throw new RangeError(`${k} must be > 0`);
    }
    this.sendTokens = sendBudgetPerS;
    this.renderTokensMs = renderBudgetMsPerS;
  }

  /** {@link BoardBudget.take}, synchronously. */
  takeNow(chargesMs: readonly number[], nowMs: number, ahead = 0, free = 0): BudgetGrant {
    if (this.refilledAtMs !== null) {
      const s = Math.max(0, nowMs - this.refilledAtMs) / 1000;
      this.sendTokens = Math.min(this.sendBudgetPerS, this.sendTokens + s * this.sendBudgetPerS);
      this.renderTokensMs = Math.min(this.renderBudgetMsPerS, this.renderTokensMs + s * this.renderBudgetMsPerS);
    }
    this.refilledAtMs = this.refilledAtMs === null ? nowMs : Math.max(this.refilledAtMs, nowMs);
    let n = 0;
    let a = 0;
    for (const charge of chargesMs) {
      if (this.renderTokensMs < charge) break;
      if (n < free) {
        // replaces a board still queued: no send
      } else if (this.sendTokens >= 1) this.sendTokens -= 1;
      else if (n < ahead) a++;
      else break;
      this.renderTokensMs -= charge;
      n++;
    }
    return { granted: n, ahead: a };
  }

  take(chargesMs: readonly number[], nowMs: number, ahead = 0, free = 0): Promise<BudgetGrant> {
    return Promise.resolve(this.takeNow(chargesMs, nowMs, ahead, free));
  }
}

/** A board the scheduler hands on: its chat, the version due, its cards, and its rank (quietest first). */
export interface DueBoard {
  chatId: number;
  version: number;
  cards: number;
  /** The chat's rank, ms since epoch: its last change, or one interval after it became dirty when that is sooner. Lower goes first. */
  quietMs: number;
}

/** Options of {@link RefreshScheduler}. */
export interface RefreshSchedulerOptions {
  /** BOARD_RENDER_BUDGET_MS_PER_S: render CPU ms per second across all chats. */
  renderBudgetMsPerS: number;
  /** BOARD_SEND_BUDGET_PER_S: board sends per second across all chats. */
  sendBudgetPerS: number;
  /**
   * The send bucket's per-chat limits each chat's boards are paced by (TELEGRAM_GROUP_RATE_PER_MIN,
   * TELEGRAM_GROUP_BURST, TELEGRAM_CHAT_RATE_PER_S; libs/sendq `SendLimits`), every chat as a group.
   */
  pacing: ChatLimits;
  /** Render cost of a board of `cards` cards and `rounds` round strips, ms (libs/board `renderCost(cards, rounds).ms`). */
  costMs: (cards: number, rounds: number) => number;
  /**
   * BOARD_MAX_BACKLOG: boards handed on and not sent yet (see `setBacklog`) beyond which no board is taken.
   * 0 = no limit. @defaultValue 0
   */
  maxBacklog?: number;
  /**
   * BOARD_SEND_AHEAD_MS: beyond the send budget, boards are handed on while the backlog holds less than the bot
   * rate sends in this long (each still charged its render cost). 0 = the send budget is a ceiling. @defaultValue 0
   */
  aheadMs?: number;
  /** TELEGRAM_BOT_RATE_PER_S: what the look-ahead (`aheadMs`) is measured in. Required when `aheadMs` > 0. */
  botRatePerS?: number;
  /**
   * A board handed on and neither `delivered` nor `undelivered` this long after, ms, counts as undelivered
   * (its chat is due again). 0 = never: a board handed on counts as shown until told otherwise. @defaultValue 0
   */
  confirmTimeoutMs?: number;
}

/** Slowest drain rate the interval assumes, boards/s (a stalled sender would otherwise make it infinite). */
const MIN_DRAIN_PER_S = 0.5;
/** Time constant of the drain-rate average, ms. */
const DRAIN_TAU_MS = 5_000;

interface ChatEntry {
  cards: number;
  /** Round strips on the board (libs/board: they add to its area, so to its render cost). */
  rounds: number;
  /** Version of the newest state seen, of the one last sent (rendered and queued), and of the newest one delivered. */
  version: number;
  sentVersion: number;
  deliveredVersion: number;
  /** Newest version reported on the send queue (`queuedForSend`) whose end was not heard yet; -1: none. */
  queuedVersion: number;
  dirtySinceMs: number;
  /** When the newest version was seen (the chat's last change). */
  changedMs: number;
  lastSentMs: number;
  /** The chat's theoretical arrival times, µs, for its chat interval and its group's GCRA (0: never handed on). */
  chatTatUs: number;
  groupTatUs: number;
}

/** A chat's GCRA state: its theoretical arrival times, µs. */
type Tats = Pick<ChatEntry, 'chatTatUs' | 'groupTatUs'>;

/** True while a board of the chat waits in the send queue (reported, its end not heard): a newer one replaces it. */
function replacesQueued(e: ChatEntry): boolean {
  return e.queuedVersion > e.deliveredVersion;
}

/** The scheduler's state: one entry per chat with a board. Pure: the caller passes the clock. */
export class RefreshScheduler {
  private readonly chats = new Map<number, ChatEntry>();
  /** The interval chosen at the last `due()`, ms. */
  intervalMs: number;
  /** Boards that were ready at the last `due` / `dueFrom` but held back by the budgets (when they bite). */
  heldBack = 0;
  /** Boards that were ready at the last `due` / `dueFrom` but held back because the backlog was at BOARD_MAX_BACKLOG. */
  heldByBacklog = 0;
  /** Boards handed on at the last `due` / `dueFrom` beyond the send budget, to keep BOARD_SEND_AHEAD_MS of work queued. */
  ahead = 0;
  /** Boards handed on and not sent yet, as last reported (`setBacklog`). */
  backlog = 0;
  /** Of `backlog`, the boards rendered and in the send queue's board lane (what BOARD_MAX_BACKLOG caps), as last reported. */
  sending = 0;
  /** Estimated rate boards leave the backlog, boards/s (starts at the send budget). */
  drainPerS: number;
  /** This process's budget (`due`); `dueFrom` takes another (the bot's, on Redis). */
  private readonly local: MemoryBoardBudget;
  private handedSinceReading = 0;
  private lastReadingMs: number | null = null;
  /** The chat's intervals and the group's burst tolerance, µs (libs/sendq `chatIntervalsOf`). */
  private readonly iv: ChatIntervals;

  /** @throws RangeError on a bad budget, backlog, timeout, look-ahead or pacing (nothing is built) */
  constructor(private readonly o: RefreshSchedulerOptions) {
    for (const [k, v] of Object.entries({ renderBudgetMsPerS: o.renderBudgetMsPerS, sendBudgetPerS: o.sendBudgetPerS })) {
      if (!(v > 0)) throw new RangeError(`${k} must be > 0`);
    }
    if (o.maxBacklog !== undefined && !(Number.isInteger(o.maxBacklog) && o.maxBacklog >= 0))
      throw new RangeError(`maxBacklog must be an integer ≥ 0, got ${o.maxBacklog}`);
    if (o.confirmTimeoutMs !== undefined && !(Number.isFinite(o.confirmTimeoutMs) && o.confirmTimeoutMs >= 0))
      throw new RangeError(`confirmTimeoutMs must be a finite number ≥ 0, got ${o.confirmTimeoutMs}`);
    if (o.aheadMs !== undefined && !(Number.isFinite(o.aheadMs) && o.aheadMs >= 0))
      throw new RangeError(`aheadMs must be a finite number ≥ 0, got ${o.aheadMs}`);
    if ((o.aheadMs ?? 0) > 0 && !(o.botRatePerS !== undefined && o.botRatePerS > 0))
      throw new RangeError(`botRatePerS must be > 0 when aheadMs > 0, got ${o.botRatePerS}`);
    const p = o.pacing;
    if (!(Number.isInteger(p.groupRatePerMin) && p.groupRatePerMin >= 1 && Number.isInteger(p.chatRatePerS) && p.chatRatePerS >= 1))
      throw new RangeError(`pacing rates must be integers ≥ 1, got ${JSON.stringify(p)}`);
    const burst = p.groupBurst ?? 1;
    if (!(Number.isInteger(burst) && burst >= 1 && burst <= p.groupRatePerMin))
      throw new RangeError(`pacing.groupBurst must be an integer from 1 to pacing.groupRatePerMin, got ${burst}`);
    this.iv = chatIntervalsOf(p);
    this.intervalMs = Math.ceil(this.spacingUs({ chatTatUs: 0, groupTatUs: 0 }, 0) / 1000);
    this.drainPerS = o.sendBudgetPerS;
    this.local = new MemoryBoardBudget(o.sendBudgetPerS, o.renderBudgetMsPerS);
  }

  /**
   * Reports the downstream backlog: boards handed on and not sent yet (waiting to render or rendering: the render
   * queue's `backlog()`, plus the send queue's board lane), at `nowMs`, and of them `sending`, those rendered and in
   * the board lane. Updates the drain-rate estimate from the previous reading.
   * @param sending boards in the board lane (queued, booked or in a call) @defaultValue boards
   * @throws RangeError for a negative or non-integer count (nothing changes)
   */
  setBacklog(boards: number, nowMs: number, sending = boards): void {
    if (!Number.isInteger(boards) || boards < 0) throw new RangeError(`backlog must be an integer ≥ 0, got ${boards}`);
    if (!Number.isInteger(sending) || sending < 0) throw new RangeError(`sending must be an integer ≥ 0, got ${sending}`);
    if (this.lastReadingMs !== null && nowMs > this.lastReadingMs && (this.backlog > 0 || boards > 0)) {
      const dt = nowMs - this.lastReadingMs;
      const left = Math.max(0, this.backlog + this.handedSinceReading - boards);
      const sample = (1000 * left) / dt;
      const a = 1 - Math.exp(-dt / DRAIN_TAU_MS);
      this.drainPerS += a * (sample - this.drainPerS);
    }
    this.backlog = boards;
    this.sending = sending;
    this.handedSinceReading = 0;
    this.lastReadingMs = nowMs;
  }

  /** Chats tracked. */
  get size(): number {
    return this.chats.size;
  }

  /**
   * A chat's board changed to `version` with `cards` cards and `rounds` round strips (ignored when not newer).
   * @param cosmetic the board changed but the chat's state did not (an avatar arrived): the chat is dirty, but its
   *   last change, which ranks it quietest first, stays its last state change. A picture arriving says nothing of
   *   whether the players are still playing, and ranking the chat as busy would hold back the board that shows
   *   their last move. @defaultValue false
   */
  changed(chatId: number, version: number, cards: number, nowMs: number, rounds = 0, cosmetic = false): void {
    const e = this.chats.get(chatId);
    if (!e) {
      this.chats.set(chatId, {
        cards,
        rounds,
        version,
        sentVersion: -1,
        deliveredVersion: -1,
        queuedVersion: -1,
        dirtySinceMs: nowMs,
        changedMs: nowMs,
        lastSentMs: -Infinity,
        chatTatUs: 0,
        groupTatUs: 0,
      });
      return;
    }
    if (version <= e.version) return;
    if (e.version <= e.sentVersion) e.dirtySinceMs = nowMs;
    if (!cosmetic) e.changedMs = nowMs;
    e.version = version;
    e.cards = cards;
    e.rounds = rounds;
  }

  /** The chat's board at `version` was rendered and queued. */
  sent(chatId: number, version: number, nowMs: number): void {
    const e = this.chats.get(chatId);
    if (!e) return;
    // A board replacing one still waiting in the send queue adds nothing to the backlog.
    if (!replacesQueued(e)) this.handedSinceReading++;
    e.sentVersion = Math.max(e.sentVersion, version);
    e.lastSentMs = nowMs;
    // The bucket's grant, as it will count this board (its chat's and its group's keys advance from now).
    const nowUs = Math.round(nowMs * 1000);
    e.chatTatUs = gcraGrant(e.chatTatUs, nowUs, this.iv.chatUs);
    e.groupTatUs = gcraGrant(e.groupTatUs, nowUs, this.iv.groupUs);
  }

  /**
   * A render of the chat's board drew `version` and handed it to the send queue (the render queue's late binding,
   * ChatBoards.latest / rendered): the chat is clean up to `version`. Nothing when not newer than the version
   * handed on. Not a hand-on (it took no budget and adds nothing to the backlog), so the drain estimate does not
   * count it.
   */
  upgraded(chatId: number, version: number, nowMs: number): void {
    const e = this.chats.get(chatId);
    if (!e || version <= e.sentVersion) return;
    e.sentVersion = version;
    e.lastSentMs = nowMs;
    // The board handed on goes out from now: its grant moves here, as the bucket moves a booked board
    // (`max(tat, now + T)` is the grant at now when the hand-on was the chat's last grant; libs/sendq gcra.ts).
    const nowUs = Math.round(nowMs * 1000);
    e.chatTatUs = Math.max(e.chatTatUs, nowUs + this.iv.chatUs);
    e.groupTatUs = Math.max(e.groupTatUs, nowUs + this.iv.groupUs);
  }

  /** The chat's send did not happen (render refused): it is dirty again. */
  failed(chatId: number): void {
    const e = this.chats.get(chatId);
    if (e) e.sentVersion = e.deliveredVersion;
  }

  /**
   * The chat's board at `version` is on the send queue and its end will be reported (`delivered` or
   * `undelivered`): until then a newer board of the chat replaces it there, adding no send.
   */
  queuedForSend(chatId: number, version: number): void {
    const e = this.chats.get(chatId);
    if (e && version > e.queuedVersion) e.queuedVersion = version;
  }

  /** The chat's board at `version` is shown (Telegram answered the send, or already showed it). */
  delivered(chatId: number, version: number): void {
    const e = this.chats.get(chatId);
    if (e && version > e.deliveredVersion) e.deliveredVersion = version;
  }

  /**
   * The chat's board at `version` will not be shown (the send failed, was dropped or ran out of retries):
   * unless a newer version was handed on since (its own end decides), or one at least as new was delivered,
   * the chat is dirty again and goes at the next pass (once its pacing allows, counted from its last hand-on).
   */
  undelivered(chatId: number, version: number): void {
    const e = this.chats.get(chatId);
    if (e && version >= e.queuedVersion) e.queuedVersion = -1;
    if (!e || version < e.sentVersion || version <= e.deliveredVersion) return;
    e.sentVersion = e.deliveredVersion;
  }

  /** Forgets a chat (stopped, bot removed). */
  remove(chatId: number): void {
    this.chats.delete(chatId);
  }

  /**
   * The chats to render and queue now, quietest first (see the module's header), within what is
   * left of both budgets (each one taken is charged to them); updates
   * `intervalMs`.
   */
  due(nowMs: number): DueBoard[] {
    const ready = this.roomFor(this.ready(nowMs));
    const free = ready.filter((r) => r.replaces).length;
    const g = this.local.takeNow(
      ready.map((r) => r.charge),
      nowMs,
      this.aheadRoom() + free,
      free,
    );
    this.ahead = g.ahead;
    this.heldBack = ready.length - g.granted;
    return ready.slice(0, g.granted).map(({ charge: _, replaces: __, ...d }) => d);
  }

  /** Boards the look-ahead wants handed on now, the budget's included: what the bot rate sends in `aheadMs`, less the backlog. */
  private aheadRoom(): number {
    const aheadMs = this.o.aheadMs ?? 0;
    if (aheadMs === 0) return 0;
    return Math.max(0, Math.ceil(((this.o.botRatePerS ?? 0) * aheadMs) / 1000) - this.backlog);
  }

  /**
   * `due`, with the tokens taken from `budget` (the bot's budget shared by
   * every process: RedisBoardBudget).
   * @throws what `budget.take` throws (Redis unreachable): nothing is due then
   */
  async dueFrom(budget: BoardBudget, nowMs: number): Promise<DueBoard[]> {
    const ready = this.roomFor(this.ready(nowMs));
    this.heldBack = 0;
    this.ahead = 0;
    if (ready.length === 0) return [];
    const free = ready.filter((r) => r.replaces).length;
    const g = await budget.take(
      ready.map((r) => r.charge),
      nowMs,
      this.aheadRoom() + free,
      free,
    );
    this.ahead = g.ahead;
    this.heldBack = ready.length - g.granted;
    return ready.slice(0, g.granted).map(({ charge: _, replaces: __, ...d }) => d);
  }

  /**
   * The first of `ready` that fit under BOARD_MAX_BACKLOG boards in the board lane; sets `heldByBacklog` to the rest.
   * Boards waiting to render do not count: a render draws its chat's newest state (late binding), so that wait costs
   * no staleness, and counting it starved the lane whenever renders lagged.
   */
  private roomFor<T>(ready: T[]): T[] {
    const max = this.o.maxBacklog ?? 0;
    const room = max === 0 ? ready.length : Math.max(0, max - this.sending);
    this.heldByBacklog = Math.max(0, ready.length - room);
    return this.heldByBacklog > 0 ? ready.slice(0, room) : ready;
  }

  /** µs until the chat may go (0: now): its chat interval and its group's GCRA, as the bucket grants (libs/sendq gcra.ts). */
  private waitUs(e: Tats, nowUs: number): number {
    return Math.max(gcraWaitUs(e.chatTatUs, nowUs), gcraWaitUs(e.groupTatUs, nowUs, this.iv.groupTauUs));
  }

  /**
   * How long after its next hand-on (at the earliest it may go, from `nowUs`) the chat may go again, µs:
   * max(chat interval, what its group's GCRA then allows). A chat with its group's burst left: the chat interval;
   * one that keeps going: T_group; with burst 1 always max(T_chat, T_group).
   */
  private spacingUs(e: Tats, nowUs: number): number {
    const at = nowUs + this.waitUs(e, nowUs);
    const next = { chatTatUs: gcraGrant(e.chatTatUs, at, this.iv.chatUs), groupTatUs: gcraGrant(e.groupTatUs, at, this.iv.groupUs) };
    return this.waitUs(next, at);
  }

  /**
   * The chats that may go now (dirty, their pacing allows) with their render charges: those whose board replaces one
   * still waiting downstream first (`replaces`: no send), then the others, each quietest first (the oldest
   * `min(changedMs, dirtySinceMs + intervalMs)`); updates `intervalMs`.
   */
  private ready(nowMs: number): Array<DueBoard & { charge: number; replaces: boolean }> {
    let costMs = 0;
    let dirty = 0;
    const ready: Array<{ chatId: number; e: ChatEntry; cost: number }> = [];
    const confirmMs = this.o.confirmTimeoutMs ?? 0;
    const nowUs = Math.round(nowMs * 1000);
    // A chat never handed on waits the least: the interval's first term is at least that.
    let spacingUs = this.spacingUs({ chatTatUs: 0, groupTatUs: 0 }, nowUs);
    for (const [chatId, e] of this.chats) {
      // Handed on long ago and never confirmed: lost on the way (a render that threw, an outcome not heard).
      if (confirmMs > 0 && e.sentVersion > e.deliveredVersion && nowMs - e.lastSentMs >= confirmMs) e.sentVersion = e.deliveredVersion;
      spacingUs = Math.max(spacingUs, this.spacingUs(e, nowUs));
      if (e.version <= e.sentVersion) continue;
      const cost = this.o.costMs(e.cards, e.rounds);
      dirty++;
      costMs += cost;
      // A replacement waits for its chat's pacing too. Unpaced, replacements took render time the first boards of
      // other chats needed, on a loop where renders are the bottleneck (docs/decisions/0040-replacements-stay-paced.md).
      if (this.waitUs(e, nowUs) === 0) ready.push({ chatId, e, cost });
    }
    // With the look-ahead boards may leave at up to the bot rate (the budget is a floor).
    const maxRate = (this.o.aheadMs ?? 0) > 0 ? Math.max(this.o.sendBudgetPerS, this.o.botRatePerS ?? 0) : this.o.sendBudgetPerS;
    const rate = this.backlog > 0 ? Math.min(maxRate, Math.max(MIN_DRAIN_PER_S, this.drainPerS)) : this.o.sendBudgetPerS;
    const raw = Math.max(
      spacingUs / 1000 + (1000 * this.backlog) / rate,
      (1000 * costMs) / this.o.renderBudgetMsPerS,
      (1000 * (dirty + this.backlog)) / rate,
    );
    // Whole ms, rounded up (after dropping float noise below a µs).
    this.intervalMs = Math.ceil(Math.round(raw * 1000) / 1000);
    const replaces = (e: ChatEntry): number => (replacesQueued(e) ? 0 : 1);
    const quiet = (e: ChatEntry): number => Math.min(e.changedMs, e.dirtySinceMs + this.intervalMs);
    ready.sort((a, b) => replaces(a.e) - replaces(b.e) || quiet(a.e) - quiet(b.e));
    // A board costlier than a whole second's budget goes when the budget is full.
    return ready.map((r) => ({
      chatId: r.chatId,
      version: r.e.version,
      cards: r.e.cards,
      quietMs: quiet(r.e),
      charge: Math.min(r.cost, this.o.renderBudgetMsPerS),
      replaces: replaces(r.e) === 0,
    }));
  }
}
