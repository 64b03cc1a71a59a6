/**
 * The viewer page in a real browser: Debian's chromium driven by
 * playwright-core. A missing browser fails this test (`.ci/run` installs it).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { defaultConfig } from '@crowdplay/config';
import { ROOT, startStandalone, type InProcess } from '../helpers.ts';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
/** The title the demo gives its rounds (services/crowd-engine/src/games/tug-of-war.ts). */
const DEMO_QUESTION = 'Which side holds the rope when betting closes?';

describe('viewer page (browser)', () => {
  let s: InProcess;
  let browser: Browser;
  before(async () => {
    assert.ok(existsSync(CHROMIUM), `chromium not found at ${CHROMIUM}: apt-get install chromium (or set CHROMIUM_PATH)`);
    s = await startStandalone({ standalone: { demoMotion: false } });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
  });
  after(async () => {
    await browser?.close();
    await s?.stop();
  });

  it('presses an action N times and the tally rises by exactly the accepted presses', async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    // Whatever the page's Content-Security-Policy blocks is reported on the console: none of it may be the page's own.
    page.on('console', (m) => void (/Content Security Policy/i.test(m.text()) && errors.push(m.text())));
    await page.goto(s.baseUrl);
    await page.fill('#channel', 'demo');
    await page.click('[data-testid="join"]');
    await page.waitForFunction(() => document.querySelector('[data-testid="state"]')?.textContent === 'open');
    // A new viewer of the demo gets its welcome grant (DEMO_WELCOME_GRANT) once, pushed as a balance frame.
    await page.waitForFunction(
      (want) => document.querySelector('[data-testid="balance"]')?.textContent === String(want),
      s.config.rounds.demoWelcomeGrant,
    );
    const tally = page.locator('[data-testid="tally-pull-left"]');
    await tally.waitFor();
    const before = Number(await tally.textContent());
    const n = 7;
    for (let i = 0; i < n; i++) await page.click('[data-testid="act-pull-left"]');
    await page.waitForFunction(
      (want) =>
        Number(document.getElementById('acks-ok')?.textContent) + Number(document.getElementById('acks-refused')?.textContent) === want,
      n,
    );
    const accepted = Number(await page.locator('[data-testid="acks-ok"]').textContent());
    assert.equal(accepted, n, 'every press within the rate limit is accepted');
    await page.waitForFunction(({ want }) => Number(document.querySelector('[data-testid="tally-pull-left"]')?.textContent) >= want, {
      want: before + accepted,
    });
    // Quiet channel (motion paused): nothing else moves the tally.
    await page.waitForTimeout(3 * s.config.engine.updateIntervalMs);
    assert.equal(Number(await tally.textContent()), before + accepted);
    assert.equal(Number(await page.locator('[data-testid="tally-pull-right"]').textContent()), 0);
    assert.ok(Number(await page.locator('[data-testid="position"]').textContent()) < 0, 'the rope moved left');
    // UPDATE_SCREENSHOT=1 refreshes the README's picture; otherwise the shot goes to a temp dir.
    const dir = process.env.UPDATE_SCREENSHOT ? join(ROOT, 'docs/img') : mkdtempSync(join(tmpdir(), 'crowdplay-shot-'));
    mkdirSync(dir, { recursive: true });
    await page.screenshot({ path: join(dir, 'viewer-page.png'), clip: { x: 280, y: 0, width: 720, height: 640 } });
    assert.deepEqual(errors, [], 'no page errors');
    await page.close();
  });

  it('stakes in the open pool round of the demo: acked after the commit, balance and pool move; bad points are refused locally', async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    // Whatever the page's Content-Security-Policy blocks is reported on the console: none of it may be the page's own.
    page.on('console', (m) => void (/Content Security Policy/i.test(m.text()) && errors.push(m.text())));
    await page.goto(s.baseUrl);
    await page.fill('#channel', 'demo');
    await page.click('[data-testid="join"]');
    const grant = s.config.rounds.demoWelcomeGrant;
    await page.waitForFunction((want) => document.querySelector('[data-testid="balance"]')?.textContent === String(want), grant);
    // The demo opens a pool round first ("which side is the rope on at the deadline?").
    const stake = page.locator('[data-testid^="stake-"][data-testid$="-left"]').first();
    await stake.waitFor();
    const roundId = ((await stake.getAttribute('data-testid')) ?? '').slice('stake-'.length, -'-left'.length);
    const pool = page.locator(`[data-testid="round-${roundId}-left-pool"]`);
    const poolBefore = Number(await pool.textContent());
    for (const bad of ['-5', '0', '2.5', '1e400']) {
      await page.fill('[data-testid="points-input"]', bad);
      await stake.click();
      await page.waitForFunction(
        () => document.querySelector('[data-testid="last-trade"]')?.getAttribute('data-code') === 'CP_ERR_PROTO_INVALID',
      );
      await page.evaluate(() => document.querySelector('[data-testid="last-trade"]')?.setAttribute('data-code', ''));
    }
    assert.equal(await page.locator('[data-testid="balance"]').textContent(), String(grant), 'bad input moved no points');
    await page.fill('[data-testid="points-input"]', '25');
    await stake.click();
    await page.waitForFunction(() => document.querySelector('[data-testid="last-trade"]')?.getAttribute('data-ok') === 'true');
    await page.waitForFunction((want) => document.querySelector('[data-testid="balance"]')?.textContent === String(want), grant - 25);
    // The server's answers are counted, the stake's too (the local refusals above never reached it).
    assert.deepEqual(
      [await page.locator('[data-testid="acks-ok"]').textContent(), await page.locator('[data-testid="acks-refused"]').textContent()],
      ['1', '0'],
    );
    assert.equal(await page.locator(`[data-testid="round-${roundId}-left-mine"]`).textContent(), 'you staked 25');
    assert.match((await page.locator(`[data-testid="round-${roundId}-explain"]`).textContent()) ?? '', /When betting closes/);
    await page.waitForFunction(
      ({ id, want }) => Number(document.querySelector(`[data-testid="round-${id}-left-pool"]`)?.textContent) >= want,
      { id: roundId, want: poolBefore + 25 },
    );
    assert.match((await page.locator(`[data-testid="round-${roundId}-countdown"]`).textContent()) ?? '', /^closes in \d/);
    assert.deepEqual(errors, [], 'no page errors');
    await page.close();
  });

  it('a forged token is refused with its documented close code and shown', async () => {
    const page = await browser.newPage();
    await page.goto(s.baseUrl);
    assert.equal(await page.locator('[data-testid="debug"]').isVisible(), false, 'no token box for viewers');
    await page.goto(`${s.baseUrl}/?debug`);
    await page.fill('#channel', 'demo');
    await page.fill('#token', 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.forged');
    await page.click('[data-testid="join"]');
    await page.locator('[data-testid="error"]').waitFor({ state: 'visible' });
    assert.match((await page.locator('[data-testid="error"]').textContent()) ?? '', /CP_ERR_AUTH_INVALID|4001/);
    await page.close();
  });
});

/** The id of the first `kind` round shown open with at least `minMs` before its deadline (waits for one). */
async function openRound(page: Page, kind: 'pool' | 'market', minMs: number): Promise<string> {
  const handle = await page.waitForFunction(
    ({ kind, minMs }) => {
      for (const card of Array.from(document.querySelectorAll(`#rounds > [data-kind="${kind}"]`))) {
        const id = card.id.slice('round-'.length);
        const state = document.getElementById(`round-${id}-state`)?.textContent;
        const left = Number(document.getElementById(`round-${id}-countdown`)?.dataset.remainingMs ?? 0);
        if (state === 'open' && left >= minMs) return id;
      }
      return false;
    },
    { kind, minMs },
    { timeout: 60_000 },
  );
  return (await handle.jsonValue()) as string;
}

/** A viewer page joined to the demo as `viewer`, once its welcome grant is shown. */
async function joined(browser: Browser, s: InProcess, viewer: string, errors: string[]): Promise<Page> {
  const page = await browser.newPage();
  page.on('pageerror', (e) => errors.push(`${viewer}: ${e.message}`));
  page.on('console', (m) => void (/Content Security Policy/i.test(m.text()) && errors.push(m.text())));
  await page.goto(`${s.baseUrl}/?channel=demo`);
  await page.fill('#viewer', viewer);
  await page.click('[data-testid="join"]');
  await page.waitForFunction(
    (want) => document.querySelector('[data-testid="balance"]')?.textContent === String(want),
    s.config.rounds.demoWelcomeGrant,
  );
  return page;
}

const balanceOf = async (page: Page): Promise<number> => Number(await page.locator('[data-testid="balance"]').textContent());

async function resultOf(page: Page, id: string): Promise<string> {
  await page.waitForFunction(
    (id) => ['won', 'lost', 'even'].includes(document.querySelector(`[data-testid="round-${id}-result"]`)?.getAttribute('data-net') ?? ''),
    id,
    { timeout: 60_000 },
  );
  return (await page.locator(`[data-testid="round-${id}-result"]`).textContent()) ?? '';
}

describe('viewer page (browser): rounds to their result', () => {
  let s: InProcess;
  let browser: Browser;
  before(async () => {
    assert.ok(existsSync(CHROMIUM), `chromium not found at ${CHROMIUM}: apt-get install chromium (or set CHROMIUM_PATH)`);
    // Short demo rounds (a pool, then a market); no bots: the rope moves only when these viewers pull it.
    s = await startStandalone({ standalone: { demoMotion: false }, rounds: { ...defaultConfig().rounds, demoRoundMs: 8_000 } });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--no-first-run'] });
  });
  after(async () => {
    await browser?.close();
    await s?.stop();
  });

  it('a pool round and a market round: "you won N" for one viewer, "you lost N" for the other, newest first', async () => {
    const errors: string[] = [];
    const ann = await joined(browser, s, 'ann', errors);
    const bob = await joined(browser, s, 'bob', errors);
    // The rope left of centre: the demo settles its rounds on "left".
    for (let i = 0; i < 3; i++) await ann.click('[data-testid="act-pull-left"]');
    await ann.waitForFunction(() => Number(document.querySelector('[data-testid="position"]')?.textContent) < 0);

    const pool = await openRound(ann, 'pool', 3_000);
    await bob.locator(`[data-testid="stake-${pool}-right"]`).waitFor();
    const annBefore = await balanceOf(ann);
    const bobBefore = await balanceOf(bob);
    await ann.fill('[data-testid="points-input"]', '30');
    await ann.click(`[data-testid="stake-${pool}-left"]`);
    await bob.fill('[data-testid="points-input"]', '10');
    await bob.click(`[data-testid="stake-${pool}-right"]`);
    for (const p of [ann, bob])
      await p.waitForFunction(() => document.querySelector('[data-testid="last-trade"]')?.getAttribute('data-ok') === 'true');
    // The game's question and outcome labels are shown, not its ids.
    assert.equal(await ann.locator(`[data-testid="round-${pool}-title"]`).textContent(), DEMO_QUESTION);
    assert.equal(await ann.locator(`[data-testid="round-${pool}-left-label"]`).textContent(), 'Left');
    assert.match(await resultOf(ann, pool), /^Winner: Left · you won 10$/);
    assert.match(await resultOf(bob, pool), /^Winner: Left · you lost 10$/);
    await ann.waitForFunction((want) => document.querySelector('[data-testid="balance"]')?.textContent === String(want), annBefore + 10);
    assert.equal(await balanceOf(bob), bobBefore - 10);

    const market = await openRound(ann, 'market', 3_000);
    await bob.locator(`[data-testid="buy-${market}-right"]`).waitFor();
    const annMid = await balanceOf(ann);
    const bobMid = await balanceOf(bob);
    await ann.fill('[data-testid="points-input"]', '20');
    await ann.click(`[data-testid="buy-${market}-left"]`);
    await bob.fill('[data-testid="points-input"]', '20');
    await bob.click(`[data-testid="buy-${market}-right"]`);
    for (const p of [ann, bob])
      await p.waitForFunction(() => /holding/.test(document.querySelector('[data-testid="last-trade"]')?.textContent ?? ''));
    assert.match((await bob.locator(`[data-testid="round-${market}-right-position"]`).textContent()) ?? '', /^you hold \d+$/);
    const won = /^Winner: Left · you won (\d+)$/.exec(await resultOf(ann, market));
    assert.ok(won, 'ann won the market round');
    const lost = /^Winner: Left · you lost (\d+)$/.exec(await resultOf(bob, market));
    assert.ok(lost, 'bob lost the market round');
    await ann.waitForFunction(
      (want) => document.querySelector('[data-testid="balance"]')?.textContent === String(want),
      annMid + Number(won[1]),
    );
    assert.equal(await balanceOf(bob), bobMid - Number(lost[1]), 'the loss shown is what the balance lost');
    assert.equal(await bob.locator(`[data-testid="round-${market}-right-position"]`).textContent(), '', 'no "you hold" on a lost outcome');
    assert.match((await ann.locator(`[data-testid="round-${market}-left-position"]`).textContent()) ?? '', /^\d+ shares paid \d+$/);

    // Finished rounds newest first: the market round above the pool round.
    const order = await ann.evaluate(() =>
      Array.from(document.querySelectorAll('#rounds > .round')).map((n) => n.id.slice('round-'.length)),
    );
    assert.ok(order.indexOf(market) < order.indexOf(pool), `newest first: ${order.join(', ')}`);
    assert.deepEqual(errors, []);
    await ann.close();
    await bob.close();
  });

  it('the overlay: transparent, no controls, live tallies, the open round counting down, the winner when it settles', async () => {
    const errors: string[] = [];
    const overlay = await browser.newPage({ viewport: { width: 600, height: 420 } });
    overlay.on('pageerror', (e) => errors.push(`overlay: ${e.message}`));
    overlay.on('console', (m) => void (/Content Security Policy/i.test(m.text()) && errors.push(m.text())));
    // The streamer mints a read-only watch token with the tenant's API key and puts it in the URL's fragment.
    const key = s.config.standalone.tenantKey;
    const minted = await fetch(`${s.baseUrl}/v1/watch-tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ channel: 'demo', label: 'browser test' }),
    });
    assert.equal(minted.status, 201, await minted.clone().text());
    const watch = (await minted.json()) as { id: string; token: string };
    const requests: string[] = [];
    overlay.on('request', (r) => requests.push(r.url()));
    await overlay.goto(`${s.baseUrl}/overlay?channel=demo#token=${watch.token}`);
    await overlay.waitForFunction(() => document.querySelector('[data-testid="overlay-state"]')?.getAttribute('data-state') === 'open');
    assert.ok(!requests.some((u) => u.includes('/v1/tokens/dev')), 'the watch token was used, no dev token asked for');
    assert.deepEqual(
      await overlay.evaluate(() => [
        getComputedStyle(document.documentElement).backgroundColor,
        getComputedStyle(document.body).backgroundColor,
      ]),
      ['rgba(0, 0, 0, 0)', 'rgba(0, 0, 0, 0)'],
      'transparent for the browser source',
    );
    assert.equal(await overlay.locator('input, button, textarea, select, form').count(), 0, 'no controls');

    const carl = await joined(browser, s, 'carl', errors);
    const tally = overlay.locator('[data-testid="overlay-tally-pull-left"]');
    await tally.waitFor();
    const before = Number(await tally.textContent());
    for (let i = 0; i < 4; i++) await carl.click('[data-testid="act-pull-left"]');
    await overlay.waitForFunction(
      (want) => Number(document.querySelector('[data-testid="overlay-tally-pull-left"]')?.textContent) >= want,
      before + 4,
    );

    // The next round the demo opens: shown with its countdown, then its winner in the banner once settled.
    const round = (await (
      await overlay.waitForFunction(
        () => {
          const box = document.querySelector('[data-testid="overlay-round"]') as HTMLElement | null;
          const left = /^(\d+) s to bet$/.exec(document.querySelector('[data-testid="overlay-countdown"]')?.textContent ?? '');
          return box && !box.hidden && box.dataset.state === 'open' && left && Number(left[1]) >= 3 ? box.dataset.round : false;
        },
        undefined,
        { timeout: 60_000 },
      )
    ).jsonValue()) as string;
    assert.equal(await overlay.locator('[data-testid="overlay-round-title"]').textContent(), DEMO_QUESTION);
    const dir = process.env.UPDATE_SCREENSHOT ? join(ROOT, 'docs/img') : mkdtempSync(join(tmpdir(), 'crowdplay-shot-'));
    await overlay.screenshot({ path: join(dir, 'overlay.png'), omitBackground: true });
    await overlay.waitForFunction(
      (id) => {
        const banner = document.querySelector('[data-testid="overlay-banner"]') as HTMLElement | null;
        return banner && !banner.hidden && banner.dataset.round === id;
      },
      round,
      { timeout: 60_000 },
    );
    assert.match((await overlay.locator('[data-testid="overlay-banner"]').textContent()) ?? '', /^Winner: (Left|Right)$/);

    // Without a token the overlay still watches standalone's channel (a dev token, as before).
    const plain = await browser.newPage({ viewport: { width: 600, height: 420 } });
    plain.on('pageerror', (e) => errors.push(`plain overlay: ${e.message}`));
    await plain.goto(`${s.baseUrl}/overlay?channel=demo`);
    await plain.waitForFunction(() => document.querySelector('[data-testid="overlay-state"]')?.getAttribute('data-state') === 'open');
    await plain.close();

    // Revoked: the overlay's socket is closed and the page shows why.
    const revoked = await fetch(`${s.baseUrl}/v1/watch-tokens/${watch.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${key}` } });
    assert.equal(revoked.status, 200);
    await overlay.waitForFunction(
      () => document.querySelector('[data-testid="overlay-state"]')?.textContent === 'CP_ERR_AUTH_REVOKED',
      undefined,
      { timeout: 5_000 },
    );
    assert.deepEqual(errors, []);
    await carl.close();
    await overlay.close();
  });
});
