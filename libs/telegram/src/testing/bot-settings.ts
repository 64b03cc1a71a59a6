/**
 * The bot's own settings as the stub keeps them: its webhook (setWebhook,
 * deleteWebhook, getWebhookInfo), its command lists (setMyCommands,
 * getMyCommands, deleteMyCommands) and its menu buttons (setChatMenuButton,
 * getChatMenuButton), with the Bot API's parameter checks and its
 * descriptions (https://core.telegram.org/bots/api#setwebhook,
 * #setmycommands, #setchatmenubutton):
 *
 * - setWebhook: `url` an https URL on port 443, 80, 88 or 8443 (empty or
 *   absent: the webhook is removed, as deleteWebhook); `secret_token` 1–256
 *   characters of `A-Za-z0-9_-`; `allowed_updates` a list of update types
 *   (names Telegram does not know are dropped; an empty list means every type
 *   but chat_member, message_reaction and message_reaction_count; absent: the
 *   previous list stays); `max_connections` 1–100 (default 40);
 *   `drop_pending_updates`.
 * - setMyCommands: at most 100 commands, each 1–32 characters of `a-z0-9_`
 *   (a leading `/` is dropped) with a description of 1–256 characters once
 *   trimmed; kept per `scope` and `language_code` (absent `commands`: an empty
 *   list, as the Bot API does).
 * - setChatMenuButton: `menu_button` `commands`, `default` or `web_app` (with
 *   `text` and a `web_app.url` that is https), for `chat_id` or, without it,
 *   the bot's default button.
 *
 * Telegram's delivery side (pending updates, the last delivery error) is not
 * simulated; a test sets it with {@link BotSettings.setDelivery}.
 */

/** A refused call: Telegram's 400 with this description. */
export class BadRequest extends Error {
  constructor(readonly description: string) {
    super(description);
  }
}

/** Every update type of the Bot API's Update object (allowed_updates accepts these). */
export const UPDATE_TYPES: readonly string[] = [
  'message',
  'edited_message',
  'channel_post',
  'edited_channel_post',
  'business_connection',
  'business_message',
  'edited_business_message',
  'deleted_business_messages',
  'message_reaction',
  'message_reaction_count',
  'inline_query',
  'chosen_inline_result',
  'callback_query',
  'shipping_query',
  'pre_checkout_query',
  'purchased_paid_media',
  'poll',
  'poll_answer',
  'my_chat_member',
  'chat_member',
  'chat_join_request',
  'chat_boost',
  'removed_chat_boost',
];

/** Ports Telegram delivers webhooks to. */
export const WEBHOOK_PORTS: readonly number[] = [443, 80, 88, 8443];

const SCOPE_TYPES: ReadonlySet<string> = new Set([
  'default',
  'all_private_chats',
  'all_group_chats',
  'all_chat_administrators',
  'chat',
  'chat_administrators',
  'chat_member',
]);

/** The webhook as set (what setWebhook stored, secret included, and the delivery state). */
export interface StubWebhook {
  /** '' when no webhook is set. */
  url: string;
  /** The secret_token given (getWebhookInfo never shows it). */
  secretToken?: string;
  /** As given (known types only); undefined: never given (every type but the opt-in ones). */
  allowedUpdates?: string[];
  maxConnections: number;
  ipAddress?: string;
  pendingUpdateCount: number;
  /** Unix time of the last failed delivery. */
  lastErrorDate?: number;
  lastErrorMessage?: string;
}

export interface StubBotCommand {
  command: string;
  description: string;
}

export type StubMenuButton = { type: 'commands' } | { type: 'default' } | { type: 'web_app'; text: string; web_app: { url: string } };

type Params = Record<string, unknown>;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function bool(v: unknown): boolean {
  return v === true || v === 'true' || v === 1 || v === '1';
}

/** The scope and language a command list is kept under. */
function commandsKey(p: Params): string {
  const scope = p.scope;
  let s = 'default';
  if (scope !== undefined && scope !== null && scope !== '') {
    if (!isObject(scope) || typeof scope.type !== 'string') throw new BadRequest("can't parse BotCommandScope: Object expected");
    if (!SCOPE_TYPES.has(scope.type)) throw new BadRequest(`can't parse BotCommandScope: unsupported type "${scope.type}"`);
    s = [scope.type, scope.chat_id, scope.user_id].filter((x) => x !== undefined).join(':');
  }
  const lang = p.language_code === undefined || p.language_code === null ? '' : String(p.language_code);
  if (lang !== '' && !/^[a-z]{2}$/.test(lang)) throw new BadRequest('invalid language code specified');
  return `${s}|${lang}`;
}

/** The bot's settings (see the module doc). */
export class BotSettings {
  private hook: StubWebhook = { url: '', maxConnections: 40, pendingUpdateCount: 0 };
  private readonly commandLists = new Map<string, StubBotCommand[]>();
  private defaultButton: StubMenuButton = { type: 'commands' };
  private readonly chatButtons = new Map<number, StubMenuButton>();

  // -- Bot API ----------------------------------------------------------------

  /** setWebhook and deleteWebhook (`url` empty or absent). */
  setWebhook(p: Params): true {
    const url = p.url === undefined || p.url === null ? '' : String(p.url);
    if (bool(p.drop_pending_updates)) this.hook.pendingUpdateCount = 0;
    if (url === '') {
      this.hook = { url: '', maxConnections: 40, pendingUpdateCount: this.hook.pendingUpdateCount };
      return true;
    }
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new BadRequest('invalid webhook URL specified');
    }
    if (u.protocol !== 'https:') throw new BadRequest('bad webhook: An HTTPS URL must be provided for webhook');
    const port = u.port === '' ? 443 : Number(u.port);
    if (!WEBHOOK_PORTS.includes(port)) throw new BadRequest('bad webhook: Webhook can be set up only on ports 80, 88, 443 or 8443');
    const secret = p.secret_token === undefined || p.secret_token === null ? '' : String(p.secret_token);
    if (secret.length > 256) throw new BadRequest('secret token is too long');
    if (!/^[A-Za-z0-9_-]*$/.test(secret)) throw new BadRequest('secret token contains unallowed characters');
    let allowed = this.hook.allowedUpdates;
    if (p.allowed_updates !== undefined && p.allowed_updates !== null && p.allowed_updates !== '') {
      if (!Array.isArray(p.allowed_updates)) throw new BadRequest("can't parse allowed_updates JSON array");
      const given = p.allowed_updates.map(String);
      allowed = given.length === 0 ? undefined : UPDATE_TYPES.filter((t) => given.includes(t));
    }
    const max = p.max_connections === undefined || p.max_connections === '' ? 40 : Number(p.max_connections);
    const changed = url !== this.hook.url;
    this.hook = {
      url,
      ...(secret !== '' ? { secretToken: secret } : {}),
      ...(allowed !== undefined ? { allowedUpdates: allowed } : {}),
      maxConnections: Number.isFinite(max) ? Math.min(100, Math.max(1, Math.trunc(max))) : 40,
      ...(typeof p.ip_address === 'string' && p.ip_address !== '' ? { ipAddress: p.ip_address } : {}),
      pendingUpdateCount: this.hook.pendingUpdateCount,
      // A new URL starts with no delivery error.
      ...(!changed && this.hook.lastErrorDate !== undefined ? { lastErrorDate: this.hook.lastErrorDate } : {}),
      ...(!changed && this.hook.lastErrorMessage !== undefined ? { lastErrorMessage: this.hook.lastErrorMessage } : {}),
    };
    return true;
  }

  /** getWebhookInfo's result, as Telegram shapes it (never the secret). */
  webhookInfo(): Record<string, unknown> {
    const h = this.hook;
    const out: Record<string, unknown> = { url: h.url, has_custom_certificate: false, pending_update_count: h.pendingUpdateCount };
    if (h.url !== '') {
      if (h.ipAddress !== undefined) out.ip_address = h.ipAddress;
      if (h.lastErrorDate !== undefined) out.last_error_date = h.lastErrorDate;
      if (h.lastErrorMessage !== undefined) out.last_error_message = h.lastErrorMessage;
      out.max_connections = h.maxConnections;
      if (h.allowedUpdates !== undefined) out.allowed_updates = [...h.allowedUpdates];
    }
    return out;
  }

  setMyCommands(p: Params): true {
    const raw = p.commands === undefined || p.commands === null || p.commands === '' ? [] : p.commands;
    if (!Array.isArray(raw)) throw new BadRequest('expected an Array of BotCommand');
    const list: StubBotCommand[] = [];
    for (const c of raw) {
      if (!isObject(c)) throw new BadRequest("can't parse BotCommand: Object expected");
      for (const f of ['command', 'description']) {
        if (typeof c[f] !== 'string') throw new BadRequest(`can't parse BotCommand: Can't find field "${f}"`);
      }
      let command = c.command as string;
      if (command.startsWith('/')) command = command.slice(1);
      if (command === '') throw new BadRequest('command must be non-empty');
      if ([...command].length > 32) throw new BadRequest('command length must not exceed 32');
      if (!/^[a-z0-9_]+$/.test(command)) throw new BadRequest('BOT_COMMAND_INVALID');
      const description = (c.description as string).trim();
      if (description === '') throw new BadRequest('command description must be non-empty');
      if ([...description].length > 256) throw new BadRequest('command description length must not exceed 256');
      list.push({ command, description });
    }
    if (list.length > 100) throw new BadRequest('BOT_COMMANDS_TOO_MUCH');
    this.commandLists.set(commandsKey(p), list);
    return true;
  }

  getMyCommands(p: Params): StubBotCommand[] {
    return structuredClone(this.commandLists.get(commandsKey(p)) ?? []);
  }

  deleteMyCommands(p: Params): true {
    this.commandLists.delete(commandsKey(p));
    return true;
  }

  setChatMenuButton(p: Params, chatId: number | undefined): true {
    const mb = p.menu_button === undefined || p.menu_button === null || p.menu_button === '' ? { type: 'default' } : p.menu_button;
    if (!isObject(mb)) throw new BadRequest("can't parse menu button: MenuButton must be an Object");
    let button: StubMenuButton;
    if (mb.type === 'commands' || mb.type === 'default') button = { type: mb.type };
    else if (mb.type === 'web_app') {
      if (typeof mb.text !== 'string') throw new BadRequest(`can't parse menu button: Can't find field "text"`);
      if (!isObject(mb.web_app)) throw new BadRequest(`can't parse menu button: Can't find field "web_app"`);
      const url = mb.web_app.url;
      if (typeof url !== 'string') throw new BadRequest(`can't parse menu button: Can't find field "url"`);
      if (mb.text.trim() === '') throw new BadRequest('menu button text must be non-empty');
      let u: URL | undefined;
      try {
        u = new URL(url);
      } catch {
        u = undefined;
      }
      if (!u || u.protocol !== 'https:') throw new BadRequest(`menu button Web App URL '${url}' is invalid: Only HTTPS links are allowed`);
      button = { type: 'web_app', text: mb.text, web_app: { url } };
    } else throw new BadRequest("can't parse menu button: MenuButton has unsupported type");
    if (chatId === undefined) this.defaultButton = button.type === 'default' ? { type: 'commands' } : button;
    else if (button.type === 'default') this.chatButtons.delete(chatId);
    else this.chatButtons.set(chatId, button);
    return true;
  }

  getChatMenuButton(chatId: number | undefined): StubMenuButton {
    return structuredClone((chatId !== undefined ? this.chatButtons.get(chatId) : undefined) ?? this.defaultButton);
  }

  // -- inspection and control -------------------------------------------------

  /** The webhook as stored, secret_token included. */
  webhook(): StubWebhook {
    return structuredClone(this.hook);
  }

  /** The command list for a scope and language (default: the bot's default list). */
  commands(scope?: Record<string, unknown>, languageCode = ''): StubBotCommand[] {
    return this.getMyCommands({ ...(scope ? { scope } : {}), language_code: languageCode });
  }

  /** The menu button of a chat, or the bot's default one. */
  menuButton(chatId?: number): StubMenuButton {
    return this.getChatMenuButton(chatId);
  }

  /** Every setting, for the control API. */
  snapshot(): Record<string, unknown> {
    return {
      webhook: this.webhook(),
      commands: Object.fromEntries(this.commandLists),
      menuButton: this.defaultButton,
      chatMenuButtons: Object.fromEntries(this.chatButtons),
    };
  }

  /**
   * Telegram's delivery state, as a test wants it (the stub delivers nothing):
   * the updates waiting, the last delivery error (`lastErrorMessage` null clears it).
   */
  setDelivery(d: { pendingUpdateCount?: number; lastErrorMessage?: string | null; lastErrorDate?: number }, nowS: number): void {
    if (d.pendingUpdateCount !== undefined) this.hook.pendingUpdateCount = d.pendingUpdateCount;
    if (d.lastErrorMessage === null) {
      delete this.hook.lastErrorMessage;
      delete this.hook.lastErrorDate;
    } else if (d.lastErrorMessage !== undefined) {
      this.hook.lastErrorMessage = d.lastErrorMessage;
      this.hook.lastErrorDate = d.lastErrorDate ?? nowS;
    }
  }

  /** Back to a new bot's settings. */
  reset(): void {
    this.hook = { url: '', maxConnections: 40, pendingUpdateCount: 0 };
    this.commandLists.clear();
    this.defaultButton = { type: 'commands' };
    this.chatButtons.clear();
  }
}
