import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import type { Clock } from './clock.ts';
import { intervalsOf, waitUsToMs, type Intervals } from './gcra.ts';
import { sendqKeys, type SendqKeys } from './keys.ts';
import { checkLimits, checkMaxWait } from './options.ts';
import { connectRedis } from './redis-connect.ts';
import type { LimitName, SendBucket, SendLimits, TakeResult } from './types.ts';

/**
 * The one Lua script of the bucket (ops `take`, `pause`, `paused`); the same
 * steps as `decideTake` in gcra.ts, on integer µs.
 *
 * KEYS: 1 pause, 2 bot, 3 chat, 4 group (only for a group take)
 * ARGV: 1 op, 2 now µs ('' = Redis TIME), 3 bot interval µs, 4 chat interval µs,
 *       5 group interval µs, 6 pause duration µs (op pause), 7 longest booked wait µs (op take)
 * Replies: take → {1, now, waitUs} | {0, now, retryUs, botWaitUs, limit (1 pause, 2 bot, 3 group, 4 chat)};
 *          pause / paused → {now, pausedUntilUs}
 *
 * Every key written expires (PX) 1 s after it stops mattering (its tat or
 * pause end), so an idle bot leaves no keys. PX counts real ms: with an
 * injected clock faster than real time that is longer than needed, never
 * shorter.
 */
export const BUCKET_LUA = `
local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end
local function px(untilUs)
  return math.floor((untilUs - now) / 1000) + 1000
end
local pausedUntil = tonumber(redis.call('GET', KEYS[1]) or '0')
local op = ARGV[1]
if op == 'pause' then
  local untilUs = now + tonumber(ARGV[6])
  if untilUs > pausedUntil then
    redis.call('SET', KEYS[1], string.format('%d', untilUs), 'PX', px(untilUs))
    pausedUntil = untilUs
  end
  return {now, pausedUntil}
end
if op == 'paused' then
  return {now, pausedUntil}
end
local botTat = tonumber(redis.call('GET', KEYS[2]) or '0')
local chatTat = tonumber(redis.call('GET', KEYS[3]) or '0')
local isGroup = #KEYS >= 4
local groupTat = 0
if isGroup then groupTat = tonumber(redis.call('GET', KEYS[4]) or '0') end
local pauseW = math.max(0, pausedUntil - now)
local botW = math.max(0, botTat - now)
local groupW = math.max(0, groupTat - now)
local chatW = math.max(0, chatTat - now)
local retry = math.max(pauseW, botW, groupW, chatW)
local booked = retry > 0 and pauseW == 0 and groupW == 0 and chatW == 0 and botW <= tonumber(ARGV[7])
if retry > 0 and not booked then
  local limit = 4
  if retry == pauseW then limit = 1 elseif retry == botW then limit = 2 elseif retry == groupW then limit = 3 end
  return {0, now, retry, math.max(pauseW, botW), limit}
end
local at = now + botW
local b = math.max(botTat, at) + tonumber(ARGV[3])
redis.call('SET', KEYS[2], string.format('%d', b), 'PX', px(b))
local c = math.max(chatTat, at) + tonumber(ARGV[4])
redis.call('SET', KEYS[3], string.format('%d', c), 'PX', px(c))
if isGroup then
  local g = math.max(groupTat, at) + tonumber(ARGV[5])
  redis.call('SET', KEYS[4], string.format('%d', g), 'PX', px(g))
end
return {1, now, botW}
`;

/** SHA-1 of {@link BUCKET_LUA} (the EVALSHA handle). */
export const BUCKET_LUA_SHA = createHash('sha1').update(BUCKET_LUA).digest('hex');

const LIMITS: readonly LimitName[] = ['pause', 'bot', 'group', 'chat'];

/** Options of {@link RedisBucket.open}. */
export interface RedisBucketOptions {
  /** Redis URL (REDIS_URL); the bucket opens and owns its connection. Ignored when `redis` is given. */
  redisUrl?: string;
  /** An existing connection to use (not closed by `close()`). */
  redis?: Redis;
  /** Key prefix (see keys.ts). @defaultValue DEFAULT_PREFIX */
  prefix?: string;
  limits: SendLimits;
  /**
   * Time source. Unset (production): the script reads Redis TIME, one clock
   * for every process. Set (tests): `clock.now()` is passed to the script
   * as ARGV, so every process sharing the keys must pass the same clock.
   */
  clock?: Clock;
}

/** Reply of the Lua script. */
type Reply = number[];

/**
 * The Redis bucket: one Lua script (loaded once with SCRIPT LOAD, called with
 * EVALSHA; reloaded if Redis answers NOSCRIPT after a restart), atomic across
 * every process sharing the prefix.
 */
export class RedisBucket implements SendBucket {
  readonly kind = 'redis' as const;
  readonly keys: SendqKeys;
  private readonly iv: Intervals;
  private closed = false;

  private constructor(
    private readonly redis: Redis,
    private readonly owned: boolean,
    prefix: string | undefined,
    limits: SendLimits,
    private readonly clock: Clock | undefined,
  ) {
    this.keys = sendqKeys(prefix);
    this.iv = intervalsOf(limits);
  }

  /**
   * Connects (unless given a connection) and loads the script.
   * @throws CrowdplayError CP_ERR_CONFIG_INVALID on bad limits; RangeError on a bad prefix or
   *   when neither `redis` nor `redisUrl` is given; the ioredis error when Redis is unreachable.
   */
  static async open(opts: RedisBucketOptions): Promise<RedisBucket> {
    checkLimits(opts.limits);
    sendqKeys(opts.prefix);
    const { redis, owned } = await connectRedis(opts, 'RedisBucket');
    const b = new RedisBucket(redis, owned, opts.prefix, opts.limits, opts.clock);
    await b.load();
    return b;
  }

  private async load(): Promise<void> {
    const sha = await this.redis.script('LOAD', BUCKET_LUA);
    if (sha !== BUCKET_LUA_SHA) throw new Error(`SCRIPT LOAD returned ${String(sha)}, expected ${BUCKET_LUA_SHA}`);
  }

  private nowArg(): string {
    return this.clock === undefined ? '' : String(Math.round(this.clock.now() * 1000));
  }

  private async call(keys: string[], op: string, pauseUs = 0, maxWaitUs = 0): Promise<Reply> {
    const args = [op, this.nowArg(), this.iv.botUs, this.iv.chatUs, this.iv.groupUs, pauseUs, maxWaitUs];
    try {
      return (await this.redis.evalsha(BUCKET_LUA_SHA, keys.length, ...keys, ...args)) as Reply;
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
      await this.load();
      return (await this.redis.evalsha(BUCKET_LUA_SHA, keys.length, ...keys, ...args)) as Reply;
    }
  }

  async take(chatKey: string, isGroup: boolean, maxWaitMs = 0): Promise<TakeResult> {
    if (chatKey === '') throw new RangeError('chatKey must not be empty');
    checkMaxWait(maxWaitMs);
    const k = this.keys;
    const keys = [k.pause, k.bot, k.chat(chatKey)];
    if (isGroup) keys.push(k.group(chatKey));
    const r = await this.call(keys, 'take', 0, Math.floor(maxWaitMs * 1000));
    const nowMs = (r[1] ?? 0) / 1000;
    if (r[0] === 1) return { granted: true, nowMs, waitMs: (r[2] ?? 0) / 1000 };
    return {
      granted: false,
      nowMs,
      retryAfterMs: waitUsToMs(r[2] ?? 1),
      botWaitMs: waitUsToMs(r[3] ?? 0),
      limit: LIMITS[(r[4] ?? 4) - 1] ?? 'chat',
    };
  }

  async pause(forMs: number): Promise<number> {
    if (!(Number.isFinite(forMs) && forMs >= 0)) throw new RangeError(`forMs must be a finite number >= 0, got ${forMs}`);
    const r = await this.call([this.keys.pause], 'pause', Math.ceil(forMs * 1000));
    return (r[1] ?? 0) / 1000;
  }

  async pausedForMs(): Promise<number> {
    const r = await this.call([this.keys.pause], 'paused');
    return waitUsToMs((r[1] ?? 0) - (r[0] ?? 0));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.owned) await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
