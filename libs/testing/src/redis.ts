/**
 * Redis clean-up for tests that isolate themselves under a key prefix.
 */
import { Redis } from 'ioredis';

/**
 * Deletes every key starting with `prefix` (SCAN + DEL in pages of 500), for
 * tests whose queues and buckets live under a prefix of their own.
 * @param prefix the literal start of the keys (glob characters in it are matched as globs)
 * @param redisUrl @defaultValue REDIS_URL, else redis://127.0.0.1:6379
 * @returns how many keys were deleted
 * @throws the connection's error when Redis is unreachable
 */
export async function deleteRedisKeys(prefix: string, redisUrl = process.env.REDIS_URL || 'redis://127.0.0.1:6379'): Promise<number> {
  const redis = new Redis(redisUrl);
  let deleted = 0;
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) deleted += await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    await redis.quit();
  }
  return deleted;
}
