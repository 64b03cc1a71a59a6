export * from './parimutuel.ts';
export * from './ledger.ts';
export * from './verify.ts';
