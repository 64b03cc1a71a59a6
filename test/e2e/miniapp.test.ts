/**
 * The word puzzle's Mini App path through the real gateway and shard:
 * Telegram initData (signed as Telegram does) authenticates a viewer socket,
 * the chat comes only from the signed start parameter, and guesses are
 * scored by the chat's word puzzle.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { signInitData, startParamFor, startParamSecret } from '@crowdplay/telegram';
import { openSocket as open, openWelcomed, startStandalone, type InProcess } from '../helpers.ts';

const BOT_TOKEN = '123456789:TEST-token-for-the-miniapp-suite';
const CHAT_A = -1001234567890;
const CHAT_B = -1009876543210;

describe('Telegram Mini App (initData) → word puzzle', () => {
  let s: InProcess;
  const secret = startParamSecret(BOT_TOKEN);
  const initData = (chatId: number, userId: number, extra: Record<string, string> = {}): string =>
    signInitData(
      {
        user: { id: userId, first_name: 'Ann', language_code: 'en' },
        chat_type: 'supergroup',
        start_param: startParamFor(chatId, secret),
        ...extra,
      },
      { botToken: BOT_TOKEN },
    );
  const url = (q: Record<string, string>): string =>
    `${s.baseUrl.replace('http', 'ws')}/v1/ws?${new URLSearchParams({ role: 'crowd', ...q }).toString()}`;

  before(async () => {
    s = await startStandalone({ telegram: { botToken: BOT_TOKEN, webhookSecret: 'hook-secret' } });
  });
  after(() => s?.stop());

  it('signed initData joins the chat of its start parameter; a guess is scored in its ack', async () => {
    // The chat's first join places its channel: on a loaded machine that may be refused as retryable first.
    const { socket: c, welcome } = await openWelcomed(url({ initData: initData(CHAT_A, 42) }));
    assert.deepEqual([welcome.channel, welcome.viewer], ['tgn1001234567890', 'tg:42']);
    c.send({ t: 'guess', seq: 1, word: 'zzzzz' });
    const bad = await c.next((f) => f.t === 'ack' && f.seq === 1);
    assert.deepEqual([bad.ok, bad.code], [false, 'CP_ERR_PUZZLE_INVALID_WORD']);
    c.send({ t: 'guess', seq: 2, word: 'crane' });
    const ack = await c.next((f) => f.t === 'ack' && f.seq === 2);
    assert.equal(ack.ok, true);
    assert.match(String(ack.marks), /^[gy.]{5}$/);
    assert.equal(ack.left, 5);
    const u = await c.next(
      (f) => f.t === 'update' && Object.keys((f.game as { players?: object } | undefined)?.players ?? {}).includes('tg:42'),
    );
    assert.deepEqual((u.game as { players: Record<string, unknown> }).players['tg:42'], {
      marks: [ack.marks],
      solved: ack.marks === 'ggggg',
      name: 'Ann',
    });
    c.close();
  });

  it('data signed for chat A is refused on chat B; tampered, stale or unsigned data is refused with its code', async () => {
    const cases: Array<[string, Record<string, string>, number, string]> = [
      ['chat A data on chat B', { initData: initData(CHAT_A, 7), channel: 'tgn1009876543210' }, 4003, 'CP_ERR_INITDATA_WRONG_CHAT'],
      ['tampered user', { initData: initData(CHAT_B, 7).replace('Ann', 'Bob') }, 4001, 'CP_ERR_INITDATA_BAD_HASH'],
      [
        'stale',
        { initData: initData(CHAT_B, 7, { auth_date: String(Math.floor(Date.now() / 1000) - 2 * 86_400) }) },
        4001,
        'CP_ERR_INITDATA_EXPIRED',
      ],
      [
        'signed by another bot',
        {
          initData: signInitData({ user: { id: 7, first_name: 'A' }, start_param: startParamFor(CHAT_B, secret) }, { botToken: '1:other' }),
        },
        4001,
        'CP_ERR_INITDATA_BAD_HASH',
      ],
      [
        'forged start parameter',
        {
          initData: signInitData(
            { user: { id: 7, first_name: 'A' }, start_param: startParamFor(CHAT_B, 'not-the-bot') },
            { botToken: BOT_TOKEN },
          ),
        },
        4003,
        'CP_ERR_INITDATA_BAD_START_PARAM',
      ],
    ];
    for (const [what, q, code, err] of cases) {
      const c = open(url(q));
      assert.equal(await c.closed, code, what);
      assert.equal(c.frames.find((f) => f.t === 'error')?.code, err, what);
      assert.equal(
        c.frames.find((f) => f.t === 'welcome'),
        undefined,
        `${what}: no welcome`,
      );
    }
  });

  it('serves the Mini App page', async () => {
    const page = await fetch(`${s.baseUrl}/tg/`);
    assert.equal(page.status, 200);
    assert.match(await page.text(), /guess-input/);
    assert.equal((await fetch(`${s.baseUrl}/tg/app.js`)).status, 200);
  });
});
