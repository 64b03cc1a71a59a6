/**
 * The word puzzle's Mini App page in a real browser (Debian's chromium via
 * playwright-core), opened as Telegram opens it: the signed initData in the
 * URL fragment (`#tgWebAppData=…`).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { signInitData, startParamFor, startParamSecret } from '@crowdplay/telegram';
import { startStandalone, type InProcess } from '../helpers.ts';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const TELEGRAM_SCRIPT = 'https://telegram.org/js/telegram-web-app.js';

/**
 * A stand-in for Telegram's telegram-web-app.js: the `Telegram.WebApp` a Telegram client gives the page, recording
 * the page's calls in `window.tgCalls`.
 */
function telegramStub(o: { initData: string; chatTitle?: string; theme: Record<string, string> }): string {
  return `window.tgCalls = [];
window.Telegram = { WebApp: {
  initData: ${JSON.stringify(o.initData)},
  initDataUnsafe: ${JSON.stringify(o.chatTitle ? { chat: { title: o.chatTitle } } : {})},
  themeParams: ${JSON.stringify(o.theme)},
  ready() { window.tgCalls.push('ready'); },
  expand() { window.tgCalls.push('expand'); },
  onEvent(name) { window.tgCalls.push('onEvent:' + name); },
} };`;
}
const TOKEN = '777000:TEST-token-for-the-page-suite';
const BOT_USERNAME = 'cp_page_bot';
const APP_NAME = 'puzzle';

describe('Mini App page (browser)', () => {
  let s: InProcess;
  let browser: Browser;
  before(async () => {
    assert.ok(existsSync(CHROMIUM), `chromium not found at ${CHROMIUM}: apt-get install chromium (or set CHROMIUM_PATH)`);
    s = await startStandalone({
      telegram: {
        botToken: TOKEN,
        webhookSecret: 'page-suite-secret',
        apiRoot: 'http://127.0.0.1:9',
        botUsername: BOT_USERNAME,
        appName: APP_NAME,
      },
    });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--no-first-run'] });
  });
  after(async () => {
    await browser?.close();
    await s?.stop();
  });

  it('guesses through the page: marks in the grid, a bad word refused, the group board lists the player', async () => {
    const initData = signInitData(
      { user: { id: 31, first_name: 'Page' }, chat_type: 'supergroup', start_param: startParamFor(-1004242, startParamSecret(TOKEN)) },
      { botToken: TOKEN },
    );
    const page = await browser.newPage();
    await page.route(TELEGRAM_SCRIPT, (route) =>
      route.fulfill({
        contentType: 'text/javascript',
        body: telegramStub({
          initData,
          chatTitle: 'Puzzle <Club>',
          theme: { bg_color: '#101820', text_color: '#f0f0f0', link_color: 'red; x' },
        }),
      }),
    );
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    // Whatever the page's Content-Security-Policy blocks is reported on the console: none of it may be the page's own.
    page.on('console', (m) => void (/Content Security Policy/i.test(m.text()) && errors.push(m.text())));
    await page.goto(`${s.baseUrl}/tg/#tgWebAppData=${encodeURIComponent(initData)}`);
    await page.waitForFunction(() => document.querySelector('[data-testid="tg-state"]')?.textContent === 'open');
    // Telegram's script: told the page is ready, expanded, its theme applied (a colour that is not one is ignored).
    assert.deepEqual(await page.evaluate(() => (window as unknown as { tgCalls: string[] }).tgCalls), [
      'onEvent:themeChanged',
      'ready',
      'expand',
    ]);
    assert.deepEqual(await page.evaluate(() => [getComputedStyle(document.body).backgroundColor, getComputedStyle(document.body).color]), [
      'rgb(16, 24, 32)',
      'rgb(240, 240, 240)',
    ]);
    assert.equal(await page.evaluate(() => document.documentElement.style.getPropertyValue('--tg-theme-link-color')), '');
    assert.equal(await page.locator('[data-testid="group-title"]').textContent(), 'Puzzle <Club>', 'the chat title, as text');
    assert.equal(
      await page.locator('meta[name="crowdplay-app-link"]').getAttribute('content'),
      `https://t.me/${BOT_USERNAME}/${APP_NAME}`,
      "the gateway names the bot's Mini App",
    );
    await page.fill('[data-testid="guess-input"]', 'zzzzz');
    await page.click('[data-testid="guess-submit"]');
    await page.waitForFunction(() =>
      /CP_ERR_PUZZLE_INVALID_WORD/.test(document.querySelector('[data-testid="last-error"]')?.textContent ?? ''),
    );
    await page.fill('[data-testid="guess-input"]', 'crane');
    await page.click('[data-testid="guess-submit"]');
    await page.waitForFunction(() => document.querySelector('[data-testid="cell-0-4"]')?.getAttribute('data-mark') !== null);
    const marks = await page.evaluate(() =>
      [0, 1, 2, 3, 4].map((j) => document.querySelector(`[data-testid="cell-0-${j}"]`)?.getAttribute('data-mark')),
    );
    assert.ok(
      marks.every((m) => m === 'g' || m === 'y' || m === '.'),
      JSON.stringify(marks),
    );
    assert.equal(await page.locator('[data-testid="cell-0-0"]').textContent(), 'c');
    assert.equal(await page.locator('[data-testid="cell-1-0"]').getAttribute('data-mark'), null, 'one row used');
    await page.locator('[data-testid="player-tg:31"]').waitFor();
    assert.equal(await page.locator('[data-testid="player-tg:31"]').evaluate((e) => e.firstChild?.textContent), 'you');
    // Another player of the chat is listed by name (from their initData), not as tg:32.
    const other = await browser.newPage();
    await other.route(TELEGRAM_SCRIPT, (route) => route.abort());
    const otherData = signInitData(
      {
        user: { id: 32, first_name: 'Olga', last_name: 'K' },
        chat_type: 'supergroup',
        start_param: startParamFor(-1004242, startParamSecret(TOKEN)),
      },
      { botToken: TOKEN },
    );
    await other.goto(`${s.baseUrl}/tg/#tgWebAppData=${encodeURIComponent(otherData)}`);
    await other.waitForFunction(() => document.querySelector('[data-testid="tg-state"]')?.textContent === 'open');
    await other.fill('[data-testid="guess-input"]', 'slate');
    await other.click('[data-testid="guess-submit"]');
    await page.locator('[data-testid="player-tg:32"]').waitFor();
    assert.equal(await page.locator('[data-testid="player-tg:32"]').evaluate((e) => e.firstChild?.textContent), 'Olga K');
    await other.close();
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('without initData the page says so and opens no socket', async () => {
    const page = await browser.newPage();
    await page.route(TELEGRAM_SCRIPT, (route) => route.abort()); // outside Telegram (or its script unreachable): still works
    await page.goto(`${s.baseUrl}/tg/`);
    await page.waitForFunction(() => document.querySelector('[data-testid="tg-state"]')?.textContent === 'no-init-data');
    await page.close();
  });
});
