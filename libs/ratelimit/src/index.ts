export * from './token-bucket.ts';
export * from './keyed-limiter.ts';
export * from './address.ts';
