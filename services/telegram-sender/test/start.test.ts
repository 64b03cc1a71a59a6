import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '@crowdplay/config';
import { isCrowdplayError } from '@crowdplay/protocol';
import { createTelemetry } from '@crowdplay/telemetry';
import { startTelegramSender } from '../src/index.ts';

const telemetry = createTelemetry({ service: 'start-test', level: 'silent', refusalLogIntervalMs: 60_000 });

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
