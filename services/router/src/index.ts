export * from './api.ts';
export * from './balance.ts';
export * from './cache.ts';
export * from './router.ts';
export * from './lease.ts';
