/**
 * Restarts during a run: `crowdplay cluster` (the bundle; one
 * gateway, two shards; PostgreSQL; own schema, subject and key prefixes)
 * while viewers act and stake without pause in the game's pool rounds
 * (test/cluster-run.ts). Each case restarts one thing mid-run: the
 * sequencer process, the router process, NATS (a private `nats-server -js`
 * the cluster points at), Redis (a private `redis-server`; Telegram is on so
 * the gateway's webhook de-duplication, chat leases, board budget and
 * BullMQ send queue live there). After each: every stake was answered,
 * every acked stake is in the ledger exactly once (settled or refunded),
 * `ledger verify` is ok, the game's event ids rose strictly (never reused)
 * and stay under the sequencer's high-water mark, and the run went on
 * after the restart.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, type Cluster } from '@crowdplay/cli';
import { openStore, type Store } from '@crowdplay/store';
import { serviceUrls, testSchema, type ServiceUrls } from '@crowdplay/testing';
import { TelegramStub } from '@crowdplay/telegram/testing';
import { builtProduct, clusterTestEnv, spawnService, type ServiceProcess } from '../helpers.ts';
import { checkRun, sleep, startWorkload, type Workload } from '../cluster-run.ts';
import { ownNats, ownRedis, type OwnServer } from '../servers.ts';

const CHANNEL = 'stage';
const HOOK_SECRET = 'hook-secret-for-restarts';

interface Run {
  cluster: Cluster;
  store: Store;
  w: Workload;
  lines: string[];
}

describe('restarts during a staking run: no acked stake lost, no event id reused', () => {
  let urls: ServiceUrls;
  let main = '';

  before(async () => {
    urls = await serviceUrls();
    main = await builtProduct();
  });

  /**
   * Starts a cluster with `env` added, the workload on CHANNEL, runs `body`
   * mid-run, stops the workload and checks the run (checkRun); everything
   * is stopped and dropped afterwards, also on failure.
   */
  async function withRun(env: Record<string, string>, body: (r: Run) => Promise<void>, onTenant?: (tenant: string) => void): Promise<void> {
    const schema = await testSchema();
    const lines: string[] = [];
    let cluster: Cluster | undefined;
    let store: Store | undefined;
    let w: Workload | undefined;
    try {
      cluster = await startCluster({
        gateways: 1,
        shards: 2,
        env: clusterTestEnv(urls, schema, 'rs', {
          SHARD_HEARTBEAT_MS: '250',
          ROUTER_CHECK_MS: '200',
          ROUTER_REBALANCE_MOVES_PER_S: '0',
          SNAPSHOT_INTERVAL_MS: '500',
          // Small blocks: the shards lease ids every few seconds, so they must lease during and after the restart.
          SEQUENCER_BLOCK_SIZE: '20',
          ...env,
        }),
        entry: { execArgv: [], script: main },
        out: (l) => void lines.push(l),
      });
      store = await openStore({ url: urls.databaseUrl, schema: schema.schema, poolMax: 2, pgliteDir: 'memory', migrate: false });
      // With Telegram on, the gateway has created the bot's tenant (TELEGRAM_TENANT_ID) already: take it over with a new key.
      await store.tenants.ensure('acme', 'Acme');
      const created = await store.tenants.rotateKey('acme');
      onTenant?.('acme');
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
      await w.ackedMore(15, 15_000, 'stakes before the restart');
      await body({ cluster, store, w, lines });
      await w.stop();
      const f = await checkRun(store, CHANNEL, w);
      console.log(
        `${JSON.stringify({ acked: f.acked, resent: f.resent, unknownInLedger: f.unknownInLedger, refused: Object.fromEntries(f.refused), rounds: Object.fromEntries(f.roundStates), ids: w.eventIds.length })}`,
      );
    } catch (err) {
      if (err instanceof Error) err.message += `\ngame retries: ${w?.gameRetries.join('; ')}\n${lines.slice(-30).join('\n')}`;
      throw err;
    } finally {
      await w?.stop().catch(() => undefined);
      await cluster?.stop();
      await store?.close();
      await schema.drop();
    }
  }

  /** Resolves once the game received a batch with an id above `id`. */
  async function batchAbove(w: Workload, id: number, ms: number, what: string): Promise<void> {
    const deadline = Date.now() + ms;
    while (!((w.eventIds.at(-1) ?? 0) > id)) {
      if (Date.now() > deadline) throw new Error(`${what}: no batch above event id ${id} within ${ms} ms (last ${w.eventIds.at(-1)})`);
      await sleep(50);
    }
  }

  it('sequencer restart: ids leased after it rise above every id before it; stakes go on', async () => {
    await withRun({}, async ({ cluster, store, w }) => {
      const seq = cluster.get('sequencer');
      await seq.stop();
      const mark = await store.sequencer.highWater();
      const lastBefore = w.eventIds.at(-1) ?? 0;
      assert.ok(lastBefore <= mark);
      await sleep(1_000); // shards ask for blocks while it is down (no responders)
      await seq.restart();
      // A batch numbered from a block the restarted sequencer leased: above the mark it had persisted.
      await batchAbove(w, mark, 20_000, 'after the sequencer restart');
      await w.ackedMore(15, 20_000, 'stakes after the sequencer restart');
      assert.ok((await store.sequencer.highWater()) > mark, 'the high-water mark rose from where it was');
    });
  });

  it('router restart: every assignment survives (owner and epoch), stakes go on', async () => {
    await withRun({}, async ({ cluster, store, w }) => {
      const before = (await store.channels.get(CHANNEL))!;
      assert.ok(before.owner);
      await cluster.get('router').restart();
      await w.ackedMore(15, 20_000, 'stakes after the router restart');
      await sleep(3_500); // longer than ROUTER_SHARD_TIMEOUT_MS: the restarted router heard the live owner, nothing moved
      const row = (await store.channels.get(CHANNEL))!;
      assert.deepEqual([row.owner, row.epoch], [before.owner, before.epoch], 'same owner at the same epoch');
      await w.ackedMore(5, 10_000, 'stakes later');
    });
  });

  describe('with a private nats-server', () => {
    let nats: OwnServer | undefined;
    before(async () => {
      nats = await ownNats();
    });
    after(async () => {
      await nats?.stop();
    });

    it('NATS restart: every process reconnects; stakes, batches and ids go on', async () => {
      await withRun({ NATS_URL: nats!.url }, async ({ w }) => {
        const lastBefore = w.eventIds.at(-1) ?? 0;
        await nats!.restart(500);
        await batchAbove(w, lastBefore, 20_000, 'after the NATS restart');
        await w.ackedMore(15, 25_000, 'stakes after the NATS restart');
      });
    });
  });

  describe('with a private redis-server (Telegram on: webhook de-duplication, chat leases, board budget, send queue)', () => {
    let redis: OwnServer | undefined;
    let stub: TelegramStub | undefined;
    let root = '';
    before(async () => {
      redis = await ownRedis();
      stub = new TelegramStub();
      root = await stub.listen();
    });
    after(async () => {
      await stub?.close();
      await redis?.stop();
    });

    it('Redis restart: the webhook and the bot work again afterwards; stakes go on untouched', async () => {
      const secret = HOOK_SECRET;
      await withRun(
        {
          REDIS_URL: redis!.url,
          TELEGRAM_BOT_TOKEN: '424242:TEST-token-for-restarts',
          TELEGRAM_WEBHOOK_SECRET: secret,
          TELEGRAM_API_ROOT: root,
          TELEGRAM_BOT_USERNAME: 'cp_test_bot',
          TELEGRAM_APP_NAME: 'play',
          TELEGRAM_TENANT_ID: 'acme',
          BOARDS_ENABLED: 'false',
        },
        async ({ cluster, w }) => {
          // With REDIS_URL the gateway only queues Bot API calls (BullMQ): a telegram-sender makes them.
          const procs: ServiceProcess[] = [];
          try {
            await spawnService(procs, 'telegram-sender', { ...cluster.env });
            await botAcrossRestart(cluster, w);
          } finally {
            for (const p of procs) {
              if (p.child.exitCode === null) p.child.kill('SIGTERM');
              await new Promise((r) => (p.child.exitCode !== null ? r(null) : p.child.once('exit', r)));
            }
          }
        },
      );
    });

    /** /start before the Redis restart is answered; after it the webhook admits again, the bot answers once, a re-delivery is dropped. */
    async function botAcrossRestart(cluster: Cluster, w: Workload): Promise<void> {
      const secret = HOOK_SECRET;
      const url = cluster.gatewayUrls[0]!;
      const start = (updateId: number, chat: number): Promise<Response> =>
        fetch(`${url}/v1/telegram/webhook`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-telegram-bot-api-secret-token': secret },
          body: JSON.stringify({
            update_id: updateId,
            message: {
              message_id: updateId,
              date: 1,
              chat: { id: chat, type: 'supergroup', title: 'Crew' },
              from: { id: 7, is_bot: false, first_name: 'Ann' },
              text: '/start@cp_test_bot',
            },
          }),
        });
      const replied = async (chat: number, ms: number, what: string): Promise<void> => {
        const deadline = Date.now() + ms;
        while (!stub!.messages(chat).some((m) => m.fromBot && m.kind === 'text')) {
          if (Date.now() > deadline) throw new Error(`${what}: the bot did not answer /start in chat ${chat} within ${ms} ms`);
          await sleep(50);
        }
      };
      assert.equal((await start(1, -1005550101)).status, 200);
      await replied(-1005550101, 15_000, 'before the Redis restart');
      await redis!.restart(500);
      await w.ackedMore(10, 20_000, 'stakes after the Redis restart');
      // The webhook answers 500 while Redis is unreachable (Telegram re-delivers): send again until admitted.
      const deadline = Date.now() + 20_000;
      let status = 0;
      while ((status = (await start(2, -1005550102)).status) !== 200) {
        if (Date.now() > deadline) assert.fail(`webhook still ${status} 20 s after the Redis restart`);
        await sleep(250);
      }
      await replied(-1005550102, 20_000, 'after the Redis restart');
      assert.equal((await start(2, -1005550102)).status, 200, 'a re-delivered update is accepted');
      await sleep(500);
      assert.equal(
        stub!.messages(-1005550102).filter((m) => m.fromBot && m.kind === 'text').length,
        1,
        'and handled once (de-duplication in the restarted Redis)',
      );
    }
  });
});
