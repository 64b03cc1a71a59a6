// The streamer overlay, for OBS's browser source: a transparent page with the channel's live tallies (and the
// demo's rope), the open round with its countdown, and a banner with the winner when a round settles. It has no
// controls: it watches and never acts. GET /overlay?channel=C[&theme=dark|light]#token=<watch token>: the token goes
// in the URL fragment, which the browser never sends (no server or proxy logs it). A read-only watch token
// (POST /v1/watch-tokens, docs/guides/embed.md) or a viewer JWT; a JWT in the query (&token=JWT) still works. The
// gateway refuses an unknown or malformed query parameter with a 400. Without a token it asks standalone's
// dev-token route. A token refused for good (revoked, expired) leaves its code on the page. Stable ids for browser tests: overlay-state (data-state), overlay-board, overlay-rope,
// overlay-position, overlay-tally-<action>-<option>, overlay-round (data-round, data-state), overlay-round-title,
// overlay-countdown, overlay-outcome-<outcome>, overlay-banner.
import { ViewerClient } from '/sdk-viewer.js';

const $ = (id) => document.getElementById(id);
/** How long the winner's banner stays up after the overlay sees a round settle, ms. */
const BANNER_MS = 15_000;
const params = new URLSearchParams(location.search);
const channel = params.get('channel') ?? '';
const token = params.get('token') || new URLSearchParams(location.hash.slice(1)).get('token');
if (params.get('theme') === 'light') document.body.classList.add('light');

let clockOffsetMs = 0;
/** The round shown (open or locked), if any. */
let shown = null;
/** Rounds seen finished: id → when this page first saw them so (a banner only for what settles while it watches). */
const finished = new Map();
let firstUpdate = true;
let bannerUntil = 0;

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function setState(state, text = state) {
  const node = $('state');
  node.dataset.state = state;
  node.textContent = state === 'open' ? '' : text;
}

/** One labelled bar: `value` of `total`, shown as a number (`shown`, else the value). */
function bar(testid, label, value, total, shownText) {
  const row = el('div', { class: 'row' });
  const fill = el('div', { class: 'fill' });
  fill.style.width = `${total > 0 ? Math.round((value / total) * 100) : 0}%`;
  const track = el('div', { class: 'bar' });
  track.append(fill);
  row.append(el('span', { class: 'label' }, label), track, el('span', { class: 'num', 'data-testid': testid }, shownText ?? String(value)));
  return row;
}

function renderBoard(update) {
  const box = $('tallies');
  box.replaceChildren();
  const actions = Array.isArray(update.actions) ? update.actions : [];
  for (const action of actions) {
    const options = action.options ?? ['_'];
    const counts = options.map((o) => update.tally?.[action.name]?.[o] ?? 0);
    const total = counts.reduce((a, b) => a + b, 0);
    options.forEach((o, i) => {
      const name = action.label ?? action.name;
      const label = o === '_' ? name : `${name} ${action.optionLabels?.[o] ?? o}`;
      box.append(bar(`overlay-tally-${action.name}-${o}`, label, counts[i], total));
    });
  }
  const game = update.game;
  const rope = game && typeof game.position === 'number';
  $('rope').hidden = !rope;
  if (rope) $('marker').style.left = `${(Math.max(-100, Math.min(100, game.position)) + 100) / 2}%`;
  $('board').hidden = actions.length === 0 && !rope;
}

function renderRound(list) {
  const rounds = Array.isArray(list) ? list.filter((r) => r && typeof r.id === 'string' && Array.isArray(r.outcomes)) : [];
  const now = Date.now();
  for (const r of rounds) {
    if ((r.state === 'settled' || r.state === 'cancelled') && !finished.has(r.id)) {
      finished.set(r.id, now);
      // A round finished before the overlay opened is not news.
      if (!firstUpdate) showBanner(r);
    }
  }
  firstUpdate = false;
  const live = rounds.filter((r) => r.state === 'open' || r.state === 'locked').sort((a, b) => a.deadline - b.deadline);
  shown = live[0] ?? null;
  const box = $('round');
  box.hidden = shown === null;
  if (!shown) return;
  box.dataset.round = shown.id;
  box.dataset.state = shown.state;
  // The game's question when it gave one (as text, never HTML), else the kind and the id.
  $('round-title').textContent = shown.title ?? `${shown.kind === 'market' ? 'Market' : 'Pool'} ${shown.id}`;
  const outcomes = $('outcomes');
  outcomes.replaceChildren();
  const pool = Array.isArray(shown.pool) ? shown.pool : [];
  const total = pool.reduce((a, b) => a + b, 0);
  shown.outcomes.forEach((o, i) => {
    if (shown.kind === 'market') {
      const p = Array.isArray(shown.prices) && typeof shown.prices[i] === 'number' ? shown.prices[i] : 0;
      outcomes.append(bar(`overlay-outcome-${o}`, shown.labels?.[o] ?? o, p, 1, `${Math.round(p * 100)}%`));
    } else outcomes.append(bar(`overlay-outcome-${o}`, shown.labels?.[o] ?? o, pool[i] ?? 0, total));
  });
  tick();
}

function showBanner(r) {
  const banner = $('banner');
  const winner = r.winner === undefined ? '?' : (r.labels?.[r.winner] ?? r.winner);
  banner.textContent = r.state === 'settled' ? `Winner: ${winner}` : 'Round cancelled: stakes refunded';
  banner.dataset.round = r.id;
  banner.hidden = false;
  bannerUntil = Date.now() + BANNER_MS;
}

function tick() {
  if (bannerUntil && Date.now() > bannerUntil) {
    $('banner').hidden = true;
    bannerUntil = 0;
  }
  if (!shown) return;
  const left = shown.deadline - (Date.now() + clockOffsetMs);
  const s = Math.max(0, Math.ceil(left / 1_000));
  $('countdown').textContent =
    shown.state === 'open' ? `${s >= 60 ? `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}` : `${s} s`} to bet` : 'betting closed';
}

async function devToken() {
  const res = await fetch('/v1/tokens/dev', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ channel }),
  });
  if (!res.ok) throw new Error('no token: add #token=<watch token> to the overlay URL (docs/guides/embed.md)');
  return (await res.json()).token;
}

async function start() {
  const c = new ViewerClient({ url: location.origin, channel, ...(token ? { token } : { getToken: devToken }) });
  /** The last error the server sent: shown instead of a bare "closed" when the client gives up (a revoked token). */
  let lastError = null;
  c.on('state', (state) => {
    if (state === 'open') lastError = null;
    if (state === 'closed' && lastError) setState('error', lastError);
    else setState(state);
  });
  c.on('welcome', (w) => {
    if (typeof w.serverTime === 'number') clockOffsetMs = w.serverTime - Date.now();
  });
  c.on('update', (u) => {
    renderBoard(u);
    renderRound(u.rounds);
  });
  c.on('error', (err) => {
    lastError = err && err.code ? err.code : String(err && err.message ? err.message : err);
    setState('error', lastError);
  });
  try {
    await c.connect();
  } catch (err) {
    // The code when there is one (a token refused for good: CP_ERR_AUTH_REVOKED, CP_ERR_AUTH_EXPIRED), as after a drop.
    setState('error', err && err.code ? err.code : err && err.message ? err.message : String(err));
  }
}

setInterval(tick, 250);
void start();
