/** The Mini App page in a browser: a stand-in for Telegram's script and what the browser suites read of it. */
import type { Page } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const TELEGRAM_SCRIPT = 'https://telegram.org/js/telegram-web-app.js';

/**
 * A stand-in for Telegram's telegram-web-app.js: the `Telegram.WebApp` a Telegram client gives the page, recording
 * the page's calls in `window.tgCalls`, and its main button's state and calls in `window.tgMain` (the page's click
 * handler kept, so that a test presses the button), its haptic feedback in `window.tgHaptics`, and the links it asked
 * Telegram to open in `window.tgLinks`. `older`: a client of Bot API 6.0 without the main button, haptic feedback
 * and openTelegramLink.
 */
export function telegramStub(o: { initData: string; chatTitle?: string; theme: Record<string, string>; older?: boolean }): string {
  const mainButton = `
  MainButton: {
    setText(t) { tgMain.text = t; tgMain.calls.push('setText:' + t); return this; },
    show() { tgMain.visible = true; tgMain.calls.push('show'); return this; },
    hide() { tgMain.visible = false; tgMain.calls.push('hide'); return this; },
    enable() { tgMain.active = true; tgMain.calls.push('enable'); return this; },
    disable() { tgMain.active = false; tgMain.calls.push('disable'); return this; },
    showProgress() { tgMain.progress = true; tgMain.calls.push('showProgress'); return this; },
    hideProgress() { tgMain.progress = false; tgMain.calls.push('hideProgress'); return this; },
    onClick(fn) { tgMain.handler = fn; tgMain.calls.push('onClick'); return this; },
    offClick() { tgMain.handler = null; tgMain.calls.push('offClick'); return this; },
  },
  HapticFeedback: {
    notificationOccurred(type) { tgHaptics.push('notification:' + type); return this; },
    impactOccurred(style) { tgHaptics.push('impact:' + style); return this; },
    selectionChanged() { tgHaptics.push('selection'); return this; },
  },
  openTelegramLink(url) { tgLinks.push(url); },
  isVersionAtLeast(v) { const [major, minor = 0] = v.split('.').map(Number); return major < 7 || (major === 7 && minor <= 10); },`;
  return `window.tgCalls = [];
window.tgHaptics = [];
window.tgLinks = [];
window.tgMain = { text: '', visible: false, active: true, progress: false, handler: null, calls: [] };
window.Telegram = { WebApp: {
  version: ${JSON.stringify(o.older ? '6.0' : '7.10')},
  initData: ${JSON.stringify(o.initData)},
  initDataUnsafe: ${JSON.stringify(o.chatTitle ? { chat: { title: o.chatTitle } } : {})},
  themeParams: ${JSON.stringify(o.theme)},
  ready() { window.tgCalls.push('ready'); },
  expand() { window.tgCalls.push('expand'); },
  onEvent(name) { window.tgCalls.push('onEvent:' + name); },${o.older ? '' : mainButton}
} };`;
}

/** What the stub's main button was told, and the page's click handler (pressed by {@link pressMainButton}). */
export interface MainButtonState {
  text: string;
  visible: boolean;
  active: boolean;
  progress: boolean;
  calls: string[];
}
export type StubWindow = Window & {
  tgCalls: string[];
  tgHaptics: string[];
  tgLinks: string[];
  tgMain: MainButtonState & { handler: (() => void) | null };
};

export async function mainButton(page: Page): Promise<MainButtonState> {
  return page.evaluate(() => {
    const { text, visible, active, progress, calls } = (window as unknown as StubWindow).tgMain;
    return { text, visible, active, progress, calls: [...calls] };
  });
}

/** Presses Telegram's main button as the client does: the page's onClick handler, only while shown and active. */
export async function pressMainButton(page: Page): Promise<void> {
  await page.evaluate(() => {
    const b = (window as unknown as StubWindow).tgMain;
    if (!b.visible || !b.active || !b.handler) throw new Error(`main button not pressable: ${JSON.stringify(b)}`);
    b.handler();
  });
}

/** The haptic feedback the page asked of the stub, in order. */
export async function haptics(page: Page): Promise<string[]> {
  return page.evaluate(() => [...(window as unknown as StubWindow).tgHaptics]);
}

/** Waits until row `i` of the grid has its five marks, and returns them ("g", "y", "."). */
export async function rowMarks(page: Page, i: number): Promise<string> {
  await page.waitForFunction((row) => document.querySelector(`[data-testid="cell-${row}-4"]`)?.getAttribute('data-mark') != null, i);
  return page.evaluate(
    (row) => [0, 1, 2, 3, 4].map((j) => document.querySelector(`[data-testid="cell-${row}-${j}"]`)?.getAttribute('data-mark')).join(''),
    i,
  );
}
