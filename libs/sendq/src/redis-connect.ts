import { Redis } from 'ioredis';

/**
 * The Redis connection of a component that takes either a client (shared,
 * not closed by it) or a URL (its own, connected here): used by the Lua
 * bucket, the board budget and the webhook's shared update de-duplication.
 * Connection errors surface as rejected commands; without an `error`
 * listener ioredis would also log every reconnect attempt.
 * @param who named in the error when neither is given
 * @returns the client and whether the caller owns it (must `quit` it)
 * @throws RangeError without `redis` or `redisUrl`; the connect error when the URL does not answer
 */
export async function connectRedis(
  o: { redis?: Redis | undefined; redisUrl?: string | undefined },
  who: string,
): Promise<{ redis: Redis; owned: boolean }> {
  if (o.redis !== undefined) return { redis: o.redis, owned: false };
  if (!o.redisUrl) throw new RangeError(`${who} needs redis or redisUrl`);
  const redis = new Redis(o.redisUrl, { maxRetriesPerRequest: 3, lazyConnect: true });
  redis.on('error', () => {});
  try {
    await redis.connect();
  } catch (err) {
    redis.disconnect();
    throw err;
  }
  return { redis, owned: true };
}
