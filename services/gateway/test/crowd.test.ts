import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect as netConnect, type Socket } from 'node:net';
import {
  connected,
  Client,
  metricValue,
  openSuiteStore,
  startHarness,
  updateFrame,
  viewerToken,
  waitUntil,
  type SuiteStore,
} from './helpers.ts';

let suite: SuiteStore;
before(async () => {
  suite = await openSuiteStore();
});
after(async () => {
  await suite.close();
});

async function viewer(
  h: Awaited<ReturnType<typeof startHarness>>,
  sub: string,
  extra: Record<string, string | number> = {},
): Promise<Client> {
  const token = await viewerToken(suite.acme.tenant.signingSecret, { sub });
  return connected(h.wsUrl({ role: 'crowd', channel: suite.channel, token, ...extra }));
}

/** The underlying TCP socket of a ws client (to stop reading from it). */
function tcp(c: Client): Socket {
  return (c.ws as unknown as { _socket: Socket })._socket;
}

describe('gateway crowd', () => {
  it('crowd - a valid token gets a welcome, an act is forwarded and acked ok', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel] });
    try {
      const c = await viewer(h, 'alice');
      const w = await c.welcome();
      assert.equal(w.v, 1);
      assert.equal(w.role, 'crowd');
      assert.equal(w.channel, suite.channel);
      assert.equal(w.viewer, 'alice');
      assert.equal(w.tickMs, h.config.engine.tickMs);
      assert.equal(typeof w.serverTime, 'number');
      assert.equal(c.frames[0]?.t, 'welcome', 'the welcome is the first frame');
      c.act(1, 'pull', 'left');
      const ack = await c.ack(1);
      assert.deepEqual(ack, { t: 'ack', seq: 1, ok: true, cost: 0 });
      assert.equal(h.shard.batches.length, 1);
      const intent = h.shard.batches[0]!.intents[0]!;
      assert.equal(h.shard.batches[0]!.gw, h.gateway.id);
      assert.equal(intent.viewer, 'alice');
      assert.equal(intent.seq, 1);
      assert.equal(intent.action, 'pull');
      assert.equal(intent.option, 'left');
      assert.ok(Math.abs(intent.at - Date.now()) < 5_000);
      const text = await h.metricsText();
      assert.equal(metricValue(text, 'crowdplay_connections', { role: 'crowd' }), 1);
      assert.equal(metricValue(text, 'crowdplay_connections_opened_total', { role: 'crowd' }), 1);
      assert.equal(metricValue(text, 'crowdplay_intents_forwarded_total'), 1);
      assert.equal(metricValue(text, 'crowdplay_connect_setup_ms_count', { role: 'crowd' }), 1, 'connect setup time recorded once');
      await c.close();
      await waitUntil(() => h.gateway.stats().sockets === 0, 'socket gone');
      assert.equal(metricValue(await h.metricsText(), 'crowdplay_connections', { role: 'crowd' }), 0);
      assert.equal(h.gateway.stats().channels, 0, 'the last member left: unsubscribed');
    } finally {
      await h.close();
    }
  });

  it('micro-batching - intents of one channel travel in IntentBatches of at most INTENT_BATCH_MAX', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel], gateway: { intentBatchMs: 100, intentBatchMax: 3 } });
    try {
      const a = await viewer(h, 'alice');
      const b = await viewer(h, 'bob');
      // The joins travel in micro-batches too: let them go first, so the acts' batches are the only ones left.
      await waitUntil(() => h.shard.joins.length === 2, 'both joins published');
      a.act(1);
      b.act(1, 'pull', 'right');
      a.act(2);
      b.act(2);
      a.act(3, 'cheer', null);
      await Promise.all([a.ack(1), a.ack(2), a.ack(3), b.ack(1), b.ack(2)]);
      assert.deepEqual(
        h.shard.batches.map((x) => x.intents.length),
        [3, 2],
        'one batch sent early at INTENT_BATCH_MAX, the rest after INTENT_BATCH_MS',
      );
      const all = h.shard.batches.flatMap((x) => x.intents);
      assert.deepEqual(all.map((i) => `${i.viewer}:${i.seq}:${i.action}:${i.option ?? '-'}`).sort(), [
        'alice:1:pull:left',
        'alice:2:pull:left',
        'alice:3:cheer:-',
        'bob:1:pull:right',
        'bob:2:pull:left',
      ]);
      assert.equal(
        all.filter((i) => i.viewer === 'alice').every((i) => i.conn === all.find((j) => j.viewer === 'alice')!.conn),
        true,
      );
      const text = await h.metricsText();
      assert.equal(metricValue(text, 'crowdplay_intent_batches_total'), 2);
      assert.equal(metricValue(text, 'crowdplay_intents_forwarded_total'), 5);
    } finally {
      await h.close();
    }
  });

  it('moving channel - intents and joins the shard sends back are published again; the viewer sees one ack', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel] });
    try {
      h.shard.movingBatches = 2; // the join's batch and the first resend come back
      const c = await viewer(h, 'alice');
      await c.welcome();
      c.act(1, 'pull', 'left');
      const ack = await c.ack(1);
      assert.deepEqual(ack, { t: 'ack', seq: 1, ok: true, cost: 0 });
      assert.equal(c.frames.filter((f) => f.t === 'ack').length, 1, 'no refusal reached the viewer');
      assert.equal(h.shard.intents, 1, 'taken once');
      await waitUntil(() => h.shard.joins.length === 1, 'the join was sent again and taken');
      assert.equal(h.shard.joins[0]!.viewer, 'alice');
      assert.ok(h.shard.allBatches.filter((b) => b.joins?.length).length >= 2, 'sent back, then taken');
      const text = await h.metricsText();
      assert.ok((metricValue(text, 'crowdplay_intents_move_resent_total', { outcome: 'resent' }) ?? 0) >= 1, text);
      assert.equal(metricValue(text, 'crowdplay_intents_move_resent_total', { outcome: 'expired' }) ?? 0, 0);
    } finally {
      await h.close();
    }
  });

  it('moving channel - past INTENT_MOVE_RESEND_MS the viewer gets the refusal, without the bus-only fields', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel], gateway: { intentMoveResendMs: 150 } });
    try {
      const c = await viewer(h, 'alice');
      await c.welcome();
      await waitUntil(() => h.shard.joins.length === 1, 'joined');
      h.shard.movingBatches = 1_000;
      const t0 = Date.now();
      c.act(1, 'pull', 'left');
      const ack = await c.ack(1);
      assert.deepEqual(ack, { t: 'ack', seq: 1, ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE' });
      assert.ok(Date.now() - t0 >= 140, `refused after the resend window: ${Date.now() - t0} ms`);
      const tries = h.shard.allBatches.filter((b) => b.intents.some((i) => i.seq === 1)).length;
      assert.ok(tries >= 2, `published again before giving up: ${tries}`);
      assert.equal(h.shard.intents, 0, 'never taken');
      assert.equal(metricValue(await h.metricsText(), 'crowdplay_intents_move_resent_total', { outcome: 'expired' }), 1);
    } finally {
      await h.close();
    }
  });

  it('fan-out - one update reaches 3 sockets as identical text bytes', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel] });
    try {
      const clients = await Promise.all(['v1', 'v2', 'v3'].map((s) => viewer(h, s)));
      assert.equal(h.gateway.stats().channels, 1, 'one subscription for the channel');
      const sent = h.shard.publishUpdate(suite.channel, updateFrame(suite.channel, 42));
      const got = await Promise.all(clients.map((c) => c.frame((f) => f.t === 'update' && f.ev === 42, 'update 42')));
      assert.equal(got.length, 3);
      for (const c of clients) {
        const raw = c.raw.find((r) => r.data.equals(sent));
        assert.ok(raw, 'the exact bytes the shard published');
        assert.equal(raw.isBinary, false, 'sent as a text frame');
      }
      const text = await h.metricsText();
      assert.equal(metricValue(text, 'crowdplay_updates_sent_total'), 3);
      assert.equal(metricValue(text, 'crowdplay_broadcast_bytes_count'), 1, 'measured once per broadcast');
      assert.equal(metricValue(text, 'crowdplay_broadcast_bytes_sum'), sent.length);
    } finally {
      await h.close();
    }
  });

  it('join - the current update follows the welcome unless lastEventId is as new', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel] });
    try {
      h.shard.snapshots.set(suite.channel, JSON.stringify(updateFrame(suite.channel, 7)));
      const fresh = await viewer(h, 'fresh');
      const first = await fresh.frame((f) => f.t === 'update', 'snapshot update');
      assert.equal(first.ev, 7);
      assert.equal(fresh.frames[0]?.t, 'welcome');
      // A second viewer is served from the gateway's copy: no second ctl request.
      const resumed = await viewer(h, 'resumed', { lastEventId: 7 });
      const behind = await viewer(h, 'behind', { lastEventId: 6 });
      assert.equal((await behind.frame((f) => f.t === 'update', 'update for behind')).ev, 7);
      assert.equal(h.shard.ctl.filter((x) => x.req.op === 'snapshot').length, 1);
      h.shard.publishUpdate(suite.channel, updateFrame(suite.channel, 8));
      const next = await resumed.frame((f) => f.t === 'update', 'update for resumed');
      assert.equal(next.ev, 8, 'the viewer already at ev 7 did not get the snapshot again');
    } finally {
      await h.close();
    }
  });

  it('rate limit - over the per-viewer bucket acts are refused with CP_ERR_INTENT_RATE_LIMITED, counted and logged once', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel], gateway: { intentBurst: 3, intentRatePerS: 1 } });
    try {
      const c = await viewer(h, 'spammer');
      for (let seq = 1; seq <= 6; seq++) c.act(seq);
      const acks = await Promise.all([1, 2, 3, 4, 5, 6].map((s) => c.ack(s)));
      assert.deepEqual(
        acks.map((a) => a.ok),
        [true, true, true, false, false, false],
      );
      for (const a of acks.slice(3)) assert.equal(a.code, 'CP_ERR_INTENT_RATE_LIMITED');
      assert.equal(h.shard.intents, 3, 'refused intents never reach the shard');
      const text = await h.metricsText();
      assert.equal(metricValue(text, 'crowdplay_refusals_total', { area: 'gateway', reason: 'CP_ERR_INTENT_RATE_LIMITED' }), 3);
      assert.equal(metricValue(text, 'crowdplay_intents_forwarded_total'), 3);
      const lines = h.logs.filter((l) => l.reason === 'CP_ERR_INTENT_RATE_LIMITED');
      assert.equal(lines.length, 1, 'logged once per interval');
      // The same viewer on a second socket shares the bucket (key = tenant|viewer).
      const again = await viewer(h, 'spammer');
      again.act(1);
      assert.equal((await again.ack(1)).ok, false);
    } finally {
      await h.close();
    }
  });

  it('slow consumer - a client that stops reading is closed with 4008 and counted', async () => {
    const h = await startHarness({
      store: suite.store,
      channels: [suite.channel],
      gateway: { maxBufferedBytes: 65_536, skipBufferedBytes: 16_384 },
    });
    try {
      const slow = await viewer(h, 'slow');
      const fast = await viewer(h, 'fast');
      tcp(slow).pause();
      const pad = 'x'.repeat(200_000);
      let ev = 0;
      let maxBuffered = 0;
      await waitUntil(
        async () => {
          h.shard.publishUpdate(suite.channel, updateFrame(suite.channel, ++ev, { game: { pad } }));
          await h.bus.flush();
          const m = await h.metricsText();
          maxBuffered = Math.max(maxBuffered, metricValue(m, 'crowdplay_ws_buffered_bytes') ?? 0);
          return metricValue(m, 'crowdplay_slow_consumer_closes_total') === 1 || ev >= 2_000;
        },
        'slow consumer close',
        60_000,
      );
      const text = await h.metricsText();
      assert.equal(metricValue(text, 'crowdplay_slow_consumer_closes_total'), 1);
      assert.equal(metricValue(text, 'crowdplay_refusals_total', { reason: 'CP_ERR_LIMIT_SLOW_CONSUMER' }), 1);
      // Its unsent bytes showed in crowdplay_ws_buffered_bytes (past the skip bound) before the close.
      assert.ok(maxBuffered > 16_384, `buffered ${maxBuffered} bytes at most`);
      tcp(slow).resume();
      const closed = await slow.closed;
      assert.equal(closed.code, 4008);
      const err = slow.frames.find((f) => f.t === 'error');
      assert.equal(err?.code, 'CP_ERR_LIMIT_SLOW_CONSUMER');
      // The reading client is unaffected and has the newest update.
      await fast.frame((f) => f.t === 'update' && f.ev === ev, 'newest update on the fast client', 10_000);
      assert.equal(fast.ws.readyState, fast.ws.OPEN);
    } finally {
      await h.close();
    }
  });

  it('skip - a socket over WS_SKIP_BUFFERED_BYTES skips updates and then gets the newest, not the backlog', async () => {
    const h = await startHarness({
      store: suite.store,
      channels: [suite.channel],
      gateway: { maxBufferedBytes: 64 * 1_048_576, skipBufferedBytes: 1_024 },
    });
    try {
      const c = await viewer(h, 'lagging');
      tcp(c).pause();
      const pad = 'y'.repeat(100_000);
      let ev = 0;
      await waitUntil(
        async () => {
          h.shard.publishUpdate(suite.channel, updateFrame(suite.channel, ++ev, { game: { pad } }));
          await h.bus.flush();
          return metricValue(await h.metricsText(), 'crowdplay_updates_skipped_total') >= 5 || ev >= 2_000;
        },
        'skipped updates',
        60_000,
      );
      const last = ev;
      tcp(c).resume();
      await c.frame((f) => f.t === 'update' && f.ev === last, 'the newest update after catching up', 20_000);
      const received = c.frames.filter((f) => f.t === 'update').map((f) => f.ev as number);
      assert.ok(received.length < last, `skipped some updates (got ${received.length} of ${last})`);
      assert.deepEqual(
        received,
        [...received].sort((x, y) => x - y),
        'in order',
      );
      assert.equal(c.ws.readyState, c.ws.OPEN, 'not closed: under the max');
      const text = await h.metricsText();
      assert.equal(metricValue(text, 'crowdplay_updates_sent_total') + metricValue(text, 'crowdplay_updates_skipped_total') >= last, true);
      assert.equal(metricValue(text, 'crowdplay_slow_consumer_closes_total'), 0);
    } finally {
      await h.close();
    }
  });

  it('request deadline - a socket outlives HTTP_REQUEST_TIMEOUT_MS: the deadline ends at the upgrade', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel], http: { requestTimeoutMs: 100 } });
    try {
      const c = await viewer(h, 'patient');
      // A request that stalls after c opened is cut at the deadline; once it is, c has lived past it too.
      const stalled = await new Promise<string>((resolve) => {
        let text = '';
        const s = netConnect(h.port, '127.0.0.1', () => s.write('GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: '));
        s.on('data', (d) => (text += String(d)));
        s.on('error', () => undefined);
        s.on('close', () => resolve(text));
      });
      assert.match(stalled, /^HTTP\/1\.1 408 /);
      assert.equal(c.ws.readyState, c.ws.OPEN, 'the socket is still open');
      c.act(1, 'pull', 'left');
      assert.equal((await c.ack(1)).ok, true);
    } finally {
      await h.close();
    }
  });

  it('heartbeat - a socket that does not answer pings is terminated and counted; one that does stays', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel], gateway: { pingIntervalMs: 40 } });
    try {
      const token = await viewerToken(suite.acme.tenant.signingSecret, { sub: 'mute' });
      const mute = await connected(h.wsUrl({ role: 'crowd', channel: suite.channel, token }), { autoPong: false });
      const live = await connected(
        h.wsUrl({ role: 'crowd', channel: suite.channel, token: await viewerToken(suite.acme.tenant.signingSecret, { sub: 'live' }) }),
      );
      const closed = await mute.closed;
      assert.equal(closed.code, 1006, 'terminated without a close frame');
      assert.equal(live.ws.readyState, live.ws.OPEN, 'a socket that answers pings stays open');
      assert.equal(metricValue(await h.metricsText(), 'crowdplay_refusals_total', { reason: 'CP_ERR_LIMIT_PING_TIMEOUT' }), 1);
      await live.close();
    } finally {
      await h.close();
    }
  });

  it('drain - readiness turns false, sockets get CP_ERR_LIMIT_DRAINING and 1001, pending intents are published', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel], gateway: { intentBatchMs: 100, intentBatchMax: 100 } });
    try {
      assert.equal((await h.gateway.app.inject({ url: '/readyz' })).statusCode, 200);
      const c = await viewer(h, 'leaving');
      c.act(1);
      await waitUntil(() => h.gateway.stats().pendingIntents === 1, 'intent waiting in its micro-batch');
      await h.gateway.drain();
      assert.equal(h.gateway.state, 'draining');
      assert.equal((await h.gateway.app.inject({ url: '/readyz' })).statusCode, 503);
      const closed = await c.closed;
      assert.equal(closed.code, 1001);
      assert.equal(c.frames.find((f) => f.t === 'error')?.code, 'CP_ERR_LIMIT_DRAINING');
      await waitUntil(() => h.shard.intents === 1, 'the pending batch was flushed');
      assert.equal(h.gateway.stats().sockets, 0);
      const late = new Client(h.wsUrl({ role: 'crowd', channel: suite.channel, token: 'x' }));
      const refused = await late.refused;
      assert.equal(refused.status, 503);
      assert.equal((JSON.parse(refused.body) as { code: string }).code, 'CP_ERR_LIMIT_DRAINING');
    } finally {
      await h.close();
    }
  });
});
