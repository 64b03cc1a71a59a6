export * from './scheduler.ts';
export * from './chat-boards.ts';
export * from './bot-ingress.ts';
export * from './start.ts';
export * from './budget-redis.ts';
export * from './board-rounds.ts';
export * from './round-results.ts';
