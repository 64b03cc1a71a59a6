/**
 * FROZEN — the bare-ws reference server for `crowd --baseline`.
 *
 * This file is a measuring stick, not product code: it is what the crowd
 * scenario costs on a plain `ws` server that does nothing but the protocol's
 * minimum, so `ours / reference` ratios mean the same thing from one run to
 * the next. Do not optimise it, extend it or "fix" it to match the product.
 * Any change (even a bug fix) changes every baseline: note it, with the date
 * and the reason, in docs/benchmarks.md, and re-run the baselines quoted there.
 *
 * What it does (and deliberately no more):
 * - `GET /v1/ws?role=crowd|game&channel=C…` on a plain `ws` server (no
 *   fastify, no auth: any token and any key is accepted; the viewer id is the
 *   token's unverified `sub` claim, else `anon-N`); `welcome` first.
 * - crowd `act` → an immediate `{t:'ack',seq,ok:true,cost:0}`; the intent is
 *   tallied for its channel, listed in the tick's batch up to `maxPerTick`
 *   (the game's declared value, else 1,000) with `{viewer, option, at}`
 *   (`at` = receipt time), beyond that counted as `dropped`.
 * - every `tickMs` (default 250) each channel with a game connection sends
 *   one `batch` (the Batch shape of libs/protocol) to its game sockets.
 * - at most every `channelUpdateMs` (default 250) each changed channel's
 *   `update` (the ChannelUpdate shape: actions, cumulative tally, game state,
 *   ev, at) is serialised once and sent to each of its crowd sockets.
 * - a game's `declare` replaces the channel's actions and resets its
 *   cumulative tally; `state` replaces its game state. Both mark it changed.
 *
 * Run standalone: `tsx loadtest/src/reference-server.ts --port 0 [--host 127.0.0.1]
 * [--update-ms 250] [--tick-ms 250]`; prints `{"listening":{"host","port","pid"}}`
 * and, when forked, sends `{type:'listening', port, pid}` over IPC.
 */
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import type { ActionSpec, Batch, BatchIntent, ChannelUpdate, Tally, Welcome } from '@crowdplay/protocol';

/** Options of the reference server. */
export interface ReferenceServerOptions {
  /** @defaultValue '127.0.0.1' */
  host?: string;
  /** 0 = any free port. @defaultValue 0 */
  port?: number;
  /** Minimum interval between two updates of one channel, ms (CHANNEL_UPDATE_MS). @defaultValue 250 */
  channelUpdateMs?: number;
  /** Batch period, ms (TICK_MS). @defaultValue 250 */
  tickMs?: number;
}

/** A running reference server. */
export interface ReferenceServer {
  port: number;
  /** `http://host:port`, the base URL the scenario takes. */
  url: string;
  close(): Promise<void>;
}

interface TickAction {
  tally: Record<string, number>;
  intents: BatchIntent[];
  dropped: number;
}

interface Channel {
  id: string;
  crowd: Set<WebSocket>;
  games: Set<WebSocket>;
  actions: ActionSpec[];
  tally: Tally;
  game: Record<string, unknown> | undefined;
  tick: Map<string, TickAction>;
  tickNo: number;
  ev: number;
  changedAt: number;
  dirty: boolean;
}

const DEFAULT_MAX_PER_TICK = 1_000;

function viewerFromToken(token: string | null, fallback: string): string {
  const payload = token?.split('.')[1];
  if (!payload) return fallback;
  try {
    const sub = (JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { sub?: unknown }).sub;
    return typeof sub === 'string' && sub ? sub : fallback;
  } catch {
    return fallback;
  }
}

/** Starts the reference server in this process. */
export async function startReferenceServer(opts: ReferenceServerOptions = {}): Promise<ReferenceServer> {
  const host = opts.host ?? '127.0.0.1';
  const tickMs = opts.tickMs ?? 250;
  const channelUpdateMs = opts.channelUpdateMs ?? 250;
  const channels = new Map<string, Channel>();
  let anon = 0;

  const channel = (id: string): Channel => {
    let ch = channels.get(id);
    if (!ch) {
      ch = {
        id,
        crowd: new Set(),
        games: new Set(),
        actions: [],
        tally: {},
        game: undefined,
        tick: new Map(),
        tickNo: 0,
        ev: 0,
        changedAt: Date.now(),
        dirty: false,
      };
      channels.set(id, ch);
    }
    return ch;
  };
  const changed = (ch: Channel): void => {
    ch.ev++;
    ch.changedAt = Date.now();
    ch.dirty = true;
  };

  const wss = new WebSocketServer({ host, port: opts.port ?? 0, perMessageDeflate: false });
  wss.on('connection', (ws, req) => {
    const url = new URL(req.url ?? '/', 'http://reference');
    const role = url.searchParams.get('role');
    const channelId = url.searchParams.get('channel') ?? '';
    if (url.pathname !== '/v1/ws' || (role !== 'crowd' && role !== 'game') || !/^[A-Za-z0-9_-]{1,64}$/.test(channelId)) {
      ws.close(4004, 'bad url');
      return;
    }
    const ch = channel(channelId);
    const viewer = role === 'crowd' ? viewerFromToken(url.searchParams.get('token'), `anon-${++anon}`) : undefined;
    const welcome: Welcome = {
      t: 'welcome',
      v: 1,
      role,
      channel: channelId,
      serverTime: Date.now(),
      tickMs,
      ...(viewer ? { viewer } : {}),
    };
    ws.send(JSON.stringify(welcome));
    if (role === 'crowd') {
      ch.crowd.add(ws);
      ws.on('close', () => ch.crowd.delete(ws));
      ws.on('message', (raw) => {
        let m: { t?: unknown; seq?: unknown; action?: unknown; option?: unknown };
        try {
          m = JSON.parse(String(raw)) as typeof m;
        } catch {
          ws.send(JSON.stringify({ t: 'error', code: 'CP_ERR_PROTO_MALFORMED', message: 'frame is not valid JSON' }));
          return;
        }
        if (m.t !== 'act' || !Number.isInteger(m.seq) || typeof m.action !== 'string') {
          ws.send(JSON.stringify({ t: 'error', code: 'CP_ERR_PROTO_INVALID', message: 'expected {t:"act",seq,action,option?}' }));
          return;
        }
        ws.send(JSON.stringify({ t: 'ack', seq: m.seq, ok: true, cost: 0 }));
        const now = Date.now();
        const option = typeof m.option === 'string' ? m.option : undefined;
        const key = option ?? '_';
        const cum = (ch.tally[m.action] ??= {});
        cum[key] = (cum[key] ?? 0) + 1;
        let ta = ch.tick.get(m.action);
        if (!ta) {
          ta = { tally: {}, intents: [], dropped: 0 };
          ch.tick.set(m.action, ta);
        }
        ta.tally[key] = (ta.tally[key] ?? 0) + 1;
        const cap = ch.actions.find((a) => a.name === m.action)?.maxPerTick ?? DEFAULT_MAX_PER_TICK;
        if (ta.intents.length < cap)
          ta.intents.push(option === undefined ? { viewer: viewer ?? '', at: now } : { viewer: viewer ?? '', option, at: now });
        else ta.dropped++;
        changed(ch);
      });
    } else {
      ch.games.add(ws);
      ws.on('close', () => ch.games.delete(ws));
      ws.on('message', (raw) => {
        let m: { t?: unknown; actions?: unknown; state?: unknown };
        try {
          m = JSON.parse(String(raw)) as typeof m;
        } catch {
          return;
        }
        if (m.t === 'declare' && Array.isArray(m.actions)) {
          ch.actions = m.actions as ActionSpec[];
          ch.tally = {};
          changed(ch);
        } else if (m.t === 'state' && typeof m.state === 'object' && m.state !== null) {
          ch.game = m.state as Record<string, unknown>;
          changed(ch);
        }
      });
    }
  });

  const tickTimer = setInterval(() => {
    const closedAt = Date.now();
    for (const ch of channels.values()) {
      if (ch.games.size === 0) {
        ch.tick.clear();
        continue;
      }
      ch.tickNo++;
      const actions: Batch['actions'] = {};
      for (const [name, ta] of ch.tick) actions[name] = ta;
      const batch: Batch = { t: 'batch', channel: ch.id, ev: ch.ev, tick: ch.tickNo, closedAt, actions };
      const frame = JSON.stringify(batch);
      for (const g of ch.games) g.send(frame);
      ch.tick = new Map();
    }
  }, tickMs);

  const updateTimer = setInterval(() => {
    for (const ch of channels.values()) {
      if (!ch.dirty) continue;
      ch.dirty = false;
      if (ch.crowd.size === 0) continue;
      const update: ChannelUpdate = {
        t: 'update',
        channel: ch.id,
        ev: ch.ev,
        at: ch.changedAt,
        actions: ch.actions,
        tally: ch.tally,
        ...(ch.game ? { game: ch.game } : {}),
      };
      const frame = JSON.stringify(update);
      for (const s of ch.crowd) s.send(frame);
    }
  }, channelUpdateMs);

  await once(wss, 'listening');
  const port = (wss.address() as AddressInfo).port;
  let closing: Promise<void> | null = null;
  return {
    port,
    url: `http://${host}:${port}`,
    close: () => {
      closing ??= new Promise<void>((resolve) => {
        clearInterval(tickTimer);
        clearInterval(updateTimer);
        for (const ws of wss.clients) ws.terminate();
        wss.close(() => resolve());
      });
      return closing;
    },
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      'update-ms': { type: 'string', default: '250' },
      'tick-ms': { type: 'string', default: '250' },
    },
  });
  const server = await startReferenceServer({
    host: values.host,
    port: Number(values.port),
    channelUpdateMs: Number(values['update-ms']),
    tickMs: Number(values['tick-ms']),
  });
  console.log(JSON.stringify({ listening: { host: values.host, port: server.port, pid: process.pid } }));
  process.send?.({ type: 'listening', port: server.port, pid: process.pid });
  const stop = (): void => {
    void server.close().then(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.on('disconnect', stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
