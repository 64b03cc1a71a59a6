import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessBus, subjects } from '@crowdplay/bus';
import { defaultConfig } from '@crowdplay/config';
import { isCrowdplayError } from '@crowdplay/protocol';
import { createTelemetry } from '@crowdplay/telemetry';
import { BotRegistry, parseBotId, type BotSpec, type TelegramPart, type TenantBotSpec } from '../src/index.ts';

const telemetry = createTelemetry({ service: 'bot-registry-test', level: 'silent', refusalLogIntervalMs: 60_000 });

function harness(rows: Map<number, TenantBotSpec>) {
  let now = 0;
  const reads: number[] = [];
  const idReads: number[] = [];
  const started: BotSpec[] = [];
  const closed: BotSpec[] = [];
  let failReads = false;
  const registry = new BotRegistry({
    config: defaultConfig(),
    bus: new InProcessBus(),
    subjects: subjects('bot-registry-test'),
    telemetry,
    ensureChannel: async () => undefined,
    moveChannel: async () => ({ outcome: 'none', absorbed: null }),
    cacheMs: 1_000,
    now: () => now,
    read: async (id) => {
      reads.push(id);
      if (failReads) throw new Error('store down');
      return rows.get(id) ?? null;
    },
    readAll: async () => [...rows.values()],
    readIds: async () => {
      idReads.push(now);
      return new Set(rows.keys());
    },
    start: async (_deps, spec) => {
      started.push(spec);
      return { spec, close: async () => void closed.push(spec) } as unknown as TelegramPart;
    },
  });
  return {
    registry,
    reads,
    idReads,
    started,
    closed,
    advance: (ms: number) => void (now += ms),
    failReads: (v: boolean) => void (failReads = v),
  };
}

const spec = (botId: number, secret = 's1'): TenantBotSpec => ({
  botId,
  tenantId: 'acme',
  token: `${botId}:t`,
  webhookSecret: secret,
  username: 'b',
});

test('bot registry - a bot starts once on first use; an unknown one is refused CP_ERR_TELEGRAM_BOT_UNKNOWN and remembered', async () => {
  const h = harness(new Map([[7, spec(7)]]));
  const [a, b] = await Promise.all([h.registry.get(7), h.registry.get(7)]);
  assert.equal(a, b);
  assert.equal(h.started.length, 1);
  for (const id of [8, 9, 10, 8, 11]) await assert.rejects(h.registry.get(id), (e) => isCrowdplayError(e, 'CP_ERR_TELEGRAM_BOT_UNKNOWN'));
  assert.deepEqual(h.reads, [7], 'unknown bots cost no read of their own');
  assert.equal(h.idReads.length, 1, 'the id list is read once per TELEGRAM_BOTS_CACHE_MS, whatever the ids asked');
  assert.equal(h.registry.size, 1);
  assert.equal(parseBotId('123'), 123);
  for (const bad of ['0', '01', '-1', 'abc', '1'.repeat(17), '9007199254740993']) assert.equal(parseBotId(bad), null, bad);
});

test('bot registry - read again after the cache: a changed secret restarts the bot, a removed bot stops, a store outage keeps it', async () => {
  const rows = new Map([[7, spec(7)]]);
  const h = harness(rows);
  const first = await h.registry.get(7);
  h.advance(1_000);
  assert.equal(await h.registry.get(7), first, 'unchanged: the same runtime');
  rows.set(7, spec(7, 's2'));
  h.advance(1_000);
  const second = await h.registry.get(7);
  assert.notEqual(second, first);
  assert.equal(second.spec.webhookSecret, 's2');
  assert.deepEqual(h.closed, [first.spec]);
  h.failReads(true);
  h.advance(1_000);
  assert.equal(await h.registry.get(7), second, 'a failed read keeps the running bot');
  h.failReads(false);
  rows.delete(7);
  h.advance(1_000);
  await assert.rejects(h.registry.get(7), (e) => isCrowdplayError(e, 'CP_ERR_TELEGRAM_BOT_UNKNOWN'));
  assert.equal(h.closed.length, 2);
  assert.equal(h.registry.size, 0);
  await h.registry.close();
});
