// The word puzzle's Mini App. Telegram opens it with the launch parameters in
// the URL fragment (tgWebAppData = the signed initData); the page sends that
// initData to the gateway, which verifies it and picks the chat from its
// signed start parameter (docs/telegram.md). Stable ids for browser tests:
// tg-state, puzzle-number, grid, row-<i>, cell-<i>-<j> (data-mark g/y/.),
// guess-input, guess-submit, last-error, group-title, share, board-players, player-<viewer>; the round panel's
// are listed in rounds.js.
// Telegram's MainButton submits the guess too, and HapticFeedback marks each
// answer; an older client without them (or no Telegram at all) keeps the
// page's own form: every Telegram feature is looked up before it is used.
// The share button opens Telegram's share dialog (openTelegramLink) with the
// bot's direct link for this chat: the app link the gateway put in the page's
// <meta name="crowdplay-app-link"> plus this launch's start parameter.
import { roundsPanel } from './rounds.js';

const $ = (id) => document.getElementById(id);
// Telegram's API (telegram-web-app.js, loaded by the page); absent outside Telegram or when the script failed.
const tg = (window.Telegram && window.Telegram.WebApp) || null;
const ROWS = 6;
const COLS = 5;
const WORD_RE = /^[a-z]{5}$/;
let ws = null;
let seq = 0;
const pending = new Map(); // guesses in flight, by seq
const trades = new Map(); // stakes and trades in flight, by seq: { resolve, reject }
let myViewer = null;
let puzzle = null;
let rows = []; // [{ word, marks }]
let finished = false; // my puzzle is over: solved, or out of guesses

/** Calls `obj[method](...args)` when the client has it; a method the client refuses (too old a version) is skipped. */
function tgCall(obj, method, ...args) {
  if (!obj || typeof obj[method] !== 'function') return;
  try {
    obj[method](...args);
  } catch (err) {
    console.warn(`Telegram.WebApp: ${method}: ${err}`);
  }
}

/**
 * Telegram's haptic feedback (Bot API 6.1) when the client has it: `notification` with 'success' | 'error' |
 * 'warning', or `impact` with 'light' | 'medium' | …
 */
function haptic(kind, style) {
  const h = tg && tg.HapticFeedback;
  if (!h || (typeof tg.isVersionAtLeast === 'function' && !tg.isVersionAtLeast('6.1'))) return;
  tgCall(h, kind === 'impact' ? 'impactOccurred' : 'notificationOccurred', style);
}

// Telegram's main button (below the page, in Telegram's colours), or null on a client without it.
const mainButton = tg && tg.MainButton && typeof tg.MainButton.show === 'function' ? tg.MainButton : null;
let shown = { visible: false, active: null, progress: false }; // what the main button was last told

function launchInitData() {
  if (tg && tg.initData) return tg.initData;
  const hash = new URLSearchParams(location.hash.slice(1));
  return hash.get('tgWebAppData');
}

/** Telegram's colours as the CSS variables the page's style reads (--tg-theme-bg-color, …). */
function applyTheme() {
  const params = (tg && tg.themeParams) || {};
  for (const [key, value] of Object.entries(params)) {
    if (typeof value === 'string' && /^#[0-9a-fA-F]{3,8}$/.test(value)) {
      document.documentElement.style.setProperty(`--tg-theme-${key.replace(/_/g, '-')}`, value);
    }
  }
}

/** The chat's title when Telegram gives it (initData's `chat`, sent for some launches), else null. */
function chatTitle(initData) {
  const fromTelegram = tg && tg.initDataUnsafe && tg.initDataUnsafe.chat && tg.initDataUnsafe.chat.title;
  if (typeof fromTelegram === 'string' && fromTelegram !== '') return fromTelegram;
  try {
    const chat = JSON.parse(new URLSearchParams(initData || '').get('chat') || 'null');
    return chat && typeof chat.title === 'string' && chat.title !== '' ? chat.title : null;
  } catch {
    return null;
  }
}

/**
 * The t.me share link inviting others to this chat's game: the bot's direct link (from the gateway) with the start
 * parameter this page was opened with, which the gateway verified as the bot's own for this chat before its
 * welcome. Null when either is missing (no bot, or opened without a start parameter).
 */
function shareUrl() {
  const meta = document.querySelector('meta[name="crowdplay-app-link"]');
  const app = meta ? meta.getAttribute('content') : '';
  const param = new URLSearchParams(launchInitData() || '').get('start_param');
  if (!app || !/^https:\/\/t\.me\/[A-Za-z0-9_]+\/[A-Za-z0-9_]+$/.test(app)) return null;
  if (!param || !/^[A-Za-z0-9_-]{1,64}$/.test(param)) return null;
  const link = `${app}?startapp=${param}`;
  const text = puzzle === null ? 'Play the word puzzle with us' : `Play word puzzle #${puzzle} with us`;
  return `https://t.me/share/url?url=${encodeURIComponent(link)}&text=${encodeURIComponent(text)}`;
}

/** Shows the share button once the chat is known to be the bot's (welcomed), on a client that opens t.me links. */
function showShare() {
  $('share').hidden = !(tg && typeof tg.openTelegramLink === 'function' && shareUrl());
}

function setState(s) {
  $('tg-state').textContent = s;
  $('tg-state').dataset.state = s;
}

function showError(text) {
  $('last-error').textContent = text || '';
}

function typedWord() {
  return $('guess-input').value.trim().toLowerCase();
}

/**
 * The main button: shown while the socket is open and my puzzle is not over, active for a five-letter word,
 * its progress shown while a guess is in flight. Only what changed is sent to Telegram.
 */
function updateMainButton() {
  if (!mainButton) return;
  const visible = ws !== null && ws.readyState === 1 && myViewer !== null && !finished;
  const progress = visible && pending.size > 0;
  const active = visible && !progress && WORD_RE.test(typedWord());
  if (visible !== shown.visible) tgCall(mainButton, visible ? 'show' : 'hide');
  if (progress !== shown.progress) tgCall(mainButton, progress ? 'showProgress' : 'hideProgress', false);
  if (active !== shown.active) tgCall(mainButton, active ? 'enable' : 'disable');
  shown = { visible, active, progress };
}

/** My game in a board update: over when solved or out of guesses. */
function isOver(mine) {
  return Boolean(mine && (mine.solved || (Array.isArray(mine.marks) && mine.marks.length >= ROWS)));
}

function renderGrid() {
  const grid = $('grid');
  grid.replaceChildren();
  for (let i = 0; i < ROWS; i++) {
    const row = document.createElement('div');
    row.className = 'row';
    row.id = `row-${i}`;
    row.dataset.testid = `row-${i}`;
    const r = rows[i];
    for (let j = 0; j < COLS; j++) {
      const cell = document.createElement('div');
      cell.className = 'cell';
      cell.id = `cell-${i}-${j}`;
      cell.setAttribute('data-testid', `cell-${i}-${j}`);
      if (r) {
        cell.textContent = r.word[j] || '';
        if (r.marks) cell.dataset.mark = r.marks[j];
      }
      row.append(cell);
    }
    grid.append(row);
  }
}

function renderBoard(game) {
  const box = $('board-players');
  box.replaceChildren();
  const players = (game && game.players) || {};
  for (const [viewer, p] of Object.entries(players)) {
    const card = document.createElement('div');
    card.className = 'player';
    card.setAttribute('data-testid', `player-${viewer}`);
    // The name the gateway took from the player's initData (first and last name), else the id.
    card.textContent = viewer === myViewer ? 'you' : typeof p.name === 'string' && p.name !== '' ? p.name : viewer;
    const mini = document.createElement('div');
    mini.className = 'mini';
    for (const m of p.marks || []) {
      for (const ch of m) {
        const sq = document.createElement('span');
        sq.dataset.mark = ch;
        mini.append(sq);
      }
    }
    card.append(mini);
    box.append(card);
  }
}

/** Sends a stake or trade frame; resolves with its ack, rejects when the socket is not open or closes first. */
function sendTrade(frame) {
  if (!ws || ws.readyState !== 1) return Promise.reject(new Error('not connected'));
  const s = ++seq;
  return new Promise((resolve, reject) => {
    trades.set(s, { resolve, reject });
    ws.send(JSON.stringify({ ...frame, seq: s }));
  });
}

const panel = roundsPanel($('round-panel'), sendTrade);

function onFrame(f) {
  if (f.t === 'welcome') {
    myViewer = f.viewer;
    if (typeof f.serverTime === 'number') panel.setServerTime(f.serverTime);
    setState('open');
    updateMainButton();
    showShare();
  } else if (f.t === 'update') {
    const game = f.game || {};
    if (typeof game.puzzle === 'number' && game.puzzle !== puzzle) {
      puzzle = game.puzzle;
      $('puzzle-number').textContent = `#${puzzle}`;
      // A new puzzle: my rows are the ones the board holds for me (colours only after a reload).
      const mine = (game.players || {})[myViewer];
      rows = mine ? mine.marks.map((marks) => ({ word: '', marks })) : [];
      finished = false;
      renderGrid();
    }
    if (isOver((game.players || {})[myViewer])) finished = true;
    renderBoard(game);
    panel.render(f.rounds);
    updateMainButton();
  } else if (f.t === 'balance') {
    if (typeof f.points === 'number') panel.setBalance(f.points);
  } else if (f.t === 'roundResult') {
    panel.result(f);
    if (f.net !== 0) haptic('notification', f.net > 0 ? 'success' : 'warning');
  } else if (f.t === 'ack' && trades.has(f.seq)) {
    const t = trades.get(f.seq);
    trades.delete(f.seq);
    t.resolve(f);
  } else if (f.t === 'ack') {
    const p = pending.get(f.seq);
    pending.delete(f.seq);
    if (!p) return;
    if (f.ok) {
      rows.push({ word: p.word, marks: f.marks });
      if (f.solved || f.left === 0 || rows.length >= ROWS) finished = true;
      // Solved: success; the last guess wrong: warning; another wrong guess: a light tap.
      if (f.solved) haptic('notification', 'success');
      else if (finished) haptic('notification', 'warning');
      else haptic('impact', 'light');
      renderGrid();
      showError(f.solved ? 'Solved!' : '');
    } else {
      if (f.code === 'CP_ERR_PUZZLE_OVER') finished = true;
      haptic('notification', 'error');
      showError(f.code || 'refused');
    }
    updateMainButton();
  } else if (f.t === 'error') showError(`${f.code}: ${f.message}`);
}

function connect() {
  const initData = launchInitData();
  if (!initData) {
    setState('no-init-data');
    showError('Open this page from the Telegram bot (no initData).');
    return;
  }
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/ws?role=crowd&initData=${encodeURIComponent(initData)}`;
  setState('connecting');
  ws = new WebSocket(url);
  ws.onmessage = (ev) => {
    try {
      onFrame(JSON.parse(ev.data));
    } catch (err) {
      showError(String(err));
    }
  };
  ws.onclose = (ev) => {
    pending.clear(); // never answered now
    for (const t of trades.values()) t.reject(new Error('connection closed'));
    trades.clear();
    setState(`closed ${ev.code}`);
    if (ev.reason) showError(ev.reason);
    updateMainButton();
  };
}

/** Sends the typed word as a guess (the page's form and Telegram's main button). */
function guess() {
  const word = typedWord();
  if (!WORD_RE.test(word) || !ws || ws.readyState !== 1) {
    haptic('notification', 'error');
    return showError(WORD_RE.test(word) ? 'not connected' : 'five letters a–z');
  }
  const s = ++seq;
  pending.set(s, { word });
  ws.send(JSON.stringify({ t: 'guess', seq: s, word }));
  $('guess-input').value = '';
  updateMainButton();
}

$('guess-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  guess();
});
$('guess-input').addEventListener('input', updateMainButton);
$('share').addEventListener('click', () => {
  const url = shareUrl();
  if (url) tgCall(tg, 'openTelegramLink', url);
});

if (tg) {
  applyTheme();
  if (typeof tg.onEvent === 'function') tg.onEvent('themeChanged', applyTheme);
  tg.ready(); // the page is drawn: Telegram hides its placeholder
  tg.expand(); // full height: the grid and the group fit without a drag
  if (mainButton) {
    tgCall(mainButton, 'setText', 'Guess');
    tgCall(mainButton, 'onClick', guess);
    updateMainButton(); // hidden until the socket is open
  }
}
const title = chatTitle(launchInitData());
if (title) $('group-title').textContent = title;
renderGrid();
connect();
