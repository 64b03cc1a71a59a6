export * from './token-bucket.ts';
export * from './keyed-limiter.ts';
export * from './address.ts';
export * from './turn-budget.ts';
export * from './lru-bound.ts';
