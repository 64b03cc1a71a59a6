import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createTelemetry } from '@crowdplay/telemetry';
import { CrowdplayError } from '@crowdplay/protocol';
import { chatFromStartParam, startParamSecret } from '@crowdplay/telegram';
import { TelegramBot, parseCommand, boardOf, BOT_COMMANDS, BOT_UPDATE_TYPES, type ChannelMove } from '../src/index.ts';

test('bot - commands: its own, with or without @username; another bot’s and plain text are ignored', () => {
  assert.equal(parseCommand('/start', 'cp_bot'), 'start');
  assert.equal(parseCommand('/start@CP_bot extra', 'cp_bot'), 'start');
  assert.equal(parseCommand('/board', 'cp_bot'), 'board');
  assert.equal(parseCommand('/start@other_bot', 'cp_bot'), null);
  assert.equal(parseCommand('hello /start', 'cp_bot'), null);
  assert.equal(parseCommand(undefined, 'cp_bot'), null);
  assert.equal(parseCommand('/startx', 'cp_bot'), 'startx', 'an unknown command is parsed (and then ignored)');
});

function fakes(moveChannel?: (from: string, to: string) => Promise<ChannelMove>, ensureChannel?: (channel: string) => Promise<void>) {
  const log: string[] = [];
  const telemetry = createTelemetry({ service: 'bot-test', level: 'silent', refusalLogIntervalMs: 60_000 });
  const sent: Array<{ chat: number; text: string; markup?: unknown }> = [];
  const client = {
    noteMessageId: async (chat: number, id: number) => void log.push(`note ${chat} ${id}`),
    api: {
      sendMessage: async (chat: number, text: string, other: { reply_markup?: unknown }) => {
        sent.push({ chat, text, markup: other.reply_markup });
        return {};
      },
    },
  };
  const queue = {
    reactivate: async (c: number) => void log.push(`reactivate ${c}`),
    deactivate: async (c: number) => (log.push(`deactivate ${c}`), 0),
    moveChat: async (a: number, b: number) => (log.push(`move ${a} ${b}`), 0),
  };
  const boards = {
    watch: (c: number, title: string) => void log.push(`watch ${c} ${title}`),
    unwatch: (c: number) => void log.push(`unwatch ${c}`),
    move: (a: number, b: number) => void log.push(`boards.move ${a} ${b}`),
  };
  const secret = startParamSecret('1:tok');
  const bot = new TelegramBot({
    client: client as never,
    queue: queue as never,
    boards: boards as never,
    ensureChannel: async (c) => {
      log.push(`ensure ${c}`);
      await ensureChannel?.(c);
    },
    moveChannel: async (from, to) => {
      log.push(`moveChannel ${from} ${to}`);
      return moveChannel ? moveChannel(from, to) : { outcome: 'moved', absorbed: null };
    },
    botUsername: 'cp_bot',
    appName: 'play',
    startSecret: secret,
    telemetry,
  });
  return { bot, log, sent, secret, telemetry };
}

test('bot - /start creates the channel, starts the board and answers with a Mini App link signed for this chat', async () => {
  const { bot, log, sent, secret } = fakes();
  await bot.handle({ update_id: 1, message: { message_id: 5, chat: { id: -100777, title: 'Crew' }, text: '/start' } });
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(log, ['note -100777 5', 'ensure tgn100777', 'reactivate -100777', 'watch -100777 Crew']);
  assert.equal(sent.length, 1);
  const url = new URL((sent[0]!.markup as { inline_keyboard: Array<Array<{ url: string }>> }).inline_keyboard[0]![0]!.url);
  assert.equal(`${url.origin}${url.pathname}`, 'https://t.me/cp_bot/play');
  assert.equal(chatFromStartParam(url.searchParams.get('startapp')!, secret), -100777, 'the link names this chat, signed');
});

test("bot - /start over the tenant's channels quota: the group is told, the refusal counted, no board started", async () => {
  const { bot, log, sent, telemetry } = fakes(undefined, async () => {
    throw new CrowdplayError('CP_ERR_TENANT_QUOTA', ['channels', 'acme', 5]);
  });
  await bot.handle({ update_id: 1, message: { message_id: 5, chat: { id: -100778, title: 'Late' }, text: '/start' } });
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(log, ['note -100778 5', 'ensure tgn100778'], 'nothing reactivated or watched');
  assert.equal(sent.length, 1);
  assert.match(sent[0]!.text, /cannot take another group/);
  assert.equal(sent[0]!.markup, undefined, 'no Play link');
  const metrics = await telemetry.metrics.prometheusText();
  assert.match(metrics, /crowdplay_refusals_total\{area="telegram",reason="CP_ERR_TENANT_QUOTA"[^}]*\} 1/);
});

test('bot - every command it lists for Telegram is one it acts on; a command it does not list changes nothing', async () => {
  const { bot, log } = fakes();
  for (const [i, { command }] of BOT_COMMANDS.entries()) {
    const before = log.length;
    await bot.handle({ update_id: 10 + i, message: { message_id: 10 + i, chat: { id: -5 }, text: `/${command}` } });
    assert.ok(log.length > before + 1, `/${command} did more than note the message id: ${log.slice(before).join(', ')}`);
  }
  const before = log.length;
  await bot.handle({ update_id: 20, message: { message_id: 20, chat: { id: -5 }, text: '/help' } });
  assert.deepEqual(log.slice(before), ['note -5 20']);
});

test('bot - it reads the update types it asks Telegram for (allowed_updates), and no other', async () => {
  const { bot, log } = fakes();
  const chat = { id: -6, title: 'Crew' };
  const samples: Record<(typeof BOT_UPDATE_TYPES)[number], unknown> = {
    message: { message_id: 1, chat, text: '/board' },
    edited_message: { message_id: 2, chat, text: '/board' },
    my_chat_member: { chat, new_chat_member: { status: 'kicked' } },
  };
  for (const [i, type] of BOT_UPDATE_TYPES.entries()) {
    const before = log.length;
    await bot.handle({ update_id: 30 + i, [type]: samples[type] });
    assert.ok(log.length > before, `${type} was acted on`);
  }
  const before = log.length;
  for (const type of ['channel_post', 'callback_query', 'chat_member', 'chat_join_request', 'message_reaction']) {
    await bot.handle({ update_id: 40, [type]: { message_id: 3, chat, text: '/start', new_chat_member: { status: 'kicked' } } });
  }
  assert.deepEqual(log.slice(before), [], 'updates of other types change nothing');
});

test('bot - /stop, removal, re-adding and migration act on the queue and the board', async () => {
  const { bot, log } = fakes();
  await bot.handle({ update_id: 2, message: { message_id: 6, chat: { id: -1 }, text: '/stop@cp_bot' } });
  await bot.handle({ update_id: 3, my_chat_member: { chat: { id: -2 }, new_chat_member: { status: 'kicked' } } });
  await bot.handle({ update_id: 4, my_chat_member: { chat: { id: -2 }, new_chat_member: { status: 'member' } } });
  await bot.handle({ update_id: 5, message: { message_id: 7, chat: { id: -3 }, migrate_to_chat_id: -1003 } });
  await bot.handle({ update_id: 6, message: { message_id: 8, chat: { id: -4 }, text: '/start@someone_else' } });
  assert.deepEqual(log, [
    'note -1 6',
    'unwatch -1',
    'deactivate -2',
    'unwatch -2',
    'reactivate -2',
    'note -3 7',
    'boards.move -3 -1003',
    'move -3 -1003',
    'moveChannel tgn3 tgn1003',
    'note -4 8',
  ]);
});

test('bot - migration: from the old group (migrate_to) or the new supergroup (migrate_from), the same move; bad ids change nothing', async () => {
  let failNext = false;
  const { bot, log, telemetry } = fakes(async () => {
    if (failNext) throw new Error('no shard');
    return { outcome: 'moved', absorbed: null };
  });
  await bot.handle({ update_id: 1, message: { message_id: 1, chat: { id: -5 }, migrate_to_chat_id: -1005 } });
  await bot.handle({ update_id: 2, message: { message_id: 1, chat: { id: -1005 }, migrate_from_chat_id: -5 } });
  assert.deepEqual(log, [
    'note -5 1',
    'boards.move -5 -1005',
    'move -5 -1005',
    'moveChannel tgn5 tgn1005',
    'note -1005 1',
    'boards.move -5 -1005',
    'move -5 -1005',
    'moveChannel tgn5 tgn1005',
  ]);
  log.length = 0;
  // Bad input: to itself, not integers, zero, a string: refused, counted, nothing moved (and not read as a command either).
  for (const [id, to] of [
    [-6, -6],
    [-6, 1.5],
    [-6, 0],
    [-6, '-1006'],
    [-6, Number.MAX_SAFE_INTEGER + 2],
  ] as const)
    await bot.handle({ update_id: 3, message: { message_id: 2, chat: { id }, migrate_to_chat_id: to, text: '/start' } });
  await bot.handle({ update_id: 4, message: { message_id: 3, chat: { id: -7 }, migrate_from_chat_id: null, text: '/start' } });
  assert.deepEqual(
    log.filter((l) => !l.startsWith('note')),
    [],
  );
  assert.match(
    await telemetry.metrics.prometheusText(),
    /crowdplay_refusals_total\{area="telegram",reason="CP_ERR_CHANNEL_MIGRATION_INVALID"[^}]*\} 6/,
  );
  // The state move failing (no shard) does not stop the rest; the bot does not throw.
  failNext = true;
  await bot.handle({ update_id: 5, message: { message_id: 4, chat: { id: -8 }, migrate_to_chat_id: -1008 } });
  assert.deepEqual(log.slice(-3), ['boards.move -8 -1008', 'move -8 -1008', 'moveChannel tgn8 tgn1008']);
});

test('board - one card per player, colours only, solved first, then fewer guesses, then name', () => {
  const b = boardOf('Crew', {
    puzzle: 12,
    players: {
      'tg:1': { marks: ['g....', '.y...'], solved: false, name: 'Zed' },
      'tg:2': { marks: ['ggggg'], solved: true, name: 'Bea' },
      'tg:3': { marks: ['..y..'], solved: false },
    },
  });
  assert.deepEqual(b, {
    title: 'Crew',
    puzzle: '#12',
    cards: [
      { id: '2', name: 'Bea', rows: [['green', 'green', 'green', 'green', 'green']] },
      { id: '3', name: 'player 3', rows: [['grey', 'grey', 'yellow', 'grey', 'grey']] },
      {
        id: '1',
        name: 'Zed',
        rows: [
          ['green', 'grey', 'grey', 'grey', 'grey'],
          ['grey', 'yellow', 'grey', 'grey', 'grey'],
        ],
      },
    ],
  });
});
