/**
 * `crowdplay telegram setup` as an operator runs it: the `crowdplay` process
 * against the Bot API stub, with the database, Redis and NATS pointed at
 * ports nothing listens on (the command must open none of them). Exit 0 and
 * one line per call on success; 1 with Telegram's description when Telegram
 * refuses; 2 with the error code when refused before any call. (Every case
 * of the command itself is in telegram-setup.test.ts; a process start is
 * seconds on a busy machine, so this file starts three.)
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { TelegramStub } from '@crowdplay/telegram/testing';

const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));
const TOKEN = '123456:stub-token_A';
const SECRET = 'webhook-Secret_0123456789';

/** Runs `crowdplay <args>` (asynchronously: the stub answers from this process). */
function cli(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
      env: {
        ...process.env,
        DATABASE_URL: 'postgres://127.0.0.1:1/none',
        REDIS_URL: 'redis://127.0.0.1:1',
        NATS_URL: 'nats://127.0.0.1:1',
        TELEGRAM_BOT_USERNAME: 'crowdplay_stub_bot',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 120_000,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

test('crowdplay telegram setup - against the stub: exit 0 with one line per call; 2 naming the code when refused before any call; 1 with the description Telegram gives', async () => {
  const stub = new TelegramStub({ tokens: [TOKEN] });
  await stub.listen();
  try {
    const env = { TELEGRAM_API_ROOT: stub.url, TELEGRAM_BOT_TOKEN: TOKEN, TELEGRAM_WEBHOOK_SECRET: SECRET };
    // Two that change nothing, side by side.
    const [insecure, revoked] = await Promise.all([
      cli(['telegram', 'setup', '--public-url', 'http://bot.example.org'], env),
      cli(['telegram', 'setup', '--public-url', 'https://bot.example.org'], { ...env, TELEGRAM_BOT_TOKEN: '999:revoked' }),
    ]);
    assert.equal(insecure.code, 2, insecure.stderr);
    assert.match(
      insecure.stderr,
      /^crowdplay telegram setup: CP_ERR_TELEGRAM_PUBLIC_URL_INVALID: public URL "http:\/\/bot\.example\.org" refused: .*https:\/\/ only \(nothing was sent to Telegram\)\n$/,
    );
    assert.equal(insecure.stdout, '');
    assert.equal(revoked.code, 1, revoked.stderr);
    assert.match(
      revoked.stderr,
      /^crowdplay telegram setup: CP_ERR_TELEGRAM_SETUP_FAILED: setWebhook failed: Telegram answered 401 Unauthorized\n$/,
    );
    assert.ok(!revoked.stderr.includes('999:revoked'), 'the token is not printed');
    assert.deepEqual(
      stub.calls().map((c) => `${c.method} ${c.status}`),
      ['setWebhook 401'],
      'the refused URL sent nothing; the revoked token sent one call, refused',
    );
    assert.equal(stub.webhook().url, '');

    const ok = await cli(['telegram', 'setup', '--public-url', 'https://bot.example.org'], env);
    assert.equal(ok.code, 0, ok.stderr);
    const lines = ok.stdout.trim().split('\n');
    assert.deepEqual(
      lines.map((l) => l.split(/\s+/).slice(0, 2).join(' ')),
      ['setWebhook ok', 'setMyCommands ok', 'setChatMenuButton ok', 'getWebhookInfo ok', 'getMe ok', 'telegram setup:'],
    );
    assert.equal(lines.at(-1), 'telegram setup: done');
    assert.equal(stub.webhook().url, 'https://bot.example.org/v1/telegram/webhook');
    assert.equal(stub.webhook().secretToken, SECRET);
  } finally {
    await stub.close();
  }
});
