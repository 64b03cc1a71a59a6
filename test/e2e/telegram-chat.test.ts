/**
 * A Telegram group plays the word puzzle end to end, against the Bot API
 * stub (@crowdplay/telegram/testing: Telegram's ceilings and error bodies):
 * the webhook's /start → the bot answers with a Mini App link for this chat
 * → a player opens it (signed initData with that link's start parameter) and
 * guesses → the chat's board is rendered and posted as a photo, once.
 * Then a group that played is upgraded to a supergroup: the migration message
 * moves its board, jobs and puzzle state; an old link lands in the new chat.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { signInitData } from '@crowdplay/telegram';
import { TelegramStub } from '@crowdplay/telegram/testing';
import { openSocket, startStandalone, until, type InProcess } from '../helpers.ts';

const TOKEN = '424242:TEST-token-for-the-chat-suite';
const HOOK_SECRET = 'hook-secret-for-tests';
const CHAT = -1005550001;

/** Polls an async condition every 25 ms. */
async function untilAsync(what: () => Promise<boolean>, label: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await what())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${label}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

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

  it('group → supergroup: the players’ rows move to the new chat, an old link lands there, a re-delivery changes nothing', async () => {
    const OLD = -5550002;
    const NEW = -1005550002;
    const [oldChannel, newChannel] = ['tgn5550002', 'tgn1005550002'];
    const store = s.running.store;
    const metrics = () => s.running.telemetry.metrics.prometheusText();
    const count = async (re: RegExp) => Number(re.exec(await metrics())?.[1] ?? 0);
    const migrations = (outcome: string) => count(new RegExp(`crowdplay_channel_migrations_total\\{outcome="${outcome}"[^}]*\\} (\\d+)`));
    const refusedMoves = () => count(/crowdplay_refusals_total\{area="telegram",reason="CP_ERR_CHANNEL_MIGRATION_INVALID"[^}]*\} (\d+)/);
    const message = (update_id: number, chat: number, extra: Record<string, unknown>) =>
      webhook({
        update_id,
        message: { message_id: update_id, date: 1, chat: { id: chat, type: chat === NEW ? 'supergroup' : 'group' }, ...extra },
      });

    // The group plays: /start, a player opens the link and guesses.
    assert.equal((await message(20, OLD, { title: 'Old crew', text: '/start' })).status, 200);
    const reply = await until(() => stub.messages(OLD).find((m) => m.fromBot && m.kind === 'text'), 'the /start reply');
    const startParam = new URL(/"url":"([^"]+)"/.exec(reply.markup)![1]!).searchParams.get('startapp')!;
    const initData = (id: number, name: string) =>
      signInitData({ user: { id, first_name: name }, chat_type: 'group', start_param: startParam }, { botToken: TOKEN });
    const wsUrl = (id: number, name: string) =>
      `${s.baseUrl.replace('http', 'ws')}/v1/ws?role=crowd&initData=${encodeURIComponent(initData(id, name))}`;
    const before = openSocket(wsUrl(8, 'Bo'));
    assert.equal((await before.next((f) => f.t === 'welcome')).channel, oldChannel);
    before.send({ t: 'guess', seq: 1, word: 'crane' });
    assert.equal((await before.next((f) => f.t === 'ack' && f.seq === 1)).ok, true);
    before.close();
    await before.closed;

    // Telegram upgrades the group (the old id now answers 400 migrate_to_chat_id) and tells the bot.
    stub.migrate(OLD, NEW);
    assert.equal((await message(21, OLD, { migrate_to_chat_id: NEW })).status, 200);
    await untilAsync(async () => (await migrations('moved')) === 1, 'the move');
    const oldRow = await store.channels.get(oldChannel);
    assert.deepEqual([oldRow?.migratedTo, oldRow?.owner], [newChannel, null], 'the old channel is moved and not served');

    // The old link (signed for the old group) now opens the new chat, with the player's row in it.
    const after = openSocket(wsUrl(8, 'Bo'));
    assert.equal((await after.next((f) => f.t === 'welcome')).channel, newChannel);
    const first = await after.next((f) => f.t === 'update');
    const players = (first.game as { players: Record<string, { marks: string[] }> }).players;
    assert.equal(players['tg:8']?.marks.length, 1, `the player's guess moved with the chat: ${JSON.stringify(first.game)}`);
    after.send({ t: 'guess', seq: 1, word: 'hello' });
    const ack = await after.next((f) => f.t === 'ack' && f.seq === 1);
    assert.deepEqual([ack.ok, ack.left], [true, 4], 'the second guess of six, in the new chat');

    // The new chat's board is posted there (the old group is read-only now).
    const board = await until(() => stub.board(NEW), 'the board in the supergroup', 15_000);
    assert.equal(board.photoMessages, 1);

    // The supergroup's migrate_from_chat_id, and the old group's message again: nothing changes.
    const epochs = async () => [(await store.channels.get(oldChannel))!.epoch, (await store.channels.get(newChannel))!.epoch];
    const e0 = await epochs();
    await message(22, NEW, { migrate_from_chat_id: OLD });
    await message(23, OLD, { migrate_to_chat_id: NEW });
    await untilAsync(async () => (await migrations('done')) === 2, 'both re-deliveries answered');
    assert.deepEqual(await epochs(), e0, 'no release, no fence, no re-acquire');
    assert.equal(await migrations('moved'), 1);
    assert.equal(stub.board(NEW)?.photoMessages, 1, 'still one board in the new chat');

    // Bad input: to itself, not an integer; a chat that never played: refused or moved nothing, nothing created.
    await message(24, -5550003, { migrate_to_chat_id: -5550003 });
    await message(25, -5550003, { migrate_to_chat_id: 'x' });
    await message(26, -5550004, { migrate_to_chat_id: -1005550004 });
    await untilAsync(async () => (await migrations('none')) === 1, 'the never-played chat');
    assert.equal(await refusedMoves(), 2);
    for (const c of ['tgn5550003', 'tgn5550004', 'tgn1005550004']) assert.equal(await store.channels.get(c), null, c);
    after.close();
  });
});
