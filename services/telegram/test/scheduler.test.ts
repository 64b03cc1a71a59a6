import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RefreshScheduler } from '../src/scheduler.ts';

// A cost model growing with cards: 4 cards ≈ 19 ms, 40 ≈ 171 ms (5 + 4.2 ms per card, rounded).
const cost = (cards: number): number => 5 + 4.2 * cards;
// Group burst 1: a chat's boards every 3,000 ms (20 a minute), the pacing most tests here count with.
const EVEN = { groupRatePerMin: 20, groupBurst: 1, chatRatePerS: 1 };
const make = (): RefreshScheduler => new RefreshScheduler({ renderBudgetMsPerS: 100, sendBudgetPerS: 10, pacing: EVEN, costMs: cost });

test('scheduler - the interval counts cost, not chats: one 40-card board weighs as much as its cards', () => {
  const a = make();
  for (let c = 1; c <= 8; c++) a.changed(c, 1, 4, 0); // eight 4-card chats: Σ cost = 8 × 21.8 = 174.4 ms
  a.due(0);
  assert.equal(a.intervalMs, 3_000, 'min interval: 174.4 ms of render per 100 ms/s → 1,744 ms; 8 sends / 10/s → 800 ms');
  const b = make();
  for (let c = 1; c <= 8; c++) b.changed(c, 1, 40, 0); // eight 40-card chats: Σ cost = 8 × 173 = 1,384 ms → 13,840 ms
  b.due(0);
  assert.equal(b.intervalMs, 13_840);
  const c = make();
  for (let i = 1; i <= 100; i++) c.changed(i, 1, 4, 0); // 100 small chats: render 21,800 ms; sends 10,000 ms
  c.due(0);
  assert.equal(c.intervalMs, 21_800);
});

test('scheduler - only dirty chats are due, once per interval, oldest change first; unchanged chats cost nothing', () => {
  const s = make();
  s.changed(1, 5, 4, 100);
  s.changed(2, 3, 4, 50);
  assert.deepEqual(
    s.due(1_000).map((d) => d.chatId),
    [2, 1],
  );
  s.sent(2, 3, 1_000);
  s.sent(1, 5, 1_000);
  assert.deepEqual(s.due(1_001), [], 'nothing changed');
  s.changed(1, 4, 4, 1_200); // older version: ignored
  assert.deepEqual(s.due(5_000), []);
  s.changed(1, 6, 4, 1_500);
  assert.deepEqual(s.due(2_000), [], 'sent 1 s ago: not before the 3 s interval');
  assert.deepEqual(s.due(4_000), [{ chatId: 1, version: 6, cards: 4, quietMs: 1_500 }]);
  s.remove(1);
  assert.deepEqual(s.due(10_000), []);
  assert.equal(s.size, 1);
  assert.throws(() => new RefreshScheduler({ renderBudgetMsPerS: 0, sendBudgetPerS: 1, pacing: EVEN, costMs: cost }), RangeError);
});

test('scheduler - the quietest chat goes first: a chat still changing waits, at most about one interval', () => {
  const s = make();
  s.changed(1, 1, 4, 0); // dirty since 0 and still changing
  s.changed(2, 1, 4, 100); // changed once, quiet since
  s.changed(1, 2, 4, 500);
  s.changed(1, 3, 4, 900);
  assert.deepEqual(
    s.due(1_000).map((d) => d.chatId),
    [2, 1],
    'chat 2 has been still since 100 ms, chat 1 changed 100 ms ago: its board would be stale again at once',
  );
  // Chat 3 keeps changing from 0 on; chat 4 changed once at 4 s. One interval (3 s, the minimum here) after it
  // became dirty, chat 3 ranks as if it went quiet then: before chat 4.
  const t = make();
  for (let at = 0; at <= 5_000; at += 100) t.changed(3, at + 1, 4, at);
  t.changed(4, 1, 4, 4_000);
  assert.deepEqual(
    t.due(5_000).map((d) => [d.chatId, d.quietMs]),
    [
      [3, 3_000],
      [4, 4_000],
    ],
    'each handed on with its rank, the order the render queue keeps',
  );
  assert.equal(t.intervalMs, 3_000);
});

test('scheduler - an avatar arriving makes the board dirty but is not the chat’s last change: it keeps its quiet rank', () => {
  const s = make();
  s.changed(1, 1, 4, 0); // chat 1's players last moved at 0
  s.changed(2, 1, 4, 500); // chat 2's at 500
  s.changed(1, 2, 4, 900, 0, true); // an avatar of chat 1 arrives at 900
  assert.deepEqual(
    s.due(1_000).map((d) => d.chatId),
    [1, 2],
    'chat 1 has been still since 0: the avatar does not make it look busy',
  );
  // A clean chat that only gets an avatar is dirty again, ranked by its last state change.
  const t = make();
  t.changed(3, 1, 4, 0);
  t.sent(3, 1, 0);
  t.changed(4, 1, 4, 2_000);
  t.changed(3, 2, 4, 3_500, 0, true);
  assert.deepEqual(
    t.due(4_000).map((d) => [d.chatId, d.version]),
    [
      [3, 2],
      [4, 1],
    ],
  );
  // The same arrival as a state change ranks the chat as busy.
  const u = make();
  u.changed(3, 1, 4, 0);
  u.sent(3, 1, 0);
  u.changed(4, 1, 4, 2_000);
  u.changed(3, 2, 4, 3_500);
  assert.deepEqual(
    u.due(4_000).map((d) => d.chatId),
    [4, 3],
  );
});

test('scheduler - boards leave at the budgets’ pace, oldest change first, each charged its cost', () => {
  // 10 sends/s and 100 render ms/s; 4-card boards cost 21.8 ms: the render budget allows 4 per second (87.2 ms), sends 10.
  const s = make();
  for (let c = 1; c <= 20; c++) s.changed(c, 1, 4, c); // chat 1 changed first
  const first = s.due(0).map((d) => d.chatId);
  assert.deepEqual(first, [1, 2, 3, 4], 'a full second of render budget: 4 boards, the oldest changes');
  assert.deepEqual(s.due(0), [], 'nothing left until the budget refills');
  for (const id of first) s.sent(id, 1, 0);
  assert.deepEqual(
    s.due(250).map((d) => d.chatId),
    [5],
    '250 ms refill 25 render ms: one more board',
  );
  // Over the next seconds every chat goes once, in order; the pass takes about the exported interval.
  const order = [...first, 5];
  s.sent(5, 1, 250);
  for (let t = 500; t <= 6_000; t += 250) {
    for (const d of s.due(t)) {
      order.push(d.chatId);
      s.sent(d.chatId, 1, t);
    }
  }
  assert.deepEqual(
    order,
    Array.from({ length: 20 }, (_, i) => i + 1),
  );
  // A 40-card board (173 ms) is costlier than a second's budget: it goes when the budget is full, alone.
  const big = make();
  big.changed(1, 1, 40, 0);
  big.changed(2, 1, 4, 1);
  assert.deepEqual(
    big.due(0).map((d) => d.chatId),
    [1],
  );
  big.sent(1, 1, 0);
  assert.deepEqual(
    big.due(100).map((d) => d.chatId),
    [],
    'the render budget is spent',
  );
  assert.deepEqual(
    big.due(1_300).map((d) => d.chatId),
    [2],
  );
});

test('scheduler - backlog: at most BOARD_MAX_BACKLOG boards handed on; the rest stay dirty, and the interval counts the backlog at its drain rate', () => {
  // 10 sends/s, a generous render budget, at most 5 boards handed on and not sent.
  const s = new RefreshScheduler({ renderBudgetMsPerS: 10_000, sendBudgetPerS: 10, pacing: EVEN, costMs: cost, maxBacklog: 5 });
  for (let c = 1; c <= 40; c++) s.changed(c, 1, 4, c);
  s.setBacklog(3, 0);
  const first = s.due(0);
  assert.deepEqual(
    first.map((d) => d.chatId),
    [1, 2],
    'room for 5 − 3 = 2 boards, the oldest changes',
  );
  assert.equal(s.heldByBacklog, 38);
  for (const d of first) s.sent(d.chatId, d.version, 0);
  // One second later the downstream sent only 2 of the 5: it drains at ~2/s, not the budget's 10/s.
  s.setBacklog(3, 1_000);
  assert.ok(s.drainPerS < 10 && s.drainPerS > 2, `drain estimate moves from 10/s toward 2/s: ${s.drainPerS}`);
  for (let t = 2_000; t <= 20_000; t += 1_000) s.setBacklog(5, t); // stalled at the cap: nothing leaves
  assert.deepEqual(s.due(20_000), [], 'at the cap nothing is taken');
  assert.equal(s.heldByBacklog, 38);
  // 38 dirty + 5 handed on at the slowest assumed rate (0.5/s) = 86 s: the interval says how stale a board may get.
  assert.equal(s.intervalMs, 86_000);
  // The downstream catches up: the backlog empties, the interval returns to the budget's pace (38 dirty / 10/s, min 3 s).
  s.setBacklog(0, 21_000);
  assert.equal(s.due(21_000).length, 5);
  assert.equal(s.intervalMs, 3_800);
});

test('scheduler - backlog: BOARD_MAX_BACKLOG caps the boards in the send lane, not those waiting to render', () => {
  const s = new RefreshScheduler({ renderBudgetMsPerS: 10_000, sendBudgetPerS: 10, pacing: EVEN, costMs: cost, maxBacklog: 5 });
  for (let c = 1; c <= 40; c++) s.changed(c, 1, 4, c);
  // 12 handed on: 10 waiting to render (each will draw its chat's newest state), 2 rendered and in the lane.
  s.setBacklog(12, 0, 2);
  assert.deepEqual(
    s.due(0).map((d) => d.chatId),
    [1, 2, 3],
    'room for 5 − 2 = 3 boards in the lane',
  );
  assert.equal(s.heldByBacklog, 37);
  assert.equal(s.backlog, 12, 'the interval and the look-ahead still count every board handed on');
  assert.equal(s.sending, 2);
  assert.throws(() => s.setBacklog(3, 1_000, -1), RangeError);
  assert.throws(() => s.setBacklog(3, 1_000, 0.5), RangeError);
  assert.deepEqual([s.backlog, s.sending], [12, 2], 'a bad reading changes nothing');
});

test('scheduler - the interval counts the backlog a chat waits behind after its 3 s spacing', () => {
  const s = make();
  s.changed(1, 1, 4, 0);
  s.changed(2, 1, 4, 0);
  s.setBacklog(10, 0); // 10 boards handed on, leaving at the budget's 10/s (the estimate's start)
  s.due(0);
  // A chat handed on just before it changed goes again 3 s later, then waits behind 10 boards at 10/s: 4 s, more
  // than the 3 s spacing or the (2 + 10) / 10/s = 1.2 s pass.
  assert.equal(s.intervalMs, 4_000);
  s.setBacklog(0, 1_000);
  s.due(1_000);
  assert.equal(s.intervalMs, 3_000, 'no backlog: the spacing alone');
});

test('scheduler - backlog: no limit with maxBacklog 0; bad counts and settings are refused and change nothing', () => {
  const s = new RefreshScheduler({ renderBudgetMsPerS: 10_000, sendBudgetPerS: 10, pacing: EVEN, costMs: cost, maxBacklog: 0 });
  for (let c = 1; c <= 8; c++) s.changed(c, 1, 4, c);
  s.setBacklog(1_000, 0);
  assert.equal(s.due(0).length, 8);
  assert.equal(s.heldByBacklog, 0);
  assert.throws(() => s.setBacklog(-1, 1_000), RangeError);
  assert.throws(() => s.setBacklog(1.5, 1_000), RangeError);
  assert.equal(s.backlog, 1_000, 'the last good reading stands');
  assert.throws(
    () => new RefreshScheduler({ renderBudgetMsPerS: 1, sendBudgetPerS: 1, pacing: EVEN, costMs: cost, maxBacklog: -1 }),
    RangeError,
  );
});

test('scheduler - upgraded: a render that drew a newer state leaves the chat clean up to it, without counting a hand-on', () => {
  const s = make();
  s.changed(1, 5, 4, 0);
  s.changed(2, 5, 4, 0);
  s.setBacklog(0, 0);
  for (const d of s.due(0)) s.sent(d.chatId, d.version, 0);
  s.changed(1, 9, 4, 500); // chat 1 moved on while its board waited; the render drew 9
  s.changed(2, 7, 4, 500);
  s.upgraded(1, 9, 600);
  s.upgraded(2, 6, 600); // a version older than the newest seen: chat 2 stays dirty
  assert.deepEqual(
    s.due(10_000).map((d) => [d.chatId, d.version]),
    [[2, 7]],
  );
  s.upgraded(99, 1, 600); // not tracked: nothing
  s.changed(1, 10, 4, 10_000);
  s.upgraded(1, 9, 10_000); // not newer than handed on: nothing (the 3 s pacing still counts from 600)
  assert.deepEqual(
    s.due(10_001).map((d) => [d.chatId, d.version]),
    [
      [2, 7],
      [1, 10],
    ],
  );
  assert.equal(s.size, 2);
  // The drain estimate counts hand-ons only: 2 boards handed on, backlog 2 → 0 in 1 s is 2/s, not 3/s.
  const d = make();
  d.changed(1, 1, 4, 0);
  d.changed(2, 1, 4, 0);
  d.setBacklog(0, 0);
  for (const x of d.due(0)) d.sent(x.chatId, x.version, 0);
  d.setBacklog(2, 0);
  d.changed(1, 2, 4, 100);
  d.upgraded(1, 2, 200);
  d.setBacklog(0, 1_000);
  const expected = 10 + (1 - Math.exp(-1_000 / 5_000)) * (2 - 10);
  assert.ok(Math.abs(d.drainPerS - expected) < 1e-9, `drain ${d.drainPerS}, expected ${expected}`);
});

test('scheduler - a board not delivered makes its chat due again, unless a newer one was handed on or delivered; unconfirmed past confirmTimeoutMs counts as lost', () => {
  const s = new RefreshScheduler({
    renderBudgetMsPerS: 100,
    sendBudgetPerS: 10,
    pacing: EVEN,
    costMs: cost,
    confirmTimeoutMs: 60_000,
  });
  s.changed(1, 5, 4, 0);
  s.sent(1, 5, 0);
  assert.deepEqual(s.due(10_000), [], 'handed on');
  s.undelivered(1, 5);
  assert.deepEqual(s.due(10_000), [{ chatId: 1, version: 5, cards: 4, quietMs: 0 }], 'not delivered: due again');
  s.sent(1, 5, 10_000);
  s.changed(1, 7, 4, 11_000);
  s.sent(1, 7, 13_000);
  s.undelivered(1, 5); // the older board's end: the newer one decides
  assert.deepEqual(s.due(20_000), []);
  s.delivered(1, 7);
  s.undelivered(1, 7); // a late duplicate end of a delivered board changes nothing
  assert.deepEqual(s.due(100_000), [], 'delivered: clean for good, past the confirm timeout too');
  s.changed(1, 8, 4, 100_000);
  s.sent(1, 8, 100_000);
  assert.deepEqual(s.due(159_999), []);
  assert.deepEqual(s.due(160_000), [{ chatId: 1, version: 8, cards: 4, quietMs: 100_000 }], 'never confirmed in 60 s: lost, due again');
  s.delivered(99, 1); // an unknown chat: nothing
  assert.equal(s.size, 1);
  for (const bad of [-1, Number.NaN, Infinity])
    assert.throws(
      () => new RefreshScheduler({ renderBudgetMsPerS: 1, sendBudgetPerS: 1, pacing: EVEN, costMs: cost, confirmTimeoutMs: bad }),
      RangeError,
    );
});

test('scheduler - look-ahead: the send budget is a floor; beyond it boards go while less than aheadMs of the bot rate waits', () => {
  const opts = { renderBudgetMsPerS: 10_000, sendBudgetPerS: 10, pacing: EVEN, costMs: cost };
  const s = new RefreshScheduler({ ...opts, aheadMs: 1_000, botRatePerS: 25 });
  const ceiling = new RefreshScheduler(opts);
  for (let c = 1; c <= 100; c++) {
    s.changed(c, 1, 4, 0);
    ceiling.changed(c, 1, 4, 0);
  }
  assert.equal(ceiling.due(0).length, 10, 'without it the budget is a ceiling');
  s.setBacklog(0, 0);
  const first = s.due(0);
  assert.equal(first.length, 25, "the budget's 10, then 15 ahead: one second of the bot rate");
  assert.equal(s.ahead, 15);
  for (const d of first) s.sent(d.chatId, d.version, 0);
  // A full backlog: only the floor (2.5 send tokens refilled in 250 ms).
  s.setBacklog(25, 250);
  assert.equal(s.due(250).length, 2);
  assert.equal(s.ahead, 0);
  // The lane drained to 10: topped up to 25 (3 from the budget, 12 ahead).
  s.setBacklog(10, 500);
  assert.equal(s.due(500).length, 15);
  assert.equal(s.ahead, 12);
  // The render budget still binds the boards ahead: 100 ms/s at 21.8 ms a board is 4 boards.
  const render = new RefreshScheduler({ ...opts, renderBudgetMsPerS: 100, aheadMs: 1_000, botRatePerS: 25 });
  for (let c = 1; c <= 100; c++) render.changed(c, 1, 4, 0);
  assert.equal(render.due(0).length, 4);
  assert.throws(() => new RefreshScheduler({ ...opts, aheadMs: 1_000 }), RangeError);
  assert.throws(() => new RefreshScheduler({ ...opts, aheadMs: -1, botRatePerS: 25 }), RangeError);
});

test('scheduler - a board that replaces one still queued takes no send token, goes first, and is not counted as drained', () => {
  const s = new RefreshScheduler({ renderBudgetMsPerS: 10_000, sendBudgetPerS: 2, pacing: EVEN, costMs: cost });
  for (let c = 1; c <= 6; c++) s.changed(c, 1, 4, 0);
  const first = s.due(0);
  assert.deepEqual(
    first.map((d) => d.chatId),
    [1, 2],
    'two send tokens',
  );
  for (const d of first) {
    s.sent(d.chatId, d.version, 0);
    s.queuedForSend(d.chatId, d.version);
  }
  s.delivered(1, 1);
  // Both chats change again; chat 2's board is still queued (not delivered), chat 1's was shown.
  s.changed(1, 2, 4, 3_000);
  s.changed(2, 2, 4, 3_000);
  // At 3 s the send budget holds 2 tokens: chat 2's new board is free (it replaces the queued one) and goes
  // first; the two tokens go to chats 3 and 4 (older changes than chat 1's); chat 1 waits.
  assert.deepEqual(
    s.due(3_000).map((d) => d.chatId),
    [2, 3, 4],
  );
});

test('scheduler - group burst: a quiet chat goes again after its chat interval (1 s), one that keeps going every T_group; burst 1 keeps 3 s', () => {
  const burst = new RefreshScheduler({
    renderBudgetMsPerS: 10_000,
    sendBudgetPerS: 10,
    pacing: { groupRatePerMin: 20, groupBurst: 2, chatRatePerS: 1 },
    costMs: cost,
  });
  assert.equal(burst.intervalMs, 1_000, 'a chat never handed on waits its chat interval after its first board');
  burst.changed(-1, 1, 4, 0);
  assert.deepEqual(burst.due(0), [{ chatId: -1, version: 1, cards: 4, quietMs: 0 }]);
  burst.sent(-1, 1, 0);
  // Its last change came right after its board was handed on: the group's burst lets it go after the chat's 1 s.
  burst.changed(-1, 2, 4, 100);
  assert.deepEqual(burst.due(999), [], 'the chat interval: 1 s');
  assert.deepEqual(burst.due(1_000), [{ chatId: -1, version: 2, cards: 4, quietMs: 100 }]);
  burst.sent(-1, 2, 1_000);
  // The burst is spent: the next one waits for the group, T_group = ceil(60e6 / 19) µs after the first board.
  burst.changed(-1, 3, 4, 1_100);
  assert.deepEqual(burst.due(3_157), []);
  assert.equal(burst.intervalMs, 3_158, 'a chat that keeps going waits T_group after each board (3,157.895 ms)');
  assert.deepEqual(burst.due(3_158), [{ chatId: -1, version: 3, cards: 4, quietMs: 1_100 }]);
  burst.sent(-1, 3, 3_158);
  // Quiet again: a minute later the burst is back.
  burst.changed(-1, 4, 4, 63_000);
  assert.deepEqual(burst.due(63_000), [{ chatId: -1, version: 4, cards: 4, quietMs: 63_000 }]);
  burst.sent(-1, 4, 63_000);
  burst.changed(-1, 5, 4, 63_100);
  assert.deepEqual(burst.due(64_000), [{ chatId: -1, version: 5, cards: 4, quietMs: 63_100 }]);

  // Burst 1: 3 s after every board, as before.
  const even = new RefreshScheduler({ renderBudgetMsPerS: 10_000, sendBudgetPerS: 10, pacing: EVEN, costMs: cost });
  assert.equal(even.intervalMs, 3_000);
  even.changed(-1, 1, 4, 0);
  even.sent(-1, 1, 0);
  even.changed(-1, 2, 4, 100);
  assert.deepEqual(even.due(2_999), []);
  assert.equal(even.intervalMs, 3_000);
  assert.deepEqual(even.due(3_000), [{ chatId: -1, version: 2, cards: 4, quietMs: 100 }]);
  for (const groupBurst of [0, 21, 1.5])
    assert.throws(
      () => new RefreshScheduler({ renderBudgetMsPerS: 1, sendBudgetPerS: 1, pacing: { ...EVEN, groupBurst }, costMs: cost }),
      RangeError,
    );
});
