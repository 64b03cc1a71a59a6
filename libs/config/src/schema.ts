/**
 * Every crowdplay setting, in one schema. Each service reads only its own
 * section of the parsed object; nothing outside libs/config reads process.env.
 *
 * Defaults come from measurement where one exists (the seeds in
 * shared/seeds and docs/benchmarks.md); the doc says where.
 */
import { bool, int, oneOf, str, url } from './dsl.ts';

const ID = /^[A-Za-z0-9_-]{1,64}$/;

export const schema = {
  mode: oneOf({
    env: 'CROWDPLAY_MODE',
    values: ['standalone', 'cluster'] as const,
    default: 'standalone',
    doc: 'standalone: every service in one process, embedded adapters where a URL is unset. cluster: DATABASE_URL, NATS_URL and REDIS_URL are required and no embedded adapter is used.',
  }),
  http: {
    host: str({ env: 'HOST', default: '127.0.0.1', doc: 'Address the gateway listens on.' }),
    port: int({ env: 'PORT', default: 8080, min: 0, max: 65_535, doc: 'Port the gateway listens on (0 = any free port).' }),
    listenBacklog: int({
      env: 'HTTP_LISTEN_BACKLOG',
      default: 4_096,
      min: 1,
      max: 65_535,
      unit: 'connections',
      doc: "Accept queue length (Linux caps it at net.core.somaxconn). Node's 511 overflowed while a busy loop ramped 1,500 connections/s (14,287 SYNs dropped in one 10,000-viewer run, docs/benchmarks.md), turning connects into multi-second SYN retries.",
    }),
  },
  log: {
    level: oneOf({
      env: 'LOG_LEVEL',
      values: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const,
      default: 'info',
      doc: 'pino log level.',
    }),
    refusalLogIntervalMs: int({
      env: 'REFUSAL_LOG_INTERVAL_MS',
      default: 10_000,
      min: 100,
      unit: 'ms',
      doc: 'Each kind of refusal (rate limit, size, auth, slow consumer, over cap) is logged at most once per interval, with the count since the last line; every refusal is counted in crowdplay_refusals_total.',
    }),
  },
  db: {
    url: url({
      env: 'DATABASE_URL',
      default: '',
      protocols: ['postgres', 'postgresql'],
      doc: 'PostgreSQL URL. Empty: embedded PGlite (standalone only; one session, ~800 MiB and ~3 s to start).',
    }),
    schema: str({
      env: 'DATABASE_SCHEMA',
      default: 'public',
      pattern: /^[a-z_][a-z0-9_]{0,62}$/,
      patternDoc: 'a lower-case SQL identifier',
      doc: 'Schema holding crowdplay tables (test suites use their own).',
    }),
    poolMax: int({
      env: 'DATABASE_POOL_MAX',
      default: 10,
      min: 1,
      max: 1000,
      unit: 'connections',
      doc: 'pg Pool size per process. PGlite is always used as one connection.',
    }),
    pgliteDir: str({
      env: 'PGLITE_DIR',
      default: '.crowdplay/pglite',
      doc: 'Data directory of the embedded PGlite; `memory` keeps it in memory (lost on exit).',
    }),
  },
  bus: {
    natsUrl: url({
      env: 'NATS_URL',
      default: '',
      protocols: ['nats', 'tls', 'ws', 'wss'],
      doc: 'NATS server(s). Empty: the in-process bus (standalone only).',
    }),
    subjectPrefix: str({
      env: 'BUS_SUBJECT_PREFIX',
      default: 'cp',
      pattern: ID,
      doc: 'First token of every bus subject; isolates deployments sharing one NATS.',
    }),
    requestTimeoutMs: int({
      env: 'BUS_REQUEST_TIMEOUT_MS',
      default: 2_000,
      min: 10,
      unit: 'ms',
      doc: 'Timeout of bus request/reply calls (acquire, lease, declare).',
    }),
  },
  redis: {
    url: url({
      env: 'REDIS_URL',
      default: '',
      protocols: ['redis', 'rediss'],
      doc: 'Redis URL. Required in cluster mode; unused in standalone.',
    }),
  },
  gateway: {
    id: str({ env: 'GATEWAY_ID', default: 'gw-1', pattern: ID, doc: "This gateway's id on the bus (unique per process)." }),
    maxMessageBytes: int({
      env: 'WS_MAX_MESSAGE_BYTES',
      default: 4_096,
      min: 128,
      unit: 'bytes',
      doc: 'Largest inbound WebSocket frame; larger closes the socket with 1009.',
    }),
    maxBufferedBytes: int({
      env: 'WS_MAX_BUFFERED_BYTES',
      default: 1_048_576,
      min: 1_024,
      unit: 'bytes',
      doc: 'Slow-consumer limit: a socket whose unsent bytes pass this is closed with 4008.',
    }),
    skipBufferedBytes: int({
      env: 'WS_SKIP_BUFFERED_BYTES',
      default: 65_536,
      min: 0,
      unit: 'bytes',
      doc: 'A socket with more unsent bytes than this skips updates (it gets the newest state once it catches up, never the backlog).',
    }),
    intentRatePerS: int({
      env: 'INTENT_RATE_PER_S',
      default: 10,
      min: 1,
      unit: 'per second',
      doc: 'Per-viewer intent rate (token bucket refill). Over it, the intent is refused with CP_ERR_INTENT_RATE_LIMITED.',
    }),
    intentBurst: int({ env: 'INTENT_BURST', default: 20, min: 1, unit: 'count', doc: 'Per-viewer intent burst (token bucket size).' }),
    connRatePerS: int({
      env: 'CONN_RATE_PER_S',
      default: 200,
      min: 1,
      unit: 'per second',
      doc: 'New WebSocket connections per client address (IPv6 keyed on its /64). Sized for a venue behind one NAT.',
    }),
    connBurst: int({ env: 'CONN_BURST', default: 2_000, min: 1, unit: 'connections', doc: 'Connection burst per client address.' }),
    maxConnections: int({
      env: 'WS_MAX_CONNECTIONS',
      default: 50_000,
      min: 1,
      unit: 'connections',
      doc: 'Sockets one gateway holds; past it new ones get HTTP 503.',
    }),
    intentBatchMs: int({
      env: 'INTENT_BATCH_MS',
      default: 2,
      min: 0,
      max: 100,
      unit: 'ms',
      doc: 'Intents for one channel are coalesced this long before one bus message carries them (0 = next event-loop turn).',
    }),
    intentBatchMax: int({
      env: 'INTENT_BATCH_MAX',
      default: 512,
      min: 1,
      unit: 'count',
      doc: "A channel's micro-batch is sent early once it holds this many intents.",
    }),
    pingIntervalMs: int({
      env: 'WS_PING_INTERVAL_MS',
      default: 30_000,
      min: 0,
      unit: 'ms',
      doc: 'The gateway pings every socket this often; one that has not answered the previous ping is terminated (a dead peer is otherwise noticed only on write). 0 = off.',
    }),
    protocolErrorLimit: int({
      env: 'WS_PROTOCOL_ERROR_LIMIT',
      default: 20,
      min: 1,
      unit: 'count',
      doc: 'Protocol errors (malformed, unknown type, invalid) one socket may make before it is closed with 4400.',
    }),
    tokenClockSkewS: int({
      env: 'TOKEN_CLOCK_SKEW_S',
      default: 30,
      min: 0,
      unit: 's',
      doc: 'Tolerated clock skew when checking viewer token exp/nbf.',
    }),
    shutdownMs: int({
      env: 'SHUTDOWN_DEADLINE_MS',
      default: 10_000,
      min: 100,
      unit: 'ms',
      doc: 'How long a drain may take before the process exits anyway.',
    }),
  },
  engine: {
    shardId: str({ env: 'SHARD_ID', default: 'shard-1', pattern: ID, doc: "This crowd-engine shard's id (unique per process)." }),
    tickMs: int({
      env: 'TICK_MS',
      default: 250,
      min: 10,
      max: 10_000,
      unit: 'ms',
      doc: "Tick period: one batch per channel per tick (the seed's TICK_MS).",
    }),
    updateIntervalMs: int({
      env: 'CHANNEL_UPDATE_MS',
      default: 250,
      min: 10,
      unit: 'ms',
      doc: 'Minimum interval between two viewer updates of one channel; updates are sent only on change.',
    }),
    defaultMaxPerTick: int({
      env: 'DEFAULT_MAX_PER_TICK',
      default: 1_000,
      min: 1,
      unit: 'count',
      doc: 'maxPerTick for built-in games (the seed ran 1,000).',
    }),
    maxGameStateBytes: int({
      env: 'MAX_GAME_STATE_BYTES',
      default: 16_384,
      min: 64,
      unit: 'bytes',
      doc: 'Largest game state a game may publish to its viewers.',
    }),
    maxChannels: int({
      env: 'SHARD_MAX_CHANNELS',
      default: 10_000,
      min: 1,
      unit: 'count',
      doc: 'Channels one shard accepts; past it acquire is refused.',
    }),
    maxPendingIntents: int({
      env: 'SHARD_MAX_PENDING_INTENTS',
      default: 100_000,
      min: 1,
      unit: 'count',
      doc: 'Individual intents a shard holds across its channels between ticks; over it intents are refused CP_ERR_INTENT_OVERLOADED.',
    }),
    snapshotIntervalMs: int({
      env: 'SNAPSHOT_INTERVAL_MS',
      default: 5_000,
      min: 100,
      unit: 'ms',
      doc: "How often a changed channel's state is snapshotted to Postgres (also on release).",
    }),
  },
  sequencer: {
    blockSize: int({
      env: 'SEQUENCER_BLOCK_SIZE',
      default: 10_000,
      min: 1,
      unit: 'count',
      doc: 'Event ids per leased block; a shard leases a new block on every acquire and when its block runs out.',
    }),
  },
  standalone: {
    tenantSecret: str({
      env: 'STANDALONE_TENANT_SECRET',
      default: 'dev-secret-change-me-0123456789abcdef',
      secret: true,
      doc: 'Signing secret of the dev tenant that standalone creates (viewer JWTs, HS256). Change it for anything public.',
    }),
    tenantKey: str({
      env: 'STANDALONE_TENANT_KEY',
      default: 'cpk_dev_0123456789abcdef0123456789abcdef',
      secret: true,
      doc: 'API key of the dev tenant that standalone creates (role=game connections).',
    }),
    demo: bool({ env: 'DEMO_ENABLED', default: true, doc: 'Run the built-in tug-of-war demo game on channel `demo`.' }),
    demoMotion: bool({
      env: 'DEMO_MOTION',
      default: true,
      doc: "The demo's own crowd of bots pulling the rope; off for a quiet channel (browser tests).",
    }),
  },
  ledger: {
    commitMs: int({
      env: 'LEDGER_COMMIT_MS',
      default: 2,
      min: 0,
      max: 1_000,
      unit: 'ms',
      doc: 'Group commit: queued ledger transfers are committed in one transaction at most this long after the first of them was queued (0 = next event-loop turn), independent of TICK_MS; acks go out after the COMMIT.',
    }),
    commitMaxTransfers: int({
      env: 'LEDGER_COMMIT_MAX_TRANSFERS',
      default: 500,
      min: 1,
      max: 20_000,
      unit: 'count',
      doc: 'Most transfers in one group-commit transaction; a full batch is committed at once without waiting for LEDGER_COMMIT_MS.',
    }),
    maxQueued: int({
      env: 'LEDGER_MAX_QUEUED',
      default: 50_000,
      min: 1,
      unit: 'count',
      doc: 'Transfers a process may hold queued or committing; past it a transfer is refused with CP_ERR_LEDGER_OVERLOADED (counted in crowdplay_refusals_total).',
    }),
    commitConcurrency: int({
      env: 'LEDGER_COMMIT_CONCURRENCY',
      default: 2,
      min: 1,
      max: 16,
      unit: 'count',
      doc: "Group commits one process runs at once. 2 overlaps one batch's COMMIT (WAL flush) and the process's own work with the next batch's execution (measured with `npm run bench -- ledger` on the 2-core dev machine: 17,000 → 33,000 durable transfers/s). Batches in flight together may apply in either order: send a transfer that depends on another (a stake of granted points) after the other's ack.",
    }),
    accountCacheMax: int({
      env: 'LEDGER_ACCOUNT_CACHE_MAX',
      default: 100_000,
      min: 1,
      unit: 'count',
      doc: 'Account ids (tenant, kind, owner → id) a process keeps in memory; past it the oldest are dropped and looked up again when next used.',
    }),
    houseTakeBps: int({
      env: 'LEDGER_HOUSE_TAKE_BPS',
      default: 0,
      min: 0,
      max: 10_000,
      doc: "House take of a parimutuel pool, in basis points (1/100 %): floor(total stakes × bps ÷ 10,000) goes to the tenant's house account before winners are paid; nothing is taken when a round is refunded.",
    }),
  },
} as const;

export type Schema = typeof schema;
