/**
 * `npm run bench -- event-log [--json FILE] [--rows 1500] [--ticks 100] [--repeats 3]`
 *
 * What a tick's event log write costs the shard and Postgres, by how its array parameters travel: as node-postgres's
 * text array literals (each element escaped in JS, parsed back by Postgres) against Postgres's binary array format
 * (textArray/int8Array, array-params.ts, what EventLogRepository.append sends). Into this machine's Postgres
 * (DATABASE_URL, or the local test Postgres; a schema of its own, dropped at the end): `--rows` channels, each
 * appending one batch body per tick (an intent batch of two intents as a game receives it, ~190 bytes of JSON), the
 * same set-fenced statement both ways, `--ticks` statements per measurement. The figures are the bench process's CPU
 * (process.cpuUsage: building the parameters, pg's serialising, the socket, garbage collection) and the one backend's
 * CPU (/proc/<pid>/stat, 10 ms resolution), per row, and the wall time per statement; the lowest of the repeats,
 * the two forms alternating.
 *
 * Prints a table and, with --json FILE, writes { params, machine, literal, binary } (clientCpuUs and backendCpuUs
 * per row, wallMs per statement).
 */
import { writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { EVENT_SQL } from '@crowdplay/store';
import { backendCpuMs, openBenchStore, runIfMain } from './bench-store.ts';

const OPTIONS = {
  json: { type: 'string' },
  rows: { type: 'string', default: '1500' },
  ticks: { type: 'string', default: '100' },
  repeats: { type: 'string', default: '3' },
} as const;

interface Figures {
  clientCpuUs: number;
  backendCpuUs: number;
  wallMs: number;
}

function intOption(name: string, raw: string, max: number): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > max) throw new Error(`--${name} must be an integer 1–${max}, got ${raw}`);
  return n;
}

/**
 * Runs the bench (see the module comment).
 * @returns 0; throws on bad options (`--rows` 1–10,000, `--ticks` 1–1,000, `--repeats` 1–20)
 */
export async function main(args: readonly string[]): Promise<number> {
  const { values } = parseArgs({ args: [...args], options: OPTIONS, strict: true });
  const rows = intOption('rows', values.rows, 10_000);
  const ticks = intOption('ticks', values.ticks, 1_000);
  const repeats = intOption('repeats', values.repeats, 20);
  const ids = Array.from({ length: rows }, (_, i) => `el-${i}`);
  const { store, close } = await openBenchStore(ids);
  try {
    let eventId = 0;
    const tick = (): Array<{ channel: string; eventId: number; epoch: number; kind: string; body: string }> =>
      ids.map((channel) => {
        const ev = ++eventId;
        return {
          channel,
          eventId: ev,
          epoch: 1,
          kind: 'batch',
          body: JSON.stringify({
            channel,
            ev,
            intents: [
              { viewer: `v-${ev % 997}`, action: 'vote', arg: { option: ev % 3 }, at: 1_796_651_100_000 + ev },
              { viewer: `v-${ev % 991}`, action: 'vote', arg: { option: (ev + 1) % 3 }, at: 1_796_651_100_001 + ev },
            ],
          }),
        };
      });
    const forms: Record<'literal' | 'binary', (events: ReturnType<typeof tick>) => Promise<unknown>> = {
      literal: (events) =>
        store.db.query(EVENT_SQL.append, [
          events.map((e) => e.channel),
          events.map((e) => e.eventId),
          events.map((e) => e.epoch),
          events.map((e) => e.kind),
          events.map((e) => e.body),
        ]),
      binary: async (events) => {
        const stale = await store.events.append(events);
        if (stale.length > 0) throw new Error(`rows refused: ${stale.length}`);
      },
    };
    const best: Record<'literal' | 'binary', Figures> = {
      literal: { clientCpuUs: Infinity, backendCpuUs: Infinity, wallMs: Infinity },
      binary: { clientCpuUs: Infinity, backendCpuUs: Infinity, wallMs: Infinity },
    };
    for (let k = 0; k < repeats; k++) {
      for (const name of ['literal', 'binary'] as const) {
        const batches = Array.from({ length: ticks }, tick);
        const cpu0 = await backendCpuMs(store);
        const u0 = process.cpuUsage();
        const t0 = performance.now();
        for (const b of batches) await forms[name](b);
        const wall = performance.now() - t0;
        const u = process.cpuUsage(u0);
        const cpu = (await backendCpuMs(store)) - cpu0;
        const f = best[name];
        f.clientCpuUs = Math.min(f.clientCpuUs, round2((u.user + u.system) / (ticks * rows)));
        f.backendCpuUs = Math.min(f.backendCpuUs, round2((cpu * 1000) / (ticks * rows)));
        f.wallMs = Math.min(f.wallMs, round2(wall / ticks));
        await store.db.query('TRUNCATE channel_events');
      }
    }
    const report = {
      benchmark: 'event-log',
      startedAt: new Date().toISOString(),
      params: { rows, ticks, repeats },
      machine: { cpuModel: cpus()[0]?.model, cpuCount: cpus().length, memoryBytes: totalmem(), nodeVersion: process.version },
      ...best,
    };
    console.log(`event log append, ${rows} rows per statement, ${ticks} statements, lowest of ${repeats} repeats`);
    for (const name of ['literal', 'binary'] as const)
      console.log(
        `  ${name === 'literal' ? 'text array literals ' : 'binary arrays       '} client CPU ${best[name].clientCpuUs} µs/row, backend CPU ${best[name].backendCpuUs} µs/row, wall ${best[name].wallMs} ms/statement`,
      );
    if (values.json) writeFileSync(values.json, `${JSON.stringify(report, null, 2)}\n`);
    return 0;
  } finally {
    await close();
  }
}

function round2(x: number): number {
  return Math.round(x * 100) / 100;
}

runIfMain(import.meta.url, main);
