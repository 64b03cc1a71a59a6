import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Assignment } from '@crowdplay/router';
import { PRE_AUTH_MAX_FRAMES } from '../src/index.ts';
import {
  Client,
  connected,
  fakeRouter,
  metricValue,
  openSuiteStore,
  startHarness,
  viewerToken,
  waitUntil,
  type Harness,
  type SuiteStore,
} from './helpers.ts';

let suite: SuiteStore;
let h: Harness;
before(async () => {
  suite = await openSuiteStore();
  h = await startHarness({
    store: suite.store,
    channels: [suite.channel, 'gameroom'],
    gateway: { protocolErrorLimit: 5, gameCtlRetryMs: 300 },
  });
});
after(async () => {
  await h.close();
  await suite.close();
});

async function viewer(harness: Harness, sub = 'v'): Promise<Client> {
  return connected(
    harness.wsUrl({ role: 'crowd', channel: suite.channel, token: await viewerToken(suite.acme.tenant.signingSecret, { sub }) }),
  );
}

/**
 * Sends `frame` on a fresh viewer socket and expects an error frame with
 * `code`; the socket stays open, nothing is forwarded, the refusal is
 * counted, and a valid act afterwards still works.
 */
async function expectFrameError(frame: string | Buffer, code: string): Promise<void> {
  const c = await viewer(h);
  const refusedBefore = metricValue(await h.metricsText(), 'crowdplay_refusals_total', { reason: code });
  const intentsBefore = h.shard.intents;
  c.ws.send(frame, { binary: Buffer.isBuffer(frame) });
  const err = await c.frame((f) => f.t === 'error', `error ${code}`);
  assert.equal(err.code, code);
  assert.equal(typeof err.message, 'string');
  // A valid act afterwards is processed; the bad frame forwarded nothing.
  c.act(9);
  assert.equal((await c.ack(9)).ok, true);
  assert.equal(h.shard.intents, intentsBefore + 1, 'only the valid act was forwarded');
  assert.deepEqual(
    h.shard.batches.at(-1)?.intents.map((i) => i.seq),
    [9],
  );
  assert.equal(metricValue(await h.metricsText(), 'crowdplay_refusals_total', { area: 'gateway', reason: code }), refusedBefore + 1);
  assert.equal(c.ws.readyState, c.ws.OPEN, 'one bad frame does not close the socket');
  await c.close();
}

/**
 * A gateway whose router answers only after `release()`, and a viewer socket
 * on it that is upgraded but not yet welcomed (auth waits on the router).
 */
async function gatedViewer(): Promise<{ slow: Harness; release: () => void; c: Client }> {
  let release: () => void = () => undefined;
  const gate = new Promise<void>((r) => (release = r));
  const slow = await startHarness({
    store: suite.store,
    channels: [suite.channel],
    router: fakeRouter(async (channel): Promise<Assignment> => {
      await gate;
      return { channel, shard: 's1', epoch: 1 };
    }),
  });
  const c = new Client(slow.wsUrl({ role: 'crowd', channel: suite.channel, token: await viewerToken(suite.acme.tenant.signingSecret) }));
  await c.opened;
  return { slow, release, c };
}

describe('gateway protocol', () => {
  it('crowd - malformed JSON gets CP_ERR_PROTO_MALFORMED and changes nothing', async () => {
    await expectFrameError('{"t":"act",', 'CP_ERR_PROTO_MALFORMED');
    await expectFrameError('[1,2]', 'CP_ERR_PROTO_MALFORMED');
  });

  it('crowd - an unknown message type gets CP_ERR_PROTO_UNKNOWN_TYPE', async () => {
    await expectFrameError(JSON.stringify({ t: 'declare', actions: [] }), 'CP_ERR_PROTO_UNKNOWN_TYPE');
    await expectFrameError(JSON.stringify({ seq: 1 }), 'CP_ERR_PROTO_UNKNOWN_TYPE');
  });

  it('crowd - a schema-invalid act (negative seq, extra field, bad name) gets CP_ERR_PROTO_INVALID', async () => {
    await expectFrameError(JSON.stringify({ t: 'act', seq: -1, action: 'pull' }), 'CP_ERR_PROTO_INVALID');
    await expectFrameError(JSON.stringify({ t: 'act', seq: 1, action: 'pull', points: 5 }), 'CP_ERR_PROTO_INVALID');
    await expectFrameError(JSON.stringify({ t: 'act', seq: 1.5, action: 'pull' }), 'CP_ERR_PROTO_INVALID');
    await expectFrameError(JSON.stringify({ t: 'act', seq: 1, action: 'no spaces' }), 'CP_ERR_PROTO_INVALID');
  });

  it('crowd - a binary frame gets CP_ERR_PROTO_INVALID', async () => {
    await expectFrameError(Buffer.from(JSON.stringify({ t: 'act', seq: 1, action: 'pull' })), 'CP_ERR_PROTO_INVALID');
  });

  it('crowd - a frame over WS_MAX_MESSAGE_BYTES closes the socket with 1009, counted as CP_ERR_PROTO_TOO_BIG', async () => {
    const c = await viewer(h);
    const before = await h.metricsText();
    const intentsBefore = h.shard.intents;
    const big = JSON.stringify({ t: 'act', seq: 1, action: 'pull', option: 'x'.repeat(h.config.gateway.maxMessageBytes) });
    c.send(big);
    const closed = await c.closed;
    assert.equal(closed.code, 1009);
    await waitUntil(
      async () => metricValue(await h.metricsText(), 'crowdplay_refusals_total', { reason: 'CP_ERR_PROTO_TOO_BIG' }) === 1,
      'refusal counted',
    );
    assert.equal(h.shard.intents, intentsBefore);
    assert.equal(
      metricValue(await h.metricsText(), 'crowdplay_intents_forwarded_total'),
      metricValue(before, 'crowdplay_intents_forwarded_total'),
    );
    // A frame of exactly the limit is accepted (and merely invalid here).
    const d = await viewer(h);
    const atLimit = JSON.stringify({ t: 'act', seq: 1, action: 'pull', pad: '' });
    d.send(atLimit.replace('""', `"${'p'.repeat(h.config.gateway.maxMessageBytes - atLimit.length)}"`));
    assert.equal((await d.frame((f) => f.t === 'error')).code, 'CP_ERR_PROTO_INVALID');
    await d.close();
  });

  it('crowd - WS_PROTOCOL_ERROR_LIMIT errors close the socket with 4400 CP_ERR_PROTO_VIOLATIONS', async () => {
    const c = await viewer(h);
    const limit = h.config.gateway.protocolErrorLimit;
    for (let i = 0; i < limit; i++) c.send('nope');
    const closed = await c.closed;
    assert.equal(closed.code, 4400);
    const errors = c.frames.filter((f) => f.t === 'error').map((f) => f.code);
    assert.deepEqual(errors, [...Array<string>(limit).fill('CP_ERR_PROTO_MALFORMED'), 'CP_ERR_PROTO_VIOLATIONS']);
    assert.equal(metricValue(await h.metricsText(), 'crowdplay_refusals_total', { reason: 'CP_ERR_PROTO_VIOLATIONS' }), 1);
  });

  it('crowd - frames sent before the welcome are processed after it, in order', async () => {
    const { slow, release, c } = await gatedViewer();
    try {
      c.act(1);
      c.act(2);
      await waitUntil(() => slow.gateway.stats().sockets === 1, 'socket accepted');
      assert.equal(c.frames.length, 0, 'no welcome yet');
      release();
      await Promise.all([c.ack(1), c.ack(2)]);
      assert.deepEqual(
        c.frames.map((f) => f.t),
        ['welcome', 'ack', 'ack'],
      );
      assert.deepEqual(
        slow.shard.batches.flatMap((b) => b.intents.map((i) => i.seq)),
        [1, 2],
      );
      await c.close();
    } finally {
      release();
      await slow.close();
    }
  });

  it('crowd - more than PRE_AUTH_MAX_FRAMES frames before the welcome close the socket with 4400', async () => {
    const { slow, release, c } = await gatedViewer();
    try {
      for (let seq = 1; seq <= PRE_AUTH_MAX_FRAMES + 1; seq++) c.act(seq);
      const closed = await c.closed;
      assert.equal(closed.code, 4400);
      assert.deepEqual(
        c.frames.map((f) => [f.t, f.code]),
        [['error', 'CP_ERR_PROTO_VIOLATIONS']],
      );
      release();
      await waitUntil(() => slow.gateway.stats().sockets === 0, 'socket gone');
      assert.equal(slow.shard.intents, 0);
    } finally {
      release();
      await slow.close();
    }
  });

  it('game - declare and state become ch.<C>.ctl requests; a refusal comes back as an error frame', async () => {
    const game = await connected(h.wsUrl({ role: 'game', channel: 'gameroom', key: suite.acme.apiKey }));
    const actions = [{ name: 'pull', maxPerTick: 10, options: ['left', 'right'] }];
    game.send({ t: 'declare', actions });
    game.send({ t: 'state', state: { position: 3 } });
    await waitUntil(() => h.shard.ctl.filter((x) => x.channel === 'gameroom').length === 2, 'two ctl requests');
    assert.deepEqual(
      h.shard.ctl.filter((x) => x.channel === 'gameroom').map((x) => x.req),
      [
        { op: 'declare', actions },
        { op: 'state', state: { position: 3 } },
      ],
    );
    h.shard.ctlReply = () => ({ ok: false, code: 'CP_ERR_GAME_STATE_TOO_BIG', message: 'game state larger than 16384 bytes' });
    game.send({ t: 'state', state: { big: true } });
    const err = await game.frame((f) => f.t === 'error');
    assert.equal(err.code, 'CP_ERR_GAME_STATE_TOO_BIG');
    h.shard.ctlReply = () => ({ ok: true });
    // Invalid declare: refused at the edge, never sent to the shard.
    const ctlBefore = h.shard.ctl.length;
    game.send({ t: 'declare', actions: [{ name: 'pull', maxPerTick: 0 }] });
    const invalid = await game.frame((f) => f.t === 'error' && f.code === 'CP_ERR_PROTO_INVALID');
    assert.ok(invalid);
    assert.equal(h.shard.ctl.length, ctlBefore);
    assert.equal(game.ws.readyState, game.ws.OPEN);
    await game.close();
  });

  it('game - a declare or state refused as retryable is sent again, in order, until GAME_CTL_RETRY_MS; any other refusal once', async () => {
    const game = await connected(h.wsUrl({ role: 'game', channel: 'gameroom', key: suite.acme.apiKey }));
    const mine = (): Array<{ op: string }> => h.shard.ctl.filter((x) => x.channel === 'gameroom').map((x) => x.req as { op: string });
    const resent = async (outcome: string): Promise<number> =>
      metricValue(await h.metricsText(), 'crowdplay_game_ctl_retried_total', { outcome });
    try {
      const [resentBefore, expiredBefore] = [await resent('resent'), await resent('expired')];
      const from = mine().length;
      let refusals = 2;
      h.shard.ctlReply = (_ch, req) =>
        req.op === 'declare' && refusals-- > 0 ? { ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'moving' } : { ok: true };
      const actions = [{ name: 'pull', maxPerTick: 10 }];
      game.send({ t: 'declare', actions });
      game.send({ t: 'state', state: { after: 1 } });
      await waitUntil(() => mine().length === from + 4, 'three declares, then the state');
      assert.deepEqual(
        mine()
          .slice(from)
          .map((r) => r.op),
        ['declare', 'declare', 'declare', 'state'],
      );
      assert.equal(await resent('resent'), resentBefore + 2);
      // Refused until the deadline: one error frame, counted expired.
      h.shard.ctlReply = () => ({ ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'moving' });
      const at = Date.now();
      game.send({ t: 'declare', actions });
      assert.equal((await game.frame((f) => f.t === 'error')).code, 'CP_ERR_CHANNEL_UNAVAILABLE');
      assert.ok(Date.now() - at >= 300, 'refused after GAME_CTL_RETRY_MS');
      assert.equal(await resent('expired'), expiredBefore + 1);
      // A final refusal is sent once.
      const n = mine().length;
      game.frames.length = 0;
      h.shard.ctlReply = () => ({ ok: false, code: 'CP_ERR_GAME_INVALID_DECLARE', message: 'no' });
      game.send({ t: 'declare', actions });
      assert.equal((await game.frame((f) => f.t === 'error')).code, 'CP_ERR_GAME_INVALID_DECLARE');
      assert.equal(mine().length, n + 1);
    } finally {
      h.shard.ctlReply = () => ({ ok: true });
      await game.close();
    }
  });

  it('game - batches on ch.<C>.game are forwarded as the same bytes; no shard answering gives CP_ERR_CHANNEL_UNAVAILABLE', async () => {
    const game = await connected(h.wsUrl({ role: 'game', channel: 'orphan', key: suite.acme.apiKey }));
    const batch = Buffer.from(JSON.stringify({ t: 'batch', channel: 'orphan', ev: 1, tick: 1, closedAt: Date.now(), actions: {} }));
    h.bus.publish(h.subj.channelGame('orphan'), batch);
    await game.frame((f) => f.t === 'batch');
    const raw = game.raw.find((r) => r.data.equals(batch));
    assert.ok(raw);
    assert.equal(raw.isBinary, false);
    const refusals = async (): Promise<number> =>
      metricValue(await h.metricsText(), 'crowdplay_refusals_total', { reason: 'CP_ERR_CHANNEL_UNAVAILABLE' });
    const refusedBefore = await refusals();
    game.send({ t: 'state', state: {} }); // nobody answers ch.orphan.ctl
    assert.equal((await game.frame((f) => f.t === 'error')).code, 'CP_ERR_CHANNEL_UNAVAILABLE');
    assert.ok((await refusals()) > refusedBefore, 'each unanswered request counted as a refusal');
    await game.close();
    await waitUntil(() => h.gateway.stats().games === 0, 'game gone');
    // After the game left, its batches go nowhere (unsubscribed).
    h.bus.publish(h.subj.channelGame('orphan'), batch);
    await h.bus.flush();
    assert.equal(game.raw.filter((r) => r.data.equals(batch)).length, 1);
  });
});
