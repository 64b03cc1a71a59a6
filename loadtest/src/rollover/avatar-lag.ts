/**
 * Avatar reads against the last guess: the part of a chat's board staleness
 * the staleness floor does not see.
 *
 * The floor (bucket-model.ts `idealStaleness`) replays the accepted guesses
 * only. A chat's final board also shows its players' avatars, and the
 * product reads an avatar when the player first appears on the board; a
 * board cannot show it before the read is done. So in a chat whose last
 * avatar download comes after its last guess, the final board is due at
 * least that much later than the floor assumes.
 */

/** One avatar download the stub served: whose avatar, and when (ms). */
export interface AvatarDownload {
  userId: number;
  atMs: number;
}

/**
 * For each chat, how long after its last accepted guess the product downloaded the last avatar of its players.
 * @param chats per chat: its last accepted guess (ms; null: the chat never changed, left out) and the user ids
 *   its final board shows
 * @param downloads avatar downloads (the stub's `file` calls with a `userId`), any order
 * @returns one delay per chat whose last avatar download came after its last guess, ms (> 0), in chat order
 * @throws RangeError for a time that is not a finite number (nothing is computed)
 */
export function avatarsAfterLastChange(
  chats: ReadonlyArray<{ lastChangeMs: number | null; userIds: readonly number[] }>,
  downloads: readonly AvatarDownload[],
): number[] {
  const lastOf = new Map<number, number>();
  for (const d of downloads) {
    if (!Number.isFinite(d.atMs)) throw new RangeError(`download times must be finite numbers, got ${d.atMs} for user ${d.userId}`);
    lastOf.set(d.userId, Math.max(lastOf.get(d.userId) ?? -Infinity, d.atMs));
  }
  for (const c of chats)
    if (c.lastChangeMs !== null && !Number.isFinite(c.lastChangeMs))
      throw new RangeError(`last change times must be finite numbers or null, got ${c.lastChangeMs}`);
  const out: number[] = [];
  for (const c of chats) {
    if (c.lastChangeMs === null) continue;
    let last = -Infinity;
    for (const u of c.userIds) last = Math.max(last, lastOf.get(u) ?? -Infinity);
    if (last > c.lastChangeMs) out.push(last - c.lastChangeMs);
  }
  return out;
}
