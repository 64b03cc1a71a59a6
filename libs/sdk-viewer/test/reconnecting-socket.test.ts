import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CrowdplayError, isCrowdplayError } from '@crowdplay/protocol';
import {
  ReconnectingSocket,
  type ReconnectingSocketHooks,
  type ReconnectingSocketOptions,
  type WebSocketLike,
} from '@crowdplay/sdk-viewer';

/**
 * An in-memory socket: the test plays the server (`open`, `receive`,
 * `serverClose`). `close()` records the call and, when `answersClose`, the
 * server answers the handshake on the next microtask; `terminate()` drops the
 * socket at once (1006).
 */
class FakeSocket implements WebSocketLike {
  readyState = 0;
  bufferedAmount = 0;
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  readonly sent: string[] = [];
  readonly closeCalls: Array<[number | undefined, string | undefined]> = [];
  terminated = false;
  answersClose = true;
  readonly url: string;
  readonly ctorArgs: number;
  readonly options: object | undefined;

  constructor(...args: [string, (string | string[])?, object?]) {
    this.url = args[0];
    this.ctorArgs = args.length;
    this.options = args[2];
  }

  send(data: string): void {
    this.sent.push(data);
  }

  close(code?: number, reason?: string): void {
    this.closeCalls.push([code, reason]);
    this.readyState = 2;
    if (this.answersClose) queueMicrotask(() => this.serverClose(code ?? 1005, reason ?? ''));
  }

  terminate(): void {
    this.terminated = true;
    this.serverClose(1006, '');
  }

  open(): void {
    this.readyState = 1;
    this.onopen?.({});
  }

  receive(data: unknown): void {
    this.onmessage?.({ data });
  }

  serverClose(code: number, reason: string): void {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.onclose?.({ code, reason });
  }
}

type FakeCtor = new (...args: [string, (string | string[])?, object?]) => FakeSocket;

/**
 * A WebSocket class over FakeSocket that remembers its instances; the first
 * `failFirst` constructions throw; `answersClose` is copied to every instance.
 * `nth(i)` resolves with instance `i` once it exists.
 */
function fakeWs(failFirst = 0, answersClose = true): { WS: FakeCtor; made: FakeSocket[]; nth: (i: number) => Promise<FakeSocket> } {
  const made: FakeSocket[] = [];
  const waiters = new Map<number, (s: FakeSocket) => void>();
  let calls = 0;
  class WS extends FakeSocket {
    constructor(...args: [string, (string | string[])?, object?]) {
      super(...args);
      this.answersClose = answersClose;
      if (++calls <= failFirst) throw new Error(`constructor failure ${calls}`);
      made.push(this);
      waiters.get(made.length - 1)?.(this);
    }
  }
  const nth = (i: number): Promise<FakeSocket> => {
    const s = made[i];
    return s ? Promise.resolve(s) : new Promise((resolve) => waiters.set(i, resolve));
  };
  return { WS, made, nth };
}

/** Hooks that log every call as text; `until(pred)` resolves once a log line matches. */
function recorder(): { log: string[]; hooks: ReconnectingSocketHooks; errors: CrowdplayError[]; until: (line: string) => Promise<void> } {
  const log: string[] = [];
  const errors: CrowdplayError[] = [];
  const waiters: Array<{ line: string; resolve: () => void }> = [];
  const push = (line: string): void => {
    log.push(line);
    for (const w of [...waiters]) {
      if (w.line !== line) continue;
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve();
    }
  };
  const hooks: ReconnectingSocketHooks = {
    checkWelcome: (w) => (typeof w.serverTime === 'number' ? undefined : 'welcome without serverTime'),
    onState: (s, p) => push(`state:${p}>${s}`),
    onWelcome: (w) => push(`welcome:${w.channel}`),
    onFrame: (t, _msg, info) => push(`frame:${String(t)}:${info.raw.length}`),
    onError: (e, frame) => {
      errors.push(e);
      push(`error:${e.code}${frame ? '+frame' : ''}`);
    },
    onClose: (code, reason) => push(`close:${code}:${reason}`),
  };
  const until = (line: string): Promise<void> =>
    log.includes(line) ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ line, resolve }));
  return { log, hooks, errors, until };
}

const WELCOME = JSON.stringify({ t: 'welcome', v: 1, role: 'crowd', channel: 'c1', serverTime: 1, tickMs: 250 });
const FAST = { initialMs: 5, maxMs: 5, jitter: 'none' } as const;

function make(
  opts: Partial<ReconnectingSocketOptions<FakeSocket>>,
  ws = fakeWs(),
): { conn: ReconnectingSocket<FakeSocket>; r: ReturnType<typeof recorder>; made: FakeSocket[]; nth: (i: number) => Promise<FakeSocket> } {
  const r = recorder();
  const conn = new ReconnectingSocket<FakeSocket>({ url: () => 'ws://h/v1/ws?n=1', WebSocket: ws.WS, backoff: FAST, ...opts }, r.hooks);
  return { conn, r, made: ws.made, nth: ws.nth };
}

test('reconnecting-socket - welcome opens; hooks run before connect() resolves; other frames go to onFrame', async (t) => {
  const { conn, r, made } = make({});
  t.after(() => conn.close());
  assert.equal(conn.state, 'idle');
  const p = conn.connect();
  assert.equal(conn.connect(), p, 'connect() is memoised');
  const s = made[0];
  assert.ok(s, 'a string url opens the socket synchronously');
  assert.equal(s.url, 'ws://h/v1/ws?n=1');
  assert.equal(s.ctorArgs, 1, 'no wsOptions: the constructor gets the URL only (browser form)');
  void p.then(() => r.log.push('resolved'));
  s.open();
  s.receive(WELCOME);
  await p;
  assert.deepEqual(r.log, ['state:idle>connecting', 'state:connecting>open', 'welcome:c1', 'resolved']);
  assert.equal(conn.welcome?.channel, 'c1');
  assert.equal(conn.socket, s);
  r.log.length = 0;
  s.receive(JSON.stringify({ t: 'update', ev: 1 }));
  s.receive('{nope');
  s.receive('[1]');
  s.receive(new Uint8Array([1, 2]));
  s.receive(JSON.stringify({ t: 'error', code: 'CP_ERR_INTENT_RATE_LIMITED', message: 'slow down' }));
  s.receive(JSON.stringify({ t: 'error', code: 'CP_ERR_FROM_THE_FUTURE' }));
  assert.deepEqual(r.log, [
    'frame:update:21',
    'error:CP_ERR_PROTO_MALFORMED',
    'error:CP_ERR_PROTO_MALFORMED',
    'error:CP_ERR_PROTO_MALFORMED',
    'error:CP_ERR_INTENT_RATE_LIMITED+frame',
    'error:CP_ERR_INTERNAL+frame',
  ]);
  assert.equal(r.errors[3]?.message, 'slow down', "the server's message is kept");
  assert.equal(conn.state, 'open');
  assert.equal(made.length, 1);
});

test('reconnecting-socket - a refused welcome is reported and changes nothing', async (t) => {
  const { conn, r, made } = make({});
  t.after(() => conn.close());
  const p = conn.connect();
  const s = made[0];
  assert.ok(s);
  s.open();
  s.receive(JSON.stringify({ t: 'welcome', channel: 'c1' }));
  assert.deepEqual(r.log, ['state:idle>connecting', 'error:CP_ERR_PROTO_INVALID']);
  assert.equal(conn.state, 'connecting');
  assert.equal(conn.welcome, null);
  s.receive(WELCOME);
  await p;
  assert.equal(conn.state, 'open');
});

test('reconnecting-socket - a drop after open reconnects with backoff, asking url() again; attempts restart after a welcome', async (t) => {
  let n = 0;
  const { conn, r, nth } = make({ url: () => `ws://h/v1/ws?n=${++n}`, backoff: { initialMs: 30, maxMs: 1_000, jitter: 'none' } });
  t.after(() => conn.close());
  const p = conn.connect();
  const s0 = await nth(0);
  s0.open();
  s0.receive(WELCOME);
  await p;
  const droppedAt = Date.now();
  s0.serverClose(1006, '');
  assert.equal(conn.state, 'reconnecting');
  assert.equal(conn.socket, null);
  const s1 = await nth(1);
  assert.ok(Date.now() - droppedAt >= 25, 'waited the first backoff (30 ms)');
  assert.equal(s1.url, 'ws://h/v1/ws?n=2');
  s1.serverClose(1011, 'try later'); // refused before a welcome: the next wait doubles
  const s2 = await nth(2);
  s2.open();
  s2.receive(WELCOME);
  await r.until('state:reconnecting>open');
  const reopenedAt = Date.now();
  s2.serverClose(1006, '');
  await nth(3);
  const waitedMs = Date.now() - reopenedAt;
  assert.ok(waitedMs >= 25 && waitedMs < 100, `back to the first backoff (30 ms, not 120 ms) after a welcome (${waitedMs} ms)`);
  assert.deepEqual(
    r.log.filter((l) => l.startsWith('state:') || l.startsWith('close:')),
    [
      'state:idle>connecting',
      'state:connecting>open',
      'close:1006:',
      'state:open>reconnecting',
      'close:1011:try later',
      'state:reconnecting>open',
      'close:1006:',
      'state:open>reconnecting',
    ],
  );
});

test('reconnecting-socket - a failing url() or constructor is reported as given and retried; connect() stays pending', async (t) => {
  let n = 0;
  const ws = fakeWs(1);
  const { conn, r, nth } = make(
    {
      url: async () => {
        n++;
        if (n === 1) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
        if (n === 2) throw new Error('token service down');
        return `ws://h/v1/ws?n=${n}`;
      },
      wsOptions: { perMessageDeflate: false },
    },
    ws,
  );
  t.after(() => conn.close());
  const p = conn.connect();
  const s = await nth(0);
  assert.equal(s.url, 'ws://h/v1/ws?n=4', 'attempt 3 failed in the constructor');
  assert.equal(s.ctorArgs, 3);
  assert.deepEqual(s.options, { perMessageDeflate: false });
  assert.deepEqual(r.log, [
    'state:idle>connecting',
    'error:CP_ERR_AUTH_MISSING',
    'error:CP_ERR_CLIENT_SOCKET',
    'error:CP_ERR_CLIENT_SOCKET',
  ]);
  assert.match(r.errors[1]?.message ?? '', /token service down/);
  assert.match(r.errors[2]?.message ?? '', /constructor failure 1/);
  s.open();
  s.receive(WELCOME);
  await p;
  assert.equal(conn.state, 'open');
});

test('reconnecting-socket - without autoReconnect the failure of the only attempt rejects connect()', async () => {
  const { conn, made } = make({
    autoReconnect: false,
    url: () => {
      throw new CrowdplayError('CP_ERR_AUTH_MISSING');
    },
  });
  await assert.rejects(conn.connect(), (err: unknown) => isCrowdplayError(err, 'CP_ERR_AUTH_MISSING'));
  assert.equal(conn.state, 'closed');
  assert.equal(conn.ended, true);
  assert.equal(made.length, 0);
  await conn.close(); // resolves at once: there is no socket
});

test('reconnecting-socket - welcome deadline: terminate() when given, else close(1000, "no welcome")', async () => {
  const hard = make({ autoReconnect: false, welcomeDeadlineMs: 20, terminate: (sock) => sock.terminate() });
  const p1 = hard.conn.connect();
  hard.made[0]?.open();
  await assert.rejects(p1, (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_WELCOME_TIMEOUT'));
  assert.equal(hard.made[0]?.terminated, true);
  assert.deepEqual(hard.made[0]?.closeCalls, []);
  assert.deepEqual(hard.r.log, ['state:idle>connecting', 'error:CP_ERR_CLIENT_WELCOME_TIMEOUT', 'close:1006:', 'state:connecting>closed']);

  const soft = make({ autoReconnect: false, welcomeDeadlineMs: 20 });
  const p2 = soft.conn.connect();
  const s = soft.made[0];
  assert.ok(s);
  s.open();
  await soft.r.until('error:CP_ERR_CLIENT_WELCOME_TIMEOUT');
  assert.deepEqual(s.closeCalls, [[1000, 'no welcome']]);
  assert.equal(s.terminated, false);
  await assert.rejects(
    p2,
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_WELCOME_TIMEOUT'),
    'the deadline, not the close, is the reason',
  );
});

test('reconnecting-socket - a do-not-reconnect close code ends it with the code of the server error frame', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] }); // the backoff timer runs on the test's clock
  const { conn, made, r } = make({});
  const p = conn.connect();
  const s = made[0];
  assert.ok(s);
  s.open();
  s.receive(JSON.stringify({ t: 'error', code: 'CP_ERR_AUTH_INVALID', message: 'credentials rejected: bad key' }));
  s.serverClose(4001, 'unauthorized');
  await assert.rejects(
    p,
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_AUTH_INVALID') && err.message === 'credentials rejected: bad key',
  );
  assert.equal(conn.state, 'closed');
  assert.equal(conn.ended, true);
  assert.equal(conn.connect(), p, 'connect() keeps its settled promise');
  t.mock.timers.tick(60_000); // any reconnect the close scheduled (5 ms backoff) would open its socket now
  assert.equal(made.length, 1);
  assert.deepEqual(r.log, [
    'state:idle>connecting',
    'error:CP_ERR_AUTH_INVALID+frame',
    'close:4001:unauthorized',
    'state:connecting>closed',
  ]);
  await conn.close();
});

test('reconnecting-socket - close() is idempotent, resolves on the close event or at the close deadline', async (t) => {
  const quick = make({ closeDeadlineMs: 10_000 });
  const p = quick.conn.connect();
  quick.made[0]?.open();
  quick.made[0]?.receive(WELCOME);
  await p;
  const t0 = Date.now();
  const c1 = quick.conn.close(4000, 'bye');
  assert.equal(quick.conn.close(), c1);
  assert.equal(quick.conn.state, 'closed');
  assert.deepEqual(quick.made[0]?.closeCalls, [[4000, 'bye']]);
  await c1; // the fake server answers the handshake at once
  assert.ok(Date.now() - t0 < 1_000, 'resolved by the close event, not the deadline');

  for (const withTerminate of [true, false]) {
    const slow = make(
      { closeDeadlineMs: 30, ...(withTerminate ? { terminate: (sock: FakeSocket) => sock.terminate() } : {}) },
      fakeWs(0, false),
    );
    const sp = slow.conn.connect();
    slow.made[0]?.open();
    slow.made[0]?.receive(WELCOME);
    await sp;
    t.mock.timers.enable({ apis: ['setTimeout'] });
    let closed = false;
    const closing = slow.conn.close().then(() => (closed = true)); // the fake server never answers the close handshake
    t.mock.timers.tick(29);
    await new Promise((r) => setImmediate(r)); // every microtask has run
    assert.equal(closed, false, 'waits for the close deadline');
    t.mock.timers.tick(1);
    await closing;
    assert.equal(slow.made[0]?.terminated, withTerminate);
    t.mock.timers.tick(60_000); // any reconnect scheduled would open its socket now
    assert.equal(slow.made.length, 1, 'a closed socket never reconnects');
    t.mock.timers.reset();
  }
});

test('reconnecting-socket - close() before connect(): nothing opens, connect() rejects CP_ERR_CLIENT_NOT_OPEN', async () => {
  const { conn, made, r } = make({});
  await conn.close();
  await assert.rejects(conn.connect(), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_NOT_OPEN'));
  assert.equal(made.length, 0);
  assert.deepEqual(r.log, ['state:idle>closed']);
});

test('reconnecting-socket - bad numbers are refused with CP_ERR_CONFIG_INVALID', () => {
  const code = (opts: Partial<ReconnectingSocketOptions<FakeSocket>>): string => {
    try {
      make(opts);
    } catch (err) {
      if (err instanceof CrowdplayError) return err.code;
      throw err;
    }
    return 'no error';
  };
  assert.equal(code({ backoff: { initialMs: 10, maxMs: 5 } }), 'CP_ERR_CONFIG_INVALID');
  assert.equal(code({ backoff: { initialMs: -1 } }), 'CP_ERR_CONFIG_INVALID');
  assert.equal(code({ welcomeDeadlineMs: 0 }), 'CP_ERR_CONFIG_INVALID');
  assert.equal(code({ closeDeadlineMs: -1 }), 'CP_ERR_CONFIG_INVALID');
  assert.equal(code({}), 'no error');
});
