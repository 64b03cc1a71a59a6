/**
 * The `board-renderer` service: the render queue's worker on its own.
 */
import type { RenderPool } from '@crowdplay/board';
import type { Config } from '@crowdplay/config';
import { CrowdplayError } from '@crowdplay/protocol';
import type { Telemetry } from '@crowdplay/telemetry';
import { openBot, type QueuePrefixes } from '@crowdplay/telegram-sender';
import type { BoardEnds } from './board-ends.ts';
import type { RenderQueue } from './render-queue.ts';
import { publishingHooks } from './board-ends.ts';
import { newRenderPool, openBoardEnds, openRenders, startRenderWorker } from './rendering.ts';

/**
 * The `board-renderer` service: the render queue's worker alone (BullMQ on
 * REDIS_URL): it takes the render jobs the gateways submit, renders them in
 * its RenderPool (BOARD_RENDER_CONCURRENCY threads behind the semaphore) and
 * queues each PNG on the bot's send queue (BullMQ; a `telegram-sender` or a
 * gateway sends it), and publishes what became of each board (board-ends.ts)
 * for the gateway that holds its chat.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID without TELEGRAM_BOT_TOKEN or REDIS_URL
 */
export async function startBoardRenderer(deps: {
  config: Config;
  telemetry: Telemetry;
  /** Redis key prefixes (tests). */
  prefixes?: QueuePrefixes;
}): Promise<{ renders: RenderQueue; pool: RenderPool; close(): Promise<void> }> {
  const { config, telemetry } = deps;
  if (!config.telegram.botToken) {
    throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['TELEGRAM_BOT_TOKEN: the board-renderer queues the boards for the bot']);
  }
  if (!config.redis.url) {
    throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [
      'REDIS_URL: the board-renderer takes its jobs from the BullMQ render queue on Redis',
    ]);
  }
  const { queue, client } = await openBot(config, telemetry, deps.prefixes);
  let renders: RenderQueue;
  let ends: BoardEnds;
  try {
    renders = await openRenders(config, telemetry, deps.prefixes);
  } catch (err) {
    await queue.close(1_000);
    throw err;
  }
  try {
    ends = await openBoardEnds(config, telemetry, deps.prefixes);
  } catch (err) {
    await renders.close();
    await queue.close(1_000);
    throw err;
  }
  const pool = newRenderPool(config, telemetry);
  startRenderWorker(renders, pool, client, publishingHooks(ends), config.board.renderJobsInFlight);
  telemetry.logger.info({ renders: renders.kind, concurrency: pool.concurrency, queue: queue.kind }, 'board-renderer is rendering');
  return {
    renders,
    pool,
    async close() {
      await renders.close();
      await pool.close();
      await queue.close(5_000);
      await ends.close();
    },
  };
}
