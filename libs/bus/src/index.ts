export * from './bus.ts';
export * from './subjects.ts';
export * from './in-process-bus.ts';
