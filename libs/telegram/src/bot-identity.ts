/**
 * Who a bot token belongs to, asked of Telegram: `getMe` at
 * `${TELEGRAM_API_ROOT}/bot<token>/getMe`, straight with fetch (a bot being
 * registered has no send queue yet; getMe is outside the send ceilings).
 * The token never appears in an error or a log line this module writes.
 */
import { CrowdplayError } from '@crowdplay/protocol';

/** A bot token's shape: Telegram's bot id, a colon, the secret part. */
const TOKEN_RE = /^([1-9]\d{0,15}):[A-Za-z0-9_-]{1,200}$/;

/** The secret_token setWebhook accepts (1–256 characters of A-Z a-z 0-9 _ -). */
export const WEBHOOK_SECRET_RE = /^[A-Za-z0-9_-]{1,256}$/;

/** A bot as getMe describes it. */
export interface BotIdentity {
  /** Telegram's id of the bot (also the token's number before the colon). */
  id: number;
  username: string;
}

/** The bot id a token names (the number before its colon), or null when it is not shaped like a bot token. */
export function botIdOfToken(token: string): number | null {
  const m = TOKEN_RE.exec(token);
  return m ? Number(m[1]) : null;
}

/**
 * Asks Telegram who the token's bot is (getMe).
 * @param opts.timeoutMs the longest wait for the answer @defaultValue 10_000
 * @throws CrowdplayError CP_ERR_TELEGRAM_BOT_REJECTED: a string not shaped like a token, Telegram refusing it
 *   (401: revoked or mistyped), or a bot id other than the token's; CP_ERR_TELEGRAM_UNREACHABLE (retryable): no
 *   answer within `timeoutMs`, or an answer that is not the Bot API's (the token was not judged)
 */
export async function fetchBotIdentity(
  apiRoot: string,
  token: string,
  opts: { fetch?: typeof globalThis.fetch; timeoutMs?: number } = {},
): Promise<BotIdentity> {
  const expected = botIdOfToken(token);
  if (expected === null) throw new CrowdplayError('CP_ERR_TELEGRAM_BOT_REJECTED', ['not shaped like a bot token (<digits>:<letters>)']);
  const root = apiRoot.replace(/\/+$/, '');
  let res: Response;
  try {
    res = await (opts.fetch ?? globalThis.fetch)(`${root}/bot${token}/getMe`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
      signal: AbortSignal.timeout(opts.timeoutMs ?? 10_000),
    });
  } catch (err) {
    const e = err as { name?: string; cause?: { code?: string } };
    throw new CrowdplayError(
      'CP_ERR_TELEGRAM_UNREACHABLE',
      [`getMe got no answer from ${root} (${e.name === 'TimeoutError' ? 'timeout' : (e.cause?.code ?? e.name ?? 'error')})`],
      // The cause is left out: fetch's errors name the URL, and the URL holds the token.
    );
  }
  const text = await res.text().catch(() => '');
  let answer: {
    ok?: unknown;
    result?: { id?: unknown; username?: unknown; is_bot?: unknown };
    error_code?: unknown;
    description?: unknown;
  };
  try {
    answer = JSON.parse(text) as typeof answer;
  } catch {
    throw new CrowdplayError('CP_ERR_TELEGRAM_UNREACHABLE', [`getMe: HTTP ${res.status} from ${root}, not a Bot API answer`]);
  }
  if (answer.ok !== true) {
    const code = typeof answer.error_code === 'number' ? answer.error_code : res.status;
    const description = typeof answer.description === 'string' ? answer.description.slice(0, 200) : 'no description';
    throw new CrowdplayError('CP_ERR_TELEGRAM_BOT_REJECTED', [`getMe answered ${code} ${description}`]);
  }
  const r = answer.result ?? {};
  if (r.id !== expected || typeof r.username !== 'string' || !/^[A-Za-z0-9_]{1,64}$/.test(r.username))
    throw new CrowdplayError('CP_ERR_TELEGRAM_BOT_REJECTED', [`getMe described bot ${String(r.id)}, not the token's ${expected}`]);
  return { id: expected, username: r.username };
}
