/**
 * The board-renderer's parts, also run inside a gateway that renders its own
 * boards: the render queue chosen by REDIS_URL, the RenderPool of render
 * threads, and the worker that renders each job and queues its PNG on the
 * bot's send queue.
 */
import { RenderPool, type RenderPoolOptions } from '@crowdplay/board';
import type { Config } from '@crowdplay/config';
import type { EnqueueResult } from '@crowdplay/sendq';
import type { TelegramClient } from '@crowdplay/telegram';
import type { Telemetry } from '@crowdplay/telemetry';
import type { QueuePrefixes } from '@crowdplay/telegram-sender';
import { LocalBoardEnds, RedisBoardEnds, type BoardEnds } from './board-ends.ts';
import { openRenderQueue } from './render-queue-open.ts';
import type { RenderQueue } from './render-queue.ts';

/**
 * The render queue chosen by REDIS_URL (in-process, or BullMQ), not started.
 * @param prefixes.render its Redis key prefix (tests) @defaultValue BOARD_RENDER_PREFIX
 * @throws the queue's error when Redis is unreachable
 */
export function openRenders(config: Config, telemetry: Telemetry, prefixes: QueuePrefixes = {}): Promise<RenderQueue> {
  return openRenderQueue({
    redisUrl: config.redis.url,
    prefix: prefixes.render ?? config.board.renderPrefix,
    maxQueue: config.board.renderMaxQueue,
    maxJobBytes: config.board.renderMaxJobBytes,
    metrics: telemetry.metrics,
    refusals: telemetry.refusals,
    onError: (err, context) => telemetry.logger.error({ err, context }, 'board render queue error'),
  });
}

/**
 * Where board ends travel (board-ends.ts): over Redis under BOARD_RENDER_PREFIX with REDIS_URL (render workers and
 * the gateways holding the chats may be different processes), within this process without.
 * @param prefixes.render its Redis key prefix (tests) @defaultValue BOARD_RENDER_PREFIX
 * @throws the ioredis error when Redis is unreachable
 */
export async function openBoardEnds(config: Config, telemetry: Telemetry, prefixes: QueuePrefixes = {}): Promise<BoardEnds> {
  if (!config.redis.url) return new LocalBoardEnds();
  return RedisBoardEnds.open({
    redisUrl: config.redis.url,
    prefix: prefixes.render ?? config.board.renderPrefix,
    metrics: telemetry.metrics,
    onError: (err, context) => telemetry.logger.error({ err, context }, 'board ends error'),
  });
}

/**
 * Starts the render worker on `renders`: a RenderPool (BOARD_RENDER_CONCURRENCY
 * threads behind its semaphore) whose PNGs go to the send queue through
 * `client.enqueueBoard` (lane `board`, a newer board superseding a queued one).
 * @param hooks.onQueued the send queue's answer for each board (board-ends.ts `publishingHooks`: late binding,
 *   and whether the board was delivered); `hooks.onFailed`: a board not handed on (its render threw)
 * @param jobConcurrency BOARD_RENDER_JOBS_IN_FLIGHT (BullMQ) @defaultValue the pool's slots
 */
export function startRenderWorker(
  renders: RenderQueue,
  pool: RenderPool,
  client: TelegramClient,
  hooks: {
    onQueued?: (chatId: number, version: number, r: EnqueueResult) => void;
    onFailed?: (chatId: number, version: number) => void;
  } = {},
  jobConcurrency?: number,
): void {
  const { onQueued, onFailed } = hooks;
  renders.start({
    pool,
    ...(jobConcurrency !== undefined ? { jobConcurrency } : {}),
    ...(onFailed ? { onFailed } : {}),
    onRendered: async (chatId, version, png) => {
      const r = await client.enqueueBoard(chatId, { version, png });
      onQueued?.(chatId, version, r);
      return r;
    },
  });
}

/**
 * A RenderPool of BOARD_RENDER_CONCURRENCY threads at BOARD_RENDER_NICE (BOARD_MAX_PNG_BYTES, BOARD_RENDER_MAX_QUEUE).
 * @param latest the pool's late binding (a gateway's ChatBoards.latest: a render draws its chat's newest state)
 */
export function newRenderPool(config: Config, telemetry: Telemetry, latest?: RenderPoolOptions['latest']): RenderPool {
  return new RenderPool({
    ...(latest ? { latest } : {}),
    ...(config.board.renderConcurrency > 0 ? { concurrency: config.board.renderConcurrency } : {}),
    threadNice: config.board.renderNice,
    maxPngBytes: config.board.maxPngBytes,
    maxQueue: config.board.renderMaxQueue,
    metrics: telemetry.metrics,
    refusals: telemetry.refusals,
  });
}
