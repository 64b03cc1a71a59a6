/**
 * Gateway side of rounds: stake/buy/sell forwarding, joins and
 * their balance answers, trade ack fields, wallet batches, refused trade
 * frames, and the game's round.open/settle/cancel requests.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { BusIntent, RoundView, WalletCredit } from '@crowdplay/protocol';
import { decodeJson, type Subscription } from '@crowdplay/bus';
import { Ledger } from '@crowdplay/ledger';
import {
  Client,
  connected,
  metricValue,
  openSuiteStore,
  startHarness,
  updateFrame,
  viewerToken,
  waitUntil,
  type Harness,
  type SuiteStore,
} from './helpers.ts';

let suite: SuiteStore;
/** A second channel of acme. */
const OTHER = 'room2';
before(async () => {
  suite = await openSuiteStore();
  await suite.store.channels.ensure(OTHER, 'acme');
});
after(async () => {
  await suite.close();
});

async function viewer(h: Harness, sub: string, channel = suite.channel): Promise<Client> {
  const token = await viewerToken(suite.acme.tenant.signingSecret, { sub });
  return connected(h.wsUrl({ role: 'crowd', channel, token }));
}

/** The intents the shard got, with `at` checked (recent) and zeroed so they compare exactly. */
function intentsSeen(h: Harness): BusIntent[] {
  return h.shard.batches.flatMap((b) =>
    b.intents.map((i) => {
      assert.ok(Math.abs(i.at - Date.now()) < 10_000, 'at is the receive time');
      return { ...i, at: 0 };
    }),
  );
}

const ROUND: RoundView = {
  id: 'r1',
  kind: 'market',
  outcomes: ['left', 'right'],
  state: 'open',
  openedAt: 1_700_000_000_000,
  deadline: 1_700_000_030_000,
  entries: 0,
  b: 100,
  q: [0, 0],
  prices: [0.5, 0.5],
};

describe('gateway rounds - crowd', () => {
  it('trades - stake, buy (shares / budget) and sell are forwarded as BusIntents with action "" and the frame as trade', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel] });
    try {
      const c = await viewer(h, 'alice');
      await waitUntil(() => h.shard.joins.length === 1, 'join published');
      const conn = h.shard.joins[0]!.conn;
      c.send({ t: 'stake', seq: 1, round: 'r1', outcome: 'left', points: 50, key: 'k-1' });
      c.send({ t: 'buy', seq: 2, round: 'r2', outcome: 'right', shares: 3, maxCost: 0 });
      c.send({ t: 'buy', seq: 3, round: 'r2', outcome: 'right', budget: 1_000_000_000_000_000 });
      c.send({ t: 'sell', seq: 4, round: 'r2', outcome: 'right', shares: 2, minProceeds: 7, key: 'a:b.c_d-e' });
      c.act(5);
      await Promise.all([1, 2, 3, 4, 5].map((s) => c.ack(s)));
      assert.deepEqual(intentsSeen(h), [
        { conn, viewer: 'alice', seq: 1, action: '', trade: { k: 'stake', round: 'r1', outcome: 'left', points: 50, key: 'k-1' }, at: 0 },
        { conn, viewer: 'alice', seq: 2, action: '', trade: { k: 'buy', round: 'r2', outcome: 'right', shares: 3, maxCost: 0 }, at: 0 },
        { conn, viewer: 'alice', seq: 3, action: '', trade: { k: 'buy', round: 'r2', outcome: 'right', budget: 1e15 }, at: 0 },
        {
          conn,
          viewer: 'alice',
          seq: 4,
          action: '',
          trade: { k: 'sell', round: 'r2', outcome: 'right', shares: 2, minProceeds: 7, key: 'a:b.c_d-e' },
          at: 0,
        },
        { conn, viewer: 'alice', seq: 5, action: 'pull', option: 'left', at: 0 },
      ]);
      assert.equal(metricValue(await h.metricsText(), 'crowdplay_intents_forwarded_total'), 5);
    } finally {
      await h.close();
    }
  });

  it('guess - forwarded as a BusIntent with the word; the ack carries marks, solved and left', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel] });
    try {
      h.shard.ackFor = (i) =>
        i.guess === 'crane'
          ? { conn: i.conn, seq: i.seq, ok: true, cost: 0, marks: '....y', solved: false, left: 5 }
          : { conn: i.conn, seq: i.seq, ok: false, code: 'CP_ERR_PUZZLE_INVALID_WORD' };
      const c = await viewer(h, 'gus');
      await waitUntil(() => h.shard.joins.length === 1, 'join published');
      const conn = h.shard.joins[0]!.conn;
      c.send({ t: 'guess', seq: 1, word: 'crane' });
      c.send({ t: 'guess', seq: 2, word: 'qqqqq' });
      c.send({ t: 'guess', seq: 3, word: 'x'.repeat(17) }); // over the schema's 16 characters: refused at the gateway
      await Promise.all([1, 2, 3].map((s) => c.ack(s)));
      assert.deepEqual(intentsSeen(h), [
        { conn, viewer: 'gus', seq: 1, action: '', guess: 'crane', at: 0 },
        { conn, viewer: 'gus', seq: 2, action: '', guess: 'qqqqq', at: 0 },
      ]);
      const text = (seq: number): string => c.raw.map((r) => r.data.toString('utf8')).find((t) => t.includes(`"seq":${seq},`))!;
      assert.equal(text(1), '{"t":"ack","seq":1,"ok":true,"cost":0,"marks":"....y","solved":false,"left":5}');
      assert.equal(text(2), '{"t":"ack","seq":2,"ok":false,"code":"CP_ERR_PUZZLE_INVALID_WORD"}');
      assert.equal(text(3), '{"t":"ack","seq":3,"ok":false,"code":"CP_ERR_PROTO_INVALID"}');
    } finally {
      await h.close();
    }
  });

  it('acks - shares, proceeds, position and balance pass through; a plain act ack stays plain', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel] });
    try {
      h.shard.ackFor = (i) => {
        if (i.trade?.k === 'buy') return { conn: i.conn, seq: i.seq, ok: true, cost: 61, shares: 3, position: 5, balance: 939 };
        if (i.trade?.k === 'sell')
          return { conn: i.conn, seq: i.seq, ok: true, cost: 0, shares: 2, proceeds: 44, position: 3, balance: 983 };
        if (i.trade?.k === 'stake') return { conn: i.conn, seq: i.seq, ok: false, code: 'CP_ERR_ROUND_CLOSED' };
        return { conn: i.conn, seq: i.seq, ok: true, cost: 0 };
      };
      const c = await viewer(h, 'bob');
      c.send({ t: 'buy', seq: 1, round: 'r1', outcome: 'left', shares: 3, maxCost: 100 });
      c.send({ t: 'sell', seq: 2, round: 'r1', outcome: 'left', shares: 2, minProceeds: 0 });
      c.send({ t: 'stake', seq: 3, round: 'r9', outcome: 'left', points: 1 });
      c.act(4);
      await Promise.all([1, 2, 3, 4].map((s) => c.ack(s)));
      const text = (seq: number): string => c.raw.map((r) => r.data.toString('utf8')).find((t) => t.includes(`"seq":${seq},`))!;
      assert.equal(text(1), '{"t":"ack","seq":1,"ok":true,"cost":61,"shares":3,"position":5,"balance":939}');
      assert.equal(text(2), '{"t":"ack","seq":2,"ok":true,"cost":0,"shares":2,"proceeds":44,"position":3,"balance":983}');
      assert.equal(text(3), '{"t":"ack","seq":3,"ok":false,"code":"CP_ERR_ROUND_CLOSED"}');
      assert.equal(text(4), '{"t":"ack","seq":4,"ok":true,"cost":0}');
    } finally {
      await h.close();
    }
  });

  it('joins - each welcomed viewer socket is a join in the next IntentBatch; the balance answer reaches only that socket', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel] });
    try {
      h.shard.joinBalance = (j) => ({ t: 'balance', points: j.viewer === 'carol' ? 1_000 : 0, reason: 'join' });
      const carol = await viewer(h, 'carol');
      const carolBalance = await carol.frame((f) => f.t === 'balance', 'carol balance');
      assert.deepEqual(carolBalance, { t: 'balance', points: 1_000, reason: 'join' });
      const dave = await viewer(h, 'dave');
      const daveBalance = await dave.frame((f) => f.t === 'balance', 'dave balance');
      assert.deepEqual(daveBalance, { t: 'balance', points: 0, reason: 'join' });
      assert.deepEqual(
        h.shard.joins.map((j) => [j.channel, j.viewer]),
        [
          [suite.channel, 'carol'],
          [suite.channel, 'dave'],
        ],
      );
      assert.notEqual(h.shard.joins[0]!.conn, h.shard.joins[1]!.conn);
      assert.equal(
        h.shard.allBatches.every((b) => b.gw === h.gateway.id),
        true,
      );
      // A join-only batch carries no intents and is not counted as an intent batch.
      assert.deepEqual(
        h.shard.allBatches.map((b) => b.intents.length),
        [0, 0],
      );
      assert.equal(metricValue(await h.metricsText(), 'crowdplay_intent_batches_total'), 0);
      assert.equal(carol.frames.filter((f) => f.t === 'balance').length, 1, "carol did not get dave's balance");
    } finally {
      await h.close();
    }
  });

  it('joins - a stake sent as the socket opens rides in the same batch as its join', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel], gateway: { intentBatchMs: 50 } });
    try {
      const token = await viewerToken(suite.acme.tenant.signingSecret, { sub: 'eager' });
      const c = new Client(h.wsUrl({ role: 'crowd', channel: suite.channel, token }));
      await c.opened;
      c.send({ t: 'stake', seq: 1, round: 'r1', outcome: 'left', points: 5 });
      await c.ack(1);
      assert.equal(h.shard.allBatches.length, 1);
      const b = h.shard.allBatches[0]!;
      assert.deepEqual(b.joins, [{ conn: b.intents[0]!.conn, viewer: 'eager' }]);
      assert.deepEqual(b.intents[0]!.trade, { k: 'stake', round: 'r1', outcome: 'left', points: 5 });
    } finally {
      await h.close();
    }
  });

  it("wallet - a WalletBatch entry reaches that viewer's sockets in that channel only", async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel, OTHER] });
    try {
      const subscribed: string[] = [];
      const unsubscribed: string[] = [];
      const realSubscribe = h.bus.subscribe.bind(h.bus);
      h.bus.subscribe = (subject, handler, opts): Subscription => {
        const sub = realSubscribe(subject, handler, opts);
        if (subject.endsWith('.wallet')) subscribed.push(subject);
        return {
          ...sub,
          unsubscribe: () => {
            if (subject.endsWith('.wallet')) unsubscribed.push(subject);
            sub.unsubscribe();
          },
        } as Subscription;
      };
      const alice1 = await viewer(h, 'alice');
      const alice2 = await viewer(h, 'alice');
      const bob = await viewer(h, 'bob');
      const aliceElsewhere = await viewer(h, 'alice', OTHER);
      assert.deepEqual(
        subscribed,
        [h.subj.channelWallet(suite.channel), h.subj.channelWallet(OTHER)],
        'one wallet subscription per channel',
      );
      const payout = { t: 'balance' as const, points: 1_250, reason: 'payout', delta: 250, round: 'r1' };
      const refund = { t: 'balance' as const, points: 1_300, reason: 'refund', delta: 50, round: 'r2' };
      h.shard.publishWallet(suite.channel, {
        entries: [
          { viewer: 'alice', frame: payout },
          { viewer: 'nobody-here', frame: { t: 'balance', points: 1, reason: 'payout', delta: 1, round: 'r1' } },
          { viewer: 'alice', frame: refund },
        ],
      });
      for (const a of [alice1, alice2]) {
        await a.frame((f) => f.t === 'balance' && f.reason === 'refund', 'refund');
        assert.deepEqual(
          a.frames.filter((f) => f.t === 'balance'),
          [payout, refund],
        );
      }
      // A later update on both channels proves the others got nothing in between (frames are in order per socket).
      h.shard.publishUpdate(suite.channel, updateFrame(suite.channel, 5));
      h.shard.publishUpdate(OTHER, updateFrame(OTHER, 5));
      await bob.frame((f) => f.t === 'update' && f.ev === 5, 'update on bob');
      await aliceElsewhere.frame((f) => f.t === 'update' && f.ev === 5, 'update on the other channel');
      assert.equal(bob.frames.filter((f) => f.t === 'balance').length, 0, "bob gets nobody else's balance");
      assert.equal(aliceElsewhere.frames.filter((f) => f.t === 'balance').length, 0, "another channel's wallet batch does not reach it");
      // The last member of a channel drops its wallet subscription.
      await Promise.all([alice1.close(), alice2.close(), bob.close()]);
      await waitUntil(() => h.gateway.stats().channels === 1, 'room1 left');
      assert.deepEqual(unsubscribed, [h.subj.channelWallet(suite.channel)]);
      await aliceElsewhere.close();
      await waitUntil(() => h.gateway.stats().channels === 0, 'room2 left');
      assert.deepEqual(unsubscribed, [h.subj.channelWallet(suite.channel), h.subj.channelWallet(OTHER)]);
    } finally {
      await h.close();
    }
  });

  it("wallet - a roundResult entry reaches that viewer's sockets; an entry of an unknown frame type reaches nobody", async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel] });
    try {
      const alice = await viewer(h, 'alice');
      const bob = await viewer(h, 'bob');
      const result = {
        t: 'roundResult' as const,
        channel: suite.channel,
        round: 'r9',
        state: 'settled' as const,
        winner: 'left',
        staked: 50,
        paid: 90,
        net: 40,
      };
      h.shard.publishWallet(suite.channel, {
        entries: [
          { viewer: 'bob', frame: { t: 'debug', secret: 1 } as unknown as typeof result },
          { viewer: 'alice', frame: result },
        ],
      });
      const got = await alice.frame((f) => f.t === 'roundResult', 'roundResult');
      assert.deepEqual(got, result);
      h.shard.publishUpdate(suite.channel, updateFrame(suite.channel, 7));
      await bob.frame((f) => f.t === 'update' && f.ev === 7, 'update on bob');
      assert.deepEqual(
        bob.frames.filter((f) => f.t !== 'update' && f.t !== 'welcome' && f.t !== 'balance'),
        [],
        "bob gets neither alice's result nor the unknown frame",
      );
      await Promise.all([alice.close(), bob.close()]);
    } finally {
      await h.close();
    }
  });

  it('bad trade frames - each gets an error frame and a refused ack CP_ERR_PROTO_INVALID; nothing is forwarded', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel], gateway: { protocolErrorLimit: 1_000 } });
    try {
      const c = await viewer(h, 'mallory');
      const bad: string[] = [
        JSON.stringify({ t: 'stake', seq: 1, round: 'r1', outcome: 'left', points: -5 }),
        JSON.stringify({ t: 'stake', seq: 2, round: 'r1', outcome: 'left', points: 0 }),
        JSON.stringify({ t: 'stake', seq: 3, round: 'r1', outcome: 'left', points: 1.5 }),
        JSON.stringify({ t: 'stake', seq: 4, round: 'r1', outcome: 'left', points: 1e16 }),
        JSON.stringify({ t: 'stake', seq: 5, round: 'r1', outcome: 'left', points: 'NaN' }),
        JSON.stringify({ t: 'stake', seq: 6, round: 'r1', outcome: 'left', points: NaN }), // null on the wire
        JSON.stringify({ t: 'stake', seq: 7, round: 'r1', points: 5 }),
        JSON.stringify({ t: 'buy', seq: 8, round: 'r1', outcome: 'left', shares: 3 }), // no maxCost
        JSON.stringify({ t: 'buy', seq: 9, round: 'r1', outcome: 'left', shares: 3, maxCost: 10, budget: 10 }),
        JSON.stringify({ t: 'buy', seq: 10, round: 'r1', outcome: 'left', budget: 0 }),
        JSON.stringify({ t: 'buy', seq: 11, round: 'r1', outcome: 'left', shares: 1, maxCost: -1 }),
        JSON.stringify({ t: 'sell', seq: 12, round: 'r1', outcome: 'left', shares: 2 }), // no minProceeds
        JSON.stringify({ t: 'sell', seq: 13, round: 'r1', outcome: 'left', shares: 2.5, minProceeds: 0 }),
        JSON.stringify({ t: 'sell', seq: 14, round: 'r1', outcome: 'left', shares: 2, minProceeds: 0, key: 'has space' }),
        JSON.stringify({ t: 'stake', seq: 15, round: 'bad round', outcome: 'left', points: 5 }),
        '{"t":"stake","seq":16,"round":"r1","outcome":"left","points":1e300}',
      ];
      const refusedBefore = metricValue(await h.metricsText(), 'crowdplay_refusals_total', { reason: 'CP_ERR_PROTO_INVALID' });
      for (const frame of bad) c.send(frame);
      const acks = await Promise.all(bad.map((_f, i) => c.ack(i + 1)));
      for (const [i, ack] of acks.entries()) {
        assert.deepEqual(ack, { t: 'ack', seq: i + 1, ok: false, code: 'CP_ERR_PROTO_INVALID' }, `frame ${bad[i]}`);
      }
      const errors = c.frames.filter((f) => f.t === 'error');
      assert.equal(errors.length, bad.length, 'one error frame each, as before');
      assert.ok(errors.every((e) => e.code === 'CP_ERR_PROTO_INVALID' && typeof e.message === 'string' && !('ref' in e)));
      // Each error frame comes right before its ack.
      const kinds = c.frames.filter((f) => f.t === 'error' || f.t === 'ack').map((f) => f.t);
      assert.deepEqual(
        kinds,
        bad.flatMap(() => ['error', 'ack']),
      );
      // A frame without a usable seq gets the error frame only.
      c.send({ t: 'stake', seq: -1, round: 'r1', outcome: 'left', points: -5 });
      c.send({ t: 'stake', seq: 'x', round: 'r1', outcome: 'left', points: 5 });
      c.act(100);
      await c.ack(100);
      assert.equal(c.frames.filter((f) => f.t === 'error').length, bad.length + 2);
      assert.equal(c.frames.filter((f) => f.t === 'ack').length, bad.length + 1);
      assert.deepEqual(
        intentsSeen(h).map((i) => i.seq),
        [100],
        'only the valid act was forwarded',
      );
      const text = await h.metricsText();
      assert.equal(
        metricValue(text, 'crowdplay_refusals_total', { area: 'gateway', reason: 'CP_ERR_PROTO_INVALID' }),
        refusedBefore + bad.length + 2,
      );
      assert.equal(c.ws.readyState, c.ws.OPEN);
    } finally {
      await h.close();
    }
  });

  it('bad frames - an unknown type with a seq gets a refused ack of its code; WS_PROTOCOL_ERROR_LIMIT still closes', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel], gateway: { protocolErrorLimit: 3 } });
    try {
      const c = await viewer(h, 'oscar');
      c.send({ t: 'bet', seq: 1, round: 'r1' });
      assert.deepEqual(await c.ack(1), { t: 'ack', seq: 1, ok: false, code: 'CP_ERR_PROTO_UNKNOWN_TYPE' });
      c.send({ t: 'stake', seq: 2, round: 'r1', outcome: 'left', points: 0 });
      c.send({ t: 'stake', seq: 3, round: 'r1', outcome: 'left', points: 0 });
      const closed = await c.closed;
      assert.equal(closed.code, 4400);
      assert.deepEqual(
        c.frames.filter((f) => f.t !== 'welcome').map((f) => [f.t, f.code]),
        [
          ['error', 'CP_ERR_PROTO_UNKNOWN_TYPE'],
          ['ack', 'CP_ERR_PROTO_UNKNOWN_TYPE'],
          ['error', 'CP_ERR_PROTO_INVALID'],
          ['ack', 'CP_ERR_PROTO_INVALID'],
          ['error', 'CP_ERR_PROTO_INVALID'],
          ['ack', 'CP_ERR_PROTO_INVALID'],
          ['error', 'CP_ERR_PROTO_VIOLATIONS'],
        ],
      );
      assert.equal(h.shard.intents, 0);
    } finally {
      await h.close();
    }
  });

  it('limits - trades share the per-viewer intent bucket with acts and are refused while draining', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel], gateway: { intentBurst: 2, intentRatePerS: 1 } });
    try {
      const c = await viewer(h, 'greedy');
      c.act(1);
      c.send({ t: 'stake', seq: 2, round: 'r1', outcome: 'left', points: 5 });
      c.send({ t: 'buy', seq: 3, round: 'r1', outcome: 'left', budget: 5 });
      assert.deepEqual(
        (await Promise.all([1, 2, 3].map((s) => c.ack(s)))).map((a) => [a.ok, a.code]),
        [
          [true, undefined],
          [true, undefined],
          [false, 'CP_ERR_INTENT_RATE_LIMITED'],
        ],
      );
      h.gateway.pauseIntake();
      c.send({ t: 'sell', seq: 4, round: 'r1', outcome: 'left', shares: 1, minProceeds: 0 });
      assert.deepEqual(await c.ack(4), { t: 'ack', seq: 4, ok: false, code: 'CP_ERR_LIMIT_DRAINING' });
      await h.bus.flush();
      assert.deepEqual(
        intentsSeen(h).map((i) => i.seq),
        [1, 2],
      );
    } finally {
      await h.close();
    }
  });
});

describe('gateway rounds - game', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ store: suite.store, channels: ['gameroom'] });
  });
  after(async () => {
    await h.close();
  });

  function gameCtl(): unknown[] {
    return h.shard.ctl.filter((x) => x.channel === 'gameroom').map((x) => x.req);
  }

  it('round ops - forwarded in order with the tenant; answered with result / error frames carrying ref', async () => {
    const game = await connected(h.wsUrl({ role: 'game', channel: 'gameroom', key: suite.acme.apiKey }));
    try {
      h.shard.ctlReply = (_c, req) => {
        if (req.op === 'round.open') return { ok: true, round: ROUND };
        if (req.op === 'round.settle') return { ok: false, code: 'CP_ERR_ROUND_UNKNOWN', message: 'unknown round r7' };
        if (req.op === 'round.cancel') return { ok: true, round: { ...ROUND, state: 'cancelled' } };
        return { ok: true };
      };
      const actions = [{ name: 'pull', maxPerTick: 10, options: ['left', 'right'] }];
      game.send({ t: 'declare', actions, welcomeGrant: 500 });
      game.send({
        t: 'round.open',
        ref: 'o-1',
        round: 'r1',
        kind: 'market',
        outcomes: ['left', 'right'],
        durationMs: 30_000,
        liquidity: 100,
      });
      game.send({ t: 'round.settle', ref: 's:1', round: 'r7', outcome: 'left' });
      game.send({ t: 'round.cancel', round: 'r1' }); // no ref: success is silent
      game.send({ t: 'round.open', round: 'r2', kind: 'pool', outcomes: ['a', 'b', 'c'], durationMs: 1_000 });
      game.send({ t: 'round.cancel', ref: 'c.2', round: 'r1' });
      game.send({ t: 'declare', ref: 'd-1', actions });
      game.send({ t: 'state', ref: 'st-1', state: { score: 1 } });
      const last = await game.frame((f) => f.ref === 'c.2', 'answer to c.2');
      await game.frame((f) => f.ref === 'st-1', 'answer to st-1');
      assert.deepEqual(gameCtl(), [
        { op: 'declare', actions, welcomeGrant: 500 },
        { op: 'round.open', tenant: 'acme', round: 'r1', kind: 'market', outcomes: ['left', 'right'], durationMs: 30_000, liquidity: 100 },
        { op: 'round.settle', tenant: 'acme', round: 'r7', outcome: 'left' },
        { op: 'round.cancel', tenant: 'acme', round: 'r1' },
        { op: 'round.open', tenant: 'acme', round: 'r2', kind: 'pool', outcomes: ['a', 'b', 'c'], durationMs: 1_000 },
        { op: 'round.cancel', tenant: 'acme', round: 'r1' },
        { op: 'declare', actions },
        { op: 'state', state: { score: 1 } },
      ]);
      assert.deepEqual(
        game.frames.filter((f) => f.t !== 'welcome'),
        [
          { t: 'result', ref: 'o-1', ok: true, round: ROUND },
          { t: 'error', code: 'CP_ERR_ROUND_UNKNOWN', message: 'unknown round r7', ref: 's:1' },
          { t: 'result', ref: 'c.2', ok: true, round: { ...ROUND, state: 'cancelled' } },
          { t: 'result', ref: 'd-1', ok: true },
          { t: 'result', ref: 'st-1', ok: true },
        ],
      );
      assert.equal(last.t, 'result');
    } finally {
      h.shard.ctlReply = () => ({ ok: true });
      await game.close();
      await waitUntil(() => h.gateway.stats().games === 0, 'game gone');
    }
  });

  it('round ops - an invalid request with ref gets CP_ERR_PROTO_INVALID with that ref and reaches no shard', async () => {
    const game = await connected(h.wsUrl({ role: 'game', channel: 'gameroom', key: suite.acme.apiKey }));
    try {
      const before = gameCtl().length;
      game.send({ t: 'round.open', ref: 'bad-1', round: 'r3', kind: 'pool', outcomes: ['only'], durationMs: 1_000 });
      game.send({ t: 'round.settle', ref: 'bad-2', round: 'r3' });
      game.send({ t: 'round.cancel', ref: 'not a ref', round: 'r3', extra: 1 });
      game.send({ t: 'round.open', ref: 'bad-3', round: 'r3', kind: 'lottery', outcomes: ['a', 'b'], durationMs: 1_000 });
      await game.frame((f) => f.ref === 'bad-3', 'error for bad-3');
      const errors = game.frames.filter((f) => f.t === 'error');
      assert.deepEqual(
        errors.map((e) => [e.code, e.ref]),
        [
          ['CP_ERR_PROTO_INVALID', 'bad-1'],
          ['CP_ERR_PROTO_INVALID', 'bad-2'],
          ['CP_ERR_PROTO_INVALID', undefined],
          ['CP_ERR_PROTO_INVALID', 'bad-3'],
        ],
      );
      assert.equal(game.frames.filter((f) => f.t === 'ack').length, 0, 'a game gets no acks');
      assert.equal(gameCtl().length, before, 'nothing forwarded');
    } finally {
      await game.close();
      await waitUntil(() => h.gateway.stats().games === 0, 'game gone');
    }
  });

  it('round ops - no shard answering gives CP_ERR_CHANNEL_UNAVAILABLE with the ref', async () => {
    const game = await connected(h.wsUrl({ role: 'game', channel: 'nobody-serves', key: suite.acme.apiKey }));
    try {
      game.send({ t: 'round.settle', ref: 'lost-1', round: 'r1', outcome: 'a' });
      const err = await game.frame((f) => f.t === 'error', 'error');
      assert.deepEqual(
        { ...err, message: undefined },
        { t: 'error', code: 'CP_ERR_CHANNEL_UNAVAILABLE', ref: 'lost-1', message: undefined },
      );
    } finally {
      await game.close();
    }
  });
});

describe('gateway rounds - grants through the tenant API', () => {
  it('a committed grant is published for the shards and pushed to the viewer’s sockets on every channel; a replay is not', async () => {
    const ledger = new Ledger(suite.store.db, { commitMs: 1, commitMaxTransfers: 100, maxQueued: 1_000 });
    const h = await startHarness({ store: suite.store, channels: [suite.channel, OTHER], ledger });
    try {
      const credits: WalletCredit[] = [];
      h.bus.subscribe(h.subj.walletCredits(), (m) => credits.push(decodeJson<WalletCredit>(m.data)));
      const [a1, a2, b] = await Promise.all([viewer(h, 'gina'), viewer(h, 'gina', OTHER), viewer(h, 'hugo')]);
      const grant = (id: string) =>
        fetch(`http://127.0.0.1:${h.port}/v1/grants`, {
          method: 'POST',
          headers: { authorization: `Bearer ${suite.acme.apiKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ viewer: 'gina', points: 70, id }),
        });
      assert.equal((await grant('g-gina-1')).status, 200);
      const want = { t: 'balance', points: 70, reason: 'grant', delta: 70 };
      assert.deepEqual(await a1.frame((f) => f.t === 'balance' && f.reason === 'grant', 'grant on room'), want);
      assert.deepEqual(await a2.frame((f) => f.t === 'balance' && f.reason === 'grant', 'grant on room2'), want);
      assert.deepEqual(credits, [{ tenant: 'acme', viewer: 'gina', points: 70, balance: 70 }]);
      assert.equal((await grant('g-gina-1')).status, 200, 'the replay answers 200');
      // A new grant after the replay: once its frame is on the socket, anything the replay published is too.
      assert.equal((await grant('g-gina-2')).status, 200);
      await waitUntil(() => a1.frames.filter((f) => f.reason === 'grant').length >= 2, 'the second grant on room');
      assert.deepEqual(credits.slice(1), [{ tenant: 'acme', viewer: 'gina', points: 70, balance: 140 }], 'a replay publishes nothing');
      assert.equal(a1.frames.filter((f) => f.reason === 'grant').length, 2);
      assert.equal(b.frames.filter((f) => f.t === 'balance' && f.reason === 'grant').length, 0, 'another viewer gets nothing');
    } finally {
      await h.close();
      await ledger.close();
    }
  });
});
