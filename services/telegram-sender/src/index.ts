export * from './bot-client.ts';
export * from './start.ts';
