/**
 * @crowdplay/telegram: Mini App initData verification (initdata.ts), the Bot
 * API client whose every call passes the send queue (client.ts), outcome
 * classification of Bot API answers (outcome.ts), avatar reads (avatars.ts),
 * a tenant bot's secrets at rest (bot-secrets.ts) and identity (bot-identity.ts).
 * See docs/telegram.md.
 */
export * from './initdata.ts';
export * from './outcome.ts';
export * from './board-store.ts';
export * from './avatars.ts';
export * from './client.ts';
export * from './updates.ts';
export * from './bot-secrets.ts';
export * from './bot-identity.ts';
