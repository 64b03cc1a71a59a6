import type { Ledger } from '@crowdplay/ledger';
/**
 * Test harness for the gateway: a real InProcessBus, a real store (Postgres
 * schema per suite, or a stub for HTTP-only tests), a fake router, a fake
 * shard (acks every intent, answers `ch.<C>.ctl`) and ws clients.
 */
import { pino } from 'pino';
import { SignJWT } from 'jose';
import WebSocket from 'ws';
import { defaultConfig, type Config } from '@crowdplay/config';
import { decodeJson, encodeJson, InProcessBus, subjects, type Subjects } from '@crowdplay/bus';
import type { AckBatch, BalanceFrame, BusAck, BusIntent, IntentBatch, WalletBatch } from '@crowdplay/protocol';
import { openStore, type Store, type TenantCredentials } from '@crowdplay/store';
import { createTelemetry, type Telemetry } from '@crowdplay/telemetry';
import { assertRefusalsLoggedOnce, testSchema, uniqueName, until } from '@crowdplay/testing';
import type { Assignment, RouterApi } from '@crowdplay/router';
import type { ChannelCtlReply, ChannelCtlRequest } from '@crowdplay/crowd-engine';
import { createGateway, type Gateway } from '../src/index.ts';

/**
 * Polls `cond` until it is true (every 5 ms), for state that announces no event (a metric, a row).
 * @throws WaitTimeoutError (rejects) after `timeoutMs`, naming `label`
 */
export async function waitUntil(cond: () => boolean | Promise<boolean>, label: string, timeoutMs = 5_000): Promise<void> {
  await until(label, cond, { timeoutMs, intervalMs: 5 });
}

/** A suite's store: a fresh Postgres schema with two tenants and a channel of each. */
export interface SuiteStore {
  store: Store;
  acme: TenantCredentials;
  rival: TenantCredentials;
  /** A channel of acme. */
  channel: string;
  /** A channel of rival. */
  rivalChannel: string;
  close(): Promise<void>;
}

export async function openSuiteStore(): Promise<SuiteStore> {
  const schema = await testSchema();
  const store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 4, pgliteDir: 'memory' });
  const acme = await store.tenants.create('acme', 'Acme');
  const rival = await store.tenants.create('rival', 'Rival');
  await store.channels.ensure('room1', 'acme');
  await store.channels.ensure('rivalroom', 'rival');
  return {
    store,
    acme,
    rival,
    channel: 'room1',
    rivalChannel: 'rivalroom',
    async close() {
      await store.close();
      await schema.drop();
    },
  };
}

/** A store for tests that never touch it (HTTP routes). Any call fails the test. */
export function unusedStore(): Store {
  const fail = (): never => {
    throw new Error('the store must not be used by this test');
  };
  return new Proxy({} as Store, { get: (_t, prop) => (prop === 'then' ? undefined : fail) });
}

/** Signs a viewer token (HS256) with `secret`. */
export async function viewerToken(
  secret: string,
  claims: { sub?: string; tid?: string; ch?: string; expS?: number; nbfS?: number } = {},
): Promise<string> {
  const { sub = 'viewer-1', expS = 600, nbfS, ...rest } = claims;
  const now = Math.floor(Date.now() / 1_000);
  const jwt = new SignJWT({ ...rest })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(sub)
    .setIssuedAt(now)
    .setExpirationTime(now + expS);
  if (nbfS !== undefined) jwt.setNotBefore(now + nbfS);
  return jwt.sign(new TextEncoder().encode(secret));
}

/**
 * A fake shard: acks every intent it receives (`ackFor`), answers joins with
 * `joinBalance` (none by default), and answers `ch.<C>.ctl` for `channels`.
 */
export class FakeShard {
  /** IntentBatches that carried intents (join-only batches are in `allBatches`). */
  readonly batches: IntentBatch[] = [];
  /** Every IntentBatch received, join-only ones included. */
  readonly allBatches: IntentBatch[] = [];
  /** Every join received, with the channel of its batch, in order. */
  readonly joins: Array<{ channel: string; conn: number; viewer: string }> = [];
  readonly ctl: Array<{ channel: string; req: ChannelCtlRequest }> = [];
  /** The ack for one intent (default: accepted, cost 0). */
  ackFor: (intent: BusIntent) => BusAck = (i) => ({ conn: i.conn, seq: i.seq, ok: true, cost: 0 });
  /** The balance frame answering a join (default: none). */
  joinBalance: (join: { conn: number; viewer: string }) => BalanceFrame | undefined = () => undefined;
  /** Update text returned for `{op:'snapshot'}`, per channel. */
  readonly snapshots = new Map<string, string>();
  /** Batches still to be sent back as a shard does while the channel moves (every intent with `resend`, every join as `rejoin`). */
  movingBatches = 0;
  /** Reply for declare/state (default ok). */
  ctlReply: (channel: string, req: ChannelCtlRequest) => ChannelCtlReply = () => ({ ok: true });

  constructor(
    private readonly bus: InProcessBus,
    private readonly subj: Subjects,
    channels: string[],
  ) {
    bus.subscribe(subj.allChannelsIn(), (msg) => {
      const batch = decodeJson<IntentBatch>(msg.data);
      const channel = msg.subject.split('.').at(-2) ?? '';
      this.allBatches.push(batch);
      if (this.movingBatches > 0) {
        this.movingBatches--;
        const back: AckBatch = {
          acks: batch.intents.map((i) => ({ conn: i.conn, seq: i.seq, ok: false, code: 'CP_ERR_CHANNEL_UNAVAILABLE', resend: i })),
        };
        if (batch.joins) back.rejoin = batch.joins;
        bus.publish(subj.gatewayAcks(batch.gw), encodeJson(back));
        return;
      }
      if (batch.intents.length > 0) this.batches.push(batch);
      const acks: AckBatch = { acks: batch.intents.map((i) => this.ackFor(i)) };
      for (const j of batch.joins ?? []) {
        this.joins.push({ channel, conn: j.conn, viewer: j.viewer });
        const frame = this.joinBalance(j);
        if (frame) (acks.balances ??= []).push({ conn: j.conn, frame });
      }
      if (acks.acks.length > 0 || acks.balances) bus.publish(subj.gatewayAcks(batch.gw), encodeJson(acks));
    });
    for (const channel of channels) {
      bus.subscribe(subj.channelCtl(channel), (msg) => {
        const req = decodeJson<ChannelCtlRequest>(msg.data);
        this.ctl.push({ channel, req });
        if (req.op === 'snapshot') {
          const update = this.snapshots.get(channel);
          msg.respond(encodeJson(update === undefined ? { ok: true } : { ok: true, update }));
        } else msg.respond(encodeJson(this.ctlReply(channel, req)));
      });
    }
  }

  /** Intents received across all batches. */
  get intents(): number {
    return this.batches.reduce((n, b) => n + b.intents.length, 0);
  }

  /** Publishes a WalletBatch on `ch.<C>.wallet`, as the real shard does after payouts and refunds. */
  publishWallet(channel: string, batch: WalletBatch): void {
    this.bus.publish(this.subj.channelWallet(channel), encodeJson(batch));
  }

  /** Publishes an update frame (bytes) on `ch.<C>.out`, as the real shard does. */
  publishUpdate(channel: string, update: object): Buffer {
    const bytes = Buffer.from(JSON.stringify(update));
    this.bus.publish(this.subj.channelOut(channel), bytes);
    return bytes;
  }
}

/** A minimal update frame. */
export function updateFrame(channel: string, ev: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    t: 'update',
    channel,
    ev,
    at: Date.now(),
    actions: [{ name: 'pull', maxPerTick: 100, options: ['left', 'right'] }],
    tally: { pull: { left: 0, right: 0 } },
    ...extra,
  };
}

/** A router that assigns every channel to shard s1 at epoch 1 (or runs `assign`). */
export function fakeRouter(assign?: (channel: string) => Promise<Assignment>): RouterApi & { assigned: string[] } {
  const assigned: string[] = [];
  return {
    assigned,
    async assign(channel) {
      assigned.push(channel);
      return assign ? assign(channel) : { channel, shard: 's1', epoch: 1 };
    },
    async lookup() {
      return null;
    },
    async release() {},
    async membership() {
      return [];
    },
    async migrate(from, to) {
      return { from, to, outcome: 'none', absorbed: null };
    },
  };
}

export interface HarnessOptions {
  store: Store;
  gateway?: Partial<Config['gateway']>;
  eventLog?: Partial<Config['eventLog']>;
  mode?: Config['mode'];
  router?: RouterApi;
  /** Channels whose `ch.<C>.ctl` the fake shard answers. */
  channels?: string[];
  /** Call listen() (default true). */
  listen?: boolean;
  /** Serves the funding routes with this ledger. */
  ledger?: Ledger;
  /** The gateway's clock for its upgrade budget (GatewayDeps.now). */
  now?: () => number;
  /** The bus (default: a new InProcessBus); closed with the harness. */
  bus?: InProcessBus;
  /** The bus subject prefix (default: a fresh one); another harness's, for two gateways of one deployment. */
  prefix?: string;
  /** HTTP settings over the harness's (127.0.0.1, port 0). */
  http?: Partial<Config['http']>;
  /** Standalone settings over the defaults. */
  standalone?: Partial<Config['standalone']>;
  /** Tenant quota settings over the defaults. */
  quota?: Partial<Config['quota']>;
}

export interface Harness {
  gateway: Gateway;
  bus: InProcessBus;
  subj: Subjects;
  shard: FakeShard;
  config: Config;
  telemetry: Telemetry;
  /** JSON log lines (warn and above). */
  logs: Array<Record<string, unknown>>;
  port: number;
  /** ws URL of /v1/ws with `query`. */
  wsUrl(query: Record<string, string | number | undefined>): string;
  metricsText(): Promise<string>;
  close(): Promise<void>;
}

/** Starts a gateway on 127.0.0.1:0 with its own bus, shard, telemetry and subject prefix. */
export async function startHarness(opts: HarnessOptions): Promise<Harness> {
  const bus = opts.bus ?? new InProcessBus({ onError: (err) => console.error('bus handler error', err) });
  const prefix = opts.prefix ?? uniqueName('gw');
  const subj = subjects(prefix);
  const config = defaultConfig({
    mode: opts.mode ?? 'standalone',
    http: { host: '127.0.0.1', port: 0, ...opts.http },
    bus: { subjectPrefix: prefix, requestTimeoutMs: 500 },
    gateway: { id: uniqueName('gw'), ...opts.gateway },
    ...(opts.standalone ? { standalone: { ...defaultConfig().standalone, ...opts.standalone } } : {}),
    ...(opts.eventLog ? { eventLog: opts.eventLog } : {}),
    ...(opts.quota ? { quota: opts.quota } : {}),
  });
  const logs: Array<Record<string, unknown>> = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void logs.push(JSON.parse(line) as Record<string, unknown>) });
  const telemetry = createTelemetry({ service: 'gateway', level: 'warn', refusalLogIntervalMs: 60_000, logger });
  const shard = new FakeShard(bus, subj, opts.channels ?? []);
  const gateway = createGateway({
    config,
    bus,
    store: opts.store,
    router: opts.router ?? fakeRouter(),
    telemetry,
    ledger: opts.ledger,
    now: opts.now,
  });
  const port = opts.listen === false ? 0 : (await gateway.listen()).port;
  return {
    gateway,
    bus,
    subj,
    shard,
    config,
    telemetry,
    logs,
    port,
    wsUrl(query) {
      const u = new URL(`ws://127.0.0.1:${port}/v1/ws`);
      for (const [k, v] of Object.entries(query)) if (v !== undefined) u.searchParams.set(k, String(v));
      return u.toString();
    },
    metricsText: () => telemetry.metrics.prometheusText(),
    async close() {
      assertRefusalsLoggedOnce(await telemetry.metrics.prometheusText(), logs);
      await gateway.close();
      await bus.close();
      await telemetry.close();
    },
  };
}

/** Sum of a metric's samples whose labels include every pair of `labels` (0 when absent). */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** A parsed server frame. */
export type Frame = Record<string, unknown> & { t: string };

/** A ws client that records every frame and its close. */
export class Client {
  readonly ws: WebSocket;
  readonly frames: Frame[] = [];
  readonly raw: Array<{ data: Buffer; isBinary: boolean }> = [];
  readonly opened: Promise<void>;
  readonly closed: Promise<{ code: number; reason: string }>;
  /** Set when the upgrade was refused with an HTTP response. */
  readonly refused: Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }>;
  private waiters: Array<() => void> = [];

  constructor(url: string, opts: { autoPong?: boolean } = {}) {
    this.ws = new WebSocket(url, { perMessageDeflate: false, autoPong: opts.autoPong ?? true });
    this.opened = new Promise((resolve, reject) => {
      this.ws.once('open', () => resolve());
      this.ws.once('unexpected-response', () => reject(new Error('upgrade refused')));
    });
    this.opened.catch(() => undefined);
    this.refused = new Promise((resolve) => {
      this.ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      });
    });
    this.closed = new Promise((resolve) => {
      this.ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() }));
    });
    this.ws.on('error', () => undefined);
    this.ws.on('message', (data: Buffer, isBinary) => {
      this.raw.push({ data, isBinary });
      this.frames.push(JSON.parse(data.toString('utf8')) as Frame);
      const w = this.waiters;
      this.waiters = [];
      for (const f of w) f();
    });
  }

  /** The first frame (received so far or later) matching `pred`. */
  async frame(pred: (f: Frame) => boolean, label = 'frame', timeoutMs = 5_000): Promise<Frame> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.frames.find(pred);
      if (found) return found;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for ${label}; got ${JSON.stringify(this.frames.map((f) => f.t))}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  welcome(): Promise<Frame> {
    return this.frame((f) => f.t === 'welcome', 'welcome');
  }

  ack(seq: number): Promise<Frame> {
    return this.frame((f) => f.t === 'ack' && f.seq === seq, `ack ${seq}`);
  }

  send(value: unknown): void {
    this.ws.send(typeof value === 'string' ? value : JSON.stringify(value));
  }

  /** Sends an act; `option` null sends none. */
  act(seq: number, action = 'pull', option: string | null = 'left'): void {
    this.send(option === null ? { t: 'act', seq, action } : { t: 'act', seq, action, option });
  }

  close(): Promise<{ code: number; reason: string }> {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.close();
    return this.closed;
  }
}

/** Connects and waits for the welcome. */
export async function connected(url: string, opts: { autoPong?: boolean } = {}): Promise<Client> {
  const c = new Client(url, opts);
  await c.welcome();
  return c;
}
