import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Fastify, { type FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { updateKeys } from '@crowdplay/sendq';
import { RedisUpdates, updateChatKey } from '@crowdplay/telegram';
import { createTelemetry, type Telemetry } from '@crowdplay/telemetry';
import { serviceUrls, uniqueName, until } from '@crowdplay/testing';
import { registerTelegramWebhook, TELEGRAM_WEBHOOK_PATH, type TelegramUpdate } from '../src/telegram-webhook.ts';

/** One gateway's webhook on the shared Redis log. */
interface Gw {
  name: string;
  app: FastifyInstance;
  hook: ReturnType<typeof registerTelegramWebhook>;
  shared: RedisUpdates;
  telemetry: Telemetry;
}

describe('telegram webhook, shared across gateways (Redis)', () => {
  let redis: Redis;
  let redisUrl: string;
  const prefix = uniqueName('tgu');
  const gws: Gw[] = [];
  /** Every update handled: which gateway, which update, when it started and ended. */
  const log: Array<{ gw: string; id: number; chat: string; start: number; end: number }> = [];
  /** Per update_id: a promise the handler waits for (held updates). */
  const held = new Map<number, Promise<void>>();
  let clock = 0;

  const open = async (name: string, leaseMs = 10_000): Promise<Gw> => {
    const app = Fastify();
    const telemetry = createTelemetry({ service: name, level: 'silent', refusalLogIntervalMs: 60_000 });
    const shared = await RedisUpdates.open({ redisUrl, prefix, dedupeTtlMs: 60_000, leaseMs });
    const hook = registerTelegramWebhook(app, {
      secret: 's3cret',
      telemetry,
      shared,
      handle: async (u: TelegramUpdate) => {
        const start = ++clock;
        await held.get(u.update_id);
        log.push({ gw: name, id: u.update_id, chat: updateChatKey(u), start, end: ++clock });
      },
    });
    await app.ready();
    const gw = { name, app, hook, shared, telemetry };
    gws.push(gw);
    return gw;
  };

  const post = (gw: Gw, body: unknown) =>
    gw.app.inject({
      method: 'POST',
      url: TELEGRAM_WEBHOOK_PATH,
      headers: { 'x-telegram-bot-api-secret-token': 's3cret' },
      payload: body as object,
    });
  const msg = (id: number, chat: number, text = 'hi') => ({ update_id: id, message: { message_id: id, chat: { id: chat }, text } });
  const idle = () => Promise.all(gws.map((g) => g.hook.idle()));

  before(async () => {
    redisUrl = (await serviceUrls()).redisUrl;
    redis = new Redis(redisUrl);
  });
  after(async () => {
    for (const g of gws) {
      await g.hook.drain();
      await g.app.close();
      await g.shared.close();
      await g.telemetry.close();
    }
    const keys = await redis.keys(`${updateKeys(prefix).base}*`);
    if (keys.length) await redis.del(...keys);
    await redis.quit();
  });

  it('the same update delivered to two gateways (and again to each) is handled once; dedupe hits are counted', async () => {
    const a = await open('A');
    const b = await open('B');
    for (const gw of [a, b, a, b]) {
      const r = await post(gw, msg(1001, -500));
      assert.equal(r.statusCode, 200);
      assert.equal(r.body, '');
    }
    await idle();
    assert.deepEqual(
      log.filter((l) => l.id === 1001).map((l) => l.id),
      [1001],
    );
    // A's second delivery is a local LRU hit; B's first is a shared hit (it never saw the id), its second a local one.
    const ta = await a.telemetry.metrics.prometheusText();
    const tb = await b.telemetry.metrics.prometheusText();
    assert.match(tb, /crowdplay_telegram_updates_total\{outcome="duplicate",scope="shared"[^}]*\} 1/);
    assert.match(ta, /crowdplay_telegram_updates_total\{outcome="duplicate",scope="local"[^}]*\} 1/);
    assert.match(ta, /crowdplay_telegram_updates_total\{outcome="handled"[^}]*\} 1/);
  });

  it("one chat's updates spread over two gateways are handled in arrival order, one at a time, each once", async () => {
    log.length = 0;
    const [a, b] = gws as [Gw, Gw];
    let release!: () => void;
    held.set(2001, new Promise<void>((r) => (release = r))); // the first one is held: the later ones arrive (at both gateways) while it runs
    const order: Array<[Gw, number]> = [
      [a, 2001],
      [b, 2002],
      [a, 2003],
      [b, 2004],
      [b, 2005],
      [a, 2006],
    ];
    for (const [gw, id] of order) {
      assert.equal((await post(gw, msg(id, -600))).statusCode, 200);
      await post(gw === a ? b : a, msg(id, -600)); // and a re-delivery to the other gateway
    }
    // Another chat meanwhile is not held up behind the held one.
    assert.equal((await post(b, msg(2100, -700))).statusCode, 200);
    await until('the other chat handled', () => log.some((l) => l.id === 2100), { timeoutMs: 2_000 });
    assert.deepEqual(
      log.map((l) => l.id),
      [2100],
      'only the other chat ran while the first update of -600 was held',
    );
    release();
    await idle();
    const chat = log.filter((l) => l.chat === '-600');
    assert.deepEqual(
      chat.map((l) => l.id),
      order.map(([, id]) => id),
    );
    for (let i = 1; i < chat.length; i++) assert.ok(chat[i]!.start > chat[i - 1]!.end, 'never two updates of one chat at once');
    // The lease is given up once the chat's list is empty.
    assert.equal(await redis.exists(updateKeys(prefix).lock('-600')), 0);
  });

  it("a gateway that died holding a chat's lease: its waiting updates are handled, in order, after the lease lapses", async () => {
    log.length = 0;
    const dead = await RedisUpdates.open({ redisUrl, prefix, dedupeTtlMs: 60_000, leaseMs: 300 });
    assert.equal(await dead.admit('-800', msg(3001, -800)), 'owner'); // admitted, never drained
    await dead.close();
    const [a] = gws as [Gw];
    await post(a, msg(3002, -800));
    await idle();
    assert.equal(log.length, 0, 'behind a live lease: waits');
    await until('the dead lease to lapse', async () => (await redis.exists(updateKeys(prefix).lock('-800'))) === 0);
    await post(a, msg(3003, -800));
    await idle();
    assert.deepEqual(
      log.map((l) => l.id),
      [3001, 3002, 3003],
    );
  });

  it('both messages of a migration are ordered under the old chat; bad options are refused', async () => {
    assert.equal(updateChatKey({ update_id: 1, message: { message_id: 1, chat: { id: -100 }, migrate_from_chat_id: -5 } }), '-5');
    assert.equal(updateChatKey({ update_id: 1, message: { message_id: 1, chat: { id: -5 }, migrate_to_chat_id: -100 } }), '-5');
    assert.equal(updateChatKey({ update_id: 1, my_chat_member: { chat: { id: -9 } } }), '-9');
    assert.equal(updateChatKey({ update_id: 1, callback_query: { message: { chat: { id: 7 } } } }), '7');
    assert.equal(updateChatKey({ update_id: 1, inline_query: {} }), 'bot');
    await assert.rejects(RedisUpdates.open({ redisUrl, prefix: 'bad prefix', dedupeTtlMs: 1, leaseMs: 1 }), RangeError);
    await assert.rejects(RedisUpdates.open({ redisUrl, prefix, dedupeTtlMs: 0, leaseMs: 1 }), RangeError);
    await assert.rejects(RedisUpdates.open({ redisUrl, prefix, dedupeTtlMs: 1, leaseMs: 1.5 }), RangeError);
  });
});
