/**
 * Live boards of the chats that play: watches each chat's channel updates
 * (`ch.<tg…>.out`), lets the {@link RefreshScheduler} pick which boards are
 * due by cost, submits them to the render queue (rendered in the render pool:
 * semaphore before the thread, a newer version superseding a queued older
 * one; in this process, or a board-renderer's with REDIS_URL) whose consumer
 * queues each PNG on the bot's send queue (lane `board`, key `board:<chat>`: a newer board
 * supersedes a queued one there too).
 *
 * Each board's end comes back ({@link ChatBoards.heard}, from the render
 * worker in this process or, in the cluster, over Redis): delivered, or not (the chat is dirty again in the
 * scheduler), or the chat stopped accepting the bot (kicked, blocked: its board
 * stops here, no more renders). A chat that moved to a supergroup keeps its
 * last state on the new chat's board until the new chat's channel shows it
 * (merged in by the router), so the first board there is never empty.
 */
import type { Bus, Subjects, Subscription } from '@crowdplay/bus';
import { decodeJson, encodeJson } from '@crowdplay/bus';
import type { Board, Card, Square } from '@crowdplay/board';
import type { ChannelUpdate, RoundView } from '@crowdplay/protocol';
import { telegramChannelId, type TelegramClient } from '@crowdplay/telegram';
import type { Telemetry } from '@crowdplay/telemetry';
import type { BoardEnd, RenderQueue } from '@crowdplay/board-renderer';
import type { BoardBudget, RefreshScheduler } from './scheduler.ts';
import { boardRounds } from './board-rounds.ts';

/** The word puzzle's broadcast state (services/crowd-engine word-puzzle.ts). */
interface PuzzleState {
  puzzle: number;
  players: Record<string, { marks: string[]; solved: boolean; name?: string }>;
}

interface Watched {
  title: string;
  sub: Subscription;
  state: PuzzleState | null;
  /** The channel's rounds in its last update (the board shows the live one and the last result). */
  rounds: RoundView[];
  ev: number;
  /**
   * A chat moved here (group → supergroup): the old chat's last state, shown merged with this chat's until this
   * chat's channel holds all of it (the router merges it in) or plays another puzzle.
   */
  carried: PuzzleState | null;
  /** Added to every board version of the chat: past the old chat's versions after a move, else 0. */
  vbase: number;
  /**
   * The players' avatars for this chat, held for the puzzle's life (not only
   * in the client's shared cache, which may evict them before the final
   * board): Telegram user id → thumbnail (players with none are absent); a
   * read in flight is listed in `reading`.
   */
  avatars: Map<number, Uint8Array>;
  reading: Set<number>;
  /** Avatars that arrived (each makes the board newer: see boardVersion). */
  avatarRev: number;
}

/** Board versions per event id: `ev × AVATAR_REV_SPAN + min(avatarRev, AVATAR_REV_SPAN − 1)`. */
export const AVATAR_REV_SPAN = 1024;

/**
 * The version of a chat's board: it rises with the channel's event id (ids
 * rise within a channel across moves and restarts: DESIGN.md) and, within
 * one event, with every avatar that arrived since the chat was first watched,
 * so an avatar arriving after its player's last guess still gets the chat a
 * newer board (the send queue skips a board not newer than the one shown).
 * Exact while ev < 2^53 ÷ 1024 ≈ 8.8 × 10^12.
 */
export function boardVersion(ev: number, avatarRev: number): number {
  return ev * AVATAR_REV_SPAN + Math.min(avatarRev, AVATAR_REV_SPAN - 1);
}

/** The board version of a watched chat now. */
function versionOf(w: Watched): number {
  return w.vbase + boardVersion(w.ev, w.avatarRev);
}

type Player = PuzzleState['players'][string];

/** Whether player state `a` is further along than `b` (solved beats not, then more guesses): the router's absorb rule. */
function ahead(a: Player, b: Player): boolean {
  if (a.solved !== b.solved) return a.solved;
  return a.marks.length > b.marks.length;
}

/**
 * The state a moved chat shows: `state` (the new chat's channel) with the players of `carried` (the old chat's
 * last state) it lacks or is behind on, as the router's absorb merges them; `state` alone for another puzzle.
 * `complete`: `state` already holds all of `carried`.
 */
export function mergeCarried(carried: PuzzleState, state: PuzzleState | null): { state: PuzzleState; complete: boolean } {
  if (!state) return { state: carried, complete: false };
  if (state.puzzle !== carried.puzzle) return { state, complete: true };
  const players = { ...state.players };
  let complete = true;
  for (const [viewer, p] of Object.entries(carried.players)) {
    const mine = players[viewer];
    if (mine && !ahead(p, mine)) continue;
    players[viewer] = p;
    complete = false;
  }
  return complete ? { state, complete } : { state: { ...state, players }, complete };
}

const SQUARE: Record<string, Square> = { g: 'green', y: 'yellow', '.': 'grey' };

/**
 * The board of a puzzle state: one card per player, solved first, then by
 * fewer guesses, then by name (colours only; letters never leave the shard),
 * and the chat's live round and last result from `rounds` (board-rounds.ts).
 */
export function boardOf(title: string, s: PuzzleState, rounds?: readonly RoundView[]): Board {
  const cards: Card[] = Object.entries(s.players).map(([viewer, p]) => {
    const id = viewer.startsWith('tg:') ? viewer.slice(3) : viewer;
    return { id, name: p.name ?? `player ${id}`, rows: p.marks.map((m) => [...m].map((c) => SQUARE[c] ?? 'empty')) };
  });
  const rank = (viewer: string): [number, number] => [s.players[viewer]!.solved ? 0 : 1, s.players[viewer]!.marks.length];
  const byViewer = new Map(Object.keys(s.players).map((v) => [v.startsWith('tg:') ? v.slice(3) : v, v]));
  cards.sort((a, b) => {
    const [sa, ga] = rank(byViewer.get(a.id)!);
    const [sb, gb] = rank(byViewer.get(b.id)!);
    return sa - sb || ga - gb || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  });
  const drawn = boardRounds(rounds);
  return { title, puzzle: `#${s.puzzle}`, cards, ...(drawn.length > 0 ? { rounds: drawn } : {}) };
}

/** A board op published between gateways (cluster mode). */
interface BoardOp {
  op: 'watch' | 'unwatch' | 'move';
  chat: number;
  /** `move`: the new chat id. */
  to?: number;
  /** The update_id that caused it (orders a chat's ops). */
  at: number;
  /** The publishing gateway. */
  by: string;
}

/** Chats whose last board op is remembered in cluster mode (oldest forgotten first). */
export const MAX_OPS_REMEMBERED = 100_000;

/** Options of {@link ChatBoards}. */
export interface ChatBoardsDeps {
  bus: Bus;
  subjects: Subjects;
  client: TelegramClient;
  /** Where due boards go to be rendered (in process, or BullMQ for a board-renderer service). */
  renders: RenderQueue;
  scheduler: RefreshScheduler;
  /**
   * Boards handed on and not sent yet: waiting to render or rendering (`rendering`: the render queue's `backlog()`)
   * and in the send queue's board lane (`sending`), read every tick and given to the scheduler (`setBacklog`).
   * Unset: the scheduler sees no backlog. A read that fails leaves the last.
   */
  backlog?: () => Promise<{ rendering: number; sending: number }>;
  /**
   * The bot's budget shared by every process (REDIS_URL: RedisBoardBudget).
   * Unset: the scheduler's own (this process's) budget.
   */
  budget?: BoardBudget;
  telemetry: Telemetry;
  /** How often due boards are looked for, ms. @defaultValue 250 */
  tickMs?: number;
  /**
   * Cluster mode: this gateway's id. A chat's board is then held by one
   * gateway: every watch / unwatch / move (with the update_id that caused it)
   * is published on `subjects.telegramBoards()`; a gateway that sees another
   * take a chat it holds drops it, an unwatch stops it wherever it runs, a move
   * moves it wherever it runs. Ops older (update_id) than the last one seen for
   * the chat are ignored (bus delivery across gateways is not ordered).
   */
  cluster?: { gatewayId: string };
  /** BOARDS_ENABLED: when false, `watch` does nothing (no board is rendered or sent). @defaultValue true */
  enabled?: boolean;
  /** Told the rounds of every update of a chat held here, and when the chat is no longer held (round-results.ts). */
  rounds?: { seen(chatId: number, rounds: readonly RoundView[]): void; forget(chatId: number): void };
  /**
   * A tenant's own bot: its Telegram id, which names its chats' channels (`telegramChannelId(chat, bot)`) and its
   * board ops' subject. Unset: the deployment's bot (`tg<chat>`).
   */
  bot?: number;
  now?: () => number;
}

export class ChatBoards {
  private readonly chats = new Map<number, Watched>();
  private timer: NodeJS.Timeout | null = null;
  private ticking = false;
  private readonly now: () => number;
  private readonly heldBack;
  private readonly heldByBacklog;
  private readonly aheadTotal;
  private readonly peerSub: Subscription | null = null;
  /** Cluster mode: the update_id of the last board op seen per chat (bounded: MAX_OPS_REMEMBERED, oldest forgotten). */
  private readonly lastOp = new Map<number, number>();

  constructor(private readonly d: ChatBoardsDeps) {
    this.now = d.now ?? Date.now;
    const m = d.telemetry.metrics;
    m.gauge('crowdplay_board_interval_ms', () => d.scheduler.intervalMs);
    m.gauge('crowdplay_board_chats', () => this.chats.size);
    m.gauge('crowdplay_board_backlog', () => d.scheduler.backlog);
    m.gauge('crowdplay_board_drain_per_s', () => Math.round(d.scheduler.drainPerS * 100) / 100);
    if (d.cluster) {
      const me = d.cluster.gatewayId;
      this.peerSub = d.bus.subscribe(d.subjects.telegramBoards(d.bot), (msg) => {
        let op: BoardOp;
        try {
          op = decodeJson<BoardOp>(msg.data);
        } catch {
          return;
        }
        if (op.by !== me) this.onPeer(op);
      });
    }
    this.heldByBacklog = m.counter('crowdplay_board_backlog_held_total');
    this.aheadTotal = m.counter('crowdplay_board_ahead_total');
    this.heldBack = m.counter('crowdplay_board_budget_held_total');
  }

  /** Chats with a live board. */
  get watching(): number[] {
    return [...this.chats.keys()];
  }

  /**
   * Starts (or retitles) the live board of a chat (nothing when boards are off).
   * `at`: the update_id that asked for it (cluster mode: other gateways drop the chat's board).
   */
  watch(chatId: number, title: string, at?: number): void {
    if (this.d.enabled === false) return;
    if (!this.fresh(chatId, at)) return;
    this.publish({ op: 'watch', chat: chatId, at });
    this.watchHere(chatId, title);
  }

  /** Stops a chat's live board (cluster mode, with `at`: wherever it runs). */
  unwatch(chatId: number, at?: number): void {
    if (!this.fresh(chatId, at)) return;
    this.publish({ op: 'unwatch', chat: chatId, at });
    this.unwatchHere(chatId);
  }

  /** A chat moved (group → supergroup): its board follows (cluster mode, with `at`: wherever it runs). */
  move(oldId: number, newId: number, at?: number): void {
    if (!this.fresh(oldId, at)) return;
    this.fresh(newId, at);
    this.publish({ op: 'move', chat: oldId, to: newId, at });
    this.moveHere(oldId, newId);
  }

  /** Records `at` for the chat; false when an op with a later update_id was seen for it already. */
  private fresh(chatId: number, at: number | undefined): boolean {
    if (at === undefined || !this.d.cluster) return true;
    const last = this.lastOp.get(chatId);
    if (last !== undefined && last > at) return false;
    this.lastOp.delete(chatId);
    this.lastOp.set(chatId, at);
    if (this.lastOp.size > MAX_OPS_REMEMBERED) this.lastOp.delete(this.lastOp.keys().next().value!);
    return true;
  }

  private publish(op: Omit<BoardOp, 'by' | 'at'> & { at: number | undefined }): void {
    if (!this.d.cluster || op.at === undefined) return;
    this.d.bus.publish(this.d.subjects.telegramBoards(this.d.bot), encodeJson({ ...op, by: this.d.cluster.gatewayId }));
  }

  /** Another gateway's op. */
  private onPeer(op: BoardOp): void {
    if (!Number.isSafeInteger(op.chat) || !Number.isSafeInteger(op.at)) return;
    if (op.op === 'move') {
      if (!Number.isSafeInteger(op.to) || !this.fresh(op.chat, op.at)) return;
      this.fresh(op.to!, op.at);
      this.moveHere(op.chat, op.to!);
      return;
    }
    if (!this.fresh(op.chat, op.at)) return;
    // watch: another gateway holds the board now; unwatch: it is stopped.
    this.unwatchHere(op.chat);
  }

  /** Watches the chat here; `from`: the board of the chat it moved from (its state is carried over). */
  private watchHere(chatId: number, title: string, from?: Watched): void {
    const w = this.chats.get(chatId);
    if (w) {
      w.title = title;
      if (from?.state && !w.carried) {
        w.carried = from.state;
        this.changedHere(chatId, w);
      }
      return;
    }
    const entry: Watched = {
      title,
      state: null,
      rounds: from?.rounds ?? [],
      ev: 0,
      carried: from?.state ?? null,
      vbase: from ? versionOf(from) + 1 : 0,
      sub: undefined as unknown as Subscription,
      avatars: new Map(from?.avatars ?? []),
      reading: new Set(),
      avatarRev: 0,
    };
    entry.sub = this.d.bus.subscribe(this.d.subjects.channelOut(telegramChannelId(chatId, this.d.bot)), (msg) =>
      this.onUpdate(chatId, entry, msg.data),
    );
    this.chats.set(chatId, entry);
    // A moved chat's board is due at once, with the state it had: not an empty board while the state moves.
    if (entry.carried) this.changedHere(chatId, entry);
  }

  /** The state the chat's board shows (its own, merged with what it carried over from a move). */
  private shown(w: Watched): PuzzleState | null {
    return w.carried ? mergeCarried(w.carried, w.state).state : w.state;
  }

  /** Tells the scheduler the chat's board is at its current version (`cosmetic`: only an avatar changed, not the state). */
  private changedHere(chatId: number, w: Watched, cosmetic = false): void {
    const s = this.shown(w);
    if (s)
      this.d.scheduler.changed(chatId, versionOf(w), Object.keys(s.players).length, this.now(), boardRounds(w.rounds).length, cosmetic);
  }

  private unwatchHere(chatId: number): void {
    const w = this.chats.get(chatId);
    if (!w) return;
    w.sub.unsubscribe();
    this.chats.delete(chatId);
    this.d.scheduler.remove(chatId);
    this.d.rounds?.forget(chatId);
  }

  private moveHere(oldId: number, newId: number): void {
    const w = this.chats.get(oldId);
    if (!w) return;
    this.unwatchHere(oldId);
    if (this.d.enabled !== false) this.watchHere(newId, w.title, w);
  }

  private onUpdate(chatId: number, w: Watched, data: Uint8Array): void {
    let u: ChannelUpdate;
    try {
      u = decodeJson<ChannelUpdate>(data);
    } catch {
      return;
    }
    const g = u.game as Partial<PuzzleState> | undefined;
    if (!g || typeof g.puzzle !== 'number' || typeof g.players !== 'object' || g.players === null || u.ev <= w.ev) return;
    w.ev = u.ev;
    const state = g as PuzzleState;
    // A new puzzle: keep only the avatars of players still in it (the client's cache answers the rest).
    if (w.state && w.state.puzzle !== state.puzzle) {
      for (const id of w.avatars.keys()) if (!(`tg:${id}` in state.players)) w.avatars.delete(id);
    }
    w.state = state;
    w.rounds = Array.isArray(u.rounds) ? u.rounds : [];
    this.d.rounds?.seen(chatId, w.rounds);
    // The moved state is in this chat's channel now (or the chat plays another puzzle): show the channel alone.
    if (w.carried && mergeCarried(w.carried, state).complete) w.carried = null;
    for (const viewer of Object.keys(state.players)) this.readAvatar(chatId, w, viewer);
    this.changedHere(chatId, w);
  }

  /**
   * Starts reading a player's avatar as soon as the player appears (not when
   * the board is due), so boards never wait for avatar reads: a board drawn
   * before the avatar arrived shows the initial, and the arrival makes the
   * chat dirty again (a newer boardVersion).
   */
  private readAvatar(chatId: number, w: Watched, viewer: string): void {
    const id = Number(viewer.startsWith('tg:') ? viewer.slice(3) : viewer);
    if (!Number.isSafeInteger(id) || id <= 0 || w.avatars.has(id) || w.reading.has(id)) return;
    w.reading.add(id);
    void this.d.client.avatars
      .get(id)
      .catch(() => null)
      .then((bytes) => {
        w.reading.delete(id);
        // Only photos are held: "none" (or a failed read) is asked again at the player's next change,
        // which the client answers from its own cache (TELEGRAM_AVATAR_TTL_MS, failures for a minute).
        if (this.chats.get(chatId) !== w || !bytes || !w.state) return;
        w.avatars.set(id, bytes);
        w.avatarRev++;
        this.changedHere(chatId, w, true);
      });
  }

  /**
   * Late binding for the render pool (libs/board `RenderPoolOptions.latest`): the board of chat `chatId` as this
   * process holds it now, when newer than `version` (the version a render job carries), else null. A board that
   * waited in the render queue while its chat changed is then drawn from the newest state. A pure read: the
   * scheduler learns of it only once that board is on the send queue ({@link rendered}), so a render or hand-on
   * that fails leaves the change dirty.
   * @param chatId the render job's chat (libs/board passes it as a string)
   */
  latest(chatId: string, version: number): { version: number; board: Board } | null {
    const w = this.chats.get(Number(chatId));
    const state = w ? this.shown(w) : null;
    if (!w || !state) return null;
    const now = versionOf(w);
    if (!(now > version)) return null;
    return { version: now, board: this.withAvatars(w, boardOf(w.title, state, w.rounds)) };
  }

  /**
   * Chat `chatId`'s board at `version` was rendered here and is on the send queue (the render queue consumer's
   * `onRendered` succeeded). When that is newer than the version handed on (late binding), the scheduler takes the
   * chat as clean up to it (`upgraded`): the change rode on a render and a send already paid for.
   */
  rendered(chatId: number, version: number): void {
    if (this.chats.has(chatId)) this.d.scheduler.upgraded(chatId, version, this.now());
  }

  /**
   * What became of a board of chat `chatId` (here, or reported by a render worker in another process: board-renderer
   * `BoardEnds`): `queued` is {@link rendered} and a newer board replaces it on the send queue; `sent` tells the
   * scheduler it is shown; `superseded` nothing (the newer one's end decides); `deactivated` and `purged` stop the
   * chat's board; `refused`, `failed`, `dropped` and `not-handed-on` make the chat due again. Nothing for a chat this
   * process does not hold.
   */
  heard(end: BoardEnd): void {
    const { chatId, version } = end;
    if (!this.chats.has(chatId)) return;
    switch (end.outcome) {
      case 'queued':
        this.rendered(chatId, version);
        this.d.scheduler.queuedForSend(chatId, version);
        return;
      case 'sent':
        this.d.scheduler.delivered(chatId, version);
        return;
      case 'superseded':
        return;
      case 'deactivated':
      case 'purged':
        this.deactivated(chatId);
        return;
      case 'refused':
      case 'not-handed-on':
      case 'dropped':
      case 'failed':
        this.d.scheduler.undelivered(chatId, version);
        return;
    }
  }

  /**
   * The chat stopped accepting the bot (kicked, blocked, chat gone: the send queue deactivated it): its board
   * stops here, and nothing of it is rendered again until it is watched again (`/start` after the bot is re-added).
   */
  deactivated(chatId: number): void {
    this.unwatchHere(chatId);
  }

  /** Starts looking for due boards every tickMs. */
  start(): void {
    this.timer ??= setInterval(() => void this.tick(), this.d.tickMs ?? 250);
  }

  /** Submits every board that is due now to the render queue. Never rejects. */
  async tick(): Promise<void> {
    if (this.ticking) return;
    this.ticking = true;
    try {
      const budget = this.d.budget;
      if (this.d.backlog) {
        try {
          const b = await this.d.backlog();
          this.d.scheduler.setBacklog(b.rendering + b.sending, this.now(), b.sending);
        } catch (err) {
          this.d.telemetry.logger.warn({ err }, 'board backlog unreadable: the last reading stands');
        }
      }
      let due;
      try {
        due = budget ? await this.d.scheduler.dueFrom(budget, this.now()) : this.d.scheduler.due(this.now());
      } catch (err) {
        this.d.telemetry.logger.warn({ err }, 'board budget unavailable: no board this tick');
        return;
      }
      if (this.d.scheduler.heldBack > 0) this.heldBack.add(this.d.scheduler.heldBack, { budget: budget?.kind ?? 'memory' });
      if (this.d.scheduler.heldByBacklog > 0) this.heldByBacklog.add(this.d.scheduler.heldByBacklog);
      if (this.d.scheduler.ahead > 0) this.aheadTotal.add(this.d.scheduler.ahead);
      const jobs = due.map(async ({ chatId, version: dueVersion, quietMs }) => {
        const w = this.chats.get(chatId);
        const state = w ? this.shown(w) : null;
        if (!w || !state) return;
        // The board drawn is the chat's state and avatars now, which may be newer than the version due (a state or an
        // avatar that arrived while the budget was asked): it goes out as that newer version, so the change is not
        // drawn a second time as an identical picture (Telegram: "message is not modified", a send wasted).
        const version = Math.max(dueVersion, versionOf(w));
        this.d.scheduler.sent(chatId, version, this.now());
        const board = this.withAvatars(w, boardOf(w.title, state, w.rounds));
        // The render queue's consumer renders it and queues the PNG on the send queue (startTelegram wires it).
        const out = await this.d.renders.submit(chatId, version, board, quietMs);
        if (out.status === 'refused') this.d.scheduler.failed(chatId);
      });
      const results = await Promise.allSettled(jobs);
      for (const r of results)
        if (r.status === 'rejected') this.d.telemetry.logger.error({ err: r.reason }, 'board render or queueing failed');
    } finally {
      this.ticking = false;
    }
  }

  /** The board with the avatars the chat holds (a player whose avatar is not read yet, or who has none, gets an initial). */
  private withAvatars(w: Watched, board: Board): Board {
    const cards = board.cards.map((c) => {
      const avatar = w.avatars.get(Number(c.id));
      return avatar ? { ...c, avatar } : c;
    });
    return { ...board, cards };
  }

  /** Stops every board (subscriptions and the timer). */
  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.peerSub?.unsubscribe();
    for (const id of [...this.chats.keys()]) this.unwatchHere(id);
  }
}
