/**
 * @crowdplay/sendq: the one send queue every outgoing Telegram Bot API call
 * passes. See docs/sendq.md for the bucket's algorithm, the key layout, the
 * scheduling design and the outcome policy.
 */
export * from './types.ts';
export { CallWindow } from './call-window.ts';
export { systemClock, scaledClock, ManualClock, longTimeout, MAX_TIMER_MS, type Clock } from './clock.ts';
export {
  DEFAULT_CONCURRENCY,
  DEFAULT_MAX_QUEUED,
  DEFAULT_MAX_RETRIES,
  DEFAULT_RETRY_BASE_MS,
  DEFAULT_RETRY_MAX_MS,
  DEFAULT_MAX_REQUEUES,
  DEFAULT_BOT_BOOK_MS,
  DEFAULT_PAUSE_ERROR_AFTER_MS,
  retryBackoffMs,
  type SendQueueOptions,
} from './options.ts';
export {
  intervalsOf,
  chatIntervalsOf,
  chatSpacingUs,
  gcraWaitUs,
  gcraGrant,
  decideTake,
  botRetryMs,
  type ChatLimits,
  type ChatIntervals,
  type Intervals,
  type TakeState,
  type TakeDecision,
} from './gcra.ts';
export {
  DEFAULT_PREFIX,
  DEFAULT_RENDER_PREFIX,
  boardBudgetKey,
  keyBase,
  renderQueueKeys,
  sendqKeys,
  updateKeys,
  type SendqKeys,
} from './keys.ts';
export { defineLua, type LuaCall } from './lua.ts';
export { MemoryBucket, type MemoryBucketOptions } from './memory-bucket.ts';
export { RedisBucket, BUCKET_LUA, BUCKET_LUA_SHA, type RedisBucketOptions } from './redis-bucket.ts';
export { connectRedis } from './redis-connect.ts';
export { MemorySendQueue, type MemorySendQueueOptions } from './memory-queue.ts';
export { BullmqSendQueue, type BullmqSendQueueOptions } from './bullmq-queue.ts';
export { openSendQueue, type OpenSendQueueOptions } from './open.ts';
