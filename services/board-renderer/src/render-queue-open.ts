import { BullmqRenderQueue } from './render-queue-bullmq.ts';
import { MemoryRenderQueue, type RenderQueue, type RenderQueueOptions } from './render-queue.ts';

/** Options of {@link openRenderQueue}. */
export interface OpenRenderQueueOptions extends RenderQueueOptions {
  /** REDIS_URL; `''` selects the in-process queue (renders in this process's pool). */
  redisUrl: string;
  /** Redis key prefix (BullMQ adapter). @defaultValue DEFAULT_RENDER_PREFIX ('crowdplay:render') */
  prefix?: string;
}

/**
 * Opens the render queue chosen by `redisUrl`: {@link MemoryRenderQueue} when
 * it is `''`, else {@link BullmqRenderQueue}. Log `queue.kind` at start-up.
 * @throws RangeError on bad options; the ioredis error when Redis is unreachable
 */
export async function openRenderQueue(opts: OpenRenderQueueOptions): Promise<RenderQueue> {
  if (opts.redisUrl === '') return new MemoryRenderQueue(opts);
  return BullmqRenderQueue.open(opts);
}
