/**
 * `npm run bench -- round-updates [--json FILE] [--rounds 2000] [--repeats 3]`
 *
 * What a round's state change costs Postgres, written one statement per change
 * (each autocommitted, as every change was before round-updates.ts) against the
 * changes of one turn in one statement (RoundRepository.update as it is). Into
 * this machine's Postgres (DATABASE_URL, or the local test Postgres; a schema of
 * its own, dropped at the end): `--rounds` channels, each acquired and holding
 * one open pool round; each repeat locks every round one statement at a time,
 * then settles every round through `update()` called for all of them in one
 * turn, then reopens them for the next repeat (not measured). The figure is the
 * CPU of the one backend the store uses (/proc/<pid>/stat, 10 ms resolution;
 * synchronous_commit on, so each commit waits for its WAL flush) per round, and
 * the wall time per round.
 *
 * Prints a table and, with --json FILE, writes { params, machine, single,
 * coalesced } (µs per round: backendCpuUs, wallUs; the lowest of the repeats).
 */
import { writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { backendCpuMs, openBenchStore, runIfMain } from './bench-store.ts';

const OPTIONS = {
  json: { type: 'string' },
  rounds: { type: 'string', default: '2000' },
  repeats: { type: 'string', default: '3' },
} as const;

/**
 * Runs the bench (see the module comment).
 * @returns 0; throws on bad options (`--rounds` 1–20,000, `--repeats` 1–20)
 */
export async function main(args: readonly string[]): Promise<number> {
  const { values } = parseArgs({ args: [...args], options: OPTIONS, strict: true });
  const rounds = Number(values.rounds);
  const repeats = Number(values.repeats);
  if (!Number.isInteger(rounds) || rounds < 1 || rounds > 20_000)
    throw new Error(`--rounds must be an integer 1–20000, got ${values.rounds}`);
  if (!Number.isInteger(repeats) || repeats < 1 || repeats > 20)
    throw new Error(`--repeats must be an integer 1–20, got ${values.repeats}`);
  const ids = Array.from({ length: rounds }, (_, i) => `ru-${i}`);
  const { store, close } = await openBenchStore(ids);
  try {
    const open = (): Promise<unknown> =>
      store.db.query(
        `INSERT INTO rounds (channel_id, id, uid, tenant_id, kind, outcomes, liquidity, take_bps, opened_at, deadline_at, epoch, state)
         SELECT c, 'r', c || '/r', 'bench', 'pool', '["x","y"]'::jsonb, NULL, 0, now(), now() + interval '1 minute', 1, 'open'
           FROM unnest($1::text[]) c
         ON CONFLICT (channel_id, id) DO UPDATE SET state = 'open', book = NULL, winner = NULL, paid = false`,
        [ids],
      );
    const single = { backendCpuUs: Infinity, wallUs: Infinity };
    const coalesced = { backendCpuUs: Infinity, wallUs: Infinity };
    for (let k = 0; k < repeats; k++) {
      await open();
      let cpu0 = await backendCpuMs(store);
      let t0 = performance.now();
      for (const c of ids)
        await store.db.query(
          `UPDATE rounds SET state = 'locked', book = $3::jsonb, epoch = $2, updated_at = now()
             WHERE channel_id = $1 AND id = 'r' AND state = ANY('{open,locked}'::text[])`,
          [c, 1, '{"pool":[1,2]}'],
        );
      let wall = performance.now() - t0;
      let cpu = (await backendCpuMs(store)) - cpu0;
      single.backendCpuUs = Math.min(single.backendCpuUs, Math.round((cpu * 1000) / rounds));
      single.wallUs = Math.min(single.wallUs, Math.round((wall * 1000) / rounds));
      cpu0 = await backendCpuMs(store);
      t0 = performance.now();
      const applied = await Promise.all(ids.map((c) => store.rounds.update(c, 'r', 1, { state: 'settled', winner: 0 })));
      wall = performance.now() - t0;
      cpu = (await backendCpuMs(store)) - cpu0;
      if (applied.some((a) => !a)) throw new Error('a settle was not applied');
      coalesced.backendCpuUs = Math.min(coalesced.backendCpuUs, Math.round((cpu * 1000) / rounds));
      coalesced.wallUs = Math.min(coalesced.wallUs, Math.round((wall * 1000) / rounds));
    }
    const report = {
      benchmark: 'round-updates',
      startedAt: new Date().toISOString(),
      params: { rounds, repeats },
      machine: { cpuModel: cpus()[0]?.model, cpuCount: cpus().length, memoryBytes: totalmem(), nodeVersion: process.version },
      single,
      coalesced,
    };
    console.log(`round state changes, ${rounds} rounds, lowest of ${repeats} repeats (µs per round)`);
    console.log(`  one statement each (autocommit)   backend CPU ${single.backendCpuUs}, wall ${single.wallUs}`);
    console.log(`  one turn in one statement          backend CPU ${coalesced.backendCpuUs}, wall ${coalesced.wallUs}`);
    if (values.json) writeFileSync(values.json, `${JSON.stringify(report, null, 2)}\n`);
    return 0;
  } finally {
    await close();
  }
}

runIfMain(import.meta.url, main);
