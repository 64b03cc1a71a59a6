export * from './dsl.ts';
export { schema, sectionAreas, type Schema } from './schema.ts';
export * from './load.ts';
export * from './docs.ts';
export * from './listen.ts';
