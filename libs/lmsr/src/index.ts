export * from './lmsr.ts';
export * from './market.ts';
