// @services: runs the product as a child process on PostgreSQL and Redis
/**
 * The chat-rounds scenario at smoke size, through the CLI exactly as
 * `npm run loadtest -- chatrounds` runs it: the product as its own process
 * on the machine's PostgreSQL (a fresh schema) and Redis with PUZZLE_ROUND
 * on, the Bot API stub, 5 chats × 3 players staking (pool) and trading
 * (market) in the Mini App until one solve per chat settles the round.
 * Asserts correctness: every stake and trade acked, every player's result
 * and payout, ledger verify ok, every final board the render of the chat's
 * last state with its settled round, one result message per chat, no 429.
 * About 20 s per kind.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runPeriodMs, type ChatRoundsReport } from '../src/chatrounds/scenario.ts';
import { loadtestCli } from './cli.ts';

const CHATS = 5;
const PLAYERS = 3;

describe("loadtest chatrounds - the run's puzzle period", () => {
  const DAY = 86_400_000;
  const MIN = 60_000;
  it('runPeriodMs - a day, unless its rollover is within the margin; then the fewest days whose rollover is not', () => {
    assert.equal(runPeriodMs(20_000 * DAY + 12 * 60 * MIN), DAY);
    assert.equal(runPeriodMs(20_000 * DAY - 16 * MIN), DAY, '16 min before midnight');
    // 10 min before the midnight that starts day 20,001 (odd: not a multiple of 2 days; a multiple of 3 days).
    assert.equal(runPeriodMs(20_001 * DAY - 10 * MIN), 2 * DAY);
    // Before day 20,004 (a multiple of 2, 3 and 4 days, not of 5).
    assert.equal(runPeriodMs(20_004 * DAY - 10 * MIN), 5 * DAY);
    for (const now of [20_001 * DAY - 10 * MIN, 20_004 * DAY - 10 * MIN, 20_000 * DAY - 1]) {
      const p = runPeriodMs(now);
      assert.ok(p - (now % p) >= 15 * MIN, `${now}: the next rollover is ${p - (now % p)} ms away`);
    }
  });
  it('runPeriodMs - a margin outside 0…1 day is refused', () => {
    for (const bad of [-1, DAY + 1, Number.NaN]) assert.throws(() => runPeriodMs(0, bad), RangeError);
  });
});

describe('loadtest chatrounds - smoke', () => {
  for (const kind of ['pool', 'market'] as const) {
    it(`${kind}: trades acked, rounds settled by the game and paid, ledger verified, final boards and result messages right`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'chatrounds-'));
      try {
        const file = join(dir, 'report.json');
        const res = await loadtestCli(
          ['chatrounds', '--chats', String(CHATS), '--players', String(PLAYERS), '--kind', kind, '--json', file],
          240_000,
        );
        assert.equal(res.code, 0, `exit ${res.code}\n${res.stderr.slice(-3000)}`);
        const r = JSON.parse(readFileSync(file, 'utf8')) as ChatRoundsReport;
        assert.equal(r.scenario, 'chatrounds');
        assert.equal(r.players.connected, CHATS * PLAYERS);
        assert.equal(r.trades.acked, r.trades.sent, JSON.stringify(r.trades));
        assert.ok(r.trades.sent >= CHATS * PLAYERS);
        assert.equal(r.rounds.settledYes, CHATS * PLAYERS);
        assert.deepEqual([r.payouts.checked, r.payouts.balanceMismatches, r.payouts.poolMismatches], [CHATS * PLAYERS, 0, 0]);
        assert.equal(r.ledgerVerify, 'ok');
        assert.equal(r.boards.finalCorrect, CHATS, r.boards.samples.join('\n'));
        assert.deepEqual(r.resultMessages, { chatsWithOne: CHATS, missing: 0, duplicates: 0 });
        assert.equal(r.telegram.rejected429, 0);
        assert.equal(r.complete, true, r.warnings.join('\n'));
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
