import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GrammyError, HttpError } from 'grammy';
import { classifyApiError, classifyError, isIdempotent, retryAfterOf } from '../src/index.ts';

void test('Telegram answers, classified (Telegram wording)', () => {
  const cases: Array<[number, string, Record<string, number> | undefined, unknown]> = [
    [429, 'Too Many Requests: retry after 17', { retry_after: 17 }, { kind: 'rate_limited', retryAfterS: 17 }],
    [429, 'Too Many Requests: retry after 9', undefined, { kind: 'rate_limited', retryAfterS: 9 }],
    [
      400,
      'Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message',
      undefined,
      { kind: 'not_modified' },
    ],
    [
      400,
      'Bad Request: message to edit not found',
      undefined,
      { kind: 'edit_target_missing', description: 'Bad Request: message to edit not found' },
    ],
    [
      400,
      "Bad Request: message can't be edited",
      undefined,
      { kind: 'edit_target_missing', description: "Bad Request: message can't be edited" },
    ],
    [400, 'Bad Request: message to delete not found', undefined, { kind: 'delete_target_missing' }],
    [
      400,
      'Bad Request: group chat was upgraded to a supergroup chat',
      { migrate_to_chat_id: -1001234 },
      { kind: 'migrated', toChatId: -1001234 },
    ],
    [
      403,
      'Forbidden: bot was kicked from the group chat',
      undefined,
      { kind: 'chat_gone', reason: 'kicked', code: 403, description: 'Forbidden: bot was kicked from the group chat' },
    ],
    [
      403,
      'Forbidden: bot is not a member of the supergroup chat',
      undefined,
      { kind: 'chat_gone', reason: 'not_member', code: 403, description: 'Forbidden: bot is not a member of the supergroup chat' },
    ],
    [
      403,
      'Forbidden: bot was blocked by the user',
      undefined,
      { kind: 'chat_gone', reason: 'blocked', code: 403, description: 'Forbidden: bot was blocked by the user' },
    ],
    [
      400,
      'Bad Request: chat not found',
      undefined,
      { kind: 'chat_gone', reason: 'chat_not_found', code: 400, description: 'Bad Request: chat not found' },
    ],
    [
      400,
      'Bad Request: not enough rights to send photos to the chat',
      undefined,
      { kind: 'chat_gone', reason: 'no_rights', code: 400, description: 'Bad Request: not enough rights to send photos to the chat' },
    ],
    [500, 'Internal Server Error', undefined, { kind: 'server', code: 500, description: 'Internal Server Error' }],
    [
      400,
      'Bad Request: wrong file identifier/HTTP URL specified',
      undefined,
      { kind: 'rejected', code: 400, description: 'Bad Request: wrong file identifier/HTTP URL specified' },
    ],
  ];
  for (const [code, description, parameters, expected] of cases)
    assert.deepEqual(classifyApiError(code, description, parameters), expected, description);
  assert.equal(retryAfterOf('Too Many Requests', undefined), 1);
});

void test('grammY errors: GrammyError by its answer, HttpError by whether the request can have been applied', () => {
  const ge = new GrammyError(
    "Call to 'sendMessage' failed!",
    { ok: false, error_code: 429, description: 'Too Many Requests: retry after 3', parameters: { retry_after: 3 } },
    'sendMessage',
    {},
  );
  assert.deepEqual(classifyError(ge), { kind: 'rate_limited', retryAfterS: 3 });
  const refused = new HttpError(
    "Network request for 'sendPhoto' failed!",
    Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }),
  );
  assert.deepEqual(classifyError(refused), {
    kind: 'network',
    maybeApplied: false,
    detail: 'ECONNREFUSED connect ECONNREFUSED 127.0.0.1:1',
  });
  const reset = new HttpError(
    "Network request for 'sendPhoto' failed!",
    Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }),
  );
  assert.deepEqual(classifyError(reset), { kind: 'network', maybeApplied: true, detail: 'ECONNRESET socket hang up' });
  // A connect that timed out sent nothing; the same errno on a connected socket may have.
  const connectTimeout = new HttpError(
    "Network request for 'sendMessage' failed!",
    Object.assign(new Error('connect ETIMEDOUT 149.154.167.220:443'), { code: 'ETIMEDOUT', syscall: 'connect' }),
  );
  assert.equal((classifyError(connectTimeout) as { maybeApplied: boolean }).maybeApplied, false);
  const readTimeout = new HttpError(
    "Network request for 'sendMessage' failed!",
    Object.assign(new Error('read ETIMEDOUT'), { code: 'ETIMEDOUT', syscall: 'read' }),
  );
  assert.equal((classifyError(readTimeout) as { maybeApplied: boolean }).maybeApplied, true);
  const timeout = new HttpError("Network request for 'sendPhoto' failed!", new Error("Request to 'sendPhoto' timed out after 30 seconds"));
  assert.equal((classifyError(timeout) as { maybeApplied: boolean }).maybeApplied, true);
  assert.equal((classifyError(new Error('anything')) as { maybeApplied: boolean }).maybeApplied, true);
});

void test('idempotent methods', () => {
  for (const m of ['editMessageMedia', 'editMessageText', 'deleteMessage', 'answerCallbackQuery', 'setWebhook', 'sendChatAction', 'getMe'])
    assert.equal(isIdempotent(m), true, m);
  for (const m of ['sendMessage', 'sendPhoto', 'sendMediaGroup', 'copyMessage', 'forwardMessage', 'forwardMessages'])
    assert.equal(isIdempotent(m), false, m);
});
