import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { RoundView } from '@crowdplay/protocol';
import { createTelemetry } from '@crowdplay/telemetry';
import { RoundResults, roundResultText, type RoundResultSender } from '../src/round-results.ts';

const telemetry = createTelemetry({ service: 'round-results-test', level: 'silent', refusalLogIntervalMs: 60_000 });

function view(id: string, state: RoundView['state'], extra: Partial<RoundView> = {}): RoundView {
  return {
    id,
    kind: 'pool',
    title: 'Solved in 4?',
    outcomes: ['yes', 'no'],
    labels: { yes: 'Yes', no: 'No' },
    state,
    openedAt: 0,
    deadline: 1,
    pool: [30, 10],
    entries: 2,
    ...extra,
  };
}

function sender() {
  const calls: Array<{ method: string; params: Record<string, unknown>; opts: Record<string, unknown> }> = [];
  const client = {
    enqueueCall: (method: string, params: Record<string, unknown>, opts: Record<string, unknown>) => {
      calls.push({ method, params, opts });
      return Promise.resolve({ status: 'queued', id: String(calls.length), result: new Promise(() => undefined) });
    },
  } as unknown as RoundResultSender;
  return { calls, client };
}

test('round results - the text names the question and the winner, or the refund', () => {
  assert.equal(roundResultText(view('r', 'open')), null);
  assert.equal(roundResultText(view('r', 'locked')), null);
  assert.equal(
    roundResultText(view('r', 'settled', { winner: 'no' })),
    'Round result: Solved in 4?\nWinner: No. 40 points shared by the winners.',
  );
  assert.equal(
    roundResultText(view('r', 'settled', { kind: 'market', winner: 'yes', title: undefined, labels: undefined })),
    'Round result: Market\nWinner: yes. Winning shares pay 1 point each.',
  );
  assert.equal(roundResultText(view('r', 'settled', { winner: 'yes', entries: 0 })), null, 'nobody took part: no message');
  assert.equal(roundResultText(view('r', 'cancelled', { entries: 0 })), null);
  assert.equal(roundResultText(view('r', 'cancelled')), 'Round cancelled: Solved in 4?\nEvery stake is refunded.');
});

test('round results - one message on the transactional lane when a round seen running finishes; none for one first seen finished', async () => {
  const { calls, client } = sender();
  const rr = new RoundResults(client, telemetry);
  rr.seen(-100, [view('old', 'settled', { winner: 'yes' }), view('a', 'open'), view('b', 'locked')]);
  assert.equal(calls.length, 0, 'a round that ended before the chat was watched is not announced');
  rr.seen(-100, [view('old', 'settled', { winner: 'yes' }), view('a', 'locked'), view('b', 'cancelled')]);
  rr.seen(-100, [view('old', 'settled', { winner: 'yes' }), view('a', 'settled', { winner: 'yes' }), view('b', 'cancelled')]);
  rr.seen(-100, [view('a', 'settled', { winner: 'yes' }), view('b', 'cancelled')]);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(
    calls.map((c) => [c.method, c.params.chat_id, c.opts.lane, c.opts.key, String(c.params.text).split('\n')[0]]),
    [
      ['sendMessage', -100, 'tx', 'round:-100:b', 'Round cancelled: Solved in 4?'],
      ['sendMessage', -100, 'tx', 'round:-100:a', 'Round result: Solved in 4?'],
    ],
  );
  // Forgotten (the board stopped): a round seen again from scratch is not announced.
  rr.forget(-100);
  rr.seen(-100, [view('c', 'settled', { winner: 'no' })]);
  assert.equal(calls.length, 2);
  assert.match(await telemetry.metrics.prometheusText(), /crowdplay_telegram_round_results_total\{outcome="cancelled"[^}]*\} 1/);
});
