import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessBus, subjects } from '@crowdplay/bus';
import { defaultConfig } from '@crowdplay/config';
import { isCrowdplayError } from '@crowdplay/protocol';
import { createTelemetry } from '@crowdplay/telemetry';
import { startTelegram, startTelegramSender } from '../src/index.ts';

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

test('startTelegramSender - needs the token and REDIS_URL (it takes its jobs from the BullMQ queue)', async () => {
  await assert.rejects(
    startTelegramSender({ config: defaultConfig(), telemetry }),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') && /TELEGRAM_BOT_TOKEN/.test(e.message),
  );
  await assert.rejects(
    startTelegramSender({ config: defaultConfig({ telegram: { botToken: '1:x' } }), telemetry }),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') && /REDIS_URL/.test(e.message),
  );
});
