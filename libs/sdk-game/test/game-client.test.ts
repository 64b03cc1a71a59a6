import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { nextEvent, within } from '@crowdplay/testing';
import type { AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { CloseCode, CrowdplayError, isCrowdplayError, type ActionSpec, type Batch, type RoundView } from '@crowdplay/protocol';
import { GAME_FRAME_MAX_BYTES, GameClient, type ConnectionState, type GameClientOptions, type GameEvents } from '@crowdplay/sdk-game';

interface TestServer {
  url: string;
  conns: URL[];
  /** Parsed frames received, per connection. */
  frames: unknown[][];
  /** Resolves when `cond` holds, checked at once and after every connection and frame. */
  when(cond: () => boolean): Promise<void>;
  close(): Promise<void>;
}

async function startServer(onConn: (ws: WebSocket, url: URL, index: number) => void): Promise<TestServer> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await once(wss, 'listening');
  const conns: URL[] = [];
  const frames: unknown[][] = [];
  const waiters = new Set<() => void>();
  const changed = (): void => {
    for (const w of [...waiters]) w();
  };
  wss.on('connection', (ws, req) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const i = conns.length;
    conns.push(url);
    frames.push([]);
    ws.on('message', (raw) => {
      frames[i]?.push(JSON.parse(String(raw)));
      changed();
    });
    onConn(ws, url, i);
    changed();
  });
  const { port } = wss.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    conns,
    frames,
    when: (cond) =>
      new Promise<void>((resolve) => {
        const check = (): void => {
          if (!cond()) return;
          waiters.delete(check);
          resolve();
        };
        waiters.add(check);
        check();
      }),
    close: async () => {
      for (const ws of wss.clients) ws.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}

function welcome(ws: WebSocket): void {
  ws.send(JSON.stringify({ t: 'welcome', v: 1, role: 'game', channel: 'g1', serverTime: Date.now(), tickMs: 250 }));
}

function batch(ev: number): Batch {
  return {
    t: 'batch',
    channel: 'g1',
    ev,
    tick: ev,
    closedAt: Date.now(),
    actions: { vote: { tally: { a: 2, b: 1 }, intents: [{ viewer: 'v1', option: 'a', at: Date.now() - 5 }], dropped: 0 } },
  };
}

const VOTE: ActionSpec[] = [{ name: 'vote', options: ['a', 'b', 'c'], maxPerTick: 1_000 }];

function client(t: TestContext, server: TestServer, opts: Partial<GameClientOptions> = {}): GameClient {
  const c = new GameClient({
    url: server.url,
    channel: 'g1',
    apiKey: 'cpk_test',
    backoff: { initialMs: 20, maxMs: 200, jitter: 'none' },
    ...opts,
  });
  t.after(() => c.close()); // also when an assertion failed mid-test: no client keeps reconnecting
  return c;
}

const next = <K extends keyof GameEvents>(c: GameClient, event: K, pred?: (...args: Parameters<GameEvents[K]>) => boolean) =>
  nextEvent<GameEvents, K>(c, event, pred);

/** Resolves once connection `i` of `server` has received `n` frames. */
async function framesOf(server: TestServer, i: number, n: number, deadlineMs = 5_000): Promise<unknown[]> {
  const reached = server.when(() => (server.frames[i]?.length ?? 0) >= n);
  await within(reached, `${n} frames on connection ${i}`, { timeoutMs: deadlineMs }).catch(() =>
    assert.fail(`connection ${i} got ${server.frames[i]?.length ?? 0} frames, expected ${n}: ${JSON.stringify(server.frames[i])}`),
  );
  return server.frames[i]!;
}

test('sdk-game - connects as role=game with the key; a declaration made before the welcome follows it', async (t) => {
  const server = await startServer((ws) => welcome(ws));
  t.after(() => server.close());
  const c = client(t, server);
  c.declare(VOTE);
  const w = await c.connect();
  assert.equal(w.role, 'game');
  const u = server.conns[0];
  assert.equal(u?.pathname, '/v1/ws');
  assert.equal(u?.searchParams.get('role'), 'game');
  assert.equal(u?.searchParams.get('channel'), 'g1');
  assert.equal(u?.searchParams.get('key'), 'cpk_test');
  assert.deepEqual(await framesOf(server, 0, 1), [{ t: 'declare', actions: VOTE }]);
  assert.ok(!String(c).includes('cpk_test'), 'toString hides the key');
  await c.close();
});

test('sdk-game - declare and publishState after open are sent at once', async (t) => {
  const server = await startServer((ws) => welcome(ws));
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  c.declare(VOTE);
  assert.equal(c.publishState({ rope: 3 }), true);
  assert.deepEqual(await framesOf(server, 0, 2), [
    { t: 'declare', actions: VOTE },
    { t: 'state', state: { rope: 3 } },
  ]);
  await c.close();
});

test('sdk-game - batch events are typed and carry the receipt time', async (t) => {
  const server = await startServer((ws) => {
    welcome(ws);
    ws.send(JSON.stringify(batch(11)));
  });
  t.after(() => server.close());
  const c = client(t, server);
  const got = next(c, 'batch');
  await c.connect();
  const [b, info] = await got;
  assert.equal(b.ev, 11);
  assert.deepEqual(b.actions.vote?.tally, { a: 2, b: 1 });
  assert.equal(b.actions.vote?.intents[0]?.viewer, 'v1');
  assert.ok(info.receivedAtMs >= b.closedAt);
  assert.ok(info.bytes > 100);
  await c.close();
});

test('sdk-game - reconnects with backoff and re-sends its declaration and latest state', async (t) => {
  const server = await startServer((ws, _u, i) => {
    welcome(ws);
    if (i === 0) ws.on('message', (raw) => String(raw).includes('"state"') && ws.terminate());
  });
  t.after(() => server.close());
  const c = client(t, server, { backoff: { initialMs: 50, maxMs: 1_000, jitter: 'none' } });
  const states: ConnectionState[] = [];
  c.on('state', (s) => states.push(s));
  await c.connect();
  c.declare(VOTE);
  const reconnecting = next(c, 'state', (s) => s === 'reconnecting');
  c.publishState({ round: 1 });
  await reconnecting;
  const droppedAt = Date.now();
  await next(c, 'welcome');
  assert.ok(Date.now() - droppedAt >= 40, 'waited the backoff');
  assert.deepEqual(await framesOf(server, 1, 2), [
    { t: 'declare', actions: VOTE },
    { t: 'state', state: { round: 1 } },
  ]);
  assert.deepEqual(states, ['connecting', 'open', 'reconnecting', 'open']);
  await c.close();
});

test('sdk-game - an invalid declaration throws and changes nothing', async (t) => {
  const server = await startServer((ws) => welcome(ws));
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  c.declare(VOTE);
  await framesOf(server, 0, 1);
  const bad: unknown[] = [
    [],
    [{ name: 'vote', maxPerTick: 0 }],
    [{ name: 'has space', maxPerTick: 1 }],
    [{ name: 'vote', maxPerTick: 1, extra: true }],
  ];
  for (const actions of bad) {
    assert.throws(
      () => c.declare(actions as ActionSpec[]),
      (err: unknown) => isCrowdplayError(err, 'CP_ERR_GAME_INVALID_DECLARE'),
    );
  }
  assert.deepEqual(c.actions, VOTE);
  assert.throws(
    () => c.publishState([1] as unknown as Record<string, unknown>),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_PROTO_INVALID'),
  );
  // a round trip proves nothing else was sent in between
  c.publishState({ ok: true });
  const frames = await framesOf(server, 0, 2);
  assert.deepEqual(frames, [
    { t: 'declare', actions: VOTE },
    { t: 'state', state: { ok: true } },
  ]);
  await c.close();
});

test('sdk-game - a state or declaration whose frame is over the 64 KiB game frame limit throws and sends nothing', async (t) => {
  const server = await startServer((ws) => welcome(ws));
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  c.declare(VOTE);
  c.publishState({ kept: 1 });
  await framesOf(server, 0, 2);
  assert.equal(GAME_FRAME_MAX_BYTES, 65_536);
  const envelope = '{"t":"state","state":{"big":""}}'.length;
  for (const big of ['x'.repeat(100_000), 'x'.repeat(GAME_FRAME_MAX_BYTES - envelope + 1), 'é'.repeat(40_000)]) {
    assert.throws(
      () => c.publishState({ big }),
      (err: unknown) => isCrowdplayError(err, 'CP_ERR_GAME_STATE_TOO_BIG') && err.message.includes(String(GAME_FRAME_MAX_BYTES - 22)),
    );
  }
  // A valid declaration can be larger than the frame limit: display labels of up to 64 code points of 4 bytes.
  const label = '😀'.repeat(64);
  const labelled: ActionSpec[] = Array.from({ length: 32 }, (_, a) => {
    const options = Array.from({ length: 32 }, (_, o) => `o${o}`);
    return { name: `a${a}`, options, maxPerTick: 1, label, optionLabels: Object.fromEntries(options.map((o) => [o, label])) };
  });
  assert.throws(
    () => c.declare(labelled),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_GAME_INVALID_DECLARE') && err.message.includes('65536-byte game frame limit'),
  );
  assert.deepEqual(c.actions, VOTE);
  // A state right at the limit is sent; a round trip proves nothing was sent before it.
  const fits = 'x'.repeat(GAME_FRAME_MAX_BYTES - envelope);
  assert.equal(c.publishState({ big: fits }), true);
  assert.deepEqual(await framesOf(server, 0, 3), [
    { t: 'declare', actions: VOTE },
    { t: 'state', state: { kept: 1 } },
    { t: 'state', state: { big: fits } },
  ]);
  // maxFrameBytes lowers (or raises) the limit; nonsense is refused.
  const small = client(t, server, { maxFrameBytes: 100 });
  assert.throws(
    () => small.publishState({ big: 'x'.repeat(100) }),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_GAME_STATE_TOO_BIG') && err.message.includes(' 78 bytes'),
  );
  assert.throws(
    () => client(t, server, { maxFrameBytes: 0 }),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID'),
  );
  await c.close();
});

test('sdk-game - a server that closes with 1009 over a state: one error, the state is not re-sent, the client goes on', async (t) => {
  // A server whose frame limit (1,000 bytes) is below what the client assumes: the local check lets the state through.
  const server = await startServer((ws) => {
    welcome(ws);
    ws.on('message', (raw) => {
      if (Buffer.byteLength(String(raw)) > 1_000) ws.close(CloseCode.messageTooBig);
    });
  });
  t.after(() => server.close());
  const c = client(t, server);
  const errors: string[] = [];
  c.on('error', (e) => errors.push(`${e.code}: ${e.message}`));
  const closes: number[] = [];
  c.on('close', (code) => closes.push(code));
  await c.connect();
  c.declare(VOTE);
  c.publishState({ small: 1 });
  await framesOf(server, 0, 2);
  const reconnected = next(c, 'welcome');
  assert.equal(c.publishState({ big: 'x'.repeat(10_000) }), true);
  await reconnected;
  assert.equal(c.state, 'open');
  assert.deepEqual(closes, [CloseCode.messageTooBig]);
  assert.equal(errors.length, 1, errors.join('\n'));
  assert.match(errors[0]!, /^CP_ERR_PROTO_TOO_BIG: frame larger than the server's limit: the state frame of 100\d\d bytes$/);
  // The reconnect re-sent the declaration only; a later small state is sent on the new socket.
  assert.equal(c.publishState({ small: 2 }), true);
  assert.deepEqual(await framesOf(server, 1, 2), [
    { t: 'declare', actions: VOTE },
    { t: 'state', state: { small: 2 } },
  ]);
  // A round trip on that socket: no further close, no further error.
  const rt = framesOf(server, 1, 3);
  c.publishState({ small: 3 });
  await rt;
  assert.equal(server.conns.length, 2);
  assert.deepEqual(closes, [CloseCode.messageTooBig]);
  assert.equal(errors.length, 1);
  await c.close();
});

test('sdk-game - 4001 ends the client without reconnecting', async (t) => {
  const server = await startServer((ws) => {
    ws.send(JSON.stringify({ t: 'error', code: 'CP_ERR_AUTH_INVALID', message: 'credentials rejected: unknown key' }));
    ws.close(CloseCode.unauthorized);
  });
  t.after(() => server.close());
  t.mock.timers.enable({ apis: ['setTimeout'] }); // the backoff timer runs on the test's clock
  const c = client(t, server, { backoff: { initialMs: 5, maxMs: 5, jitter: 'none' } });
  await assert.rejects(c.connect(), (err: unknown) => isCrowdplayError(err, 'CP_ERR_AUTH_INVALID') && err.message.includes('unknown key'));
  assert.equal(c.state, 'closed');
  t.mock.timers.tick(60_000); // a reconnect the close scheduled (5 ms backoff) would open its socket now
  // A probe connected after that point: the server sees it, and a reconnect begun before it, by then.
  const probe = new WebSocket(`${server.url.replace('http', 'ws')}/?probe=1`);
  await Promise.all([once(probe, 'open'), server.when(() => server.conns.some((u) => u.searchParams.has('probe')))]);
  probe.terminate();
  assert.deepEqual(
    server.conns.map((u) => u.searchParams.has('probe')),
    [false, true],
    'the client connected once, the probe after it',
  );
  assert.throws(
    () => c.declare(VOTE),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_NOT_OPEN'),
  );
});

test('sdk-game - bad frames are reported as errors, the client stays open', async (t) => {
  const server = await startServer((ws) => {
    welcome(ws);
    ws.send('{nope');
    ws.send(JSON.stringify({ t: 'strange' }));
    ws.send(JSON.stringify({ t: 'batch', ev: 'one' }));
    ws.send(Buffer.from([0, 1]), { binary: true });
    ws.send(JSON.stringify(batch(2)));
  });
  t.after(() => server.close());
  const c = client(t, server);
  const codes: string[] = [];
  c.on('error', (e) => codes.push(e.code));
  const good = next(c, 'batch');
  await c.connect();
  const [b] = await good;
  assert.equal(b.ev, 2);
  assert.deepEqual(codes, ['CP_ERR_PROTO_MALFORMED', 'CP_ERR_PROTO_UNKNOWN_TYPE', 'CP_ERR_PROTO_INVALID', 'CP_ERR_PROTO_MALFORMED']);
  assert.equal(c.state, 'open');
  await c.close();
});

test('sdk-game - close() is idempotent; bad options are refused', async (t) => {
  const server = await startServer((ws) => welcome(ws));
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  const p = c.close();
  assert.equal(c.close(), p);
  await p;
  assert.equal(c.state, 'closed');
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
    code(() => client(t, server, { channel: 'a b' })),
    'CP_ERR_CHANNEL_INVALID_ID',
  );
  assert.equal(
    code(() => client(t, server, { apiKey: '' })),
    'CP_ERR_AUTH_MISSING',
  );
  assert.equal(
    code(() => client(t, server, { url: 'mailto:x' })),
    'CP_ERR_CONFIG_INVALID',
  );
});

function roundView(id: string, extra: Partial<RoundView> = {}): RoundView {
  return { id, kind: 'pool', outcomes: ['a', 'b'], state: 'open', openedAt: 1_000, deadline: 31_000, pool: [0, 0], entries: 0, ...extra };
}

type Req = Record<string, unknown> & { t: string; ref?: string };

/** A server that answers each round request with `answer(req)` (a frame, or nothing), after `delayMs`. */
async function roundServer(answer: (req: Req) => object | undefined, delayMs = 0): Promise<TestServer> {
  return startServer((ws) => {
    welcome(ws);
    ws.on('message', (raw) => {
      const req = JSON.parse(String(raw)) as Req;
      const frame = answer(req);
      if (frame) setTimeout(() => ws.send(JSON.stringify(frame)), delayMs);
    });
  });
}

test('sdk-game - openRound / settleRound / cancelRound send round frames with fresh refs and resolve with the result round', async (t) => {
  const server = await roundServer((req) => {
    if (req.t === 'round.open')
      return { t: 'result', ref: req.ref, ok: true, round: roundView(String(req.round), { kind: req.kind as 'pool' }) };
    if (req.t === 'round.settle')
      return {
        t: 'result',
        ref: req.ref,
        ok: true,
        round: roundView(String(req.round), { state: 'settled', winner: String(req.outcome) }),
      };
    if (req.t === 'round.cancel')
      return { t: 'result', ref: req.ref, ok: true, round: roundView(String(req.round), { state: 'cancelled' }) };
    return undefined;
  });
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  const [opened, market, settled, cancelled] = await Promise.all([
    c.openRound({ round: 'r1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 30_000 }),
    c.openRound({ round: 'm1', kind: 'market', outcomes: ['x', 'y', 'z'], durationMs: 5_000, liquidity: 250 }),
    c.settleRound('r1', 'b'),
    c.cancelRound('m1'),
  ]);
  assert.deepEqual(opened, roundView('r1'));
  assert.deepEqual(market, roundView('m1', { kind: 'market' }));
  assert.deepEqual(settled, roundView('r1', { state: 'settled', winner: 'b' }));
  assert.deepEqual(cancelled, roundView('m1', { state: 'cancelled' }));
  const frames = (await framesOf(server, 0, 4)) as Req[];
  assert.deepEqual(
    frames.map(({ ref: _ref, ...rest }) => rest),
    [
      { t: 'round.open', round: 'r1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 30_000 },
      { t: 'round.open', round: 'm1', kind: 'market', outcomes: ['x', 'y', 'z'], durationMs: 5_000, liquidity: 250 },
      { t: 'round.settle', round: 'r1', outcome: 'b' },
      { t: 'round.cancel', round: 'm1' },
    ],
  );
  const refs = frames.map((f) => f.ref);
  assert.equal(new Set(refs).size, 4, 'one ref per request');
  assert.ok(refs.every((r) => typeof r === 'string' && /^[A-Za-z0-9_.:-]{1,64}$/.test(r)));
  assert.equal(c.pendingRequests, 0);
  await c.close();
});

test('sdk-game - answers are matched by ref, also out of order; an error frame with ref rejects with its code and is no error event', async (t) => {
  const held: Req[] = [];
  const server = await startServer((ws) => {
    welcome(ws);
    ws.on('message', (raw) => {
      held.push(JSON.parse(String(raw)) as Req);
      if (held.length < 3) return;
      const [open, settle, cancel] = held as [Req, Req, Req];
      ws.send(
        JSON.stringify({ t: 'error', code: 'CP_ERR_ROUND_ALREADY_FINAL', message: 'round r1 was already cancelled', ref: cancel.ref }),
      );
      ws.send(JSON.stringify({ t: 'error', code: 'CP_ERR_FROM_THE_FUTURE', message: 'newer server', ref: settle.ref }));
      ws.send(JSON.stringify({ t: 'result', ref: open.ref, ok: true, round: roundView('r1') }));
      ws.send(JSON.stringify({ t: 'error', code: 'CP_ERR_GAME_STATE_TOO_BIG', message: 'game state larger than 16384 bytes' }));
    });
  });
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  const events: Array<[string, string | undefined]> = [];
  c.on('error', (e, frame) => events.push([e.code, frame?.ref]));
  const unrelated = next(c, 'error');
  const open = c.openRound({ round: 'r1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 1_000 });
  const settle = c.settleRound('r1', 'a');
  const cancel = c.cancelRound('r1');
  await assert.rejects(cancel, (err: unknown) => {
    assert.ok(isCrowdplayError(err, 'CP_ERR_ROUND_ALREADY_FINAL'));
    assert.equal(err.message, 'round r1 was already cancelled');
    return true;
  });
  await assert.rejects(settle, (err: unknown) => isCrowdplayError(err, 'CP_ERR_INTERNAL') && err.message === 'newer server');
  assert.deepEqual(await open, roundView('r1'));
  await unrelated;
  assert.deepEqual(events, [['CP_ERR_GAME_STATE_TOO_BIG', undefined]], 'only the error answering no request is an event');
  assert.equal(c.state, 'open');
  await c.close();
});

test('sdk-game - a round request refused as retryable (the channel is moving) is sent again with backoff; a final refusal is not', async (t) => {
  const seen: Req[] = [];
  const server = await roundServer((req) => {
    seen.push(req);
    const tries = seen.filter((r) => r.t === req.t && r.round === req.round).length;
    if (req.t === 'round.open' && tries <= 2) return { t: 'error', code: 'CP_ERR_CHANNEL_UNAVAILABLE', message: 'moving', ref: req.ref };
    if (req.t === 'round.open') return { t: 'result', ref: req.ref, ok: true, round: roundView(String(req.round)) };
    return { t: 'error', code: 'CP_ERR_ROUND_ALREADY_FINAL', message: 'final', ref: req.ref };
  });
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  assert.deepEqual(await c.openRound({ round: 'r1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 1_000 }), roundView('r1'));
  const opens = seen.filter((r) => r.t === 'round.open');
  assert.equal(opens.length, 3, 'two refusals, then the third attempt');
  assert.equal(new Set(opens.map((r) => r.ref)).size, 3, 'a fresh ref per attempt');
  await assert.rejects(c.settleRound('r1', 'a'), (err: unknown) => isCrowdplayError(err, 'CP_ERR_ROUND_ALREADY_FINAL'));
  assert.equal(seen.filter((r) => r.t === 'round.settle').length, 1, 'a final refusal is not retried');
  const none = client(t, server, { retryDeadlineMs: 0 });
  await none.connect();
  await assert.rejects(none.openRound({ round: 'r2', kind: 'pool', outcomes: ['a', 'b'], durationMs: 1_000 }), (err: unknown) =>
    isCrowdplayError(err, 'CP_ERR_CHANNEL_UNAVAILABLE'),
  );
  assert.equal(seen.filter((r) => r.round === 'r2').length, 1, 'retryDeadlineMs 0: sent once');
  await none.close();
  await c.close();
});

test('sdk-game - invalid round arguments reject with CP_ERR_ROUND_INVALID and send nothing', async (t) => {
  const server = await roundServer((req) => ({ t: 'result', ref: req.ref, ok: true, round: roundView(String(req.round)) }));
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  const bad: Array<() => Promise<RoundView>> = [
    () => c.openRound({ round: 'r1', kind: 'pool', outcomes: ['only'], durationMs: 1_000 }),
    () => c.openRound({ round: 'r1', kind: 'pool', outcomes: ['a', 'a'], durationMs: 1_000 }),
    () => c.openRound({ round: 'r1', kind: 'lottery' as 'pool', outcomes: ['a', 'b'], durationMs: 1_000 }),
    () => c.openRound({ round: 'r1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 0 }),
    () => c.openRound({ round: 'r1', kind: 'market', outcomes: ['a', 'b'], durationMs: 1_000, liquidity: 0.5 }),
    () => c.openRound({ round: 'has space', kind: 'pool', outcomes: ['a', 'b'], durationMs: 1_000 }),
    () => c.settleRound('r1', ''),
    () => c.cancelRound('x'.repeat(33)),
  ];
  for (const [i, call] of bad.entries()) {
    await assert.rejects(call(), (err: unknown) => isCrowdplayError(err, 'CP_ERR_ROUND_INVALID'), `case ${i}`);
  }
  assert.equal(c.pendingRequests, 0);
  assert.deepEqual(await c.cancelRound('r2'), roundView('r2'));
  const frames = (await framesOf(server, 0, 1)) as Req[];
  assert.equal(frames.length, 1, 'only the valid request was sent');
  assert.equal(frames[0]?.t, 'round.cancel');
  await c.close();
});

test('sdk-game - a request without an answer times out with CP_ERR_CLIENT_REQUEST_TIMEOUT; a late answer is dropped', async (t) => {
  let held: { ws: WebSocket; req: Req } | undefined; // the request, unanswered until the test answers it
  const server = await startServer((ws) => {
    welcome(ws);
    ws.on('message', (raw) => (held = { ws, req: JSON.parse(String(raw)) as Req }));
  });
  t.after(() => server.close());
  const c = client(t, server, { requestTimeoutMs: 40 });
  await c.connect();
  const errors: string[] = [];
  c.on('error', (e) => errors.push(e.code));
  const t0 = Date.now();
  await assert.rejects(
    c.settleRound('r1', 'a'),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_REQUEST_TIMEOUT') && /within 40 ms/.test(err.message),
  );
  assert.ok(Date.now() - t0 >= 35, 'waited the timeout');
  assert.equal(c.pendingRequests, 0);
  // The answer arrives late, and a batch after it: once the batch is out, the client has handled the answer.
  await server.when(() => held !== undefined);
  const batchOut = next(c, 'batch');
  held!.ws.send(JSON.stringify({ t: 'result', ref: held!.req.ref, ok: true, round: roundView(String(held!.req.round)) }));
  held!.ws.send(JSON.stringify(batch(1)));
  await within(batchOut, 'the batch sent after the late answer');
  assert.deepEqual(errors, [], 'the late answer resolves nothing and raises nothing');
  assert.equal(c.state, 'open');
  await c.close();
  assert.throws(
    () => new GameClient({ url: server.url, channel: 'g1', apiKey: 'k', requestTimeoutMs: 0 }),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID'),
  );
});

test('sdk-game - pending round requests reject when the socket drops or the client closes; not open rejects', async (t) => {
  const server = await startServer((ws, _u, i) => {
    welcome(ws);
    if (i === 0) ws.on('message', () => setTimeout(() => ws.terminate(), 20)); // drop after the second request arrived
  });
  t.after(() => server.close());
  const c = client(t, server, { backoff: { initialMs: 20, maxMs: 20, jitter: 'none' } });
  await assert.rejects(c.cancelRound('r1'), (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_NOT_OPEN'));
  await c.connect();
  const dropped = [c.cancelRound('r1'), c.settleRound('r2', 'a')].map((p) =>
    assert.rejects(p, (err: unknown) => isCrowdplayError(err, 'CP_ERR_CLIENT_CLOSED') && err.message.includes('1006')),
  );
  await Promise.all(dropped);
  assert.equal(c.pendingRequests, 0);
  await next(c, 'welcome');
  const closing = assert.rejects(c.openRound({ round: 'r3', kind: 'pool', outcomes: ['a', 'b'], durationMs: 1_000 }), (err: unknown) =>
    isCrowdplayError(err, 'CP_ERR_CLIENT_CLOSED'),
  );
  await c.close();
  await closing;
  assert.equal(c.pendingRequests, 0);
  assert.equal(server.conns.length, 2);
  assert.deepEqual(
    ((await framesOf(server, 1, 1)) as Req[]).map((f) => f.t),
    ['round.open'],
    'the dropped requests were not re-sent on the new socket',
  );
});

test('sdk-game - round frames emit `round`; a bad one is an error event', async (t) => {
  const locked = roundView('r1', { state: 'locked' });
  const server = await startServer((ws) => {
    welcome(ws);
    ws.send(JSON.stringify({ t: 'round', round: { state: 'locked' } }));
    ws.send(JSON.stringify({ t: 'round', round: locked }));
  });
  t.after(() => server.close());
  const c = client(t, server);
  const errors: string[] = [];
  c.on('error', (e) => errors.push(e.code));
  const got = next(c, 'round');
  await c.connect();
  const [r] = await got;
  assert.deepEqual(r, locked);
  assert.deepEqual(errors, ['CP_ERR_PROTO_INVALID']);
  await c.close();
});

test('sdk-game - declare passes welcomeGrant (re-sent after a reconnect); a bad one is refused', async (t) => {
  const server = await startServer((ws, _u, i) => {
    welcome(ws);
    if (i === 0) ws.on('message', () => ws.terminate());
  });
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  assert.throws(
    () => c.declare(VOTE, { welcomeGrant: -1 }),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_GAME_INVALID_DECLARE'),
  );
  assert.throws(
    () => c.declare(VOTE, { welcomeGrant: 2.5 }),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_GAME_INVALID_DECLARE'),
  );
  assert.equal(c.actions, null, 'nothing remembered');
  const reopened = next(c, 'welcome');
  c.declare(VOTE, { welcomeGrant: 500 });
  await reopened;
  assert.deepEqual(await framesOf(server, 0, 1), [{ t: 'declare', actions: VOTE, welcomeGrant: 500 }]);
  assert.deepEqual(await framesOf(server, 1, 1), [{ t: 'declare', actions: VOTE, welcomeGrant: 500 }]);
  await c.close();
});

test(
  'sdk-game - a 4009 on the first connect rejects with CP_ERR_CHANNEL_GAME_CONNECTED and makes no further attempt',
  { timeout: 10_000 },
  async (t) => {
    const server = await startServer((ws) => {
      ws.send(JSON.stringify({ t: 'error', code: 'CP_ERR_CHANNEL_GAME_CONNECTED', message: 'channel g1 already has a game connection' }));
      ws.close(CloseCode.gameConflict, 'CP_ERR_CHANNEL_GAME_CONNECTED');
    });
    t.after(() => server.close());
    t.mock.timers.enable({ apis: ['setTimeout'] }); // the backoff timer runs on the test's clock
    const c = client(t, server, { backoff: { initialMs: 5, maxMs: 5, jitter: 'none' } });
    const closed = next(c, 'close');
    const connecting = c.connect();
    const [code] = await closed;
    assert.equal(code, CloseCode.gameConflict);
    assert.equal(c.state, 'closed', 'ended by the close, not waiting to reconnect');
    await assert.rejects(
      connecting,
      (err: unknown) => isCrowdplayError(err, 'CP_ERR_CHANNEL_GAME_CONNECTED') && err.message.includes('g1'),
    );
    t.mock.timers.tick(120_000); // a reconnect (5 ms backoff) or the connect deadline would act now
    const probe = new WebSocket(`${server.url.replace('http', 'ws')}/?probe=1`);
    await Promise.all([once(probe, 'open'), server.when(() => server.conns.some((u) => u.searchParams.has('probe')))]);
    probe.terminate();
    assert.deepEqual(
      server.conns.map((u) => u.searchParams.has('probe')),
      [false, true],
      'the client connected once, the probe after it',
    );
  },
);

test('sdk-game - a 4009 after a successful connect is retried', async (t) => {
  const server = await startServer((ws, _u, i) => {
    if (i === 1) {
      ws.send(JSON.stringify({ t: 'error', code: 'CP_ERR_CHANNEL_GAME_CONNECTED', message: 'channel g1 already has a game connection' }));
      ws.close(CloseCode.gameConflict);
      return;
    }
    welcome(ws);
    if (i === 0) setTimeout(() => ws.terminate(), 10);
  });
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  const [code] = await next(c, 'close', (code) => code === CloseCode.gameConflict);
  assert.equal(code, CloseCode.gameConflict);
  await next(c, 'welcome');
  assert.equal(server.conns.length, 3, 'dropped, refused with 4009, then connected again');
  assert.equal(c.state, 'open');
  await c.close();
});

test('sdk-game - connect() to a refused port retries until connectTimeoutMs, then rejects with CP_ERR_CLIENT_WELCOME_TIMEOUT', async (t) => {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await once(wss, 'listening');
  const { port } = wss.address() as AddressInfo;
  await new Promise<void>((resolve) => wss.close(() => resolve())); // nothing listens on the port now
  const c = new GameClient({
    url: `http://127.0.0.1:${port}`,
    channel: 'g1',
    apiKey: 'cpk_test',
    backoff: { initialMs: 20, maxMs: 40, jitter: 'none' },
    connectTimeoutMs: 400,
  });
  t.after(() => c.close());
  let attempts = 0;
  c.on('error', (e) => {
    if (e.code === 'CP_ERR_CLIENT_SOCKET') attempts++;
  });
  const t0 = Date.now();
  await within(
    assert.rejects(c.connect(), (err: unknown) => {
      assert.ok(isCrowdplayError(err, 'CP_ERR_CLIENT_WELCOME_TIMEOUT'), String(err));
      assert.match(err.message, /400 ms.*CP_ERR_CLIENT_SOCKET/);
      assert.ok(isCrowdplayError(err.cause, 'CP_ERR_CLIENT_SOCKET'), 'the last attempt is the cause');
      return true;
    }),
    'connect() to reject',
    { timeoutMs: 5_000 },
  );
  const elapsed = Date.now() - t0;
  assert.ok(elapsed >= 390, `rejected after ${elapsed} ms, not before the deadline`);
  assert.ok(attempts >= 2, `retried meanwhile (${attempts} attempts)`);
  assert.equal(c.state, 'closed');
  const before = attempts;
  await new Promise((r) => setTimeout(r, 100)); // two backoff periods: no attempt follows the end
  assert.equal(attempts, before, 'no attempt after the rejection');
  assert.throws(
    () => new GameClient({ url: 'http://127.0.0.1:1', channel: 'g1', apiKey: 'k', connectTimeoutMs: 0 }),
    (err: unknown) => isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID'),
  );
});

test('sdk-game - a round cancelled while disconnected is emitted once, from the first update after the reconnect', async (t) => {
  const cancelled = roundView('r1', { state: 'cancelled', pool: [100, 0], entries: 1 });
  const server = await startServer((ws, _u, i) => {
    welcome(ws);
    if (i === 0) {
      ws.on('message', (raw) => {
        const req = JSON.parse(String(raw)) as Req;
        ws.send(JSON.stringify({ t: 'result', ref: req.ref, ok: true, round: roundView(String(req.round)) }));
        if (req.round === 'r2') setTimeout(() => ws.terminate(), 20); // the server stops
      });
      return;
    }
    // The drain cancelled r1 and refunded it; the restarted shard lists r1 as finished, r2 (finished and
    // refunded before the restart) not at all.
    ws.send(JSON.stringify({ t: 'resync', channel: 'g1', from: 0, reason: 'unavailable' }));
    const update = { t: 'update', channel: 'g1', ev: 5, at: Date.now(), actions: VOTE, tally: {}, rounds: [cancelled] };
    ws.send(JSON.stringify(update));
    ws.send(JSON.stringify(update)); // a second update changes nothing
    ws.send(JSON.stringify({ t: 'round', round: cancelled })); // nor a late duplicate round frame
    ws.send(JSON.stringify(batch(6)));
  });
  t.after(() => server.close());
  const c = client(t, server);
  await c.connect();
  await c.openRound({ round: 'r1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 30_000 });
  await c.openRound({ round: 'r2', kind: 'pool', outcomes: ['a', 'b'], durationMs: 30_000 });
  const rounds: RoundView[] = [];
  c.on('round', (r) => rounds.push(r));
  const after = next(c, 'batch');
  await within(after, 'the batch after the updates');
  assert.deepEqual(rounds, [cancelled, roundView('r2', { state: 'cancelled' })]);
  await c.close();
});
