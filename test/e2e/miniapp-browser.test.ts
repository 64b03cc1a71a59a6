/**
 * The word puzzle's Mini App page in a real browser (Debian's chromium via
 * playwright-core), opened as Telegram opens it: the signed initData in the
 * URL fragment (`#tgWebAppData=…`).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { answerFor, fiveLetterWords } from '@crowdplay/crowd-engine';
import { signInitData, startParamFor, startParamSecret } from '@crowdplay/telegram';
import { startStandalone, type InProcess } from '../helpers.ts';
import {
  CHROMIUM,
  TELEGRAM_SCRIPT,
  haptics,
  mainButton,
  pressMainButton,
  rowMarks,
  telegramStub,
  type StubWindow,
} from './miniapp-page.ts';

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

  it('guesses through the page and the main button: marks in the grid, a bad word refused, the group board lists the player', async () => {
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
    // Telegram's main button: "Guess", shown once the socket is open, active only for a five-letter word.
    await page.waitForFunction(() => (window as unknown as StubWindow).tgMain.visible);
    let button = await mainButton(page);
    assert.equal(button.text, 'Guess');
    assert.ok(button.calls.includes('onClick'), 'the page handles its clicks');
    assert.equal(button.active, false, 'nothing typed yet');
    await page.fill('[data-testid="guess-input"]', 'abc');
    assert.equal((await mainButton(page)).active, false, 'three letters');
    await page.fill('[data-testid="guess-input"]', 'zzzzz');
    assert.equal((await mainButton(page)).active, true, 'five letters');
    // The page's own form still guesses: a word the dictionary lacks is refused, with an error haptic.
    await page.click('[data-testid="guess-submit"]');
    await page.waitForFunction(() =>
      /CP_ERR_PUZZLE_INVALID_WORD/.test(document.querySelector('[data-testid="last-error"]')?.textContent ?? ''),
    );
    assert.deepEqual(await haptics(page), ['notification:error']);
    // The main button guesses: its progress shown while the guess is in flight, the marks in the grid.
    await page.waitForFunction(() => /^#\d+$/.test(document.querySelector('[data-testid="puzzle-number"]')?.textContent ?? ''));
    const puzzle = Number((await page.locator('[data-testid="puzzle-number"]').textContent())!.slice(1));
    const answer = answerFor(puzzle, fiveLetterWords().answers, s.config.puzzle.secret);
    const first = answer === 'crane' ? 'slate' : 'crane';
    await page.fill('[data-testid="guess-input"]', first);
    const callsBefore = (await mainButton(page)).calls.length;
    await pressMainButton(page);
    assert.match(await rowMarks(page, 0), /^[gy.]{5}$/);
    assert.equal(await page.locator('[data-testid="cell-0-0"]').textContent(), first[0]);
    assert.equal(await page.locator('[data-testid="cell-1-0"]').getAttribute('data-mark'), null, 'one row used');
    button = await mainButton(page);
    assert.deepEqual(
      button.calls.slice(callsBefore).filter((c) => /Progress$/.test(c)),
      ['showProgress', 'hideProgress'],
    );
    assert.deepEqual([button.visible, button.active, button.progress], [true, false, false], 'still shown, the input empty');
    assert.deepEqual(await haptics(page), ['notification:error', 'impact:light'], 'a wrong guess: a light tap');
    // Solved: the puzzle is over for this player, and the main button goes away.
    await page.fill('[data-testid="guess-input"]', answer);
    await pressMainButton(page);
    assert.equal(await rowMarks(page, 1), 'ggggg');
    await page.waitForFunction(() => !(window as unknown as StubWindow).tgMain.visible);
    assert.deepEqual(await haptics(page), ['notification:error', 'impact:light', 'notification:success']);
    await page.locator('[data-testid="player-tg:31"]').waitFor();
    assert.equal(await page.locator('[data-testid="player-tg:31"]').evaluate((e) => e.firstChild?.textContent), 'you');
    // The share button opens Telegram's share dialog with the bot's direct link for this chat.
    await page.click('[data-testid="share"]');
    const links = await page.evaluate(() => (window as unknown as StubWindow).tgLinks);
    assert.equal(links.length, 1);
    const share = new URL(links[0]!);
    assert.equal(`${share.origin}${share.pathname}`, 'https://t.me/share/url');
    assert.equal(
      share.searchParams.get('url'),
      `https://t.me/${BOT_USERNAME}/${APP_NAME}?startapp=${startParamFor(-1004242, startParamSecret(TOKEN))}`,
      "the chat's Mini App link",
    );
    assert.equal(share.searchParams.get('text'), `Play word puzzle #${puzzle} with us`);
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

  it('on an older client, without the main button, the page still guesses through its own form', async () => {
    const initData = signInitData(
      { user: { id: 33, first_name: 'Old' }, chat_type: 'supergroup', start_param: startParamFor(-1004242, startParamSecret(TOKEN)) },
      { botToken: TOKEN },
    );
    const page = await browser.newPage();
    await page.route(TELEGRAM_SCRIPT, (route) =>
      route.fulfill({ contentType: 'text/javascript', body: telegramStub({ initData, theme: {}, older: true }) }),
    );
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${s.baseUrl}/tg/#tgWebAppData=${encodeURIComponent(initData)}`);
    await page.waitForFunction(() => document.querySelector('[data-testid="tg-state"]')?.textContent === 'open');
    await page.fill('[data-testid="guess-input"]', 'slate');
    await page.click('[data-testid="guess-submit"]');
    assert.match(await rowMarks(page, 0), /^[gy.]{5}$/);
    assert.deepEqual(await page.evaluate(() => (window as unknown as StubWindow).tgCalls), ['onEvent:themeChanged', 'ready', 'expand']);
    assert.deepEqual((await mainButton(page)).calls, [], 'no main button to tell');
    assert.equal(await page.locator('[data-testid="share"]').isHidden(), true, 'no openTelegramLink: no share button');
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('without initData the page says so and opens no socket', async () => {
    const page = await browser.newPage();
    await page.route(TELEGRAM_SCRIPT, (route) => route.abort()); // outside Telegram (or its script unreachable): still works
    await page.goto(`${s.baseUrl}/tg/`);
    await page.waitForFunction(() => document.querySelector('[data-testid="tg-state"]')?.textContent === 'no-init-data');
    assert.equal(await page.locator('[data-testid="share"]').isHidden(), true, 'no chat to invite to');
    await page.close();
  });
});
