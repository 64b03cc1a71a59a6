import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Fastify, { type FastifyInstance } from 'fastify';
import { CrowdplayError } from '@crowdplay/protocol';
import { createTelemetry } from '@crowdplay/telemetry';
import { registerTelegramWebhook, TELEGRAM_WEBHOOK_PATH, type TelegramUpdate } from '../src/telegram-webhook.ts';
import { registerTenantBotWebhooks, tenantBotWebhookPath, type TenantBotWebhook } from '../src/tenant-bot-webhooks.ts';

describe('tenant bot webhooks', () => {
  let app: FastifyInstance;
  const handled: Array<[string, number]> = [];
  const telemetry = createTelemetry({ service: 'tenant-webhook-test', level: 'silent', refusalLogIntervalMs: 60_000 });
  const hooks = new Map<number, TenantBotWebhook>();
  const hookFor = (bot: string, secret: string): TenantBotWebhook => ({
    secret,
    handle: async (u: TelegramUpdate) => void handled.push([bot, u.update_id]),
  });
  let lookups = 0;
  let drains: Array<() => Promise<void>> = [];
  before(async () => {
    app = Fastify();
    hooks.set(111, hookFor('acme', 'acme-secret'));
    hooks.set(222, hookFor('globex', 'globex-secret'));
    drains = [
      registerTelegramWebhook(app, {
        secret: 'default-secret',
        telemetry,
        handle: async (u) => void handled.push(['default', u.update_id]),
      }).drain,
      registerTenantBotWebhooks(app, {
        telemetry,
        bots: {
          webhook: async (id) => {
            lookups++;
            const h = hooks.get(id);
            if (!h) throw new CrowdplayError('CP_ERR_TELEGRAM_BOT_UNKNOWN', [id]);
            return h;
          },
          miniAppBots: async () => [],
        },
      }).drain,
    ];
    await app.ready();
  });
  after(async () => {
    await app.close();
    await telemetry.close();
  });
  const post = (url: string, secret: string, update_id: number) =>
    app.inject({ method: 'POST', url, headers: { 'x-telegram-bot-api-secret-token': secret }, payload: { update_id } });
  const drain = async (): Promise<void> => {
    for (const d of drains) await d();
  };

  it('each bot at its own path with its own secret; its updates reach its own bot; the default bot keeps its path', async () => {
    assert.equal(tenantBotWebhookPath(111), `${TELEGRAM_WEBHOOK_PATH}/111`);
    assert.equal((await post(tenantBotWebhookPath(111), 'acme-secret', 1)).statusCode, 200);
    assert.equal((await post(tenantBotWebhookPath(222), 'globex-secret', 1)).statusCode, 200, 'update ids are per bot: not a duplicate');
    assert.equal((await post(TELEGRAM_WEBHOOK_PATH, 'default-secret', 1)).statusCode, 200);
    assert.equal((await post(tenantBotWebhookPath(111), 'acme-secret', 1)).statusCode, 200); // a re-delivery: dropped
    await drain();
    assert.deepEqual(handled.sort(), [
      ['acme', 1],
      ['default', 1],
      ['globex', 1],
    ]);
  });

  it("another bot's secret, the default bot's secret: 401 CP_ERR_AUTH_INVALID, nothing handled", async () => {
    handled.length = 0;
    for (const [path, secret] of [
      [tenantBotWebhookPath(111), 'globex-secret'],
      [tenantBotWebhookPath(222), 'acme-secret'],
      [tenantBotWebhookPath(111), 'default-secret'],
      [TELEGRAM_WEBHOOK_PATH, 'acme-secret'],
    ] as const) {
      const r = await post(path, secret, 50);
      assert.equal(r.statusCode, 401, `${path} ${secret}`);
      assert.equal((r.json() as { code: string }).code, 'CP_ERR_AUTH_INVALID');
    }
    await drain();
    assert.deepEqual(handled, []);
  });

  it('a path naming no registered bot, or no bot id at all: 404 CP_ERR_TELEGRAM_BOT_UNKNOWN, nothing handled', async () => {
    handled.length = 0;
    const before = lookups;
    for (const bot of ['333', '0', '01', 'abc', '-5', '1'.repeat(17)]) {
      const r = await post(`${TELEGRAM_WEBHOOK_PATH}/${bot}`, 'acme-secret', 60);
      assert.equal(r.statusCode, 404, bot);
      assert.equal((r.json() as { code: string }).code, 'CP_ERR_TELEGRAM_BOT_UNKNOWN', bot);
    }
    assert.equal(lookups - before, 1, 'only a well-formed bot id is looked up');
    await drain();
    assert.deepEqual(handled, []);
  });

  it('a bot whose secret changed: the new secret is taken, the old refused', async () => {
    handled.length = 0;
    hooks.set(111, hookFor('acme', 'acme-rotated'));
    assert.equal((await post(tenantBotWebhookPath(111), 'acme-secret', 70)).statusCode, 401);
    assert.equal((await post(tenantBotWebhookPath(111), 'acme-rotated', 71)).statusCode, 200);
    await drain();
    assert.deepEqual(handled, [['acme', 71]]);
  });
});
