import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, generateKeyPairSync } from 'node:crypto';
import { isCrowdplayError, type ErrorCode } from '@crowdplay/protocol';
import {
  TEST_ED25519,
  chatFromStartParam,
  dataCheckString,
  miniAppSession,
  parseInitDataFields,
  signInitData,
  startParamFor,
  startParamSecret,
  verifyInitData,
  START_PARAM_RE,
  isTelegramChannelId,
  telegramChannelId,
} from '../src/index.ts';

const TOKEN = '123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw';
const OTHER_TOKEN = '123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaX';
const NOW_MS = 1_760_000_000_000;
const NOW_S = NOW_MS / 1000;
const USER = { id: 279058397, first_name: 'Vladislav + - ? /', last_name: 'Kibenko', username: 'vdkfrost', language_code: 'ru' };

/**
 * Telegram-issued initData published by the Telegram Mini Apps project
 * (docs.telegram-mini-apps.com, init-data-golang README) for bot 7342037359:
 * its `hash` verifies with this token and its `signature` with Telegram's
 * production Ed25519 key: an independent check of both algorithms.
 */
const PUBLISHED_TOKEN = '7342037359:AAHI25ES9xCOMPokpYoz-p8XVrZUdygo2J4';
const PUBLISHED =
  'user=%7B%22id%22%3A279058397%2C%22first_name%22%3A%22Vladislav%20%2B%20-%20%3F%20%5C%2F%22%2C%22last_name%22%3A%22Kibenko%22%2C%22username%22%3A%22vdkfrost%22%2C%22language_code%22%3A%22ru%22%2C%22is_premium%22%3Atrue%2C%22allows_write_to_pm%22%3Atrue%2C%22photo_url%22%3A%22https%3A%5C%2F%5C%2Ft.me%5C%2Fi%5C%2Fuserpic%5C%2F320%5C%2F4FPEE4tmP3ATHa57u6MqTDih13LTOiMoKoLDRG4PnSA.svg%22%7D&chat_instance=8134722200314281151&chat_type=private&auth_date=1733509682&signature=TYJxVcisqbWjtodPepiJ6ghziUL94-KNpG8Pau-X7oNNLNBM72APCpi_RKiUlBvcqo5L-LAxIc3dnTzcZX_PDg&hash=a433d8f9847bd6addcc563bff7cc82c89e97ea0d90c11fe5729cae6796a36d73';
const PUBLISHED_NOW_MS = (1733509682 + 20) * 1000;

function throwsCode(fn: () => unknown, code: ErrorCode, message?: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(isCrowdplayError(err), `expected CrowdplayError ${code}, got ${String(err)}`);
    assert.equal(err.code, code);
    if (message) assert.match(err.message, message);
    return true;
  });
}

function sample(extra: Record<string, string | number | object> = {}): string {
  return signInitData(
    { query_id: 'AAHdF6IQAAAAAN0XohDhrOrc', user: USER, auth_date: NOW_S - 30, chat_type: 'group', chat_instance: '-71', ...extra },
    { botToken: TOKEN },
  );
}

void test('Telegram-issued data: the hash verifies with the bot token, the signature with the production key', () => {
  const byHash = verifyInitData(PUBLISHED, { botToken: PUBLISHED_TOKEN, maxAgeS: 86_400, nowMs: PUBLISHED_NOW_MS });
  assert.equal(byHash.verifiedBy, 'hash');
  assert.equal(byHash.user?.id, 279058397);
  assert.equal(byHash.user?.first_name, 'Vladislav + - ? /');
  assert.equal(byHash.chat_instance, '8134722200314281151');
  assert.equal(byHash.chat_type, 'private');
  assert.equal(byHash.auth_date, 1733509682);
  const bySig = verifyInitData(PUBLISHED, { botId: 7342037359, method: 'signature', maxAgeS: 86_400, nowMs: PUBLISHED_NOW_MS });
  assert.equal(bySig.verifiedBy, 'signature');
  assert.equal(bySig.user?.username, 'vdkfrost');
  const both = verifyInitData(PUBLISHED, { botToken: PUBLISHED_TOKEN, method: 'both', maxAgeS: 86_400, nowMs: PUBLISHED_NOW_MS });
  assert.equal(both.verifiedBy, 'both');
  // The same data against Telegram's test-environment key, or for another bot id, fails.
  throwsCode(
    () =>
      verifyInitData(PUBLISHED, { botId: 7342037359, method: 'signature', publicKey: 'test', maxAgeS: 86_400, nowMs: PUBLISHED_NOW_MS }),
    'CP_ERR_INITDATA_BAD_SIGNATURE',
    /bot 7342037359 with the test key/,
  );
  throwsCode(
    () => verifyInitData(PUBLISHED, { botId: 7342037358, method: 'signature', maxAgeS: 86_400, nowMs: PUBLISHED_NOW_MS }),
    'CP_ERR_INITDATA_BAD_SIGNATURE',
  );
});

void test('the data-check-string is the sorted key=value lines, URL-decoded, without hash', () => {
  const fields = parseInitDataFields('user=%7B%22a%22%3A1%7D&auth_date=5&hash=abc&chat_type=group');
  assert.equal(dataCheckString(fields, ['hash']), 'auth_date=5\nchat_type=group\nuser={"a":1}');
  // The documented HMAC, computed here independently of the library.
  const raw = sample();
  const f = parseInitDataFields(raw);
  const secret = createHmac('sha256', 'WebAppData').update(TOKEN).digest();
  const lines = [...f].filter(([k]) => k !== 'hash').map(([k, v]) => `${k}=${v}`);
  lines.sort();
  assert.equal(createHmac('sha256', secret).update(lines.join('\n')).digest('hex'), f.get('hash'));
});

void test('valid HMAC initData: typed fields', () => {
  const d = verifyInitData(sample({ start_param: 'abc' }), { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS });
  assert.deepEqual(d.user, USER);
  assert.equal(d.query_id, 'AAHdF6IQAAAAAN0XohDhrOrc');
  assert.equal(d.chat_type, 'group');
  assert.equal(d.chat_instance, '-71');
  assert.equal(d.start_param, 'abc');
  assert.equal(d.auth_date, NOW_S - 30);
  assert.equal(d.verifiedBy, 'hash');
  assert.equal(d.fields.user, JSON.stringify(USER));
});

void test('a tampered field, a wrong bot token, a missing or malformed hash are refused', () => {
  const raw = sample();
  const tampered = raw.replace('chat_type=group', 'chat_type=supergroup');
  assert.notEqual(tampered, raw);
  throwsCode(() => verifyInitData(tampered, { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }), 'CP_ERR_INITDATA_BAD_HASH');
  // A field added after signing.
  throwsCode(() => verifyInitData(`${raw}&start_param=x`, { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }), 'CP_ERR_INITDATA_BAD_HASH');
  // A field removed.
  throwsCode(
    () => verifyInitData(raw.replace(/&?chat_instance=[^&]*/, ''), { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }),
    'CP_ERR_INITDATA_BAD_HASH',
  );
  throwsCode(() => verifyInitData(raw, { botToken: OTHER_TOKEN, maxAgeS: 3600, nowMs: NOW_MS }), 'CP_ERR_INITDATA_BAD_HASH');
  const noHash = raw.replace(/&?hash=[0-9a-f]+/, '');
  throwsCode(
    () => verifyInitData(noHash, { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }),
    'CP_ERR_INITDATA_MISSING_FIELD',
    /no hash field/,
  );
  throwsCode(() => verifyInitData(`${noHash}&hash=`, { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }), 'CP_ERR_INITDATA_MISSING_FIELD');
  // A hash of the wrong length or alphabet cannot match (no exception from timingSafeEqual).
  throwsCode(() => verifyInitData(`${noHash}&hash=abcd`, { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }), 'CP_ERR_INITDATA_BAD_HASH');
  throwsCode(
    () => verifyInitData(`${noHash}&hash=${'z'.repeat(64)}`, { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }),
    'CP_ERR_INITDATA_BAD_HASH',
  );
  // Uppercase hex of the right hash is the same 32 bytes.
  const upper = raw.replace(/hash=([0-9a-f]+)/, (_m, h: string) => `hash=${h.toUpperCase()}`);
  assert.equal(verifyInitData(upper, { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }).user?.id, USER.id);
});

void test('duplicate fields, empty or oversized data are malformed', () => {
  const raw = sample();
  throwsCode(
    () => verifyInitData(`${raw}&auth_date=1`, { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }),
    'CP_ERR_INITDATA_MALFORMED',
    /auth_date given twice/,
  );
  throwsCode(() => verifyInitData('', { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }), 'CP_ERR_INITDATA_MALFORMED', /empty/);
  throwsCode(
    () => verifyInitData(`${raw}&x=${'a'.repeat(9000)}`, { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }),
    'CP_ERR_INITDATA_MALFORMED',
    /longer than 8192/,
  );
  const badUser = signInitData({ user: '{not json', auth_date: NOW_S }, { botToken: TOKEN });
  throwsCode(
    () => verifyInitData(badUser, { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }),
    'CP_ERR_INITDATA_MALFORMED',
    /user is not JSON/,
  );
  const noId = signInitData({ user: { first_name: 'x' }, auth_date: NOW_S }, { botToken: TOKEN });
  throwsCode(
    () => verifyInitData(noId, { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS }),
    'CP_ERR_INITDATA_MALFORMED',
    /not a valid WebAppUser/,
  );
});

void test('auth_date: stale, future, missing, not a number', () => {
  const maxAgeS = 3600;
  const at = (authDate: number | string): string => signInitData({ user: USER, auth_date: authDate }, { botToken: TOKEN });
  // Exactly maxAgeS old passes; one second more is refused.
  assert.equal(verifyInitData(at(NOW_S - maxAgeS), { botToken: TOKEN, maxAgeS, nowMs: NOW_MS }).auth_date, NOW_S - maxAgeS);
  throwsCode(
    () => verifyInitData(at(NOW_S - maxAgeS - 1), { botToken: TOKEN, maxAgeS, nowMs: NOW_MS }),
    'CP_ERR_INITDATA_EXPIRED',
    /is 3601 s old, past TELEGRAM_INITDATA_MAX_AGE_S \(3600 s\)/,
  );
  assert.equal(verifyInitData(at(NOW_S + 60), { botToken: TOKEN, maxAgeS, nowMs: NOW_MS }).auth_date, NOW_S + 60);
  throwsCode(() => verifyInitData(at(NOW_S + 61), { botToken: TOKEN, maxAgeS, nowMs: NOW_MS }), 'CP_ERR_INITDATA_FUTURE', /61 s ahead/);
  throwsCode(
    () => verifyInitData(at('soon'), { botToken: TOKEN, maxAgeS, nowMs: NOW_MS }),
    'CP_ERR_INITDATA_MALFORMED',
    /auth_date is not a unix time/,
  );
  // signInitData adds auth_date when absent, so build one without it by hand.
  const fields = 'user=' + encodeURIComponent(JSON.stringify(USER));
  const hash = createHmac('sha256', createHmac('sha256', 'WebAppData').update(TOKEN).digest())
    .update(`user=${JSON.stringify(USER)}`)
    .digest('hex');
  throwsCode(
    () => verifyInitData(`${fields}&hash=${hash}`, { botToken: TOKEN, maxAgeS, nowMs: NOW_MS }),
    'CP_ERR_INITDATA_MISSING_FIELD',
    /no auth_date/,
  );
  // Stale data with a forged hash reports the hash, not the age: nothing is read before the signature.
  throwsCode(
    () => verifyInitData(at(NOW_S - 99_999).replace('auth_date=', 'auth_date=1'), { botToken: TOKEN, maxAgeS, nowMs: NOW_MS }),
    'CP_ERR_INITDATA_BAD_HASH',
  );
});

void test('Ed25519 third-party signature: valid, tampered, wrong key, missing', () => {
  const raw = signInitData(
    { user: USER, auth_date: NOW_S, chat_type: 'group' },
    { ed25519: { privateKey: TEST_ED25519.privateKey, botId: 42 } },
  );
  assert.ok(!raw.includes('hash='));
  const opts = { botId: 42, publicKey: TEST_ED25519.publicKeyRaw, maxAgeS: 60, nowMs: NOW_MS };
  const d = verifyInitData(raw, opts);
  assert.equal(d.verifiedBy, 'signature');
  assert.deepEqual(d.user, USER);
  throwsCode(
    () => verifyInitData(raw.replace('chat_type=group', 'chat_type=private'), opts),
    'CP_ERR_INITDATA_BAD_SIGNATURE',
    /bot 42 with the given key/,
  );
  throwsCode(() => verifyInitData(raw, { ...opts, botId: 43 }), 'CP_ERR_INITDATA_BAD_SIGNATURE');
  const other = generateKeyPairSync('ed25519');
  throwsCode(() => verifyInitData(raw, { ...opts, publicKey: other.publicKey }), 'CP_ERR_INITDATA_BAD_SIGNATURE');
  // Telegram's production key does not accept the test key's signature.
  throwsCode(() => verifyInitData(raw, { botId: 42, maxAgeS: 60, nowMs: NOW_MS }), 'CP_ERR_INITDATA_BAD_SIGNATURE', /production key/);
  // A truncated signature.
  throwsCode(
    () =>
      verifyInitData(
        raw.replace(/signature=([^&]+)/, (_m, s: string) => `signature=${s.slice(0, 40)}`),
        opts,
      ),
    'CP_ERR_INITDATA_BAD_SIGNATURE',
  );
  const hashOnly = sample();
  throwsCode(() => verifyInitData(hashOnly, { ...opts, method: 'signature' }), 'CP_ERR_INITDATA_MISSING_FIELD', /no signature field/);
  // Stale signed data is refused after the signature passed.
  throwsCode(() => verifyInitData(raw, { ...opts, nowMs: NOW_MS + 61_000 }), 'CP_ERR_INITDATA_EXPIRED');
});

void test('both: the hash covers the signature field, and each must hold', () => {
  const raw = signInitData({ user: USER, auth_date: NOW_S }, { botToken: TOKEN, ed25519: { privateKey: TEST_ED25519.privateKey } });
  const opts = { botToken: TOKEN, method: 'both' as const, publicKey: TEST_ED25519.publicKeyRaw, maxAgeS: 60, nowMs: NOW_MS };
  assert.equal(verifyInitData(raw, opts).verifiedBy, 'both');
  // Without the signature field the hash no longer matches (it covered it) — and the signature is missing.
  const noSig = raw.replace(/&?signature=[^&]+/, '');
  throwsCode(() => verifyInitData(noSig, { ...opts, method: 'hash' }), 'CP_ERR_INITDATA_BAD_HASH');
  throwsCode(() => verifyInitData(raw, { ...opts, botToken: OTHER_TOKEN }), 'CP_ERR_INITDATA_BAD_HASH');
  assert.throws(() => verifyInitData(raw, { maxAgeS: 60, method: 'hash' }), RangeError);
  assert.throws(() => verifyInitData(raw, { maxAgeS: 60 }), RangeError);
});

void test('start parameters: ≤ 64 chars of [A-Za-z0-9_-], round trip, forged and foreign ones refused', () => {
  const secret = startParamSecret(TOKEN);
  for (const chatId of [-1001234567890, -4242, 1, 777000, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER]) {
    const p = startParamFor(chatId, secret);
    assert.match(p, START_PARAM_RE);
    assert.equal(p.length, 34);
    assert.equal(chatFromStartParam(p, secret), chatId);
  }
  const p = startParamFor(-1001234567890, secret);
  // Another bot's secret, a flipped character, a truncation, junk.
  throwsCode(() => chatFromStartParam(p, startParamSecret(OTHER_TOKEN)), 'CP_ERR_INITDATA_BAD_START_PARAM');
  const flipped = p.slice(0, 5) + (p[5] === 'A' ? 'B' : 'A') + p.slice(6);
  throwsCode(() => chatFromStartParam(flipped, secret), 'CP_ERR_INITDATA_BAD_START_PARAM');
  throwsCode(() => chatFromStartParam(p.slice(0, 30), secret), 'CP_ERR_INITDATA_BAD_START_PARAM');
  throwsCode(() => chatFromStartParam('-1001234567890', secret), 'CP_ERR_INITDATA_BAD_START_PARAM');
  throwsCode(() => chatFromStartParam('a b', secret), 'CP_ERR_INITDATA_BAD_START_PARAM');
  assert.throws(() => startParamFor(1.5, secret), RangeError);
});

void test('miniAppSession: the chat comes from the signed start_param; data for chat A is refused on chat B', () => {
  const secret = startParamSecret(TOKEN);
  const chatA = -1001111111111;
  const chatB = -1002222222222;
  const forA = sample({ start_param: startParamFor(chatA, secret) });
  const opts = { botToken: TOKEN, maxAgeS: 3600, nowMs: NOW_MS, startParamSecret: secret };
  const s = miniAppSession(forA, { ...opts, expectChatId: chatA });
  assert.equal(s.chatId, chatA);
  assert.equal(s.user.id, USER.id);
  assert.equal(miniAppSession(forA, opts).chatId, chatA);
  throwsCode(() => miniAppSession(forA, { ...opts, expectChatId: chatB }), 'CP_ERR_INITDATA_WRONG_CHAT', /not -1002222222222/);
  // Swapping in chat B's (genuine) start parameter breaks the hash.
  const swapped = forA.replace(/start_param=[^&]+/, `start_param=${startParamFor(chatB, secret)}`);
  throwsCode(() => miniAppSession(swapped, { ...opts, expectChatId: chatB }), 'CP_ERR_INITDATA_BAD_HASH');
  // A user who opens the app with a start_param they typed gets genuine Telegram data, but no chat.
  const typed = sample({ start_param: 'chat_-1002222222222' });
  throwsCode(() => miniAppSession(typed, opts), 'CP_ERR_INITDATA_BAD_START_PARAM');
  throwsCode(() => miniAppSession(sample(), opts), 'CP_ERR_INITDATA_NO_CHAT');
  const noUser = signInitData({ auth_date: NOW_S, start_param: startParamFor(chatA, secret) }, { botToken: TOKEN });
  throwsCode(() => miniAppSession(noUser, opts), 'CP_ERR_INITDATA_MISSING_FIELD', /no user field/);
});

test('channel ids - a Telegram chat channel is recognised; other channels and malformed ones are not', () => {
  for (const chat of [-1001234567890, -42, 42, 777000]) assert.ok(isTelegramChannelId(telegramChannelId(chat)), String(chat));
  for (const other of ['demo', 'tg', 'tgn', 'tgn0', 'tg01', 'tgx12', 'tgn12a', `tgn${'9'.repeat(17)}`, 'TGN12']) {
    assert.equal(isTelegramChannelId(other), false, other);
  }
});
