/**
 * What the sender knows about each chat's board message: the message id it
 * edits, the version it shows, the highest message id seen in the chat, and
 * the two per-chat flags of the delivery policy (docs/telegram.md):
 *
 * - `postClaim`: a post (first board, or the one repost after "message to
 *   edit not found") is in flight for the chat. Only its holder posts; it is
 *   cleared when the post lands (the new message id stored) or fails
 *   without having been applied. So a chat gets one repost, however many
 *   jobs find its board missing.
 * - `unconfirmed`: a post got no answer (dropped connection, timeout, 5xx)
 *   and may have landed. How it is looked for depends on how the chat
 *   numbers its messages ({@link sharesMessageIds}):
 *   - a supergroup or channel numbers its own messages 1, 2, 3…: the lost
 *     post is after `afterId` (the chat's highest id known before the post).
 *     The ids after it are edited one by one: success or "not modified" is
 *     the lost post; "message can't be edited" (someone else's message) moves
 *     on; "message to edit not found" means no message has that id yet, so
 *     the post did not land. No cap: a guess after N ids could post twice.
 *   - a private chat or basic group shares one numbering with all the bot's
 *     other private chats and basic groups: "not found" in this chat may be
 *     another chat's message, so it proves nothing. The lost post lies
 *     between `afterId` (the bot-wide highest id known before the post) and
 *     `shared.boundId`, the id of the first message the bot sent anywhere in
 *     that numbering after the failure ({@link BoardStore.noteOwnSend}).
 *     Only the ids in between that the bot has not seen in any chat are
 *     edited; the lost post is one of them or it did not land. With no bound
 *     yet, the board is posted (its own id is the bound) and the ids in
 *     between are then looked through: a lost post found is deleted, so the
 *     chat keeps one board.
 */

/** Chat ids of supergroups and channels: -100… (≤ −10^12); the rest share the bot's message numbering. */
const SUPERGROUP_ID_MAX = -1_000_000_000_000;

/**
 * True for private chats and basic groups, whose message ids are numbered
 * across all of the bot's private chats and basic groups (one sequence for the
 * bot), false for supergroups and channels (one sequence per chat).
 */
export function sharesMessageIds(chatId: number): boolean {
  return chatId > SUPERGROUP_ID_MAX;
}

/** Message ids of the bot-wide numbering remembered with their chat (oldest forgotten first; an id forgotten is probed, never assumed). */
export const SHARED_IDS_REMEMBERED = 100_000;

/** One chat's board state. */
export interface BoardRecord {
  /** The board message the sender edits; absent before the first post or after it was found missing. */
  messageId?: number;
  /** Board version that message shows (the producer's counter, increasing per chat). */
  version?: number;
  /** Highest message id seen in the chat (our own answers, and ids noted by the bot ingress), 0 when none. */
  lastSeenId: number;
  /**
   * An ambiguous post: it is at an id after `afterId` if it landed; `next` is the next candidate to try.
   * `shared`: the chat shares the bot's numbering (see the module doc): `failedAtMs` is when the post failed
   * (the sender's clock), `boundId` the first id the bot got for a send started after that (the lost post,
   * if it landed, is below it), `foundId` a lost post found after the board was posted again (to delete).
   */
  unconfirmed?: {
    afterId: number;
    next: number;
    version: number;
    shared?: { failedAtMs: number; boundId?: number; foundId?: number };
  };
  /** A post in flight: its job id and when the claim lapses (ms, a crashed holder's claim expires). */
  postClaim?: { jobId: string; untilMs: number };
}

/**
 * Storage of {@link BoardRecord}s. The in-process {@link MemoryBoardStore}
 * serves standalone and a single sender process; several sender processes
 * need a shared implementation with the same atomicity (claimPost is a
 * compare-and-set).
 */
export interface BoardStore {
  /** The chat's record (a fresh `{lastSeenId: 0}` when unknown). */
  get(chatId: number): Promise<BoardRecord>;
  /** Replaces fields of the chat's record (`undefined` values delete the field). */
  patch(chatId: number, fields: Partial<BoardRecord>): Promise<void>;
  /**
   * Raises `lastSeenId` to `messageId` if higher; for a chat that shares the bot's numbering also remembers
   * the id as that chat's and raises the bot-wide highest id ({@link sharedHighId}).
   */
  noteMessageId(chatId: number, messageId: number): Promise<void>;
  /**
   * A message the bot itself sent, answered with `messageId`, whose call started at `startedAtMs` (the
   * sender's clock): noted like {@link noteMessageId}, and for the shared numbering it bounds every
   * unconfirmed post that failed before that call started (`unconfirmed.shared.boundId`).
   */
  noteOwnSend(chatId: number, messageId: number, startedAtMs: number): Promise<void>;
  /** The highest message id known in the bot-wide numbering of private chats and basic groups, 0 when none. */
  sharedHighId(): Promise<number>;
  /** The chat a message id of the bot-wide numbering is known to belong to, or undefined (never seen, or forgotten). */
  sharedOwner(messageId: number): Promise<number | undefined>;
  /**
   * Takes the chat's post claim for `jobId` until `nowMs + ttlMs` unless
   * another job holds an unexpired one. @returns true when `jobId` holds it
   */
  claimPost(chatId: number, jobId: string, nowMs: number, ttlMs: number): Promise<boolean>;
  /** Drops the claim if `jobId` holds it. */
  releasePost(chatId: number, jobId: string): Promise<void>;
  /** Group → supergroup: the old chat's record is dropped (its message ids mean nothing in the new chat). */
  move(oldId: number, newId: number): Promise<void>;
  /** Chats with a record (diagnostics). */
  size(): number;
}

/** The in-process board store. */
export class MemoryBoardStore implements BoardStore {
  private readonly records = new Map<number, BoardRecord>();
  /** Bot-wide numbering: id → chat, oldest first (bounded: SHARED_IDS_REMEMBERED). */
  private readonly sharedIds = new Map<number, number>();
  private sharedHigh = 0;
  /** Chats with an unconfirmed post in the shared numbering (what noteOwnSend bounds). */
  private readonly pendingShared = new Set<number>();

  private rec(chatId: number): BoardRecord {
    let r = this.records.get(chatId);
    if (!r) this.records.set(chatId, (r = { lastSeenId: 0 }));
    return r;
  }

  get(chatId: number): Promise<BoardRecord> {
    return Promise.resolve(structuredClone(this.records.get(chatId) ?? { lastSeenId: 0 }));
  }

  patch(chatId: number, fields: Partial<BoardRecord>): Promise<void> {
    const r = this.rec(chatId) as unknown as Record<string, unknown>;
    for (const [k, v] of Object.entries(fields)) {
      if (v === undefined) delete r[k];
      else r[k] = structuredClone(v);
    }
    if (fields.unconfirmed?.shared) this.pendingShared.add(chatId);
    return Promise.resolve();
  }

  noteMessageId(chatId: number, messageId: number): Promise<void> {
    const r = this.rec(chatId);
    if (messageId > r.lastSeenId) r.lastSeenId = messageId;
    if (sharesMessageIds(chatId) && Number.isSafeInteger(messageId) && messageId > 0) {
      if (messageId > this.sharedHigh) this.sharedHigh = messageId;
      if (!this.sharedIds.has(messageId)) {
        this.sharedIds.set(messageId, chatId);
        if (this.sharedIds.size > SHARED_IDS_REMEMBERED) this.sharedIds.delete(this.sharedIds.keys().next().value!);
      }
    }
    return Promise.resolve();
  }

  async noteOwnSend(chatId: number, messageId: number, startedAtMs: number): Promise<void> {
    await this.noteMessageId(chatId, messageId);
    if (!sharesMessageIds(chatId)) return;
    for (const id of this.pendingShared) {
      const sh = this.records.get(id)?.unconfirmed?.shared;
      if (!sh) {
        this.pendingShared.delete(id);
        continue;
      }
      if (!(sh.failedAtMs < startedAtMs)) continue;
      if (sh.boundId === undefined || messageId < sh.boundId) sh.boundId = messageId;
    }
  }

  sharedHighId(): Promise<number> {
    return Promise.resolve(this.sharedHigh);
  }

  sharedOwner(messageId: number): Promise<number | undefined> {
    return Promise.resolve(this.sharedIds.get(messageId));
  }

  claimPost(chatId: number, jobId: string, nowMs: number, ttlMs: number): Promise<boolean> {
    const r = this.rec(chatId);
    if (r.postClaim && r.postClaim.jobId !== jobId && r.postClaim.untilMs > nowMs) return Promise.resolve(false);
    r.postClaim = { jobId, untilMs: nowMs + ttlMs };
    return Promise.resolve(true);
  }

  releasePost(chatId: number, jobId: string): Promise<void> {
    const r = this.records.get(chatId);
    if (r?.postClaim?.jobId === jobId) delete r.postClaim;
    return Promise.resolve();
  }

  move(oldId: number, _newId: number): Promise<void> {
    this.records.delete(oldId);
    this.pendingShared.delete(oldId);
    return Promise.resolve();
  }

  size(): number {
    return this.records.size;
  }
}
