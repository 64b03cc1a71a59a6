/**
 * Builds crowdplay's processes from the configuration: `standalone` (every
 * service in one process, embedded adapters where a URL is unset) and each
 * service alone (`crowdplay service <name>`). The service code is the same in
 * both; only the adapters differ, each chosen by its URL.
 */
import { hostname } from 'node:os';
import { subjects as makeSubjects, type Bus, type Subjects } from '@crowdplay/bus';
import type { HelperThreads } from './threads.ts';
import { connectBus, connectStore } from './connect.ts';
import type { ProcessStartSettings } from './allocator.ts';
import type { Config } from '@crowdplay/config';
import { isCrowdplayError } from '@crowdplay/protocol';
import { Shard, fiveLetterWords, puzzleRound, tugOfWar, wordPuzzle } from '@crowdplay/crowd-engine';
import { createGateway, type Gateway } from '@crowdplay/gateway';
import { Ledger } from '@crowdplay/ledger';
import { CachingRouter, LeasedRouter, RouterClient, type Router } from '@crowdplay/router';
import { SequencerService } from '@crowdplay/sequencer';
import { PgDb, type Store } from '@crowdplay/store';
import { createTelemetry, type Telemetry } from '@crowdplay/telemetry';
import { startBoardRenderer } from '@crowdplay/board-renderer';
import { isTelegramChannelId } from '@crowdplay/telegram';
import { startTelegram, type TelegramPart } from '@crowdplay/telegram-service';
import { startTelegramSender } from '@crowdplay/telegram-sender';
import type { BotRegistry } from '@crowdplay/telegram-service';
import { tenantBotRegistry } from './tenant-bots.ts';

export const SERVICES = ['gateway', 'router', 'crowd-engine', 'sequencer', 'telegram-sender', 'board-renderer'] as const;
export type ServiceName = (typeof SERVICES)[number];

/** The standalone dev tenant's id (credentials are the STANDALONE_TENANT_* settings). */
export const DEV_TENANT_ID = 'dev';
/** The demo game's channel. */
export const DEMO_CHANNEL = 'demo';

/** A running process: its HTTP port (when it serves HTTP) and its ordered shutdown. */
export interface Running {
  /** Port the gateway listens on, if this process runs one. */
  port: number | undefined;
  telemetry: Telemetry;
  store: Store;
  bus: Bus;
  /** Ordered shutdown (drain): safe to call twice. */
  stop(): Promise<void>;
}

interface Parts {
  gateway?: Gateway;
  ledger?: Ledger;
  shard?: Shard;
  router?: LeasedRouter;
  sequencer?: SequencerService;
  telegram?: TelegramPart | null;
  /** Tenants' own bots running in this gateway. */
  bots?: BotRegistry;
  sender?: { close(): Promise<void> };
  renderer?: { close(): Promise<void> };
  routerCache?: CachingRouter;
}

/**
 * The pg pool's metrics: crowdplay_pg_pool{state} (waiting: queries waiting for a connection, total, idle)
 * and crowdplay_pg_pool_wait_ms (each wait for a connection). Waiting above 0 for long means
 * DATABASE_POOL_MAX (or Postgres) is the limit.
 */
function observePool(db: PgDb, telemetry: Telemetry): void {
  const wait = telemetry.metrics.histogram('crowdplay_pg_pool_wait_ms');
  db.onWait = (ms) => wait.record(ms);
  telemetry.metrics.gauge('crowdplay_pg_pool', () => [
    [db.pool.waitingCount, { state: 'waiting' }],
    [db.pool.totalCount, { state: 'total' }],
    [db.pool.idleCount, { state: 'idle' }],
  ]);
}

async function base(config: Config, service: string): Promise<{ telemetry: Telemetry; store: Store; bus: Bus; subjects: Subjects }> {
  const telemetry = createTelemetry({
    service,
    level: config.log.level,
    refusalLogIntervalMs: config.log.refusalLogIntervalMs,
    otel: config.otel,
  });
  const { logger } = telemetry;
  const t0 = Date.now();
  // Bounded by DATABASE_CONNECT_TIMEOUT_MS and NATS_CONNECT_TIMEOUT_MS: an unreachable server ends the start with its code.
  const store = await connectStore(config, (msg) => logger.debug({ msg }, 'migration'));
  if (store.db instanceof PgDb) observePool(store.db, telemetry);
  logger.info(
    { store: store.kind, schema: config.db.schema, ms: Date.now() - t0 },
    store.kind === 'pglite' ? 'store: embedded PGlite (one session)' : 'store: PostgreSQL',
  );
  let bus: Bus;
  try {
    bus = await connectBus(config, {
      name: `${service}-${hostname()}-${process.pid}`,
      onError: (err, subject) => logger.error({ err, subject }, 'bus handler failed'),
    });
  } catch (err) {
    await store.close().catch(() => undefined);
    throw err;
  }
  logger.info({ bus: bus.kind, prefix: config.bus.subjectPrefix }, `bus: ${bus.kind}`);
  return { telemetry, store, bus, subjects: makeSubjects(config.bus.subjectPrefix) };
}

/**
 * Starts the given services in this process. `standalone` passes all four
 * and gets the demo and the dev tenant. `helperThreads`: what the command did
 * with HELPER_THREAD_NICE at start-up (threads.ts), logged and exported;
 * `startSettings`: SEMI_SPACE_MB, MALLOC_ARENA_MAX and MALLOC_MMAP_THRESHOLD_ as the process got them
 * (allocator.ts), logged and exported.
 * @throws on a store or bus that cannot be reached, or a port in use
 */
export async function startServices(
  config: Config,
  names: readonly ServiceName[],
  opts: { standalone: boolean; helperThreads?: HelperThreads; startSettings?: ProcessStartSettings },
): Promise<Running> {
  const label = opts.standalone ? 'standalone' : names.join('+');
  const { telemetry, store, bus, subjects } = await base(config, label);
  const { logger } = telemetry;
  if (opts.helperThreads) {
    const { niced, failed } = opts.helperThreads;
    logger.info({ nice: config.runtime.helperThreadNice, threads: niced.length, failed: failed.length }, 'helper threads niced');
    telemetry.metrics.gauge('crowdplay_helper_threads_niced', () => niced.length);
  }
  const start = opts.startSettings;
  if (start) {
    logger.info(
      {
        ...start,
        ...(start.semiSpaceMb === null || start.mallocArenaMax === null || start.mallocMmapThreshold === null
          ? {
              note: 'Node or glibc defaults: scripts/start.sh (npm start, the image) sets SEMI_SPACE_MB, MALLOC_ARENA_MAX and MALLOC_MMAP_THRESHOLD_ (docs/tuning.md)',
            }
          : {}),
      },
      'process-start settings',
    );
    telemetry.metrics.gauge('crowdplay_process_start_setting', () => [
      [start.semiSpaceMb ?? 0, { setting: 'semi_space_mb' }],
      [start.mallocArenaMax ?? 0, { setting: 'malloc_arena_max' }],
      [start.mallocMmapThreshold ?? 0, { setting: 'malloc_mmap_threshold' }],
      [start.mimallocAllowThp ?? 0, { setting: 'mimalloc_allow_thp' }],
      [start.mimallocPurgeDelayMs ?? 0, { setting: 'mimalloc_purge_delay_ms' }],
    ]);
  }
  const parts: Parts = {};
  try {
    if (opts.standalone) {
      await store.tenants.upsert(DEV_TENANT_ID, 'Standalone dev tenant', config.standalone.tenantKey, config.standalone.tenantSecret);
      if (config.standalone.demo) await store.channels.ensure(DEMO_CHANNEL, DEV_TENANT_ID, config.quota.channels);
    }
    if (names.includes('sequencer')) {
      parts.sequencer = new SequencerService({ bus, subjects, store, telemetry, eventLog: config.eventLog });
      await parts.sequencer.start();
    }
    // One ledger per process: the shard's stakes and trades and the gateway's grants share its group commits.
    if (names.includes('crowd-engine') || names.includes('gateway')) parts.ledger = new Ledger(store.db, config.ledger, telemetry);
    if (names.includes('crowd-engine')) {
      const demo = opts.standalone && config.standalone.demo;
      // The word list (~3 MB read and filtered, ~300 ms of this thread) is read now, before anything is served,
      // rather than when the first chat's channel is acquired, mid-load.
      if (config.telegram.botToken) fiveLetterWords();
      parts.shard = new Shard({
        config,
        bus,
        subjects,
        store,
        telemetry,
        ledger: parts.ledger,
        gameFor: (c) =>
          // A Telegram chat's channel (`tg<id>`, `tgn<id>` for a group) plays the word puzzle.
          isTelegramChannelId(c)
            ? wordPuzzle({ periodMs: config.puzzle.periodMs, ...fiveLetterWords(), key: config.puzzle.secret, ...puzzleRound(config) })
            : demo && c === DEMO_CHANNEL
              ? tugOfWar({
                  maxPerTick: config.engine.defaultMaxPerTick,
                  motion: config.standalone.demoMotion,
                  rounds: { durationMs: config.rounds.demoRoundMs },
                  welcomeGrant: config.rounds.demoWelcomeGrant,
                })
              : undefined,
      });
      await parts.shard.start();
    }
    if (names.includes('telegram-sender') && !names.includes('gateway')) parts.sender = await startTelegramSender({ config, telemetry });
    if (names.includes('board-renderer') && !names.includes('gateway')) parts.renderer = await startBoardRenderer({ config, telemetry });
    if (names.includes('router')) {
      // Channels with unfinished rounds (a crash or kill -9 interrupted them) are assigned each time this router
      // becomes active, so their shard recovers them (resume, pay, or refund) without waiting for a viewer or the game.
      const recover = async (router: Router): Promise<void> => {
        // A placement past ROUTER_ASSIGN_DEADLINE_MS (a busy machine at start-up) is refused but goes on: the demo's
        // channel is placed all the same, so the start does not fail on it.
        if (opts.standalone && config.standalone.demo)
          await router.assign(DEMO_CHANNEL).catch((err: unknown) => {
            if (!isCrowdplayError(err) || err.code !== 'CP_ERR_CHANNEL_UNAVAILABLE') throw err;
            logger.warn({ err, channel: DEMO_CHANNEL }, 'the demo channel is not placed yet; its placement goes on');
          });
        const recovering = store.rounds.channelsWithUnfinished().then(async (channels) => {
          for (const ch of channels) {
            await router
              .assign(ch)
              .catch((err: unknown) => logger.warn({ err, channel: ch }, 'could not assign a channel with unfinished rounds'));
          }
        });
        if (opts.standalone) await recovering;
        else recovering.catch((err: unknown) => logger.warn({ err }, 'round recovery scan failed'));
      };
      // One of the router replicas is active at a time, through the router lease (services/router/src/lease.ts).
      parts.router = new LeasedRouter(
        { bus, subjects, store, telemetry },
        {
          leaseMs: config.router.leaseMs,
          shardTimeoutMs: config.router.shardTimeoutMs,
          waitForShardMs: config.bus.requestTimeoutMs,
          requestTimeoutMs: config.bus.requestTimeoutMs,
          checkMs: config.router.checkMs,
          rebalanceMovesPerS: config.router.rebalanceMovesPerS,
          rebalanceCooldownMs: config.router.rebalanceCooldownMs,
          batchTimeoutMs: config.router.batchTimeoutMs,
          reconcileMs: config.router.reconcileMs,
          placementCoalesceMs: config.router.placementCoalesceMs,
          placementQueueMax: config.router.placementQueueMax,
          placementConcurrency: config.router.placementConcurrency,
          assignDeadlineMs: config.router.assignDeadlineMs,
          intentsPerChannel: config.router.intentsPerChannel,
          moveAcquireAttempts: config.router.moveAcquireAttempts,
          drainBatchChannels: config.router.drainBatchChannels,
          onActive: recover,
        },
      );
      await parts.router.start();
    }
    let port: number | undefined;
    if (names.includes('gateway')) {
      // Assignments are cached and kept fresh by the router's changes (router.assignments).
      const router = new CachingRouter(
        new RouterClient(bus, subjects, config.bus.requestTimeoutMs),
        { bus, subjects },
        config.router.cacheMax,
      );
      await router.start();
      telemetry.metrics.observableCounter('crowdplay_router_cache_total', () => [
        [router.hits, { stat: 'hits' }],
        [router.changes, { stat: 'changes' }],
        [router.evictions, { stat: 'evictions' }],
      ]);
      telemetry.metrics.gauge('crowdplay_router_cache', () => [[router.size, { stat: 'entries' }]]);
      parts.routerCache = router;
      // The bot and its live boards run beside the gateway that receives the webhook (off without TELEGRAM_BOT_TOKEN).
      // Its chats' channels belong to TELEGRAM_TENANT_ID: created here when missing (a cluster has no standalone dev tenant).
      if (config.telegram.botToken && (await store.tenants.ensure(config.telegram.tenantId, 'Telegram bot')))
        logger.info({ tenant: config.telegram.tenantId }, `created tenant ${config.telegram.tenantId} for the Telegram bot`);
      parts.telegram = await startTelegram({
        config,
        bus,
        subjects,
        telemetry,
        // The gateway makes the Bot API calls itself unless a telegram-sender service takes them from Redis.
        send: opts.standalone || names.includes('telegram-sender') || !config.redis.url,
        // It renders the boards itself unless it leaves them to board-renderer services (BOARD_RENDER_IN_PROCESS=false).
        render: opts.standalone || names.includes('board-renderer') || config.board.renderInProcess,
        ensureChannel: async (channel) => void (await store.channels.ensure(channel, config.telegram.tenantId, config.quota.channels)),
        moveChannel: (from, to) => router.migrate(from, to),
      });
      const bot = parts.telegram?.bot;
      // Tenants' own bots (crowdplay tenant bot set): each its own runtime, started on its first update (tenant-bots.ts).
      const tenantBots = tenantBotRegistry(store, {
        config,
        bus,
        subjects,
        telemetry,
        moveChannel: (from, to) => router.migrate(from, to),
      });
      parts.bots = tenantBots.registry;
      parts.gateway = createGateway({
        config,
        bus,
        store,
        router,
        telemetry,
        ledger: parts.ledger,
        ...(bot ? { onTelegramUpdate: (u) => bot.handle(u) } : {}),
        // With REDIS_URL every gateway shares update_id de-duplication and each chat's order (docs/telegram.md).
        ...(parts.telegram?.updates ? { telegramUpdates: parts.telegram.updates } : {}),
        tenantBots: tenantBots.gatewayView,
      });
      port = (await parts.gateway.listen()).port;
      logger.info({ url: `http://${config.http.host}:${port}` }, `crowdplay ${label} listening on http://${config.http.host}:${port}`);
    }
    let stopping: Promise<void> | undefined;
    const stop = (): Promise<void> => {
      stopping ??= (async () => {
        // 1. The edge takes no new work and publishes what it accepted; its sockets stay open.
        parts.gateway?.pauseIntake();
        await bus.flush().catch(() => undefined);
        // 2. The shard closes its open ticks (batches reach the still-connected games), acks, snapshots, releases.
        if (parts.shard) await parts.shard.drain().catch((err: unknown) => logger.error({ err }, 'shard drain failed'));
        await bus.flush().catch(() => undefined);
        // 3. Now the sockets close (1001), then everything else.
        if (parts.gateway) await parts.gateway.drain().catch((err: unknown) => logger.error({ err }, 'gateway drain failed'));
        await parts.gateway?.close();
        parts.routerCache?.close();
        await parts.telegram?.close();
        await parts.bots?.close();
        await parts.sender?.close();
        await parts.renderer?.close();
        await parts.ledger?.drain();
        await parts.router?.close();
        await parts.sequencer?.close();
        await bus.drain().catch(() => undefined);
        await store.close();
        logger.info('stopped');
        await telemetry.close();
      })();
      return stopping;
    };
    return { port, telemetry, store, bus, stop };
  } catch (err) {
    await parts.gateway?.close();
    await parts.telegram?.close();
    await parts.bots?.close();
    await parts.sender?.close();
    await parts.renderer?.close();
    await parts.ledger?.close();
    await parts.shard?.close();
    await parts.router?.close();
    await parts.sequencer?.close();
    await bus.close();
    await store.close();
    await telemetry.close();
    throw err;
  }
}
