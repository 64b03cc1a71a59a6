/**
 * `npm run bench -- cluster-control [--json FILE] [--only place,failover,steady]
 *   [--child-exec-argv="NODE OPTIONS"]
 *   [--channels 10000] [--concurrency 2000] [--failover-channels 1500,5000] [--failover-join]
 *   [--steady-channels 1500] [--steady-seconds 20] [--warmup-seconds 2] [--rest-seconds 5]`
 *
 * The router's control plane on the bundle (`npm run build`) started by
 * `startCluster` as separate processes (sequencer, router, crowd-engine
 * shards, one gateway that no viewer uses) against the machine's NATS and
 * PostgreSQL (a schema and a subject prefix of its own), every ROUTER_* and
 * SHARD_* setting at its default. The driver is this process, on the same
 * cores. Every Postgres connection of the cluster carries an application_name
 * of its own, so the CPU of its backends is read apart from the other users
 * of the server (/proc/<pid>/stat of the backends pg_stat_activity names,
 * at both ends of a window). Parts (`--only`), each in a cluster of its own:
 *
 * - `place` (3 shards): two bursts on the same cluster, each of `--channels`
 *   new channels: the first in processes that have just started (a cold start:
 *   V8 still compiles the hot paths on its background threads, reported as
 *   `place`), the second once they have placed the first, whose channels they
 *   still hold (a running cluster, `placeWarm`). Per burst: the rows created in
 *   one statement, then every channel's first join at once: RouterClient.assign over the bus with
 *   `--concurrency` in flight (a refusal the router calls retryable is asked
 *   again). When its assign answers, each channel gets one probe: an intent
 *   on `ch.<C>.in` as a gateway publishes it; the channel is ready when the
 *   probe's ack arrives (any ack from the owner: the channels run no game,
 *   so the ack is CP_ERR_INTENT_NO_GAME, answered by the intake that batches).
 *   A probe unanswered for 1 s is sent again (counted). Channels per second
 *   placed (assign answered) and ready (probe acked), end to end from the
 *   first assign; the router's `channels assigned` and the shards' `channels
 *   acquired` log lines summarised (batch sizes, ms per step: the router's
 *   read, owner write and shards' acquires; the shards' read, lease, start
 *   and subscribe). CPU µs per channel ready of every part, and the shards'
 *   and router's split into their main threads' and other threads' (GC and
 *   JIT helpers: `cpuUsPerChannelByThread`). Then, at rest (`placeRest`):
 *   both bursts' channels held, nothing sent, every part's CPU per
 *   channel-second over `--rest-seconds`.
 * - `failover` (for each of `--failover-channels` n): 3 × n channels placed
 *   over 3 shards; on each channel of the middle shard by count (neither the
 *   source nor the target of a rebalance move, so no control request to it
 *   is in flight) `vote` declared and on every second one a pool round
 *   opened; once their snapshots are written (SNAPSHOT_INTERVAL_MS + 1 s),
 *   that shard is killed (SIGKILL: no drain, no release). With
 *   `--failover-join` instead: one shard holds n channels, two more start,
 *   and it is killed as soon as the router has heard both (while the
 *   rebalance moves channels off it). From the kill every channel that has
 *   not yet answered gets a probe every 100 ms; a channel batches again when
 *   an ack other than CP_ERR_CHANNEL_UNAVAILABLE (moving) arrives.
 *   Detection: the kill → the router's `declaredDeadAtMs` (its log line);
 *   move: that instant → the channel's first ack (p50 / p99 / max, with and
 *   without an open round; the probe period bounds its resolution to
 *   100 ms), for at most 30 s past ROUTER_SHARD_TIMEOUT_MS. A channel that
 *   answers before the declared instant was moved away before the kill and
 *   is left out. Also: where the channels are at the end (Postgres), and
 *   every warning the router and shards logged from the kill.
 * - `steady` (1 shard): `--steady-channels` channels with `vote` declared,
 *   one viewer intent per channel per second spread evenly, for
 *   `--steady-seconds` after `--warmup-seconds`; twice: without a game, then
 *   with one (this process subscribed to every channel's `ch.<C>.game`
 *   batches). CPU µs per channel-second of the shard, the idle gateway, the
 *   router, the sequencer, nats-server and the cluster's Postgres backends.
 *   The gateway is not on this path: the intents are published as a gateway
 *   publishes them.
 *
 * Targets (the bench says when one is missed, with the figure): placement
 * ≥ 10,000 channels/s end to end (each burst); 1,500 channels (half with open rounds)
 * batching again ≤ 1 s after their shard is declared dead.
 *
 * Prints a table and, with --json FILE, writes every figure with the
 * parameters, the machine and `uptime`'s load before and after.
 * `--child-exec-argv` (space-separated) is passed to each cluster child's
 * node, e.g. `"--child-exec-argv=--cpu-prof --cpu-prof-dir=/tmp/prof"` to
 * profile them (joined by `=`: a value starting with `--` is otherwise read as
 * an option of its own and refused).
 * @returns 0, or 1 when a part saw errors (assigns or probes that never
 *   succeeded); a missed target alone does not fail the run
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { connectNatsBus, decodeJson, encodeJson, subjects as makeSubjects, type Bus, type Subjects } from '@crowdplay/bus';
import { defaultConfig } from '@crowdplay/config';
import { clockTicksPerSecond, cpuDeltaMs, cpuMsByComm, findListeningPid, ProcessWatch, type ProcessSample } from '@crowdplay/loadtest';
import { isCrowdplayError, isRetryable, type AckBatch, type IntentBatch } from '@crowdplay/protocol';
import { RouterClient } from '@crowdplay/router';
import { openStore, type Store } from '@crowdplay/store';
import { serviceUrls, testSchema, uniqueName } from '@crowdplay/testing';
import { buildProduct } from '../../../scripts/build.mjs';
import { startCluster, type Cluster } from '../src/cluster.ts';

const OPTIONS = {
  json: { type: 'string' },
  only: { type: 'string', default: 'place,failover,steady' },
  channels: { type: 'string', default: '10000' },
  concurrency: { type: 'string', default: '2000' },
  'failover-channels': { type: 'string', default: '1500,5000' },
  'failover-join': { type: 'boolean', default: false },
  'steady-channels': { type: 'string', default: '1500' },
  'steady-seconds': { type: 'string', default: '20' },
  'warmup-seconds': { type: 'string', default: '2' },
  'rest-seconds': { type: 'string', default: '5' },
  'child-exec-argv': { type: 'string', default: '' },
} as const;

const PARTS = ['place', 'failover', 'steady'] as const;
type Part = (typeof PARTS)[number];
const TENANT = 'bench';
const GW = 'gw-bench';
/** Placement target, channels per second end to end. */
const PLACE_TARGET_PER_S = 10_000;
/** Failover target: the 1,500-channel case's channels batching again this long after the declared-dead instant, ms. */
const MOVE_TARGET_MS = 1_000;
const MOVE_TARGET_CHANNELS = 1_500;
/** Probe period after a kill, ms: the resolution of the move times. */
const PROBE_EVERY_MS = 100;
/** A placement probe unanswered this long is sent again, ms. */
const PROBE_RETRY_MS = 1_000;
/** Refusals of an assign that mean "not now" (HTTP 503 in libs/protocol's errors): asked again. */
const RETRYABLE = new Set(['CP_ERR_CHANNEL_UNAVAILABLE', 'CP_ERR_CHANNEL_PLACEMENT_OVERLOADED']);
const VOTE = { op: 'declare', actions: [{ name: 'vote', options: ['a', 'b', 'c'], maxPerTick: 1_000 }] };

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const round1 = (n: number): number => Math.round(n * 10) / 10;

interface Params {
  parts: Part[];
  channels: number;
  concurrency: number;
  failoverChannels: number[];
  failoverJoin: boolean;
  steadyChannels: number;
  steadySeconds: number;
  warmupS: number;
  restSeconds: number;
}

/** p50 / p99 / max of `ms` samples, ms (zeros when there are none). */
function summary(ms: readonly number[]): { n: number; p50: number; p99: number; max: number } {
  const s = Float64Array.from(ms).sort();
  const at = (p: number): number => (s.length === 0 ? 0 : round1(s[Math.min(s.length - 1, Math.floor(p * s.length))]!));
  return { n: s.length, p50: at(0.5), p99: at(0.99), max: s.length === 0 ? 0 : round1(s[s.length - 1]!) };
}

/** `uptime`'s line (load averages), or os.loadavg() when uptime is missing. */
function uptimeLine(): string {
  try {
    return execFileSync('uptime', { encoding: 'utf8' }).trim();
  } catch {
    return `load average: ${loadavg().map(round1).join(', ')}`;
  }
}

/** Calls `fn` on `items` with at most `limit` in flight. */
async function pool<T>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
      }
    }),
  );
}

/** One JSON log line of a child, with the child's name. */
interface LogLine {
  proc: string;
  at: number;
  line: Record<string, unknown>;
}

/** Collects the children's JSON log lines whose `msg` is one of `wanted`, and every warning or error (pino level ≥ 40). */
class LogTap {
  readonly lines: LogLine[] = [];
  constructor(private readonly wanted: readonly string[]) {}
  readonly out = (text: string): void => {
    const bar = text.indexOf('| ');
    if (bar < 0) return;
    const body = text.slice(bar + 2);
    if (!body.startsWith('{')) return;
    try {
      const line = JSON.parse(body) as Record<string, unknown>;
      if (Number(line.level) >= 40 || this.wanted.some((w) => String(line.msg).includes(w)))
        this.lines.push({ proc: text.slice(0, bar).trim(), at: Date.now(), line });
    } catch {
      // not JSON after all
    }
  };
  /** Warnings and errors since `from` (ms): count per process and message, with the first line of each. */
  warnings(from: number): Array<{ proc: string; msg: string; count: number; first: Record<string, unknown> }> {
    const by = new Map<string, { proc: string; msg: string; count: number; first: Record<string, unknown> }>();
    for (const l of this.lines) {
      if (l.at < from || Number(l.line.level) < 40) continue;
      const key = `${l.proc} ${String(l.line.msg)}`;
      const e = by.get(key);
      if (e) e.count++;
      else {
        const { time: _t, pid: _p, hostname: _h, ...rest } = l.line;
        by.set(key, { proc: l.proc, msg: String(l.line.msg), count: 1, first: rest });
      }
    }
    return [...by.values()];
  }
  of(msgPrefix: string): LogLine[] {
    return this.lines.filter((l) => typeof l.line.msg === 'string' && l.line.msg.startsWith(msgPrefix));
  }
}

/**
 * Probes channels by index: an intent for `vote` on connection `i` of
 * gateway GW; the first ack of each index that `counts` is kept.
 */
class Probes {
  private seq = 0;
  readonly firstAckAt = new Map<number, number>();
  readonly codes: Record<string, number> = {};
  readonly sentAt = new Map<number, number>();
  sent = 0;
  private readonly sub;
  constructor(
    private readonly bus: Bus,
    private readonly subjects: Subjects,
    private readonly names: readonly string[],
    counts: (ack: AckBatch['acks'][number]) => boolean = () => true,
  ) {
    this.sub = bus.subscribe(subjects.gatewayAcks(GW), (msg) => {
      const now = Date.now();
      for (const a of decodeJson<AckBatch>(msg.data).acks) {
        if (a.conn < 0 || a.conn >= names.length || this.firstAckAt.has(a.conn) || !counts(a)) continue;
        this.firstAckAt.set(a.conn, now);
        const code = a.ok ? 'ok' : (a.code ?? 'no-code');
        this.codes[code] = (this.codes[code] ?? 0) + 1;
      }
    });
  }
  send(i: number): void {
    const at = Date.now();
    if (!this.sentAt.has(i)) this.sentAt.set(i, at);
    this.sent++;
    const batch: IntentBatch = { gw: GW, intents: [{ conn: i, viewer: `p-${i}`, seq: ++this.seq, action: 'vote', option: 'a', at }] };
    this.bus.publish(this.subjects.channelIn(this.names[i]!), encodeJson(batch));
  }
  close(): void {
    this.sub.unsubscribe();
  }
}

/** The cluster's Postgres backends (by application_name) and nats-server, watched over a window. */
class InfraWatch {
  private watch: ProcessWatch | null = null;
  constructor(
    private readonly store: Store,
    private readonly appName: string,
    private readonly natsPid: number | null,
  ) {}
  async start(): Promise<void> {
    const { rows } = await this.store.db.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [
      this.appName,
    ]);
    const procs = rows.map((r) => ({ name: `postgres ${r.pid}`, pid: Number(r.pid) }));
    if (this.natsPid !== null) procs.push({ name: 'nats-server', pid: this.natsPid });
    this.watch = new ProcessWatch(procs);
    this.watch.start();
  }
  /** @returns nats-server's sample and the sum over the backends (cpuMs null when none could be read) */
  stop(): { nats: ProcessSample | null; postgres: { backends: number; cpuMs: number | null } } {
    const s = this.watch?.stop() ?? [];
    const pg = s.filter((x) => x.name.startsWith('postgres ') && x.cpuMs !== null);
    return {
      nats: s.find((x) => x.name === 'nats-server') ?? null,
      postgres: { backends: pg.length, cpuMs: pg.length === 0 ? null : Math.round(pg.reduce((a, x) => a + x.cpuMs!, 0)) },
    };
  }
}

interface Rig {
  cluster: Cluster;
  bus: Bus;
  store: Store;
  subjects: Subjects;
  router: RouterClient;
  tap: LogTap;
  infra: InfraWatch;
  close(): Promise<void>;
}

/** A cluster of `shards` shards and one gateway on a schema and prefix of its own, with this process's bus and store. */
/** What each cluster child runs: the bundle, with node options. */
interface ChildEntry {
  execArgv: string[];
  script: string;
}

async function rig(entry: ChildEntry, shards: number): Promise<Rig> {
  const urls = await serviceUrls();
  const schema = await testSchema();
  const prefix = uniqueName('bench');
  const appName = uniqueName('cpbench');
  const store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 4, pgliteDir: 'memory' });
  const bus = await connectNatsBus({ servers: urls.natsUrl, name: 'bench-driver' });
  const tap = new LogTap([
    'channels assigned',
    'channel assigned',
    'channels acquired',
    'channel acquired',
    'shard declared dead',
    'router: channels moved',
  ]);
  const sep = schema.databaseUrl.includes('?') ? '&' : '?';
  let cluster: Cluster | undefined;
  try {
    await store.tenants.create(TENANT, 'Bench');
    cluster = await startCluster({
      gateways: 1,
      shards,
      env: {
        // The caller's environment first (SEMI_SPACE_MB and the other process-start settings among it), the rig's after.
        // eslint-disable-next-line no-restricted-properties -- handed to the children as the CLI hands it to loadConfig
        ...process.env,
        NATS_URL: urls.natsUrl,
        REDIS_URL: urls.redisUrl,
        DATABASE_URL: `${schema.databaseUrl}${sep}application_name=${appName}`,
        DATABASE_SCHEMA: schema.schema,
        BUS_SUBJECT_PREFIX: prefix,
        PORT: '0',
        HOST: '127.0.0.1',
        TELEGRAM_BOT_TOKEN: '',
      },
      entry,
      out: tap.out,
    });
  } catch (err) {
    await bus.close();
    await store.close();
    await schema.drop();
    throw err;
  }
  const c = cluster;
  const subjects = makeSubjects(prefix);
  return {
    cluster: c,
    bus,
    store,
    subjects,
    router: new RouterClient(bus, subjects, 10_000),
    tap,
    infra: new InfraWatch(store, appName, findListeningPid(Number(new URL(urls.natsUrl).port || 4222))),
    async close() {
      await c.stop();
      await bus.close();
      await store.close();
      await schema.drop();
    },
  };
}

/** Creates `n` channels `<stem>-0…` in one statement. */
async function createChannels(store: Store, stem: string, n: number): Promise<string[]> {
  const names = Array.from({ length: n }, (_, i) => `${stem}-${i}`);
  await store.db.query('INSERT INTO channels (id, tenant_id) SELECT unnest($1::text[]), $2', [names, TENANT]);
  return names;
}

/** Assigns every channel, asking again after a retryable refusal (up to 10 times). @returns ms per assign and the errors */
async function assignAll(
  router: RouterClient,
  names: readonly string[],
  concurrency: number,
  onAssigned?: (i: number) => void,
): Promise<{ ms: number[]; retries: number; errors: number; errorCodes: Record<string, number> }> {
  const ms: number[] = [];
  let retries = 0;
  let errors = 0;
  const errorCodes: Record<string, number> = {};
  await pool(names, concurrency, async (c, i) => {
    const t = performance.now();
    for (let attempt = 0; ; attempt++) {
      try {
        await router.assign(c);
        ms.push(performance.now() - t);
        onAssigned?.(i);
        return;
      } catch (err) {
        const code = isCrowdplayError(err) ? err.code : 'error';
        if (attempt < 10 && RETRYABLE.has(code)) {
          retries++;
          continue;
        }
        errors++;
        errorCodes[code] = (errorCodes[code] ?? 0) + 1;
        return;
      }
    }
  });
  return { ms, retries, errors, errorCodes };
}

/**
 * The shards' and the router's CPU µs per channel ready, split into their main threads' (the event loop: JS and
 * the GC work done on it) and their other threads' (V8's parallel and concurrent GC and background JIT compiles,
 * libuv's pool): how much of a placement's cost is the runtime's own work beside crowdplay's.
 * @returns per process group `{ main, other }`; a group with a process unread is left out
 */
function cpuPerChannelByThread(processes: readonly ProcessSample[], ready: number): Record<string, { main: number; other: number }> {
  const per = (v: number): number => Math.round((v * 1000) / Math.max(1, ready));
  const out: Record<string, { main: number; other: number }> = {};
  for (const [group, pred] of [
    ['shards', (n: string) => n.startsWith('shard')],
    ['router', (n: string) => n === 'router'],
  ] as const) {
    const ps = processes.filter((x) => pred(x.name));
    if (ps.length === 0 || ps.some((x) => x.cpuMs === null || x.mainThreadCpuMs === null)) continue;
    const all = ps.reduce((a, x) => a + x.cpuMs!, 0);
    const main = ps.reduce((a, x) => a + x.mainThreadCpuMs!, 0);
    out[group] = { main: per(main), other: per(all - main) };
  }
  return out;
}

/**
 * CPU per channel ready, µs, by part: the shards together, the router, the sequencer, nats-server, every Postgres
 * process on the machine (the cluster's backends and the server's own), the driver, and their total — what the
 * two cores spend per channel placed. A part that could not be read counts 0 and is named in `unread`.
 */
function cpuPerChannel(
  processes: readonly ProcessSample[],
  natsMs: number | null,
  pgMs: number | null,
  driverMs: number,
  ready: number,
): Record<string, number | string[]> {
  const unread: string[] = [];
  const ms = (name: string, v: number | null | undefined): number => {
    if (v === null || v === undefined) unread.push(name);
    return v ?? 0;
  };
  const of = (pred: (n: string) => boolean): number => processes.filter((x) => pred(x.name)).reduce((a, x) => a + ms(x.name, x.cpuMs), 0);
  const parts = {
    shards: of((n) => n.startsWith('shard')),
    router: of((n) => n === 'router'),
    sequencer: of((n) => n === 'sequencer'),
    nats: ms('nats-server', natsMs),
    postgres: ms('postgres', pgMs),
    driver: driverMs,
  };
  const per = (v: number): number => Math.round((v * 1000) / Math.max(1, ready));
  const out: Record<string, number | string[]> = {};
  let total = 0;
  for (const [k, v] of Object.entries(parts)) {
    out[k] = per(v);
    total += v;
  }
  out.total = per(total);
  if (unread.length > 0) out.unread = unread;
  return out;
}

/** Summary of numeric field `key` over log lines. */
function fieldSummary(lines: readonly LogLine[], key: string): ReturnType<typeof summary> {
  return summary(lines.map((l) => Number(l.line[key])).filter((v) => Number.isFinite(v)));
}

/** The shards' `channels acquired` lines: how many, channels per batch, and each step's ms (read, lease, start, subscribe). */
function acquireSummary(acquired: readonly LogLine[]): {
  batches: number;
  channelsPerBatch: ReturnType<typeof summary>;
  readMs: ReturnType<typeof summary>;
  leaseMs: ReturnType<typeof summary>;
  startMs: ReturnType<typeof summary>;
  subscribeMs: ReturnType<typeof summary>;
} {
  return {
    batches: acquired.length,
    channelsPerBatch: summary(acquired.map((l) => Number(l.line.channels ?? 1))),
    readMs: fieldSummary(acquired, 'readMs'),
    leaseMs: fieldSummary(acquired, 'leaseMs'),
    startMs: fieldSummary(acquired, 'startMs'),
    subscribeMs: fieldSummary(acquired, 'subscribeMs'),
  };
}

/**
 * The `place` part: two bursts of `--channels` first joins on one cluster of 3 shards. The first runs in processes
 * that have just started, so V8 is still compiling the hot paths on its background threads (a cold start of the
 * whole cluster); the second, on new channels, runs in the same processes once they have done one (a running
 * cluster placing a failover's, a drain's or a rebalance's channels), with the first burst's channels still held.
 * @returns each burst's report (`cold`, `warm`) and whether either saw errors
 */
async function benchPlace(
  p: Params,
  entry: ChildEntry,
  rows: Array<[string, string]>,
): Promise<{ cold: unknown; warm: unknown; rest: unknown; failed: boolean }> {
  const r = await rig(entry, 3);
  try {
    const cold = await placeBurst(r, p, 'pl', 'place, cold start', rows);
    const warm = await placeBurst(r, p, 'pw', 'place, running cluster', rows);
    const rest = await restCost(r, p, rows);
    return { cold: cold.report, warm: warm.report, rest, failed: cold.failed || warm.failed };
  } finally {
    await r.close();
  }
}

/**
 * The cost of holding channels that do nothing: after both bursts (2 × `p.channels` channels held, no intent, no
 * round), every part's CPU over `p.restSeconds`, per channel-second. What a shard pays per quiet channel bounds how
 * many it can hold; the router's periodic work (failure check, reconciler, rebalance) is in its row.
 */
async function restCost(r: Rig, p: Params, rows: Array<[string, string]>): Promise<unknown> {
  const held = Number(
    (await r.store.db.query<{ n: string }>('SELECT count(*) AS n FROM channels WHERE owner IS NOT NULL')).rows[0]?.n ?? 0,
  );
  const watch = new ProcessWatch(
    ['router', 'shard-1', 'shard-2', 'shard-3', 'sequencer'].map((name) => ({ name, pid: r.cluster.get(name).pid ?? 0 })),
  );
  await r.infra.start();
  watch.start();
  const t0 = performance.now();
  await sleep(p.restSeconds * 1000);
  const seconds = (performance.now() - t0) / 1000;
  const processes = watch.stop();
  const infra = r.infra.stop();
  const cpuMs: Record<string, number | null> = {};
  for (const x of processes) cpuMs[x.name] = x.cpuMs === null ? null : Math.round(x.cpuMs);
  cpuMs['nats-server'] = infra.nats?.cpuMs == null ? null : Math.round(infra.nats.cpuMs);
  cpuMs['postgres backends'] = infra.postgres.cpuMs;
  const per: Record<string, number | null> = {};
  for (const [k, v] of Object.entries(cpuMs)) per[k] = v === null || held === 0 ? null : round1((v * 1000) / (held * seconds));
  rows.push([
    `place, at rest: ${held} channels held, ${round1(seconds)} s`,
    `µs CPU per channel-second: ${Object.entries(per)
      .map(([k, v]) => `${k} ${v ?? 'n/a'}`)
      .join(', ')}`,
  ]);
  return { channelsHeld: held, seconds: round1(seconds), processes, cpuMs, cpuUsPerChannelSecond: per };
}

/** One burst of `p.channels` first joins of new channels `<stem>-0…` on rig `r`; rows are headed `label`. */
async function placeBurst(
  r: Rig,
  p: Params,
  stem: string,
  label: string,
  rows: Array<[string, string]>,
): Promise<{ report: unknown; failed: boolean }> {
  const held = Number(
    (await r.store.db.query<{ n: string }>('SELECT count(*) AS n FROM channels WHERE owner IS NOT NULL')).rows[0]?.n ?? 0,
  );
  const names = await createChannels(r.store, stem, p.channels);
  const probes = new Probes(r.bus, r.subjects, names);
  const assignedAt = new Map<number, number>();
  await r.bus.flush();
  const watch = new ProcessWatch(
    ['router', 'shard-1', 'shard-2', 'shard-3', 'sequencer'].map((name) => ({ name, pid: r.cluster.get(name).pid ?? 0 })),
  );
  await r.infra.start();
  const pg0 = cpuMsByComm('postgres', clockTicksPerSecond());
  const logFrom = r.tap.lines.length;
  watch.start();
  const driver0 = process.cpuUsage();
  const t0 = Date.now();
  const a = await assignAll(r.router, names, p.concurrency, (i) => {
    assignedAt.set(i, Date.now());
    probes.send(i);
  });
  const placedMs = Date.now() - t0;
  // Probes unanswered for PROBE_RETRY_MS are sent again, until every channel answered or 10 s passed.
  const deadline = Date.now() + 10_000;
  let resent = 0;
  while (probes.firstAckAt.size < assignedAt.size && Date.now() < deadline) {
    await sleep(50);
    const now = Date.now();
    for (const [i, at] of probes.sentAt)
      if (!probes.firstAckAt.has(i) && now - at >= PROBE_RETRY_MS) {
        probes.sentAt.set(i, now);
        probes.send(i);
        resent++;
      }
  }
  const readyMs = Math.max(0, ...probes.firstAckAt.values()) - t0;
  const processes = watch.stop();
  const infra = r.infra.stop();
  const driverUsage = process.cpuUsage(driver0);
  const driverCpuMs = Math.round((driverUsage.user + driverUsage.system) / 1000);
  const pg1 = cpuMsByComm('postgres', clockTicksPerSecond());
  const pgMs = cpuDeltaMs(pg0, pg1);
  probes.close();
  const logs = r.tap.lines.slice(logFrom);
  const assigned = logs.filter((l) => l.proc === 'router' && /^channels? assigned$/.test(String(l.line.msg)));
  const acquired = logs.filter((l) => l.proc.startsWith('shard') && /^channels? acquired$/.test(String(l.line.msg)));
  const batchSize = (l: LogLine): number => Number(l.line.channels ?? 1);
  const ready = probes.firstAckAt.size;
  const readyPerS = Math.round((ready * 1000) / Math.max(1, readyMs));
  const placedPerS = Math.round((a.ms.length * 1000) / Math.max(1, placedMs));
  const probeToAck = [...probes.firstAckAt].map(([i, at]) => at - (assignedAt.get(i) ?? at));
  const perShard: Record<string, number> = {};
  for (const l of acquired) perShard[l.proc] = (perShard[l.proc] ?? 0) + batchSize(l);
  const targetMet = ready === names.length && readyPerS >= PLACE_TARGET_PER_S;
  const report = {
    mode: 'separate processes (startCluster): sequencer, router, 3 crowd-engine shards, 1 idle gateway',
    burst: label,
    channelsHeldBefore: held,
    channels: names.length,
    concurrency: p.concurrency,
    assigned: a.ms.length,
    assignRetries: a.retries,
    assignErrors: a.errors,
    assignErrorCodes: a.errorCodes,
    placedMs,
    placedPerSecond: placedPerS,
    ready,
    readyMs,
    readyPerSecond: readyPerS,
    probeResent: resent,
    probeAckCodes: probes.codes,
    assignMs: summary(a.ms),
    assignedToAckMs: summary(probeToAck),
    routerPlacements: {
      statements: assigned.length,
      channelsPerPlacement: summary(assigned.map(batchSize)),
      ms: fieldSummary(assigned, 'ms'),
      readMs: fieldSummary(assigned, 'readMs'),
      writeMs: fieldSummary(assigned, 'writeMs'),
      acquireMs: fieldSummary(assigned, 'acquireMs'),
    },
    shardAcquires: { ...acquireSummary(acquired), channelsPerShard: perShard },
    processes,
    natsServer: infra.nats,
    postgresBackends: infra.postgres,
    allPostgresCpuMs: pgMs === null ? null : Math.round(pgMs),
    driverCpuMs,
    cpuUsPerChannel: cpuPerChannel(processes, infra.nats?.cpuMs ?? null, pgMs, driverCpuMs, ready),
    cpuUsPerChannelByThread: cpuPerChannelByThread(processes, ready),
    warnings: r.tap.warnings(t0),
    target: { readyPerSecond: PLACE_TARGET_PER_S, met: targetMet },
  };
  rows.push([
    `${label}: ready end to end`,
    `${ready} of ${names.length} channels in ${readyMs} ms = ${readyPerS} channels/s (target ≥ ${PLACE_TARGET_PER_S}: ${targetMet ? 'met' : 'MISSED'})`,
  ]);
  rows.push([
    '  placed (assign answered)',
    `${a.ms.length} in ${placedMs} ms = ${placedPerS}/s, ${p.concurrency} in flight; assign ms ${JSON.stringify(summary(a.ms))}; retries ${a.retries}, errors ${a.errors}`,
  ]);
  rows.push([
    '  assign → probe ack',
    `ms ${JSON.stringify(summary(probeToAck))}; probes resent ${resent}; acks ${JSON.stringify(probes.codes)}`,
  ]);
  rows.push([
    '  router placements',
    `${assigned.length} statements, channels each ${JSON.stringify(summary(assigned.map(batchSize)))}, ms ${JSON.stringify(report.routerPlacements.ms)}; p50 read ${report.routerPlacements.readMs.p50}, write ${report.routerPlacements.writeMs.p50}, acquire ${report.routerPlacements.acquireMs.p50} ms`,
  ]);
  rows.push([
    '  shard acquires',
    `${acquired.length} batches ${JSON.stringify(perShard)}; readMs p50 ${report.shardAcquires.readMs.p50}, leaseMs p50 ${report.shardAcquires.leaseMs.p50}, startMs p50 ${report.shardAcquires.startMs.p50}, subscribeMs p50 ${report.shardAcquires.subscribeMs.p50}`,
  ]);
  for (const s of processes) rows.push([`  ${s.name} cpu`, `${s.cpuPct ?? 'n/a'} %`]);
  rows.push(['  nats-server cpu', `${infra.nats?.cpuPct ?? 'n/a'} %`]);
  rows.push(['  postgres backends cpu', `${infra.postgres.cpuMs ?? 'n/a'} ms over ${infra.postgres.backends} backends`]);
  rows.push(['  driver (this process) cpu', `${driverCpuMs} ms`]);
  rows.push(['  cpu µs per channel ready', JSON.stringify(report.cpuUsPerChannel)]);
  rows.push(['  the same, main thread / other threads', JSON.stringify(report.cpuUsPerChannelByThread)]);
  for (const w of report.warnings) rows.push([`  ${w.proc} warned`, `${w.count}× ${w.msg}`]);
  return { report, failed: a.errors > 0 || ready < names.length };
}

async function benchFailover(
  n: number,
  join: boolean,
  entry: ChildEntry,
  rows: Array<[string, string]>,
): Promise<{ report: unknown; failed: boolean }> {
  const r = await rig(entry, join ? 1 : 3);
  const config = defaultConfig();
  try {
    let names: string[];
    let victimId = 'shard-1';
    if (join) {
      names = await createChannels(r.store, `fo${n}`, n);
      const a = await assignAll(r.router, names, 500);
      if (a.errors > 0) throw new Error(`failover ${n}: ${a.errors} assigns failed ${JSON.stringify(a.errorCodes)}`);
    } else {
      // 3n channels spread evenly over 3 shards; the victim is the middle one by count: neither the source nor the
      // target of a rebalance move (fullest → emptiest), so no control request to it is in flight at the kill.
      const all = await createChannels(r.store, `fo${n}`, 3 * n);
      const a = await assignAll(r.router, all, 500);
      if (a.errors > 0) throw new Error(`failover ${n}: ${a.errors} assigns failed ${JSON.stringify(a.errorCodes)}`);
      const counts = (
        await r.store.db.query<{ owner: string; n: string }>(
          'SELECT owner, count(*) AS n FROM channels WHERE id = ANY($1::text[]) AND owner IS NOT NULL GROUP BY owner ORDER BY count(*), owner',
          [all],
        )
      ).rows;
      victimId = counts[Math.floor(counts.length / 2)]?.owner ?? 'shard-1';
      names = (
        await r.store.db.query<{ id: string }>('SELECT id FROM channels WHERE id = ANY($1::text[]) AND owner = $2 ORDER BY id', [
          all,
          victimId,
        ])
      ).rows.map((x) => x.id);
    }
    const ctlErrors: Record<string, number> = {};
    const withRoundSet = new Set(names.filter((_, i) => i % 2 === 0));
    await pool(names, 100, async (c) => {
      const reqs: unknown[] = [VOTE];
      if (withRoundSet.has(c))
        reqs.push({ op: 'round.open', tenant: TENANT, round: 'r1', kind: 'pool', outcomes: ['x', 'y'], durationMs: 3_600_000 });
      for (const req of reqs) {
        // A channel a rebalance is moving answers CP_ERR_CHANNEL_UNAVAILABLE (retryable): asked again, as the SDKs do.
        for (let attempt = 0; ; attempt++) {
          const msg = await r.bus.request(r.subjects.channelCtl(c), encodeJson(req), { timeoutMs: 10_000 });
          const rep = decodeJson<{ ok: boolean; code?: string }>(msg.data);
          if (rep.ok) break;
          if (isRetryable(rep.code) && attempt < 20) {
            await sleep(100 * (attempt + 1));
            continue;
          }
          ctlErrors[rep.code ?? 'no-code'] = (ctlErrors[rep.code ?? 'no-code'] ?? 0) + 1;
          break;
        }
      }
    });
    if (Object.keys(ctlErrors).length > 0) throw new Error(`failover ${n}: declare / round.open refused ${JSON.stringify(ctlErrors)}`);
    // The declarations reach Postgres with the next snapshot; the rounds are durable already.
    await sleep(config.engine.snapshotIntervalMs + 1_000);
    const deadBefore = r.tap.of('router: shard declared dead').length;
    if (join) {
      await r.cluster.addShard();
      await r.cluster.addShard();
      // The router places nothing on a shard it has not heard: wait for both (they beat every SHARD_HEARTBEAT_MS).
      const heard = async (): Promise<boolean> => {
        const shards = (await r.router.membership()).map((s) => s.id);
        return shards.includes('shard-2') && shards.includes('shard-3');
      };
      const heardBy = Date.now() + 10_000;
      while (!(await heard())) {
        if (Date.now() > heardBy) throw new Error('the router did not hear the new shards');
        await sleep(50);
      }
    }
    const survivors = ['shard-1', 'shard-2', 'shard-3'].filter((x) => x !== victimId);
    // Channels the rebalance moved onto the victim meanwhile are probed too (no vote declared there: any ack counts).
    const known = new Set(names);
    const now = await r.store.db.query<{ id: string }>('SELECT id FROM channels WHERE owner = $1 ORDER BY id', [victimId]);
    for (const { id } of now.rows) if (!known.has(id)) names.push(id);
    const probes = new Probes(r.bus, r.subjects, names, (ack) => ack.ok || ack.code !== 'CP_ERR_CHANNEL_UNAVAILABLE');
    await r.bus.flush();
    const victim = r.cluster.get(victimId);
    const watch = new ProcessWatch(['router', ...survivors].map((name) => ({ name, pid: r.cluster.get(name).pid ?? 0 })));
    await r.infra.start();
    watch.start();
    const killedAt = Date.now();
    victim.signal('SIGKILL');
    const stopAt = killedAt + config.router.shardTimeoutMs + 30_000;
    let dead: LogLine | undefined;
    while (Date.now() < stopAt) {
      for (let i = 0; i < names.length; i++) if (!probes.firstAckAt.has(i)) probes.send(i);
      dead ??= r.tap.of('router: shard declared dead').slice(deadBefore)[0];
      if (dead && probes.firstAckAt.size === names.length) break;
      await sleep(PROBE_EVERY_MS);
    }
    const processes = watch.stop();
    const infra = r.infra.stop();
    probes.close();
    if (!dead) throw new Error(`failover ${n}: the router never declared ${victimId} dead`);
    // The router logs `channels moved` once every placement of the dead shard's channels settled: give it 3 s more.
    const movedBy = Date.now() + 3_000;
    while (!r.tap.lines.some((l) => l.at >= killedAt && l.line.msg === 'router: channels moved' && l.line.shard === victimId)) {
      if (Date.now() > movedBy) break;
      await sleep(50);
    }
    const owners = (
      await r.store.db.query<{ owner: string | null; n: string }>(
        'SELECT owner, count(*) AS n FROM channels WHERE id = ANY($1::text[]) GROUP BY owner ORDER BY owner',
        [names],
      )
    ).rows.map((x) => ({ owner: x.owner, channels: Number(x.n) }));
    const declaredAt = Number(dead.line.declaredDeadAtMs);
    const detectionMs = declaredAt - killedAt;
    const declaredChannels = Number(dead.line.channels);
    // A channel answering before the declared instant was not on shard-1 at the kill (the rebalance had moved it).
    const move = (pred: (i: number) => boolean): ReturnType<typeof summary> =>
      summary([...probes.firstAckAt].filter(([i, at]) => at >= declaredAt && pred(i)).map(([, at]) => at - declaredAt));
    const after = r.tap.lines.filter((l) => l.at >= declaredAt);
    const placed = after.filter((l) => l.proc === 'router' && /^channels? assigned$/.test(String(l.line.msg)));
    const acquired = after.filter((l) => l.proc.startsWith('shard') && /^channels? acquired$/.test(String(l.line.msg)));
    const movedLine = after.find((l) => l.line.msg === 'router: channels moved' && l.line.shard === victimId);
    const all = move(() => true);
    const withRound = move((i) => withRoundSet.has(names[i]!));
    const withoutRound = move((i) => !withRoundSet.has(names[i]!));
    const acks = [...probes.firstAckAt.values()];
    const early = acks.filter((at) => at < declaredAt).length;
    const unanswered = names.length - probes.firstAckAt.size;
    const targeted = !join && Math.abs(names.length - MOVE_TARGET_CHANNELS) <= MOVE_TARGET_CHANNELS / 10;
    const targetMet = unanswered === 0 && all.max <= MOVE_TARGET_MS;
    const report = {
      mode: join
        ? 'separate processes (startCluster): sequencer, router, 1 crowd-engine shard holding the channels, 2 joining, 1 idle gateway; shard-1 SIGKILLed as the router rebalances onto the new ones'
        : 'separate processes (startCluster): sequencer, router, 3 crowd-engine shards holding 3 × channels, 1 idle gateway; the middle one by count SIGKILLed',
      victim: victimId,
      channels: names.length,
      withOpenRound: withRoundSet.size,
      declaredDeadChannels: declaredChannels,
      movedByRebalanceBeforeKill: early,
      detectionMs,
      lastSeenToDeclaredMs: dead.line.lastSeenMs == null ? null : declaredAt - Number(dead.line.lastSeenMs),
      moveMs: all,
      moveMsWithOpenRound: withRound,
      moveMsWithoutRound: withoutRound,
      unanswered,
      ownersAtEnd: owners,
      warnings: r.tap.warnings(killedAt),
      probeEveryMs: PROBE_EVERY_MS,
      probesSent: probes.sent,
      probeAckCodes: probes.codes,
      routerMoved: movedLine ? { moved: movedLine.line.moved, failed: movedLine.line.failed, moveMs: movedLine.line.moveMs } : null,
      routerPlacements: {
        statements: placed.length,
        channelsPerPlacement: summary(placed.map((l) => Number(l.line.channels ?? 1))),
        ms: fieldSummary(placed, 'ms'),
      },
      shardAcquires: acquireSummary(acquired),
      processes,
      natsServer: infra.nats,
      postgresBackends: infra.postgres,
      ...(targeted ? { target: { moveMaxMs: MOVE_TARGET_MS, met: targetMet } } : {}),
    };
    rows.push([
      `failover ${names.length}${join ? ' (join)' : ''}: detection`,
      `${detectionMs} ms (kill → declared dead; ROUTER_SHARD_TIMEOUT_MS ${config.router.shardTimeoutMs}, ROUTER_CHECK_MS ${config.router.checkMs}); ${declaredChannels} channels declared`,
    ]);
    rows.push([
      `  move (declared → acked)`,
      `ms ${JSON.stringify(all)}${targeted ? ` (target max ≤ ${MOVE_TARGET_MS} ms: ${targetMet ? 'met' : 'MISSED'})` : ''}; unanswered ${unanswered}`,
    ]);
    rows.push(['  with / without open round', `ms ${JSON.stringify(withRound)} / ${JSON.stringify(withoutRound)}`]);
    rows.push(['  acks', `${JSON.stringify(probes.codes)}; answered before the declared instant ${early}`]);
    rows.push([
      '  router / shards',
      `moved ${JSON.stringify(report.routerMoved)}; ${placed.length} placements of ${JSON.stringify(report.routerPlacements.channelsPerPlacement)} channels, ms ${JSON.stringify(report.routerPlacements.ms)}; acquires readMs p50 ${report.shardAcquires.readMs.p50}, leaseMs p50 ${report.shardAcquires.leaseMs.p50}, startMs p50 ${report.shardAcquires.startMs.p50}, subscribeMs p50 ${report.shardAcquires.subscribeMs.p50}`,
    ]);
    rows.push(['  owners at the end', owners.map((o) => `${o.owner ?? 'none'} ${o.channels}`).join(', ')]);
    for (const w of report.warnings) rows.push([`  ${w.proc} warned`, `${w.count}× ${w.msg}`]);
    for (const s of processes) rows.push([`  ${s.name} cpu`, `${s.cpuPct ?? 'n/a'} %`]);
    return { report, failed: unanswered > 0 };
  } finally {
    await r.close();
  }
}

interface SteadyPhase {
  game: boolean;
  seconds: number;
  intentsSent: number;
  acked: number;
  refused: number;
  gameBatches: number;
  cpuMs: Record<string, number | null>;
  cpuUsPerChannelSecond: Record<string, number | null>;
}

async function benchSteady(p: Params, entry: ChildEntry, rows: Array<[string, string]>): Promise<{ report: unknown; failed: boolean }> {
  const r = await rig(entry, 1);
  try {
    const names = await createChannels(r.store, 'st', p.steadyChannels);
    const a = await assignAll(r.router, names, 500);
    if (a.errors > 0) throw new Error(`steady: ${a.errors} assigns failed ${JSON.stringify(a.errorCodes)}`);
    await pool(names, 100, async (c) => {
      const msg = await r.bus.request(r.subjects.channelCtl(c), encodeJson(VOTE), { timeoutMs: 10_000 });
      if (!decodeJson<{ ok: boolean }>(msg.data).ok) throw new Error(`declare on ${c} refused`);
    });
    let acked = 0;
    let refused = 0;
    let measuring = false;
    const ackSub = r.bus.subscribe(r.subjects.gatewayAcks(GW), (msg) => {
      if (!measuring) return;
      for (const x of decodeJson<AckBatch>(msg.data).acks)
        if (x.ok) acked++;
        else refused++;
    });
    const phases: SteadyPhase[] = [];
    let seq = 0;
    for (const game of [false, true]) {
      let gameBatches = 0;
      const gameSub = game ? r.bus.subscribe(`${r.subjects.prefix}.ch.*.game`, () => void (measuring && gameBatches++)) : null;
      await r.bus.flush();
      // One intent per channel per second: every 10 ms, the next 1/100 of the channels.
      let stop = false;
      let sent = 0;
      const slice = Math.ceil(names.length / 100);
      let cursor = 0;
      const driver = (async () => {
        let due = performance.now();
        while (!stop) {
          for (let k = 0; k < slice; k++) {
            const i = cursor++ % names.length;
            const batch: IntentBatch = {
              gw: GW,
              intents: [{ conn: i, viewer: `v-${i}`, seq: ++seq, action: 'vote', option: 'abc'[seq % 3]!, at: Date.now() }],
            };
            r.bus.publish(r.subjects.channelIn(names[i]!), encodeJson(batch));
            if (measuring) sent++;
          }
          due += 10;
          await sleep(Math.max(0, due - performance.now()));
        }
      })();
      await sleep(p.warmupS * 1000);
      const watch = new ProcessWatch(
        ['shard-1', 'gw-1', 'router', 'sequencer'].map((name) => ({ name, pid: r.cluster.get(name).pid ?? 0 })),
      );
      acked = 0;
      refused = 0;
      await r.infra.start();
      watch.start();
      measuring = true;
      const t0 = performance.now();
      await sleep(p.steadySeconds * 1000);
      measuring = false;
      const seconds = (performance.now() - t0) / 1000;
      const procs = watch.stop();
      const infra = r.infra.stop();
      stop = true;
      await driver;
      gameSub?.unsubscribe();
      const cpuMs: Record<string, number | null> = {};
      for (const s of procs) cpuMs[s.name] = s.cpuMs === null ? null : Math.round(s.cpuMs);
      cpuMs['nats-server'] = infra.nats?.cpuMs == null ? null : Math.round(infra.nats.cpuMs);
      cpuMs['postgres backends'] = infra.postgres.cpuMs;
      const per: Record<string, number | null> = {};
      for (const [k, v] of Object.entries(cpuMs)) per[k] = v === null ? null : round1((v * 1000) / (names.length * seconds));
      phases.push({ game, seconds: round1(seconds), intentsSent: sent, acked, refused, gameBatches, cpuMs, cpuUsPerChannelSecond: per });
      rows.push([
        `steady ${names.length} ch, ${game ? 'with a game' : 'no game'}`,
        `${Math.round(sent / seconds)} intents/s sent, ${Math.round(acked / seconds)}/s acked, refused ${refused}${game ? `, ${Math.round(gameBatches / seconds)} game batches/s` : ''}`,
      ]);
      rows.push([
        '  µs CPU per channel-second',
        Object.entries(per)
          .map(([k, v]) => `${k} ${v ?? 'n/a'}`)
          .join(', '),
      ]);
    }
    ackSub.unsubscribe();
    return {
      report: {
        mode: 'separate processes (startCluster): sequencer, router, 1 crowd-engine shard, 1 gateway not on the path',
        channels: names.length,
        intentsPerChannelPerSecond: 1,
        phases,
      },
      failed: phases.some((x) => x.refused > 0 || x.acked === 0),
    };
  } finally {
    await r.close();
  }
}

/** Runs the benchmark (see the module doc). @returns exit code */
export async function main(args: readonly string[]): Promise<number> {
  const { values } = parseArgs({ args: [...args], options: OPTIONS, allowPositionals: true });
  const intOf = (name: string, raw: string, min: number): number => {
    const v = Number(raw);
    if (!Number.isSafeInteger(v) || v < min) throw new Error(`--${name} must be an integer ≥ ${min}`);
    return v;
  };
  const parts = String(values.only)
    .split(',')
    .map((s) => s.trim());
  for (const x of parts)
    if (!(PARTS as readonly string[]).includes(x)) throw new Error(`--only: unknown part "${x}" (${PARTS.join(', ')})`);
  const p: Params = {
    parts: parts as Part[],
    channels: intOf('channels', String(values.channels), 1),
    concurrency: intOf('concurrency', String(values.concurrency), 1),
    failoverChannels: String(values['failover-channels'])
      .split(',')
      .map((s) => intOf('failover-channels', s.trim(), 2)),
    failoverJoin: values['failover-join'] === true,
    steadyChannels: intOf('steady-channels', String(values['steady-channels']), 1),
    steadySeconds: intOf('steady-seconds', String(values['steady-seconds']), 1),
    warmupS: intOf('warmup-seconds', String(values['warmup-seconds']), 0),
    restSeconds: intOf('rest-seconds', String(values['rest-seconds']), 1),
  };
  if (p.steadySeconds > 60) throw new Error('--steady-seconds must be ≤ 60');
  if (p.restSeconds > 60) throw new Error('--rest-seconds must be ≤ 60');
  const config = defaultConfig();
  for (const n of p.failoverChannels)
    if (n > config.engine.maxChannels)
      throw new Error(`--failover-channels: ${n} is over SHARD_MAX_CHANNELS (${config.engine.maxChannels})`);
  const report: Record<string, unknown> = {
    benchmark: 'cluster-control',
    startedAt: new Date().toISOString(),
    params: p,
    settings: { router: config.router, heartbeatMs: config.engine.heartbeatMs, snapshotIntervalMs: config.engine.snapshotIntervalMs },
    machine: { cpuModel: cpus()[0]?.model, cpuCount: cpus().length, memoryBytes: totalmem(), nodeVersion: process.version },
    uptimeBefore: uptimeLine(),
    loadAverageBefore: loadavg().map(round1),
  };
  const rows: Array<[string, string]> = [];
  let exitCode = 0;
  const outdir = resolve(import.meta.dirname, '..', '..', '..', '.crowdplay', `bench-build-${process.pid}`);
  mkdirSync(outdir, { recursive: true });
  try {
    const { main: script } = await buildProduct({ outdir, quiet: true });
    const entry: ChildEntry = { execArgv: String(values['child-exec-argv']).split(' ').filter(Boolean), script };
    if (p.parts.includes('place')) {
      console.error(`cluster-control: place ${p.channels} channels`);
      const x = await benchPlace(p, entry, rows);
      report.place = x.cold;
      report.placeWarm = x.warm;
      report.placeRest = x.rest;
      if (x.failed) exitCode = 1;
    }
    if (p.parts.includes('failover')) {
      const list: unknown[] = [];
      for (const n of p.failoverChannels) {
        console.error(`cluster-control: failover of ${n} channels`);
        const x = await benchFailover(n, p.failoverJoin, entry, rows);
        list.push(x.report);
        if (x.failed) exitCode = 1;
      }
      report.failover = list;
    }
    if (p.parts.includes('steady')) {
      console.error(`cluster-control: steady cost of ${p.steadyChannels} channels`);
      const x = await benchSteady(p, entry, rows);
      report.steady = x.report;
      if (x.failed) exitCode = 1;
    }
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
  report.uptimeAfter = uptimeLine();
  report.loadAverageAfter = loadavg().map(round1);
  rows.push(['uptime before', String(report.uptimeBefore)]);
  rows.push(['uptime after', String(report.uptimeAfter)]);
  const width = Math.max(...rows.map(([k]) => k.length));
  console.log(rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join('\n'));
  if (values.json) {
    const file = resolve(String(values.json));
    mkdirSync(join(file, '..'), { recursive: true });
    writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
    console.error(`report written to ${file}`);
  }
  return exitCode;
}
