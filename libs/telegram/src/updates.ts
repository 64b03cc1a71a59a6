/**
 * Webhook updates shared by every gateway of one bot (cluster mode, REDIS_URL).
 *
 * Telegram delivers each update to one webhook URL; behind a load balancer any
 * gateway may receive it, and a re-delivery (Telegram did not see the 200) may
 * reach another gateway than the first delivery. So:
 *
 * - **De-duplication is shared**: `SET {p}:seen:<update_id> 1 NX PX ttl`. The
 *   first `admit` of an id wins; every later one, on any gateway, is a
 *   duplicate (TELEGRAM_WEBHOOK_DEDUPE_TTL_MS: Telegram re-delivers for up to
 *   24 h).
 * - **A chat's updates are handled in order, in one place**: the admitted
 *   update is appended to its chat's list `{p}:q:<chat>` and the admitting
 *   gateway tries to take the chat's lease `{p}:lock:<chat>` (SET NX PX), all
 *   in one Lua script. The lease holder alone takes the chat's updates, oldest
 *   first (`next`: LPOP, renewing the lease), and handles them one at a time;
 *   when the list is empty `next` deletes the lease in the same script, so an
 *   update admitted after that finds no lease and its gateway drains it. An
 *   update admitted while the lease is held waits in the list for the holder.
 *   Each update is popped before it is handled: handled at most once (a
 *   gateway that dies mid-update loses that one update, never repeats it).
 * - A holder that died leaves its lease to expire (TELEGRAM_CHAT_LEASE_MS);
 *   the chat's waiting updates are then taken by the gateway that admits the
 *   chat's next update (in order, before it).
 *
 * Keys share the hash tag `{<prefix>}` (one Redis Cluster slot; the scripts
 * touch several keys atomically).
 */
import { randomUUID } from 'node:crypto';
import { connectRedis, defineLua, updateKeys, type LuaCall } from '@crowdplay/sendq';
import type { Redis } from 'ioredis';

/**
 * ADMIT. KEYS: 1 seen:<update_id>, 2 q:<chat>, 3 lock:<chat>.
 * ARGV: 1 dedupe ttl ms, 2 the update (JSON), 3 owner token, 4 lease ms.
 * Replies 0 duplicate, 1 queued behind the lease holder, 2 queued and the lease is the caller's.
 */
export const ADMIT_LUA = `
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
if redis.call('SET', KEYS[3], ARGV[3], 'NX', 'PX', ARGV[4]) then return 2 end
return 1
`;

/**
 * NEXT. KEYS: 1 q:<chat>, 2 lock:<chat>. ARGV: 1 owner token, 2 lease ms, 3 op ('next' | 'release').
 * Replies {0} the lease is another gateway's (stop), {1} nothing left (lease deleted), {2, update}.
 * A lease that lapsed while nobody else took it is taken again. `release` gives the lease up
 * (a stopping gateway) and leaves the list for the chat's next admitting gateway.
 */
export const NEXT_LUA = `
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then return {0} end
if ARGV[3] == 'release' then
  if holder then redis.call('DEL', KEYS[2]) end
  return {1}
end
local u = redis.call('LPOP', KEYS[1])
if not u then
  if holder then redis.call('DEL', KEYS[2]) end
  return {1}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return {2, u}
`;

/**
 * The key that orders an update: its chat (`message`, `edited_message`,
 * `channel_post`, `my_chat_member`, `chat_member`, `chat_join_request`, a
 * `callback_query`'s message), or `bot` for updates of no chat. Both messages
 * of a group's migration are ordered under the OLD chat (`migrate_from_chat_id`
 * names it), so the two never run at once.
 */
export function updateChatKey(update: Record<string, unknown>): string {
  const obj = (x: unknown): Record<string, unknown> | undefined =>
    typeof x === 'object' && x !== null ? (x as Record<string, unknown>) : undefined;
  const chatOf = (m: Record<string, unknown> | undefined): unknown => obj(m?.chat)?.id;
  for (const field of ['message', 'edited_message', 'channel_post', 'edited_channel_post']) {
    const m = obj(update[field]);
    if (!m) continue;
    const from = m.migrate_from_chat_id;
    const id = typeof from === 'number' && Number.isSafeInteger(from) ? from : chatOf(m);
    if (typeof id === 'number' && Number.isSafeInteger(id)) return String(id);
  }
  for (const field of ['my_chat_member', 'chat_member', 'chat_join_request']) {
    const id = chatOf(obj(update[field]));
    if (typeof id === 'number' && Number.isSafeInteger(id)) return String(id);
  }
  const id = chatOf(obj(obj(update.callback_query)?.message));
  if (typeof id === 'number' && Number.isSafeInteger(id)) return String(id);
  return 'bot';
}

/** What {@link SharedUpdates.admit} decided. */
export type AdmitResult = 'duplicate' | 'queued' | 'owner';
/** What {@link SharedUpdates.next} gives: an update to handle, `empty` (the lease is given up) or `lost` (another gateway holds it). */
export type NextResult = { update: Record<string, unknown> } | 'empty' | 'lost';

/** Options of {@link RedisUpdates.open}. */
export interface RedisUpdatesOptions {
  /** REDIS_URL (the log opens and owns its connection), unless `redis` is given. */
  redisUrl?: string;
  /** An existing connection (not closed by `close()`). */
  redis?: Redis;
  /** Key prefix (`<TELEGRAM_SENDQ_PREFIX>:updates` in a process). */
  prefix: string;
  /** TELEGRAM_WEBHOOK_DEDUPE_TTL_MS: how long an update_id is remembered, ms. */
  dedupeTtlMs: number;
  /** TELEGRAM_CHAT_LEASE_MS: a chat's lease, renewed at every update taken, ms. */
  leaseMs: number;
}

/** The port the webhook uses (gateway telegram-webhook.ts). */
export interface SharedUpdates {
  /**
   * Remembers `update_id` and appends the update to its chat's list, in one step.
   * @returns `duplicate` (seen before, on any gateway: nothing changed), `queued` (another
   *   gateway holds the chat and will handle it), `owner` (the caller holds the chat now and
   *   must drain it with `next`)
   */
  admit(chatKey: string, update: { update_id: number }): Promise<AdmitResult>;
  /** The chat's oldest waiting update (renewing the lease), or `empty` (lease deleted) / `lost`. */
  next(chatKey: string): Promise<NextResult>;
  /** Gives the chat's lease up (stopping): its waiting updates go to the next admitting gateway. */
  release(chatKey: string): Promise<void>;
  close(): Promise<void>;
}

/** {@link SharedUpdates} on Redis (two Lua scripts, atomic across every gateway sharing the prefix). */
export class RedisUpdates implements SharedUpdates {
  /** This process's lease token. */
  readonly owner = randomUUID();
  private readonly keys;

  private readonly admitLua: LuaCall;
  private readonly nextLua: LuaCall;

  private constructor(
    private readonly redis: Redis,
    private readonly owned: boolean,
    private readonly o: RedisUpdatesOptions,
  ) {
    this.keys = updateKeys(o.prefix);
    this.admitLua = defineLua(redis, 'cpUpdatesAdmit', ADMIT_LUA);
    this.nextLua = defineLua(redis, 'cpUpdatesNext', NEXT_LUA);
  }

  /**
   * Connects (unless given a connection).
   * @throws RangeError on a bad prefix, a TTL or lease not a positive integer, or neither `redis` nor `redisUrl`;
   *   the ioredis error when Redis is unreachable
   */
  static async open(o: RedisUpdatesOptions): Promise<RedisUpdates> {
    updateKeys(o.prefix);
    for (const [k, v] of Object.entries({ dedupeTtlMs: o.dedupeTtlMs, leaseMs: o.leaseMs })) {
      if (!Number.isSafeInteger(v) || v <= 0) throw new RangeError(`${k} must be a positive integer (ms), got ${v}`);
    }
    const { redis, owned } = await connectRedis(o, 'RedisUpdates');
    return new RedisUpdates(redis, owned, o);
  }

  async admit(chatKey: string, update: { update_id: number }): Promise<AdmitResult> {
    const k = this.keys;
    const r = await this.admitLua(
      [k.seen(update.update_id), k.queue(chatKey), k.lock(chatKey)],
      [this.o.dedupeTtlMs, JSON.stringify(update), this.owner, this.o.leaseMs],
    );
    return r === 0 ? 'duplicate' : r === 2 ? 'owner' : 'queued';
  }

  async next(chatKey: string): Promise<NextResult> {
    const r = (await this.nextLua([this.keys.queue(chatKey), this.keys.lock(chatKey)], [this.owner, this.o.leaseMs, 'next'])) as [
      number,
      string?,
    ];
    if (r[0] === 0) return 'lost';
    if (r[0] === 1) return 'empty';
    return { update: JSON.parse(r[1]!) as Record<string, unknown> };
  }

  async release(chatKey: string): Promise<void> {
    await this.nextLua([this.keys.queue(chatKey), this.keys.lock(chatKey)], [this.owner, this.o.leaseMs, 'release']);
  }

  async close(): Promise<void> {
    if (this.owned) await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
