/**
 * The bot's ingress: the webhook's updates (commands and the chat lifecycle), one at a time, in order.
 *
 * - `/start` in a chat: the chat's channel is created for the bot's tenant,
 *   its live board starts, and the bot answers (transactional lane) with a
 *   button opening the Mini App for THIS chat: a direct link
 *   `https://t.me/<bot>/<app>?startapp=<start parameter>`; the start
 *   parameter is signed by the bot, so the app's initData names this chat
 *   and no other.
 * - `/board`: the board is sent again now (at the scheduler's pace).
 * - `/stop`: the chat's live board stops.
 * - `my_chat_member`: the bot removed (left, kicked) → the chat is
 *   deactivated in the send queue (its queued jobs purged) and its board
 *   stops; added again → re-activated.
 * - A message with `migrate_to_chat_id` (in the old group) or
 *   `migrate_from_chat_id` (in the new supergroup): the group became a
 *   supergroup with a new id. The chat's board moves to the new id, then its
 *   queued jobs, then its game: `moveChannel` (the router's `migrate`) merges
 *   the old channel's final puzzle state into the new channel's, and the old
 *   channel is never served again (an old Mini App link lands in the new
 *   chat). Telegram sends both messages, and may re-deliver either: every
 *   step is idempotent, so the second changes nothing. A migration to the
 *   same id, or with an id that is not a safe integer, is refused and
 *   counted (refusals, CP_ERR_CHANNEL_MIGRATION_INVALID) and changes nothing.
 * Every message id seen is noted for the client (so a board post whose
 * answer was lost can be found).
 */
import { isCrowdplayError } from '@crowdplay/protocol';
import type { SendQueue } from '@crowdplay/sendq';
import { startParamFor, telegramChannelId, type BotCall, type TelegramClient } from '@crowdplay/telegram';
import type { Telemetry } from '@crowdplay/telemetry';
import type { ChatBoards } from './chat-boards.ts';

interface Chat {
  id: number;
  title?: string;
  type?: string;
}
interface Message {
  message_id: number;
  chat: Chat;
  text?: string;
  migrate_to_chat_id?: unknown;
  migrate_from_chat_id?: unknown;
}

/** What {@link TelegramBotDeps.moveChannel} reports (the router's `Migration`). */
export interface ChannelMove {
  outcome: 'none' | 'moved' | 'done';
  absorbed: { added: number; replaced: number; kept: number; stale: boolean } | null;
}

/** What the bot needs. */
export interface TelegramBotDeps {
  client: TelegramClient;
  queue: SendQueue<BotCall>;
  boards: ChatBoards;
  /** Creates the chat's channel for the bot's tenant (store.channels.ensure). */
  ensureChannel: (channel: string) => Promise<void>;
  /**
   * Moves a chat's channel state to the channel of the chat it became (the
   * router's `migrate(from, to)`: idempotent; throws when refused or when the
   * move could not finish — it is then resumed by the next request).
   */
  moveChannel: (from: string, to: string) => Promise<ChannelMove>;
  /** TELEGRAM_BOT_USERNAME and TELEGRAM_APP_NAME: the Mini App's direct link. */
  botUsername: string;
  appName: string;
  /** The start-parameter secret (libs/telegram `startParamSecret(token)`). */
  startSecret: Uint8Array;
  /** A tenant's own bot: its Telegram id, which names its chats' channels (`tb<bot>_<chat>`). Unset: the deployment's bot. */
  bot?: number;
  telemetry: Telemetry;
}

/**
 * The commands the bot handles, with the description Telegram lists for each
 * (`crowdplay telegram setup` sends this list with setMyCommands). The bot's
 * switch is typed on these names: a command listed here and not handled, or
 * handled and not listed, does not compile.
 */
export const BOT_COMMANDS = [
  { command: 'start', description: "Start today's word puzzle and this chat's live board" },
  { command: 'board', description: 'Post the board again' },
  { command: 'stop', description: "Stop this chat's live board" },
] as const satisfies ReadonlyArray<{ command: string; description: string }>;

/** A command of {@link BOT_COMMANDS}. */
export type BotCommandName = (typeof BOT_COMMANDS)[number]['command'];

/**
 * The update types the bot reads: a message (commands, migration service
 * messages, message ids), an edited message, and its own membership in a chat.
 * `crowdplay telegram setup` gives Telegram exactly these as setWebhook's
 * `allowed_updates`; {@link TelegramBot.handle} reads an update only through them.
 */
export const BOT_UPDATE_TYPES = ['message', 'edited_message', 'my_chat_member'] as const;

/** An update type of {@link BOT_UPDATE_TYPES}. */
export type BotUpdateType = (typeof BOT_UPDATE_TYPES)[number];

const COMMAND_NAMES: ReadonlySet<string> = new Set(BOT_COMMANDS.map((c) => c.command));

/** True when `name` is one of {@link BOT_COMMANDS}. */
export function isBotCommand(name: string): name is BotCommandName {
  return COMMAND_NAMES.has(name);
}

/** A command of the bot in `text` (`/start`, `/start@thisbot args`), or null. Commands addressed to another bot are ignored. */
export function parseCommand(text: string | undefined, botUsername: string): string | null {
  const m = /^\/([a-z_]{1,32})(?:@([A-Za-z0-9_]{1,64}))?(?:\s|$)/.exec(text ?? '');
  if (!m) return null;
  if (m[2] !== undefined && m[2].toLowerCase() !== botUsername.toLowerCase()) return null;
  return m[1]!;
}

export class TelegramBot {
  private readonly commands;

  constructor(private readonly d: TelegramBotDeps) {
    this.commands = d.telemetry.metrics.counter('crowdplay_telegram_commands_total');
  }

  /** The Mini App link for a chat. */
  appLink(chatId: number): string {
    return `https://t.me/${this.d.botUsername}/${this.d.appName}?startapp=${startParamFor(chatId, this.d.startSecret)}`;
  }

  /** Handles one update. Sends are queued, never awaited here (the queue paces them). */
  async handle(update: Record<string, unknown>): Promise<void> {
    // Orders this update's board ops across gateways (ChatBoards cluster mode).
    const at = typeof update.update_id === 'number' ? update.update_id : undefined;
    const field = (type: BotUpdateType): unknown => update[type];
    const msg = (field('message') ?? field('edited_message')) as Message | undefined;
    if (msg?.chat && Number.isSafeInteger(msg.chat.id)) {
      await this.d.client.noteMessageId(msg.chat.id, msg.message_id);
      if (msg.migrate_to_chat_id !== undefined) return this.migrate(msg.chat.id, msg.migrate_to_chat_id, at);
      if (msg.migrate_from_chat_id !== undefined) return this.migrate(msg.migrate_from_chat_id, msg.chat.id, at);
      const cmd = parseCommand(msg.text, this.d.botUsername);
      if (cmd && isBotCommand(cmd)) await this.command(cmd, msg.chat, at);
      return;
    }
    const member = field('my_chat_member') as { chat?: Chat; new_chat_member?: { status?: string } } | undefined;
    if (member?.chat && Number.isSafeInteger(member.chat.id)) {
      const status = member.new_chat_member?.status;
      if (status === 'left' || status === 'kicked') {
        await this.d.queue.deactivate(member.chat.id);
        this.d.boards.unwatch(member.chat.id, at);
      } else if (status === 'member' || status === 'administrator') {
        await this.d.queue.reactivate(member.chat.id);
      }
    }
  }

  /**
   * A group became a supergroup: its board, queued jobs and game state move
   * from `from` to `to`. Never throws (a failed state move is logged; the
   * router counts it and the other migration message resumes it).
   */
  private async migrate(from: unknown, to: unknown, at: number | undefined): Promise<void> {
    if (!isChatId(from) || !isChatId(to) || from === to) {
      this.d.telemetry.refusals.refuse('telegram', 'CP_ERR_CHANNEL_MIGRATION_INVALID', { from: String(from), to: String(to) });
      return;
    }
    // The board first: it then watches the new chat's channel when the moved state arrives there.
    this.d.boards.move(from, to, at);
    await this.d.queue.moveChat(from, to);
    try {
      const m = await this.d.moveChannel(telegramChannelId(from, this.d.bot), telegramChannelId(to, this.d.bot));
      this.d.telemetry.logger.info({ from, to, outcome: m.outcome, absorbed: m.absorbed }, 'chat migrated');
    } catch (err) {
      this.d.telemetry.logger.warn(
        { err, from, to },
        'chat migration: the game state did not move (the next migration message resumes it)',
      );
    }
  }

  private async command(cmd: BotCommandName, chat: Chat, at: number | undefined): Promise<void> {
    const title = chat.title ?? 'Word puzzle';
    const reply = (text: string, markup?: unknown): void => {
      void this.d.client.api
        .sendMessage(chat.id, text, markup === undefined ? {} : { reply_markup: markup as never })
        .catch((err: unknown) => this.d.telemetry.logger.warn({ err, chat: chat.id }, 'command reply failed'));
    };
    switch (cmd) {
      case 'start':
        this.commands.add(1, { command: 'start' });
        try {
          await this.d.ensureChannel(telegramChannelId(chat.id, this.d.bot));
        } catch (err) {
          if (!isCrowdplayError(err, 'CP_ERR_TENANT_QUOTA')) throw err;
          // The bot's tenant has all the channels its quota allows: counted, and the group is told, not left silent.
          this.d.telemetry.refusals.refuse('telegram', 'CP_ERR_TENANT_QUOTA', { chat: chat.id, quota: 'channels' });
          reply('This game cannot take another group right now. Try /start again later.');
          return;
        }
        await this.d.queue.reactivate(chat.id);
        this.d.boards.watch(chat.id, title, at);
        reply("Today's word puzzle: six guesses each. The group's board appears here after the first guess.", {
          inline_keyboard: [[{ text: 'Play', url: this.appLink(chat.id) }]],
        });
        return;
      case 'board':
        this.commands.add(1, { command: 'board' });
        this.d.boards.watch(chat.id, title, at);
        return;
      case 'stop':
        this.commands.add(1, { command: 'stop' });
        this.d.boards.unwatch(chat.id, at);
        reply('The board is stopped. /start brings it back.');
        return;
      default: {
        const unhandled: never = cmd;
        throw new TypeError(`command /${String(unhandled)} is listed in BOT_COMMANDS but not handled`);
      }
    }
  }
}

/** A Telegram chat id: a non-zero safe integer. */
function isChatId(x: unknown): x is number {
  return typeof x === 'number' && Number.isSafeInteger(x) && x !== 0;
}
