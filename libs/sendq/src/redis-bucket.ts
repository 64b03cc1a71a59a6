import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import type { Clock } from './clock.ts';
import { intervalsOf, waitUsToMs, type Intervals } from './gcra.ts';
import { sendqKeys, type SendqKeys } from './keys.ts';
import { checkLimits, checkMaxWait } from './options.ts';
import { defineLua, type LuaCall } from './lua.ts';
import { connectRedis } from './redis-connect.ts';
import type { DepartResult, LimitName, SendBucket, SendLimits, TakeLane, TakeResult } from './types.ts';

/**
 * The one Lua script of the bucket (ops `take`, `pause`, `paused`, `depart`); the same
 * steps as `decideTake` in gcra.ts, on integer µs, with the board bookings of
 * the lanes (gcra.ts "Lanes") in a ZSET (member `<chatKey>|<1 group, 0 not>|<booking id>`,
 * score = departure µs).
 *
 * KEYS: 1 pause, 2 bot, 3 chat, 4 group, 5 board bookings
 * ARGV: 1 op, 2 now µs ('' = Redis TIME), 3 bot interval µs, 4 chat interval µs,
 *       5 group interval µs, 6 pause duration µs (op pause), 7 longest booked wait µs (op take),
 *       8 '1' for a group, 9 lane ('tx' | 'board'), 10 booking member ('' = not recorded),
 *       11 chat key prefix, 12 group key prefix (the keys of a moved board's chat), 13 departure µs (op depart),
 *       14 group burst tolerance µs (τ: a group key allows when tat − τ <= now)
 * Replies: take → {1, now, waitUs, preempted 0|1} | {0, now, retryUs, botWaitUs, limit (1 pause, 2 bot, 3 group, 4 chat)};
 *          pause / paused → {now, pausedUntilUs}; depart → {now, pausedUntilUs, moved-to µs or 0 (claimed)}
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
local function raise(key, v)
  local cur = tonumber(redis.call('GET', key) or '0')
  if v > cur then redis.call('SET', key, string.format('%d', v), 'PX', px(v)) end
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
local bk = KEYS[5]
if op == 'depart' then
  local at = redis.call('ZSCORE', bk, ARGV[10])
  if at and tonumber(at) > tonumber(ARGV[13]) then return {now, pausedUntil, tonumber(at)} end
  if at then redis.call('ZREM', bk, ARGV[10]) end
  return {now, pausedUntil, 0}
end
local botT = tonumber(ARGV[3])
local chatT = tonumber(ARGV[4])
local groupT = tonumber(ARGV[5])
local groupTau = tonumber(ARGV[14])
local botTat = tonumber(redis.call('GET', KEYS[2]) or '0')
local chatTat = tonumber(redis.call('GET', KEYS[3]) or '0')
local isGroup = ARGV[8] == '1'
local groupTat = 0
if isGroup then groupTat = tonumber(redis.call('GET', KEYS[4]) or '0') end
local pauseW = math.max(0, pausedUntil - now)
local botW = math.max(0, botTat - now)
local groupW = 0
if isGroup then groupW = math.max(0, groupTat - groupTau - now) end
local chatW = math.max(0, chatTat - now)
local retry = math.max(pauseW, botW, groupW, chatW)
redis.call('ZREMRANGEBYSCORE', bk, '-inf', '(' .. string.format('%d', now - 1000000))
if retry > 0 and ARGV[9] == 'tx' and pauseW == 0 and groupW == 0 and chatW == 0 then
  local first = redis.call('ZRANGEBYSCORE', bk, '(' .. string.format('%d', now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #first > 0 then
    local m = first[1]
    local at = tonumber(first[2])
    local re = math.max(botTat, now)
    local b = re + botT
    redis.call('SET', KEYS[2], string.format('%d', b), 'PX', px(b))
    redis.call('ZADD', bk, re, m)
    redis.call('PEXPIRE', bk, px(b))
    local bar = string.find(m, '|', 1, true)
    local ck = string.sub(m, 1, bar - 1)
    raise(ARGV[11] .. ck, re + chatT)
    if string.sub(m, bar + 1, bar + 1) == '1' then raise(ARGV[12] .. ck, re + groupT) end
    local c = math.max(chatTat, at) + chatT
    redis.call('SET', KEYS[3], string.format('%d', c), 'PX', px(c))
    if isGroup then
      local g = math.max(groupTat, at) + groupT
      redis.call('SET', KEYS[4], string.format('%d', g), 'PX', px(g))
    end
    return {1, now, at - now, 1}
  end
end
local booked = retry > 0 and pauseW == 0 and groupW == 0 and chatW == 0 and botW <= tonumber(ARGV[7])
if retry > 0 and not booked then
  local limit = 4
  if retry == pauseW then limit = 1 elseif retry == botW then limit = 2 elseif retry == groupW then limit = 3 end
  return {0, now, retry, math.max(pauseW, botW), limit}
end
local at = now + botW
local b = math.max(botTat, at) + botT
redis.call('SET', KEYS[2], string.format('%d', b), 'PX', px(b))
local c = math.max(chatTat, at) + chatT
redis.call('SET', KEYS[3], string.format('%d', c), 'PX', px(c))
if isGroup then
  local g = math.max(groupTat, at) + groupT
  redis.call('SET', KEYS[4], string.format('%d', g), 'PX', px(g))
end
if botW > 0 and ARGV[9] == 'board' and ARGV[10] ~= '' then
  redis.call('ZADD', bk, at, ARGV[10])
  redis.call('PEXPIRE', bk, px(b))
end
return {1, now, botW, 0}
`;

/** SHA-1 of {@link BUCKET_LUA}: the handle Redis caches it under (SCRIPT EXISTS). */
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

/** A board booking's ZSET member: `<chatKey>|<1 group, 0 not>|<booking id>` (the script moves the board's chat's tats). */
function bookingMember(chatKey: string, isGroup: boolean, bookingId: string): string {
  if (chatKey.includes('|')) throw new RangeError(`chatKey must not contain '|', got "${chatKey}"`);
  return `${chatKey}|${isGroup ? '1' : '0'}|${bookingId}`;
}

/** Reply of the Lua script. */
type Reply = number[];

/**
 * The Redis bucket: one Lua script (run through {@link defineLua}: EVALSHA, and
 * EVAL again when Redis answers NOSCRIPT after a restart), atomic across every
 * process sharing the prefix.
 */
export class RedisBucket implements SendBucket {
  readonly kind = 'redis' as const;
  readonly keys: SendqKeys;
  private readonly iv: Intervals;
  private readonly lua: LuaCall;
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
    this.lua = defineLua(redis, 'cpSendqBucket', BUCKET_LUA);
  }

  /**
   * Connects (unless given a connection).
   * @throws CrowdplayError CP_ERR_CONFIG_INVALID on bad limits; RangeError on a bad prefix or
   *   when neither `redis` nor `redisUrl` is given; the ioredis error when Redis is unreachable.
   */
  static async open(opts: RedisBucketOptions): Promise<RedisBucket> {
    checkLimits(opts.limits);
    sendqKeys(opts.prefix);
    const { redis, owned } = await connectRedis(opts, 'RedisBucket');
    return new RedisBucket(redis, owned, opts.prefix, opts.limits, opts.clock);
  }

  private nowArg(): string {
    return this.clock === undefined ? '' : String(Math.round(this.clock.now() * 1000));
  }

  private async call(
    keys: string[],
    op: string,
    pauseUs = 0,
    maxWaitUs = 0,
    more: { isGroup?: boolean; lane?: string; member?: string; atUs?: number } = {},
  ): Promise<Reply> {
    const args = [
      op,
      this.nowArg(),
      this.iv.botUs,
      this.iv.chatUs,
      this.iv.groupUs,
      pauseUs,
      maxWaitUs,
      more.isGroup ? '1' : '0',
      more.lane ?? 'board',
      more.member ?? '',
      this.keys.chat(''),
      this.keys.group(''),
      more.atUs ?? 0,
      this.iv.groupTauUs,
    ];
    return (await this.lua(keys, args)) as Reply;
  }

  async take(chatKey: string, isGroup: boolean, maxWaitMs = 0, lane: TakeLane = { lane: 'board' }): Promise<TakeResult> {
    if (chatKey === '') throw new RangeError('chatKey must not be empty');
    checkMaxWait(maxWaitMs);
    const k = this.keys;
    const keys = [k.pause, k.bot, k.chat(chatKey), k.group(chatKey), k.bookings];
    const member = lane.lane === 'board' && lane.bookingId !== undefined ? bookingMember(chatKey, isGroup, lane.bookingId) : '';
    const r = await this.call(keys, 'take', 0, Math.floor(maxWaitMs * 1000), { isGroup, lane: lane.lane, member });
    const nowMs = (r[1] ?? 0) / 1000;
    if (r[0] === 1) return { granted: true, nowMs, waitMs: (r[2] ?? 0) / 1000, ...(r[3] === 1 ? { preempted: true } : {}) };
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

  async depart(bookingId: string, chatKey: string, isGroup: boolean, atMs: number): Promise<DepartResult> {
    if (bookingId === '' || chatKey === '') throw new RangeError('bookingId and chatKey must not be empty');
    const k = this.keys;
    const r = await this.call([k.pause, k.bot, k.chat(chatKey), k.group(chatKey), k.bookings], 'depart', 0, 0, {
      member: bookingMember(chatKey, isGroup, bookingId),
      atUs: Math.round(atMs * 1000),
    });
    const now = r[0] ?? 0;
    const pausedMs = waitUsToMs((r[1] ?? 0) - now);
    const moved = r[2] ?? 0;
    if (moved === 0) return { movedToMs: null, waitMs: 0, pausedMs };
    return { movedToMs: moved / 1000, waitMs: Math.max(0, moved - now) / 1000, pausedMs };
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
