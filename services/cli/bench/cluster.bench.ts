/**
 * `npm run bench -- cluster [--json FILE] [--only nats,sequencer,router,shard]
 *   [--seconds 5] [--warmup-seconds 1] [--concurrency 64] [--channels 2000]
 *   [--intent-channels 200] [--batch 20] [--in-flight 200] [--fanout 8]`
 *
 * Per-process capacity of the cluster's services on this machine, each
 * service a process of its own (`crowdplay service <name>` from the bundle
 * `npm run build` writes, started by `startCluster`: sequencer, router, one
 * crowd-engine shard, one idle gateway) against the machine's NATS and
 * PostgreSQL (a schema and a subject prefix of its own, dropped / unused
 * afterwards). The driver is this process, on the same cores: every figure
 * includes that contention, and the services' CPU (from /proc) says how busy
 * each was. Parts (`--only`):
 *
 * - `nats`: bus messages per second through the machine's nats-server, no
 *   service involved: (a) the intent path, IntentBatches of `--batch`
 *   intents published on one `ch.<C>.in` subject to one subscriber (a
 *   shard); (b) the update path, 182-byte updates (the crowd scenario's
 *   bytes per broadcast) on one `ch.<C>.out` subject to `--fanout`
 *   subscribers, each its own connection (gateways): deliveries per second.
 *   Publishers flush every 1,000 messages (backpressure). nats-server's CPU
 *   over the window.
 * - `sequencer`: `--concurrency` loops each requesting a lease of
 *   SEQUENCER_BLOCK_SIZE ids and waiting for the reply, for `--seconds`:
 *   leases per second (each raise of the high-water mark committed in
 *   Postgres, shared by the requests waiting meanwhile).
 * - `router`: `--channels` new channels (rows created first) assigned through
 *   the router with `--concurrency` in flight: each assign bumps the epoch in
 *   Postgres and has the shard acquire the channel (which leases ids and
 *   loads its snapshot): assigns per second, router and shard CPU. Then the
 *   shard's RSS before and after holding them: bytes per channel.
 * - `shard`: `vote` declared on `--intent-channels` of those channels, then
 *   closed-loop IntentBatches of `--batch` intents (distinct viewers, as a
 *   gateway's 2 ms micro-batch carries them), at most `--in-flight` batches
 *   unanswered, each answered by its AckBatch: intents acked per second and
 *   the shard's CPU per intent (its ticks, updates, batches to the game
 *   subject and event-log writes included), and the event-log rows the shard
 *   wrote per second (channel_events counted before and after the window);
 *   the game batches (`ch.*.game`) received: per second, the interval between
 *   one channel's ticks (TICK_MS when the tick keeps up) and the batch lag
 *   (a batch's oldest intent's `at` → its arrival here). Then the tick's one
 *   awaited write alone: the event-log INSERT of one batch per driven channel,
 *   timed 10 times from here.
 *
 * Prints a table and, with --json FILE, writes every figure with the
 * parameters, the machine and its load average before and after.
 * @returns 0, or 1 when a part saw refusals or errors it should not
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { connectNatsBus, decodeJson, encodeJson, subjects as makeSubjects, type Bus } from '@crowdplay/bus';
import { defaultConfig } from '@crowdplay/config';
import { findListeningPid, processRssBytes, ProcessWatch, type ProcessSample } from '@crowdplay/loadtest';
import type { AckBatch, Batch, IntentBatch } from '@crowdplay/protocol';
import { RouterClient } from '@crowdplay/router';
import { openStore } from '@crowdplay/store';
import { serviceUrls, testSchema, uniqueName } from '@crowdplay/testing';
import { buildProduct } from '../../../scripts/build.mjs';
import { startCluster, type Cluster } from '../src/cluster.ts';

const OPTIONS = {
  json: { type: 'string' },
  only: { type: 'string', default: 'nats,sequencer,router,shard' },
  seconds: { type: 'string', default: '5' },
  'warmup-seconds': { type: 'string', default: '1' },
  concurrency: { type: 'string', default: '64' },
  channels: { type: 'string', default: '2000' },
  'intent-channels': { type: 'string', default: '200' },
  batch: { type: 'string', default: '20' },
  'in-flight': { type: 'string', default: '200' },
  fanout: { type: 'string', default: '8' },
} as const;

const PARTS = ['nats', 'sequencer', 'router', 'shard'] as const;
type Part = (typeof PARTS)[number];
const TENANT = 'bench';
/** The crowd scenario's measured mean update frame (docs/benchmarks.md, "bytes / broadcast"). */
const UPDATE_BYTES = 182;
const FLUSH_EVERY = 1_000;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const round1 = (n: number): number => Math.round(n * 10) / 10;

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Latency summary of `ms` samples: p50 / p95 / p99, ms. */
function lat(ms: number[]): { p50: number; p95: number; p99: number } {
  const s = Float64Array.from(ms).sort();
  return { p50: round1(percentile(s, 50)), p95: round1(percentile(s, 95)), p99: round1(percentile(s, 99)) };
}

/** Runs `loops` closed loops of `once` for warm-up + `seconds`; counts what finished inside the measured window. */
async function closedLoops(
  loops: number,
  warmupS: number,
  seconds: number,
  once: () => Promise<void>,
  watch?: ProcessWatch,
): Promise<{ done: number; errors: number; ms: number[]; elapsedMs: number; processes: ProcessSample[] }> {
  const st = { phase: 'warmup' as 'warmup' | 'measure' | 'stop' };
  let done = 0;
  let errors = 0;
  const ms: number[] = [];
  const loop = async (): Promise<void> => {
    while (st.phase !== 'stop') {
      const t = performance.now();
      try {
        await once();
        if (st.phase === 'measure') {
          done++;
          ms.push(performance.now() - t);
        }
      } catch {
        if (st.phase === 'measure') errors++;
      }
    }
  };
  const all = Array.from({ length: loops }, loop);
  await sleep(warmupS * 1000);
  st.phase = 'measure';
  watch?.start();
  const t0 = performance.now();
  await sleep(seconds * 1000);
  const elapsedMs = performance.now() - t0;
  const measured = done;
  const processes = watch?.stop() ?? [];
  st.phase = 'stop';
  await Promise.all(all);
  return { done: measured, errors, ms, elapsedMs, processes };
}

/** A gateway-shaped IntentBatch of `n` intents on connections `conn0…`, viewers distinct. */
function intentBatch(gw: string, conn0: number, n: number, seq: number): Uint8Array {
  const at = Date.now();
  const intents = Array.from({ length: n }, (_, i) => ({
    conn: conn0 + i,
    viewer: `v-${conn0 + i}`,
    seq,
    action: 'vote',
    option: 'abc'[(seq + i) % 3]!,
    at,
  }));
  return encodeJson({ gw, intents } satisfies IntentBatch);
}

interface NatsFigures {
  intentPath: { payloadBytes: number; messagesPerSecond: number; intentsPerSecond: number };
  updatePath: { payloadBytes: number; subscribers: number; publishedPerSecond: number; deliveriesPerSecond: number };
  natsServer: ProcessSample[];
}

/** Publishes as fast as flushes allow for `seconds`; counts deliveries at the subscribers. */
async function natsRate(
  pub: Bus,
  subs: Bus[],
  subject: string,
  payload: Uint8Array,
  warmupS: number,
  seconds: number,
  watch: ProcessWatch | null,
): Promise<{ published: number; delivered: number; elapsedMs: number; processes: ProcessSample[] }> {
  let delivered = 0;
  let measuring = false;
  const handles = subs.map((b) => b.subscribe(subject, () => void (measuring && delivered++)));
  for (const b of subs) await b.flush();
  const st = { phase: 'warmup' as 'warmup' | 'measure' | 'stop' };
  let published = 0;
  const publisher = (async () => {
    while (st.phase !== 'stop') {
      for (let i = 0; i < FLUSH_EVERY; i++) pub.publish(subject, payload);
      await pub.flush();
      if (st.phase === 'measure') published += FLUSH_EVERY;
    }
  })();
  await sleep(warmupS * 1000);
  st.phase = 'measure';
  measuring = true;
  watch?.start();
  const t0 = performance.now();
  await sleep(seconds * 1000);
  const elapsedMs = performance.now() - t0;
  measuring = false;
  const processes = watch?.stop() ?? [];
  st.phase = 'stop';
  await publisher;
  for (const h of handles) h.unsubscribe();
  return { published, delivered, elapsedMs, processes };
}

async function benchNats(p: Params, natsUrl: string, prefix: string): Promise<NatsFigures> {
  const subjects = makeSubjects(prefix);
  const natsPid = findListeningPid(Number(new URL(natsUrl).port || 4222));
  const watch = (): ProcessWatch | null => (natsPid === null ? null : new ProcessWatch([{ name: 'nats-server', pid: natsPid }]));
  const pub = await connectNatsBus({ servers: natsUrl, name: 'bench-pub' });
  const subs = await Promise.all(
    Array.from({ length: Math.max(1, p.fanout) }, (_, i) => connectNatsBus({ servers: natsUrl, name: `bench-sub-${i}` })),
  );
  try {
    const batch = intentBatch('gw-bench', 0, p.batch, 1);
    const a = await natsRate(pub, subs.slice(0, 1), subjects.channelIn('nats-in'), batch, p.warmupS, p.seconds, watch());
    const update = new Uint8Array(UPDATE_BYTES).fill(0x61);
    const b = await natsRate(pub, subs, subjects.channelOut('nats-out'), update, p.warmupS, p.seconds, watch());
    const perS = (n: number, ms: number): number => Math.round((n * 1000) / ms);
    return {
      intentPath: {
        payloadBytes: batch.length,
        messagesPerSecond: perS(a.delivered, a.elapsedMs),
        intentsPerSecond: perS(a.delivered * p.batch, a.elapsedMs),
      },
      updatePath: {
        payloadBytes: UPDATE_BYTES,
        subscribers: subs.length,
        publishedPerSecond: perS(b.published, b.elapsedMs),
        deliveriesPerSecond: perS(b.delivered, b.elapsedMs),
      },
      natsServer: [
        ...a.processes.map((s) => ({ ...s, name: 'nats-server (intent path)' })),
        ...b.processes.map((s) => ({ ...s, name: 'nats-server (update path)' })),
      ],
    };
  } finally {
    await pub.close();
    await Promise.all(subs.map((s) => s.close()));
  }
}

interface Params {
  parts: Part[];
  seconds: number;
  warmupS: number;
  concurrency: number;
  channels: number;
  intentChannels: number;
  batch: number;
  inFlight: number;
  fanout: number;
}

function watchOf(cluster: Cluster, names: string[]): ProcessWatch {
  return new ProcessWatch(names.map((name) => ({ name, pid: cluster.get(name).pid ?? 0 })));
}

/** Runs the benchmark (see the module doc). @returns exit code */
export async function main(args: readonly string[]): Promise<number> {
  const { values } = parseArgs({ args: [...args], options: OPTIONS, allowPositionals: true });
  const intArg = (name: keyof typeof OPTIONS, min: number): number => {
    const v = Number(values[name]);
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
    seconds: intArg('seconds', 1),
    warmupS: intArg('warmup-seconds', 0),
    concurrency: intArg('concurrency', 1),
    channels: intArg('channels', 1),
    intentChannels: intArg('intent-channels', 1),
    batch: intArg('batch', 1),
    inFlight: intArg('in-flight', 1),
    fanout: intArg('fanout', 1),
  };
  if (p.parts.includes('shard') && !p.parts.includes('router'))
    throw new Error('--only shard needs router (its channels are assigned there)');
  if (p.intentChannels > p.channels) throw new Error('--intent-channels must be ≤ --channels');
  const urls = await serviceUrls();
  const natsUrl = urls.natsUrl;
  const prefix = uniqueName('bench');
  const report: Record<string, unknown> = {
    benchmark: 'cluster',
    startedAt: new Date().toISOString(),
    params: p,
    machine: { cpuModel: cpus()[0]?.model, cpuCount: cpus().length, memoryBytes: totalmem(), nodeVersion: process.version },
    loadAverageBefore: loadavg().map(round1),
  };
  const rows: Array<[string, string]> = [];
  let exitCode = 0;

  if (p.parts.includes('nats')) {
    const n = await benchNats(p, natsUrl, prefix);
    report.nats = n;
    rows.push([
      'nats intent path',
      `${n.intentPath.messagesPerSecond} msgs/s of ${n.intentPath.payloadBytes} B = ${n.intentPath.intentsPerSecond} intents/s`,
    ]);
    rows.push([
      'nats update path',
      `${n.updatePath.publishedPerSecond} published/s of ${n.updatePath.payloadBytes} B × ${n.updatePath.subscribers} subscribers = ${n.updatePath.deliveriesPerSecond} deliveries/s`,
    ]);
    for (const s of n.natsServer) rows.push([s.name, `cpu ${s.cpuPct ?? 'n/a'} %`]);
  }

  const clusterParts = p.parts.filter((x) => x !== 'nats');
  if (clusterParts.length > 0) {
    const schema = await testSchema();
    const outdir = resolve(import.meta.dirname, '..', '..', '..', '.crowdplay', `bench-build-${process.pid}`);
    mkdirSync(outdir, { recursive: true });
    const { main: script } = await buildProduct({ outdir, quiet: true });
    let cluster: Cluster | undefined;
    const store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 4, pgliteDir: 'memory' });
    const bus = await connectNatsBus({ servers: natsUrl, name: 'bench-driver' });
    const subjects = makeSubjects(prefix);
    try {
      cluster = await startCluster({
        gateways: 1,
        shards: 1,
        env: {
          NATS_URL: natsUrl,
          REDIS_URL: urls.redisUrl,
          DATABASE_URL: schema.databaseUrl,
          DATABASE_SCHEMA: schema.schema,
          BUS_SUBJECT_PREFIX: prefix,
          PORT: '0',
          HOST: '127.0.0.1',
          TELEGRAM_BOT_TOKEN: '',
        },
        entry: { execArgv: [], script },
        out: () => {},
      });
      const config = defaultConfig();
      report.services = cluster.processes.map((c) => ({ name: c.name, pid: c.pid, rssIdleBytes: c.pid ? processRssBytes(c.pid) : null }));

      if (p.parts.includes('sequencer')) {
        const size = config.sequencer.blockSize;
        const r = await closedLoops(
          p.concurrency,
          p.warmupS,
          p.seconds,
          async () => {
            const msg = await bus.request(subjects.sequencerLease(), encodeJson({ size }), { timeoutMs: 5_000 });
            if (!decodeJson<{ ok: boolean }>(msg.data).ok) throw new Error('lease refused');
          },
          watchOf(cluster, ['sequencer']),
        );
        const leasesPerSecond = Math.round((r.done * 1000) / r.elapsedMs);
        report.sequencer = { blockSize: size, leasesPerSecond, errors: r.errors, replyMs: lat(r.ms), processes: r.processes };
        rows.push([
          'sequencer',
          `${leasesPerSecond} leases/s of ${size} ids (${p.concurrency} in flight), reply ms ${JSON.stringify(lat(r.ms))}, errors ${r.errors}`,
        ]);
        rows.push(['  sequencer cpu', `${r.processes[0]?.cpuPct ?? 'n/a'} %`]);
        if (r.errors > 0) exitCode = 1;
      }

      if (p.parts.includes('router')) {
        await store.tenants.create(TENANT, 'Bench');
        const names = Array.from({ length: p.channels }, (_, i) => `b-${i}`);
        for (const c of names) await store.channels.ensure(c, TENANT);
        const router = new RouterClient(bus, subjects, 10_000);
        const shardPid = cluster.get('shard-1').pid ?? 0;
        const rss0 = processRssBytes(shardPid);
        const watch = watchOf(cluster, ['router', 'shard-1', 'sequencer']);
        let next = 0;
        let errors = 0;
        const ms: number[] = [];
        watch.start();
        const t0 = performance.now();
        await Promise.all(
          Array.from({ length: p.concurrency }, async () => {
            while (next < names.length) {
              const c = names[next++]!;
              const t = performance.now();
              try {
                await router.assign(c);
                ms.push(performance.now() - t);
              } catch {
                errors++;
              }
            }
          }),
        );
        const elapsedMs = performance.now() - t0;
        const processes = watch.stop();
        await sleep(2_000); // let the shard settle (first updates, snapshots) before its RSS is read
        const rss1 = processRssBytes(shardPid);
        const assignsPerSecond = Math.round((ms.length * 1000) / elapsedMs);
        const bytesPerChannel = rss0 === null || rss1 === null ? null : Math.round((rss1 - rss0) / p.channels);
        report.router = { channels: p.channels, assignsPerSecond, errors, assignMs: lat(ms), elapsedMs: Math.round(elapsedMs), processes };
        report.shardChannels = { channels: p.channels, rssBeforeBytes: rss0, rssAfterBytes: rss1, bytesPerChannel };
        rows.push([
          'router',
          `${assignsPerSecond} assigns/s of new channels (${p.concurrency} in flight), assign ms ${JSON.stringify(lat(ms))}, errors ${errors}`,
        ]);
        for (const s of processes) rows.push([`  ${s.name} cpu`, `${s.cpuPct ?? 'n/a'} %`]);
        rows.push(['shard channels', `${p.channels} held: rss ${rss0} → ${rss1} bytes = ${bytesPerChannel ?? 'n/a'} bytes per channel`]);
        if (errors > 0) exitCode = 1;

        if (p.parts.includes('shard')) {
          const driven = names.slice(0, p.intentChannels);
          for (const c of driven) {
            const msg = await bus.request(
              subjects.channelCtl(c),
              encodeJson({ op: 'declare', actions: [{ name: 'vote', options: ['a', 'b', 'c'], maxPerTick: 1_000 }] }),
              { timeoutMs: 10_000 },
            );
            if (!decodeJson<{ ok: boolean }>(msg.data).ok) throw new Error(`declare on ${c} refused`);
          }
          // Closed loop per slot: slot k sends channel (k mod channels)'s batch on connections k·batch…, waits for its AckBatch.
          const gw = 'gw-bench';
          const waiting = new Map<number, () => void>();
          let acked = 0;
          let refused = 0;
          let measuring = false;
          const refusedBy: Record<string, number> = {};
          const sub = bus.subscribe(subjects.gatewayAcks(gw), (msg) => {
            const b = decodeJson<AckBatch>(msg.data);
            const first = b.acks[0];
            if (!first) return;
            if (measuring)
              for (const a of b.acks) {
                if (a.ok) acked++;
                else {
                  refused++;
                  refusedBy[a.code ?? 'no-code'] = (refusedBy[a.code ?? 'no-code'] ?? 0) + 1;
                }
              }
            const slot = Math.floor(first.conn / p.batch);
            waiting.get(slot)?.();
          });
          // The shard's batches to the games (ch.<C>.game): tick interval per channel (closedAt gaps) and batch lag (oldest intent's `at` → here).
          const lastClosed = new Map<string, number>();
          const tickGapMs: number[] = [];
          const batchLagMs: number[] = [];
          let gameBatches = 0;
          const gameSub = bus.subscribe(`${prefix}.ch.*.game`, (msg) => {
            if (!measuring) return;
            const b = decodeJson<Batch>(msg.data);
            gameBatches++;
            const prev = lastClosed.get(b.channel);
            if (prev !== undefined) tickGapMs.push(b.closedAt - prev);
            lastClosed.set(b.channel, b.closedAt);
            const first = b.actions.vote?.intents[0];
            if (first) batchLagMs.push(Date.now() - first.at);
          });
          await bus.flush();
          let seq = 0;
          const slots = Array.from({ length: p.inFlight }, (_, k) => k);
          let phase: 'warmup' | 'measure' | 'stop' = 'warmup';
          const loops = slots.map(async (k) => {
            const channel = driven[k % driven.length]!;
            while (phase !== 'stop') {
              const answered = new Promise<void>((res) => {
                const t = setTimeout(res, 5_000);
                waiting.set(k, () => {
                  clearTimeout(t);
                  res();
                });
              });
              bus.publish(subjects.channelIn(channel), intentBatch(gw, k * p.batch, p.batch, seq++));
              await answered;
            }
          });
          const watchShard = watchOf(cluster, ['shard-1', 'router', 'sequencer']);
          await sleep(p.warmupS * 1000);
          phase = 'measure';
          measuring = true;
          const eventRows = async (): Promise<number> =>
            Number((await store.db.query<{ n: string }>('SELECT count(*) AS n FROM channel_events')).rows[0]?.n ?? 0);
          const rows0 = await eventRows();
          watchShard.start();
          const t0s = performance.now();
          await sleep(p.seconds * 1000);
          const el = performance.now() - t0s;
          measuring = false;
          const sp = watchShard.stop();
          const eventLogRowsPerSecond = Math.round(((await eventRows()) - rows0) / (el / 1000));
          phase = 'stop';
          await Promise.all(loops);
          sub.unsubscribe();
          gameSub.unsubscribe();
          // The tick's one awaited write, alone: the same INSERT (store.events.append) of one ~150-byte batch per driven channel, 10 times.
          const epochs = await Promise.all(driven.map(async (c) => (await store.channels.get(c))?.epoch ?? 0));
          const appendMs: number[] = [];
          for (let r = 0; r < 10; r++) {
            const t = performance.now();
            await store.events.append(
              driven.map((c, i) => ({
                channel: c,
                eventId: 9_000_000_000_000 + r * driven.length + i,
                epoch: epochs[i]!,
                kind: 'batch',
                body: `{"t":"batch","channel":"${c}","ev":1,"tick":1,"closedAt":0,"actions":{"vote":{"tally":{"a":1,"b":1},"intents":[],"dropped":0}}}`,
              })),
            );
            appendMs.push(performance.now() - t);
          }
          const shard = sp.find((s) => s.name === 'shard-1');
          const intentsPerSecond = Math.round((acked * 1000) / el);
          const cpuMsPerIntent = shard?.cpuMs == null || acked === 0 ? null : Math.round((shard.cpuMs / acked) * 10_000) / 10_000;
          report.shard = {
            channelsHeld: p.channels,
            channelsDriven: driven.length,
            batch: p.batch,
            inFlight: p.inFlight,
            intentsAckedPerSecond: intentsPerSecond,
            refused,
            refusedBy,
            cpuMsPerIntent,
            eventLogRowsPerSecond,
            gameBatchesPerSecond: Math.round((gameBatches * 1000) / el),
            eventLogAppendMs: { rows: driven.length, ...lat(appendMs) },
            tickIntervalMs: lat(tickGapMs),
            batchLagMs: lat(batchLagMs),
            processes: sp,
          };
          rows.push([
            'shard intents',
            `${intentsPerSecond} acked/s over ${driven.length} channels (batches of ${p.batch}, ${p.inFlight} in flight), refused ${refused}`,
          ]);
          for (const s of sp) rows.push([`  ${s.name} cpu`, `${s.cpuPct ?? 'n/a'} %, rss peak ${s.rssPeakBytes ?? 'n/a'} bytes`]);
          rows.push(['  shard cpu per intent', `${cpuMsPerIntent ?? 'n/a'} ms`]);
          rows.push(['  event log rows written', `${eventLogRowsPerSecond}/s (channel_events, one statement per tick)`]);
          rows.push(['  event log append alone', `${driven.length} rows: ms ${JSON.stringify(lat(appendMs))}`]);
          rows.push([
            '  game batches',
            `${Math.round((gameBatches * 1000) / el)}/s; tick interval per channel ms ${JSON.stringify(lat(tickGapMs))} (TICK_MS ${config.engine.tickMs}); batch lag ms ${JSON.stringify(lat(batchLagMs))}`,
          ]);
          if (refused > 0) exitCode = 1;
        }
      }
    } finally {
      await cluster?.stop();
      await bus.close();
      await store.close();
      await schema.drop();
      rmSync(outdir, { recursive: true, force: true });
    }
  }
  report.loadAverageAfter = loadavg().map(round1);
  rows.push([
    'load average before / after',
    `${(report.loadAverageBefore as number[]).join(' ')} / ${(report.loadAverageAfter as number[]).join(' ')}`,
  ]);
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
