import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TelegramStub, NOT_MODIFIED, EDIT_NOT_FOUND, type StubOptions } from '../src/testing/index.ts';

const TOKEN = '123:stubtoken';
const GROUP = -1001000000001;
const GROUP2 = -1001000000002;
const USER_CHAT = 555;

/** A 1×1 PNG header is enough for the stub to read the size: signature, IHDR length/type, width, height. */
function png(width: number, height: number, fill = 0): Uint8Array {
  const b = Buffer.alloc(64, fill);
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52]).copy(b, 0);
  b.writeUInt32BE(width, 16);
  b.writeUInt32BE(height, 20);
  return new Uint8Array(b);
}

async function withStub(opts: StubOptions, fn: (stub: TelegramStub, call: Caller) => Promise<void>): Promise<void> {
  const stub = new TelegramStub(opts);
  const url = await stub.listen();
  const call: Caller = async (method, params = {}, token = TOKEN) => {
    const res = await fetch(`${url}/bot${token}/${method}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(params),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  try {
    await fn(stub, call);
  } finally {
    await stub.close();
  }
}
type Caller = (
  method: string,
  params?: Record<string, unknown>,
  token?: string,
) => Promise<{ status: number; body: Record<string, unknown> }>;

async function upload(
  url: string,
  method: string,
  fields: Record<string, string>,
  files: Record<string, Uint8Array>,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const fd = new FormData();
  for (const [k, v] of Object.entries(fields)) fd.append(k, v);
  for (const [k, v] of Object.entries(files)) fd.append(k, new Blob([Buffer.from(v)]), `${k}.png`);
  const res = await fetch(`${url}/bot${TOKEN}/${method}`, { method: 'POST', body: fd });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

void test('ceilings: 1/s per chat, 20/min per group, 30/s per bot, with real 429 bodies; refused calls change nothing', async () => {
  let now = 1_000_000;
  await withStub({ now: () => now }, async (stub, call) => {
    const first = await call('sendMessage', { chat_id: GROUP, text: 'a' });
    assert.equal(first.status, 200);
    const second = await call('sendMessage', { chat_id: GROUP, text: 'b' });
    assert.equal(second.status, 429);
    assert.deepEqual(second.body, {
      ok: false,
      error_code: 429,
      description: 'Too Many Requests: retry after 1',
      parameters: { retry_after: 1 },
    });
    assert.equal(stub.messages(GROUP).length, 1, 'the refused call stored nothing');
    // 20 in a minute for one group: one per second passes the 1/s limit; the 21st within the minute is refused.
    for (let i = 1; i < 20; i++) {
      now += 1_000;
      assert.equal((await call('sendMessage', { chat_id: GROUP, text: `m${i}` })).status, 200, `message ${i}`);
    }
    now += 1_000;
    const over = await call('sendMessage', { chat_id: GROUP, text: 'over' });
    assert.equal(over.status, 429);
    // The first of the 20 was at t0; the window frees at t0 + 60 s, i.e. 40 s from now.
    assert.deepEqual(over.body, {
      ok: false,
      error_code: 429,
      description: 'Too Many Requests: retry after 40',
      parameters: { retry_after: 40 },
    });
    assert.equal(stub.messages(GROUP).length, 20);
    // Private chats have no per-minute limit: the per-chat 1/s only.
    now += 1_000;
    for (let i = 0; i < 3; i++) {
      assert.equal((await call('sendMessage', { chat_id: USER_CHAT + i, text: 'x' })).status, 200);
    }
    // 30 per second for the bot: 27 more distinct chats pass (3 above + 27 = 30), the 31st is refused.
    for (let i = 0; i < 27; i++) assert.equal((await call('sendMessage', { chat_id: 10_000 + i, text: 'x' })).status, 200, `bot call ${i}`);
    const botOver = await call('sendMessage', { chat_id: 20_000, text: 'x' });
    assert.equal(botOver.status, 429);
    assert.equal((botOver.body.parameters as { retry_after: number }).retry_after, 1);
    const s = stub.stats();
    assert.equal(s.rejected429, 3);
    assert.deepEqual(s.rejected429ByScope, { chat: 1, group: 1, bot: 1 });
    // Reads are not counted.
    assert.equal((await call('getMe')).status, 200);
    assert.equal((await call('getUserProfilePhotos', { user_id: 7 })).status, 200);
  });
});

void test('messages: edit of an unknown or deleted message fails as Telegram does; same content is "not modified"', async () => {
  await withStub({ limits: false }, async (stub, call) => {
    const sent = await call('sendMessage', {
      chat_id: GROUP,
      text: 'hello',
      reply_markup: { inline_keyboard: [[{ text: 'Play', url: 'https://t.me/x' }]] },
    });
    assert.equal(sent.status, 200);
    const msg = sent.body.result as { message_id: number; chat: { id: number; type: string }; text: string };
    assert.equal(msg.message_id, 1);
    assert.deepEqual(msg.chat.type, 'supergroup');
    const same = await call('editMessageText', {
      chat_id: GROUP,
      message_id: 1,
      text: 'hello',
      reply_markup: { inline_keyboard: [[{ text: 'Play', url: 'https://t.me/x' }]] },
    });
    assert.deepEqual(same, { status: 400, body: { ok: false, error_code: 400, description: NOT_MODIFIED } });
    // Changing only the markup is a modification.
    assert.equal((await call('editMessageText', { chat_id: GROUP, message_id: 1, text: 'hello' })).status, 200);
    assert.equal(stub.messages(GROUP)[0]!.edits, 1);
    assert.deepEqual(await call('editMessageText', { chat_id: GROUP, message_id: 99, text: 'x' }), {
      status: 400,
      body: { ok: false, error_code: 400, description: EDIT_NOT_FOUND },
    });
    assert.equal((await call('deleteMessage', { chat_id: GROUP, message_id: 1 })).status, 200);
    assert.deepEqual((await call('editMessageText', { chat_id: GROUP, message_id: 1, text: 'again' })).body.description, EDIT_NOT_FOUND);
    assert.equal(
      (await call('deleteMessage', { chat_id: GROUP, message_id: 1 })).body.description,
      'Bad Request: message to delete not found',
    );
    assert.equal(stub.messages(GROUP).length, 0);
    // Ids keep counting after a delete.
    assert.equal(((await call('sendMessage', { chat_id: GROUP, text: 'n' })).body.result as { message_id: number }).message_id, 2);
    assert.deepEqual((await call('sendMessage', { chat_id: GROUP })).body.description, 'Bad Request: message text is empty');
    assert.deepEqual(await call('getMe', {}, 'nope'), { status: 401, body: { ok: false, error_code: 401, description: 'Unauthorized' } });
    assert.equal((await call('noSuchMethod', { chat_id: GROUP })).status, 404);
  });
});

void test('photos: multipart upload, editMessageMedia with attach://, not modified on the same bytes, the chat board view', async () => {
  await withStub({ limits: false, keepUploads: true }, async (stub) => {
    const a = png(1000, 1400, 1);
    const b = png(1000, 800, 2);
    const posted = await upload(stub.url, 'sendPhoto', { chat_id: String(GROUP), caption: 'v1' }, { photo: a });
    assert.equal(posted.status, 200);
    const m = posted.body.result as {
      message_id: number;
      photo: Array<{ file_id: string; width: number; height: number; file_size: number }>;
    };
    assert.deepEqual(
      m.photo.map((p) => [p.width, p.height, p.file_size]),
      [[1000, 1400, 64]],
    );
    const media = (caption: string): string => JSON.stringify({ type: 'photo', media: 'attach://f1', caption });
    const same = await upload(
      stub.url,
      'editMessageMedia',
      { chat_id: String(GROUP), message_id: String(m.message_id), media: media('v1') },
      { f1: a },
    );
    assert.deepEqual(same.body, { ok: false, error_code: 400, description: NOT_MODIFIED });
    const edited = await upload(
      stub.url,
      'editMessageMedia',
      { chat_id: String(GROUP), message_id: String(m.message_id), media: media('v2') },
      { f1: b },
    );
    assert.equal(edited.status, 200);
    const board = stub.board(GROUP)!;
    assert.equal(board.messageId, 1);
    assert.equal(board.caption, 'v2');
    assert.equal(board.bytes, 64);
    assert.equal(board.photoMessages, 1);
    assert.equal(board.posts, 1);
    assert.equal(board.edits, 1);
    const missing = await upload(stub.url, 'editMessageMedia', { chat_id: String(GROUP), message_id: '7', media: media('v3') }, { f1: b });
    assert.deepEqual(missing.body, { ok: false, error_code: 400, description: EDIT_NOT_FOUND });
    // An uploaded photo can be fetched back by file_id (keepUploads).
    const fileId = m.photo[0]!.file_id;
    const f = (await (await fetch(`${stub.url}/bot${TOKEN}/getFile?file_id=${fileId}`)).json()) as { result: { file_path: string } };
    const bytes = new Uint8Array(await (await fetch(`${stub.url}/file/bot${TOKEN}/${f.result.file_path}`)).arrayBuffer());
    assert.deepEqual(bytes, a);
    const calls = stub.calls();
    assert.deepEqual(
      calls.map((c) => [c.method, c.status]),
      [
        ['sendPhoto', 200],
        ['editMessageMedia', 400],
        ['editMessageMedia', 200],
        ['editMessageMedia', 400],
        ['getFile', 200],
        ['file', 200],
      ],
    );
    assert.equal(calls[0]!.uploadBytes, 64);
  });
});

void test('chat states: kicked 403, chat not found, migrated with migrate_to_chat_id, re-added', async () => {
  await withStub({ limits: false }, async (stub, call) => {
    stub.kick(GROUP);
    assert.deepEqual(await call('sendMessage', { chat_id: GROUP, text: 'x' }), {
      status: 403,
      body: { ok: false, error_code: 403, description: 'Forbidden: bot was kicked from the supergroup chat' },
    });
    stub.kick(-42);
    assert.equal(
      (await call('sendMessage', { chat_id: -42, text: 'x' })).body.description,
      'Forbidden: bot was kicked from the group chat',
    );
    stub.readd(GROUP);
    assert.equal((await call('sendMessage', { chat_id: GROUP, text: 'x' })).status, 200);
    stub.forget(GROUP2);
    assert.deepEqual((await call('sendMessage', { chat_id: GROUP2, text: 'x' })).body, {
      ok: false,
      error_code: 400,
      description: 'Bad Request: chat not found',
    });
    stub.migrate(-42, -1009999);
    assert.deepEqual(await call('sendMessage', { chat_id: -42, text: 'x' }), {
      status: 400,
      body: {
        ok: false,
        error_code: 400,
        description: 'Bad Request: group chat was upgraded to a supergroup chat',
        parameters: { migrate_to_chat_id: -1009999 },
      },
    });
    assert.equal((await call('sendMessage', { chat_id: -1009999, text: 'x' })).status, 200);
  });
});

void test('faults: injected 429 and errors per chat, slow answers, dropped connections before and after apply', async () => {
  await withStub({ limits: false }, async (stub, call) => {
    stub.inject({ kind: '429', retryAfterS: 7, chatId: GROUP, method: 'sendMessage' });
    stub.inject({
      kind: 'error',
      code: 403,
      description: 'Forbidden: bot is not a member of the supergroup chat',
      chatId: GROUP2,
      times: 2,
    });
    assert.deepEqual((await call('sendMessage', { chat_id: GROUP, text: 'x' })).body, {
      ok: false,
      error_code: 429,
      description: 'Too Many Requests: retry after 7',
      parameters: { retry_after: 7 },
    });
    assert.equal((await call('sendMessage', { chat_id: GROUP, text: 'x' })).status, 200, 'times: 1');
    assert.equal((await call('sendMessage', { chat_id: GROUP2, text: 'x' })).status, 403);
    assert.equal((await call('sendMessage', { chat_id: GROUP2, text: 'x' })).status, 403);
    assert.equal((await call('sendMessage', { chat_id: GROUP2, text: 'x' })).status, 200);
    assert.equal(stub.messages(GROUP2).length, 1);

    stub.inject({ kind: 'drop-after-apply', chatId: GROUP, method: 'sendMessage' });
    await assert.rejects(call('sendMessage', { chat_id: GROUP, text: 'applied' }));
    assert.deepEqual(
      stub.messages(GROUP).map((m) => m.text),
      ['x', 'applied'],
      'applied although the client got no answer',
    );
    stub.inject({ kind: 'drop-before-apply', chatId: GROUP });
    await assert.rejects(call('sendMessage', { chat_id: GROUP, text: 'lost' }));
    assert.equal(stub.messages(GROUP).length, 2);

    stub.inject({ kind: 'slow', delayMs: 150, method: 'getMe' });
    const t0 = performance.now();
    assert.equal((await call('getMe')).status, 200);
    assert.ok(performance.now() - t0 >= 140, 'answered after the delay');

    stub.inject({ kind: 'http', status: 502, body: '<html>502 Bad Gateway</html>' });
    const res = await fetch(`${stub.url}/bot${TOKEN}/getMe`);
    assert.equal(res.status, 502);
    assert.equal(await res.text(), '<html>502 Bad Gateway</html>');

    const s = stub.stats();
    assert.equal(s.dropped, 2);
    assert.equal(s.rejected429, 1);
    assert.deepEqual(s.rejected429ByScope, { injected: 1 });
    assert.equal(s.errors['Forbidden: bot is not a member of the supergroup chat'], 2);
  });
});

void test('control API over HTTP: faults, chat states, stats, boards, reset', async () => {
  await withStub({ limits: false }, async (stub, call) => {
    const post = (path: string, body?: unknown): Promise<Response> =>
      fetch(`${stub.url}/__stub/${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: body === undefined ? '' : JSON.stringify(body),
      });
    assert.equal(
      (await post('faults', { kind: 'error', code: 400, description: 'Bad Request: injected', method: 'sendMessage' })).status,
      200,
    );
    assert.equal((await call('sendMessage', { chat_id: 1, text: 'x' })).body.description, 'Bad Request: injected');
    await post(`chats/${GROUP}/kick`);
    assert.equal((await call('sendMessage', { chat_id: GROUP, text: 'x' })).status, 403);
    await post(`chats/${GROUP}/readd`);
    assert.equal((await call('sendMessage', { chat_id: GROUP, text: 'x' })).status, 200);
    const stats = (await (await fetch(`${stub.url}/__stub/stats`)).json()) as { calls: number; ok: number };
    assert.equal(stats.calls, 3);
    assert.equal(stats.ok, 1);
    const chat = (await (await fetch(`${stub.url}/__stub/chats/${GROUP}`)).json()) as { messages: unknown[]; board: unknown };
    assert.equal(chat.messages.length, 1);
    assert.equal(chat.board, null);
    await post('reset');
    assert.equal(stub.stats().calls, 0);
    assert.deepEqual(stub.calls(), []);
  });
});

void test('bot settings: setWebhook keeps url, secret and allowed_updates; getWebhookInfo shows them but the secret; bad ones refused, nothing kept', async () => {
  await withStub({}, async (stub, call) => {
    const bad = async (params: Record<string, unknown>, description: string): Promise<void> => {
      assert.deepEqual(
        await call('setWebhook', params),
        { status: 400, body: { ok: false, error_code: 400, description } },
        JSON.stringify(params),
      );
    };
    await bad({ url: 'http://bot.example.org/hook' }, 'Bad Request: bad webhook: An HTTPS URL must be provided for webhook');
    await bad(
      { url: 'https://bot.example.org:8080/hook' },
      'Bad Request: bad webhook: Webhook can be set up only on ports 80, 88, 443 or 8443',
    );
    await bad({ url: 'not a url' }, 'Bad Request: invalid webhook URL specified');
    await bad(
      { url: 'https://bot.example.org/hook', secret_token: 'has:colon' },
      'Bad Request: secret token contains unallowed characters',
    );
    await bad({ url: 'https://bot.example.org/hook', secret_token: 'x'.repeat(257) }, 'Bad Request: secret token is too long');
    assert.equal(stub.webhook().url, '', 'a refused setWebhook kept nothing');

    const ok = await call('setWebhook', {
      url: 'https://bot.example.org:8443/hook',
      secret_token: 'Abc_123-xyz',
      allowed_updates: ['message', 'my_chat_member', 'no_such_type'],
    });
    assert.deepEqual(ok, { status: 200, body: { ok: true, result: true } });
    assert.deepEqual(stub.webhook(), {
      url: 'https://bot.example.org:8443/hook',
      secretToken: 'Abc_123-xyz',
      allowedUpdates: ['message', 'my_chat_member'],
      maxConnections: 40,
      pendingUpdateCount: 0,
    });
    const info = await call('getWebhookInfo');
    assert.deepEqual(info.body.result, {
      url: 'https://bot.example.org:8443/hook',
      has_custom_certificate: false,
      pending_update_count: 0,
      max_connections: 40,
      allowed_updates: ['message', 'my_chat_member'],
    });
    // Telegram's delivery state, set by the test: shown by getWebhookInfo.
    stub.setWebhookDelivery({
      pendingUpdateCount: 3,
      lastErrorMessage: 'Wrong response from the webhook: 401 Unauthorized',
      lastErrorDate: 1_700_000_000,
    });
    const failing = (await call('getWebhookInfo')).body.result as Record<string, unknown>;
    assert.equal(failing.pending_update_count, 3);
    assert.equal(failing.last_error_message, 'Wrong response from the webhook: 401 Unauthorized');
    assert.equal(failing.last_error_date, 1_700_000_000);
    // allowed_updates absent: the previous list stays; an empty list: every type again.
    await call('setWebhook', { url: 'https://bot.example.org/hook2' });
    assert.deepEqual(stub.webhook().allowedUpdates, ['message', 'my_chat_member']);
    assert.equal(stub.webhook().lastErrorMessage, undefined, 'a new URL starts with no delivery error');
    await call('setWebhook', { url: 'https://bot.example.org/hook2', allowed_updates: [] });
    assert.equal(stub.webhook().allowedUpdates, undefined);
    // Form-encoded, as some clients send it: allowed_updates as a JSON string.
    const form = await fetch(`${stub.url}/bot${TOKEN}/setWebhook`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ url: 'https://bot.example.org/form', allowed_updates: '["edited_message"]' }).toString(),
    });
    assert.equal(form.status, 200);
    assert.deepEqual(stub.webhook().allowedUpdates, ['edited_message']);
    assert.deepEqual(await call('deleteWebhook'), { status: 200, body: { ok: true, result: true } });
    assert.equal(stub.webhook().url, '');
    assert.deepEqual((await call('getWebhookInfo')).body.result, { url: '', has_custom_certificate: false, pending_update_count: 3 });
  });
});

void test('bot settings: setMyCommands with the Bot API checks, per scope and language; getMe reports the profile', async () => {
  await withStub({ bot: { username: 'quiz_bot' } }, async (stub, call) => {
    const bad = async (commands: unknown, description: string): Promise<void> => {
      assert.deepEqual(await call('setMyCommands', { commands }), { status: 400, body: { ok: false, error_code: 400, description } });
    };
    await bad([{ command: 'Start', description: 'x' }], 'Bad Request: BOT_COMMAND_INVALID');
    await bad([{ command: '/', description: 'x' }], 'Bad Request: command must be non-empty');
    await bad([{ command: 'a'.repeat(33), description: 'x' }], 'Bad Request: command length must not exceed 32');
    await bad([{ command: 'start', description: '  ' }], 'Bad Request: command description must be non-empty');
    await bad([{ command: 'start', description: 'x'.repeat(257) }], 'Bad Request: command description length must not exceed 256');
    await bad([{ command: 'start' }], 'Bad Request: can\'t parse BotCommand: Can\'t find field "description"');
    await bad(
      Array.from({ length: 101 }, (_, i) => ({ command: `c${i}`, description: 'x' })),
      'Bad Request: BOT_COMMANDS_TOO_MUCH',
    );
    assert.deepEqual(stub.commands(), [], 'refused lists kept nothing');
    assert.equal((await call('setMyCommands', { commands: [{ command: '/start', description: ' Play ' }] })).status, 200);
    assert.equal(
      (
        await call('setMyCommands', {
          commands: [{ command: 'stop', description: 'Stop' }],
          scope: { type: 'all_group_chats' },
          language_code: 'de',
        })
      ).status,
      200,
    );
    assert.deepEqual(stub.commands(), [{ command: 'start', description: 'Play' }], 'a leading / dropped, the description trimmed');
    assert.deepEqual(stub.commands({ type: 'all_group_chats' }, 'de'), [{ command: 'stop', description: 'Stop' }]);
    assert.deepEqual((await call('getMyCommands')).body.result, [{ command: 'start', description: 'Play' }]);
    assert.equal((await call('deleteMyCommands')).status, 200);
    assert.deepEqual(stub.commands(), []);
    const me = (await call('getMe')).body.result as Record<string, unknown>;
    assert.equal(me.username, 'quiz_bot');
    assert.equal(me.can_join_groups, true);
    assert.equal(me.can_read_all_group_messages, false, 'privacy mode on, as for a new bot');
  });
});

void test('bot settings: setChatMenuButton checks the button and its https Web App URL; default and per chat', async () => {
  await withStub({}, async (stub, call) => {
    const bad = async (menu_button: unknown, description: string): Promise<void> => {
      assert.deepEqual(await call('setChatMenuButton', { menu_button }), {
        status: 400,
        body: { ok: false, error_code: 400, description },
      });
    };
    await bad('"x"', "Bad Request: can't parse menu button: MenuButton must be an Object");
    await bad({ type: 'url' }, "Bad Request: can't parse menu button: MenuButton has unsupported type");
    await bad(
      { type: 'web_app', web_app: { url: 'https://a.example/tg/' } },
      'Bad Request: can\'t parse menu button: Can\'t find field "text"',
    );
    await bad({ type: 'web_app', text: 'Play' }, 'Bad Request: can\'t parse menu button: Can\'t find field "web_app"');
    await bad({ type: 'web_app', text: ' ', web_app: { url: 'https://a.example/tg/' } }, 'Bad Request: menu button text must be non-empty');
    await bad(
      { type: 'web_app', text: 'Play', web_app: { url: 'http://a.example/tg/' } },
      "Bad Request: menu button Web App URL 'http://a.example/tg/' is invalid: Only HTTPS links are allowed",
    );
    assert.deepEqual(stub.menuButton(), { type: 'commands' }, 'refused buttons kept nothing');
    const button = { type: 'web_app', text: 'Play', web_app: { url: 'https://a.example/tg/' } };
    assert.equal((await call('setChatMenuButton', { menu_button: button })).status, 200);
    assert.deepEqual(stub.menuButton(), button);
    assert.deepEqual((await call('getChatMenuButton')).body.result, button);
    assert.equal((await call('setChatMenuButton', { chat_id: USER_CHAT, menu_button: { type: 'commands' } })).status, 200);
    assert.deepEqual(stub.menuButton(USER_CHAT), { type: 'commands' });
    assert.deepEqual(stub.menuButton(USER_CHAT + 1), button, 'another chat has the default');
    assert.equal(
      (await call('setChatMenuButton', { chat_id: 'abc', menu_button: button })).body.description,
      'Bad Request: invalid chat_id specified',
    );
    // Bot settings are not counted against the send ceilings.
    for (let i = 0; i < 40; i++) assert.equal((await call('getChatMenuButton')).status, 200);
    const bot = (await (await fetch(`${stub.url}/__stub/bot`)).json()) as { menuButton: unknown; me: { username: string } };
    assert.deepEqual(bot.menuButton, button);
    assert.equal(bot.me.username, 'crowdplay_stub_bot');
    await fetch(`${stub.url}/__stub/reset`, { method: 'POST' });
    assert.deepEqual(stub.menuButton(), { type: 'commands' }, 'reset forgets the bot settings');
  });
});
