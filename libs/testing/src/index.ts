export * from './services.ts';
export * from './isolation.ts';
