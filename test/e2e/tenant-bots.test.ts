/**
 * A tenant's own bot on a shared deployment, end to end against the Bot API
 * stubs (one per bot behind one API root): registered as `crowdplay tenant
 * bot set` stores it, its webhook at /v1/telegram/webhook/<bot id> → the
 * tenant bot's /start reply goes out through its own token, its chat is its
 * tenant's channel (tb<bot>_<chat>) beside the default bot's channel of the
 * same group, and its Mini App's initData lands the player there.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BotSecretBox, signInitData, telegramChannelId } from '@crowdplay/telegram';
import { TelegramStubs } from '@crowdplay/telegram/testing';
import { openSocket, startStandalone, until, type InProcess } from '../helpers.ts';

const DEFAULT = { token: '424242:TEST-token-for-the-default-bot', username: 'cp_test_bot' };
const TENANT = { token: '515151:TEST-token-for-the-tenant-bot', username: 'acme_puzzle_bot' };
const TENANT_ID = 515151;
const KEY = 'ab'.repeat(32);
const CHAT = -1005550101;

describe('tenant bots: a licensee runs its own bot on a shared deployment', () => {
  let stubs: TelegramStubs;
  let s: InProcess;
  before(async () => {
    stubs = new TelegramStubs([DEFAULT, TENANT]);
    const root = await stubs.listen();
    s = await startStandalone({
      telegram: {
        botToken: DEFAULT.token,
        webhookSecret: 'default-hook-secret',
        apiRoot: root,
        botUsername: DEFAULT.username,
        botSecretsKey: KEY,
        botsCacheMs: 0,
      },
    });
    const store = s.running.store;
    await store.tenants.create('acme', 'Acme');
    const box = new BotSecretBox(Buffer.from(KEY, 'hex'));
    await store.bots.register(
      'acme',
      {
        botId: TENANT_ID,
        username: TENANT.username,
        tokenEnc: box.seal(TENANT_ID, TENANT.token),
        webhookSecretEnc: box.seal(TENANT_ID, 'acme-hook-secret'),
      },
      3,
    );
  });
  after(async () => {
    await s?.stop();
    await stubs?.close();
  });

  const webhook = (path: string, secret: string, update: unknown) =>
    fetch(`${s.baseUrl}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-telegram-bot-api-secret-token': secret },
      body: JSON.stringify(update),
    });
  const start = (update_id: number, bot: string) => ({
    update_id,
    message: {
      message_id: update_id,
      date: 1,
      chat: { id: CHAT, type: 'supergroup', title: 'Crew' },
      from: { id: 7, is_bot: false, first_name: 'Ann' },
      text: `/start@${bot}`,
    },
  });

  it("both bots in one group: each answers through its own token, each chat is its own tenant's channel, the Mini App lands there", async () => {
    // Refusals first: an unknown bot, the other bot's secret. Nothing reaches either bot.
    const unknown = await webhook('/v1/telegram/webhook/999999', 'acme-hook-secret', start(1, TENANT.username));
    assert.equal(unknown.status, 404);
    assert.equal(((await unknown.json()) as { code: string }).code, 'CP_ERR_TELEGRAM_BOT_UNKNOWN');
    assert.equal((await webhook(`/v1/telegram/webhook/${TENANT_ID}`, 'default-hook-secret', start(2, TENANT.username))).status, 401);
    assert.equal((await webhook('/v1/telegram/webhook', 'acme-hook-secret', start(3, DEFAULT.username))).status, 401);

    assert.equal((await webhook(`/v1/telegram/webhook/${TENANT_ID}`, 'acme-hook-secret', start(10, TENANT.username))).status, 200);
    assert.equal((await webhook('/v1/telegram/webhook', 'default-hook-secret', start(10, DEFAULT.username))).status, 200);
    const tenantReply = await until(
      () =>
        stubs
          .of(TENANT.token)
          .messages(CHAT)
          .find((m) => m.fromBot && m.kind === 'text'),
      'the tenant bot reply',
    );
    await until(
      () =>
        stubs
          .of(DEFAULT.token)
          .messages(CHAT)
          .find((m) => m.fromBot && m.kind === 'text'),
      'the default bot reply',
    );
    const url = /"url":"([^"]+)"/.exec(tenantReply.markup)?.[1];
    assert.ok(url?.startsWith(`https://t.me/${TENANT.username}/play?startapp=`), tenantReply.markup);
    for (const stub of stubs.stubs.values()) assert.equal(stub.messages(CHAT).filter((m) => m.fromBot && m.kind === 'text').length, 1);

    const store = s.running.store;
    assert.equal((await store.channels.get(telegramChannelId(CHAT, TENANT_ID)))?.tenantId, 'acme');
    assert.equal((await store.channels.get(telegramChannelId(CHAT)))?.tenantId, s.config.telegram.tenantId);

    const initData = signInitData(
      { user: { id: 7, first_name: 'Ann' }, chat_type: 'supergroup', start_param: new URL(url!).searchParams.get('startapp')! },
      { botToken: TENANT.token },
    );
    const c = openSocket(`${s.baseUrl.replace('http', 'ws')}/v1/ws?role=crowd&initData=${encodeURIComponent(initData)}`);
    const welcome = await c.next((f) => f.t === 'welcome');
    assert.equal(welcome.channel, telegramChannelId(CHAT, TENANT_ID));
    c.send({ t: 'guess', seq: 1, word: 'crane' });
    assert.equal((await c.next((f) => f.t === 'ack' && f.seq === 1)).ok, true);
    c.close();
  });
});
