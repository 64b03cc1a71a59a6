/**
 * The board scheduler's budgets for the whole bot (cluster mode, REDIS_URL):
 * BOARD_SEND_BUDGET_PER_S sends and BOARD_RENDER_BUDGET_MS_PER_S render ms,
 * in one Redis hash taken by one Lua script, so every gateway's scheduler
 * draws from the same two buckets and N gateways together never exceed them.
 * The same arithmetic as `MemoryBoardBudget` (scheduler.ts): refilled
 * continuously, holding at most one second's worth, a prefix of the boards
 * granted while both last.
 *
 * Key: `{<TELEGRAM_SENDQ_PREFIX>:budget}:board` (fields `s` send tokens,
 * `r` render ms, `t` last refill µs), expiring 60 s after its last use (an
 * idle bot leaves nothing; a missing hash is a full bucket).
 */
import { boardBudgetKey, connectRedis, defineLua, type LuaCall } from '@crowdplay/sendq';
import type { Redis } from 'ioredis';
import type { BoardBudget, BudgetGrant } from './scheduler.ts';

/**
 * KEYS: 1 the hash. ARGV: 1 now µs ('' = Redis TIME), 2 sends per s, 3 render ms per s,
 * 4 look-ahead: beyond the send tokens boards are granted on their render charge alone while fewer than this many
 * were granted in all, 5 free: the first this many boards replace one still queued (render charge only),
 * 6… the boards' render charges, ms.
 * Replies {granted, of those beyond the send tokens}.
 */
export const BOARD_BUDGET_LUA = `
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local sendMax = tonumber(ARGV[2])
local renderMax = tonumber(ARGV[3])
local h = redis.call('HMGET', KEYS[1], 's', 'r', 't')
local s = tonumber(h[1]) or sendMax
local r = tonumber(h[2]) or renderMax
local t = tonumber(h[3]) or now
local dt = math.max(0, now - t) / 1000000
s = math.min(sendMax, s + dt * sendMax)
r = math.min(renderMax, r + dt * renderMax)
local ahead = tonumber(ARGV[4])
local free = tonumber(ARGV[5])
local n = 0
local a = 0
for i = 6, #ARGV do
  local c = math.min(tonumber(ARGV[i]), renderMax)
  if r < c then break end
  if n < free then
    -- replaces a board still queued: no send
  elseif s >= 1 then
    s = s - 1
  elseif n < ahead then
    a = a + 1
  else
    break
  end
  r = r - c
  n = n + 1
end
redis.call('HSET', KEYS[1], 's', string.format('%.6f', s), 'r', string.format('%.6f', r), 't', string.format('%d', math.max(t, now)))
redis.call('PEXPIRE', KEYS[1], 60000)
return {n, a}
`;

/** Options of {@link RedisBoardBudget.open}. */
export interface RedisBoardBudgetOptions {
  /** REDIS_URL (the budget opens and owns its connection), unless `redis` is given. */
  redisUrl?: string;
  /** An existing connection (not closed by `close()`). */
  redis?: Redis;
  /** Key prefix: `<TELEGRAM_SENDQ_PREFIX>:budget` (one budget per bot). */
  prefix: string;
  /** BOARD_SEND_BUDGET_PER_S. */
  sendBudgetPerS: number;
  /** BOARD_RENDER_BUDGET_MS_PER_S. */
  renderBudgetMsPerS: number;
  /**
   * Use the caller's `nowMs` (tests: every process sharing the key must pass
   * the same clock). Unset: Redis TIME, one clock for every process.
   */
  callerClock?: boolean;
}

/** {@link BoardBudget} on Redis: atomic across every process sharing the prefix. */
export class RedisBoardBudget implements BoardBudget {
  readonly kind = 'redis' as const;
  /** The hash's key. */
  readonly key: string;

  private readonly budgetLua: LuaCall;

  private constructor(
    private readonly redis: Redis,
    private readonly owned: boolean,
    private readonly o: RedisBoardBudgetOptions,
  ) {
    this.key = boardBudgetKey(o.prefix);
    this.budgetLua = defineLua(redis, 'cpBoardBudget', BOARD_BUDGET_LUA);
  }

  /**
   * Connects (unless given a connection).
   * @throws RangeError on a bad prefix, a budget not > 0, or neither `redis` nor `redisUrl`; the ioredis error when Redis is unreachable
   */
  static async open(o: RedisBoardBudgetOptions): Promise<RedisBoardBudget> {
    boardBudgetKey(o.prefix);
    for (const [k, v] of Object.entries({ sendBudgetPerS: o.sendBudgetPerS, renderBudgetMsPerS: o.renderBudgetMsPerS })) {
      if (!(Number.isFinite(v) && v > 0)) throw new RangeError(`${k} must be > 0`);
    }
    const { redis, owned } = await connectRedis(o, 'RedisBoardBudget');
    return new RedisBoardBudget(redis, owned, o);
  }

  async take(chargesMs: readonly number[], nowMs: number, ahead = 0, free = 0): Promise<BudgetGrant> {
    if (chargesMs.length === 0) return { granted: 0, ahead: 0 };
    for (const [k, v] of Object.entries({ ahead, free }))
      if (!(Number.isInteger(v) && v >= 0)) throw new RangeError(`${k} must be an integer ≥ 0, got ${v}`);
    const args = [
      this.o.callerClock ? String(Math.round(nowMs * 1000)) : '',
      this.o.sendBudgetPerS,
      this.o.renderBudgetMsPerS,
      ahead,
      free,
      ...chargesMs,
    ];
    const r = await this.budgetLua([this.key], args);
    const [granted, beyond] = r as [number, number];
    return { granted: Number(granted), ahead: Number(beyond) };
  }

  async close(): Promise<void> {
    if (this.owned) await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
