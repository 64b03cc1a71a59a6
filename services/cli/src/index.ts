export * from './compose.ts';
export * from './cluster.ts';
export * from './connect.ts';
export * from './health.ts';
export * from './telegram-setup.ts';
