/**
 * Classification of Bot API answers and failures (pure: no I/O). The send
 * path (client.ts) turns a class into the send queue's outcome; the table is
 * in docs/telegram.md.
 *
 * Telegram answers errors as `{ok: false, error_code, description,
 * parameters?}` (https://core.telegram.org/bots/api#making-requests); grammY
 * throws them as `GrammyError`. Callers must branch on `error_code` and
 * `parameters` where Telegram gives them (429 `retry_after`,
 * `migrate_to_chat_id`), and on the description text only where Telegram
 * gives nothing else (400 "message is not modified", "message to edit not
 * found", 403 "bot was kicked"): the patterns below are Telegram's wording.
 *
 * A failure without an answer is classified by whether the request can have
 * reached Telegram: a connection that was never made (ECONNREFUSED, DNS
 * failure, unreachable network, a timeout of the connect itself: the error's
 * `syscall` is `connect` or `getaddrinfo`) cannot have been applied; a reset,
 * a timeout after the connection was made or an answer that is not Telegram's
 * JSON (a proxy's 502 page) may have been.
 */
import { GrammyError, HttpError } from 'grammy';

/** Why a chat stopped accepting the bot's calls. */
export type ChatGoneReason = 'kicked' | 'not_member' | 'blocked' | 'chat_not_found' | 'user_deactivated' | 'no_rights' | 'forbidden';

/** What a Bot API failure means for the call and its chat. */
export type ErrorClass =
  /** 400 "message is not modified": the message already shows this content (success for an edit). */
  | { kind: 'not_modified' }
  /** 429: the bot is over a limit; every sender pauses `retryAfterS` s (the limit is on the bot). */
  | { kind: 'rate_limited'; retryAfterS: number }
  /** 400 "message to edit not found" / "message can't be edited": the target is gone (deleted, or not ours). */
  | { kind: 'edit_target_missing'; description: string }
  /** 400 "message to delete not found": already gone. */
  | { kind: 'delete_target_missing' }
  /** 400 with `migrate_to_chat_id`: the group became a supergroup with a new id. */
  | { kind: 'migrated'; toChatId: number }
  /** 403 (kicked, not a member, blocked), 400 "chat not found" or "not enough rights": stop sending to the chat. */
  | { kind: 'chat_gone'; reason: ChatGoneReason; code: number; description: string }
  /** Telegram answered 5xx: it may or may not have applied the call. */
  | { kind: 'server'; code: number; description: string }
  /** No answer. `maybeApplied` false only when the connection was never made. */
  | { kind: 'network'; maybeApplied: boolean; detail: string }
  /** Any other 4xx: the call cannot succeed as it is. */
  | { kind: 'rejected'; code: number; description: string };

/** Errno codes of a connection that was never made: the request cannot have reached Telegram. */
const NEVER_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL']);

/** Syscalls of the connection phase: an error in one of them means no byte of the request was sent. */
const CONNECT_SYSCALLS = new Set(['connect', 'getaddrinfo']);

/** The errno-style code of a network error (node-fetch FetchError `code`, or its `cause`), and its syscall when given. */
function errnoOf(err: unknown): { code: string; syscall: string | undefined } | undefined {
  for (let e: unknown = err, i = 0; e && typeof e === 'object' && i < 4; e = (e as { cause?: unknown }).cause, i++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^E[A-Z_]+$/.test(code)) {
      const syscall = (e as { syscall?: unknown }).syscall;
      return { code, syscall: typeof syscall === 'string' ? syscall : undefined };
    }
  }
  return undefined;
}

/** The seconds Telegram asked to wait: `parameters.retry_after`, else the number in "retry after N", else 1. */
export function retryAfterOf(description: string, parameters: { retry_after?: number } | undefined): number {
  const p = parameters?.retry_after;
  if (typeof p === 'number' && Number.isFinite(p) && p >= 0) return p;
  const m = /retry after (\d+)/i.exec(description);
  return m ? Number(m[1]) : 1;
}

/**
 * Classifies a Telegram error answer.
 * @param code `error_code`
 * @param description Telegram's `description`
 * @param parameters Telegram's `parameters` (retry_after, migrate_to_chat_id)
 */
export function classifyApiError(
  code: number,
  description: string,
  parameters?: { retry_after?: number; migrate_to_chat_id?: number },
): ErrorClass {
  const d = description.toLowerCase();
  if (code === 429) return { kind: 'rate_limited', retryAfterS: retryAfterOf(description, parameters) };
  const to = parameters?.migrate_to_chat_id;
  if (typeof to === 'number' && Number.isSafeInteger(to)) return { kind: 'migrated', toChatId: to };
  if (code >= 500) return { kind: 'server', code, description };
  if (d.includes('message is not modified')) return { kind: 'not_modified' };
  if (d.includes('message to edit not found') || d.includes("message can't be edited")) return { kind: 'edit_target_missing', description };
  if (d.includes('message to delete not found')) return { kind: 'delete_target_missing' };
  if (code === 403) {
    const reason: ChatGoneReason = d.includes('bot was kicked')
      ? 'kicked'
      : d.includes('bot is not a member')
        ? 'not_member'
        : d.includes('bot was blocked')
          ? 'blocked'
          : d.includes('user is deactivated')
            ? 'user_deactivated'
            : d.includes('chat not found')
              ? 'chat_not_found'
              : 'forbidden';
    return { kind: 'chat_gone', reason, code, description };
  }
  if (d.includes('chat not found')) return { kind: 'chat_gone', reason: 'chat_not_found', code, description };
  if (d.includes('not enough rights') || d.includes('have no rights')) return { kind: 'chat_gone', reason: 'no_rights', code, description };
  return { kind: 'rejected', code, description };
}

/**
 * Classifies whatever a grammY call threw: a `GrammyError` (Telegram's
 * answer), an `HttpError` (no usable answer), or anything else (treated as
 * a network failure that may have been applied).
 */
export function classifyError(err: unknown): ErrorClass {
  if (err instanceof GrammyError) return classifyApiError(err.error_code, err.description, err.parameters);
  const inner = err instanceof HttpError ? err.error : err;
  const errno = errnoOf(inner);
  const code = errno?.code;
  const detail = `${code ?? ''}${code ? ' ' : ''}${inner instanceof Error ? inner.message : String(inner)}`.slice(0, 200);
  // A connect that timed out (ETIMEDOUT in `connect`) never sent the request either.
  const neverConnected = errno !== undefined && (NEVER_CONNECTED.has(errno.code) || CONNECT_SYSCALLS.has(errno.syscall ?? ''));
  return { kind: 'network', maybeApplied: !neverConnected, detail };
}

/**
 * True when repeating the call cannot add a second message: edits, deletes,
 * answers and settings are idempotent (a repeated edit answers "not
 * modified"); `send*` (but sendChatAction), `copyMessage(s)` and
 * `forwardMessage(s)` are not.
 */
export function isIdempotent(method: string): boolean {
  if (method === 'sendChatAction') return true;
  return !(method.startsWith('send') || method.startsWith('copyMessage') || method.startsWith('forwardMessage'));
}
