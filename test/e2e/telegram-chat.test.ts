/**
 * A Telegram group plays the word puzzle end to end, against the Bot API
 * stub (loadtest/src/telegram-stub: Telegram's ceilings and error bodies):
 * the webhook's /start → the bot answers with a Mini App link for this chat
 * → a player opens it (signed initData with that link's start parameter) and
 * guesses → the chat's board is rendered and posted as a photo, once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { signInitData } from '@crowdplay/telegram';
import { TelegramStub } from '../../loadtest/src/telegram-stub/index.ts';
import { openSocket, startStandalone, until, type InProcess } from '../helpers.ts';

const TOKEN = '424242:TEST-token-for-the-chat-suite';
const HOOK_SECRET = 'hook-secret-for-tests';
const CHAT = -1005550001;

describe('Telegram group chat: /start → Mini App guesses → live board', () => {
  let stub: TelegramStub;
  let s: InProcess;
  before(async () => {
    stub = new TelegramStub();
    const root = await stub.listen();
    s = await startStandalone({
      telegram: { botToken: TOKEN, webhookSecret: HOOK_SECRET, apiRoot: root, botUsername: 'cp_test_bot', appName: 'play' },
    });
  });
  after(async () => {
    await s?.stop();
    await stub?.close();
  });

  const webhook = (update: unknown, secret = HOOK_SECRET) =>
    fetch(`${s.baseUrl}/v1/telegram/webhook`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-telegram-bot-api-secret-token': secret },
      body: JSON.stringify(update),
    });

  it('runs the whole loop, and refuses a webhook call without the secret', async () => {
    assert.equal((await webhook({ update_id: 1 }, 'wrong')).status, 401);
    const r = await webhook({
      update_id: 2,
      message: {
        message_id: 10,
        date: 1,
        chat: { id: CHAT, type: 'supergroup', title: 'Crew' },
        from: { id: 7, is_bot: false, first_name: 'Ann' },
        text: '/start@cp_test_bot',
      },
    });
    assert.equal(r.status, 200);
    assert.equal(await r.text(), '', 'no Bot API method in the webhook answer');
    // The bot's answer carries the Mini App link for this chat.
    const reply = await until(() => stub.messages(CHAT).find((m) => m.fromBot && m.kind === 'text'), 'the /start reply');
    const url = /"url":"([^"]+)"/.exec(reply.markup)?.[1];
    assert.ok(url?.startsWith('https://t.me/cp_test_bot/play?startapp='), reply.markup);
    const startParam = new URL(url!).searchParams.get('startapp')!;

    const initData = signInitData(
      { user: { id: 7, first_name: 'Ann' }, chat_type: 'supergroup', start_param: startParam },
      { botToken: TOKEN },
    );
    const c = openSocket(`${s.baseUrl.replace('http', 'ws')}/v1/ws?role=crowd&initData=${encodeURIComponent(initData)}`);
    await c.next((f) => f.t === 'welcome');
    c.send({ t: 'guess', seq: 1, word: 'crane' });
    const ack = await c.next((f) => f.t === 'ack' && f.seq === 1);
    assert.equal(ack.ok, true);

    // The board: rendered (PNG) and posted to the chat as one photo message when the chat's channel first
    // updates (the puzzle may still be empty then), and edited in place once the guess is in, at the scheduler's
    // pace (at least 3 s apart in a group): wait for that edit.
    await until(
      () => stub.calls().some((c) => c.method === 'editMessageMedia' && c.chatId === CHAT && c.outcome === 'ok'),
      'the board edited to show the guess',
      15_000,
    );
    const board = stub.board(CHAT)!;
    assert.equal(board.photoMessages, 1, 'one board message, no duplicate');
    assert.ok(board.bytes > 1_000 && board.bytes < 100_000, `board PNG of ${board.bytes} bytes`);
    const stats = stub.stats();
    assert.equal(stats.rejected429, 0, 'no 429 from the stub');
    assert.ok(
      (stats.byMethod.getUserProfilePhotos ?? 0) >= 1,
      `the player’s avatar was read for the board: ${JSON.stringify(stats.byMethod)}`,
    );
    c.close();
  });
});
