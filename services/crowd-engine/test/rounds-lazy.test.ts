/**
 * ChannelRounds builds its parts on first use: a channel acquired with no unfinished round carries none, and what
 * it was told before (a welcome grant, a close) holds once they are built. The round paths themselves are in
 * rounds.test.ts, against a real ledger.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '@crowdplay/config';
import type { BusAck } from '@crowdplay/protocol';
import { ChannelRounds } from '../src/rounds.ts';
import type { ChannelRoundsDeps } from '../src/round-context.ts';

function rounds(epoch: number): { r: ChannelRounds; changed: number[]; acks: BusAck[] } {
  const changed: number[] = [];
  const acks: BusAck[] = [];
  const noop = { add: () => undefined, record: () => undefined };
  const d = {
    config: defaultConfig(),
    ledger: {},
    store: {},
    telemetry: { refusals: { refuse: () => undefined }, logger: { debug: () => undefined } },
    wallets: {},
    metrics: { roundEvents: noop, trades: noop, tradeAckMs: noop, ledgerRetries: noop, payRetries: noop, unrecovered: noop },
    channel: 'c1',
    tenant: 'acme',
    epoch: () => epoch,
    now: () => 1_000,
    sendAcks: (_gw: string, a: BusAck[]) => acks.push(...a),
    sendWallet: () => undefined,
    sendRound: () => undefined,
    changed: () => changed.push(epoch),
  } as unknown as ChannelRoundsDeps;
  return { r: new ChannelRounds(d), changed, acks };
}

const built = (r: ChannelRounds): boolean => (r as unknown as { parts: unknown }).parts !== null;

describe('ChannelRounds - parts built on first use', () => {
  it('a first owner with nothing to recover builds nothing and marks no change; its views are empty', async () => {
    const { r, changed } = rounds(1);
    await r.recover([]);
    await r.recovered();
    r.tick(2_000);
    r.resumeServing();
    assert.deepEqual([r.views(), r.unfinished, r.needsTick, changed], [[], 0, false, []]);
    assert.equal(built(r), false);
  });

  it('a later owner with nothing to recover marks one change (its update replaces the last owner’s), still built lazily', async () => {
    const { r, changed } = rounds(3);
    await r.recover([]);
    assert.deepEqual(changed, [3]);
    assert.equal(built(r), false);
  });

  it('a welcome grant set before the parts exist is theirs once built; a close before them refuses the first stake', () => {
    const { r, acks } = rounds(1);
    r.welcomeGrant = 25;
    r.close();
    assert.equal(built(r), false);
    r.take('gw-1', { action: '', viewer: 'v1', seq: 7, conn: 1, at: 1_000, trade: { k: 'stake', round: 'r1', outcome: 'x', points: 5 } });
    assert.equal(built(r), true);
    assert.equal(r.welcomeGrant, 25);
    assert.deepEqual(acks, [{ conn: 1, seq: 7, ok: false, code: 'CP_ERR_LIMIT_DRAINING' }]);
  });
});
