/**
 * The metric catalogue: every metric a crowdplay process exports, declared
 * once, with its name, instrument type, unit, help and labels. Call sites
 * name a metric only (`metrics.counter('crowdplay_intents_total')`); the
 * {@link Metrics} methods take everything else from here and throw on a name
 * that is not listed or is listed as another type. docs/operations.md's
 * metric table is generated from it (`npm run docs:settings`).
 *
 * Prometheus names are contracts (dashboards and alert rules use them): a
 * name changes only when its type was wrong, and the entry then says what it
 * was exported as before (`formerly`).
 */

/** Histogram boundaries for latencies in ms (act ack, batch lag, commit time). */
export const LATENCY_BUCKETS_MS = [0.5, 1, 2, 5, 10, 25, 50, 100, 250, 300, 500, 1_000, 2_500, 5_000, 10_000] as const;
/** Histogram boundaries for sizes in bytes. */
export const SIZE_BUCKETS_BYTES = [64, 256, 1_024, 4_096, 16_384, 65_536, 262_144, 1_048_576] as const;
/** Histogram boundaries for transfers per ledger group commit. */
export const COMMIT_TRANSFERS_BUCKETS = [1, 5, 10, 50, 100, 250, 500, 1_000, 2_000, 5_000, 10_000, 20_000] as const;

/**
 * How a metric is recorded, and so what Prometheus sees:
 * - `counter`: added to at the event (Prometheus counter, name ends in `_total`);
 * - `observableCounter`: a running total read at scrape time (Prometheus counter, `_total`);
 * - `upDownCounter`: added to and taken from at the event (Prometheus gauge);
 * - `gauge`: a value read at scrape time (Prometheus gauge);
 * - `histogram`: a distribution of recorded values over `buckets` (Prometheus `_bucket`, `_sum`, `_count`).
 */
export type MetricType = 'counter' | 'observableCounter' | 'upDownCounter' | 'gauge' | 'histogram';

/** UCUM units as OpenTelemetry takes them: milliseconds, seconds (a unix time), bytes, a plain number (a count, a nice value), per second. */
export type MetricUnit = 'ms' | 's' | 'By' | '1' | '1/s';

/** A label's values: the closed list, or a note on what an open set holds (an error code, a tenant id). */
export type LabelValues = readonly string[] | string;

/** One catalogue entry. */
export interface MetricDefinition {
  /** The Prometheus name (`crowdplay_…`; counters end in `_total`). */
  readonly name: string;
  readonly type: MetricType;
  readonly unit: MetricUnit;
  /** One sentence: the `# HELP` text. */
  readonly help: string;
  /** Label name → its values. */
  readonly labels: Readonly<Record<string, LabelValues>>;
  /** Histograms only: the bucket boundaries, in `unit`. */
  readonly buckets?: readonly number[];
  /** The series this metric was exported as before its type was fixed (a running total exported as a gauge). */
  readonly formerly?: string;
}

const LANES = ['tx', 'board'] as const;
const ROLES = ['crowd', 'game'] as const;
const ROUND_KINDS = ['pool', 'market'] as const;
const ERROR_CODE = 'the error code (CP_ERR_…)';
const REFUSED_CODE = 'the error code, when refused';

/** Every metric, grouped by the component that records it. */
export const metricCatalogue = [
  // Every process: the event loop, memory, garbage collection (libs/telemetry)
  {
    name: 'crowdplay_event_loop_lag_ms',
    type: 'gauge',
    unit: 'ms',
    help: 'Event-loop delay since the previous scrape (p50, p99, max), ms',
    labels: { quantile: ['p50', 'p99', 'max'] },
  },
  {
    name: 'crowdplay_process_memory_bytes',
    type: 'gauge',
    unit: 'By',
    help: 'process.memoryUsage() at scrape time, by kind: rss, heap_used, heap_total, external, array_buffers (bytes)',
    labels: { kind: ['rss', 'heap_used', 'heap_total', 'external', 'array_buffers'] },
  },
  {
    name: 'crowdplay_gc_ms',
    type: 'histogram',
    unit: 'ms',
    help: "V8 garbage collections of the main thread's heap, by kind (minor, major, incremental, weakcb), ms",
    labels: { kind: ['minor', 'major', 'incremental', 'weakcb', 'other'] },
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_refusals_total',
    type: 'counter',
    unit: '1',
    help: 'Requests refused by a limit or check, by reason (error code) and area',
    labels: { area: 'the component that refused (gateway, engine, ledger, sendq, …)', reason: ERROR_CODE },
  },
  {
    name: 'crowdplay_tenant_quota_refusals_total',
    type: 'counter',
    unit: '1',
    help: 'Requests refused with CP_ERR_TENANT_QUOTA, by tenant and quota (tenant: at most TENANT_QUOTA_METRIC_TENANTS values, the rest ~other)',
    labels: {
      tenant: 'the tenant id, or ~other past TENANT_QUOTA_METRIC_TENANTS tenants',
      quota: ['channels', 'connections', 'intentsPerS', 'grantPointsPerDay'],
    },
  },
  {
    name: 'crowdplay_otel_spans_dropped_total',
    type: 'observableCounter',
    unit: '1',
    help: 'Finished spans dropped because OTEL_BSP_MAX_QUEUE_SIZE spans were waiting for export (the collector is slow or down)',
    labels: {},
    formerly: 'crowdplay_otel_spans_dropped',
  },

  // Every process: the pg pool and process-start settings; the gateway's assignment cache (services/cli)
  {
    name: 'crowdplay_pg_pool_wait_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'Wait for a free pg pool connection before a query or transaction, ms',
    labels: {},
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_pg_pool',
    type: 'gauge',
    unit: '1',
    help: 'pg pool connections by state: total, idle, and waiting (queries queued for a connection: DATABASE_POOL_MAX biting)',
    labels: { state: ['waiting', 'total', 'idle'] },
  },
  {
    name: 'crowdplay_helper_threads_niced',
    type: 'gauge',
    unit: '1',
    help: 'Helper threads (V8 platform workers, libuv pool) set to HELPER_THREAD_NICE at start-up',
    labels: {},
  },
  {
    name: 'crowdplay_process_start_setting',
    type: 'gauge',
    unit: '1',
    help: "Settings read only when the process started, as it got them: semi_space_mb (node --max-semi-space-size), malloc_arena_max (MALLOC_ARENA_MAX), malloc_mmap_threshold (MALLOC_MMAP_THRESHOLD_, bytes), 0 = the runtime default; mimalloc_allow_thp (MIMALLOC_ALLOW_THP, 0/1) and mimalloc_purge_delay_ms (MIMALLOC_PURGE_DELAY), which the board renderer's allocator read at load",
    labels: { setting: ['semi_space_mb', 'malloc_arena_max', 'malloc_mmap_threshold', 'mimalloc_allow_thp', 'mimalloc_purge_delay_ms'] },
  },
  {
    name: 'crowdplay_router_cache_total',
    type: 'observableCounter',
    unit: '1',
    help: "The gateway's assignment cache: hits, changes applied, evictions (ROUTER_ASSIGNMENT_CACHE_MAX biting)",
    labels: { stat: ['hits', 'changes', 'evictions'] },
    formerly: 'crowdplay_router_cache{stat="hits"|"changes"|"evictions"}',
  },
  {
    name: 'crowdplay_router_cache',
    type: 'gauge',
    unit: '1',
    help: 'Assignments in the gateway\'s cache (stat="entries")',
    labels: { stat: ['entries'] },
  },

  // Gateway: WebSockets, intents, updates, resumes (services/gateway)
  {
    name: 'crowdplay_upgrades_waiting',
    type: 'gauge',
    unit: '1',
    help: 'Upgrade requests waiting for an event-loop turn with WS_UPGRADE_TURN_BUDGET_MS left',
    labels: {},
  },
  {
    name: 'crowdplay_gateway_channels',
    type: 'gauge',
    unit: '1',
    help: 'Channels with at least one local viewer (each holds one ch.<C>.out subscription)',
    labels: {},
  },
  {
    name: 'crowdplay_ws_buffered_bytes',
    type: 'gauge',
    unit: 'By',
    help: "Bytes written to this gateway's WebSockets and not yet taken by the kernel (ws bufferedAmount, summed over sockets; an update shared by many sockets counts once per socket): memory held for slow readers, bounded per socket by WS_SKIP_BUFFERED_BYTES and WS_MAX_BUFFERED_BYTES",
    labels: {},
  },
  {
    name: 'crowdplay_listen_overflows_total',
    type: 'observableCounter',
    unit: '1',
    help: 'Kernel count of connections dropped because an accept queue was full (TcpExt ListenOverflows, this network namespace; HTTP_LISTEN_BACKLOG); absent off Linux',
    labels: {},
    formerly: 'crowdplay_listen_overflows',
  },
  {
    name: 'crowdplay_connections',
    type: 'upDownCounter',
    unit: '1',
    help: 'Open authenticated WebSocket connections, by role',
    labels: { role: ROLES },
  },
  {
    name: 'crowdplay_connections_opened_total',
    type: 'counter',
    unit: '1',
    help: 'WebSocket connections that completed auth (welcome sent), by role',
    labels: { role: ROLES },
  },
  {
    name: 'crowdplay_connections_refused_total',
    type: 'counter',
    unit: '1',
    help: 'WebSocket connections refused before their welcome, by reason: the upgrade (CP_ERR_LIMIT_CONNECTION_RATE, CP_ERR_LIMIT_MAX_CONNECTIONS, CP_ERR_LIMIT_OVERLOADED, CP_ERR_LIMIT_DRAINING) or the setup (auth, channel, router: the error code)',
    labels: { reason: ERROR_CODE },
  },
  {
    name: 'crowdplay_intents_forwarded_total',
    type: 'counter',
    unit: '1',
    help: 'Intents forwarded to shards in IntentBatches',
    labels: {},
  },
  {
    name: 'crowdplay_intent_batches_total',
    type: 'counter',
    unit: '1',
    help: 'IntentBatch messages carrying intents published to ch.<C>.in',
    labels: {},
  },
  {
    name: 'crowdplay_intents_move_resent_total',
    type: 'counter',
    unit: '1',
    help: 'Intents and joins a moving channel sent back: outcome=resent (published again), expired (INTENT_MOVE_RESEND_MS passed: refused to the viewer)',
    labels: { outcome: ['resent', 'expired'] },
  },
  {
    name: 'crowdplay_game_ctl_retried_total',
    type: 'counter',
    unit: '1',
    help: "A game's declare and state requests refused as retryable: outcome=resent (sent again), expired (GAME_CTL_RETRY_MS passed: refused to the game)",
    labels: { outcome: ['resent', 'expired'] },
  },
  {
    name: 'crowdplay_updates_sent_total',
    type: 'counter',
    unit: '1',
    help: 'Channel update frames written to viewer sockets',
    labels: {},
  },
  {
    name: 'crowdplay_updates_skipped_total',
    type: 'counter',
    unit: '1',
    help: 'Channel updates skipped by a socket over WS_SKIP_BUFFERED_BYTES (it gets the newest later)',
    labels: {},
  },
  {
    name: 'crowdplay_broadcast_bytes',
    type: 'histogram',
    unit: 'By',
    help: 'Size of each channel update broadcast, bytes (once per broadcast)',
    labels: {},
    buckets: SIZE_BUCKETS_BYTES,
  },
  {
    name: 'crowdplay_upgrades_deferred_total',
    type: 'counter',
    unit: '1',
    help: 'Upgrade requests that arrived in an event-loop turn that had spent WS_UPGRADE_TURN_BUDGET_MS on upgrades, taken in a later turn',
    labels: {},
  },
  {
    name: 'crowdplay_connect_setup_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'WebSocket upgrade completed → welcome sent (auth, tenant and channel look-up, router assign), ms, by role',
    labels: { role: ROLES },
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_resumes_total',
    type: 'counter',
    unit: '1',
    help: 'Reconnects with lastEventId, by role and outcome: replayed (game: missed batches from the event log), current (crowd: nothing missed or the newest update), resync_pruned / resync_behind / resync_ahead / resync_unavailable (a resync frame, then a snapshot)',
    labels: { role: ROLES, outcome: ['replayed', 'current', 'resync_pruned', 'resync_behind', 'resync_ahead', 'resync_unavailable'] },
  },
  {
    name: 'crowdplay_events_replayed_total',
    type: 'counter',
    unit: '1',
    help: 'Logged events (batches) replayed to reconnecting game sockets',
    labels: {},
  },
  {
    name: 'crowdplay_replayed_live_skipped_total',
    type: 'counter',
    unit: '1',
    help: "Live batches not sent to a game socket because it had them already: sent by a resume's event log replay (held during it, or published after it), or a new owner sending the previous owner's last logged batch again",
    labels: {},
  },
  {
    name: 'crowdplay_slow_consumer_closes_total',
    type: 'counter',
    unit: '1',
    help: 'Sockets closed with 4008: send buffer over WS_MAX_BUFFERED_BYTES',
    labels: {},
  },
  {
    name: 'crowdplay_granted_points_total',
    type: 'counter',
    unit: '1',
    help: 'Points granted to viewers through POST /v1/grants (committed, not replays)',
    labels: { tenant: 'the tenant id' },
  },
  {
    name: 'crowdplay_telegram_updates_total',
    type: 'counter',
    unit: '1',
    help: 'Webhook updates by outcome (queued, duplicate, refused, handled, failed)',
    labels: {
      outcome: ['queued', 'duplicate', 'refused', 'handled', 'failed', 'lease_lost', 'error'],
      reason: REFUSED_CODE,
      scope: ['local', 'shared'],
    },
  },
  {
    name: 'crowdplay_telegram_updates_queued',
    type: 'gauge',
    unit: '1',
    help: 'Webhook updates waiting to be handled (shared: chats this gateway is draining)',
    labels: {},
  },

  // Crowd engine shards: intents, batches, updates, wallets (services/crowd-engine)
  {
    name: 'crowdplay_intents_total',
    type: 'counter',
    unit: '1',
    help: 'Intents taken by shards, by outcome (accepted, dropped_over_cap, refused) and reason',
    labels: { outcome: ['accepted', 'dropped_over_cap', 'refused'], reason: REFUSED_CODE },
  },
  {
    name: 'crowdplay_act_ack_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'Gateway receipt of an intent → its act ack published by the shard, ms',
    labels: {},
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_batch_lag_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'Gateway receipt of an intent → the batch carrying it closed, ms',
    labels: {},
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_batches_total',
    type: 'counter',
    unit: '1',
    help: 'Batches closed (non-empty ticks)',
    labels: {},
  },
  {
    name: 'crowdplay_event_log_writes_total',
    type: 'counter',
    unit: '1',
    help: 'Batches written to the event log before publishing, by outcome: ok, stale_epoch (not published, channel dropped), moved (not published: the channel moved away while its tick was in flight), gap (published, floor raised), gap_unmarked (published, floor not raised)',
    labels: { outcome: ['ok', 'stale_epoch', 'moved', 'gap', 'gap_unmarked'] },
  },
  {
    name: 'crowdplay_channel_updates_total',
    type: 'counter',
    unit: '1',
    help: 'Viewer updates published by shards',
    labels: {},
  },
  {
    name: 'crowdplay_last_batch_repeats_total',
    type: 'counter',
    unit: '1',
    help: "Channels acquired whose previous owner's last logged batch was published again (a shard that died between logging and publishing it left it unseen; gateways drop it for game sockets that have it)",
    labels: {},
  },
  {
    name: 'crowdplay_drain_unmoved_channels_total',
    type: 'counter',
    unit: '1',
    help: 'Channels a draining shard had not moved when SHUTDOWN_DEADLINE_MS minus SHARD_DRAIN_FINAL_MS passed: their open ticks were closed and published and their snapshots written, for the router to place them once it declares the shard dead',
    labels: {},
  },
  {
    name: 'crowdplay_tick_yields_total',
    type: 'counter',
    unit: '1',
    help: 'Times a tick over many channels yielded the event loop to I/O after SHARD_TURN_BUDGET_MS of work, then went on',
    labels: {},
  },
  {
    name: 'crowdplay_channel_updates_deferred_total',
    type: 'counter',
    unit: '1',
    help: 'Viewer updates due in an event-loop turn that had spent SHARD_TURN_BUDGET_MS on updates, published in a later turn',
    labels: {},
  },
  {
    name: 'crowdplay_channel_update_bytes',
    type: 'histogram',
    unit: 'By',
    help: 'Size of one serialised viewer update, bytes',
    labels: {},
    buckets: SIZE_BUCKETS_BYTES,
  },
  {
    name: 'crowdplay_snapshot_errors_total',
    type: 'counter',
    unit: '1',
    help: 'Channel snapshots that failed, by reason',
    labels: { reason: ['stale_epoch', 'error'] },
  },
  {
    name: 'crowdplay_channel_absorbed_total',
    type: 'counter',
    unit: '1',
    help: "Entries (players) of a moved chat's state merged into its new channel, by result: added, replaced (the moved one was further along), kept (the new channel's was), stale (another period's state, nothing taken)",
    labels: { result: ['added', 'replaced', 'kept', 'stale'] },
  },
  {
    name: 'crowdplay_sequencer_lease_hedges_total',
    type: 'counter',
    unit: '1',
    help: 'Lease requests a shard sent again because no sequencer answered within SEQUENCER_LEASE_HEDGE_MS (a hung or slow sequencer)',
    labels: {},
  },
  {
    name: 'crowdplay_shard_channels',
    type: 'gauge',
    unit: '1',
    help: 'Channels owned by this shard',
    labels: {},
  },
  {
    name: 'crowdplay_shard_channels_ticking',
    type: 'gauge',
    unit: '1',
    help: 'Channels the next tick visits (open intents, rounds to watch, a built-in game that ticks); the others rest until woken',
    labels: {},
  },
  {
    name: 'crowdplay_shard_pending_intents',
    type: 'gauge',
    unit: '1',
    help: 'Individual intents held for the open tick',
    labels: {},
  },
  {
    name: 'crowdplay_channel_updates_due',
    type: 'gauge',
    unit: '1',
    help: 'Viewer updates due and deferred to a later event-loop turn (SHARD_TURN_BUDGET_MS)',
    labels: {},
  },
  {
    name: 'crowdplay_wallet_mirror_size',
    type: 'gauge',
    unit: '1',
    help: "Viewers' balances mirrored in memory (limit WALLET_MIRROR_MAX)",
    labels: {},
  },
  {
    name: 'crowdplay_wallet_reloads_total',
    type: 'observableCounter',
    unit: '1',
    help: 'Mirrored balances reloaded before refusing a stake or trade (WALLET_RELOAD_MS)',
    labels: {},
    formerly: 'crowdplay_wallet_reloads',
  },
  {
    name: 'crowdplay_rounds_unfinished',
    type: 'gauge',
    unit: '1',
    help: 'Open and locked rounds on this shard',
    labels: {},
  },
  {
    name: 'crowdplay_round_events_total',
    type: 'counter',
    unit: '1',
    help: 'Round transitions by kind and event (opened, locked, settled, cancelled, expired, recovered, drained, handed_off, resumed: an open round taken over with its book, handoff_mismatch: a handed-off book the ledger disagrees with, refunded)',
    labels: {
      kind: ROUND_KINDS,
      event: [
        'opened',
        'locked',
        'settled',
        'cancelled',
        'expired',
        'recovered',
        'drained',
        'handed_off',
        'resumed',
        'handoff_mismatch',
        'refunded',
      ],
    },
  },
  {
    name: 'crowdplay_trades_total',
    type: 'counter',
    unit: '1',
    help: 'Stakes and trades by kind (stake, buy, sell) and outcome (accepted, refused) and reason',
    labels: { kind: ['stake', 'buy', 'sell'], outcome: ['accepted', 'refused'], reason: REFUSED_CODE },
  },
  {
    name: 'crowdplay_trade_ack_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'Gateway receipt of a stake or trade → its ack after the ledger commit, ms',
    labels: {},
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_round_ledger_retries_total',
    type: 'counter',
    unit: '1',
    help: 'Round transfers sent again because the ledger could not say whether they committed',
    labels: {},
  },
  {
    name: 'crowdplay_round_pay_retries_total',
    type: 'counter',
    unit: '1',
    help: 'Settled or cancelled rounds whose failed payments or refunds a shard tried again (ROUND_PAY_RETRY_MS)',
    labels: { kind: ['pool', 'market'] },
  },
  {
    name: 'crowdplay_round_unrecovered_points_total',
    type: 'counter',
    unit: '1',
    help: "Points of a cancelled market's profitable cash-outs that the viewer had already spent (kept by the viewer, borne by the maker)",
    labels: {},
  },

  // Ledger group commits (libs/ledger)
  {
    name: 'crowdplay_ledger_transfers_total',
    type: 'counter',
    unit: '1',
    help: 'Ledger transfers by result (committed, replayed, refused)',
    labels: { result: ['committed', 'replayed', 'refused'] },
  },
  {
    name: 'crowdplay_ledger_commit_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'Duration of one group commit (one transaction), ms',
    labels: {},
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_ledger_ack_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'Per commit: queue wait + commit of its oldest transfer (the slowest ack), ms',
    labels: {},
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_ledger_commit_transfers',
    type: 'histogram',
    unit: '1',
    help: 'Transfers per group commit',
    labels: {},
    buckets: COMMIT_TRANSFERS_BUCKETS,
  },
  {
    name: 'crowdplay_ledger_queued',
    type: 'gauge',
    unit: '1',
    help: 'Ledger transfers queued or committing (limit LEDGER_MAX_QUEUED)',
    labels: {},
  },

  // Sequencer: event ids and the event log (services/sequencer)
  {
    name: 'crowdplay_sequencer_leases_total',
    type: 'counter',
    unit: '1',
    help: 'Blocks of event ids leased, by outcome',
    labels: { outcome: ['ok', 'refused', 'error'] },
  },
  {
    name: 'crowdplay_sequencer_lease_writes_total',
    type: 'counter',
    unit: '1',
    help: 'High-water-mark updates; leases_total ÷ this = lease requests answered per update (group commit)',
    labels: {},
  },
  {
    name: 'crowdplay_event_log_pruned_total',
    type: 'counter',
    unit: '1',
    help: 'Events deleted from the event log past EVENT_LOG_RETENTION_MS',
    labels: {},
  },
  {
    name: 'crowdplay_event_log_prune_passes_total',
    type: 'counter',
    unit: '1',
    help: 'Event log pruning passes, by outcome: done, limited (EVENT_LOG_PRUNE_BATCH rows deleted: more were due), error',
    labels: { outcome: ['done', 'limited', 'error'] },
  },

  // Router: channel placement (services/router)
  {
    name: 'crowdplay_router_moves_total',
    type: 'counter',
    unit: '1',
    help: 'Channels the router placed on another shard, by reason: failover, drain, rebalance, reconcile, restart; refused (the owner could not hand it off), failed',
    labels: { reason: ['failover', 'drain', 'rebalance', 'reconcile', 'restart', 'refused', 'failed'] },
  },
  {
    name: 'crowdplay_router_move_acquire_retries_total',
    type: 'counter',
    unit: '1',
    help: 'Channels a placement tried again on another shard after a shard refused or did not answer (ROUTER_MOVE_ACQUIRE_ATTEMPTS bounds them)',
    labels: {},
  },
  {
    name: 'crowdplay_channel_migrations_total',
    type: 'counter',
    unit: '1',
    help: 'Channel moves (a Telegram group upgraded to a supergroup) asked of the router, by outcome: moved, done (finished before: a re-delivered update), none (the old chat never played), refused (bad request), failed (resumed by the next request)',
    labels: { outcome: ['moved', 'done', 'none', 'refused', 'failed'] },
  },
  {
    name: 'crowdplay_router_lease_active',
    type: 'gauge',
    unit: '1',
    help: 'Whether this router process holds the router lease (1: active, 0: standby); summed over the replicas it is 1 but for a moment at a handover',
    labels: {},
  },
  {
    name: 'crowdplay_router_lease_changes_total',
    type: 'counter',
    unit: '1',
    help: 'Times this router process won the router lease (became active) or lost it (expired unrenewed, another holder, a new term, shutdown)',
    labels: { change: ['won', 'lost'] },
  },
  {
    name: 'crowdplay_router_live_shards',
    type: 'gauge',
    unit: '1',
    help: 'Shards heard from within the shard timeout',
    labels: {},
  },
  {
    name: 'crowdplay_router_shard_deaths_total',
    type: 'counter',
    unit: '1',
    help: 'Shards the router declared dead (no heartbeat for ROUTER_SHARD_TIMEOUT_MS); each is also logged with the shard and the instant',
    labels: {},
  },
  {
    name: 'crowdplay_router_abandoned_requests_total',
    type: 'counter',
    unit: '1',
    help: 'Control requests to a shard answered as failed when the router declared that shard dead, instead of waiting out their timeout',
    labels: {},
  },
  {
    name: 'crowdplay_router_placements_total',
    type: 'counter',
    unit: '1',
    help: 'Placement batches (one Postgres statement, one acquire per target shard), by reason',
    labels: { reason: ['assign', 'failover', 'drain', 'rebalance', 'reconcile', 'restart'] },
  },
  {
    name: 'crowdplay_router_placement_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'One placement batch: the epoch bump, the acquires and the announcement, ms',
    labels: {},
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_router_failover_move_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'A shard declared dead → its channels acquired by live shards (the move after detection), ms',
    labels: {},
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_router_reconciled_total',
    type: 'counter',
    unit: '1',
    help: 'Channels the reconciler placed again because their recorded owner did not hold them, by reason',
    labels: { reason: ['not_held'] },
  },
  {
    name: 'crowdplay_router_placement_queue',
    type: 'gauge',
    unit: '1',
    help: 'Channels waiting for a placement (limit ROUTER_PLACEMENT_QUEUE_MAX)',
    labels: {},
  },
  {
    name: 'crowdplay_router_unplaced_channels',
    type: 'gauge',
    unit: '1',
    help: 'Channels a move could not place, tried again every ROUTER_CHECK_MS',
    labels: {},
  },

  // Telegram: the bot, the webhook's boards, the Bot API client (services/telegram, libs/telegram)
  {
    name: 'crowdplay_telegram_call_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'Bot API HTTP calls (sends and avatar reads), request → answer, ms, by method and ok (true, false, error)',
    labels: { method: 'the Bot API method', ok: ['true', 'false', 'error'] },
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_telegram_commands_total',
    type: 'counter',
    unit: '1',
    help: 'Bot commands handled, by command',
    labels: { command: ['start', 'board', 'stop'] },
  },
  {
    name: 'crowdplay_telegram_round_results_total',
    type: 'counter',
    unit: '1',
    help: "Result messages of chats' rounds queued on the transactional lane, by how the round ended",
    labels: { outcome: ['settled', 'cancelled'] },
  },
  {
    name: 'crowdplay_board_interval_ms',
    type: 'gauge',
    unit: 'ms',
    help: 'Refresh interval the board scheduler chose (docs/telegram.md: by cost, not by chat count), ms',
    labels: {},
  },
  {
    name: 'crowdplay_board_chats',
    type: 'gauge',
    unit: '1',
    help: 'Chats with a live board',
    labels: {},
  },
  {
    name: 'crowdplay_board_backlog',
    type: 'gauge',
    unit: '1',
    help: 'Boards handed on (render queue + send queue board lane) and not sent yet, as the scheduler last read it',
    labels: {},
  },
  {
    name: 'crowdplay_board_drain_per_s',
    type: 'gauge',
    unit: '1/s',
    help: 'Rate boards leave the backlog, as the scheduler estimates it, boards/s',
    labels: {},
  },
  {
    name: 'crowdplay_board_ahead_total',
    type: 'counter',
    unit: '1',
    help: 'Boards handed on beyond BOARD_SEND_BUDGET_PER_S so that the boards handed on and not yet sent hold BOARD_SEND_AHEAD_MS of work for the slots replies leave idle',
    labels: {},
  },
  {
    name: 'crowdplay_board_backlog_held_total',
    type: 'counter',
    unit: '1',
    help: "Due boards held back at a tick because BOARD_MAX_BACKLOG boards were in the send queue's board lane, boards per tick",
    labels: {},
  },
  {
    name: 'crowdplay_board_budget_held_total',
    type: 'counter',
    unit: '1',
    help: 'Due boards held back by the send or render budget at a tick (budget=memory: this process; redis: the bot-wide one), boards per tick',
    labels: { budget: ['memory', 'redis'] },
  },
  {
    name: 'crowdplay_telegram_boards_total',
    type: 'observableCounter',
    unit: '1',
    help: 'Board jobs by what they did (posted, edited, unchanged, recovered, stale, missing, ambiguousPosts, probes, reconciled, unreachable)',
    labels: {
      action: ['posted', 'edited', 'unchanged', 'recovered', 'stale', 'missing', 'ambiguousPosts', 'probes', 'reconciled', 'unreachable'],
    },
    formerly: 'crowdplay_telegram_boards',
  },
  {
    name: 'crowdplay_telegram_errors_total',
    type: 'observableCounter',
    unit: '1',
    help: 'Bot API failures by class (outcome.ts)',
    labels: {
      class: [
        'not_modified',
        'rate_limited',
        'edit_target_missing',
        'delete_target_missing',
        'migrated',
        'chat_gone',
        'server',
        'network',
        'rejected',
      ],
    },
    formerly: 'crowdplay_telegram_errors',
  },
  {
    name: 'crowdplay_telegram_avatar_total',
    type: 'observableCounter',
    unit: '1',
    help: 'Avatar reads: requests, cacheHits, collapsed, reads, failures, queued (waited for a read slot), gateWaits (avatar calls made elsewhere that waited for a slot)',
    labels: { stat: ['requests', 'cacheHits', 'collapsed', 'reads', 'failures', 'queued', 'gateWaits'] },
    formerly: 'crowdplay_telegram_avatar{stat="requests"|…|"gateWaits"}',
  },
  {
    name: 'crowdplay_telegram_avatar',
    type: 'gauge',
    unit: '1',
    help: 'Avatar reads now: waiting (in the FIFO for a read slot), peakInFlight (most avatar requests in flight at once), cacheBytes, cacheEntries',
    labels: { stat: ['waiting', 'peakInFlight', 'cacheBytes', 'cacheEntries'] },
  },

  // Render queue: board render jobs (services/telegram)
  {
    name: 'crowdplay_render_queue_depth',
    type: 'gauge',
    unit: '1',
    help: 'Board render jobs waiting for a render worker (BullMQ: as last read from Redis)',
    labels: {},
  },
  {
    name: 'crowdplay_render_queue_superseded_total',
    type: 'counter',
    unit: '1',
    help: 'Board render jobs replaced by a newer version of the same chat before they started (or submitted not newer)',
    labels: {},
  },
  {
    name: 'crowdplay_render_queue_refused_total',
    type: 'counter',
    unit: '1',
    help: 'Board render jobs refused, by reason (queue-full, too-large, closed)',
    labels: { reason: ['queue-full', 'too-large', 'closed'] },
  },
  {
    name: 'crowdplay_render_queue_failed_total',
    type: 'counter',
    unit: '1',
    help: 'Board render jobs that failed (render threw, or handing the PNG on threw); not retried',
    labels: {},
  },
  {
    name: 'crowdplay_render_queue_job_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'Board render job time: submit of the version rendered → its PNG handed to the send queue, ms',
    labels: {},
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_render_queue_job_bytes',
    type: 'histogram',
    unit: 'By',
    help: 'Board render job size (JSON, avatars base64), bytes',
    labels: {},
    buckets: SIZE_BUCKETS_BYTES,
  },

  // Board render threads (libs/board)
  {
    name: 'crowdplay_board_render_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'Board render time on a render thread, drawing and PNG encoding, ms',
    labels: {},
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_board_queued_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'Time a board waited for a render slot, ms',
    labels: {},
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_board_png_bytes',
    type: 'histogram',
    unit: 'By',
    help: 'Board PNG size, bytes',
    labels: {},
    buckets: SIZE_BUCKETS_BYTES,
  },
  {
    name: 'crowdplay_board_superseded_total',
    type: 'counter',
    unit: '1',
    help: 'Queued board renders replaced by a newer version of the same chat',
    labels: {},
  },
  {
    name: 'crowdplay_board_refused_total',
    type: 'counter',
    unit: '1',
    help: 'Board renders refused, by reason (queue-full, closed)',
    labels: { reason: ['queue-full', 'closed'] },
  },
  {
    name: 'crowdplay_board_failed_total',
    type: 'counter',
    unit: '1',
    help: 'Board renders that threw on a render thread',
    labels: {},
  },
  {
    name: 'crowdplay_board_png_over_budget_total',
    type: 'counter',
    unit: '1',
    help: 'Board PNGs larger than BOARD_MAX_PNG_BYTES',
    labels: {},
  },
  {
    name: 'crowdplay_board_ends_total',
    type: 'counter',
    unit: '1',
    help: 'Board ends (what became of each board handed to the send queue) published by render workers, heard by gateways, or dropped as malformed, over Redis',
    labels: { way: ['published', 'heard', 'malformed'] },
  },
  {
    name: 'crowdplay_board_latest_total',
    type: 'counter',
    unit: '1',
    help: 'Renders that drew a newer state of their chat than was submitted (outcome="newer"), or kept the submitted one because the newer could not be had (outcome="failed")',
    labels: { outcome: ['newer', 'failed'] },
  },
  {
    name: 'crowdplay_board_queue_depth',
    type: 'gauge',
    unit: '1',
    help: 'Board renders waiting for a slot',
    labels: {},
  },
  {
    name: 'crowdplay_board_in_flight',
    type: 'gauge',
    unit: '1',
    help: 'Boards handed to the render threads: drawing, or posted to a thread to draw next (at most 2 per thread)',
    labels: {},
  },
  {
    name: 'crowdplay_board_thread_heap_bytes',
    type: 'gauge',
    unit: 'By',
    help: "The render threads' V8 heaps, summed (reserved bytes, each as of its latest render): memory of the process outside the main heap",
    labels: {},
  },
  {
    name: 'crowdplay_board_thread_nice',
    type: 'gauge',
    unit: '1',
    help: 'The nice value the render threads run at (BOARD_RENDER_NICE), as read back on their latest render; absent until then or where it cannot be read',
    labels: {},
  },

  // Send queue: Bot API calls, buckets, 429 pauses (libs/sendq)
  {
    name: 'crowdplay_sendq_sends_total',
    type: 'counter',
    unit: '1',
    help: 'Bot API calls made through the send queue, by lane and outcome',
    labels: { lane: LANES, outcome: ['ok', 'retryAfter', 'deactivate', 'drop', 'retry', 'requeue', 'threw'] },
  },
  {
    name: 'crowdplay_sendq_rate_limited_total',
    type: 'counter',
    unit: '1',
    help: 'Bot API 429 answers (each pauses every sender for retry_after)',
    labels: {},
  },
  {
    name: 'crowdplay_sendq_pause_ms_total',
    type: 'counter',
    unit: 'ms',
    help: 'Bot-wide pause requested after 429s, ms',
    labels: {},
  },
  {
    name: 'crowdplay_sendq_superseded_total',
    type: 'counter',
    unit: '1',
    help: 'Queued jobs replaced by a newer job with the same key, by lane',
    labels: { lane: LANES },
  },
  {
    name: 'crowdplay_sendq_purged_total',
    type: 'counter',
    unit: '1',
    help: 'Queued jobs purged because their chat was deactivated',
    labels: {},
  },
  {
    name: 'crowdplay_sendq_failed_total',
    type: 'counter',
    unit: '1',
    help: 'Jobs that exhausted their retries or requeues',
    labels: {},
  },
  {
    name: 'crowdplay_sendq_expired_total',
    type: 'counter',
    unit: '1',
    help: 'Jobs dropped, never sent, because their deadline (a command reply whose caller stopped waiting) passed while they waited, by lane',
    labels: { lane: LANES },
  },
  {
    name: 'crowdplay_sendq_refused_total',
    type: 'counter',
    unit: '1',
    help: 'Enqueues refused, by reason (deactivated, full, closed, stale: a version older than the latest of its key)',
    labels: { reason: ['deactivated', 'full', 'closed', 'stale'] },
  },
  {
    name: 'crowdplay_sendq_bucket_waits_total',
    type: 'counter',
    unit: '1',
    help: 'Bucket takes refused, by the limit that refused (pause, bot, group, chat)',
    labels: { limit: ['pause', 'bot', 'group', 'chat'] },
  },
  {
    name: 'crowdplay_sendq_booked_total',
    type: 'counter',
    unit: '1',
    help: "Takes granted for the bot rate's next free slot (TELEGRAM_SENDQ_BOOK_MS) instead of refused: the worker waits for it",
    labels: {},
  },
  {
    name: 'crowdplay_sendq_booked_wait_ms_total',
    type: 'counter',
    unit: 'ms',
    help: 'Time workers waited for booked bot slots, ms',
    labels: {},
  },
  {
    name: 'crowdplay_sendq_window_waits_total',
    type: 'counter',
    unit: '1',
    help: "Calls held back by the process's call window (at most TELEGRAM_BOT_RATE_PER_S starts in any second: calls bunched behind a late one)",
    labels: {},
  },
  {
    name: 'crowdplay_sendq_window_wait_ms_total',
    type: 'counter',
    unit: 'ms',
    help: 'Time calls waited in the call window, ms',
    labels: {},
  },
  {
    name: 'crowdplay_sendq_job_ms',
    type: 'histogram',
    unit: 'ms',
    help: 'Send job enqueued → settled (queue wait, bucket waits, 429 pauses and the Bot API call), ms, by lane and status (sent, superseded, dropped, failed, …)',
    labels: { lane: LANES, status: ['sent', 'superseded', 'purged', 'deactivated', 'dropped', 'failed'] },
    buckets: LATENCY_BUCKETS_MS,
  },
  {
    name: 'crowdplay_sendq_depth',
    type: 'gauge',
    unit: '1',
    help: 'Jobs queued in the send queue (not started), by lane',
    labels: { lane: LANES },
  },
  {
    name: 'crowdplay_sendq_pause_end_seconds',
    type: 'gauge',
    unit: 's',
    help: "End of the latest bot-wide pause (a 429's retry_after) this process saw, unix seconds; 0 before the first: paused while it is later than now",
    labels: {},
  },
  {
    name: 'crowdplay_sendq_preempted_total',
    type: 'counter',
    unit: '1',
    help: "Replies that took a board call's booked slot of the bot rate (the board moved to the next free slot): replies never wait behind boards",
    labels: {},
  },
  {
    name: 'crowdplay_sendq_lane_utilisation',
    type: 'gauge',
    unit: '1',
    help: "Share of the bot rate (TELEGRAM_BOT_RATE_PER_S) this process's calls of the lane used over the last 10 s, 0-1: the lanes' sum near 1 while boards wait is a bucket used in full",
    labels: { lane: LANES },
  },
  {
    name: 'crowdplay_sendq_slow_start_window',
    type: 'gauge',
    unit: '1',
    help: 'Bot API calls this process lets in flight now: 1 at start and after each pause, doubled on each success up to TELEGRAM_SENDQ_CONCURRENCY',
    labels: {},
  },
] as const satisfies readonly MetricDefinition[];

type Entry = (typeof metricCatalogue)[number];
/** The name of any catalogued metric. */
export type MetricName = Entry['name'];
/** Names of the metrics of one {@link MetricType}. */
export type MetricNameOf<T extends MetricType> = Extract<Entry, { type: T }>['name'];
export type CounterName = MetricNameOf<'counter'>;
export type ObservableCounterName = MetricNameOf<'observableCounter'>;
export type UpDownCounterName = MetricNameOf<'upDownCounter'>;
export type GaugeName = MetricNameOf<'gauge'>;
export type HistogramName = MetricNameOf<'histogram'>;
/** Names metrics were exported as before their type was fixed (see `formerly`). */
export type FormerMetricName = Extract<Entry, { formerly: string }>['formerly'];

const byName: ReadonlyMap<string, MetricDefinition> = new Map(metricCatalogue.map((d) => [d.name, d]));
const byFormerName: ReadonlyMap<string, MetricDefinition> = new Map(
  metricCatalogue.flatMap((d: MetricDefinition) => (d.formerly === undefined ? [] : [[d.formerly, d] as const])),
);

/**
 * The catalogue entry of `name`, checked to be of `type` (one of `types`).
 * @throws RangeError when `name` is not in the catalogue
 * @throws TypeError when it is catalogued as another type
 */
export function metricDefinition(name: string, ...types: MetricType[]): MetricDefinition {
  const d = byName.get(name);
  if (d === undefined) throw new RangeError(`metric ${name} is not in the catalogue (libs/telemetry/src/catalogue.ts)`);
  if (types.length > 0 && !types.includes(d.type))
    throw new TypeError(`metric ${name} is a ${d.type} in the catalogue, not a ${types.join(' or ')}`);
  return d;
}

/** The entry that was exported as `formerName` before its type was fixed, or undefined. */
export function formerMetricDefinition(formerName: string): MetricDefinition | undefined {
  return byFormerName.get(formerName);
}

/** The Prometheus type `d` is exposed as: counter, gauge or histogram. */
export function prometheusType(d: Pick<MetricDefinition, 'type'>): 'counter' | 'gauge' | 'histogram' {
  switch (d.type) {
    case 'counter':
    case 'observableCounter':
      return 'counter';
    case 'upDownCounter':
    case 'gauge':
      return 'gauge';
    case 'histogram':
      return 'histogram';
  }
}

/** Series the OpenTelemetry Prometheus exporter adds of its own (the process's resource attributes): no crowdplay metric. */
export const EXPORTER_SERIES_NAMES: readonly string[] = ['target_info'];

/**
 * Every Prometheus series name the catalogue's metrics are exposed under on
 * `/metrics`: a counter's or gauge's name, and a histogram's
 * `<name>_bucket`, `<name>_sum` and `<name>_count` (not the bare histogram
 * name: no series carries it). The exporter's own series
 * ({@link EXPORTER_SERIES_NAMES}) are not included. In catalogue order, no duplicates.
 */
export function exportedSeriesNames(): string[] {
  return metricCatalogue.flatMap((d: MetricDefinition) =>
    prometheusType(d) === 'histogram' ? [`${d.name}_bucket`, `${d.name}_sum`, `${d.name}_count`] : [d.name],
  );
}
