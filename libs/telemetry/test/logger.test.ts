import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLogger, redactBotTokens } from '../src/index.ts';

const TOKEN = '515151515:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw';

test('logger - a Bot API token in a message, an error, its cause or a field is written redacted', () => {
  const lines: string[] = [];
  const logger = createLogger({ level: 'info', service: 'logger-test', destination: { write: (s: string) => void lines.push(s) } });
  const cause = new Error(`request to https://api.telegram.org/bot${TOKEN}/sendMessage failed, reason: ECONNRESET`);
  logger.error(
    { err: new Error('Network request for sendMessage failed', { cause }), url: `/file/bot${TOKEN}/photo.jpg` },
    `token ${TOKEN}`,
  );
  assert.equal(lines.length, 1);
  assert.ok(!lines[0]!.includes('AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw'), lines[0]);
  assert.match(lines[0]!, /515151515:<redacted>/);
  assert.equal(redactBotTokens('chat -1001234567890 and 12:30 stay'), 'chat -1001234567890 and 12:30 stay');
});
