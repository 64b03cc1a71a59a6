/**
 * The shared bucket suite against the Redis Lua bucket (REDIS_URL, default
 * redis://127.0.0.1:6379) with the test clock passed to the script, plus what
 * only Redis has: the key layout and expiry, atomicity across connections,
 * Redis TIME. Each test uses its own prefix and deletes its keys. It FAILS,
 * never skips, when Redis is unreachable.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { isCrowdplayError } from '@crowdplay/protocol';
import { BUCKET_LUA_SHA, ManualClock, RedisBucket, sendqKeys } from '../src/index.ts';
import { bucketSuite } from './bucket-suite.ts';
import { REDIS_URL, TELEGRAM_LIMITS, deleteKeys, openRedisBucket, uniquePrefix } from './harness.ts';

bucketSuite('redis', async (limits, clock) => {
  const prefix = uniquePrefix();
  const bucket = await openRedisBucket(limits, clock, prefix);
  return {
    bucket,
    async cleanup() {
      await bucket.close();
      const r = new Redis(REDIS_URL);
      await deleteKeys(r, prefix);
      await r.quit();
    },
  };
});

void test('redis - bucket: keys live under {prefix}, expire once they stop mattering, and the script is cached once run', async (t) => {
  const prefix = uniquePrefix();
  const clock = new ManualClock(9_000_000);
  const bucket = await openRedisBucket(TELEGRAM_LIMITS, clock, prefix);
  const r = new Redis(REDIS_URL);
  t.after(async () => {
    await bucket.close();
    await deleteKeys(r, prefix);
    await r.quit();
  });
  const k = sendqKeys(prefix);
  assert.equal((await bucket.take('-42', true)).granted, true);
  assert.deepEqual(await r.script('EXISTS', BUCKET_LUA_SHA), [1]);
  await bucket.pause(2_000);
  assert.equal(await r.get(k.bot), String(9_000_000_000 + 33_334));
  assert.equal(await r.get(k.chat('-42')), String(9_000_000_000 + 1_000_000));
  assert.equal(await r.get(k.group('-42')), String(9_000_000_000 + 3_000_000));
  assert.equal(await r.get(k.pause), String(9_002_000_000));
  // PX = time until the value stops mattering + 1,000 ms.
  const group = await r.pttl(k.group('-42'));
  assert.ok(group > 3_900 && group <= 4_000, `group key PTTL ${group}`);
  const bot = await r.pttl(k.bot);
  assert.ok(bot > 900 && bot <= 1_033, `bot key PTTL ${bot}`);
  const keys = (await r.keys(`${k.base}*`)).sort();
  assert.deepEqual(keys, [k.bot, k.chat('-42'), k.group('-42'), k.pause].sort());
  // A flushed script cache (Redis restart) is reloaded on NOSCRIPT.
  await r.script('FLUSH');
  assert.equal((await bucket.take('43', false)).granted, false, 'still paused');
});

void test('redis - bucket: atomic across connections: 200 racing takes for one chat grant exactly one', async (t) => {
  const prefix = uniquePrefix();
  const clock = new ManualClock(7_000_000);
  const a = await openRedisBucket(TELEGRAM_LIMITS, clock, prefix);
  const b = await openRedisBucket(TELEGRAM_LIMITS, clock, prefix);
  const r = new Redis(REDIS_URL);
  t.after(async () => {
    await a.close();
    await b.close();
    await deleteKeys(r, prefix);
    await r.quit();
  });
  const results = await Promise.all(Array.from({ length: 200 }, (_, i) => (i % 2 ? a : b).take('-5', true)));
  assert.equal(results.filter((x) => x.granted).length, 1);
  // And across chats the bot limit holds: at a frozen clock only one more grant than zero per 33.334 ms.
  const other = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 ? a : b).take(String(1_000 + i), false)));
  assert.equal(other.filter((x) => x.granted).length, 0, 'the bot token of this instant is already taken');
});

void test('redis - bucket: without a clock the script uses Redis TIME', async (t) => {
  const prefix = uniquePrefix();
  const bucket = await RedisBucket.open({ redisUrl: REDIS_URL, prefix, limits: TELEGRAM_LIMITS });
  const r = new Redis(REDIS_URL);
  t.after(async () => {
    await bucket.close();
    await deleteKeys(r, prefix);
    await r.quit();
  });
  const [sec, usec] = await r.time();
  const redisNowMs = Number(sec) * 1000 + Number(usec) / 1000;
  const g = await bucket.take('12', false);
  assert.equal(g.granted, true);
  assert.ok(Math.abs(g.nowMs - redisNowMs) < 1_000, `bucket time ${g.nowMs} is Redis time ${redisNowMs}`);
  const d = await bucket.take('12', false);
  assert.equal(d.granted, false);
  if (!d.granted) {
    assert.equal(d.limit, 'chat');
    assert.ok(d.retryAfterMs > 900 && d.retryAfterMs <= 1_000, `retry ${d.retryAfterMs}`);
  }
});

void test('redis - bucket: a bad group burst is refused before anything is written', async (t) => {
  const prefix = uniquePrefix();
  const r = new Redis(REDIS_URL);
  t.after(async () => {
    await deleteKeys(r, prefix);
    await r.quit();
  });
  await assert.rejects(
    openRedisBucket({ ...TELEGRAM_LIMITS, groupBurst: 21 }, new ManualClock(9_000_000), prefix),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') && /limits\.groupBurst/.test(e.message),
  );
  assert.deepEqual(await r.keys(`${sendqKeys(prefix).base}*`), []);
});

void test('redis - bucket: an unreachable Redis rejects open()', async () => {
  await assert.rejects(RedisBucket.open({ redisUrl: 'redis://127.0.0.1:1', prefix: uniquePrefix(), limits: TELEGRAM_LIMITS }));
});
