/** TelegramAuth.crowd: one channel resolve per chat, shared by the connects that ask while it is in flight. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '@crowdplay/config';
import type { Store } from '@crowdplay/store';
import { signInitData, startParamFor, startParamSecret, telegramChannelId } from '@crowdplay/telegram';
import { TelegramAuth } from '../src/index.ts';

const BOT_TOKEN = '123456:test-token';
const ch = telegramChannelId;

/** A store whose channels.ensure counts its calls and answers after `delayMs`; `fail` makes the next one reject. */
function fakeStore(delayMs: number): { store: Store; ensured: string[]; fail: { next: boolean } } {
  const ensured: string[] = [];
  const fail = { next: false };
  const channels = {
    ensure: async (id: string, tenantId: string) => {
      ensured.push(id);
      await new Promise((r) => setTimeout(r, delayMs));
      if (fail.next) {
        fail.next = false;
        throw new Error('connection reset');
      }
      return { id, tenantId, migratedTo: null };
    },
    get: () => Promise.resolve(null),
  };
  return { store: { channels } as unknown as Store, ensured, fail };
}

function initDataFor(chatId: number, userId: number): string {
  const startParam = startParamFor(chatId, startParamSecret(BOT_TOKEN));
  return signInitData(
    { user: { id: userId, first_name: `u${userId}` }, chat_type: 'supergroup', start_param: startParam },
    { botToken: BOT_TOKEN },
  );
}

describe('gateway - TelegramAuth', () => {
  const cfg = defaultConfig({ telegram: { botToken: BOT_TOKEN, tenantId: 'acme' } }).telegram;

  it('without any bot, initData is refused as CP_ERR_AUTH_INVALID and no channel is ensured', async () => {
    const f = fakeStore(0);
    const auth = new TelegramAuth(defaultConfig({ telegram: { tenantId: 'acme' } }).telegram, f.store);
    assert.equal(auth.enabled, false);
    await assert.rejects(auth.crowd(initDataFor(-1001, 500), ''), (err: unknown) => {
      assert.equal((err as { code?: string }).code, 'CP_ERR_AUTH_INVALID');
      assert.match(String((err as Error).message), /not configured/);
      return true;
    });
    assert.deepEqual(f.ensured, []);
  });

  it("a chat's players connecting together cost one channels.ensure; each gets its own viewer", async () => {
    const f = fakeStore(30);
    const auth = new TelegramAuth(cfg, f.store);
    const ids = await Promise.all(Array.from({ length: 10 }, (_, i) => auth.crowd(initDataFor(-1001, 500 + i), '')));
    assert.deepEqual(f.ensured, [ch(-1001)]);
    assert.deepEqual(
      ids.map((x) => x.viewer),
      Array.from({ length: 10 }, (_, i) => `tg:${500 + i}`),
    );
    assert.ok(ids.every((x) => x.channel === ch(-1001) && x.signedChannel === ch(-1001)));
    await auth.crowd(initDataFor(-1001, 600), '');
    assert.equal(f.ensured.length, 1, 'cached after the first');
    await Promise.all([
      auth.crowd(initDataFor(-1002, 1), ''),
      auth.crowd(initDataFor(-1002, 2), ''),
      auth.crowd(initDataFor(-1001, 3), '', Date.now(), true),
    ]);
    assert.deepEqual(f.ensured, [ch(-1001), ch(-1002), ch(-1001)], 'another chat resolves once; `fresh` resolves again');
  });

  it('a failed resolve fails the connects that shared it and is not cached', async () => {
    const f = fakeStore(20);
    const auth = new TelegramAuth(cfg, f.store);
    f.fail.next = true;
    const r = await Promise.allSettled([auth.crowd(initDataFor(-1003, 1), ''), auth.crowd(initDataFor(-1003, 2), '')]);
    assert.deepEqual(
      r.map((x) => x.status),
      ['rejected', 'rejected'],
    );
    assert.equal(f.ensured.length, 1);
    assert.equal((await auth.crowd(initDataFor(-1003, 3), '')).channel, ch(-1003));
    assert.equal(f.ensured.length, 2, 'the next connect resolves again');
  });

  it('initData signed for another bot is refused before any store call', async () => {
    const f = fakeStore(1);
    const auth = new TelegramAuth(cfg, f.store);
    const forged = signInitData(
      { user: { id: 1, first_name: 'x' }, start_param: startParamFor(-1004, startParamSecret(BOT_TOKEN)) },
      { botToken: '999:other' },
    );
    await assert.rejects(auth.crowd(forged, ''), (e: { code?: string }) => /^CP_ERR_INITDATA_/.test(e.code ?? ''));
    assert.deepEqual(f.ensured, []);
  });
});
