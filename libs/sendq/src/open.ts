import { BullmqSendQueue } from './bullmq-queue.ts';
import { MemorySendQueue } from './memory-queue.ts';
import type { SendQueueOptions } from './options.ts';
import type { SendQueue } from './types.ts';

/** Options of {@link openSendQueue}. */
export interface OpenSendQueueOptions extends SendQueueOptions {
  /** REDIS_URL; `''` selects the in-process queue and bucket (standalone). */
  redisUrl: string;
  /** Redis key prefix (BullMQ adapter). @defaultValue DEFAULT_PREFIX */
  prefix?: string;
}

/**
 * Opens the send queue chosen by `redisUrl`: `MemorySendQueue` with a
 * `MemoryBucket` when it is `''`, else `BullmqSendQueue` with the Redis Lua
 * bucket. Log `queue.kind` and `queue.bucket.kind` at start-up.
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID on bad options; the ioredis error when Redis is unreachable.
 */
export async function openSendQueue<P>(opts: OpenSendQueueOptions): Promise<SendQueue<P>> {
  if (opts.redisUrl === '') return new MemorySendQueue<P>(opts);
  return BullmqSendQueue.open<P>(opts);
}
