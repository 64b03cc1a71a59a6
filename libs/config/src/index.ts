export * from './dsl.ts';
export { schema, type Schema } from './schema.ts';
export * from './load.ts';
