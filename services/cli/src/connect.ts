/**
 * The store and the bus of a process, opened at start with the connect timeouts of the configuration
 * (DATABASE_CONNECT_TIMEOUT_MS, NATS_CONNECT_TIMEOUT_MS). A server that cannot be reached ends the start with one
 * error naming the setting, its URL with any password hidden, and the code: CP_ERR_STORE_UNAVAILABLE for
 * DATABASE_URL, CP_ERR_BUS_UNAVAILABLE for NATS_URL (the CLI prints it as one line and exits 1: cli.ts). A login
 * PostgreSQL refuses is a setting that cannot work: CP_ERR_CONFIG_INVALID naming DATABASE_URL (exit 2).
 */
import { openBus, type Bus, type OpenBusOptions } from '@crowdplay/bus';
import type { Config } from '@crowdplay/config';
import { CrowdplayError, isCrowdplayError, type ErrorCode } from '@crowdplay/protocol';
import { openStore, type Store } from '@crowdplay/store';

/** `scheme://userinfo@` at the start of a URL: userinfo up to the authority's last `@`. */
const USERINFO_RE = /^(\s*[a-z][a-z0-9+.-]*:\/\/)([^/?#]*)@/i;
/** Schemes of NATS_URL, where a user name without a password is a token. */
const NATS_SCHEME_RE = /^\s*(nats|tls|ws|wss):/i;

/** The secret of one URL's userinfo: its password, or a NATS token; '' when none. */
function secretOf(url: string): string {
  const info = USERINFO_RE.exec(url)?.[2];
  if (info === undefined) return '';
  const colon = info.indexOf(':');
  if (colon >= 0) return info.slice(colon + 1);
  return NATS_SCHEME_RE.test(url) ? info : '';
}

/**
 * `url` (or a comma-separated list of them, as NATS_URL takes) with each password replaced by `***`, and a NATS
 * token (a user name with no password: `nats://TOKEN@host`) too. Text that is not a URL is returned as it is.
 */
export function redactUrl(url: string): string {
  return url
    .split(',')
    .map((part) => {
      const secret = secretOf(part);
      if (!secret) return part;
      return part.replace(USERINFO_RE, (_m, scheme: string, info: string) => {
        const colon = info.indexOf(':');
        return `${scheme}${colon >= 0 ? `${info.slice(0, colon)}:***` : '***'}@`;
      });
    })
    .join(',');
}

/** The secrets of `url` (passwords, NATS tokens, as written and percent-decoded), to be kept out of any text shown. */
function secretsOf(url: string): string[] {
  const out: string[] = [];
  for (const part of url.split(',')) {
    const secret = secretOf(part);
    if (!secret) continue;
    out.push(secret);
    try {
      out.push(decodeURIComponent(secret));
    } catch {
      // not percent-encoded
    }
  }
  // A secret this short would mask ordinary words of the reason (the reasons are the drivers' and name no password).
  return out.filter((v) => v.length >= 4);
}

/** `text` with every secret of `url` (passwords, NATS tokens) replaced by `***`. */
function withoutSecrets(text: string, url: string): string {
  let out = text;
  for (const secret of secretsOf(url)) out = out.split(secret).join('***');
  return out;
}

/**
 * `err` again when it is not `code`; else the same code with a message naming `setting` and its URL (redacted), the
 * reason (without the URL's secrets), and the timeout setting when the reason is a timeout.
 */
function named(err: unknown, code: ErrorCode, setting: string, url: string, timeout: [string, number]): unknown {
  if (!isCrowdplayError(err) || err.code !== code) return err;
  const cause = (err as { cause?: unknown }).cause;
  const reason = withoutSecrets(cause instanceof Error ? cause.message : err.message, url);
  const bound = /time[d ]?out/i.test(reason) ? ` (${timeout[0]}=${timeout[1]})` : '';
  return new CrowdplayError(code, [`${setting}=${redactUrl(url)}: ${reason}${bound}`], { cause: err });
}

/**
 * PostgreSQL's SQLSTATEs of a login DATABASE_URL names wrongly: 28P01 a password refused, 28000 a role that does not
 * exist or may not log in, 3D000 a database that does not exist. Retrying cannot help: the setting is wrong.
 */
const LOGIN_REFUSED = new Set(['28P01', '28000', '3D000']);

/**
 * A login PostgreSQL refused, as CP_ERR_CONFIG_INVALID naming DATABASE_URL (redacted) and the server's reason
 * (without the URL's secrets); undefined for any other error.
 */
function refusedLogin(err: unknown, url: string): CrowdplayError | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !LOGIN_REFUSED.has(code)) return undefined;
  const reason = withoutSecrets(err instanceof Error ? err.message : String(err), url);
  return new CrowdplayError('CP_ERR_CONFIG_INVALID', [`DATABASE_URL=${redactUrl(url)}: PostgreSQL refused the login: ${reason}`], {
    cause: err,
  });
}

/**
 * openStore with the configuration's database settings.
 * @throws CrowdplayError CP_ERR_STORE_UNAVAILABLE naming DATABASE_URL (redacted) when PostgreSQL cannot be reached within
 *   DATABASE_CONNECT_TIMEOUT_MS; CP_ERR_CONFIG_INVALID naming it when PostgreSQL refuses the login (a password refused,
 *   an unknown role or database); other errors (a migration) as openStore throws them
 */
export async function connectStore(config: Config, log?: (msg: string) => void): Promise<Store> {
  try {
    return await openStore({ ...config.db, ...(log ? { log } : {}) });
  } catch (err) {
    const refused = refusedLogin(err, config.db.url);
    if (refused) throw refused;
    throw named(err, 'CP_ERR_STORE_UNAVAILABLE', 'DATABASE_URL', config.db.url, [
      'DATABASE_CONNECT_TIMEOUT_MS',
      config.db.connectTimeoutMs,
    ]);
  }
}

/**
 * openBus with the configuration's bus settings.
 * @throws CrowdplayError CP_ERR_BUS_UNAVAILABLE naming NATS_URL (redacted) when no NATS server of it answers within
 *   NATS_CONNECT_TIMEOUT_MS each; other errors as openBus throws them
 */
export async function connectBus(config: Config, o: Pick<OpenBusOptions, 'name' | 'onError'>): Promise<Bus> {
  try {
    return await openBus({ natsUrl: config.bus.natsUrl, connectTimeoutMs: config.bus.connectTimeoutMs, ...o });
  } catch (err) {
    throw named(err, 'CP_ERR_BUS_UNAVAILABLE', 'NATS_URL', config.bus.natsUrl, ['NATS_CONNECT_TIMEOUT_MS', config.bus.connectTimeoutMs]);
  }
}
