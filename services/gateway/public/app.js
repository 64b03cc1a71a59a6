// The viewer page: joins a channel with the viewer SDK (bundled at /sdk-viewer.js),
// renders the declared actions, the cumulative tally, the game state, the viewer's points
// and the channel's rounds (stake / buy / cash out): open rounds first with a countdown that
// says what it counts down to, then finished ones newest first, each with your result
// ("you won N" / "you lost N"). Opened with ?debug it also shows the token box and the raw
// counters; ?channel=C picks the channel; #token=JWT in the fragment joins with that token at once.
// Element ids (and data-testid) are stable for browser tests: state, error, debug, last-ack,
// acks-ok / acks-refused (acts, stakes and trades the server answered), event-id,
// act-<action>-<option>, tally-<action>-<option> (option `_` when the action has none),
// rope, position, game-json, balance, points-input, last-trade, rounds, no-rounds,
// round-<id> (data-kind), round-<id>-state, round-<id>-countdown, round-<id>-explain, round-<id>-result (data-net
// won / lost / even / pending), round-<id>-<outcome>-pool (pool rounds: points staked),
// round-<id>-<outcome>-mine (pool: your stake), round-<id>-<outcome>-price (market: %),
// round-<id>-<outcome>-position (market: your shares), stake-<id>-<outcome>, buy-<id>-<outcome>,
// sell-<id>-<outcome>.
import { ViewerClient } from '/sdk-viewer.js';

const $ = (id) => document.getElementById(id);
/** @type {ViewerClient | null} */
let client = null;
let actionsKey = '';
/** Server clock minus local clock, ms (from the welcome's serverTime). */
let clockOffsetMs = 0;
/** Bumped on every balance report from the socket: a slower GET /v1/me/balance must not overwrite it. */
let balanceVersion = 0;
/** Your shares per market round and outcome (`<round>|<outcome>`), from the acks' `position`. */
const positions = new Map();
/** The rounds of the latest update, by id. */
let rounds = new Map();
/** Per rendered round: the key of its DOM structure (rebuilt when it changes). */
const roundKeys = new Map();
/**
 * What you put in and got back per round, from the acks and balance frames:
 * { staked: Map<outcome, points>, spent, proceeds, paid, sawPayout }.
 */
const mine = new Map();
/** Your result per finished round as the server reported it (roundResult: staked, paid, net), by round id. */
const results = new Map();

function mineOf(round) {
  let m = mine.get(round);
  if (!m) {
    m = { staked: new Map(), spent: 0, proceeds: 0, paid: 0, sawPayout: false };
    mine.set(round, m);
  }
  return m;
}

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
    row.append(el('span', { class: 'action-name' }, action.label ?? action.name));
    const options = action.options ?? [null];
    for (const option of options) {
      const key = `${action.name}-${option ?? '_'}`;
      const wrap = el('span', { class: 'option' });
      const text = option === null ? (action.label ?? action.name) : (action.optionLabels?.[option] ?? option);
      const button = el('button', { type: 'button', id: `act-${key}`, 'data-testid': `act-${key}` }, text);
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
  renderRounds(update.rounds);
}

function setBalance(points) {
  balanceVersion++;
  $('balance').textContent = String(points);
}

/** Counts an answer of the server (act, stake or trade) in the debug counters. */
function countAck(ok) {
  const counter = $(ok ? 'acks-ok' : 'acks-refused');
  counter.textContent = String(Number(counter.textContent) + 1);
}

function showAck(ack) {
  countAck(ack.ok);
  const el = $('last-ack');
  el.textContent = ack.ok ? `ok #${ack.seq}${ack.cost ? ` (cost ${ack.cost})` : ''}` : `refused #${ack.seq}: ${ack.code}`;
  el.dataset.ok = String(ack.ok);
  el.dataset.code = ack.code ?? '';
}

/**
 * The viewer's points (GET /v1/me/balance) as the initial value; '—' when the gateway has no
 * ledger or the token is refused. Balance frames and ack balances that arrive meanwhile win.
 */
async function showBalance(channel, token) {
  const el = $('balance');
  const version = balanceVersion;
  let text = '—';
  try {
    const res = await fetch(`/v1/me/balance?channel=${encodeURIComponent(channel)}`, { headers: { authorization: `Bearer ${token}` } });
    if (res.ok) text = String((await res.json()).balance);
  } catch {
    // keep '—'
  }
  if (version === balanceVersion) el.textContent = text;
}

function act(action, option) {
  if (!client) return;
  client
    .act(action, option)
    .then(showAck)
    .catch((err) => showError(describeError(err)));
}

// ---------------------------------------------------------------- rounds

function showTrade(text, ok, code = '') {
  const node = $('last-trade');
  node.textContent = text;
  node.dataset.ok = String(ok);
  node.dataset.code = code;
}

/** The points input as a whole number ≥ 1, or null (and a message) when it is not one. */
function pointsInput() {
  const raw = $('points-input').value.trim();
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < 1) {
    showTrade(`enter a whole number of points (got "${raw}")`, false, 'CP_ERR_PROTO_INVALID');
    return null;
  }
  return n;
}

/** Sends one stake or trade and shows its ack (or the local refusal) in last-trade; notes the new position. */
function trade(what, round, outcome, send) {
  if (!client) return;
  let pending;
  try {
    pending = send(client);
  } catch (err) {
    pending = Promise.reject(err);
  }
  pending.then(
    (ack) => {
      countAck(ack.ok);
      if (!ack.ok) {
        showTrade(`refused #${ack.seq} ${what}: ${ack.code}`, false, ack.code ?? '');
        return;
      }
      noteTrade(what.split(' ')[0], ack, round, outcome);
      notePosition(ack, round, outcome);
      let text = `ok #${ack.seq} ${what}`;
      if (ack.shares !== undefined) text += `: ${ack.shares} shares`;
      if (ack.cost) text += `, paid ${ack.cost}`;
      if (ack.proceeds !== undefined) text += `, received ${ack.proceeds}`;
      if (ack.position !== undefined) text += `, holding ${ack.position}`;
      showTrade(text, true);
    },
    (err) => showTrade(`${what}: ${describeError(err)}`, false, err && err.code ? err.code : ''),
  );
}

/** What a viewer reads for an outcome of round `r` (the id `r` is given when the round is not known). */
function outcomeLabel(r, outcome) {
  const round = typeof r === 'string' ? rounds.get(r) : r;
  return round?.labels?.[outcome] ?? outcome;
}

function stake(round, outcome) {
  const points = pointsInput();
  if (points !== null) trade(`stake ${points} on ${outcomeLabel(round, outcome)}`, round, outcome, (c) => c.stake(round, outcome, points));
}

function buy(round, outcome) {
  const budget = pointsInput();
  if (budget !== null) trade(`buy ${outcomeLabel(round, outcome)} for ${budget}`, round, outcome, (c) => c.buy(round, outcome, { budget }));
}

function cashOut(round, outcome) {
  const shares = positions.get(`${round}|${outcome}`) ?? 0;
  if (shares <= 0) {
    showTrade(`no shares of ${outcomeLabel(round, outcome)} to cash out`, false, 'CP_ERR_MARKET_INSUFFICIENT_SHARES');
    return;
  }
  trade(`cash out ${shares} ${outcomeLabel(round, outcome)}`, round, outcome, (c) => c.sell(round, outcome, shares, 0));
}

/** "Buy for N points", N = the points input. */
function buyLabel() {
  const raw = $('points-input').value.trim();
  return `Buy for ${/^\d+$/.test(raw) ? raw : 'N'} points`;
}

function formatCountdown(ms) {
  const s = Math.max(0, Math.ceil(ms / 1_000));
  return `closes in ${s >= 60 ? `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}` : `${s} s`}`;
}

/** What a round's countdown means, by kind and state. */
function explain(r) {
  if (r.state === 'open') {
    return r.kind === 'market'
      ? 'Buy shares of the outcome you expect (the price is its chance); cash out any time before betting closes. Each share of the winner pays 1 point.'
      : 'Stake points on the outcome you expect. When betting closes the game picks the winner, and the stakes on it share the whole pool.';
  }
  if (r.state === 'locked') return 'Betting is closed: waiting for the game to pick the winner.';
  return '';
}

/** Rewrites the countdown of every shown round from the server-corrected clock. */
function tickCountdowns() {
  const now = Date.now() + clockOffsetMs;
  for (const r of rounds.values()) {
    const node = $(`round-${r.id}-countdown`);
    if (!node) continue;
    const left = r.deadline - now;
    node.dataset.remainingMs = String(Math.max(0, Math.round(left)));
    node.textContent = r.state === 'open' ? formatCountdown(left) : '';
  }
}

function buildRound(r) {
  const card = el('div', { class: 'round', id: `round-${r.id}`, 'data-testid': `round-${r.id}`, 'data-kind': r.kind });
  const head = el('div', { class: 'round-head' });
  head.append(
    // The game's question when it gave one (as text, never HTML), else the kind; the kind as a tag beside a title.
    el('span', { class: 'round-title', 'data-testid': `round-${r.id}-title` }, r.title ?? (r.kind === 'market' ? 'Market' : 'Pool')),
    el('span', { class: 'hint round-id' }, r.title ? (r.kind === 'market' ? 'market' : 'pool') : r.id),
    el('span', { class: 'round-state', id: `round-${r.id}-state`, 'data-testid': `round-${r.id}-state` }),
    el('span', { class: 'countdown', id: `round-${r.id}-countdown`, 'data-testid': `round-${r.id}-countdown` }),
    el('span', { class: 'round-result', id: `round-${r.id}-result`, 'data-testid': `round-${r.id}-result` }),
    el('span', { class: 'round-explain', id: `round-${r.id}-explain`, 'data-testid': `round-${r.id}-explain` }, explain(r)),
  );
  card.append(head);
  const open = r.state === 'open';
  for (const outcome of r.outcomes) {
    const key = `${r.id}-${outcome}`;
    const row = el('div', { class: 'outcome' });
    row.append(el('span', { class: 'outcome-name', 'data-testid': `round-${key}-label` }, outcomeLabel(r, outcome)));
    if (r.kind === 'market') {
      row.append(el('span', { class: 'tally', id: `round-${key}-price`, 'data-testid': `round-${key}-price` }));
      const b = el('button', { type: 'button', id: `buy-${key}`, 'data-testid': `buy-${key}`, class: 'buy' }, buyLabel());
      b.addEventListener('click', () => buy(r.id, outcome));
      const sell = el('button', { type: 'button', id: `sell-${key}`, 'data-testid': `sell-${key}` }, 'Cash out');
      sell.addEventListener('click', () => cashOut(r.id, outcome));
      b.disabled = !open;
      row.append(b, sell, el('span', { class: 'hint', id: `round-${key}-position`, 'data-testid': `round-${key}-position` }));
    } else {
      row.append(el('span', { class: 'tally', id: `round-${key}-pool`, 'data-testid': `round-${key}-pool` }));
      const b = el('button', { type: 'button', id: `stake-${key}`, 'data-testid': `stake-${key}` }, 'Stake');
      b.addEventListener('click', () => stake(r.id, outcome));
      b.disabled = !open;
      row.append(b, el('span', { class: 'mine', id: `round-${key}-mine`, 'data-testid': `round-${key}-mine` }));
    }
    card.append(row);
  }
  return card;
}

/** Updates the texts of a round card (pool totals, prices, positions, state, result). */
function fillRound(r) {
  const state = $(`round-${r.id}-state`);
  state.textContent = r.state;
  state.dataset.state = r.state;
  const total = Array.isArray(r.pool) ? r.pool.reduce((a, b) => a + b, 0) : 0;
  r.outcomes.forEach((outcome, i) => {
    const key = `${r.id}-${outcome}`;
    if (r.kind === 'market') {
      const p = Array.isArray(r.prices) ? r.prices[i] : undefined;
      $(`round-${key}-price`).textContent = typeof p === 'number' ? `${(p * 100).toFixed(1)}%` : '—';
      const held = positions.get(`${r.id}|${outcome}`) ?? 0;
      // Settled: a losing outcome's shares are worth nothing (no "you hold"); the winner's paid 1 point each.
      let text = held > 0 ? `you hold ${held}` : '';
      if (r.state === 'settled') text = held > 0 && outcome === r.winner ? `${held} shares paid ${held}` : '';
      else if (r.state === 'cancelled') text = '';
      $(`round-${key}-position`).textContent = text;
      $(`sell-${key}`).disabled = r.state !== 'open' || held <= 0;
    } else {
      const staked = Array.isArray(r.pool) ? (r.pool[i] ?? 0) : 0;
      const cell = $(`round-${key}-pool`);
      cell.textContent = String(staked);
      cell.title = total > 0 ? `${((staked / total) * 100).toFixed(1)}% of ${total}` : '';
      const own = mine.get(r.id)?.staked.get(outcome) ?? 0;
      $(`round-${key}-mine`).textContent = own > 0 ? `you staked ${own}` : '';
    }
  });
  const result = $(`round-${r.id}-result`);
  const { text, net } = resultOf(r);
  result.textContent = text;
  result.dataset.net = net;
  $(`round-${r.id}-explain`).textContent = explain(r);
}

/**
 * Your result in a finished round: { text, net } with net `won`, `lost`, `even`, `pending` (a payout on its way)
 * or '' (not finished, or you had no part in it). Pool payouts are known from their balance frame; a market pays
 * 1 point per winning share, known from your position.
 */
function resultOf(r) {
  if (r.state === 'cancelled') return { text: 'Cancelled: every stake and trade refunded', net: '' };
  if (r.state !== 'settled') return { text: '', net: '' };
  const head = `Winner: ${r.winner === undefined ? '?' : outcomeLabel(r, r.winner)}`;
  const told = results.get(r.id);
  if (told) return netText(head, told.net); // the server's own figure (roundResult), which survives a reload
  const m = mine.get(r.id);
  if (!m || (m.spent === 0 && m.proceeds === 0)) return { text: head, net: '' };
  let payout;
  if (r.kind === 'market') payout = positions.get(`${r.id}|${r.winner}`) ?? 0;
  else {
    const onWinner = m.staked.get(r.winner) ?? 0;
    const winnerPool = Array.isArray(r.pool) ? (r.pool[r.outcomes.indexOf(r.winner)] ?? 0) : 0;
    if (winnerPool === 0)
      payout = m.spent; // nobody picked the winner: everyone is refunded
    else if (onWinner === 0) payout = 0;
    else if (m.sawPayout) payout = m.paid;
    else return { text: `${head} · your payout is on its way`, net: 'pending' };
  }
  return netText(head, m.proceeds + payout - m.spent);
}

function netText(head, net) {
  if (net > 0) return { text: `${head} · you won ${net}`, net: 'won' };
  if (net < 0) return { text: `${head} · you lost ${-net}`, net: 'lost' };
  return { text: `${head} · you broke even`, net: 'even' };
}

/** Orders rounds as a viewer reads them: open and locked first (soonest deadline first), then finished, newest first. */
function byInterest(a, b) {
  const fa = a.state === 'settled' || a.state === 'cancelled';
  const fb = b.state === 'settled' || b.state === 'cancelled';
  if (fa !== fb) return fa ? 1 : -1;
  return fa ? b.deadline - a.deadline || b.openedAt - a.openedAt : a.deadline - b.deadline;
}

/** The Rounds panel from `update.rounds` (absent or empty: a hint). */
function renderRounds(list) {
  const box = $('rounds');
  const valid = Array.isArray(list)
    ? list.filter((r) => r && typeof r.id === 'string' && Array.isArray(r.outcomes) && typeof r.deadline === 'number').sort(byInterest)
    : [];
  rounds = new Map(valid.map((r) => [r.id, r]));
  $('no-rounds').hidden = valid.length > 0;
  for (const [id, node] of [...box.children].map((n) => [n.id.slice('round-'.length), n])) {
    if (!rounds.has(id)) {
      node.remove();
      roundKeys.delete(id);
    }
  }
  let previous = null;
  for (const r of valid) {
    const key = JSON.stringify([r.kind, r.outcomes, r.state, r.title, r.labels]);
    let node = $(`round-${r.id}`);
    if (!node || roundKeys.get(r.id) !== key) {
      const fresh = buildRound(r);
      if (node) node.replaceWith(fresh);
      node = fresh;
      roundKeys.set(r.id, key);
    }
    // the order of byInterest
    const want = previous ? previous.nextSibling : box.firstChild;
    if (want !== node) box.insertBefore(node, want);
    previous = node;
    fillRound(r);
  }
  tickCountdowns();
}

/** An accepted stake, buy or sell (`kind`) adds to what you put into or took out of the round. */
function noteTrade(kind, ack, round, outcome) {
  const m = mineOf(round);
  if (kind === 'stake') m.staked.set(outcome, (m.staked.get(outcome) ?? 0) + (ack.cost ?? 0));
  if (kind === 'sell' || kind === 'cash') m.proceeds += ack.proceeds ?? 0;
  else m.spent += ack.cost ?? 0;
  const r = rounds.get(round);
  if (r && $(`round-${r.id}`)) fillRound(r);
}

/** A balance frame of a round (payout, refund, claw-back) adds to what the round paid you. */
function notePayout(f) {
  if (typeof f.round !== 'string' || typeof f.delta !== 'number') return;
  const m = mineOf(f.round);
  m.paid += f.delta;
  m.sawPayout = true;
  const r = rounds.get(f.round);
  if (r && $(`round-${r.id}`)) fillRound(r);
}

/** A trade ack's `position` updates your shares of that outcome. */
function notePosition(ack, round, outcome) {
  if (typeof ack.position !== 'number') return;
  positions.set(`${round}|${outcome}`, ack.position);
  const r = rounds.get(round);
  if (r && $(`round-${r.id}`)) fillRound(r);
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
  positions.clear();
  mine.clear();
  results.clear();
  renderRounds(undefined);
  showTrade('—', true);
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
    if (typeof w.serverTime === 'number') clockOffsetMs = w.serverTime - Date.now();
    $('viewer-id').textContent = w.viewer ?? '—';
    showError('');
    void showBalance(channel, balanceToken);
  });
  c.on('update', (u) => {
    if (client === c) render(u);
  });
  c.on('ack', (a) => {
    if (client === c && typeof a.balance === 'number') setBalance(a.balance);
  });
  c.on('balance', (f) => {
    if (client !== c) return;
    setBalance(f.points);
    notePayout(f);
  });
  c.on('roundResult', (f) => {
    if (client !== c) return;
    results.set(f.round, f);
    const r = rounds.get(f.round);
    if (r && $(`round-${r.id}`)) fillRound(r);
  });
  c.on('error', (err) => showError(describeError(err)));
  try {
    await c.connect();
  } catch (err) {
    showError(describeError(err));
  }
}

$('join-form').addEventListener('submit', (e) => void join(e));
const params = new URLSearchParams(location.search);
if (params.has('debug')) $('debug').hidden = false;
const wanted = params.get('channel');
if (wanted && /^[A-Za-z0-9_-]{1,64}$/.test(wanted)) $('channel').value = wanted;
const fragmentToken = new URLSearchParams(location.hash.slice(1)).get('token');
if (fragmentToken) {
  // An embedding site passes the viewer's token in the fragment (never sent to a server): join at once.
  $('token').value = fragmentToken;
  $('join-form').requestSubmit();
}
$('points-input').addEventListener('input', () => {
  const label = buyLabel();
  for (const b of document.querySelectorAll('#rounds button.buy')) b.textContent = label;
});
setInterval(tickCountdowns, 250);
$('leave').addEventListener('click', () => void leave().then(() => setState('closed')));
