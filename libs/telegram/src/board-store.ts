/**
 * What the sender knows about each chat's board message: the message id it
 * edits, the version it shows, the highest message id seen in the chat, and
 * the two per-chat flags of the delivery policy (docs/telegram.md):
 *
 * - `postClaim`: a post (first board, or the one repost after "message to
 *   edit not found") is in flight for the chat. Only its holder posts; it is
 *   cleared when the post lands (the new message id is stored) or fails
 *   without having been applied. So a chat gets one repost, however many
 *   jobs find its board missing.
 * - `unconfirmed`: a post got no answer (dropped connection, timeout, 5xx)
 *   and may have landed. The next board for the chat does not post: it tries
 *   to edit the ids after `afterId` (ours would be the first bot message
 *   after the highest id seen before the post), up to {@link BOARD_PROBE_IDS}
 *   of them: "not modified" or success means it found its post (and now
 *   edits it); "message can't be edited" (someone else's message) moves to
 *   the next id; "message to edit not found" means no message has that id
 *   yet (ids are sequential), so the post did not land and it posts.
 */

/** How many message ids after the last one seen are tried before reposting after an ambiguous post. */
export const BOARD_PROBE_IDS = 3;

/** One chat's board state. */
export interface BoardRecord {
  /** The board message the sender edits; absent before the first post or after it was found missing. */
  messageId?: number;
  /** Board version that message shows (the producer's counter, increasing per chat). */
  version?: number;
  /** Highest message id seen in the chat (our own answers, and ids noted by the bot ingress), 0 when none. */
  lastSeenId: number;
  /** An ambiguous post: candidate ids afterId+1 … afterId+BOARD_PROBE_IDS; `next` is the next to try. */
  unconfirmed?: { afterId: number; next: number; version: number };
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
  /** Raises `lastSeenId` to `messageId` if higher. */
  noteMessageId(chatId: number, messageId: number): Promise<void>;
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
    return Promise.resolve();
  }

  noteMessageId(chatId: number, messageId: number): Promise<void> {
    const r = this.rec(chatId);
    if (messageId > r.lastSeenId) r.lastSeenId = messageId;
    return Promise.resolve();
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
    return Promise.resolve();
  }

  size(): number {
    return this.records.size;
  }
}
