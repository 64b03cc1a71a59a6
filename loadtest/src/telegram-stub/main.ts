/**
 * The Telegram Bot API stub, standalone:
 *
 *   npx tsx loadtest/src/telegram-stub/main.ts --port 8081 [--host 127.0.0.1] [--token T]…
 *       [--bot-per-s 30] [--group-per-min 20] [--chat-per-s 1] [--tolerance-ms 0] [--no-limits] [--keep-uploads]
 *       [--bot-username crowdplay_stub_bot]
 *
 * Point the product at it with TELEGRAM_API_ROOT=http://127.0.0.1:8081.
 * Control API: GET /__stub/stats, /__stub/boards, /__stub/calls?since=SEQ,
 * /__stub/chats/<id>, /__stub/bot (getMe, webhook, commands, menu buttons); POST /__stub/faults
 * (a FaultRule or an array), /__stub/faults/clear, /__stub/reset,
 * /__stub/chats/<id>/{kick,forget,readd,migrate?to=ID}, /__stub/webhook/delivery
 * ({pendingUpdateCount, lastErrorMessage}: what getWebhookInfo reports).
 * Stops on SIGINT/SIGTERM, printing the final stats to stderr.
 */
import { parseArgs } from 'node:util';
import { TELEGRAM_LIMITS, TelegramStub } from '@crowdplay/telegram/testing';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '8081' },
    host: { type: 'string', default: '127.0.0.1' },
    token: { type: 'string', multiple: true },
    'bot-per-s': { type: 'string' },
    'group-per-min': { type: 'string' },
    'chat-per-s': { type: 'string' },
    'tolerance-ms': { type: 'string' },
    'no-limits': { type: 'boolean', default: false },
    'keep-uploads': { type: 'boolean', default: false },
    'bot-username': { type: 'string' },
  },
});

function positive(name: string, v: string | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) {
    console.error(`--${name} must be a positive integer, got ${v}`);
    process.exit(2);
  }
  return n;
}

const stub = new TelegramStub({
  ...(values.token ? { tokens: values.token } : {}),
  keepUploads: values['keep-uploads'],
  ...(values['bot-username'] ? { bot: { username: values['bot-username'] } } : {}),
  limits: values['no-limits']
    ? false
    : {
        bot: { limit: positive('bot-per-s', values['bot-per-s'], TELEGRAM_LIMITS.bot.limit), windowMs: 1_000 },
        group: { limit: positive('group-per-min', values['group-per-min'], TELEGRAM_LIMITS.group.limit), windowMs: 60_000 },
        chat: { limit: positive('chat-per-s', values['chat-per-s'], TELEGRAM_LIMITS.chat.limit), windowMs: 1_000 },
        toleranceMs: values['tolerance-ms'] === undefined ? 0 : positive('tolerance-ms', values['tolerance-ms'], 0),
      },
});
const url = await stub.listen(positive('port', values.port, 8081), values.host);
console.log(`telegram stub listening on ${url} (TELEGRAM_API_ROOT=${url})`);

const stop = (): void => {
  console.error(JSON.stringify(stub.stats()));
  void stub.close().then(() => process.exit(0));
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
