import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import { isCrowdplayError, parseInbound, type Batch } from '@crowdplay/protocol';
import { MultiGameClient, type MultiGameEvents } from '@crowdplay/sdk-game';
import { nextEvent } from '@crowdplay/testing';

type Frame = Record<string, unknown> & { t: string };

/** A gateway stand-in: welcomes multi sockets, answers attach with every channel asked (after `failAttach` refusals), records frames. */
async function fakeGateway(failAttach = 0): Promise<{
  url: string;
  urls: URL[];
  frames: Frame[][];
  socks: WebSocket[];
  next(i: number, pred: (f: Frame) => boolean): Promise<Frame>;
  close(): Promise<void>;
}> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await once(wss, 'listening');
  const urls: URL[] = [];
  const frames: Frame[][] = [];
  const socks: WebSocket[] = [];
  const waiters = new Set<() => void>();
  wss.on('connection', (ws, req) => {
    const i = urls.length;
    urls.push(new URL(req.url ?? '/', 'http://x'));
    frames.push([]);
    socks.push(ws);
    ws.send(JSON.stringify({ t: 'welcome', v: 1, role: 'game', channel: '', multi: true, serverTime: Date.now(), tickMs: 250 }));
    ws.on('message', (raw) => {
      const f = JSON.parse(String(raw)) as Frame;
      frames[i]!.push(f);
      if (f.t === 'attach' && failAttach > 0) {
        failAttach--;
        ws.send(JSON.stringify({ t: 'error', ref: f.ref, code: 'CP_ERR_STORE_UNAVAILABLE', message: 'the database is unavailable' }));
      } else if (f.t === 'attach') ws.send(JSON.stringify({ t: 'attached', ref: f.ref, channels: f.channels ?? ['tg1', 'tg2'] }));
      else if (f.t === 'detach') ws.send(JSON.stringify({ t: 'detached', ref: f.ref, channels: f.channels ?? ['tg1', 'tg2'] }));
      for (const w of [...waiters]) w();
    });
    for (const w of [...waiters]) w();
  });
  const { port } = wss.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    urls,
    frames,
    socks,
    next: (i, pred) =>
      new Promise((resolve) => {
        const check = (): void => {
          const f = frames[i]?.find(pred);
          if (!f) return;
          waiters.delete(check);
          resolve(f);
        };
        waiters.add(check);
        check();
      }),
    close: async () => {
      for (const ws of wss.clients) ws.terminate();
      await new Promise<void>((r) => wss.close(() => r()));
    },
  };
}

test('multi game client - attaches its channels after the welcome, declares once, state per channel after attached', async () => {
  const gw = await fakeGateway();
  const c = new MultiGameClient({ url: gw.url, apiKey: 'k', channels: ['a1', 'b2'], backoff: { initialMs: 10, maxMs: 20 } });
  try {
    c.declare([{ name: 'vote', maxPerTick: 5, options: ['x', 'y'] }]);
    assert.equal(c.setState('a1', { n: 1 }), false, 'not attached yet: sent after the attach');
    const attached = nextEvent<MultiGameEvents, 'attached'>(c, 'attached');
    await c.connect();
    assert.deepEqual([gw.urls[0]?.searchParams.get('multi'), gw.urls[0]?.searchParams.get('channel')], ['1', null]);
    assert.deepEqual((await attached)[0], ['a1', 'b2']);
    await gw.next(0, (f) => f.t === 'state');
    assert.deepEqual(
      gw.frames[0]!.map((f) => [f.t, f.channel ?? null]),
      [
        ['declare', null],
        ['attach', null],
        ['state', 'a1'],
      ],
    );
    assert.deepEqual(gw.frames[0]![1]!.channels, ['a1', 'b2']);
    assert.deepEqual(c.attached, ['a1', 'b2']);
  } finally {
    await c.close();
    await gw.close();
  }
});

test("multi game client - batches by channel; a reconnect attaches again with each channel's resume point", async () => {
  const gw = await fakeGateway();
  const c = new MultiGameClient({ url: gw.url, apiKey: 'k', channels: ['a1', 'b2'], backoff: { initialMs: 10, maxMs: 20 } });
  try {
    await c.connect();
    await gw.next(0, (f) => f.t === 'attach');
    const b = nextEvent<MultiGameEvents, 'batch'>(c, 'batch');
    const batch: Batch = { t: 'batch', channel: 'b2', ev: 42, tick: 1, closedAt: Date.now(), actions: {} };
    gw.socks[0]!.send(JSON.stringify(batch));
    assert.equal((await b)[0].channel, 'b2');
    gw.socks[0]!.terminate();
    const again = await gw.next(1, (f) => f.t === 'attach');
    assert.deepEqual(again.lastEventIds, { b2: 42 });
  } finally {
    await c.close();
    await gw.close();
  }
});

test('multi game client - rounds name their channel; a refusal rejects with its code; chats attaches every chat', async () => {
  const gw = await fakeGateway();
  const c = new MultiGameClient({ url: gw.url, apiKey: 'k', chats: true, retryDeadlineMs: 0 });
  try {
    const attached = nextEvent<MultiGameEvents, 'attached'>(c, 'attached');
    await c.connect();
    assert.deepEqual((await attached)[0], ['tg1', 'tg2']);
    assert.equal((await gw.next(0, (f) => f.t === 'attach')).chats, true);
    const opened = c.openRound({ channel: 'tg2', round: 'r1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 1_000 });
    const f = await gw.next(0, (x) => x.t === 'round.open');
    assert.equal(f.channel, 'tg2');
    gw.socks[0]!.send(JSON.stringify({ t: 'result', ref: f.ref, channel: 'tg2', ok: true, round: { id: 'r1', state: 'open' } }));
    assert.equal((await opened).id, 'r1');
    const settle = c.settleRound('tg9', 'r1', 'a');
    const s = await gw.next(0, (x) => x.t === 'round.settle');
    gw.socks[0]!.send(
      JSON.stringify({ t: 'error', ref: s.ref, channel: 'tg9', code: 'CP_ERR_GAME_NOT_ATTACHED', message: 'not attached' }),
    );
    await assert.rejects(settle, (err: unknown) => isCrowdplayError(err, 'CP_ERR_GAME_NOT_ATTACHED'));
  } finally {
    await c.close();
    await gw.close();
  }
});

test('multi game client - a channel named twice is asked for once; detaching every chat sends a valid frame', async () => {
  const gw = await fakeGateway();
  const c = new MultiGameClient({ url: gw.url, apiKey: 'k', chats: true, retryDeadlineMs: 0 });
  try {
    await c.connect();
    await gw.next(0, (f) => f.t === 'attach');
    const got = await c.attach(['room1', 'room1', 'room2']);
    assert.deepEqual(got.channels, ['room1', 'room2']);
    const attach = gw.frames[0]!.filter((f) => f.t === 'attach').at(-1)!;
    assert.deepEqual(attach.channels, ['room1', 'room2']);
    assert.deepEqual(await c.detach([], { chats: true }), ['tg1', 'tg2']);
    const detach = await gw.next(0, (f) => f.t === 'detach');
    assert.equal(detach.chats, true);
    assert.equal('channels' in detach, false, 'no empty list');
    // What the gateway's decoder accepts: every frame this client sent.
    for (const f of gw.frames[0]!) assert.doesNotThrow(() => parseInbound('multigame', JSON.stringify(f)), JSON.stringify(f));
  } finally {
    await c.close();
    await gw.close();
  }
});

test('multi game client - a state or declaration over the frame limit is refused, not sent nor kept for reconnects', async () => {
  const gw = await fakeGateway();
  const c = new MultiGameClient({ url: gw.url, apiKey: 'k', channels: ['room1'], retryDeadlineMs: 0 });
  try {
    const attached = nextEvent<MultiGameEvents, 'attached'>(c, 'attached');
    await c.connect();
    await attached;
    assert.equal(c.setState('room1', { n: 1 }), true);
    await gw.next(0, (f) => f.t === 'state');
    assert.throws(
      () => c.setState('room1', { a: 'x'.repeat(70_000) }),
      (e: unknown) => isCrowdplayError(e, 'CP_ERR_GAME_STATE_TOO_BIG'),
    );
    const labels = Object.fromEntries(Array.from({ length: 32 }, (_, i) => [`o${i}`, 'y'.repeat(64)]));
    const actions = Array.from({ length: 32 }, (_, i) => ({
      name: `a${i}`,
      maxPerTick: 1,
      label: 'z'.repeat(64),
      options: Object.keys(labels),
      optionLabels: labels,
    }));
    assert.throws(
      () => c.declare(actions),
      (e: unknown) => isCrowdplayError(e, 'CP_ERR_GAME_INVALID_DECLARE') && /frame limit/.test(e.message),
    );
    // A reconnect re-sends what was kept: the small state only.
    const again = nextEvent<MultiGameEvents, 'attached'>(c, 'attached');
    gw.socks[0]!.terminate();
    await again;
    await gw.next(1, (f) => f.t === 'state');
    const sent = gw.frames.flat();
    assert.equal(sent.filter((f) => f.t === 'declare').length, 0, 'no declaration sent');
    assert.deepEqual(
      sent.filter((f) => f.t === 'state').map((f) => f.state),
      [{ n: 1 }, { n: 1 }],
      'only the state within the limit, before and after the reconnect',
    );
  } finally {
    await c.close();
    await gw.close();
  }
});

test('multi game client - bad input is refused before anything is sent', async () => {
  assert.throws(
    () => new MultiGameClient({ url: 'http://127.0.0.1:1', apiKey: 'k', channels: ['bad id'] }),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_CHANNEL_INVALID_ID'),
  );
  const c = new MultiGameClient({ url: 'http://127.0.0.1:1', apiKey: 'k', channels: ['a1'], autoReconnect: false });
  assert.throws(
    () => c.declare([{ name: 'bad name!', maxPerTick: 1 }]),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_GAME_INVALID_DECLARE'),
  );
  assert.throws(
    () => c.declare([{ name: 'v', maxPerTick: 1 }], { channel: 'bad id' }),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_GAME_INVALID_DECLARE'),
  );
  await assert.rejects(c.openRound({ channel: 'a1', round: 'r1', kind: 'pool', outcomes: ['a'], durationMs: 1_000 }), (e: unknown) =>
    isCrowdplayError(e, 'CP_ERR_ROUND_INVALID'),
  );
  await c.close();
});

test('multi game client - an attach refused as retryable is sent again', async () => {
  const gw = await fakeGateway(2);
  const c = new MultiGameClient({ url: gw.url, apiKey: 'k', channels: ['a1'], backoff: { initialMs: 10, maxMs: 20 } });
  try {
    const attached = nextEvent<MultiGameEvents, 'attached'>(c, 'attached');
    await c.connect();
    assert.deepEqual((await attached)[0], ['a1']);
    assert.equal(gw.frames[0]!.filter((f) => f.t === 'attach').length, 3);
  } finally {
    await c.close();
    await gw.close();
  }
});
