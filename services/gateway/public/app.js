// The viewer page: joins a channel with the viewer SDK (bundled at /sdk-viewer.js),
// renders the declared actions, the cumulative tally, the game state and the last act ack.
// Element ids (and data-testid) are stable for browser tests: state, error, last-ack,
// event-id, act-<action>-<option>, tally-<action>-<option> (option `_` when the action has none),
// rope, position, game-json.
import { ViewerClient } from '/sdk-viewer.js';

const $ = (id) => document.getElementById(id);
/** @type {ViewerClient | null} */
let client = null;
let actionsKey = '';

function showError(text) {
  const el = $('error');
  el.textContent = text;
  el.hidden = !text;
}

function setState(state) {
  const el = $('state');
  el.textContent = state;
  el.dataset.state = state;
}

function describeError(err) {
  return err && err.code ? `${err.code}: ${err.message}` : String(err && err.message ? err.message : err);
}

/** Standalone only: POST /v1/tokens/dev → { token, viewer }. */
async function fetchDevToken(channel, viewer) {
  const res = await fetch('/v1/tokens/dev', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(viewer ? { channel, viewer } : { channel }),
  });
  const body = await res.json().catch(() => ({}));
  if (res.status === 404) throw new Error('This gateway mints no dev tokens (cluster mode): paste a viewer token.');
  if (!res.ok) throw new Error(`${body.code ?? res.status}: ${body.message ?? 'token request failed'}`);
  return body;
}

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function renderActions(actions) {
  const box = $('actions');
  box.replaceChildren();
  if (actions.length === 0) box.append(el('p', { class: 'hint' }, 'The game has not declared any actions yet.'));
  for (const action of actions) {
    const row = el('div', { class: 'action', 'data-testid': `action-${action.name}` });
    row.append(el('span', { class: 'action-name' }, action.name));
    const options = action.options ?? [null];
    for (const option of options) {
      const key = `${action.name}-${option ?? '_'}`;
      const wrap = el('span', { class: 'option' });
      const button = el('button', { type: 'button', id: `act-${key}`, 'data-testid': `act-${key}` }, option ?? action.name);
      button.addEventListener('click', () => act(action.name, option ?? undefined));
      wrap.append(button, el('span', { class: 'tally', id: `tally-${key}`, 'data-testid': `tally-${key}` }, '0'));
      row.append(wrap);
    }
    if (action.cost) row.append(el('span', { class: 'hint' }, `${action.cost} points`));
    box.append(row);
  }
}

function render(update) {
  $('event-id').textContent = String(update.ev);
  const actions = Array.isArray(update.actions) ? update.actions : [];
  const key = JSON.stringify(actions);
  if (key !== actionsKey) {
    actionsKey = key;
    renderActions(actions);
  }
  for (const action of actions) {
    for (const option of action.options ?? ['_']) {
      const cell = $(`tally-${action.name}-${option}`);
      if (cell) cell.textContent = String(update.tally?.[action.name]?.[option] ?? 0);
    }
  }
  const game = update.game;
  $('no-game').hidden = true;
  if (game && typeof game.position === 'number') {
    const position = Math.max(-100, Math.min(100, game.position));
    $('rope').hidden = false;
    $('game-json').hidden = true;
    $('marker').style.left = `${(position + 100) / 2}%`;
    $('position').textContent = String(game.position);
  } else {
    $('rope').hidden = true;
    $('game-json').hidden = false;
    $('game-json').textContent = JSON.stringify(game ?? {}, null, 2);
  }
}

function showAck(ack) {
  const counter = $(ack.ok ? 'acks-ok' : 'acks-refused');
  counter.textContent = String(Number(counter.textContent) + 1);
  const el = $('last-ack');
  el.textContent = ack.ok ? `ok #${ack.seq}${ack.cost ? ` (cost ${ack.cost})` : ''}` : `refused #${ack.seq}: ${ack.code}`;
  el.dataset.ok = String(ack.ok);
  el.dataset.code = ack.code ?? '';
}

/** The viewer's points (GET /v1/me/balance); '—' when the gateway has no ledger or the token is refused. */
async function showBalance(channel, token) {
  const el = $('balance');
  try {
    const res = await fetch(`/v1/me/balance?channel=${encodeURIComponent(channel)}`, { headers: { authorization: `Bearer ${token}` } });
    el.textContent = res.ok ? String((await res.json()).balance) : '—';
  } catch {
    el.textContent = '—';
  }
}

function act(action, option) {
  if (!client) return;
  client.act(action, option).catch((err) => showError(describeError(err)));
}

async function leave() {
  const c = client;
  client = null;
  $('leave').disabled = true;
  if (c) await c.close();
}

async function join(event) {
  event.preventDefault();
  await leave();
  showError('');
  actionsKey = '';
  $('acks-ok').textContent = '0';
  $('acks-refused').textContent = '0';
  const channel = $('channel').value.trim();
  const pasted = $('token').value.trim();
  let viewer = $('viewer').value.trim() || undefined;
  let auth;
  let balanceToken = pasted;
  if (pasted) auth = { token: pasted };
  else {
    let first;
    try {
      setState('connecting');
      first = await fetchDevToken(channel, viewer);
    } catch (err) {
      setState('closed');
      showError(describeError(err));
      return;
    }
    viewer = first.viewer;
    balanceToken = first.token;
    let token = first.token;
    // The first connect uses the token just fetched; reconnects fetch a fresh one for the same viewer.
    auth = {
      getToken: async () => {
        if (token) {
          const t = token;
          token = undefined;
          return t;
        }
        return (await fetchDevToken(channel, viewer)).token;
      },
    };
  }
  let c;
  try {
    c = new ViewerClient({ url: location.origin, channel, ...auth });
  } catch (err) {
    showError(describeError(err));
    return;
  }
  client = c;
  $('leave').disabled = false;
  c.on('state', (state) => {
    if (client === c) setState(state);
  });
  c.on('welcome', (w) => {
    $('viewer-id').textContent = w.viewer ?? '—';
    showError('');
    void showBalance(channel, balanceToken);
  });
  c.on('update', (u) => render(u));
  c.on('ack', (a) => showAck(a));
  c.on('error', (err) => showError(describeError(err)));
  try {
    await c.connect();
  } catch (err) {
    showError(describeError(err));
  }
}

$('join-form').addEventListener('submit', (e) => void join(e));
$('leave').addEventListener('click', () => void leave().then(() => setState('closed')));
