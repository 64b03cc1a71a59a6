export * from './scheduler.ts';
export * from './chat-boards.ts';
export * from './bot.ts';
export * from './start.ts';
export * from './budget-redis.ts';
