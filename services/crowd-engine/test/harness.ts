/** An engine under test: real store (own Postgres schema), in-process bus, sequencer, router, one shard. */
import { InProcessBus, decodeJson, encodeJson, subjects as makeSubjects, type Bus, type Subjects } from '@crowdplay/bus';
import { defaultConfig, type Config } from '@crowdplay/config';
import type { AckBatch, Batch, ChannelUpdate, IntentBatch, RoundFrame, WalletBatch } from '@crowdplay/protocol';
import { Ledger } from '@crowdplay/ledger';
import { openStore, type Store } from '@crowdplay/store';
import { pino } from 'pino';
import { createTelemetry, type Telemetry } from '@crowdplay/telemetry';
import { assertRefusalsLoggedOnce, testSchema, type TestSchema } from '@crowdplay/testing';
import { Router, type RouterOptions } from '@crowdplay/router';
import { SequencerService } from '@crowdplay/sequencer';
import { REPEAT_HEADER, Shard, type ChargeFn, type GameModule } from '../src/index.ts';

export interface Harness {
  config: Config;
  bus: Bus;
  subjects: Subjects;
  store: Store;
  telemetry: Telemetry;
  router: Router;
  sequencer: SequencerService;
  shard: Shard;
  acks: AckBatch['acks'];
  /** AckBatch.balances (answers to joins). */
  balances: NonNullable<AckBatch['balances']>;
  /** WalletBatch entries (payouts, refunds) from every channel. */
  wallets: WalletBatch['entries'];
  /** Round frames sent to the game subject. */
  roundFrames: RoundFrame[];
  /** The shard's ledger (when started with `ledger: true`). */
  ledger: Ledger | undefined;
  batches: Batch[];
  /** Batches a new owner published again on acquire (REPEAT_HEADER), not in `batches`. */
  repeats: Batch[];
  updates: ChannelUpdate[];
  /** Warn-and-above log lines (refusals log once per 60 s per reason here). */
  logs: Array<Record<string, unknown>>;
  /** Publishes intents as gateway `gw-t` would. */
  send(channel: string, intents: Array<Partial<IntentBatch['intents'][number]> & { action: string }>): void;
  /** Publishes joins as gateway `gw-t` would. */
  join(channel: string, joins: NonNullable<IntentBatch['joins']>): void;
  ctl(channel: string, req: unknown): Promise<{ ok: boolean; code?: string; update?: string }>;
  waitFor<T>(what: () => T | undefined | false, timeoutMs?: number): Promise<T>;
  newShard(id: string, extra?: { gameFor?: (c: string) => GameModule | undefined; charge?: ChargeFn; now?: () => number }): Promise<Shard>;
  close(): Promise<void>;
}

let seq = 0;

export async function startHarness(
  opts: {
    gameFor?: (c: string) => GameModule | undefined;
    charge?: ChargeFn;
    engine?: Partial<Config['engine']>;
    /** Give the shard a ledger (rounds, welcome grants, paid actions). */
    ledger?: boolean;
    rounds?: Partial<Config['rounds']>;
    /** Ledger settings (commitMs defaults to 1 here). */
    ledgerConfig?: Partial<Config['ledger']>;
    /** The shard's clock (ms since epoch). */
    now?: () => number;
    /** Router options beyond the harness's timeouts. */
    router?: Partial<RouterOptions>;
  } = {},
): Promise<Harness & { schema: TestSchema }> {
  const schema = await testSchema();
  const config = defaultConfig({
    db: { url: schema.databaseUrl, schema: schema.schema, poolMax: 4, pgliteDir: 'memory' },
    engine: { tickMs: 40, updateIntervalMs: 60, snapshotIntervalMs: 100_000, ...opts.engine },
    sequencer: { blockSize: 50 },
    rounds: { minDurationMs: 50, ...opts.rounds },
    ledger: { commitMs: 1, ...opts.ledgerConfig },
    log: { level: 'silent', refusalLogIntervalMs: 10_000 },
  });
  const bus = new InProcessBus();
  const subjects = makeSubjects(`t${process.pid}x${++seq}`);
  const logs: Array<Record<string, unknown>> = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void logs.push(JSON.parse(line) as Record<string, unknown>) });
  const telemetry = createTelemetry({ service: 'test', level: 'warn', refusalLogIntervalMs: 60_000, logger });
  const store = await openStore(config.db);
  await store.tenants.create('acme', 'Acme');
  const sequencer = new SequencerService({ bus, subjects, store, telemetry });
  await sequencer.start();
  const router = new Router(
    { bus, subjects, store, telemetry },
    { shardTimeoutMs: 3_000, waitForShardMs: 2_000, requestTimeoutMs: 2_000, ...opts.router },
  );
  await router.start();
  const shards: Shard[] = [];
  const ledger = opts.ledger ? new Ledger(store.db, config.ledger, telemetry) : undefined;
  const newShard = async (
    id: string,
    extra?: { gameFor?: (c: string) => GameModule | undefined; charge?: ChargeFn; now?: () => number },
  ): Promise<Shard> => {
    const cfg = { ...config, engine: { ...config.engine, shardId: id } } as Config;
    const s = new Shard({
      config: cfg,
      bus,
      subjects,
      store,
      telemetry,
      gameFor: extra?.gameFor,
      charge: extra?.charge,
      ledger,
      now: extra?.now,
    });
    await s.start();
    shards.push(s);
    return s;
  };
  const shard = await newShard('s1', { gameFor: opts.gameFor, charge: opts.charge, now: opts.now });
  const acks: AckBatch['acks'] = [];
  const balances: NonNullable<AckBatch['balances']> = [];
  const wallets: WalletBatch['entries'] = [];
  const roundFrames: RoundFrame[] = [];
  const batches: Batch[] = [];
  const repeats: Batch[] = [];
  const updates: ChannelUpdate[] = [];
  bus.subscribe(subjects.gatewayAcks('gw-t'), (m) => {
    const b = decodeJson<AckBatch>(m.data);
    acks.push(...b.acks);
    if (b.balances) balances.push(...b.balances);
  });
  bus.subscribe(`${subjects.prefix}.ch.*.wallet`, (m) => wallets.push(...decodeJson<WalletBatch>(m.data).entries));
  bus.subscribe(`${subjects.prefix}.ch.*.game`, (m) => {
    const f = decodeJson<Batch | RoundFrame>(m.data);
    if (f.t === 'round') roundFrames.push(f);
    else if (m.headers?.[REPEAT_HEADER]) repeats.push(f);
    else batches.push(f);
  });
  bus.subscribe(`${subjects.prefix}.ch.*.out`, (m) => updates.push(decodeJson<ChannelUpdate>(m.data)));
  let conn = 0;
  const h: Harness & { schema: TestSchema } = {
    schema,
    config,
    bus,
    subjects,
    store,
    telemetry,
    router,
    sequencer,
    shard,
    acks,
    balances,
    wallets,
    roundFrames,
    ledger,
    batches,
    repeats,
    updates,
    logs,
    send(channel, intents) {
      const batch: IntentBatch = {
        gw: 'gw-t',
        intents: intents.map((i) => ({
          conn: i.conn ?? ++conn,
          viewer: i.viewer ?? `v${conn}`,
          seq: i.seq ?? conn,
          action: i.action,
          option: i.option,
          ...(i.trade ? { trade: i.trade } : {}),
          ...(i.guess !== undefined ? { guess: i.guess } : {}),
          at: i.at ?? Date.now(),
        })),
      };
      bus.publish(subjects.channelIn(channel), encodeJson(batch));
    },
    join(channel, joins) {
      bus.publish(subjects.channelIn(channel), encodeJson({ gw: 'gw-t', intents: [], joins } satisfies IntentBatch));
    },
    async ctl(channel, req) {
      const m = await bus.request(subjects.channelCtl(channel), encodeJson(req), { timeoutMs: 2_000 });
      return decodeJson(m.data);
    },
    async waitFor(what, timeoutMs = 5_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const v = what();
        if (v !== undefined && v !== false) return v as never;
        if (Date.now() > deadline) throw new Error('waitFor timed out');
        await new Promise((r) => setTimeout(r, 5));
      }
    },
    newShard,
    async close() {
      assertRefusalsLoggedOnce(await telemetry.metrics.prometheusText(), logs);
      for (const s of shards) await s.close();
      await ledger?.close();
      await router.close();
      await sequencer.close();
      await bus.close();
      await store.close();
      await telemetry.close();
      await schema.drop();
    },
  };
  return h;
}
