/**
 * The viewer page in a real browser: Debian's chromium driven by
 * playwright-core. A missing browser fails this test (`.ci/run` installs it).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { ROOT, startStandalone, type InProcess } from '../helpers.ts';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

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
    await page.waitForFunction(
      ({ id, want }) => Number(document.querySelector(`[data-testid="round-${id}-left-pool"]`)?.textContent) >= want,
      { id: roundId, want: poolBefore + 25 },
    );
    assert.match((await page.locator(`[data-testid="round-${roundId}-countdown"]`).textContent()) ?? '', /\d/);
    assert.deepEqual(errors, [], 'no page errors');
    await page.close();
  });

  it('a forged token is refused with its documented close code and shown', async () => {
    const page = await browser.newPage();
    await page.goto(s.baseUrl);
    await page.fill('#channel', 'demo');
    await page.click('text=Viewer token');
    await page.fill('#token', 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.forged');
    await page.click('[data-testid="join"]');
    await page.locator('[data-testid="error"]').waitFor({ state: 'visible' });
    assert.match((await page.locator('[data-testid="error"]').textContent()) ?? '', /CP_ERR_AUTH_INVALID|4001/);
    await page.close();
  });
});
