/**
 * The Mini App's round panel in a real browser: the word puzzle's round of
 * the day (PUZZLE_ROUND on) staked, bought and cashed out through the page,
 * settled by a solve, and the page telling each player whether they won.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { answerFor, fiveLetterWords } from '@crowdplay/crowd-engine';
import { signInitData, startParamFor, startParamSecret } from '@crowdplay/telegram';
import { startStandalone, type InProcess } from '../helpers.ts';
import { CHROMIUM, TELEGRAM_SCRIPT, telegramStub } from './miniapp-page.ts';

const TOKEN = '777001:TEST-token-for-the-round-page-suite';

const text = (page: Page, id: string): Promise<string | null> => page.locator(`[data-testid="${id}"]`).textContent();
const attr = (page: Page, id: string, name: string): Promise<string | null> => page.locator(`[data-testid="${id}"]`).getAttribute(name);
/** Waits until element `id`'s text matches `re`. */
async function textMatches(page: Page, id: string, re: RegExp): Promise<string> {
  await page.waitForFunction(
    ([i, src]) => new RegExp(src!).test(document.querySelector(`[data-testid="${i}"]`)?.textContent ?? ''),
    [id, re.source],
  );
  return (await text(page, id)) ?? '';
}

async function open(browser: Browser, s: InProcess, user: number, chat: number, errors: string[]): Promise<Page> {
  const initData = signInitData(
    { user: { id: user, first_name: `P${user}` }, chat_type: 'supergroup', start_param: startParamFor(chat, startParamSecret(TOKEN)) },
    { botToken: TOKEN },
  );
  const page = await browser.newPage();
  await page.route(TELEGRAM_SCRIPT, (route) =>
    route.fulfill({ contentType: 'text/javascript', body: telegramStub({ initData, theme: {} }) }),
  );
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => void (/Content Security Policy/i.test(m.text()) && errors.push(m.text())));
  await page.goto(`${s.baseUrl}/tg/#tgWebAppData=${encodeURIComponent(initData)}`);
  await page.waitForFunction(() => document.querySelector('[data-testid="tg-state"]')?.textContent === 'open');
  return page;
}

async function solve(page: Page, s: InProcess): Promise<void> {
  await page.waitForFunction(() => /^#\d+$/.test(document.querySelector('[data-testid="puzzle-number"]')?.textContent ?? ''));
  const puzzle = Number((await text(page, 'puzzle-number'))!.slice(1));
  await page.fill('[data-testid="guess-input"]', answerFor(puzzle, fiveLetterWords().answers, s.config.puzzle.secret));
  await page.click('[data-testid="guess-submit"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="cell-0-4"]')?.getAttribute('data-mark') === 'g');
}

function standalone(round: 'pool' | 'market'): Promise<InProcess> {
  return startStandalone({
    telegram: {
      botToken: TOKEN,
      webhookSecret: 'round-page-secret',
      apiRoot: 'http://127.0.0.1:9',
      botUsername: 'cp_round_bot',
      appName: 'play',
    },
    puzzle: { round, roundMs: 600_000, roundGuesses: 3, welcomeGrant: 100 },
  });
}

describe('Mini App round panel (browser)', () => {
  let browser: Browser;
  before(async () => {
    assert.ok(existsSync(CHROMIUM), `chromium not found at ${CHROMIUM}: apt-get install chromium (or set CHROMIUM_PATH)`);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--no-first-run'] });
  });
  after(() => browser?.close());

  it('pool: title, labels, countdown and balance; a stake past the balance refused; a solve settles it, one wins, one loses', async () => {
    const s = await standalone('pool');
    try {
      const errors: string[] = [];
      const ann = await open(browser, s, 51, -1005151, errors);
      const bob = await open(browser, s, 52, -1005151, errors);
      for (const page of [ann, bob]) {
        await page.locator('[data-testid="rounds-box"]').waitFor();
        assert.match((await text(page, 'round-title')) ?? '', /^Will someone here solve today's word in 3 guesses or fewer/);
        assert.deepEqual([await text(page, 'round-yes-label'), await text(page, 'round-no-label')], ['Yes, in 3 or fewer', 'No']);
        assert.equal(await attr(page, 'round-panel', 'data-kind'), 'pool');
        // 10 minutes (roundMs), or what is left of the puzzle's day when that is less: the round closes with the puzzle.
        const countdown = await textMatches(page, 'round-countdown', /closes in/);
        const m = /^closes in (\d+):(\d\d)$/.exec(countdown);
        assert.ok(m, countdown);
        const period = s.config.puzzle.periodMs;
        const leftS = Math.min(600_000, period - (Date.now() % period)) / 1000;
        const shownS = Number(m[1]) * 60 + Number(m[2]);
        assert.ok(shownS <= leftS + 1 && shownS >= leftS - 60, `${countdown} with ${Math.round(leftS)} s left`);
        assert.equal(await textMatches(page, 'balance', /^\d+$/), '100', 'the welcome grant');
      }
      // Bad input: more than the balance is refused with its code, and nothing changes.
      await bob.fill('[data-testid="round-points"]', '5000');
      await bob.click('[data-testid="stake-no"]');
      await bob.waitForFunction(() => document.querySelector('[data-testid="round-trade"]')?.getAttribute('data-ok') === 'false');
      assert.equal(await attr(bob, 'round-trade', 'data-code'), 'CP_ERR_ROUND_INSUFFICIENT_FUNDS');
      assert.equal(await text(bob, 'balance'), '100');
      assert.equal(await text(bob, 'round-no-pool'), '0');
      // Stakes: the balance drops, the pool totals show on both pages.
      await ann.fill('[data-testid="round-points"]', '30');
      await ann.click('[data-testid="stake-yes"]');
      assert.equal(await textMatches(ann, 'balance', /^70$/), '70');
      assert.equal(await text(ann, 'round-yes-mine'), 'you staked 30');
      await bob.fill('[data-testid="round-points"]', '10');
      await bob.click('[data-testid="stake-no"]');
      assert.equal(await textMatches(bob, 'balance', /^90$/), '90');
      assert.equal(await textMatches(ann, 'round-no-pool', /^10 /), '10 (25%)');
      // Ann solves in one guess: the game settles the round yes; Ann won Bob's 10, Bob lost them.
      await solve(ann, s);
      assert.equal(await textMatches(ann, 'round-result', /you won/), 'Winner: Yes, in 3 or fewer · you won 10');
      assert.equal(await attr(ann, 'round-result', 'data-net'), 'won');
      assert.equal(await textMatches(bob, 'round-result', /you lost/), 'Winner: Yes, in 3 or fewer · you lost 10');
      assert.equal(await textMatches(ann, 'balance', /^110$/), '110');
      assert.equal(await attr(ann, 'round-state', 'data-state'), 'settled');
      assert.equal(await ann.locator('[data-testid="stake-yes"]').isDisabled(), true, 'no stake on a settled round');
      assert.deepEqual(errors, []);
    } finally {
      await s.stop();
    }
  });

  it('market: prices, buy and cash out move the balance and the position; a solve settles it and the holder won', async () => {
    const s = await standalone('market');
    try {
      const errors: string[] = [];
      const page = await open(browser, s, 61, -1006161, errors);
      await page.locator('[data-testid="rounds-box"]').waitFor();
      assert.equal(await attr(page, 'round-panel', 'data-kind'), 'market');
      assert.equal(await textMatches(page, 'round-yes-price', /%$/), '50.0%');
      assert.equal(await textMatches(page, 'balance', /^\d+$/), '100');
      assert.equal(await page.locator('[data-testid="sell-yes"]').isDisabled(), true, 'nothing to cash out yet');
      await page.fill('[data-testid="round-points"]', '20');
      await page.click('[data-testid="buy-yes"]');
      const held = Number((await textMatches(page, 'round-yes-position', /^you hold \d+$/)).split(' ')[2]);
      assert.ok(held > 0);
      const afterBuy = Number(await textMatches(page, 'balance', /^(8\d)$/));
      assert.ok(afterBuy >= 80 && afterBuy < 100, `paid at most 20 (balance ${afterBuy})`);
      await textMatches(page, 'round-yes-price', /^(5[1-9]|[6-9]\d)\.\d%$/);
      // Cash out: the shares go back to the market, the proceeds to the balance.
      await page.click('[data-testid="sell-yes"]');
      await page.waitForFunction(() => document.querySelector('[data-testid="round-yes-position"]')?.textContent === '');
      assert.ok(Number(await text(page, 'balance')) > afterBuy, 'the proceeds are back');
      await page.click('[data-testid="buy-yes"]');
      await textMatches(page, 'round-yes-position', /^you hold \d+$/);
      await solve(page, s);
      assert.match(await textMatches(page, 'round-result', /you (won|lost)/), /^Winner: Yes, in 3 or fewer · you won \d+$/);
      assert.equal(await attr(page, 'round-result', 'data-net'), 'won');
      assert.deepEqual(errors, []);
    } finally {
      await s.stop();
    }
  });
});
