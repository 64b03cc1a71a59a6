import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { serviceUrls, uniqueName } from '@crowdplay/testing';
import { RedisBoardBudget } from '../src/budget-redis.ts';
import { MemoryBoardBudget, RefreshScheduler, type BoardBudget } from '../src/scheduler.ts';

/**
 * Two schedulers (two gateways), each with `chats` chats that are always
 * dirty, run on one deterministic clock from 0 to `seconds` s in 30 ms steps;
 * every board handed out is counted. Returns the boards and render ms per scheduler.
 */
async function run(
  budgets: [BoardBudget, BoardBudget],
  o: { sendBudgetPerS: number; renderBudgetMsPerS: number; costMs: number; seconds: number },
): Promise<{ boards: number[]; renderMs: number }> {
  const schedulers = budgets.map(
    () =>
      new RefreshScheduler({
        sendBudgetPerS: o.sendBudgetPerS,
        renderBudgetMsPerS: o.renderBudgetMsPerS,
        pacing: { groupRatePerMin: 60_000, chatRatePerS: 1_000 },
        costMs: () => o.costMs,
      }),
  );
  const chats = 100;
  const version = new Map<number, number>();
  schedulers.forEach((s, i) => {
    for (let c = 1; c <= chats; c++) s.changed(i * 1000 + c, 1, 4, 0);
  });
  const boards = [0, 0];
  for (let step = 0, now = 0; now <= o.seconds * 1000; step++, now += 30) {
    // Gateways' ticks are not in step: each goes first every other step (the budget itself is first come, first served).
    const order = step % 2 === 0 ? [0, 1] : [1, 0];
    for (const i of order) {
      const s = schedulers[i]!;
      for (const d of await s.dueFrom(budgets[i]!, now)) {
        boards[i]!++;
        s.sent(d.chatId, d.version, now);
        const v = (version.get(d.chatId) ?? 1) + 1;
        version.set(d.chatId, v);
        s.changed(d.chatId, v, 4, now); // dirty again at once: demand always exceeds the budget
      }
    }
  }
  return { boards, renderMs: (boards[0]! + boards[1]!) * o.costMs };
}

describe('board budget shared by every gateway (Redis)', () => {
  let redisUrl: string;
  let redis: Redis;
  const opened: RedisBoardBudget[] = [];
  const open = async (prefix: string, sendBudgetPerS: number, renderBudgetMsPerS: number) => {
    const b = await RedisBoardBudget.open({ redisUrl, prefix, sendBudgetPerS, renderBudgetMsPerS, callerClock: true });
    opened.push(b);
    return b;
  };
  before(async () => {
    redisUrl = (await serviceUrls()).redisUrl;
    redis = new Redis(redisUrl);
  });
  after(async () => {
    for (const b of opened) {
      await redis.del(b.key);
      await b.close();
    }
    await redis.quit();
  });

  it('two schedulers on one prefix together hand out at most BOARD_SEND_BUDGET_PER_S boards a second (plus the one-second burst)', async () => {
    const prefix = uniqueName('bb');
    const r = await run([await open(prefix, 10, 10_000), await open(prefix, 10, 10_000)], {
      sendBudgetPerS: 10,
      renderBudgetMsPerS: 10_000,
      costMs: 5,
      seconds: 10,
    });
    const total = r.boards[0]! + r.boards[1]!;
    assert.ok(total <= 10 * (10 + 1), `${total} boards in 10 s at 10/s (+10 burst)`);
    assert.ok(total >= 10 * 10, `the budget is used: ${total}`);
    assert.ok(r.boards[0]! > 0 && r.boards[1]! > 0, `both gateways send: ${r.boards.join(', ')}`);
  });

  it('the render budget is shared too: render ms handed out stay within BOARD_RENDER_BUDGET_MS_PER_S', async () => {
    const prefix = uniqueName('bb');
    // 25 ms boards at 100 ms/s: 4 boards a second for the bot, whatever the send budget.
    const r = await run([await open(prefix, 100, 100), await open(prefix, 100, 100)], {
      sendBudgetPerS: 100,
      renderBudgetMsPerS: 100,
      costMs: 25,
      seconds: 10,
    });
    assert.ok(r.renderMs <= 100 * (10 + 1), `${r.renderMs} render ms in 10 s at 100 ms/s (+100 burst)`);
    assert.ok(r.renderMs >= 100 * 10 - 25, `the budget is used: ${r.renderMs}`);
  });

  it('per-process budgets (no Redis) would together hand out twice the budget: what the shared one prevents', async () => {
    const r = await run([new MemoryBoardBudget(10, 10_000), new MemoryBoardBudget(10, 10_000)], {
      sendBudgetPerS: 10,
      renderBudgetMsPerS: 10_000,
      costMs: 5,
      seconds: 10,
    });
    assert.ok(r.boards[0]! + r.boards[1]! > 10 * (10 + 1), `${r.boards.join(' + ')}`);
  });

  it('bad options are refused; a missing hash is a full bucket; nothing is granted for no boards', async () => {
    await assert.rejects(RedisBoardBudget.open({ redisUrl, prefix: 'no spaces', sendBudgetPerS: 1, renderBudgetMsPerS: 1 }), RangeError);
    await assert.rejects(RedisBoardBudget.open({ redisUrl, prefix: 'x', sendBudgetPerS: 0, renderBudgetMsPerS: 1 }), RangeError);
    await assert.rejects(RedisBoardBudget.open({ redisUrl, prefix: 'x', sendBudgetPerS: 1, renderBudgetMsPerS: Number.NaN }), RangeError);
    const b = await open(uniqueName('bb'), 3, 1_000);
    assert.deepEqual(await b.take([], 0), { granted: 0, ahead: 0 });
    assert.equal(await redis.exists(b.key), 0, 'no key written for nothing');
    assert.deepEqual(await b.take([1, 1, 1, 1, 1], 0), { granted: 3, ahead: 0 }, 'full: three sends');
    assert.deepEqual(await b.take([1], 0), { granted: 0, ahead: 0 }, 'empty at the same instant');
    assert.deepEqual(await b.take([1, 1], 1_000 / 3 + 1), { granted: 1, ahead: 0 }, 'one send token back after a third of a second');
    // Beyond the send tokens, up to `ahead` boards go on their render charge alone (the look-ahead).
    assert.deepEqual(
      await b.take([600, 600, 1], 1_000 / 3 + 1, 2),
      { granted: 1, ahead: 1 },
      'the render budget still binds (999 ms left)',
    );
    await assert.rejects(b.take([1], 0, -1), RangeError);
    await assert.rejects(b.take([1], 0, 0, 1.5), RangeError);
    // Boards that replace a queued one take no send token: the first two go on render alone, the third finds none.
    assert.deepEqual(await b.take([1, 1, 1], 1_000 / 3 + 1, 0, 2), { granted: 2, ahead: 0 });
    // Redis TIME (production): a fresh budget grants its burst.
    const t = await RedisBoardBudget.open({ redisUrl, prefix: uniqueName('bb'), sendBudgetPerS: 2, renderBudgetMsPerS: 1_000 });
    opened.push(t);
    assert.deepEqual(await t.take([1, 1, 1], 0), { granted: 2, ahead: 0 });
    assert.deepEqual(await t.take([1, 1, 1], 0, 2), { granted: 2, ahead: 2 }, 'the send tokens are gone: two go ahead');
  });
});
