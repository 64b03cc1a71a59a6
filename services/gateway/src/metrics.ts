import { readFileSync } from 'node:fs';
import type { Counter, Histogram, UpDownCounter } from '@opentelemetry/api';
import type { Metrics } from '@crowdplay/telemetry';

/** The gateway's own instruments (refusals go through `telemetry.refusals`). */
export interface GatewayMetrics {
  /** Authenticated sockets now open, by `role` (crowd | game). */
  connections: UpDownCounter;
  /** Sockets that completed auth and got a welcome, by `role`. */
  opened: Counter;
  /** Intents published to the bus inside IntentBatches. */
  intentsForwarded: Counter;
  /** IntentBatch messages published that carry intents (intents / batches = the micro-batching factor; join-only batches are not counted). */
  intentBatches: Counter;
  /** Intents and joins published again because their channel was moving (INTENT_MOVE_RESEND_MS), by outcome: resent, expired (the refusal went to the viewer). */
  intentsResent: Counter;
  /** crowdplay_game_ctl_retried_total{outcome}: a game's declare/state sent again after a retryable refusal. */
  gameCtlRetried: Counter;
  /** Update frames written to sockets (one per socket per update). */
  updatesSent: Counter;
  /** Updates a socket skipped because its send buffer was over WS_SKIP_BUFFERED_BYTES. */
  updatesSkipped: Counter;
  /** Size of each channel update broadcast (bytes, once per broadcast, not per socket). */
  broadcastBytes: Histogram;
  /** Connections refused before or during setup (upgrade refused, auth or channel check failed), by `reason` (the error code). */
  connectionsRefused: Counter;
  /** Sockets closed with 4008 because their send buffer passed WS_MAX_BUFFERED_BYTES. */
  slowConsumerCloses: Counter;
  /** Upgrade completed → welcome sent (auth, assign), ms, by `role`. */
  connectSetupMs: Histogram;
  /** Upgrade requests that waited for a later event-loop turn (WS_UPGRADE_TURN_BUDGET_MS). */
  upgradesDeferred: Counter;
  /** Reconnects with `lastEventId`, by `role` and `outcome` (replayed, current, resync_<reason>). */
  resumes: Counter;
  /** Logged events replayed to reconnecting game sockets. */
  eventsReplayed: Counter;
  /** Live batches a game socket had already been sent (a resume's replay, a new owner repeating the last logged batch): not sent twice. */
  replayedLiveSkipped: Counter;
}

/**
 * Creates the gateway instruments on `metrics`. Call once per Metrics
 * instance (OpenTelemetry would merge a second registration of a name).
 * `channels` is read at scrape time for `crowdplay_gateway_channels`,
 * `bufferedBytes` for `crowdplay_ws_buffered_bytes`, `upgradesWaiting` for
 * `crowdplay_upgrades_waiting`.
 */
export function createGatewayMetrics(
  metrics: Metrics,
  channels: () => number,
  bufferedBytes: () => number = () => 0,
  upgradesWaiting: () => number = () => 0,
): GatewayMetrics {
  metrics.gauge('crowdplay_upgrades_waiting', upgradesWaiting);
  metrics.gauge('crowdplay_gateway_channels', channels);
  metrics.gauge('crowdplay_ws_buffered_bytes', bufferedBytes);
  metrics.observableCounter('crowdplay_listen_overflows_total', () => {
    const n = listenOverflows();
    return n === undefined ? [] : n;
  });
  return {
    connections: metrics.upDown('crowdplay_connections'),
    opened: metrics.counter('crowdplay_connections_opened_total'),
    connectionsRefused: metrics.counter('crowdplay_connections_refused_total'),
    intentsForwarded: metrics.counter('crowdplay_intents_forwarded_total'),
    intentBatches: metrics.counter('crowdplay_intent_batches_total'),
    intentsResent: metrics.counter('crowdplay_intents_move_resent_total'),
    gameCtlRetried: metrics.counter('crowdplay_game_ctl_retried_total'),
    updatesSent: metrics.counter('crowdplay_updates_sent_total'),
    updatesSkipped: metrics.counter('crowdplay_updates_skipped_total'),
    broadcastBytes: metrics.histogram('crowdplay_broadcast_bytes'),
    upgradesDeferred: metrics.counter('crowdplay_upgrades_deferred_total'),
    connectSetupMs: metrics.histogram('crowdplay_connect_setup_ms'),
    resumes: metrics.counter('crowdplay_resumes_total'),
    eventsReplayed: metrics.counter('crowdplay_events_replayed_total'),
    replayedLiveSkipped: metrics.counter('crowdplay_replayed_live_skipped_total'),
    slowConsumerCloses: metrics.counter('crowdplay_slow_consumer_closes_total'),
  };
}

/**
 * TcpExt ListenOverflows from /proc/net/netstat: SYNs dropped because an
 * accept queue was full (the whole network namespace, not only this port).
 * @returns the count, or undefined where the file does not exist (not Linux)
 */
export function listenOverflows(path = '/proc/net/netstat'): number | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
  const lines = text.split('\n');
  for (let i = 0; i + 1 < lines.length; i += 2) {
    if (!lines[i]!.startsWith('TcpExt:')) continue;
    const names = lines[i]!.split(/\s+/);
    const values = lines[i + 1]!.split(/\s+/);
    const at = names.indexOf('ListenOverflows');
    if (at > 0 && values[at] !== undefined) return Number(values[at]);
  }
  return undefined;
}
