export * from './compose.ts';
export * from './cluster.ts';
