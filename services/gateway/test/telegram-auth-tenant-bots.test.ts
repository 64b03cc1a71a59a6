/** TelegramAuth.crowd with tenants' own bots: the bot whose token signed the initData names the tenant and the channel. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '@crowdplay/config';
import { isCrowdplayError } from '@crowdplay/protocol';
import type { Store } from '@crowdplay/store';
import { signInitData, startParamFor, startParamSecret, telegramChannelId } from '@crowdplay/telegram';
import { TelegramAuth } from '../src/index.ts';

const DEFAULT_TOKEN = '123456:default-token';
const ACME = { botId: 111111111, tenantId: 'acme', token: '111111111:acme-token' };
const GLOBEX = { botId: 222222222, tenantId: 'globex', token: '222222222:globex-token' };
const CHAT = -1001234;

function store(): { store: Store; ensured: Array<[string, string]> } {
  const ensured: Array<[string, string]> = [];
  const channels = {
    ensure: async (id: string, tenantId: string) => {
      ensured.push([id, tenantId]);
      return { id, tenantId, migratedTo: null };
    },
    get: () => Promise.resolve(null),
  };
  return { store: { channels } as unknown as Store, ensured };
}

/** initData as `token`'s bot's Mini App sends it, for CHAT (the start parameter signed by that bot). */
function initData(token: string, userId = 7, startToken = token): string {
  return signInitData(
    { user: { id: userId, first_name: 'u' }, chat_type: 'supergroup', start_param: startParamFor(CHAT, startParamSecret(startToken)) },
    { botToken: token },
  );
}

describe('gateway - TelegramAuth with tenant bots', () => {
  const cfg = defaultConfig({ telegram: { botToken: DEFAULT_TOKEN, tenantId: 'dev' } }).telegram;

  it("each bot's Mini App lands in its own tenant's channel of the chat; the default bot's keeps tg<chat>", async () => {
    const f = store();
    const auth = new TelegramAuth(cfg, f.store, undefined, async () => [ACME, GLOBEX]);
    const d = await auth.crowd(initData(DEFAULT_TOKEN), '');
    const a = await auth.crowd(initData(ACME.token), '');
    const g = await auth.crowd(initData(GLOBEX.token), '');
    assert.deepEqual(
      [d, a, g].map((x) => [x.tenantId, x.channel]),
      [
        ['dev', telegramChannelId(CHAT)],
        ['acme', telegramChannelId(CHAT, ACME.botId)],
        ['globex', telegramChannelId(CHAT, GLOBEX.botId)],
      ],
    );
    assert.deepEqual(f.ensured, [
      [telegramChannelId(CHAT), 'dev'],
      [telegramChannelId(CHAT, ACME.botId), 'acme'],
      [telegramChannelId(CHAT, GLOBEX.botId), 'globex'],
    ]);
  });

  it('data no bot signed is refused CP_ERR_INITDATA_BAD_HASH; a start parameter of another bot CP_ERR_INITDATA_BAD_START_PARAM; nothing created', async () => {
    const f = store();
    const auth = new TelegramAuth(cfg, f.store, undefined, async () => [ACME]);
    await assert.rejects(auth.crowd(initData('999:stranger-token'), ''), (e) => isCrowdplayError(e, 'CP_ERR_INITDATA_BAD_HASH'));
    await assert.rejects(auth.crowd(initData(ACME.token, 7, DEFAULT_TOKEN), ''), (e) =>
      isCrowdplayError(e, 'CP_ERR_INITDATA_BAD_START_PARAM'),
    );
    // Only the tenant bots: no default bot at all.
    const only = new TelegramAuth(defaultConfig().telegram, f.store, undefined, async () => [ACME]);
    assert.equal(only.enabled, true);
    assert.equal((await only.crowd(initData(ACME.token), '')).tenantId, 'acme');
    await assert.rejects(only.crowd(initData(GLOBEX.token), ''), (e) => isCrowdplayError(e, 'CP_ERR_INITDATA_BAD_HASH'));
    assert.deepEqual(f.ensured, [[telegramChannelId(CHAT, ACME.botId), 'acme']]);
  });
});
