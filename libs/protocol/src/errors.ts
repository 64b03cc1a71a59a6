/**
 * The error catalogue: every error crowdplay reports to a client, operator or
 * caller has one stable code here (`CP_ERR_<AREA>_<WHAT>`), a message
 * template, an HTTP status and, where the error ends a WebSocket, a close code.
 *
 * Codes are contracts: callers branch on `code`, never on message text. A code
 * is never reused for a different meaning; a retired code stays listed.
 * `docs/protocol.md` documents this table (a test keeps them in step).
 */

/** One catalogue entry. `closeCode` is set when the error ends the socket. */
export interface ErrorSpec {
  readonly message: string;
  readonly httpStatus: number;
  readonly closeCode?: number;
}

/**
 * WebSocket close codes used by the gateway (RFC 6455 §7.4: 4000–4999 are for
 * applications). Documented in docs/protocol.md.
 */
export const CloseCode = {
  /** Normal close (RFC 6455). */
  normal: 1000,
  /** The gateway is going away (drain or shutdown): reconnect elsewhere. */
  goingAway: 1001,
  /** A frame larger than WS_MAX_MESSAGE_BYTES (RFC 6455 "message too big"). */
  messageTooBig: 1009,
  /** Token missing, malformed, forged or expired. */
  unauthorized: 4001,
  /** Authenticated, but not for this channel (another tenant's channel). */
  forbidden: 4003,
  /** The channel does not exist. */
  unknownChannel: 4004,
  /** Slow consumer: the socket's send buffer passed WS_MAX_BUFFERED_BYTES. */
  slowConsumer: 4008,
  /** A second game connection for a channel that already has one. */
  gameConflict: 4009,
  /** Too many connections from this address (/64 for IPv6). */
  connectionRateLimited: 4029,
  /** The channel's tenant is over a quota (its viewer connections, its channels): retry later, with backoff. */
  tenantQuota: 4030,
  /** Too many protocol errors on this socket. */
  protocolViolation: 4400,
  /** Server error; reconnect with backoff. */
  internal: 4500,
} as const;
export type CloseCodeValue = (typeof CloseCode)[keyof typeof CloseCode];

export const ERRORS = {
  // protocol (frames on a socket)
  CP_ERR_PROTO_MALFORMED: { message: 'frame is not a JSON object', httpStatus: 400 },
  CP_ERR_PROTO_INVALID: { message: 'message does not match the v1 schema: %s', httpStatus: 400 },
  CP_ERR_PROTO_UNKNOWN_TYPE: { message: 'unknown message type "%s" for role %s', httpStatus: 400 },
  CP_ERR_PROTO_VERSION: { message: 'control message version %s is not spoken here (accepted: %s)', httpStatus: 400 },
  CP_ERR_PROTO_TOO_BIG: { message: 'frame larger than %s bytes', httpStatus: 413, closeCode: CloseCode.messageTooBig },
  CP_ERR_HTTP_NOT_FOUND: { message: 'no such route', httpStatus: 404 },
  /** A path a route serves, asked with another method: the answer's Allow header lists the methods it takes. */
  CP_ERR_HTTP_METHOD_NOT_ALLOWED: { message: 'method %s is not allowed on this path; it takes %s', httpStatus: 405 },
  CP_ERR_LABEL_INVALID: { message: 'label %s: %s', httpStatus: 400 },
  CP_ERR_PROTO_VIOLATIONS: { message: 'too many protocol errors on this socket', httpStatus: 400, closeCode: CloseCode.protocolViolation },
  // auth
  CP_ERR_AUTH_MISSING: {
    message: 'no credentials: pass token= (crowd) or key= (game)',
    httpStatus: 401,
    closeCode: CloseCode.unauthorized,
  },
  CP_ERR_AUTH_INVALID: { message: 'credentials rejected: %s', httpStatus: 401, closeCode: CloseCode.unauthorized },
  CP_ERR_AUTH_EXPIRED: { message: 'token expired', httpStatus: 401, closeCode: CloseCode.unauthorized },
  CP_ERR_AUTH_FORBIDDEN_CHANNEL: { message: 'channel %s belongs to another tenant', httpStatus: 403, closeCode: CloseCode.forbidden },
  CP_ERR_AUTH_WRONG_CHANNEL: { message: 'the token is for another channel, not %s', httpStatus: 403, closeCode: CloseCode.forbidden },
  /** A watch token revoked by its tenant (DELETE /v1/watch-tokens/:id): refused at connect, and its open sockets are closed. */
  CP_ERR_AUTH_REVOKED: { message: 'the watch token was revoked', httpStatus: 401, closeCode: CloseCode.unauthorized },
  /** A frame sent on a socket opened with a read-only watch token: answered with a refused ack, nothing reaches the shard. */
  CP_ERR_AUTH_READ_ONLY: { message: 'this socket watches with a read-only watch token: it cannot act, stake or trade', httpStatus: 403 },
  // channels
  CP_ERR_CHANNEL_UNKNOWN: { message: 'unknown channel %s', httpStatus: 404, closeCode: CloseCode.unknownChannel },
  CP_ERR_CHANNEL_INVALID_ID: {
    message: 'channel id must match ^[A-Za-z0-9_-]{1,64}$',
    httpStatus: 400,
    closeCode: CloseCode.unknownChannel,
  },
  CP_ERR_CHANNEL_UNAVAILABLE: { message: 'no shard serves channel %s right now', httpStatus: 503 },
  CP_ERR_CHANNEL_PLACEMENT_OVERLOADED: {
    message: 'the router holds its maximum of %s channels waiting for placement; retry with backoff',
    httpStatus: 503,
  },
  CP_ERR_CHANNEL_GAME_CONNECTED: {
    message: 'channel %s already has a game connection',
    httpStatus: 409,
    closeCode: CloseCode.gameConflict,
  },
  CP_ERR_CHANNEL_STALE_EPOCH: { message: 'write for channel %s at epoch %s refused: the channel moved', httpStatus: 409 },
  CP_ERR_CHANNEL_NOT_OWNED: { message: 'this shard does not own channel %s', httpStatus: 409 },
  /** The channel's chat became another (Telegram group → supergroup): its state lives in the channel it names now. */
  CP_ERR_CHANNEL_MIGRATED: { message: 'channel %s moved to channel %s', httpStatus: 409, closeCode: CloseCode.unknownChannel },
  /** A request to move a channel's state that cannot be carried out (same channel, a conflicting earlier move, another tenant). */
  CP_ERR_CHANNEL_MIGRATION_INVALID: { message: 'cannot move channel %s: %s', httpStatus: 400 },
  // intents (act acks)
  CP_ERR_INTENT_UNKNOWN_ACTION: { message: 'unknown action %s', httpStatus: 400 },
  CP_ERR_INTENT_UNKNOWN_OPTION: { message: 'unknown option %s for action %s', httpStatus: 400 },
  CP_ERR_INTENT_NO_GAME: { message: 'the game has not declared any actions yet', httpStatus: 409 },
  CP_ERR_INTENT_RATE_LIMITED: { message: 'too many intents: at most %s per second', httpStatus: 429 },
  CP_ERR_INTENT_INSUFFICIENT_FUNDS: { message: 'not enough points: the action costs %s', httpStatus: 402 },
  CP_ERR_INTENT_OVERLOADED: { message: 'the shard is over its intake queue limit', httpStatus: 503 },
  /** Not sent to viewers (their intent is accepted and tallied); counted when an intent is not listed in the batch. */
  CP_ERR_INTENT_OVER_CAP: { message: "intent over the action's maxPerTick: tallied, not listed in the batch", httpStatus: 200 },
  // game
  CP_ERR_GAME_INVALID_DECLARE: { message: 'invalid action declaration: %s', httpStatus: 400 },
  CP_ERR_GAME_STATE_TOO_BIG: { message: 'game state larger than %s bytes', httpStatus: 413 },
  // multi-channel game sockets (retryable: CP_ERR_GAME_CHANNEL_BUSY)
  CP_ERR_GAME_NOT_ATTACHED: { message: 'this game socket is not attached to channel %s: attach it first', httpStatus: 409 },
  CP_ERR_GAME_CHANNEL_BUSY: { message: 'channel %s already has %s game requests waiting: retry', httpStatus: 503 },
  CP_ERR_GAME_TOO_MANY_CHANNELS: { message: 'a game socket serves at most %s channels (GAME_MAX_CHANNELS)', httpStatus: 429 },
  // limits
  CP_ERR_LIMIT_CONNECTION_RATE: {
    message: 'too many connections from your address',
    httpStatus: 429,
    closeCode: CloseCode.connectionRateLimited,
  },
  CP_ERR_LIMIT_SLOW_CONSUMER: {
    message: 'send buffer over %s bytes: the client is not reading',
    httpStatus: 503,
    closeCode: CloseCode.slowConsumer,
  },
  CP_ERR_LIMIT_PING_TIMEOUT: { message: 'no pong within WS_PING_INTERVAL_MS: the peer is gone', httpStatus: 408 },
  /** An HTTP request (headers and body) not received whole within HTTP_REQUEST_TIMEOUT_MS: the connection is closed. */
  CP_ERR_LIMIT_REQUEST_TIMEOUT: { message: 'the request did not arrive whole within %s ms (HTTP_REQUEST_TIMEOUT_MS)', httpStatus: 408 },
  CP_ERR_LIMIT_DRAINING: { message: 'the gateway is draining; reconnect', httpStatus: 503, closeCode: CloseCode.goingAway },
  // tenants and config
  CP_ERR_TENANT_UNKNOWN: { message: 'unknown tenant %s', httpStatus: 404 },
  /** `crowdplay tenant create` of an id that exists: nothing is changed (rotate-key issues a new key). */
  CP_ERR_TENANT_EXISTS: { message: 'tenant %s already exists', httpStatus: 409 },
  /**
   * The tenant is over one of its quotas (channels, connections, intents per second, grant points per day:
   * TENANT_MAX_* or its override). A connection is closed with 4030, an intent refused in its ack, a request answered 429.
   */
  CP_ERR_TENANT_QUOTA: { message: 'tenant %s is over its %s quota of %s', httpStatus: 429, closeCode: CloseCode.tenantQuota },
  CP_ERR_STORE_DATA_DIR_IN_USE: {
    message:
      'the PGlite data directory %s is in use by process %s: stop that process, or set DATABASE_URL so several processes share a PostgreSQL',
    httpStatus: 503,
  },
  /** The connection to PostgreSQL failed or was lost (a restart, a crash): retry; a write in flight may or may not have happened. */
  CP_ERR_STORE_UNAVAILABLE: { message: 'the database is unavailable: %s', httpStatus: 503 },
  /** The first connection to NATS failed at start (refused, unreachable, no handshake within NATS_CONNECT_TIMEOUT_MS). */
  CP_ERR_BUS_UNAVAILABLE: { message: 'the message bus is unavailable: %s', httpStatus: 503 },
  CP_ERR_CONFIG_INVALID: { message: 'invalid configuration:\n%s', httpStatus: 500 },
  CP_ERR_INTERNAL: { message: 'internal error', httpStatus: 500, closeCode: CloseCode.internal },
  // clients (libs/sdk-viewer, libs/sdk-game): raised on the client side, never sent by the server
  CP_ERR_CLIENT_NOT_OPEN: { message: 'the connection is not open (state %s)', httpStatus: 503 },
  CP_ERR_CLIENT_CLOSED: { message: 'the connection closed (code %s%s)', httpStatus: 503 },
  CP_ERR_CLIENT_SOCKET: { message: 'socket error: %s', httpStatus: 502 },
  CP_ERR_CLIENT_WELCOME_TIMEOUT: { message: 'no welcome frame within %s ms of connecting', httpStatus: 504 },
  CP_ERR_CLIENT_REQUEST_TIMEOUT: { message: 'no answer to %s within %s ms', httpStatus: 504 },
  // limits (appended)
  CP_ERR_LIMIT_MAX_CONNECTIONS: { message: 'the gateway holds its maximum of %s connections; try another', httpStatus: 503 },
  /** A WebSocket upgrade that waited longer than WS_UPGRADE_WAIT_MS for the gateway to take it; retry with backoff. */
  CP_ERR_LIMIT_OVERLOADED: { message: 'the gateway could not take the connection within %s ms; retry with backoff', httpStatus: 503 },
  // markets (libs/lmsr: the LMSR cash-out market)
  CP_ERR_MARKET_INVALID_BOOK: { message: 'invalid market: %s', httpStatus: 400 },
  CP_ERR_MARKET_INVALID_QUANTITY: { message: 'invalid %s %s: must be %s', httpStatus: 400 },
  CP_ERR_MARKET_INVALID_TRADE: { message: 'invalid trade: %s', httpStatus: 400 },
  CP_ERR_MARKET_UNKNOWN_OUTCOME: { message: 'unknown outcome %s: the market has %s outcomes', httpStatus: 400 },
  CP_ERR_MARKET_SLIPPAGE: { message: 'the price moved: the trade would %s %s points, past your limit of %s', httpStatus: 409 },
  CP_ERR_MARKET_INSUFFICIENT_SHARES: { message: 'you hold %s shares of outcome %s, fewer than %s', httpStatus: 409 },
  CP_ERR_MARKET_INSUFFICIENT_FUNDS: { message: 'not enough points: the trade costs %s', httpStatus: 402 },
  CP_ERR_MARKET_BUDGET_TOO_SMALL: { message: 'a budget of %s points buys no whole share of outcome %s', httpStatus: 409 },
  CP_ERR_MARKET_DUPLICATE_ID: { message: 'trade id %s was already used with other fields', httpStatus: 409 },
  CP_ERR_MARKET_CLOSED: { message: 'the market is %s: trading is over', httpStatus: 409 },
  CP_ERR_MARKET_ALREADY_FINAL: { message: 'the market was already %s', httpStatus: 409 },
  // ledger
  CP_ERR_LEDGER_INVALID_AMOUNT: { message: 'amount must be a positive safe integer number of points, got %s', httpStatus: 400 },
  CP_ERR_LEDGER_INVALID_TRANSFER: { message: 'invalid transfer: %s', httpStatus: 400 },
  CP_ERR_LEDGER_INSUFFICIENT_FUNDS: { message: 'not enough points in %s account %s for a transfer of %s', httpStatus: 402 },
  CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT: { message: 'transfer id %s was already used with different fields', httpStatus: 409 },
  CP_ERR_LEDGER_BALANCE_LIMIT: { message: 'a grant to %s account %s of %s points would take it above %s points', httpStatus: 409 },
  CP_ERR_LEDGER_OVERLOADED: { message: 'the ledger holds its maximum of %s queued transfers', httpStatus: 503 },
  CP_ERR_LEDGER_CLOSED: { message: 'the ledger is draining or closed', httpStatus: 503 },
  CP_ERR_LEDGER_UNAVAILABLE: { message: 'the ledger could not commit: %s', httpStatus: 503 },
  // rounds (services/crowd-engine rounds: pool and market rounds of a channel)
  CP_ERR_ROUND_INVALID: { message: 'invalid round: %s', httpStatus: 400 },
  CP_ERR_ROUND_UNKNOWN: { message: 'unknown round %s', httpStatus: 404 },
  CP_ERR_ROUND_EXISTS: { message: 'round %s already exists in this channel (round ids are never reused)', httpStatus: 409 },
  CP_ERR_ROUND_TOO_MANY: { message: 'the channel has its maximum of %s unfinished rounds (ROUND_MAX_OPEN)', httpStatus: 429 },
  CP_ERR_ROUND_UNKNOWN_OUTCOME: { message: 'unknown outcome %s of round %s', httpStatus: 400 },
  CP_ERR_ROUND_WRONG_KIND: { message: 'round %s is a %s round: use %s', httpStatus: 400 },
  CP_ERR_ROUND_CLOSED: { message: 'round %s is %s: its deadline has passed, no more stakes or trades', httpStatus: 409 },
  CP_ERR_ROUND_ALREADY_FINAL: { message: 'round %s was already %s', httpStatus: 409 },
  CP_ERR_ROUND_DUPLICATE_ID: { message: 'key %s was already used in round %s with other fields', httpStatus: 409 },
  CP_ERR_ROUND_INSUFFICIENT_FUNDS: { message: 'not enough points: %s needed, %s available', httpStatus: 402 },
  CP_ERR_ROUND_FULL: { message: 'round %s holds its maximum of %s stakes and trades (ROUND_MAX_ENTRIES)', httpStatus: 429 },
  /** A game process's round.open / round.settle / round.cancel on a channel whose rounds belong to its built-in game. */
  CP_ERR_ROUND_FORBIDDEN: { message: 'channel %s runs a built-in game: only it opens, settles or cancels its rounds', httpStatus: 403 },
  // the word puzzle (services/crowd-engine/src/games/word-puzzle.ts)
  CP_ERR_PUZZLE_INVALID_WORD: { message: 'not a five-letter word of the puzzle: %s', httpStatus: 400 },
  CP_ERR_PUZZLE_OVER: { message: 'your puzzle is over (%s): a new one starts at the rollover', httpStatus: 409 },
  CP_ERR_ROUND_VIEWER_BUSY: {
    message: 'more than %s of your stakes and trades are waiting in this round (ROUND_MAX_PENDING_PER_VIEWER)',
    httpStatus: 429,
  },
  // the send queue (libs/sendq): refusals of an enqueue, counted in crowdplay_refusals_total
  CP_ERR_SENDQ_CHAT_DEACTIVATED: { message: 'chat %s is deactivated: its sends are refused until it is re-activated', httpStatus: 403 },
  CP_ERR_SENDQ_FULL: { message: 'the send queue holds its maximum of %s jobs (TELEGRAM_SENDQ_MAX_QUEUED)', httpStatus: 503 },
  CP_ERR_SENDQ_CLOSED: { message: 'the send queue is closed', httpStatus: 503 },
  CP_ERR_SENDQ_STALE: { message: 'version %s of %s is older than the latest queued for it: dropped', httpStatus: 409 },
  // boards (libs/board)
  CP_ERR_BOARD_JOB_TOO_LARGE: { message: 'the board render job is %s bytes, over BOARD_RENDER_MAX_JOB_BYTES', httpStatus: 413 },
  CP_ERR_BOARD_QUEUE_FULL: { message: 'the board render queue holds its maximum of %s jobs (BOARD_RENDER_MAX_QUEUE)', httpStatus: 503 },
  // telegram (libs/telegram)
  CP_ERR_INITDATA_MALFORMED: { message: 'initData is malformed: %s', httpStatus: 400, closeCode: CloseCode.unauthorized },
  CP_ERR_INITDATA_MISSING_FIELD: { message: 'initData has no %s field', httpStatus: 401, closeCode: CloseCode.unauthorized },
  CP_ERR_INITDATA_BAD_HASH: {
    message: 'initData hash does not match: the data was altered or signed for another bot',
    httpStatus: 401,
    closeCode: CloseCode.unauthorized,
  },
  CP_ERR_INITDATA_BAD_SIGNATURE: {
    message: 'initData Ed25519 signature does not verify for bot %s with the %s key',
    httpStatus: 401,
    closeCode: CloseCode.unauthorized,
  },
  CP_ERR_INITDATA_EXPIRED: {
    message: 'initData is %s s old, past TELEGRAM_INITDATA_MAX_AGE_S (%s s): reopen the app',
    httpStatus: 401,
    closeCode: CloseCode.unauthorized,
  },
  CP_ERR_INITDATA_FUTURE: {
    message: "initData auth_date is %s s ahead of the server's clock",
    httpStatus: 401,
    closeCode: CloseCode.unauthorized,
  },
  CP_ERR_INITDATA_NO_CHAT: {
    message: 'initData has no start_param: open the game from the link the bot posted in the chat',
    httpStatus: 403,
    closeCode: CloseCode.forbidden,
  },
  CP_ERR_INITDATA_BAD_START_PARAM: {
    message: 'start_param %s was not issued by this bot',
    httpStatus: 403,
    closeCode: CloseCode.forbidden,
  },
  CP_ERR_INITDATA_WRONG_CHAT: { message: 'initData is for another chat, not %s', httpStatus: 403, closeCode: CloseCode.forbidden },
  CP_ERR_TELEGRAM_REFUSED: { message: 'the send queue refused %s for chat %s: %s', httpStatus: 503 },
  CP_ERR_TELEGRAM_CHAT_INACTIVE: {
    message: 'chat %s is deactivated (%s): its calls are refused until the bot is re-added',
    httpStatus: 403,
  },
  CP_ERR_TELEGRAM_SUPERSEDED: { message: '%s for chat %s was superseded by a newer call (%s)', httpStatus: 409 },
  CP_ERR_TELEGRAM_FAILED: { message: '%s for chat %s failed: %s', httpStatus: 502 },
  CP_ERR_TELEGRAM_TIMEOUT: {
    message: 'no result for %s within %s ms (a call not started by then is dropped, never sent late)',
    httpStatus: 504,
  },
  CP_ERR_TELEGRAM_GRANT_REUSED: {
    message: 'one Bot API call per send-queue grant: %s was called a second time in one send',
    httpStatus: 500,
  },
  // `crowdplay telegram setup` (services/cli): refused before any Bot API call, or a call Telegram refused
  CP_ERR_TELEGRAM_PUBLIC_URL_INVALID: { message: 'public URL "%s" refused: %s', httpStatus: 400 },
  CP_ERR_TELEGRAM_SETUP_FAILED: { message: '%s failed: %s', httpStatus: 502 },
  // a tenant's own bots (`crowdplay tenant bot`, services/telegram bot-registry.ts, the webhook /v1/telegram/webhook/<bot id>)
  /** getMe refused the token (revoked, mistyped) or did not answer: nothing is stored. The token itself is never in the message. */
  CP_ERR_TELEGRAM_BOT_REJECTED: { message: 'Telegram did not accept the bot token: %s', httpStatus: 400 },
  /** getMe got no answer, or one that is not the Bot API's (a proxy's error page): the token was not judged; retry. */
  CP_ERR_TELEGRAM_UNREACHABLE: { message: 'Telegram could not be asked: %s; nothing was changed, retry', httpStatus: 503 },
  /** No bot with this id is registered (a webhook path or a `tenant bot remove` naming none). */
  CP_ERR_TELEGRAM_BOT_UNKNOWN: { message: 'no Telegram bot %s is registered here', httpStatus: 404 },
  /** The bot is the deployment's own (TELEGRAM_BOT_TOKEN) or another tenant's: a bot belongs to one tenant. */
  CP_ERR_TELEGRAM_BOT_TAKEN: { message: 'Telegram bot %s already belongs to %s', httpStatus: 409 },
  // watch tokens (services/gateway watch-tokens.ts: POST, GET /v1/watch-tokens, DELETE /v1/watch-tokens/:id)
  CP_ERR_WATCH_UNKNOWN_TOKEN: { message: 'unknown watch token %s', httpStatus: 404 },
  CP_ERR_WATCH_TOO_MANY: {
    message: 'channel %s has its maximum of %s live watch tokens (WATCH_TOKEN_MAX_PER_CHANNEL): revoke one first',
    httpStatus: 429,
  },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERRORS;

/** Formats a catalogue message: each `%s` takes the next argument. */
export function formatMessage(code: ErrorCode, args: readonly unknown[]): string {
  let i = 0;
  return ERRORS[code].message.replace(/%s/g, () => String(args[i++] ?? ''));
}

/**
 * An error with a catalogue code. Thrown across module boundaries; callers
 * branch on `err.code`.
 *
 * @example throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', ['demo'])
 */
export class CrowdplayError extends Error {
  readonly code: ErrorCode;
  readonly httpStatus: number;
  readonly closeCode: number | undefined;
  constructor(code: ErrorCode, args: readonly unknown[] = [], options?: { cause?: unknown }) {
    super(formatMessage(code, args), options);
    this.name = 'CrowdplayError';
    this.code = code;
    const spec: ErrorSpec = ERRORS[code];
    this.httpStatus = spec.httpStatus;
    this.closeCode = spec.closeCode;
  }
}

/** True when `err` is a CrowdplayError with the given code. */
export function isCrowdplayError(err: unknown, code?: ErrorCode): err is CrowdplayError {
  return err instanceof CrowdplayError && (code === undefined || err.code === code);
}

export const ERRORS_BEGIN = '<!-- errors:begin (generated from libs/protocol/src/errors.ts by `npm run docs:settings`; do not edit) -->';
export const ERRORS_END = '<!-- errors:end -->';

/** The error catalogue as a Markdown table (for docs/protocol.md). */
export function errorTable(): string {
  const rows = Object.entries(ERRORS).map(([code, spec]: [string, ErrorSpec]) => {
    const msg = spec.message.replace(/\|/g, '\\|').replace(/\n/g, ' ');
    return `| \`${code}\` | ${spec.httpStatus} | ${spec.closeCode ?? '—'} | ${msg} |`;
  });
  return ['| code | HTTP status | close code | message |', '|---|---|---|---|', ...rows].join('\n');
}

/**
 * `doc` with the text between the errors markers replaced by `errorTable()`.
 * @throws Error when the markers are missing
 */
export function renderErrorTable(doc: string): string {
  const a = doc.indexOf(ERRORS_BEGIN);
  const b = doc.indexOf(ERRORS_END);
  if (a < 0 || b < a) throw new Error('no errors markers in the document');
  return `${doc.slice(0, a + ERRORS_BEGIN.length)}\n${errorTable()}\n${doc.slice(b)}`;
}

/**
 * Refusals that mean "busy or moving, not wrong": the same request may succeed
 * a moment later (a channel being placed or moved, a queue at its bound, the
 * database or the ledger briefly unavailable). The SDKs retry them with
 * jittered backoff until their retry deadline; any other code is final.
 */
export const RETRYABLE_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'CP_ERR_CHANNEL_UNAVAILABLE',
  'CP_ERR_CHANNEL_PLACEMENT_OVERLOADED',
  'CP_ERR_INTENT_OVERLOADED',
  'CP_ERR_LIMIT_OVERLOADED',
  'CP_ERR_STORE_UNAVAILABLE',
  'CP_ERR_LEDGER_OVERLOADED',
  'CP_ERR_LEDGER_UNAVAILABLE',
  'CP_ERR_GAME_CHANNEL_BUSY',
]);

/** Whether a refusal `code` may succeed when retried ({@link RETRYABLE_CODES}). */
export function isRetryable(code: string | undefined): boolean {
  return code !== undefined && RETRYABLE_CODES.has(code as ErrorCode);
}
