/**
 * `crowdplay telegram setup`: the Bot API calls a bot operator makes once (and
 * again whenever the public address changes), straight to
 * `${TELEGRAM_API_ROOT}/bot<token>/<method>` with fetch. Not through the send
 * queue: it runs beside a live server (or with none) and opens neither the
 * database nor Redis; these calls are bot settings, outside the send ceilings.
 *
 * 1. `setWebhook`: `<public URL>/v1/telegram/webhook`, `secret_token` =
 *    TELEGRAM_WEBHOOK_SECRET, `allowed_updates` = the update types the bot
 *    reads (`BOT_UPDATE_TYPES`).
 * 2. `setMyCommands`: the bot's commands (`BOT_COMMANDS`).
 * 3. `setChatMenuButton`: the bot's default menu button, a `web_app` button
 *    opening the Mini App at `<public URL>/tg/`.
 * 4. `getWebhookInfo` and `getMe`: the check. It fails when Telegram holds
 *    another webhook URL than the one just set, or when the token's bot is not
 *    TELEGRAM_BOT_USERNAME (commands addressed to it would be ignored and the
 *    Mini App links would open another bot).
 *
 * A 429 is waited out (`parameters.retry_after`) and the call made again,
 * unless the wait would pass the deadline. Refusals before any call: a missing
 * or malformed token or secret (CP_ERR_CONFIG_INVALID), a public URL Telegram
 * cannot use (CP_ERR_TELEGRAM_PUBLIC_URL_INVALID). A call Telegram refuses
 * ends the setup with CP_ERR_TELEGRAM_SETUP_FAILED and Telegram's description.
 * The token and the secret are never printed. A tenant's own bot (`--tenant-bot <bot id>`) gets the same calls
 * with its stored token, secret and username, and its webhook path `/v1/telegram/webhook/<bot id>`.
 * Guide: docs/guides/telegram-bot.md.
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { Config } from '@crowdplay/config';
import { CrowdplayError } from '@crowdplay/protocol';
import { MINI_APP_PATH, TELEGRAM_WEBHOOK_PATH } from '@crowdplay/gateway';
import { BOT_COMMANDS, BOT_UPDATE_TYPES } from '@crowdplay/telegram-service';

/** Ports Telegram delivers webhooks to (https://core.telegram.org/bots/webhooks). */
export const TELEGRAM_WEBHOOK_PORTS: readonly number[] = [443, 80, 88, 8443];

/** The text of the bot's menu button. */
export const MENU_BUTTON_TEXT = 'Play';

/** Default of `--deadline-s`: how long the whole setup may take, 429 waits included, s. */
export const SETUP_DEADLINE_S = 60;

/** One call's longest wait for an answer, ms (the deadline still bounds it). */
const CALL_TIMEOUT_MS = 30_000;

/** Width of the method column in the printed lines. */
const COLUMN = 'setChatMenuButton'.length + 1;

export interface TelegramSetupOptions {
  /** TELEGRAM_BOT_TOKEN, TELEGRAM_WEBHOOK_SECRET, TELEGRAM_API_ROOT, TELEGRAM_BOT_USERNAME. */
  telegram: Pick<Config['telegram'], 'botToken' | 'webhookSecret' | 'apiRoot' | 'botUsername'>;
  /** `--public-url`: the https origin Telegram and the Mini App reach the gateway at (no path: the gateway serves from the root). */
  publicUrl: string | undefined;
  /** `--dry-run`: print the calls, make none. */
  dryRun?: boolean;
  /** The webhook's path on the public host (a tenant's own bot: `/v1/telegram/webhook/<bot id>`). @defaultValue TELEGRAM_WEBHOOK_PATH */
  webhookPath?: string;
  /** `--deadline-s`: the whole setup's time, 429 waits included, ms. @defaultValue 60_000 */
  deadlineMs?: number;
  /** Where each line goes. @defaultValue nothing */
  print?: (line: string) => void;
  /** @defaultValue globalThis.fetch */
  fetch?: typeof globalThis.fetch;
  /** Waits out a 429. @defaultValue node:timers/promises setTimeout */
  sleep?: (ms: number) => Promise<void>;
  /** @defaultValue Date.now */
  now?: () => number;
}

/** One Bot API call of the setup, as made (or, in a dry run, as it would be). */
export interface SetupCall {
  method: string;
  params: Record<string, unknown>;
}

export interface TelegramSetupReport {
  /** Every call succeeded and the check passed (false only when the check failed). */
  ok: boolean;
  /** The URLs set. */
  webhookUrl: string;
  miniAppUrl: string;
  /** The calls, in order (params with the secret as `<TELEGRAM_WEBHOOK_SECRET>`). */
  calls: SetupCall[];
  /** What the check found wrong (empty when ok). */
  problems: string[];
  /** Worth knowing, not wrong (a delivery error, the bot unable to join groups). */
  warnings: string[];
  /** getWebhookInfo's and getMe's results (undefined in a dry run). */
  webhookInfo?: Record<string, unknown>;
  me?: Record<string, unknown>;
}

/** The secret_token Telegram accepts: 1–256 characters of A-Z a-z 0-9 _ -. */
const SECRET_RE = /^[A-Za-z0-9_-]{1,256}$/;

/** Host names Telegram cannot reach from the internet. */
function unreachableHost(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  const v4 = /^(\d{1,3})\.(\d{1,3})\.\d{1,3}\.\d{1,3}$/.exec(h);
  if (v4) {
    const a = Number(v4[1]);
    const b = Number(v4[2]);
    return a === 0 || a === 10 || a === 127 || (a === 169 && b === 254) || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168);
  }
  return h === '::' || h === '::1' || /^f[cd][0-9a-f]{2}:/.test(h) || /^fe[89ab][0-9a-f]:/.test(h);
}

/**
 * The public base URL: an https origin (a trailing slash dropped). No path: the Mini App loads `/tg/app.js` and
 * connects to `/v1/ws` from the root of its host, so the gateway cannot sit under a path prefix.
 * @throws CrowdplayError CP_ERR_TELEGRAM_PUBLIC_URL_INVALID: absent, not a URL, not https, a port Telegram does not
 *   deliver to, credentials, a path, a query or fragment, or a host that is not public
 */
export function publicBaseUrl(raw: string | undefined): string {
  const refuse = (why: string): never => {
    throw new CrowdplayError('CP_ERR_TELEGRAM_PUBLIC_URL_INVALID', [raw ?? '', why]);
  };
  if (raw === undefined || raw.trim() === '')
    return refuse('give --public-url https://<host>, the address Telegram reaches the gateway at');
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return refuse('not a URL; give https://<host>');
  }
  if (u.protocol !== 'https:') return refuse('Telegram delivers webhooks and opens Mini Apps over https:// only');
  const port = u.port === '' ? 443 : Number(u.port);
  if (!TELEGRAM_WEBHOOK_PORTS.includes(port)) return refuse(`Telegram delivers webhooks to ports 443, 80, 88 or 8443 only, not ${port}`);
  if (u.username !== '' || u.password !== '') return refuse('no user or password in it: the webhook is secured by TELEGRAM_WEBHOOK_SECRET');
  if (u.search !== '' || u.hash !== '') return refuse('no query or fragment: it is the base the webhook and Mini App paths are added to');
  if (u.pathname !== '/')
    return refuse('no path: the gateway serves the webhook, the Mini App and its WebSocket (/v1/ws) from the root of the host');
  if (unreachableHost(u.hostname)) return refuse(`${u.hostname} is not reachable from the internet, and Telegram must reach it`);
  return u.origin;
}

/** The shape of a Bot API token: the bot's numeric id, a colon, then the secret part. */
const BOT_TOKEN_RE = /^\d{1,20}:[A-Za-z0-9_-]{1,200}$/;

/**
 * Checks the token and secret.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID naming each missing or malformed one
 */
function checkCredentials(t: TelegramSetupOptions['telegram']): void {
  const errors: string[] = [];
  if (!t.botToken)
    errors.push('TELEGRAM_BOT_TOKEN: not set; it is the token @BotFather gave the bot (/newbot), and every Bot API call needs it');
  else if (!BOT_TOKEN_RE.test(t.botToken))
    errors.push("TELEGRAM_BOT_TOKEN: not a bot token (@BotFather's are <bot id>:<letters, digits, _ and ->); not sent anywhere");
  if (!t.webhookSecret)
    errors.push("TELEGRAM_WEBHOOK_SECRET: not set; it is setWebhook's secret_token, which the webhook checks on every update");
  else if (!SECRET_RE.test(t.webhookSecret))
    errors.push('TELEGRAM_WEBHOOK_SECRET: Telegram accepts 1-256 characters of A-Z, a-z, 0-9, _ and - as secret_token');
  if (errors.length > 0) throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [errors.join('\n')]);
}

const col = (method: string): string => method.padEnd(COLUMN);

/**
 * Runs the setup (see the module doc).
 * @returns the report; `ok` false when the check found the webhook or the bot not as configured
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID, CP_ERR_TELEGRAM_PUBLIC_URL_INVALID (nothing called);
 *   CP_ERR_TELEGRAM_SETUP_FAILED (a call refused, no answer, or a 429 wait past the deadline: the calls before it stay made)
 */
export async function telegramSetup(o: TelegramSetupOptions): Promise<TelegramSetupReport> {
  const t = o.telegram;
  // The command's own flag first: a user who left it out learns that before what the environment lacks.
  const base = publicBaseUrl(o.publicUrl);
  checkCredentials(t);
  const print = o.print ?? ((): void => {});
  const now = o.now ?? Date.now;
  const sleep = o.sleep ?? ((ms: number) => delay(ms));
  const fetchFn = o.fetch ?? globalThis.fetch;
  const deadlineMs = o.deadlineMs ?? SETUP_DEADLINE_S * 1_000;
  const apiRoot = t.apiRoot.replace(/\/+$/, '');
  const webhookUrl = `${base}${o.webhookPath ?? TELEGRAM_WEBHOOK_PATH}`;
  const miniAppUrl = `${base}${MINI_APP_PATH}`;
  const allowedUpdates = [...BOT_UPDATE_TYPES];
  const commands = BOT_COMMANDS.map((c) => ({ command: c.command, description: c.description }));
  const menuButton = { type: 'web_app', text: MENU_BUTTON_TEXT, web_app: { url: miniAppUrl } };
  const SECRET = '<TELEGRAM_WEBHOOK_SECRET>';

  const plan: SetupCall[] = [
    { method: 'setWebhook', params: { url: webhookUrl, secret_token: SECRET, allowed_updates: allowedUpdates } },
    { method: 'setMyCommands', params: { commands } },
    { method: 'setChatMenuButton', params: { menu_button: menuButton } },
    { method: 'getWebhookInfo', params: {} },
    { method: 'getMe', params: {} },
  ];
  const report: TelegramSetupReport = { ok: true, webhookUrl, miniAppUrl, calls: plan, problems: [], warnings: [] };

  if (o.dryRun) {
    print(`dry run: nothing is sent; each call would be a POST to ${apiRoot}/bot<TELEGRAM_BOT_TOKEN>/<method> with this JSON body`);
    for (const c of plan) print(`${col(c.method)}${JSON.stringify(c.params)}`);
    return report;
  }

  const deadlineAt = now() + deadlineMs;
  const redact = (s: string): string => s.split(t.botToken).join('<TELEGRAM_BOT_TOKEN>');
  const failed = (method: string, why: string, cause?: unknown): CrowdplayError =>
    new CrowdplayError('CP_ERR_TELEGRAM_SETUP_FAILED', [method, redact(why)], cause === undefined ? undefined : { cause });

  /** One Bot API call; a 429 is waited out within the deadline. */
  const call = async (method: string, params: Record<string, unknown>): Promise<unknown> => {
    const body = JSON.stringify(params.secret_token === SECRET ? { ...params, secret_token: t.webhookSecret } : params);
    for (;;) {
      const left = deadlineAt - now();
      if (left <= 0) throw failed(method, `not made: the deadline of ${deadlineMs / 1_000} s (--deadline-s) passed`);
      let res: Response;
      try {
        res = await fetchFn(`${apiRoot}/bot${t.botToken}/${method}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
          signal: AbortSignal.timeout(Math.min(CALL_TIMEOUT_MS, left)),
        });
      } catch (err) {
        const e = err as { name?: string; message?: string; cause?: { code?: string; message?: string } };
        const why =
          e.name === 'TimeoutError'
            ? `no answer from ${apiRoot} within ${Math.round(Math.min(CALL_TIMEOUT_MS, left) / 1_000)} s`
            : `no answer from ${apiRoot} (${e.cause?.code ?? e.cause?.message ?? e.message ?? String(err)})`;
        throw failed(method, why, err);
      }
      const text = await res.text().catch(() => '');
      let answer: { ok?: unknown; result?: unknown; error_code?: unknown; description?: unknown; parameters?: { retry_after?: unknown } };
      try {
        answer = JSON.parse(text) as typeof answer;
      } catch {
        throw failed(method, `HTTP ${res.status} from ${apiRoot}, not a Bot API answer (is TELEGRAM_API_ROOT right?)`);
      }
      if (answer.ok === true) return answer.result;
      const description = typeof answer.description === 'string' ? answer.description : `HTTP ${res.status}`;
      const retryAfter = answer.parameters?.retry_after;
      if (answer.error_code === 429 && typeof retryAfter === 'number' && Number.isFinite(retryAfter) && retryAfter > 0) {
        const waitMs = retryAfter * 1_000;
        if (now() + waitMs > deadlineAt)
          throw failed(
            method,
            `${description} (waiting ${retryAfter} s would pass the deadline of ${deadlineMs / 1_000} s; see --deadline-s)`,
          );
        print(`${col(method)}429 ${description}: waiting ${retryAfter} s`);
        await sleep(waitMs);
        continue;
      }
      throw failed(method, `Telegram answered ${typeof answer.error_code === 'number' ? answer.error_code : res.status} ${description}`);
    }
  };

  await call('setWebhook', plan[0]!.params);
  print(`${col('setWebhook')}ok  ${webhookUrl}, allowed_updates ${allowedUpdates.join(',')}, secret_token from TELEGRAM_WEBHOOK_SECRET`);
  await call('setMyCommands', plan[1]!.params);
  print(`${col('setMyCommands')}ok  ${commands.map((c) => `/${c.command}`).join(' ')}`);
  await call('setChatMenuButton', plan[2]!.params);
  print(`${col('setChatMenuButton')}ok  web_app "${MENU_BUTTON_TEXT}" opens ${miniAppUrl}`);

  const info = ((await call('getWebhookInfo', {})) ?? {}) as Record<string, unknown>;
  report.webhookInfo = info;
  const parts: string[] = [];
  if (info.url === webhookUrl) parts.push('url matches');
  else {
    parts.push(`url is "${String(info.url)}", not ${webhookUrl}`);
    report.problems.push(
      `Telegram holds the webhook "${String(info.url)}", not ${webhookUrl}: something else set it since (another deployment or tool with this token?)`,
    );
  }
  parts.push(`pending_update_count ${String(info.pending_update_count ?? 0)}`);
  if (typeof info.last_error_message === 'string' && info.last_error_message !== '') {
    const at = typeof info.last_error_date === 'number' ? ` at ${new Date(info.last_error_date * 1_000).toISOString()}` : '';
    parts.push(`last_error_message "${info.last_error_message}"${at}`);
    report.warnings.push(
      `Telegram's last delivery to the webhook failed${at}: ${info.last_error_message} (a 401 means the server's TELEGRAM_WEBHOOK_SECRET differs)`,
    );
  } else parts.push('no delivery error');
  print(`${col('getWebhookInfo')}ok  ${parts.join(', ')}`);

  const me = ((await call('getMe', {})) ?? {}) as Record<string, unknown>;
  report.me = me;
  const username = typeof me.username === 'string' ? me.username : '';
  const meParts = [`@${username} (id ${String(me.id)})`];
  if (username.toLowerCase() === t.botUsername.toLowerCase()) meParts.push('matches TELEGRAM_BOT_USERNAME');
  else {
    meParts.push(`not TELEGRAM_BOT_USERNAME=${t.botUsername}`);
    report.problems.push(
      `the token is @${username}'s, but TELEGRAM_BOT_USERNAME is ${t.botUsername}: commands addressed to @${username} would be ignored and Mini App links would open t.me/${t.botUsername}; set TELEGRAM_BOT_USERNAME=${username}`,
    );
  }
  meParts.push(me.can_read_all_group_messages === true ? 'privacy mode off' : 'privacy mode on');
  if (me.can_join_groups === false) {
    meParts.push('cannot join groups');
    report.warnings.push('the bot cannot be added to groups: allow it with @BotFather /setjoingroups');
  }
  print(`${col('getMe')}ok  ${meParts.join(', ')}`);

  for (const w of report.warnings) print(`warning: ${w}`);
  for (const p of report.problems) print(`problem: ${p}`);
  report.ok = report.problems.length === 0;
  print(report.ok ? 'telegram setup: done' : `telegram setup: the check failed (${report.problems.length} problem(s))`);
  return report;
}
