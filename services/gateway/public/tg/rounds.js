// The Mini App's round panel: the chat's current round (the puzzle's round of the day, or any a game opened)
// with its title and outcome labels, a countdown, stake (pool) or buy and cash out (market), your balance, and
// "you won" / "you lost" from the server's roundResult. The frames are the viewer page's (docs/protocol.md):
// `stake`, `buy` with a budget, `sell`; acks carry `balance`, `position`; `balance` and `roundResult` pushes.
// Every text from the server (titles, labels) is set as text, never as HTML. Stable ids for browser tests:
// rounds-box (hidden without a round), round-panel (data-round, data-kind), round-stake (the points input's line), round-title, round-state (data-state), round-countdown (data-remaining-ms),
// round-points, balance, round-<outcome>-label, round-<outcome>-pool (pool), round-<outcome>-price (market),
// round-<outcome>-position (market: your shares), round-<outcome>-mine (pool: your stake),
// stake-<outcome>, buy-<outcome>, sell-<outcome>, round-trade (data-ok, data-code), round-result (data-net
// won / lost / even / cancelled).

/** The round the panel shows: the open or locked one closing soonest, else the finished one that closed last. */
export function currentRound(list) {
  const valid = Array.isArray(list)
    ? list.filter((r) => r && typeof r.id === 'string' && Array.isArray(r.outcomes) && typeof r.deadline === 'number')
    : [];
  const live = valid.filter((r) => r.state === 'open' || r.state === 'locked').sort((a, b) => a.deadline - b.deadline);
  if (live.length > 0) return live[0];
  return valid.sort((a, b) => b.deadline - a.deadline)[0] ?? null;
}

function formatCountdown(ms) {
  const s = Math.max(0, Math.ceil(ms / 1_000));
  const h = Math.floor(s / 3_600);
  const m = Math.floor((s % 3_600) / 60);
  const two = (n) => String(n).padStart(2, '0');
  if (h > 0) return `closes in ${h}:${two(m)}:${two(s % 60)}`;
  return `closes in ${s >= 60 ? `${m}:${two(s % 60)}` : `${s} s`}`;
}

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * The panel in `box`. `send(frame)` sends a stake or trade frame (its `seq` set by the caller) and resolves with its
 * ack, or rejects when the socket is not open.
 */
export function roundsPanel(box, send) {
  const $ = (id) => document.getElementById(id);
  let round = null;
  let builtKey = '';
  let clockOffsetMs = 0;
  /** Your shares per market round and outcome (`<round>|<outcome>`), from the acks. */
  const positions = new Map();
  /** Your stakes per pool round and outcome (`<round>|<outcome>`), from the acks. */
  const staked = new Map();
  /** The server's roundResult by round id. */
  const results = new Map();

  const label = (r, outcome) => (r.labels && typeof r.labels[outcome] === 'string' ? r.labels[outcome] : outcome);

  function pointsInput() {
    const raw = $('round-points').value.trim();
    const n = Number(raw);
    if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < 1) {
      showTrade(`enter a whole number of points (got "${raw}")`, false, 'CP_ERR_PROTO_INVALID');
      return null;
    }
    return n;
  }

  function showTrade(text, ok, code = '') {
    const node = $('round-trade');
    node.textContent = text;
    node.dataset.ok = String(ok);
    node.dataset.code = code;
  }

  function trade(what, r, outcome, frame) {
    send(frame).then(
      (ack) => {
        if (!ack.ok) return showTrade(`${what}: refused (${ack.code})`, false, ack.code ?? '');
        const key = `${r.id}|${outcome}`;
        if (frame.t === 'stake') staked.set(key, (staked.get(key) ?? 0) + (ack.cost ?? frame.points));
        if (typeof ack.position === 'number') positions.set(key, ack.position);
        if (typeof ack.balance === 'number') setBalance(ack.balance);
        let text = `${what}: ok`;
        if (ack.shares !== undefined) text += `, ${ack.shares} shares`;
        if (ack.proceeds !== undefined) text += `, received ${ack.proceeds}`;
        showTrade(text, true);
        if (round) fill(round);
      },
      (err) => showTrade(`${what}: ${err && err.message ? err.message : err}`, false),
    );
  }

  function build(r) {
    box.replaceChildren();
    box.dataset.round = r.id;
    box.dataset.kind = r.kind;
    box.append(
      el(
        'div',
        { class: 'round-title', id: 'round-title', 'data-testid': 'round-title' },
        r.title ?? (r.kind === 'market' ? 'Market' : 'Pool'),
      ),
      el('div', { class: 'hint' }),
    );
    const meta = box.lastChild;
    meta.append(
      el('span', { id: 'round-state', 'data-testid': 'round-state' }),
      document.createTextNode(' '),
      el('span', { id: 'round-countdown', 'data-testid': 'round-countdown' }),
    );
    for (const outcome of r.outcomes) {
      const row = el('div', { class: 'outcome' });
      row.append(el('span', { class: 'outcome-name', 'data-testid': `round-${outcome}-label` }, label(r, outcome)));
      if (r.kind === 'market') {
        row.append(el('span', { class: 'tally', id: `round-${outcome}-price`, 'data-testid': `round-${outcome}-price` }));
        const buy = el('button', { type: 'button', id: `buy-${outcome}`, 'data-testid': `buy-${outcome}` }, 'Buy');
        buy.addEventListener('click', () => {
          const budget = pointsInput();
          if (budget !== null) trade(`buy ${label(r, outcome)} for ${budget}`, r, outcome, { t: 'buy', round: r.id, outcome, budget });
        });
        const sell = el('button', { type: 'button', id: `sell-${outcome}`, 'data-testid': `sell-${outcome}` }, 'Cash out');
        sell.addEventListener('click', () => {
          const shares = positions.get(`${r.id}|${outcome}`) ?? 0;
          if (shares > 0)
            trade(`cash out ${shares} ${label(r, outcome)}`, r, outcome, { t: 'sell', round: r.id, outcome, shares, minProceeds: 0 });
        });
        row.append(buy, sell, el('span', { class: 'hint', id: `round-${outcome}-position`, 'data-testid': `round-${outcome}-position` }));
      } else {
        row.append(el('span', { class: 'tally', id: `round-${outcome}-pool`, 'data-testid': `round-${outcome}-pool` }));
        const stake = el('button', { type: 'button', id: `stake-${outcome}`, 'data-testid': `stake-${outcome}` }, 'Stake');
        stake.addEventListener('click', () => {
          const points = pointsInput();
          if (points !== null) trade(`stake ${points} on ${label(r, outcome)}`, r, outcome, { t: 'stake', round: r.id, outcome, points });
        });
        row.append(stake, el('span', { class: 'hint', id: `round-${outcome}-mine`, 'data-testid': `round-${outcome}-mine` }));
      }
      box.append(row);
    }
    box.append(el('div', { class: 'round-result', id: 'round-result', 'data-testid': 'round-result', role: 'status' }));
  }

  function resultText(r) {
    if (r.state === 'cancelled') return { text: 'Cancelled: every stake refunded', net: 'cancelled' };
    if (r.state !== 'settled') return { text: '', net: '' };
    const head = `Winner: ${r.winner === undefined ? '?' : label(r, r.winner)}`;
    const told = results.get(r.id);
    if (!told) return { text: head, net: '' };
    if (told.net > 0) return { text: `${head} · you won ${told.net}`, net: 'won' };
    if (told.net < 0) return { text: `${head} · you lost ${-told.net}`, net: 'lost' };
    return { text: `${head} · you broke even`, net: 'even' };
  }

  function fill(r) {
    const state = $('round-state');
    state.textContent = r.state === 'locked' ? 'betting closed' : r.state;
    state.dataset.state = r.state;
    const open = r.state === 'open';
    const total = Array.isArray(r.pool) ? r.pool.reduce((a, b) => a + b, 0) : 0;
    r.outcomes.forEach((outcome, i) => {
      const key = `${r.id}|${outcome}`;
      if (r.kind === 'market') {
        const p = Array.isArray(r.prices) ? r.prices[i] : undefined;
        $(`round-${outcome}-price`).textContent = typeof p === 'number' ? `${(p * 100).toFixed(1)}%` : '—';
        const held = positions.get(key) ?? 0;
        $(`round-${outcome}-position`).textContent = held > 0 && !(r.state === 'settled' && outcome !== r.winner) ? `you hold ${held}` : '';
        $(`buy-${outcome}`).disabled = !open;
        $(`sell-${outcome}`).disabled = !open || held <= 0;
      } else {
        const points = Array.isArray(r.pool) ? (r.pool[i] ?? 0) : 0;
        $(`round-${outcome}-pool`).textContent = total > 0 ? `${points} (${Math.round((points / total) * 100)}%)` : String(points);
        const own = staked.get(key) ?? 0;
        $(`round-${outcome}-mine`).textContent = own > 0 ? `you staked ${own}` : '';
        $(`stake-${outcome}`).disabled = !open;
      }
    });
    const { text, net } = resultText(r);
    const node = $('round-result');
    node.textContent = text;
    node.dataset.net = net;
    tick();
  }

  function tick() {
    const node = round && $('round-countdown');
    if (!node) return;
    const left = round.deadline - (Date.now() + clockOffsetMs);
    node.dataset.remainingMs = String(Math.max(0, Math.round(left)));
    node.textContent = round.state === 'open' ? formatCountdown(left) : '';
  }

  function setBalance(points) {
    $('balance').textContent = String(points);
  }

  setInterval(tick, 1_000);
  return {
    /** The welcome frame's server time (ms since epoch): countdowns follow the server's clock. */
    setServerTime(ms) {
      clockOffsetMs = ms - Date.now();
    },
    /** An update's `rounds`: shows the current round (or hides the panel when there is none). */
    render(list) {
      round = currentRound(list);
      $('rounds-box').hidden = round === null;
      $('round-stake').hidden = round === null || round.state !== 'open';
      if (!round) return;
      const key = JSON.stringify([round.id, round.kind, round.outcomes, round.title, round.labels]);
      if (key !== builtKey) {
        builtKey = key;
        build(round);
      }
      fill(round);
    },
    setBalance,
    /** A roundResult push: your staked, paid and net points in a finished round. */
    result(f) {
      results.set(f.round, f);
      if (round && round.id === f.round) fill(round);
    },
  };
}
