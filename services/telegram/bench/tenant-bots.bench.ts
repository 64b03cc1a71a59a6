/**
 * `npm run bench -- tenant-bots [--json FILE] [--pause-s S] [--messages N]`: two tenants, each with its own bot
 * (a bot runtime each: its own send queue and token bucket), against the Bot API stubs (one per bot behind one
 * API root, with Telegram's ceilings). Both bots send a backlog of replies to distinct private chats at the
 * default TELEGRAM_BOT_RATE_PER_S; bot A's call to one chat is answered 429 retry_after S (the stub's
 * scripted fault). Figures per bot, from the stubs' call records: calls answered ok per second in the 2 s
 * before the 429, during A's pause (retry_after), and in the 2 s after it. Run twice: in process (no REDIS_URL)
 * and on Redis (the cluster's shared bucket), under a unique prefix deleted afterwards.
 */
import { writeFileSync } from 'node:fs';
import { InProcessBus, subjects } from '@crowdplay/bus';
import { defaultConfig } from '@crowdplay/config';
import { renderQueueKeys, sendqKeys } from '@crowdplay/sendq';
import { TelegramStubs, type CallRecord } from '@crowdplay/telegram/testing';
import { createTelemetry } from '@crowdplay/telemetry';
import { deleteRedisKeys, serviceUrls, uniqueName } from '@crowdplay/testing';
import { startBotRuntime, tenantBotPrefixes, type TelegramPart } from '../src/index.ts';

const BOTS = [
  { token: '111111111:benchTokenOfBotAaaaaaaaaaaaaaaaaaaaaa', username: 'acme_bot', tenant: 'acme' },
  { token: '222222222:benchTokenOfBotBbbbbbbbbbbbbbbbbbbbbb', username: 'globex_bot', tenant: 'globex' },
] as const;

interface BotFigures {
  tenant: string;
  /** Calls answered ok per second: 2 s before the 429, during the pause, 2 s after it. */
  beforePerS: number;
  duringPerS: number;
  afterPerS: number;
  calls: number;
  answered429: number;
}

interface Run {
  adapter: 'memory' | 'redis';
  botRatePerS: number;
  pauseS: number;
  messagesPerBot: number;
  bots: BotFigures[];
}

function perS(calls: CallRecord[], from: number, to: number): number {
  const n = calls.filter((c) => c.outcome === 'ok' && c.atMs >= from && c.atMs < to).length;
  return Math.round((n / ((to - from) / 1_000)) * 10) / 10;
}

async function run(adapter: 'memory' | 'redis', pauseS: number, messages: number): Promise<Run> {
  const stubs = new TelegramStubs(BOTS.map((b) => ({ token: b.token, username: b.username })));
  await stubs.listen();
  const base = uniqueName('bench_bots');
  const redisUrl = adapter === 'redis' ? (await serviceUrls()).redisUrl : '';
  const config = defaultConfig({
    telegram: { apiRoot: stubs.url, sendPrefix: `${base}:sendq` },
    board: { enabled: false, renderPrefix: `${base}:render` },
    redis: { url: redisUrl },
  });
  const telemetry = createTelemetry({ service: 'bench-tenant-bots', level: 'silent', refusalLogIntervalMs: 60_000 });
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
    for (const b of BOTS)
      parts.push(
        await startBotRuntime(deps, {
          botId: Number(b.token.split(':')[0]),
          tenantId: b.tenant,
          token: b.token,
          webhookSecret: 's',
          username: b.username,
        }),
      );
    // A's call to its (rate × 3)th chat — about 3 s in — is answered 429.
    const faultChat = 10_000 + config.telegram.botRatePerS * 3;
    stubs.of(BOTS[0].token).inject({ kind: '429', retryAfterS: pauseS, chatId: faultChat, method: 'sendMessage' });
    await Promise.all(
      parts.map((p) => Promise.allSettled(Array.from({ length: messages }, (_, i) => p.client.api.sendMessage(10_000 + i, `reply ${i}`)))),
    );
    const the429 = stubs
      .of(BOTS[0].token)
      .calls()
      .find((c) => c.outcome === '429');
    if (!the429) throw new Error('bot A was never answered 429: raise --messages');
    const t = the429.atMs;
    const end = t + pauseS * 1_000;
    return {
      adapter,
      botRatePerS: config.telegram.botRatePerS,
      pauseS,
      messagesPerBot: messages,
      bots: BOTS.map((b) => {
        const calls = stubs.of(b.token).calls();
        return {
          tenant: b.tenant,
          beforePerS: perS(calls, t - 2_000, t),
          duringPerS: perS(calls, t, end),
          afterPerS: perS(calls, end, end + 2_000),
          calls: calls.length,
          answered429: calls.filter((c) => c.outcome === '429').length,
        };
      }),
    };
  } finally {
    for (const p of parts) await p.close();
    await stubs.close();
    await telemetry.close();
    if (redisUrl) {
      for (const b of BOTS) {
        const p = tenantBotPrefixes(config, Number(b.token.split(':')[0]));
        await deleteRedisKeys(sendqKeys(p.sendq).base, redisUrl);
        await deleteRedisKeys(`{${p.sendq}:`, redisUrl);
        await deleteRedisKeys(renderQueueKeys(p.render).base, redisUrl);
      }
    }
  }
}

/** Prints the figures; `--json FILE` also writes them. @returns the exit code */
export async function main(args: readonly string[]): Promise<number> {
  const opt = (name: string, d: number): number => {
    const i = args.indexOf(name);
    return i >= 0 && args[i + 1] ? Number(args[i + 1]) : d;
  };
  const pauseS = opt('--pause-s', 3);
  const messages = opt('--messages', 250);
  const runs: Run[] = [];
  for (const adapter of ['memory', 'redis'] as const) runs.push(await run(adapter, pauseS, messages));
  console.log(
    `tenant-bots bench: 2 tenants, 2 bots, ${messages} replies each to distinct chats; bot A answered 429 retry_after ${pauseS} s`,
  );
  for (const r of runs) {
    console.log(`  ${r.adapter} (bucket ${r.botRatePerS}/s per bot)`);
    for (const b of r.bots)
      console.log(
        `    ${b.tenant.padEnd(7)} before ${b.beforePerS}/s, during A's pause ${b.duringPerS}/s, after ${b.afterPerS}/s (${b.calls} calls, ${b.answered429} answered 429)`,
      );
  }
  const jsonAt = args.indexOf('--json');
  if (jsonAt >= 0 && args[jsonAt + 1]) writeFileSync(args[jsonAt + 1]!, JSON.stringify({ runs }, null, 2));
  return 0;
}
