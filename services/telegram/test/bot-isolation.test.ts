// @services
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessBus, subjects } from '@crowdplay/bus';
import { defaultConfig } from '@crowdplay/config';
import { renderQueueKeys, sendqKeys } from '@crowdplay/sendq';
import { TelegramStubs, type CallRecord } from '@crowdplay/telegram/testing';
import { createTelemetry } from '@crowdplay/telemetry';
import { deleteRedisKeys, uniqueName } from '@crowdplay/testing';
import { startBotRuntime, tenantBotPrefixes, type TelegramPart } from '../src/index.ts';

const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const telemetry = createTelemetry({ service: 'bot-isolation-test', level: 'silent', refusalLogIntervalMs: 60_000 });
const A = { token: '111111111:tokenOfBotAaaaaaaaaaaaaaaaaaaaaaaaaa', username: 'acme_bot' };
const B = { token: '222222222:tokenOfBotBbbbbbbbbbbbbbbbbbbbbbbbbb', username: 'globex_bot' };
const RATE = 40;
const MESSAGES = 220;
const PAUSE_S = 2;
/** The chat whose send answers 429 to bot A: its 60th message. */
const FAULT_CHAT = 1_000 + 60;

/** Calls answered ok within [from, to), per second. */
function rate(calls: CallRecord[], from: number, to: number): number {
  return calls.filter((c) => c.outcome === 'ok' && c.atMs >= from && c.atMs < to).length / ((to - from) / 1_000);
}

async function isolation(redisUrl: string): Promise<void> {
  const stubs = new TelegramStubs([A, B], { limits: false });
  await stubs.listen();
  const base = uniqueName('t_bots');
  const config = defaultConfig({
    telegram: { apiRoot: stubs.url, botRatePerS: RATE, sendPrefix: `${base}:sendq` },
    board: { enabled: false, renderPrefix: `${base}:render` },
    redis: { url: redisUrl },
  });
  const deps = {
    config,
    bus: new InProcessBus(),
    subjects: subjects(base),
    telemetry,
    ensureChannel: async () => undefined,
    moveChannel: async () => ({ outcome: 'none' as const, absorbed: null }),
  };
  const parts: TelegramPart[] = [];
  try {
    for (const [bot, tenant] of [
      [A, 'acme'],
      [B, 'globex'],
    ] as const) {
      const botId = Number(bot.token.split(':')[0]);
      parts.push(await startBotRuntime(deps, { botId, tenantId: tenant, token: bot.token, webhookSecret: 's', username: bot.username }));
    }
    // A's 60th message is answered 429 retry_after 2: A pauses, B must not.
    stubs.of(A.token).inject({ kind: '429', retryAfterS: PAUSE_S, chatId: FAULT_CHAT, method: 'sendMessage' });
    const sends = parts.map((p) =>
      Promise.allSettled(Array.from({ length: MESSAGES }, (_, i) => p.client.api.sendMessage(1_000 + i, `message ${i}`))),
    );
    const results = await Promise.all(sends);
    for (const r of results) assert.equal(r.filter((x) => x.status === 'rejected').length, 0, 'every message is delivered in the end');
    const callsA = stubs.of(A.token).calls();
    const callsB = stubs.of(B.token).calls();
    const the429 = callsA.find((c) => c.outcome === '429');
    assert.ok(the429, 'bot A was answered 429');
    const t = the429.atMs;
    const pauseMs = PAUSE_S * 1_000;
    // A sends nothing while its pause lasts (a call in flight at the 429 may still be answered just after it).
    assert.equal(
      callsA.filter((c) => c.outcome === 'ok' && c.atMs > t + 300 && c.atMs < t + pauseMs - 50).length,
      0,
      'bot A is paused for retry_after',
    );
    const before = rate(callsB, t - 1_000, t);
    const during = rate(callsB, t, t + pauseMs);
    // B keeps its own pace through A's pause: a shared bucket would stop it (0/s) for the whole pause. The bounds
    // are loose so that a loaded machine (which slows both windows alike) does not fail it.
    assert.ok(during >= RATE * 0.25, `bot B sent ${during}/s during bot A's pause (its rate: ${RATE}/s)`);
    assert.ok(during >= before * 0.5, `bot B: ${before}/s before, ${during}/s during bot A's pause`);
    assert.equal(stubs.of(B.token).stats().rejected429, 0);
    // Nothing of one bot reached the other's Bot API.
    assert.equal(callsA.length, MESSAGES + 1);
    assert.equal(callsB.length, MESSAGES);
  } finally {
    for (const p of parts) await p.close();
    await stubs.close();
    if (redisUrl) {
      for (const id of [111111111, 222222222]) {
        const p = tenantBotPrefixes(config, id);
        await deleteRedisKeys(sendqKeys(p.sendq).base, redisUrl);
        await deleteRedisKeys(renderQueueKeys(p.render).base, redisUrl);
        await deleteRedisKeys(`{${p.sendq}:`, redisUrl);
      }
    }
  }
}

test('tenant bots - each bot its own bucket (in process): a 429 pauses its bot and leaves the other at its rate', () => isolation(''));

test('tenant bots - each bot its own bucket (Redis, shared across processes): a 429 pauses its bot and leaves the other at its rate', () =>
  isolation(REDIS_URL));
