/** The Telegram Bot API stub (see stub.ts) and its ceilings (limits.ts). */
export * from './limits.ts';
export * from './stub.ts';
export * from './multipart.ts';
