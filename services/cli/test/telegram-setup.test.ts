/**
 * `crowdplay telegram setup` (telegram-setup.ts) against the Bot API stub of
 * loadtest/, which keeps the bot's webhook, commands and menu button with the
 * Bot API's checks: what it sets, how it waits out a 429, what it refuses
 * before calling anything, and what it reports when Telegram refuses.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError, type ErrorCode } from '@crowdplay/protocol';
import { TelegramStub, type StubOptions } from '@crowdplay/telegram/testing';
import { BOT_COMMANDS, BOT_UPDATE_TYPES } from '@crowdplay/telegram-service';
import { publicBaseUrl, telegramSetup, type TelegramSetupOptions } from '@crowdplay/cli';

const TOKEN = '123456:stub-token_A';
const SECRET = 'webhook-Secret_0123456789';

async function withStub(opts: StubOptions, fn: (stub: TelegramStub) => Promise<void>): Promise<void> {
  const stub = new TelegramStub(opts);
  await stub.listen();
  try {
    await fn(stub);
  } finally {
    await stub.close();
  }
}

/** The setup against `stub`, its printed lines collected. */
function setup(
  stub: TelegramStub,
  over: Omit<Partial<TelegramSetupOptions>, 'telegram'> & { telegram?: Partial<TelegramSetupOptions['telegram']> } = {},
): { lines: string[]; run: () => ReturnType<typeof telegramSetup> } {
  const lines: string[] = [];
  const { telegram, ...rest } = over;
  return {
    lines,
    run: () =>
      telegramSetup({
        telegram: { botToken: TOKEN, webhookSecret: SECRET, apiRoot: stub.url, botUsername: 'crowdplay_stub_bot', ...telegram },
        publicUrl: 'https://bot.example.org/',
        print: (l) => lines.push(l),
        ...rest,
      }),
  };
}

async function refusedWith(p: Promise<unknown>, code: ErrorCode, re: RegExp): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(isCrowdplayError(err, code), `${code} expected, got ${String(err)}`);
    assert.match(err.message, re);
    return true;
  });
}

test('telegram setup - sets the webhook, the commands and the menu button, then checks them, printing one line per call', async () => {
  await withStub({ tokens: [TOKEN] }, async (stub) => {
    const { lines, run } = setup(stub);
    const report = await run();
    assert.equal(report.ok, true, report.problems.join('; '));
    assert.deepEqual(
      stub.calls().map((c) => `${c.method} ${c.outcome}`),
      ['setWebhook ok', 'setMyCommands ok', 'setChatMenuButton ok', 'getWebhookInfo ok', 'getMe ok'],
    );
    assert.deepEqual(stub.webhook(), {
      url: 'https://bot.example.org/v1/telegram/webhook',
      secretToken: SECRET,
      allowedUpdates: ['message', 'edited_message', 'my_chat_member'],
      maxConnections: 40,
      pendingUpdateCount: 0,
    });
    assert.deepEqual(stub.webhook().allowedUpdates, [...BOT_UPDATE_TYPES], 'exactly the update types the bot reads');
    assert.deepEqual(
      stub.commands(),
      BOT_COMMANDS.map((c) => ({ command: c.command, description: c.description })),
    );
    assert.deepEqual(
      stub.commands().map((c) => c.command),
      ['start', 'board', 'stop'],
    );
    assert.deepEqual(stub.menuButton(), { type: 'web_app', text: 'Play', web_app: { url: 'https://bot.example.org/tg/' } });
    assert.equal(lines.length, 6, lines.join('\n'));
    assert.match(
      lines[0]!,
      /^setWebhook +ok +https:\/\/bot\.example\.org\/v1\/telegram\/webhook, allowed_updates message,edited_message,my_chat_member/,
    );
    assert.match(lines[1]!, /^setMyCommands +ok +\/start \/board \/stop$/);
    assert.match(lines[2]!, /^setChatMenuButton +ok +web_app "Play" opens https:\/\/bot\.example\.org\/tg\/$/);
    assert.match(lines[3]!, /^getWebhookInfo +ok +url matches, pending_update_count 0, no delivery error$/);
    assert.match(lines[4]!, /^getMe +ok +@crowdplay_stub_bot \(id \d+\), matches TELEGRAM_BOT_USERNAME, privacy mode on$/);
    assert.equal(lines[5], 'telegram setup: done');
    const all = lines.join('\n');
    assert.ok(!all.includes(TOKEN) && !all.includes(SECRET), 'neither the token nor the secret is printed');
  });
});

test('telegram setup - a 429 is waited out for retry_after, then the call is made again and succeeds', async () => {
  await withStub({ tokens: [TOKEN] }, async (stub) => {
    stub.inject({ kind: '429', retryAfterS: 1, method: 'setWebhook' });
    const { lines, run } = setup(stub);
    const report = await run();
    assert.equal(report.ok, true);
    const hooks = stub.calls().filter((c) => c.method === 'setWebhook');
    assert.deepEqual(
      hooks.map((c) => c.outcome),
      ['429', 'ok'],
    );
    const waited = hooks[1]!.atMs - hooks[0]!.atMs;
    assert.ok(waited >= 1_000, `the second setWebhook came ${waited} ms after the 429 asked for 1 s`);
    assert.match(lines[0]!, /^setWebhook +429 Too Many Requests: retry after 1: waiting 1 s$/);
    assert.match(lines[1]!, /^setWebhook +ok /);
    assert.equal(stub.webhook().url, 'https://bot.example.org/v1/telegram/webhook');
  });
});

test('telegram setup - a 429 asking for longer than the deadline leaves is not waited for: refused with its description', async () => {
  await withStub({ tokens: [TOKEN] }, async (stub) => {
    stub.inject({ kind: '429', retryAfterS: 30, method: 'setWebhook' });
    const { lines, run } = setup(stub, { deadlineMs: 5_000 });
    const started = Date.now();
    await refusedWith(
      run(),
      'CP_ERR_TELEGRAM_SETUP_FAILED',
      /^setWebhook failed: Too Many Requests: retry after 30 \(waiting 30 s would pass the deadline of 5 s/,
    );
    assert.ok(Date.now() - started < 5_000, 'it did not wait');
    assert.deepEqual(
      stub.calls().map((c) => `${c.method} ${c.outcome}`),
      ['setWebhook 429'],
      'nothing after the refused call',
    );
    assert.equal(stub.webhook().url, '');
    assert.deepEqual(lines, []);
  });
});

test('telegram setup - a public URL Telegram cannot use, a missing or malformed token or secret: refused by name, nothing called', async () => {
  await withStub({ tokens: [TOKEN] }, async (stub) => {
    const urls: Array<[string | undefined, RegExp]> = [
      [
        'http://bot.example.org',
        /^public URL "http:\/\/bot\.example\.org" refused: Telegram delivers webhooks and opens Mini Apps over https:\/\/ only$/,
      ],
      [undefined, /give --public-url https:\/\/<host>/],
      ['', /give --public-url https:\/\/<host>/],
      ['bot.example.org', /not a URL/],
      ['https://bot.example.org:8080', /ports 443, 80, 88 or 8443 only, not 8080/],
      ['https://127.0.0.1', /127\.0\.0\.1 is not reachable from the internet/],
      ['https://localhost:8443', /localhost is not reachable/],
      ['https://[::1]', /not reachable/],
      ['https://192.168.1.5', /not reachable/],
      ['https://bot.example.org/?x=1', /no query or fragment/],
      ['https://u:p@bot.example.org', /no user or password/],
      ['https://bot.example.org/crowdplay', /no path: the gateway serves .* from the root of the host/],
    ];
    for (const [publicUrl, re] of urls) {
      await refusedWith(setup(stub, { publicUrl }).run(), 'CP_ERR_TELEGRAM_PUBLIC_URL_INVALID', re);
    }
    await refusedWith(setup(stub, { telegram: { botToken: '' } }).run(), 'CP_ERR_CONFIG_INVALID', /TELEGRAM_BOT_TOKEN: not set/);
    await refusedWith(setup(stub, { telegram: { webhookSecret: '' } }).run(), 'CP_ERR_CONFIG_INVALID', /TELEGRAM_WEBHOOK_SECRET: not set/);
    for (const botToken of ['notatoken', '123:has space', ':abc', 'abc:def', '123:'])
      await refusedWith(setup(stub, { telegram: { botToken } }).run(), 'CP_ERR_CONFIG_INVALID', /TELEGRAM_BOT_TOKEN: not a bot token/);
    await refusedWith(
      setup(stub, { telegram: { botToken: '', webhookSecret: '' } }).run(),
      'CP_ERR_CONFIG_INVALID',
      /TELEGRAM_BOT_TOKEN: not set.*\nTELEGRAM_WEBHOOK_SECRET: not set/,
    );
    // Neither the flag nor the credentials: the flag, the command's own, is named first.
    await refusedWith(
      setup(stub, { publicUrl: undefined, telegram: { botToken: '', webhookSecret: '' } }).run(),
      'CP_ERR_TELEGRAM_PUBLIC_URL_INVALID',
      /give --public-url https:\/\/<host>/,
    );
    await refusedWith(
      setup(stub, { telegram: { webhookSecret: 'has:colon' } }).run(),
      'CP_ERR_CONFIG_INVALID',
      /TELEGRAM_WEBHOOK_SECRET: Telegram accepts 1-256 characters of A-Z, a-z, 0-9, _ and -/,
    );
    // A dry run makes no call either, and prints neither the token nor the secret.
    const dry = setup(stub, { dryRun: true });
    const report = await dry.run();
    assert.deepEqual(
      report.calls.map((c) => c.method),
      ['setWebhook', 'setMyCommands', 'setChatMenuButton', 'getWebhookInfo', 'getMe'],
    );
    assert.equal(dry.lines.length, 6);
    assert.match(
      dry.lines[0]!,
      /^dry run: nothing is sent; each call would be a POST to http:\/\/127\.0\.0\.1:\d+\/bot<TELEGRAM_BOT_TOKEN>\/<method>/,
    );
    assert.match(
      dry.lines[1]!,
      /^setWebhook +\{"url":"https:\/\/bot\.example\.org\/v1\/telegram\/webhook","secret_token":"<TELEGRAM_WEBHOOK_SECRET>"/,
    );
    assert.ok(!dry.lines.join('\n').includes(TOKEN) && !dry.lines.join('\n').includes(SECRET));
    assert.deepEqual(stub.calls(), [], 'the stub saw no call');
    assert.equal(stub.stats().calls, 0);
    assert.equal(stub.webhook().url, '');
  });
});

test('telegram setup - Telegram refusing the token (401): refused with its description, nothing after it, the token not shown', async () => {
  await withStub({ tokens: [TOKEN] }, async (stub) => {
    const { lines, run } = setup(stub, { telegram: { botToken: '999:revoked-token' } });
    await assert.rejects(run(), (err: unknown) => {
      assert.ok(isCrowdplayError(err, 'CP_ERR_TELEGRAM_SETUP_FAILED'));
      assert.equal(err.message, 'setWebhook failed: Telegram answered 401 Unauthorized');
      return true;
    });
    assert.deepEqual(
      stub.calls().map((c) => `${c.method} ${c.status}`),
      ['setWebhook 401'],
    );
    assert.deepEqual(lines, []);
    assert.equal(stub.webhook().url, '');
  });
});

test('telegram setup - a refused call past the first stops there, the calls before it stay made', async () => {
  await withStub({ tokens: [TOKEN] }, async (stub) => {
    stub.inject({ kind: 'error', code: 400, description: 'Bad Request: BOT_COMMAND_INVALID', method: 'setMyCommands' });
    const { lines, run } = setup(stub);
    await refusedWith(
      run(),
      'CP_ERR_TELEGRAM_SETUP_FAILED',
      /^setMyCommands failed: Telegram answered 400 Bad Request: BOT_COMMAND_INVALID$/,
    );
    assert.equal(lines.length, 1);
    assert.match(lines[0]!, /^setWebhook +ok/);
    assert.deepEqual(
      stub.calls().map((c) => c.method),
      ['setWebhook', 'setMyCommands'],
    );
  });
});

test('telegram setup - the check: another bot than TELEGRAM_BOT_USERNAME, a webhook changed meanwhile, a delivery error', async () => {
  await withStub({ tokens: [TOKEN], bot: { username: 'real_quiz_bot' } }, async (stub) => {
    // The token is another bot's than the setting says: the check fails, naming both.
    const first = setup(stub);
    const r1 = await first.run();
    assert.equal(r1.ok, false);
    assert.match(r1.problems.join('\n'), /the token is @real_quiz_bot's, but TELEGRAM_BOT_USERNAME is crowdplay_stub_bot/);
    assert.match(first.lines.at(-1)!, /^telegram setup: the check failed \(1 problem\(s\)\)$/);

    // Run again with the right name (idempotent), after Telegram failed to deliver to the webhook: a warning, not a failure.
    stub.setWebhookDelivery({
      pendingUpdateCount: 4,
      lastErrorMessage: 'Wrong response from the webhook: 401 Unauthorized',
      lastErrorDate: 1_700_000_000,
    });
    const second = setup(stub, { telegram: { botUsername: 'Real_Quiz_Bot' } });
    const r2 = await second.run();
    assert.equal(r2.ok, true, r2.problems.join('; '));
    assert.match(
      second.lines[3]!,
      /^getWebhookInfo +ok +url matches, pending_update_count 4, last_error_message "Wrong response from the webhook: 401 Unauthorized" at 2023-11-14T22:13:20\.000Z$/,
    );
    assert.match(second.lines.join('\n'), /warning: .*a 401 means the server's TELEGRAM_WEBHOOK_SECRET differs/);

    // Someone sets another webhook between the setup's setWebhook and its check.
    const racing: typeof fetch = async (input, init) => {
      if (String(input).endsWith('/getWebhookInfo')) {
        await fetch(`${stub.url}/bot${TOKEN}/setWebhook`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ url: 'https://elsewhere.example.org/hook' }),
        });
      }
      return fetch(input, init);
    };
    const third = setup(stub, { telegram: { botUsername: 'real_quiz_bot' }, fetch: racing });
    const r3 = await third.run();
    assert.equal(r3.ok, false);
    assert.match(
      third.lines[3]!,
      /url is "https:\/\/elsewhere\.example\.org\/hook", not https:\/\/bot\.example\.org\/v1\/telegram\/webhook/,
    );
  });
});

test('telegram setup - the public URL: the origin, with a Telegram port kept, a trailing slash dropped', () => {
  assert.equal(publicBaseUrl('https://Bot.Example.org/'), 'https://bot.example.org');
  assert.equal(publicBaseUrl('https://bot.example.org:8443'), 'https://bot.example.org:8443');
  assert.equal(publicBaseUrl('https://bot.example.org:443/'), 'https://bot.example.org');
  assert.equal(publicBaseUrl('https://bot.example.org:88'), 'https://bot.example.org:88');
});

test("telegram setup - a tenant's own bot: its webhook path names the bot", async () => {
  await withStub({}, async (stub) => {
    const { run } = setup(stub, { webhookPath: '/v1/telegram/webhook/123456' });
    const report = await run();
    assert.equal(report.ok, true, report.problems.join('; '));
    assert.equal(report.webhookUrl, 'https://bot.example.org/v1/telegram/webhook/123456');
    assert.equal(stub.webhook().url, 'https://bot.example.org/v1/telegram/webhook/123456');
    assert.equal(stub.webhook().secretToken, SECRET);
  });
});
