import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { nextEvent } from '@crowdplay/testing';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { WebSocketServer, WebSocket } from 'ws';
import type { AddressInfo } from 'node:net';
import {
  CloseCode,
  CrowdplayError,
  isCrowdplayError,
  type ActAck,
  type BalanceFrame,
  type ChannelUpdate,
  type RoundView,
} from '@crowdplay/protocol';
import {
  backoffDelayMs,
  buildWsUrl,
  NO_RECONNECT_CLOSE_CODES,
  ViewerClient,
  type ConnectionState,
  type ViewerClientOptions,
  type ViewerEvents,
  type WebSocketConstructor,
} from '@crowdplay/sdk-viewer';

// Type-level check: the browser's WebSocket class satisfies the SDK's constructor type.
type BrowserFits = typeof globalThis.WebSocket extends WebSocketConstructor ? true : false;
const browserFits: BrowserFits = true;
void browserFits;

interface TestServer {
  url: string;
  /** Request URL of every connection, in order. */
  conns: URL[];
  /** Server-side sockets, in order. */
  sockets: WebSocket[];
  close(): Promise<void>;
}

/** A tiny ws server on a random loopback port; `onConn` scripts each connection. */
async function startServer(onConn: (ws: WebSocket, url: URL, index: number) => void): Promise<TestServer> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await once(wss, 'listening');
  const conns: URL[] = [];
  const sockets: WebSocket[] = [];
  wss.on('connection', (ws, req) => {
    const url = new URL(req.url ?? '/', 'http://x');
    conns.push(url);
    sockets.push(ws);
    onConn(ws, url, conns.length - 1);
  });
  const { port } = wss.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    conns,
    sockets,
    close: async () => {
      for (const ws of wss.clients) ws.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}

function welcome(ws: WebSocket, channel = 'c1'): void {
  ws.send(JSON.stringify({ t: 'welcome', v: 1, role: 'crowd', channel, viewer: 'v1', serverTime: Date.now(), tickMs: 250 }));
}

function update(ev: number, extra: Partial<ChannelUpdate> = {}): string {
  return JSON.stringify({ t: 'update', channel: 'c1', ev, at: Date.now(), actions: [], tally: {}, ...extra });
}

function client(t: TestContext, server: TestServer, opts: Partial<ViewerClientOptions> = {}): ViewerClient {
  const c = new ViewerClient({
    url: server.url,
    channel: 'c1',
    token: 'tok',
    WebSocket: WebSocket,
    backoff: { initialMs: 20, maxMs: 200, jitter: 'none' },
    ...opts,
  });
  t.after(() => c.close()); // also when an assertion failed mid-test: no client keeps reconnecting
  return c;
}

/** The `ws` class, counting the sockets a client constructs (a reconnect constructs one synchronously in its timer). */
function countingWebSocket(): { WS: WebSocketConstructor; made: () => number } {
  let made = 0;
  class Counting extends WebSocket {
    constructor(url: string, protocols?: string | string[], options?: WebSocket.ClientOptions) {
      super(url, protocols, options);
      made++;
    }
  }
  return { WS: Counting, made: () => made };
}

const next = <K extends keyof ViewerEvents>(c: ViewerClient, event: K, pred?: (...args: Parameters<ViewerEvents[K]>) => boolean) =>
  nextEvent<ViewerEvents, K>(c, event, pred);

test('sdk-viewer - connect sends role, channel, token and resolves with the welcome', async (t) => {
  const server = await startServer((ws) => welcome(ws));
  t.after(() => server.close());
  const c = client(t, server, { lastEventId: 9 });
  const states: ConnectionState[] = [];
  c.on('state', (s) => states.push(s));
  const w = await c.connect();
  assert.equal(w.t, 'welcome');
  assert.equal(c.state, 'open');
  assert.deepEqual(states, ['connecting', 'open']);
  const u = server.conns[0];
  assert.ok(u);
  assert.equal(u.pathname, '/v1/ws');
  assert.equal(u.searchParams.get('role'), 'crowd');
  assert.equal(u.searchParams.get('channel'), 'c1');
  assert.equal(u.searchParams.get('token'), 'tok');
  assert.equal(u.searchParams.get('lastEventId'), '9');
  assert.equal(c.connect(), c.connect(), 'connect() is memoised');
  await c.close();
});

test('sdk-viewer - act acks are correlated by seq, also when answered out of order and refused', async (t) => {
  const server = await startServer((ws) => {
    welcome(ws);
    const got: Array<{ seq: number }> = [];
    ws.on('message', (raw) => {
      got.push(JSON.parse(String(raw)) as { seq: number });
      if (got.length < 3) return;
      // answer in reverse order; the middle one refused
      for (const m of [...got].reverse()) {
        const ack: ActAck =
          m === got[1]
            ? { t: 'ack', seq: m.seq, ok: false, code: 'CP_ERR_INTENT_RATE_LIMITED' }
            : { t: 'ack', seq: m.seq, ok: true, cost: m.seq * 10 };
        ws.send(JSON.stringify(ack));
      }
    });
  });
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  const ackEvents: number[] = [];
  c.on('ack', (a) => ackEvents.push(a.seq));
  const [a1, a2, a3] = await Promise.all([c.act('pull', 'left'), c.act('pull', 'right'), c.act('boost')]);
  assert.deepEqual(a1, { t: 'ack', seq: 1, ok: true, cost: 10 });
  assert.deepEqual(a2, { t: 'ack', seq: 2, ok: false, code: 'CP_ERR_INTENT_RATE_LIMITED' });
  assert.deepEqual(a3, { t: 'ack', seq: 3, ok: true, cost: 30 });
  assert.deepEqual(ackEvents, [3, 2, 1]);
  assert.equal(c.pendingActs, 0);
  await c.close();
});

test('sdk-viewer - a retryable refusal (the channel is moving) is sent again with backoff; a final one and retryDeadlineMs 0 are not', async (t) => {
  const frames: Array<{ t: string; seq: number; key?: string }> = [];
  const server = await startServer((ws) => {
    welcome(ws);
    ws.on('message', (raw) => {
      const m = JSON.parse(String(raw)) as { t: string; seq: number; action?: string; key?: string };
      frames.push(m);
      // 'moving': refused as retryable twice, then accepted; 'bad': a final refusal.
      const tries = frames.filter((f) => (f as { action?: string }).action === m.action && f.t === m.t).length;
      const ack: ActAck =
        m.action === 'bad'
          ? { t: 'ack', seq: m.seq, ok: false, code: 'CP_ERR_INTENT_UNKNOWN_ACTION' }
          : m.t === 'stake' || tries > 2
            ? { t: 'ack', seq: m.seq, ok: true, cost: 1 }
            : { t: 'ack', seq: m.seq, ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE' };
      ws.send(JSON.stringify(ack));
    });
  });
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  const ok = await c.act('moving');
  assert.deepEqual([ok.ok, ok.seq], [true, 3], 'two refusals, then the third attempt (a fresh seq each) is acked');
  const bad = await c.act('bad');
  assert.deepEqual(
    [bad.ok, bad.code, frames.filter((f) => (f as { action?: string }).action === 'bad').length],
    [false, 'CP_ERR_INTENT_UNKNOWN_ACTION', 1],
  );
  const none = client(t, server, { retryDeadlineMs: 0 });
  await none.connect();
  frames.length = 0;
  const refused = await none.act('again');
  assert.deepEqual([refused.ok, refused.code, frames.length], [false, 'CP_ERR_CHANNEL_UNAVAILABLE', 1], 'not retried');
  assert.throws(
    () => client(t, server, { retryDeadlineMs: -1 }),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID'),
  );
  await none.close();
  await c.close();
});

test('sdk-viewer - a retry refused CP_ERR_INTENT_RATE_LIMITED is retried and never answers in place of the server; a first one is returned', async (t) => {
  const frames: Array<{ t: string; seq: number; action?: string }> = [];
  const server = await startServer((ws) => {
    welcome(ws);
    ws.on('message', (raw) => {
      const m = JSON.parse(String(raw)) as { t: string; seq: number; action?: string };
      frames.push(m);
      const tries = frames.filter((f) => f.action === m.action).length;
      // 'then-ok': unavailable, rate limited, accepted; 'never': unavailable, then rate limited for good; 'fast': rate limited.
      const code =
        m.action === 'fast'
          ? 'CP_ERR_INTENT_RATE_LIMITED'
          : tries === 1
            ? 'CP_ERR_STORE_UNAVAILABLE'
            : m.action === 'never' || tries === 2
              ? 'CP_ERR_INTENT_RATE_LIMITED'
              : undefined;
      ws.send(JSON.stringify(code ? { t: 'ack', seq: m.seq, ok: false, code } : { t: 'ack', seq: m.seq, ok: true, cost: 0 }));
    });
  });
  t.after(() => server.close());
  const c = client(t, server, { retryDeadlineMs: 300 });
  await c.connect();
  const ok = await c.act('then-ok');
  assert.deepEqual([ok.ok, frames.filter((f) => f.action === 'then-ok').length], [true, 3]);
  const never = await c.act('never');
  assert.deepEqual([never.ok, never.code], [false, 'CP_ERR_STORE_UNAVAILABLE'], "past the deadline: the server's answer");
  assert.ok(frames.filter((f) => f.action === 'never').length > 2, 'retried while rate limited');
  const fast = await c.act('fast');
  assert.deepEqual([fast.ok, fast.code, frames.filter((f) => f.action === 'fast').length], [false, 'CP_ERR_INTENT_RATE_LIMITED', 1]);
  await c.close();
});

test('sdk-viewer - an act or stake without an ack rejects after ackTimeoutMs; a late ack is only an ack event; others are unaffected', async (t) => {
  const server = await startServer((ws) => {
    welcome(ws);
    ws.on('message', (raw) => {
      const m = JSON.parse(String(raw)) as { seq: number; t: string };
      // seq 1 (the stake) is lost on the way; seq 2 is acked at once; seq 1's ack comes once seq 3 arrives.
      if (m.seq === 2) ws.send(JSON.stringify({ t: 'ack', seq: 2, ok: true, cost: 0 }));
      if (m.seq === 3) {
        ws.send(JSON.stringify({ t: 'ack', seq: 1, ok: true, cost: 5 }));
        ws.send(JSON.stringify({ t: 'ack', seq: 3, ok: true, cost: 0 }));
      }
    });
  });
  t.after(() => server.close());
  const c = client(t, server, { ackTimeoutMs: 150 });
  await c.connect();
  const errors: string[] = [];
  c.on('error', (e) => errors.push(e.code));
  const acks: number[] = [];
  c.on('ack', (a) => acks.push(a.seq));
  const lost = c.stake('r1', 'x', 5, { key: 'k1' });
  assert.equal((await c.act('cheer')).ok, true, 'an answered act is not held up by a lost one');
  await assert.rejects(lost, (err: CrowdplayError) => {
    assert.equal(err.code, 'CP_ERR_CLIENT_REQUEST_TIMEOUT');
    assert.match(err.message, /stake \(seq 1\).*150 ms/);
    return true;
  });
  assert.equal(c.pendingActs, 0);
  assert.equal((await c.act('cheer')).seq, 3);
  assert.deepEqual(acks, [2, 1, 3], 'the late ack of seq 1 is emitted');
  assert.deepEqual(errors, [], 'and not reported as a protocol error');
  await c.close();
});

test('sdk-viewer - act frames are exactly the v1 CrowdAct shape', async (t) => {
  const frames: unknown[] = [];
  const server = await startServer((ws) => {
    welcome(ws);
    ws.on('message', (raw) => {
      const m = JSON.parse(String(raw)) as { seq: number };
      frames.push(m);
      ws.send(JSON.stringify({ t: 'ack', seq: m.seq, ok: true, cost: 0 }));
    });
  });
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  await c.act('vote', 'a');
  await c.act('jump');
  assert.deepEqual(frames, [
    { t: 'act', seq: 1, action: 'vote', option: 'a' },
    { t: 'act', seq: 2, action: 'jump' },
  ]);
  await c.close();
});

test('sdk-viewer - update events carry the frame and advance lastEventId', async (t) => {
  const server = await startServer((ws) => {
    welcome(ws);
    ws.send(update(5, { tally: { vote: { a: 1 } } }));
    ws.send(update(7));
    ws.send(update(6)); // an older id never moves lastEventId back
  });
  t.after(() => server.close());
  const c = client(t, server);
  const seen: Array<[number, number]> = [];
  const third = next(c, 'update', (u) => u.ev === 6);
  c.on('update', (u, info) => seen.push([u.ev, info.raw.length]));
  await c.connect();
  const [u, info] = await third;
  assert.equal(u.ev, 6);
  assert.ok(info.receivedAtMs >= u.at);
  assert.deepEqual(
    seen.map(([ev]) => ev),
    [5, 7, 6],
  );
  assert.ok(seen.every(([, len]) => len > 50));
  assert.equal(c.lastEventId, 7);
  await c.close();
});

test('sdk-viewer - reconnects with backoff after a drop, resumes from lastEventId and refreshes the token', async (t) => {
  const server = await startServer((ws, _url, i) => {
    welcome(ws);
    if (i === 0) {
      ws.send(update(42));
      // drop without a close frame (1006) once the client has the update
      ws.on('message', () => ws.terminate());
    }
  });
  t.after(() => server.close());
  let tokens = 0;
  const c = client(t, server, {
    getToken: async () => `tok-${++tokens}`,
    backoff: { initialMs: 60, maxMs: 1_000, jitter: 'none' },
  });
  const states: ConnectionState[] = [];
  c.on('state', (s) => states.push(s));
  const closes: number[] = [];
  c.on('close', (code) => closes.push(code));
  const firstUpdate = next(c, 'update');
  await c.connect();
  await firstUpdate;
  // an act in flight when the socket drops is rejected, never re-sent
  const lost = c.act('vote', 'a');
  const reconnecting = next(c, 'state', (s) => s === 'reconnecting');
  const reopened = next(c, 'welcome');
  await assert.rejects(lost, (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_CLOSED'));
  await reconnecting;
  const droppedAt = Date.now();
  await reopened;
  assert.ok(Date.now() - droppedAt >= 50, `waited the 60 ms backoff (got ${Date.now() - droppedAt} ms)`);
  assert.equal(server.conns.length, 2);
  assert.equal(server.conns[1]?.searchParams.get('lastEventId'), '42');
  assert.equal(server.conns[0]?.searchParams.get('token'), 'tok-1');
  assert.equal(server.conns[1]?.searchParams.get('token'), 'tok-2');
  assert.deepEqual(states, ['connecting', 'open', 'reconnecting', 'open']);
  assert.deepEqual(closes, [1006]);
  await c.close();
});

test('sdk-viewer - keeps retrying with growing backoff while the server refuses to welcome', async (t) => {
  const server = await startServer((ws, _url, i) => {
    if (i < 3) ws.close(CloseCode.internal, 'try later');
    else welcome(ws);
  });
  t.after(() => server.close());
  const c = client(t, server, { backoff: { initialMs: 20, maxMs: 1_000, jitter: 'none' } });
  const states: ConnectionState[] = [];
  c.on('state', (s) => states.push(s));
  const t0 = Date.now();
  await c.connect();
  // waits 20 + 40 + 80 ms between the four attempts
  assert.ok(Date.now() - t0 >= 130, `backoff doubled (${Date.now() - t0} ms)`);
  assert.equal(server.conns.length, 4);
  assert.deepEqual(states, ['connecting', 'open'], 'first connect stays "connecting" until its welcome');
  await c.close();
});

test('sdk-viewer - no reconnect after 4001; connect rejects with the server error code', async (t) => {
  const server = await startServer((ws) => {
    ws.send(JSON.stringify({ t: 'error', code: 'CP_ERR_AUTH_INVALID', message: 'credentials rejected: bad signature' }));
    ws.close(CloseCode.unauthorized, 'unauthorized');
  });
  t.after(() => server.close());
  t.mock.timers.enable({ apis: ['setTimeout'] }); // the backoff timer runs on the test's clock
  const sockets = countingWebSocket();
  const c = client(t, server, { backoff: { initialMs: 5, maxMs: 5, jitter: 'none' }, WebSocket: sockets.WS });
  const errors: string[] = [];
  c.on('error', (e) => errors.push(e.code));
  await assert.rejects(c.connect(), (err: unknown) => {
    assert.ok(isCrowdplayError(err, 'CP_ERR_AUTH_INVALID'));
    assert.equal(err.message, 'credentials rejected: bad signature');
    return true;
  });
  assert.equal(c.state, 'closed');
  t.mock.timers.tick(60_000); // a reconnect the close scheduled (5 ms backoff) would construct its socket now
  assert.equal(sockets.made(), 1, 'no socket after the first');
  assert.equal(server.conns.length, 1);
  assert.deepEqual(errors, ['CP_ERR_AUTH_INVALID']);
  await assert.rejects(c.act('vote'), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_NOT_OPEN'));
  await c.close(); // still fine after a server-side end
});

test('sdk-viewer - 4003/4004 after a welcome also end the client; pending acts reject', async (t) => {
  for (const code of [CloseCode.forbidden, CloseCode.unknownChannel]) {
    const server = await startServer((ws) => {
      welcome(ws);
      ws.on('message', () => ws.close(code, 'go away'));
    });
    t.after(() => server.close());
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const sockets = countingWebSocket();
    const c = client(t, server, { backoff: { initialMs: 5, maxMs: 5, jitter: 'none' }, WebSocket: sockets.WS });
    await c.connect();
    const closed = next(c, 'state', (s) => s === 'closed');
    await assert.rejects(
      c.act('vote', 'a'),
      (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_CLOSED') && err.message.includes(String(code)),
    );
    await closed;
    t.mock.timers.tick(60_000); // a scheduled reconnect would construct its socket now
    assert.equal(sockets.made(), 1, `no reconnect after ${code}`);
    t.mock.timers.reset();
  }
  assert.deepEqual([...NO_RECONNECT_CLOSE_CODES].sort(), [4001, 4003, 4004]);
});

test('sdk-viewer - autoReconnect false: a drop ends the client', async (t) => {
  const server = await startServer((ws) => {
    welcome(ws);
    ws.on('message', () => ws.terminate());
  });
  t.after(() => server.close());
  const c = client(t, server, { autoReconnect: false });
  await c.connect();
  const closed = next(c, 'state', (s) => s === 'closed');
  await assert.rejects(c.act('vote'), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_CLOSED'));
  await closed;
  assert.equal(server.conns.length, 1);
});

test('sdk-viewer - bad frames from the server are reported as errors and change nothing', async (t) => {
  const server = await startServer((ws) => {
    welcome(ws);
    ws.send('not json');
    ws.send('[1,2]');
    ws.send(JSON.stringify({ t: 'bogus' }));
    ws.send(Buffer.from([1, 2, 3]), { binary: true });
    ws.send(JSON.stringify({ t: 'ack', seq: 999, ok: true }));
    ws.send(JSON.stringify({ t: 'update', ev: 'x' }));
    ws.send(JSON.stringify({ t: 'error', code: 'CP_ERR_FROM_THE_FUTURE', message: 'newer server' }));
    ws.send(update(3));
  });
  t.after(() => server.close());
  const c = client(t, server);
  const errors: Array<[string, string | undefined]> = [];
  c.on('error', (e, frame) => errors.push([e.code, frame?.code]));
  const good = next(c, 'update');
  await c.connect();
  const [u] = await good;
  assert.equal(u.ev, 3);
  assert.deepEqual(errors, [
    ['CP_ERR_PROTO_MALFORMED', undefined],
    ['CP_ERR_PROTO_MALFORMED', undefined],
    ['CP_ERR_PROTO_UNKNOWN_TYPE', undefined],
    ['CP_ERR_PROTO_MALFORMED', undefined],
    ['CP_ERR_PROTO_INVALID', undefined],
    ['CP_ERR_PROTO_INVALID', undefined],
    ['CP_ERR_INTERNAL', 'CP_ERR_FROM_THE_FUTURE'],
  ]);
  assert.equal(c.state, 'open');
  assert.equal(c.lastEventId, 3, 'only the valid update moved lastEventId');
  assert.equal(server.conns.length, 1);
  await c.close();
});

test('sdk-viewer - a missing welcome hits the welcome deadline', async (t) => {
  const server = await startServer(() => {
    /* never welcomes */
  });
  t.after(() => server.close());
  const c = client(t, server, { autoReconnect: false, welcomeDeadlineMs: 80 });
  await assert.rejects(c.connect(), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_WELCOME_TIMEOUT'));
  assert.equal(c.state, 'closed');
});

test('sdk-viewer - close() is idempotent and rejects what is pending', async (t) => {
  const server = await startServer((ws) => welcome(ws)); // never acks
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  const pending = c.act('vote', 'a');
  const p1 = c.close();
  const p2 = c.close();
  assert.equal(p1, p2);
  await assert.rejects(pending, (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_CLOSED'));
  await p1;
  assert.equal(c.state, 'closed');
  await assert.rejects(c.act('vote'), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_NOT_OPEN'));
  const neverConnected = client(t, server);
  await neverConnected.close();
  assert.equal(neverConnected.state, 'closed');
  await assert.rejects(neverConnected.connect(), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_NOT_OPEN'));
  assert.equal(server.conns.length, 1, 'a closed client never opens a socket');
});

test('sdk-viewer - close() while the first attempt is still connecting rejects connect()', async (t) => {
  const server = await startServer(() => {});
  t.after(() => server.close());
  const c = client(t, server);
  const p = c.connect();
  await c.close();
  await assert.rejects(p, (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_CLOSED'));
  await assert.rejects(c.connect(), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_CLOSED'));
});

test('sdk-viewer - bad options are refused at construction', () => {
  const base = { url: 'http://127.0.0.1:1', channel: 'c1', token: 't', WebSocket } satisfies ViewerClientOptions;
  const code = (fn: () => unknown): string => {
    try {
      fn();
    } catch (err) {
      if (err instanceof CrowdplayError) return err.code;
      throw err;
    }
    return 'no error';
  };
  assert.equal(
    code(() => new ViewerClient({ ...base, channel: 'bad channel!' })),
    'CP_ERR_CHANNEL_INVALID_ID',
  );
  assert.equal(
    code(() => new ViewerClient({ ...base, token: undefined })),
    'CP_ERR_AUTH_MISSING',
  );
  assert.equal(
    code(() => new ViewerClient({ ...base, url: 'ftp://x' })),
    'CP_ERR_CONFIG_INVALID',
  );
  assert.equal(
    code(() => new ViewerClient({ ...base, url: 'nope' })),
    'CP_ERR_CONFIG_INVALID',
  );
  assert.equal(
    code(() => new ViewerClient({ ...base, backoff: { initialMs: 10, maxMs: 5 } })),
    'CP_ERR_CONFIG_INVALID',
  );
  for (const ackTimeoutMs of [0, -1, Number.NaN, Number.POSITIVE_INFINITY])
    assert.equal(
      code(() => new ViewerClient({ ...base, ackTimeoutMs })),
      'CP_ERR_CONFIG_INVALID',
      `ackTimeoutMs ${ackTimeoutMs}`,
    );
  assert.equal(
    code(() => new ViewerClient({ ...base, WebSocket: undefined })),
    'CP_ERR_CONFIG_INVALID',
    'Node 20 has no global WebSocket',
  );
});

test('sdk-viewer - buildWsUrl maps schemes and keeps a base path', () => {
  assert.equal(buildWsUrl('http://h:1', '/v1/ws', { a: 1, b: undefined }), 'ws://h:1/v1/ws?a=1');
  assert.equal(buildWsUrl('https://h/prefix/', '/v1/ws', { t: 'x y' }), 'wss://h/prefix/v1/ws?t=x+y');
  assert.equal(buildWsUrl('ws://h:2?old=1', '/v1/ws', {}), 'ws://h:2/v1/ws');
});

test('sdk-viewer - backoff is full jitter under a doubling cap', () => {
  const opts = { initialMs: 100, maxMs: 1_000, jitter: 'full' as const };
  assert.equal(
    backoffDelayMs(0, opts, () => 0.999_999),
    99,
  );
  assert.equal(
    backoffDelayMs(2, opts, () => 0.5),
    200,
  );
  assert.equal(
    backoffDelayMs(10, opts, () => 0.5),
    500,
    'capped at maxMs',
  );
  assert.equal(
    backoffDelayMs(3, opts, () => 0),
    0,
  );
  assert.equal(backoffDelayMs(3, { ...opts, jitter: 'none' }), 800);
  assert.equal(backoffDelayMs(1_000, { ...opts, jitter: 'none' }), 1_000);
});

test('sdk-viewer - the browser bundle pulls in neither ws nor Node built-ins', async () => {
  const entry = fileURLToPath(new URL('../src/index.ts', import.meta.url));
  const out = await build({
    entryPoints: [entry],
    bundle: true,
    platform: 'browser',
    format: 'esm',
    write: false,
    logLevel: 'silent',
    metafile: true,
  });
  const inputs = Object.keys(out.metafile.inputs);
  assert.ok(inputs.some((p) => p.includes('sdk-viewer/src/viewer-client.ts')));
  assert.ok(!inputs.some((p) => /node_modules\/ws\//.test(p)), 'ws is not bundled');
  assert.ok(!inputs.some((p) => p.startsWith('node:')), 'no node: built-ins');
});

test('sdk-viewer - a refused connection rejects connect() with the socket error', async (t) => {
  const server = await startServer(() => {});
  await server.close(); // nothing listens on this port any more
  const c = client(t, server, { autoReconnect: false });
  await assert.rejects(c.connect(), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_SOCKET') && /ECONNREFUSED/.test(err.message));
  assert.equal(c.state, 'closed');
});

/** A server that records every frame and answers each with `answer(frame)` (no answer when it returns undefined). */
async function tradeServer(answer: (m: Record<string, unknown> & { seq: number; t: string }) => ActAck | undefined): Promise<{
  server: TestServer;
  frames: unknown[];
}> {
  const frames: unknown[] = [];
  const server = await startServer((ws) => {
    welcome(ws);
    ws.on('message', (raw) => {
      const m = JSON.parse(String(raw)) as Record<string, unknown> & { seq: number; t: string };
      frames.push(m);
      const a = answer(m);
      if (a) ws.send(JSON.stringify(a));
    });
  });
  return { server, frames };
}

test('sdk-viewer - stake, buy and sell send the v1 frames and resolve with their acks (fields passed through)', async (t) => {
  const { server, frames } = await tradeServer((m) => {
    if (m.t === 'stake') return { t: 'ack', seq: m.seq, ok: true, cost: m.points as number, balance: 950 };
    if (m.t === 'buy' && 'budget' in m) return { t: 'ack', seq: m.seq, ok: false, code: 'CP_ERR_MARKET_BUDGET_TOO_SMALL' };
    if (m.t === 'buy') return { t: 'ack', seq: m.seq, ok: true, cost: 61, shares: 3, position: 3, balance: 889 };
    return { t: 'ack', seq: m.seq, ok: true, cost: 0, shares: 2, proceeds: 40, position: 1, balance: 929 };
  });
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  assert.equal(c.balance, null, 'no balance before the first report');
  const acks: ActAck[] = [];
  c.on('ack', (a) => acks.push(a));
  const stake = await c.stake('r1', 'left', 50, { key: 'k:1' });
  assert.deepEqual(stake, { t: 'ack', seq: 1, ok: true, cost: 50, balance: 950 });
  assert.equal(c.balance, 950);
  const buy = await c.buy('r2', 'yes', { shares: 3, maxCost: 70 });
  assert.deepEqual(buy, { t: 'ack', seq: 2, ok: true, cost: 61, shares: 3, position: 3, balance: 889 });
  const refused = await c.buy('r2', 'yes', { budget: 1 }, { key: 'b-1' });
  assert.deepEqual(refused, { t: 'ack', seq: 3, ok: false, code: 'CP_ERR_MARKET_BUDGET_TOO_SMALL' }, 'a refusal resolves, as for act');
  assert.equal(c.balance, 889, 'a refusal without balance keeps the last one');
  const sell = await c.sell('r2', 'yes', 2, 0);
  assert.deepEqual(sell, { t: 'ack', seq: 4, ok: true, cost: 0, shares: 2, proceeds: 40, position: 1, balance: 929 });
  assert.equal(c.balance, 929);
  assert.deepEqual(frames, [
    { t: 'stake', seq: 1, round: 'r1', outcome: 'left', points: 50, key: 'k:1' },
    { t: 'buy', seq: 2, round: 'r2', outcome: 'yes', shares: 3, maxCost: 70 },
    { t: 'buy', seq: 3, round: 'r2', outcome: 'yes', budget: 1, key: 'b-1' },
    { t: 'sell', seq: 4, round: 'r2', outcome: 'yes', shares: 2, minProceeds: 0 },
  ]);
  assert.deepEqual(
    acks.map((a) => a.seq),
    [1, 2, 3, 4],
  );
  assert.equal(c.pendingActs, 0);
  await c.close();
});

test('sdk-viewer - bad stake/buy/sell arguments reject with CP_ERR_PROTO_INVALID and send nothing', async (t) => {
  const { server, frames } = await tradeServer((m) => ({ t: 'ack', seq: m.seq, ok: true, cost: 0 }));
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  const bad: Array<() => Promise<ActAck>> = [
    () => c.stake('r1', 'left', 0),
    () => c.stake('r1', 'left', -5),
    () => c.stake('r1', 'left', 1.5),
    () => c.stake('r1', 'left', NaN),
    () => c.stake('r1', 'left', 1e16),
    () => c.stake('r1', 'left', '5' as unknown as number),
    () => c.stake('bad round', 'left', 5),
    () => c.stake('r1', '', 5),
    () => c.stake('r1', 'left', 5, { key: 'has space' }),
    () => c.buy('r1', 'left', { shares: 0, maxCost: 5 }),
    () => c.buy('r1', 'left', { shares: 2, maxCost: -1 }),
    () => c.buy('r1', 'left', { budget: 0 }),
    () => c.buy('r1', 'left', { budget: 5, shares: 1, maxCost: 1 } as unknown as { budget: number }),
    () => c.buy('r1', 'left', null as unknown as { budget: number }),
    () => c.sell('r1', 'left', 0, 0),
    () => c.sell('r1', 'left', 1, -1),
    () => c.sell('r1', 'left', 1, Infinity),
  ];
  for (const [i, call] of bad.entries()) {
    await assert.rejects(call(), (err: unknown) => isCrowdplayError(err, 'CP_ERR_PROTO_INVALID'), `case ${i}`);
  }
  assert.equal(c.pendingActs, 0);
  // A round trip proves nothing was sent before it; the refused calls used no seq.
  assert.deepEqual(await c.stake('r1', 'left', 1e15), { t: 'ack', seq: 1, ok: true, cost: 0 });
  assert.deepEqual(frames, [{ t: 'stake', seq: 1, round: 'r1', outcome: 'left', points: 1e15 }]);
  await c.close();
});

test('sdk-viewer - balance frames emit `balance` and set the balance; a bad one is an error and changes nothing', async (t) => {
  const join: BalanceFrame = { t: 'balance', points: 0, reason: 'join' };
  const welcomeGrant: BalanceFrame = { t: 'balance', points: 1_000, reason: 'welcome', delta: 1_000 };
  const payout: BalanceFrame = { t: 'balance', points: 1_450, reason: 'payout', delta: 450, round: 'r1' };
  const server = await startServer((ws) => {
    welcome(ws);
    ws.send(JSON.stringify(join));
    ws.send(JSON.stringify(welcomeGrant));
    ws.send(JSON.stringify({ t: 'balance', points: '12', reason: 'payout' }));
    ws.send(JSON.stringify(payout));
  });
  t.after(() => server.close());
  const c = client(t, server);
  const seen: BalanceFrame[] = [];
  const errors: string[] = [];
  c.on('balance', (f) => seen.push(f));
  c.on('error', (e) => errors.push(e.code));
  const last = next(c, 'balance', (f) => f.reason === 'payout');
  await c.connect();
  await last;
  assert.deepEqual(seen, [join, welcomeGrant, payout]);
  assert.deepEqual(errors, ['CP_ERR_PROTO_INVALID']);
  assert.equal(c.balance, 1_450);
  await c.close();
});

test('sdk-viewer - update.rounds arrive typed; pending trades reject on close; not open rejects', async (t) => {
  const round: RoundView = {
    id: 'r1',
    kind: 'pool',
    outcomes: ['a', 'b'],
    state: 'open',
    openedAt: 1,
    deadline: 2,
    pool: [10, 30],
    entries: 2,
  };
  const server = await startServer((ws) => {
    welcome(ws);
    ws.send(update(4, { rounds: [round] }));
  });
  t.after(() => server.close());
  const c = client(t, server);
  await assert.rejects(c.stake('r1', 'a', 1), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_NOT_OPEN'));
  const first = next(c, 'update');
  await c.connect();
  const [u] = await first;
  assert.deepEqual(u.rounds, [round]);
  assert.equal(u.rounds?.[0]?.pool?.[1], 30);
  const pending = [c.stake('r1', 'a', 1), c.buy('r1', 'a', { budget: 5 }), c.sell('r1', 'a', 1, 0)];
  assert.equal(c.pendingActs, 3);
  const rejected = pending.map((p) => assert.rejects(p, (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_CLOSED')));
  await c.close();
  await Promise.all(rejected);
  assert.equal(c.pendingActs, 0);
});
