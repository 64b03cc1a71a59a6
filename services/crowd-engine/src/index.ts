export * from './api.ts';
export * from './channel.ts';
export * from './ids.ts';
export * from './shard.ts';
export * from './games/game-module.ts';
export * from './games/tug-of-war.ts';
export * from './games/word-puzzle.ts';
export * from './games/words.ts';
