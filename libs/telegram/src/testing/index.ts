/** The Telegram Bot API stub (see stub.ts), its ceilings (limits.ts) and the bot's settings it keeps (bot-settings.ts). */
export * from './limits.ts';
export * from './stub.ts';
export * from './multipart.ts';
export * from './bot-settings.ts';
export * from './bots.ts';
