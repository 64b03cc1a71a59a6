/**
 * defineLua against this machine's Redis: keys and arguments reach the script in order, a flushed script cache
 * (a Redis restart) is refilled by the next call, and a name that is not an identifier is refused before anything
 * is defined on the client.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { defineLua } from '../src/index.ts';

const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const ECHO = `return {#KEYS, KEYS[1], KEYS[2], ARGV[1], ARGV[2]}`;

void test('defineLua - KEYS and ARGV in order; runs again after SCRIPT FLUSH; a bad name is refused', async (t) => {
  const redis = new Redis(REDIS_URL);
  t.after(() => redis.quit());
  const echo = defineLua(redis, 'cpTestEcho', ECHO);
  assert.deepEqual(await echo(['{t}:a', '{t}:b'], ['x', 7]), [2, '{t}:a', '{t}:b', 'x', '7']);
  await redis.script('FLUSH');
  assert.deepEqual(await echo(['{t}:c', '{t}:d'], ['y', 'z']), [2, '{t}:c', '{t}:d', 'y', 'z'], 'the flushed script runs again');
  for (const bad of ['', '1x', 'a-b', 'quit now'])
    assert.throws(() => defineLua(redis, bad, ECHO), /must be an identifier/, JSON.stringify(bad));
  assert.equal((redis as unknown as Record<string, unknown>)['a-b'], undefined, 'nothing was defined');
});
