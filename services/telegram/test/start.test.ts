import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessBus, subjects } from '@crowdplay/bus';
import { defaultConfig } from '@crowdplay/config';
import { isCrowdplayError } from '@crowdplay/protocol';
import { renderQueueKeys, sendqKeys } from '@crowdplay/sendq';
import { createTelemetry } from '@crowdplay/telemetry';
import { deleteRedisKeys } from '@crowdplay/testing';
import { startTelegram } from '../src/index.ts';

const telemetry = createTelemetry({ service: 'start-test', level: 'silent', refusalLogIntervalMs: 60_000 });
const base = {
  bus: new InProcessBus(),
  subjects: subjects('start-test'),
  telemetry,
  ensureChannel: async () => undefined,
  moveChannel: async () => ({ outcome: 'none' as const, absorbed: null }),
};

test('startTelegram - off without a token; a token without the webhook secret is a configuration error', async () => {
  assert.equal(await startTelegram({ ...base, config: defaultConfig() }), null);
  await assert.rejects(
    startTelegram({ ...base, config: defaultConfig({ telegram: { botToken: '1:x', webhookSecret: '' } }) }),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') && /TELEGRAM_WEBHOOK_SECRET/.test(e.message),
  );
});

const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
let seq = 0;
const uniquePrefix = (what: string): string => `t_start_${what}_${process.pid}_${Date.now().toString(36)}_${seq++}`;

test('startTelegram - with REDIS_URL and render: false the gateway only submits (no pool); without REDIS_URL it always renders', async (t) => {
  const prefixes = { sendq: uniquePrefix('sendq'), render: uniquePrefix('render') };
  const tg = { botToken: '1:x', webhookSecret: 's' };
  const onRedis = await startTelegram({
    ...base,
    config: defaultConfig({ telegram: tg, redis: { url: REDIS_URL } }),
    render: false,
    send: false,
    prefixes,
  });
  t.after(async () => {
    await onRedis?.close();
    await deleteRedisKeys(sendqKeys(prefixes.sendq).base, REDIS_URL);
    await deleteRedisKeys(renderQueueKeys(prefixes.render).base, REDIS_URL);
  });
  assert.equal(onRedis?.renders.kind, 'bullmq');
  assert.equal(onRedis?.pool, null);
  assert.ok(onRedis?.updates, 'with REDIS_URL the webhook updates are shared (de-duplication, per-chat order)');
  const local = await startTelegram({ ...base, config: defaultConfig({ telegram: tg, board: { renderConcurrency: 1 } }), render: false });
  try {
    assert.equal(local?.renders.kind, 'memory');
    assert.notEqual(local?.pool, null);
    assert.equal(local?.updates, null, 'without REDIS_URL: this gateway alone');
  } finally {
    await local?.close();
  }
});

test('startTelegram - warns at start when PUZZLE_SECRET is its published default, not when it is set', async () => {
  const tg = { botToken: '1:x', webhookSecret: 's' };
  const warnings = async (puzzle: Partial<ReturnType<typeof defaultConfig>['puzzle']>): Promise<string[]> => {
    const tel = createTelemetry({ service: 'start-test-puzzle', level: 'silent', refusalLogIntervalMs: 60_000 });
    const seen: string[] = [];
    tel.logger.warn = ((...args: unknown[]) => void seen.push(String(args.find((a) => typeof a === 'string')))) as typeof tel.logger.warn;
    const part = await startTelegram({
      ...base,
      telemetry: tel,
      config: defaultConfig({ telegram: tg, puzzle, board: { enabled: false } }),
    });
    await part?.close();
    return seen.filter((w) => w.includes('PUZZLE_SECRET'));
  };
  assert.equal((await warnings({})).length, 1, 'the default secret is named');
  assert.deepEqual(await warnings({ secret: 'our-own-secret' }), [], 'a secret of its own: no warning');
});
