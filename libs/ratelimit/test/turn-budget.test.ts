import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { TurnBudget } from '../src/index.ts';

describe('TurnBudget', () => {
  it('the first ask of a turn starts its clock and answers false; spent once the budget has passed; fresh after the turn', async () => {
    let clock = 1_000;
    const b = new TurnBudget(20, () => clock);
    assert.equal(b.spent(), false, 'first ask');
    clock += 19;
    assert.equal(b.spent(), false, '19 ms in');
    clock += 1;
    assert.equal(b.spent(), true, '20 ms in');
    assert.equal(b.spent(), true, 'stays spent this turn');
    await nextTurn();
    assert.equal(b.spent(), false, 'a new turn: its first ask');
    clock += 25;
    assert.equal(b.spent(), true);
    b.close();
    assert.equal(b.spent(), false, 'close clears the clock');
    b.close();
  });

  it('0 is no limit; one instance is one budget for every consumer in a turn', () => {
    let clock = 0;
    const off = new TurnBudget(0, () => (clock += 1_000));
    for (let i = 0; i < 5; i++) assert.equal(off.spent(), false);
    const shared = new TurnBudget(10, () => clock);
    assert.equal(shared.spent(), false);
    clock += 10;
    assert.equal(shared.spent(), true, 'a second consumer in the same turn sees it spent');
    shared.close();
  });

  it('refuses a budget that is negative or not finite', () => {
    for (const bad of [-1, Number.NaN, Infinity]) assert.throws(() => new TurnBudget(bad), RangeError, String(bad));
  });
});
