export * from './db.ts';
export * from './open.ts';
export * from './tenants.ts';
export * from './channels.ts';
export * from './sequencer.ts';
export * from './rounds.ts';
export * from './events.ts';
export * from './watch-tokens.ts';
