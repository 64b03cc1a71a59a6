/**
 * Epoch fencing with SIGSTOP: `crowdplay cluster` with two shards
 * (the bundle, real processes, PostgreSQL + NATS; own schema and subject
 * prefix). Viewers stake without pause in the open round of a channel; its
 * owner is paused with SIGSTOP; the router fails the channel over to the
 * other shard (ROUTER_SHARD_TIMEOUT_MS 1.5 s), whose recovery cancels and
 * refunds the round that had no handed-off book; stakes go on in the game's
 * next round on the new owner; then the old shard is resumed with SIGCONT,
 * holding the writes it had in hand when it stopped and the intents NATS
 * delivered to it meanwhile. Postgres refuses those late writes (stale
 * epoch), the old shard stops serving the channel, and: every stake got an
 * answer, every acked stake is in the ledger exactly once (refunded if its
 * round was cancelled), `ledger verify` is ok, the game's event ids rise
 * strictly and the event log has no id written at the old epoch above one
 * written at the new (no fork).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, type Cluster } from '@crowdplay/cli';
import { defaultConfig } from '@crowdplay/config';
import { Ledger } from '@crowdplay/ledger';
import { openStore, type Store } from '@crowdplay/store';
import { serviceUrls, testSchema, type TestSchema } from '@crowdplay/testing';
import { builtProduct, clusterTestEnv } from '../helpers.ts';
import { checkRun, sleep, startWorkload } from '../cluster-run.ts';

describe('fencing: a paused shard comes back after its channel moved (SIGSTOP / SIGCONT)', () => {
  let schema: TestSchema;
  let cluster: Cluster | undefined;
  let store: Store | undefined;
  const lines: string[] = [];

  before(async () => {
    const urls = await serviceUrls();
    schema = await testSchema();
    const main = await builtProduct();
    cluster = await startCluster({
      gateways: 1,
      shards: 2,
      env: clusterTestEnv(urls, schema, 'fe', {
        REFUSAL_LOG_INTERVAL_MS: '100',
        SNAPSHOT_INTERVAL_MS: '200',
        SHARD_HEARTBEAT_MS: '250',
        ROUTER_SHARD_TIMEOUT_MS: '1500',
        ROUTER_CHECK_MS: '200',
        ROUTER_REBALANCE_MOVES_PER_S: '0',
      }),
      entry: { execArgv: [], script: main },
      out: (l) => void lines.push(l),
    });
    store = await openStore({ url: urls.databaseUrl, schema: schema.schema, poolMax: 2, pgliteDir: 'memory', migrate: false });
  });

  after(async () => {
    if (process.env.CLUSTER_LOG) (await import('node:fs')).writeFileSync(process.env.CLUSTER_LOG, lines.join('\n'));
    for (const p of cluster?.processes ?? []) p.signal('SIGCONT');
    await cluster?.stop();
    await store?.close();
    await schema?.drop();
  });

  it('the old owner’s late writes are refused, nothing is paid twice, the channel is not forked, every acked stake is in the ledger once', async () => {
    const created = await store!.tenants.create('acme', 'Acme');
    const channel = 'arena';
    const w = await startWorkload({
      gatewayUrl: cluster!.gatewayUrls[0]!,
      channel,
      apiKey: created.apiKey,
      tenant: 'acme',
      secret: created.tenant.signingSecret,
      viewers: ['ann', 'bob', 'cat', 'dan', 'eve', 'fay'],
      fund: 100_000,
      roundEveryMs: 1_500,
    });
    try {
      await w.ackedMore(20, 15_000, 'stakes before the pause');
      const before = (await store!.channels.get(channel))!;
      assert.match(String(before.owner), /^shard-[12]$/);
      const old = cluster!.get(before.owner!);
      const oldFrom = old.output.length;

      old.signal('SIGSTOP');
      const t0 = Date.now();
      let after = before;
      while (after.owner === before.owner || after.epoch <= before.epoch) {
        if (Date.now() - t0 > 10_000) assert.fail(`no failover in 10 s\n${lines.slice(-40).join('\n')}`);
        await sleep(50);
        after = (await store!.channels.get(channel))!;
      }
      const failoverMs = Date.now() - t0;
      assert.notEqual(after.owner, null);
      // Stakes go on, on the new owner (in the round the game opens next: the paused owner's round had no handed-off book).
      await w.ackedMore(20, 20_000, 'stakes on the new owner');

      // A write of the old owner's, straight to Postgres at its epoch (what its ledger would send): refused, nothing changes.
      const ledger = new Ledger(store!.db, defaultConfig({}).ledger);
      // Checked by its transfer, not by ann's balance: the new owner keeps taking the workload's stakes meanwhile.
      const lateId = `${channel}/late:s:test`;
      const landed = async (): Promise<number> =>
        Number((await store!.db.query<{ n: string }>('SELECT count(*) AS n FROM transfers WHERE id = $1', [lateId])).rows[0]!.n);
      await assert.rejects(
        ledger.transfer({
          id: lateId,
          tenantId: 'acme',
          from: { kind: 'wallet', owner: 'ann' },
          to: { kind: 'escrow', owner: `${channel}/r1` },
          amount: 5,
          kind: 'stake',
          channelId: channel,
          epoch: before.epoch,
          roundId: `${channel}/r1`,
        }),
        (err: { code?: string }) => err.code === 'CP_ERR_CHANNEL_STALE_EPOCH',
      );
      await ledger.close();
      assert.equal(await landed(), 0, 'a refused write changes nothing');

      // The old owner resumes with the writes it held and the intents NATS handed it while it was stopped.
      old.signal('SIGCONT');
      await w.ackedMore(20, 20_000, 'stakes after the old owner resumed');
      await sleep(1_000);
      await w.stop();

      const late = old.output.slice(oldFrom);
      const refusedByPostgres = (late.match(/stale epoch|CP_ERR_CHANNEL_STALE_EPOCH/g) ?? []).length;
      const f = await checkRun(store!, channel, w).catch((err: Error) => {
        err.message += `\ngame retries: ${w.gameRetries.join('; ')}`;
        throw err;
      });
      // Acks of the stakes the paused shard had taken, late ones included (the SDK may have timed out and resent them meanwhile).
      const staleAcks = w.ackCodes.get('CP_ERR_CHANNEL_STALE_EPOCH') ?? 0;
      const summary = JSON.stringify({
        failoverMs,
        acked: f.acked,
        resent: f.resent,
        unknownInLedger: f.unknownInLedger,
        refused: Object.fromEntries(f.refused),
        refusedByPostgres,
        staleAcks,
      });
      assert.ok(refusedByPostgres > 0, `the resumed shard's late writes were refused by Postgres: ${summary}\n${late.slice(-3_000)}`);
      // Its refusals reach the viewers as CP_ERR_CHANNEL_STALE_EPOCH acks, unless the SDK timed out first: then the late
      // ack answers a request it gave up, and the stake was resent (the new owner answered it).
      assert.ok(
        staleAcks > 0 || f.resent > 0,
        `stakes the paused shard had taken were refused by Postgres (their acks say so) or resent: ${summary}`,
      );
      assert.match(late, /dropping (it|channel)/, 'the old owner stopped serving the channel');
      assert.ok(old.running, 'the old owner lives on (it only dropped the channel)');
      const row = (await store!.channels.get(channel))!;
      assert.deepEqual([row.owner, row.epoch >= after.epoch], [after.owner, true], 'the new owner keeps it');
      // No fork: every event logged at the old epoch is below every one logged at a later epoch.
      const { rows } = await store!.db.query<{ epoch: string; lo: string; hi: string }>(
        'SELECT epoch, min(event_id) AS lo, max(event_id) AS hi FROM channel_events WHERE channel_id = $1 GROUP BY epoch ORDER BY epoch',
        [channel],
      );
      for (let i = 1; i < rows.length; i++)
        assert.ok(Number(rows[i]!.lo) > Number(rows[i - 1]!.hi), `event log epochs do not overlap: ${JSON.stringify(rows)}`);
      assert.ok(
        [...f.roundStates.values()].includes('cancelled'),
        `the paused owner's open round was refunded: ${JSON.stringify([...f.roundStates])}`,
      );
      console.log(`fencing: ${summary}; game retries: ${w.gameRetries.length}`);
    } finally {
      await w.stop().catch(() => undefined);
    }
  });
});
