/**
 * PostgreSQL restarted during a staking run: `crowdplay cluster` (the
 * bundle; one gateway, one shard, router and sequencer; the machine's NATS
 * and Redis) on a private PostgreSQL (test/servers.ts ownPostgres) while
 * viewers stake without pause in the game's pool rounds (test/cluster-run.ts).
 * Mid-run the database goes away, by a fast shutdown or by SIGKILL of every
 * server process (a crash: recovery at the next start), and comes back on
 * the same port and data directory. Meanwhile no stake is acked (an ack
 * follows its commit), and every stake and every game request is answered
 * with an ack or a retryable refusal, never CP_ERR_INTERNAL; afterwards the pools reconnect (stakes acked again within
 * a bound) and checkRun holds: every acked stake is in the ledger with its
 * points, no refused one is, every round settled and paid, `ledger verify`
 * ok, event ids rose strictly; and no process of the cluster died.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, type Cluster } from '@crowdplay/cli';
import { openStore, type Store } from '@crowdplay/store';
import { serviceUrls, uniqueName, type ServiceUrls } from '@crowdplay/testing';
import { builtProduct, clusterTestEnv } from '../helpers.ts';
import { checkRun, sleep, startWorkload, type Workload } from '../cluster-run.ts';
import { ownPostgres, type OwnPostgres } from '../servers.ts';

const CHANNEL = 'stage';

/** Stakes and game requests sent during the outage this long at most before the database is started again, ms. */
const MAX_OUTAGE_MS = 15_000;

/** After the database accepts connections again, the shard acks stakes again within this, ms. */
const RECOVERY_MS = 20_000;

/**
 * Refusals a client may get for a request made while the database is away: each says "try again" (the database,
 * the ledger or the channel unavailable; the viewer's queue in the round full of stakes waiting for the commit).
 */
const RETRYABLE_OUTAGE_CODES = new Set([
  'CP_ERR_STORE_UNAVAILABLE',
  'CP_ERR_LEDGER_UNAVAILABLE',
  'CP_ERR_CHANNEL_UNAVAILABLE',
  'CP_ERR_ROUND_VIEWER_BUSY',
]);

/**
 * A stake's code once the database is back: CP_ERR_ROUND_CLOSED when the game had settled the stake's round by the
 * time the stake (resent after its SDK timeout) was handled. A final answer, not an outage symptom.
 */
const AFTER_OUTAGE_CODES = new Set(['CP_ERR_ROUND_CLOSED']);

/**
 * The viewer's own pace: while every stake is refused as retryable, the SDK retries each one with backoff, and
 * with a new stake every 200 ms the retries and the new stakes together pass INTENT_RATE_PER_S; the gateway
 * refuses the excess CP_ERR_INTENT_RATE_LIMITED (nothing taken; the ledger checks below hold it to that).
 */
const CLIENT_PACE_CODES = new Set(['CP_ERR_INTENT_RATE_LIMITED']);

/** The refusal code of a stake's answer ('ok' for an ack, the client error's code or message otherwise). */
function answerCode(a: Workload['stakes'][number]['answer']): string {
  if (typeof a === 'object') return a.ok ? 'ok' : (a.code ?? '?');
  return String(a);
}

describe('PostgreSQL restarts during a staking run: no acked stake lost, retryable refusals meanwhile', () => {
  let urls: ServiceUrls;
  let main = '';
  let pg: OwnPostgres | undefined;

  before(async () => {
    urls = await serviceUrls();
    main = await builtProduct();
    pg = await ownPostgres();
  });
  after(async () => {
    await pg?.close();
  });

  /**
   * Starts a cluster on the private PostgreSQL (its own schema), the workload on CHANNEL; `outage` takes the
   * database away, then this waits until stakes were sent and a game request was refused during the outage, starts
   * the database again on its port and data directory, checks the recovery and the run.
   */
  async function acrossOutage(outage: (pg: OwnPostgres) => Promise<void>): Promise<void> {
    const server = pg!;
    const schema = uniqueName('cpt');
    const lines: string[] = [];
    let cluster: Cluster | undefined;
    let store: Store | undefined;
    let w: Workload | undefined;
    try {
      cluster = await startCluster({
        gateways: 1,
        shards: 1,
        env: clusterTestEnv({ ...urls, databaseUrl: server.url }, { databaseUrl: server.url, schema, drop: async () => undefined }, 'pgr', {
          SHARD_HEARTBEAT_MS: '250',
          ROUTER_CHECK_MS: '200',
          ROUTER_REBALANCE_MOVES_PER_S: '0',
          // Small blocks: the shard leases ids every few seconds, so it must lease during and after the outage.
          SEQUENCER_BLOCK_SIZE: '20',
        }),
        entry: { execArgv: [], script: main },
        out: (l) => void lines.push(l),
      });
      // A process that dies (a shard on an unhandled database error) fails the case at once, whatever it waits for.
      const died = cluster.failed.then((e) => {
        throw new Error(`${e.name} exited (code ${e.code}, signal ${e.signal}) during the run`);
      });
      died.catch(() => undefined);
      const unlessDied = <T>(p: Promise<T>): Promise<T> => Promise.race([p, died]);
      store = await openStore({ url: server.url, schema, poolMax: 2, pgliteDir: 'memory', migrate: false });
      await store.tenants.ensure('acme', 'Acme');
      const created = await store.tenants.rotateKey('acme');
      w = await startWorkload({
        gatewayUrl: cluster.gatewayUrls[0]!,
        channel: CHANNEL,
        apiKey: created.apiKey,
        tenant: 'acme',
        secret: created.tenant.signingSecret,
        viewers: ['ann', 'bob', 'cat', 'dan'],
        fund: 100_000,
        roundEveryMs: 1_500,
      });
      await w.ackedMore(15, 15_000, 'stakes before the outage');

      const firstDuring = w.stakes.length;
      const retriesBefore = w.gameRetries.length;
      await outage(server);
      const downFrom = w.stakes.length; // stakes from here on were sent with the server gone
      const ackedWhileDown = (): string[] =>
        w!.stakes
          .slice(downFrom)
          .filter((s) => typeof s.answer === 'object' && s.answer.ok)
          .map((s) => s.key);
      // Down until the run has felt it: a game request (the next round's open) refused, and a stake sent into the outage
      // unanswered past the viewers' SDK ack timeout (so sent again with its key while the first send waits), or acked.
      const felt = (): boolean =>
        w!.gameRetries.length > retriesBefore && (w!.stakes.slice(firstDuring).some((s) => s.timeouts > 0) || ackedWhileDown().length > 0);
      const deadline = Date.now() + MAX_OUTAGE_MS;
      while (!felt()) {
        const gone: string[] = cluster.processes.filter((p) => !p.running).map((p) => p.name);
        if (gone.length > 0) assert.fail(`${gone.join(', ')} exited during the outage`);
        if (Date.now() > deadline)
          assert.fail(
            `outage: ${w.stakes.length - firstDuring} stakes sent, ${w.gameRetries.length - retriesBefore} game refusals, none resent`,
          );
        await sleep(50);
      }
      // An ack is sent after its commit: with the server gone there is none.
      assert.deepEqual(ackedWhileDown(), [], 'no stake sent while the server was gone was acked before it came back');
      const lastDuring = w.stakes.length;
      const retriesDuring = w.gameRetries.slice(retriesBefore);
      await server.start();
      const upAt = Date.now();
      await unlessDied(w.ackedMore(15, RECOVERY_MS, 'stakes after the database came back'));
      const recoveredMs = Date.now() - upAt;
      await unlessDied(w.stop());

      // While the database was away: game requests refused as retryable (the workload retries them until they pass).
      for (const r of retriesDuring) {
        const code = r.slice(r.lastIndexOf(': ') + 2);
        assert.ok(RETRYABLE_OUTAGE_CODES.has(code), `game request during the outage refused as retryable: ${r}`);
      }
      // Stakes sent while it was away: acked (held until the commit went through) or refused as retryable.
      const during = w.stakes.slice(firstDuring, lastDuring);
      const codes = new Map<string, number>();
      for (const s of during) codes.set(answerCode(s.answer), (codes.get(answerCode(s.answer)) ?? 0) + 1);
      for (const code of codes.keys())
        assert.ok(
          code === 'ok' || RETRYABLE_OUTAGE_CODES.has(code) || AFTER_OUTAGE_CODES.has(code) || CLIENT_PACE_CODES.has(code),
          `stakes during the outage: ${JSON.stringify(Object.fromEntries(codes))}`,
        );
      assert.equal(w.ackCodes.get('CP_ERR_INTERNAL'), undefined, 'no stake answered CP_ERR_INTERNAL');
      assert.deepEqual(
        cluster.processes.filter((p) => !p.running).map((p) => p.name),
        [],
        'every process of the cluster outlived the outage',
      );
      const f = await unlessDied(checkRun(store, CHANNEL, w));
      assert.ok(f.acked > 30, `stakes acked over the run: ${f.acked}`);
      console.log(
        JSON.stringify({
          recoveredMs,
          duringOutage: Object.fromEntries(codes),
          gameRefusals: retriesDuring.length,
          acked: f.acked,
          resent: f.resent,
          unknownInLedger: f.unknownInLedger,
          rounds: Object.fromEntries(f.roundStates),
        }),
      );
    } catch (err) {
      if (err instanceof Error) err.message += `\ngame retries: ${w?.gameRetries.slice(0, 20).join('; ')}\n${lines.slice(-30).join('\n')}`;
      throw err;
    } finally {
      await w?.stop().catch(() => undefined);
      await cluster?.stop();
      // The server is the suite's own (removed by after()): running again for the next case, without this case's schema.
      await server.start();
      await store?.db.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
      await store?.close();
    }
  }

  it('fast shutdown and start: stakes held or refused as retryable meanwhile, every acked stake in the ledger, verify ok', async () => {
    await acrossOutage((server) => server.stop());
  });

  it('SIGKILL (crash recovery at the start): stakes held or refused as retryable meanwhile, every acked stake in the ledger, verify ok', async () => {
    await acrossOutage((server) => server.kill());
  });
});
