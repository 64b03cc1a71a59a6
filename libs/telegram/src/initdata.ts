/**
 * Mini App initData: verification exactly as Telegram documents it
 * (https://core.telegram.org/bots/webapps#validating-data-received-via-the-mini-app),
 * the newer Ed25519 third-party signature
 * (https://core.telegram.org/bots/webapps#validating-data-for-third-party-use),
 * and signing helpers for tests and load runs.
 *
 * HMAC (first party, needs the bot token):
 *
 *     secret_key        = HMAC_SHA256(key = "WebAppData", message = bot_token)
 *     data_check_string = every received field except `hash`, sorted by key,
 *                         `key=value` (value URL-decoded), joined by "\n"
 *     valid             = hex(HMAC_SHA256(key = secret_key, message = data_check_string)) == hash
 *
 * Ed25519 (third party, needs only the bot id):
 *
 *     data_check_string = `${bot_id}:WebAppData\n` + every field except `hash`
 *                         and `signature`, sorted, `key=value`, joined by "\n"
 *     valid             = Ed25519.verify(telegram_public_key, data_check_string,
 *                                        base64url_decode(signature))
 *
 * Both comparisons are constant time (crypto.timingSafeEqual on equal-length
 * buffers; Ed25519 verification does not branch on secret data). After the
 * signature, `auth_date` must be no older than `maxAgeS`
 * (TELEGRAM_INITDATA_MAX_AGE_S) and no more than {@link AUTH_DATE_SKEW_S}
 * ahead of this server's clock.
 */
import {
  createHmac,
  createPrivateKey,
  createPublicKey,
  sign as edSign,
  timingSafeEqual,
  verify as edVerify,
  type KeyObject,
} from 'node:crypto';
import { CrowdplayError } from '@crowdplay/protocol';

/**
 * Telegram's Ed25519 public keys for third-party validation, hex of the raw
 * 32 bytes, as published at
 * https://core.telegram.org/bots/webapps#validating-data-for-third-party-use .
 */
export const TELEGRAM_ED25519_PUBLIC_KEYS = {
  production: 'e7bf03a2fa4602af4580703d88dda5bb59f32ed8b02a56c187fe7d34caed242d',
  test: '40055058a4ee38156a06562e52eece92a771bcd8346a8c4615cb7376eddf72ec',
} as const;
export type TelegramEnvironment = keyof typeof TELEGRAM_ED25519_PUBLIC_KEYS;

/** Longest initData accepted, characters (Telegram's are ~0.5–2 KB; this bounds parsing work). */
export const INITDATA_MAX_CHARS = 8_192;
/** How far `auth_date` may be ahead of this server's clock, seconds (clock skew). */
export const AUTH_DATE_SKEW_S = 60;

/** The Mini App user (https://core.telegram.org/bots/webapps#webappuser). */
export interface WebAppUser {
  id: number;
  is_bot?: boolean;
  first_name: string;
  last_name?: string;
  username?: string;
  language_code?: string;
  is_premium?: boolean;
  added_to_attachment_menu?: boolean;
  allows_write_to_pm?: boolean;
  photo_url?: string;
}

/** The chat (https://core.telegram.org/bots/webapps#webappchat): only for attachment-menu launches. */
export interface WebAppChat {
  id: number;
  type: 'group' | 'supergroup' | 'channel';
  title: string;
  username?: string;
  photo_url?: string;
}

/** Verified initData (https://core.telegram.org/bots/webapps#webappinitdata), with Telegram's field names. */
export interface InitData {
  query_id?: string;
  user?: WebAppUser;
  receiver?: WebAppUser;
  chat?: WebAppChat;
  /** `sender`, `private`, `group`, `supergroup` or `channel`. */
  chat_type?: string;
  /** Global identifier of the chat the app was opened from (not the chat id). */
  chat_instance?: string;
  /** The `startapp` parameter of the link that opened the app (user-choosable: see {@link chatFromStartParam}). */
  start_param?: string;
  /** Unix seconds. */
  can_send_after?: number;
  /** Unix seconds when the app was opened. */
  auth_date: number;
  hash?: string;
  signature?: string;
  /** Every received field, URL-decoded (including `hash` and `signature`). */
  fields: Readonly<Record<string, string>>;
  /** Which checks passed. */
  verifiedBy: VerifyMethod;
}

/** `hash`: HMAC with the bot token; `signature`: Telegram's Ed25519; `both`: each must be present and valid. */
export type VerifyMethod = 'hash' | 'signature' | 'both';

export interface VerifyInitDataOptions {
  /** Needed for `hash` (and, unless `botId` is given, for the bot id of `signature`). */
  botToken?: string;
  /** Bot id for the Ed25519 data-check-string; default: the digits before ':' in `botToken`. */
  botId?: number;
  /** Default: `hash` when `botToken` is set, else `signature`. */
  method?: VerifyMethod;
  /** Ed25519 key: Telegram's `production` (default) or `test` key, or a raw 32-byte key / KeyObject (tests). */
  publicKey?: TelegramEnvironment | Uint8Array | KeyObject;
  /** TELEGRAM_INITDATA_MAX_AGE_S, seconds. */
  maxAgeS: number;
  /** Clock, ms since the epoch (default Date.now()). */
  nowMs?: number;
}

const keyCache = new Map<string, KeyObject>();

/**
 * An Ed25519 public KeyObject from its raw 32 bytes (RFC 8032), through
 * the JWK form (`kty: OKP`, `crv: Ed25519`, `x` = base64url of the bytes).
 * @throws RangeError unless `raw` is 32 bytes
 */
export function ed25519PublicKeyFromRaw(raw: Uint8Array): KeyObject {
  if (raw.length !== 32) throw new RangeError(`an Ed25519 public key is 32 bytes, got ${raw.length}`);
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(raw).toString('base64url') }, format: 'jwk' });
}

function resolvePublicKey(k: VerifyInitDataOptions['publicKey']): { key: KeyObject; label: string } {
  if (k === undefined || typeof k === 'string') {
    const env = k ?? 'production';
    let key = keyCache.get(env);
    if (!key) {
      key = ed25519PublicKeyFromRaw(Buffer.from(TELEGRAM_ED25519_PUBLIC_KEYS[env], 'hex'));
      keyCache.set(env, key);
    }
    return { key, label: env };
  }
  if (k instanceof Uint8Array) return { key: ed25519PublicKeyFromRaw(k), label: 'given' };
  return { key: k, label: 'given' };
}

/** The bot id of a token `123456:ABC…` (the digits before ':'), or undefined. */
export function botIdFromToken(botToken: string): number | undefined {
  const m = /^(\d{1,20}):/.exec(botToken);
  if (!m) return undefined;
  const id = Number(m[1]);
  return Number.isSafeInteger(id) ? id : undefined;
}

/**
 * Parses an initData query string into its URL-decoded fields, in received
 * order (application/x-www-form-urlencoded, as URLSearchParams reads it).
 * @throws CrowdplayError CP_ERR_INITDATA_MALFORMED: empty, longer than
 *   {@link INITDATA_MAX_CHARS}, or a field given twice (which copy the
 *   signature covers would be ambiguous)
 */
export function parseInitDataFields(raw: string): Map<string, string> {
  if (typeof raw !== 'string' || raw.length === 0) throw new CrowdplayError('CP_ERR_INITDATA_MALFORMED', ['empty']);
  if (raw.length > INITDATA_MAX_CHARS)
    throw new CrowdplayError('CP_ERR_INITDATA_MALFORMED', [`longer than ${INITDATA_MAX_CHARS} characters`]);
  const out = new Map<string, string>();
  for (const [k, v] of new URLSearchParams(raw)) {
    if (k === '') throw new CrowdplayError('CP_ERR_INITDATA_MALFORMED', ['a field with an empty name']);
    if (out.has(k)) throw new CrowdplayError('CP_ERR_INITDATA_MALFORMED', [`field ${k} given twice`]);
    out.set(k, v);
  }
  return out;
}

const byKey = (a: [string, string], b: [string, string]): number => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);

/** Telegram's data-check-string: the fields except `exclude`, sorted by key (code-unit order), `key=value`, joined by "\n". */
export function dataCheckString(fields: ReadonlyMap<string, string>, exclude: readonly string[]): string {
  return [...fields]
    .filter(([k]) => !exclude.includes(k))
    .sort(byKey)
    .map(([k, v]) => `${k}=${v}`)
    .join('\n');
}

/** HMAC_SHA256(key = "WebAppData", message = bot_token): the key the initData hash is made with. */
export function webAppSecretKey(botToken: string): Buffer {
  return createHmac('sha256', 'WebAppData').update(botToken).digest();
}

function hmacHex(botToken: string, dcs: string): string {
  return createHmac('sha256', webAppSecretKey(botToken)).update(dcs).digest('hex');
}

function checkHash(fields: ReadonlyMap<string, string>, botToken: string): void {
  const hash = fields.get('hash');
  if (hash === undefined || hash === '') throw new CrowdplayError('CP_ERR_INITDATA_MISSING_FIELD', ['hash']);
  const expected = createHmac('sha256', webAppSecretKey(botToken))
    .update(dataCheckString(fields, ['hash']))
    .digest();
  // A hash that is not 64 hex digits cannot match; its length is not secret.
  const given = /^[0-9a-fA-F]{64}$/.test(hash) ? Buffer.from(hash, 'hex') : Buffer.alloc(0);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw new CrowdplayError('CP_ERR_INITDATA_BAD_HASH');
}

function checkSignature(fields: ReadonlyMap<string, string>, botId: number, publicKey: VerifyInitDataOptions['publicKey']): void {
  const sig = fields.get('signature');
  if (sig === undefined || sig === '') throw new CrowdplayError('CP_ERR_INITDATA_MISSING_FIELD', ['signature']);
  const { key, label } = resolvePublicKey(publicKey);
  const bytes = /^[A-Za-z0-9_-]+={0,2}$/.test(sig) ? Buffer.from(sig, 'base64url') : Buffer.alloc(0);
  const message = Buffer.from(`${botId}:WebAppData\n${dataCheckString(fields, ['hash', 'signature'])}`);
  if (bytes.length !== 64 || !edVerify(null, message, key, bytes))
    throw new CrowdplayError('CP_ERR_INITDATA_BAD_SIGNATURE', [botId, label]);
}

function parseJson<T>(fields: ReadonlyMap<string, string>, name: string, check: (v: unknown) => v is T): T | undefined {
  const s = fields.get(name);
  if (s === undefined) return undefined;
  let v: unknown;
  try {
    v = JSON.parse(s);
  } catch {
    throw new CrowdplayError('CP_ERR_INITDATA_MALFORMED', [`${name} is not JSON`]);
  }
  if (!check(v))
    throw new CrowdplayError('CP_ERR_INITDATA_MALFORMED', [`${name} is not a valid ${name === 'chat' ? 'WebAppChat' : 'WebAppUser'}`]);
  return v;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isUser = (v: unknown): v is WebAppUser => isRecord(v) && Number.isSafeInteger(v.id) && typeof v.first_name === 'string';
const isChat = (v: unknown): v is WebAppChat =>
  isRecord(v) &&
  Number.isSafeInteger(v.id) &&
  typeof v.title === 'string' &&
  (v.type === 'group' || v.type === 'supergroup' || v.type === 'channel');

function unixSeconds(fields: ReadonlyMap<string, string>, name: string): number | undefined {
  const s = fields.get(name);
  if (s === undefined) return undefined;
  if (!/^\d{1,12}$/.test(s)) throw new CrowdplayError('CP_ERR_INITDATA_MALFORMED', [`${name} is not a unix time: ${s.slice(0, 32)}`]);
  return Number(s);
}

/**
 * Verifies Mini App initData and returns its typed fields.
 *
 * Order: parse → signature(s) (`method`) → `auth_date` freshness → JSON
 * fields. Nothing is trusted before the signature passed.
 *
 * @param raw `Telegram.WebApp.initData`, the query string as received
 * @throws CrowdplayError
 *   CP_ERR_INITDATA_MALFORMED (empty, too long, duplicate field, bad JSON or unix time),
 *   CP_ERR_INITDATA_MISSING_FIELD (`hash`, `signature` or `auth_date` absent),
 *   CP_ERR_INITDATA_BAD_HASH (altered, or signed with another bot token),
 *   CP_ERR_INITDATA_BAD_SIGNATURE (Ed25519 signature fails for this bot id and key),
 *   CP_ERR_INITDATA_EXPIRED (`auth_date` older than `maxAgeS`),
 *   CP_ERR_INITDATA_FUTURE (`auth_date` more than {@link AUTH_DATE_SKEW_S} ahead);
 *   RangeError when the options cannot check anything (no token for `hash`, no bot id for `signature`)
 */
export function verifyInitData(raw: string, opts: VerifyInitDataOptions): InitData {
  const method: VerifyMethod = opts.method ?? (opts.botToken ? 'hash' : 'signature');
  if ((method === 'hash' || method === 'both') && !opts.botToken) throw new RangeError('verifyInitData: method "hash" needs botToken');
  const botId = opts.botId ?? (opts.botToken ? botIdFromToken(opts.botToken) : undefined);
  if ((method === 'signature' || method === 'both') && botId === undefined)
    throw new RangeError('verifyInitData: method "signature" needs botId');
  if (!(Number.isFinite(opts.maxAgeS) && opts.maxAgeS > 0)) throw new RangeError(`maxAgeS must be > 0, got ${opts.maxAgeS}`);

  const fields = parseInitDataFields(raw);
  if (method === 'hash' || method === 'both') checkHash(fields, opts.botToken!);
  if (method === 'signature' || method === 'both') checkSignature(fields, botId!, opts.publicKey);

  const authDate = unixSeconds(fields, 'auth_date');
  if (authDate === undefined) throw new CrowdplayError('CP_ERR_INITDATA_MISSING_FIELD', ['auth_date']);
  const nowS = Math.floor((opts.nowMs ?? Date.now()) / 1000);
  if (authDate - nowS > AUTH_DATE_SKEW_S) throw new CrowdplayError('CP_ERR_INITDATA_FUTURE', [authDate - nowS]);
  if (nowS - authDate > opts.maxAgeS) throw new CrowdplayError('CP_ERR_INITDATA_EXPIRED', [nowS - authDate, opts.maxAgeS]);

  const data: InitData = { auth_date: authDate, fields: Object.freeze(Object.fromEntries(fields)), verifiedBy: method };
  const str = (k: 'query_id' | 'chat_type' | 'chat_instance' | 'start_param' | 'hash' | 'signature'): void => {
    const v = fields.get(k);
    if (v !== undefined) data[k] = v;
  };
  for (const k of ['query_id', 'chat_type', 'chat_instance', 'start_param', 'hash', 'signature'] as const) str(k);
  const user = parseJson(fields, 'user', isUser);
  if (user) data.user = user;
  const receiver = parseJson(fields, 'receiver', isUser);
  if (receiver) data.receiver = receiver;
  const chat = parseJson(fields, 'chat', isChat);
  if (chat) data.chat = chat;
  const canSendAfter = unixSeconds(fields, 'can_send_after');
  if (canSendAfter !== undefined) data.can_send_after = canSendAfter;
  return data;
}

// ---------------------------------------------------------------------------
// Signing (tests and load runs)

/** Fields to sign: strings as they are, objects (user, chat) JSON-serialised, numbers as decimal. */
export type InitDataInput = Record<string, string | number | object | undefined>;

export interface SignInitDataOptions {
  /** Adds `hash` (HMAC with this token). */
  botToken?: string;
  /** Adds `signature` (Ed25519 with this private key) for `botId` (default: from `botToken`). */
  ed25519?: { privateKey: KeyObject; botId?: number };
}

/**
 * Builds initData as a Telegram client would: fields URL-encoded with
 * encodeURIComponent, `signature` (when `ed25519` is given) computed first
 * over the fields without it, then `hash` (when `botToken` is given) over
 * every field including `signature` — the order Telegram's own data has.
 * `auth_date` defaults to now (unix seconds).
 * @throws RangeError when neither key is given, or no bot id for Ed25519
 */
export function signInitData(input: InitDataInput, opts: SignInitDataOptions): string {
  if (!opts.botToken && !opts.ed25519) throw new RangeError('signInitData: give botToken and/or ed25519');
  const fields = new Map<string, string>();
  for (const [k, v] of Object.entries(input)) {
    if (v === undefined || k === 'hash' || k === 'signature') continue;
    fields.set(k, typeof v === 'string' ? v : typeof v === 'number' ? String(v) : JSON.stringify(v));
  }
  if (!fields.has('auth_date')) fields.set('auth_date', String(Math.floor(Date.now() / 1000)));
  if (opts.ed25519) {
    const botId = opts.ed25519.botId ?? (opts.botToken ? botIdFromToken(opts.botToken) : undefined);
    if (botId === undefined) throw new RangeError('signInitData: ed25519 needs botId');
    const msg = Buffer.from(`${botId}:WebAppData\n${dataCheckString(fields, [])}`);
    fields.set('signature', edSign(null, msg, opts.ed25519.privateKey).toString('base64url'));
  }
  if (opts.botToken) fields.set('hash', hmacHex(opts.botToken, dataCheckString(fields, [])));
  return [...fields].map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&');
}

/** PKCS#8 DER prefix of an Ed25519 private key (RFC 8410 §7) before its 32-byte seed. */
const ED25519_PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');

/**
 * A deterministic Ed25519 key pair from a 32-byte seed (tests and load
 * runs: the stub-side signer and the verifier derive the same pair).
 * `publicKeyRaw` is the 32 raw bytes to pass as `publicKey`.
 * @throws RangeError unless `seed` is 32 bytes
 */
export function ed25519KeyPairFromSeed(seed: Uint8Array): { privateKey: KeyObject; publicKey: KeyObject; publicKeyRaw: Buffer } {
  if (seed.length !== 32) throw new RangeError(`an Ed25519 seed is 32 bytes, got ${seed.length}`);
  const privateKey = createPrivateKey({ key: Buffer.concat([ED25519_PKCS8_PREFIX, seed]), format: 'der', type: 'pkcs8' });
  const publicKey = createPublicKey(privateKey);
  const jwk = publicKey.export({ format: 'jwk' });
  return { privateKey, publicKey, publicKeyRaw: Buffer.from(String(jwk.x), 'base64url') };
}

/** The test key pair (seed: 32 bytes of 0x42). Never Telegram's: data it signs verifies only with `publicKey: TEST_ED25519.publicKeyRaw`. */
export const TEST_ED25519 = ed25519KeyPairFromSeed(Buffer.alloc(32, 0x42));

// ---------------------------------------------------------------------------
// Start parameters: the chat a player acts on, signed by the bot

const START_PARAM_VERSION = 1;
const START_PARAM_MAC_BYTES = 16;
/** Telegram's rule for `startapp` (https://core.telegram.org/bots/webapps#direct-link-mini-apps): up to 64 of [A-Za-z0-9_-]. */
export const START_PARAM_RE = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * The secret start parameters are signed with, derived from the bot token
 * (HMAC_SHA256(key = "crowdplay-startapp", message = bot_token)): rotating
 * the token invalidates every link the bot posted, so it re-issues them.
 */
export function startParamSecret(botToken: string): Buffer {
  return createHmac('sha256', 'crowdplay-startapp').update(botToken).digest();
}

function startParamMac(body: Buffer, secret: string | Uint8Array): Buffer {
  return createHmac('sha256', secret).update(body).digest().subarray(0, START_PARAM_MAC_BYTES);
}

/**
 * The `startapp` parameter the bot puts in its link to the Mini App for
 * `chatId`: base64url(version byte 1 ‖ chatId as int64 big-endian ‖ first
 * 16 bytes of HMAC_SHA256(secret, version ‖ chatId)) = 25 bytes = 34
 * characters of [A-Za-z0-9_-] (Telegram allows 64).
 *
 * A user can open the app with any `startapp` they type, and Telegram signs
 * it into initData all the same; only the MAC makes it the bot's word.
 * @param chatId Telegram chat id (negative for groups), a safe integer
 * @param secret see {@link startParamSecret}
 * @throws RangeError unless `chatId` is a safe integer
 */
export function startParamFor(chatId: number, secret: string | Uint8Array): string {
  if (!Number.isSafeInteger(chatId)) throw new RangeError(`chatId must be a safe integer, got ${chatId}`);
  const body = Buffer.alloc(9);
  body.writeUInt8(START_PARAM_VERSION, 0);
  body.writeBigInt64BE(BigInt(chatId), 1);
  return Buffer.concat([body, startParamMac(body, secret)]).toString('base64url');
}

/**
 * The chat id a start parameter was issued for.
 * @throws CrowdplayError CP_ERR_INITDATA_BAD_START_PARAM when the parameter
 *   is not one {@link startParamFor} made with this secret (wrong shape,
 *   version, or MAC; MAC compared in constant time)
 */
export function chatFromStartParam(param: string, secret: string | Uint8Array): number {
  const shown = String(param).slice(0, 64);
  if (!START_PARAM_RE.test(param)) throw new CrowdplayError('CP_ERR_INITDATA_BAD_START_PARAM', [shown]);
  const bytes = Buffer.from(param, 'base64url');
  if (bytes.length !== 9 + START_PARAM_MAC_BYTES || bytes.readUInt8(0) !== START_PARAM_VERSION)
    throw new CrowdplayError('CP_ERR_INITDATA_BAD_START_PARAM', [shown]);
  const body = bytes.subarray(0, 9);
  if (!timingSafeEqual(bytes.subarray(9), startParamMac(body, secret)))
    throw new CrowdplayError('CP_ERR_INITDATA_BAD_START_PARAM', [shown]);
  const id = body.readBigInt64BE(1);
  if (id > BigInt(Number.MAX_SAFE_INTEGER) || id < BigInt(Number.MIN_SAFE_INTEGER))
    throw new CrowdplayError('CP_ERR_INITDATA_BAD_START_PARAM', [shown]);
  return Number(id);
}

/** A verified Mini App session: who, and on which chat. */
export interface MiniAppSession {
  user: WebAppUser;
  chatId: number;
  initData: InitData;
}

export interface MiniAppSessionOptions extends VerifyInitDataOptions {
  /** Secret of the start parameters (see {@link startParamSecret}). */
  startParamSecret: string | Uint8Array;
  /** When set, the session must be for this chat. */
  expectChatId?: number;
}

/**
 * Verifies initData ({@link verifyInitData}) and takes the chat only from
 * the signed `start_param` ({@link chatFromStartParam}): data signed for
 * chat A is refused on chat B.
 * @throws CrowdplayError every code of {@link verifyInitData}, and
 *   CP_ERR_INITDATA_MISSING_FIELD (`user`), CP_ERR_INITDATA_NO_CHAT (no
 *   start_param), CP_ERR_INITDATA_BAD_START_PARAM, CP_ERR_INITDATA_WRONG_CHAT
 *   (signed for another chat than `expectChatId`)
 */
export function miniAppSession(raw: string, opts: MiniAppSessionOptions): MiniAppSession {
  const initData = verifyInitData(raw, opts);
  if (!initData.user) throw new CrowdplayError('CP_ERR_INITDATA_MISSING_FIELD', ['user']);
  if (initData.start_param === undefined || initData.start_param === '') throw new CrowdplayError('CP_ERR_INITDATA_NO_CHAT');
  const chatId = chatFromStartParam(initData.start_param, opts.startParamSecret);
  if (opts.expectChatId !== undefined && chatId !== opts.expectChatId)
    throw new CrowdplayError('CP_ERR_INITDATA_WRONG_CHAT', [opts.expectChatId]);
  return { user: initData.user, chatId, initData };
}

/**
 * The crowdplay channel id of a Telegram chat: `tg` + the id, `n` standing for the minus of a group's negative id.
 * A tenant's own bot (`bot`: its Telegram bot id) names its chats `tb<bot id>_<chat>` (`tb123_n100456`), so two
 * bots in one group play two channels, each its own tenant's; the deployment's bot keeps `tg…`. At most 36
 * characters, within CHANNEL_ID_PATTERN.
 * @throws RangeError when `chatId` is not a non-zero safe integer, or `bot` is given and not a positive one
 */
export function telegramChannelId(chatId: number, bot?: number): string {
  if (!Number.isSafeInteger(chatId) || chatId === 0) throw new RangeError(`not a chat id: ${chatId}`);
  const chat = chatId < 0 ? `n${-chatId}` : `${chatId}`;
  if (bot === undefined) return `tg${chat}`;
  if (!Number.isSafeInteger(bot) || bot <= 0) throw new RangeError(`not a bot id: ${bot}`);
  return `tb${bot}_${chat}`;
}

/** True for a channel id {@link telegramChannelId} makes (a Telegram chat's channel: `tg<id>`, `tgn<id>`, `tb<bot>_<chat>`). */
export function isTelegramChannelId(channel: string): boolean {
  return /^(?:tg|tb[1-9]\d{0,15}_)n?[1-9]\d{0,15}$/.test(channel);
}

/** Viewer ids of Telegram players (`tg:<user id>`): only a session from verified initData carries one. */
export const TELEGRAM_VIEWER_PREFIX = 'tg:';
