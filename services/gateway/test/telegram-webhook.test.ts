import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Fastify, { type FastifyInstance } from 'fastify';
import { createTelemetry } from '@crowdplay/telemetry';
import { deferred, within } from '@crowdplay/testing';
import { registerTelegramWebhook, TELEGRAM_WEBHOOK_PATH, type TelegramUpdate } from '../src/telegram-webhook.ts';

describe('telegram webhook', () => {
  let app: FastifyInstance;
  const handled: number[] = [];
  let release: (() => void) | null = null;
  const slowStarted = deferred();
  let hook: ReturnType<typeof registerTelegramWebhook>;
  const telemetry = createTelemetry({ service: 'webhook-test', level: 'silent', refusalLogIntervalMs: 60_000 });
  before(async () => {
    app = Fastify();
    hook = registerTelegramWebhook(app, {
      secret: 's3cret',
      telemetry,
      maxQueued: 3,
      bodyLimitBytes: 2_048,
      handle: async (u: TelegramUpdate) => {
        if (u.update_id === 99) {
          slowStarted.resolve();
          await new Promise<void>((r) => (release = r)); // a slow update holds the queue
        }
        if (u.update_id === 13) throw new Error('boom');
        handled.push(u.update_id);
      },
    });
    await app.ready();
  });
  after(async () => {
    await app.close();
    await telemetry.close();
  });

  const post = (body: unknown, secret: string | null = 's3cret') =>
    app.inject({
      method: 'POST',
      url: TELEGRAM_WEBHOOK_PATH,
      headers: secret === null ? {} : { 'x-telegram-bot-api-secret-token': secret },
      payload: body as object,
    });

  it('the secret header is checked; a bad one queues nothing', async () => {
    for (const s of [null, '', 's3creT', 's3cret-longer']) {
      const r = await post({ update_id: 1 }, s);
      assert.equal(r.statusCode, 401, String(s));
      assert.equal((r.json() as { code: string }).code, 'CP_ERR_AUTH_INVALID');
    }
    assert.equal((await post({ nope: 1 })).statusCode, 400);
    assert.equal((await post({ update_id: 2, pad: 'x'.repeat(4_096) })).statusCode, 413, 'over TELEGRAM_WEBHOOK_MAX_BODY_BYTES');
    await hook.drain();
    assert.deepEqual(handled, []);
  });

  it('answers 200 with an empty body at once, handles updates in order, drops a re-delivered update_id', async () => {
    for (const id of [5, 6, 5, 7, 6]) {
      const r = await post({ update_id: id, message: { text: '/start' } });
      assert.equal(r.statusCode, 200);
      assert.equal(r.body, '', 'never a Bot API method in the response');
    }
    await hook.drain();
    assert.deepEqual(handled, [5, 6, 7]);
    const text = await telemetry.metrics.prometheusText();
    assert.match(text, /crowdplay_telegram_updates_total\{outcome="duplicate"[^}]*\} 2/);
  });

  it('a failing update is counted and does not stop the queue; past the bound updates get 503 (Telegram re-delivers them)', async () => {
    handled.length = 0;
    assert.equal((await post({ update_id: 99 })).statusCode, 200);
    await within(slowStarted.promise, 'update 99 being handled'); // it holds the queue, and no longer counts in it
    for (const id of [13, 14, 15]) assert.equal((await post({ update_id: id })).statusCode, 200);
    const over = await post({ update_id: 16 });
    assert.equal(over.statusCode, 503);
    assert.equal(hook.queued, 3);
    release!();
    await hook.drain();
    assert.deepEqual(handled, [99, 14, 15]);
    assert.equal((await post({ update_id: 16 })).statusCode, 200, 'the refused update is taken when Telegram re-delivers it');
    await hook.drain();
    assert.deepEqual(handled, [99, 14, 15, 16]);
    assert.match(await telemetry.metrics.prometheusText(), /crowdplay_telegram_updates_total\{outcome="failed"[^}]*\} 1/);
  });
});
