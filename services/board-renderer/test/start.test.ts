import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sampleBoard } from '@crowdplay/board';
import { defaultConfig } from '@crowdplay/config';
import { isCrowdplayError } from '@crowdplay/protocol';
import { BullmqSendQueue, sendqKeys } from '@crowdplay/sendq';
import type { BotCall } from '@crowdplay/telegram';
import { createTelemetry } from '@crowdplay/telemetry';
import { deleteRedisKeys } from '@crowdplay/testing';
import { BullmqRenderQueue, startBoardRenderer } from '../src/index.ts';
import { deleteKeys, waitFor } from './render-queue-harness.ts';

const telemetry = createTelemetry({ service: 'start-test', level: 'silent', refusalLogIntervalMs: 60_000 });
const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
let seq = 0;
const uniquePrefix = (what: string): string => `t_start_${what}_${process.pid}_${Date.now().toString(36)}_${seq++}`;

test('startBoardRenderer - needs the token and REDIS_URL (it takes its jobs from the BullMQ render queue)', async () => {
  await assert.rejects(
    startBoardRenderer({ config: defaultConfig({ redis: { url: REDIS_URL } }), telemetry }),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') && /TELEGRAM_BOT_TOKEN/.test(e.message),
  );
  await assert.rejects(
    startBoardRenderer({ config: defaultConfig({ telegram: { botToken: '1:x' } }), telemetry }),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') && /REDIS_URL/.test(e.message),
  );
});

test(
  'startBoardRenderer - a board submitted by a gateway is rendered there and reaches the send queue as a PNG',
  { timeout: 30_000 },
  async (t) => {
    const prefixes = { sendq: uniquePrefix('sendq'), render: uniquePrefix('render') };
    const config = defaultConfig({ telegram: { botToken: '1:x' }, redis: { url: REDIS_URL }, board: { renderConcurrency: 1 } });
    const renderer = await startBoardRenderer({ config, telemetry, prefixes });
    // The gateway side: submits only. The sender side: takes the board jobs off the send queue.
    const gateway = await BullmqRenderQueue.open({ redisUrl: REDIS_URL, prefix: prefixes.render });
    const sender = await BullmqSendQueue.open<BotCall>({
      redisUrl: REDIS_URL,
      prefix: prefixes.sendq,
      limits: { botRatePerS: 30, groupRatePerMin: 20, chatRatePerS: 1 },
    });
    t.after(async () => {
      await gateway.close();
      await renderer.close();
      await sender.close(1_000);
      await deleteRedisKeys(sendqKeys(prefixes.sendq).base, REDIS_URL);
      await deleteKeys(prefixes.render);
    });
    const sent: Array<{ chatId: number; payload: BotCall }> = [];
    sender.start((job) => {
      sent.push({ chatId: job.chatId, payload: job.payload });
      return Promise.resolve({ ok: true });
    });
    assert.equal(renderer.renders.kind, 'bullmq');
    assert.deepEqual(await gateway.submit(-1001, 7, sampleBoard(3)), { status: 'queued' });
    await waitFor('the board at the sender', () => sent.length === 1, 20_000);
    const { chatId, payload } = sent[0]!;
    assert.equal(chatId, -1001);
    assert.ok(payload.kind === 'board');
    assert.equal(payload.version, 7);
    const png = Buffer.from(payload.photo, 'base64');
    assert.deepEqual([...png.subarray(1, 4)], [0x50, 0x4e, 0x47], 'a PNG');
    assert.equal(renderer.renders.stats().rendered, 1);
    assert.equal(renderer.pool.stats().rendered, 1);
  },
);
