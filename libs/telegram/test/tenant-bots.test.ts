import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError } from '@crowdplay/protocol';
import { CHANNEL_ID_RE } from '@crowdplay/protocol';
import {
  BotSecretBox,
  DEV_BOT_SECRETS_KEY,
  botIdOfToken,
  botSecretsKey,
  fetchBotIdentity,
  isTelegramChannelId,
  telegramChannelId,
} from '../src/index.ts';
import { TelegramStubs } from '../src/testing/index.ts';

const KEY = Buffer.alloc(32, 7);
const TOKEN = '111111111:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw';

test('bot secrets - sealed secrets open only for their bot, under their key, unaltered; the sealed form hides the token', () => {
  const box = new BotSecretBox(KEY);
  const sealed = box.seal(111111111, TOKEN);
  assert.ok(!sealed.includes(TOKEN) && !sealed.includes('AAHdq'), sealed);
  assert.notEqual(box.seal(111111111, TOKEN), sealed, 'a fresh IV each seal');
  assert.equal(box.open(111111111, sealed), TOKEN);
  const refused = (f: () => unknown): void =>
    assert.throws(f, (e) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') && !String((e as Error).message).includes(TOKEN));
  refused(() => box.open(222222222, sealed)); // another bot's row
  refused(() => new BotSecretBox(Buffer.alloc(32, 8)).open(111111111, sealed)); // another key
  const parts = sealed.split('.');
  const body = Buffer.from(parts[3]!, 'base64url');
  body[0] = body[0]! ^ 1;
  refused(() => box.open(111111111, [...parts.slice(0, 3), body.toString('base64url')].join('.'))); // altered
  refused(() => box.open(111111111, 'v2.x.y.z'));
  assert.throws(() => new BotSecretBox(Buffer.alloc(16)), RangeError);
});

test('bot secrets - the key: the setting when set; the published dev key only in standalone on loopback and the embedded database; else refused', () => {
  assert.deepEqual(botSecretsKey('ab'.repeat(32), { mode: 'cluster', host: '0.0.0.0' }), { key: Buffer.alloc(32, 0xab), dev: false });
  assert.deepEqual(botSecretsKey('', { mode: 'standalone', host: '127.0.0.1' }), { key: DEV_BOT_SECRETS_KEY, dev: true });
  for (const d of [
    { mode: 'standalone', host: '0.0.0.0' },
    { mode: 'cluster', host: '127.0.0.1' },
    { mode: 'standalone', host: '127.0.0.1', databaseUrl: 'postgresql://ops@db.internal/crowdplay' },
  ]) {
    assert.throws(
      () => botSecretsKey('', d),
      (e) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID') && /TELEGRAM_BOT_SECRETS_KEY/.test((e as Error).message),
    );
  }
  assert.throws(
    () => botSecretsKey('xyz', { mode: 'standalone', host: '127.0.0.1' }),
    (e) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID'),
  );
});

test('channel ids - a tenant bot names its chats tb<bot>_<chat>: apart from the default bot and from another bot in the same chat', () => {
  const chat = -1001234567890;
  const ids = [telegramChannelId(chat), telegramChannelId(chat, 111111111), telegramChannelId(chat, 222222222)];
  assert.deepEqual(ids, ['tgn1001234567890', 'tb111111111_n1001234567890', 'tb222222222_n1001234567890']);
  assert.equal(new Set(ids).size, 3);
  for (const id of [
    ...ids,
    telegramChannelId(42, 9_007_199_254_740_991),
    telegramChannelId(-9_007_199_254_740_991, 9_007_199_254_740_991),
  ]) {
    assert.ok(CHANNEL_ID_RE.test(id), id);
    assert.ok(isTelegramChannelId(id), id);
  }
  for (const other of ['tb_42', 'tb0_42', 'tb1_', 'tb1_0', 'tb1x42', 'tb1_n', 'TB1_42'])
    assert.equal(isTelegramChannelId(other), false, other);
  assert.throws(() => telegramChannelId(42, 0), RangeError);
  assert.throws(() => telegramChannelId(42, 1.5), RangeError);
});

test("bot identity - getMe names the token's bot; a token Telegram refuses or a malformed one: CP_ERR_TELEGRAM_BOT_REJECTED; no answer: CP_ERR_TELEGRAM_UNREACHABLE; never the token", async (t) => {
  const stubs = new TelegramStubs([{ token: TOKEN, username: 'acme_bot' }]);
  const root = await stubs.listen();
  t.after(() => stubs.close());
  assert.equal(botIdOfToken(TOKEN), 111111111);
  assert.equal(botIdOfToken('nope'), null);
  assert.deepEqual(await fetchBotIdentity(root, TOKEN), { id: 111111111, username: 'acme_bot' });
  const rejected = async (
    token: string,
    apiRoot = root,
    code: 'CP_ERR_TELEGRAM_BOT_REJECTED' | 'CP_ERR_TELEGRAM_UNREACHABLE' = 'CP_ERR_TELEGRAM_BOT_REJECTED',
  ): Promise<void> => {
    await assert.rejects(
      fetchBotIdentity(apiRoot, token, { timeoutMs: 2_000 }),
      (e) => isCrowdplayError(e, code) && !(e as Error).message.includes(token.split(':')[1] ?? token),
    );
  };
  await rejected('111111111:revokedRevokedRevoked'); // 401 Unauthorized
  await rejected('222222222:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw'); // not a bot the front knows
  await rejected('not-a-token');
  await rejected(TOKEN, 'http://127.0.0.1:1', 'CP_ERR_TELEGRAM_UNREACHABLE'); // nothing listens: the token was not judged
  // An answer that is not the Bot API's (a proxy's error page) does not judge the token either.
  const page = createServer((_req, res) => res.writeHead(502, { 'content-type': 'text/html' }).end('<html>bad gateway</html>'));
  await new Promise<void>((resolve) => page.listen(0, '127.0.0.1', resolve));
  t.after(() => page.close());
  await rejected(TOKEN, `http://127.0.0.1:${(page.address() as AddressInfo).port}`, 'CP_ERR_TELEGRAM_UNREACHABLE');
});
