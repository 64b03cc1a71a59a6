/**
 * The one way the send path runs a Lua script on Redis: ioredis's
 * `defineCommand`, which calls EVALSHA and, when Redis answers NOSCRIPT (its
 * script cache emptied by a restart or SCRIPT FLUSH), EVAL, which caches the
 * script again. Used by the send queue's bucket, the webhook's shared
 * updates, the board budget and the render queue.
 */
import type { Redis } from 'ioredis';

/** Runs one script: its KEYS, then its ARGV. @returns the script's reply as ioredis decodes it */
export type LuaCall = (keys: readonly string[], args: ReadonlyArray<string | number>) => Promise<unknown>;

/**
 * Defines `lua` on `redis` under `name` (a command of that client: one name per script, the same on every
 * connection) and returns its caller, which passes the key count itself.
 * @throws Error when `name` is not an identifier (ioredis would define a method of that name on the client)
 */
export function defineLua(redis: Redis, name: string, lua: string): LuaCall {
  if (!/^[A-Za-z][A-Za-z0-9]{0,63}$/.test(name)) throw new Error(`a Lua command name must be an identifier, got "${name}"`);
  redis.defineCommand(name, { lua });
  const command = (redis as unknown as Record<string, (...a: Array<string | number>) => Promise<unknown>>)[name]!;
  return (keys, args) => command.call(redis, keys.length, ...keys, ...args);
}
