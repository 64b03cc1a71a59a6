export * from './api.ts';
export * from './router.ts';
