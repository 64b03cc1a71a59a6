export * from './services.ts';
export * from './isolation.ts';
export * from './refusals.ts';
export * from './events.ts';
export * from './redis.ts';
export * from './postgres.ts';
export * from './ports.ts';
