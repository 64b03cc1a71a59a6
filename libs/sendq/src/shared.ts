/** Input checks and small helpers shared by both queue adapters (internal). */
import { LANES, type SendJobInput } from './types.ts';

/** Migration redirects: old chat id (string) → new chat id. */
export type Redirects = Map<string, number>;

/** Longest redirect chain followed (group → supergroup happens once per chat; the bound only stops a cycle). */
export const MAX_REDIRECT_HOPS = 8;

/** @throws RangeError unless `v` is a safe integer other than 0. */
export function checkChatId(v: unknown, name: string): asserts v is number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v === 0)
    throw new RangeError(`${name} must be a non-zero safe integer, got ${String(v)}`);
}

/** @throws RangeError on a bad chatId, lane, key, isGroup, version (a version needs a key) or deadlineMs. */
export function checkJobInput(input: SendJobInput<unknown>): void {
  checkChatId(input.chatId, 'chatId');
  if (!LANES.includes(input.lane)) throw new RangeError(`lane must be one of ${LANES.join(', ')}, got ${String(input.lane)}`);
  if (input.key !== undefined && (typeof input.key !== 'string' || input.key === ''))
    throw new RangeError('key must be a non-empty string when given');
  if (input.isGroup !== undefined && typeof input.isGroup !== 'boolean') throw new RangeError('isGroup must be a boolean when given');
  if (input.version !== undefined) {
    if (typeof input.version !== 'number' || !Number.isSafeInteger(input.version) || input.version < 0)
      throw new RangeError(`version must be a safe integer >= 0 when given, got ${String(input.version)}`);
    if (input.key === undefined) throw new RangeError('version needs a key (it orders the jobs of one key)');
  }
  if (
    input.deadlineMs !== undefined &&
    !(typeof input.deadlineMs === 'number' && Number.isFinite(input.deadlineMs) && input.deadlineMs > 0)
  )
    throw new RangeError(`deadlineMs must be a finite number > 0 when given, got ${String(input.deadlineMs)}`);
}

/** Follows migration redirects from `chatId` (at most MAX_REDIRECT_HOPS). */
export function resolveRedirect(redirects: Redirects, chatId: number): number {
  let id = chatId;
  for (let i = 0; i < MAX_REDIRECT_HOPS; i++) {
    const next = redirects.get(String(id));
    if (next === undefined) return id;
    id = next;
  }
  return id;
}
