export * from './bus.ts';
export * from './subjects.ts';
export * from './hedge.ts';
export * from './in-process-bus.ts';
export * from './nats-bus.ts';
export * from './open.ts';
export * from './trace-context.ts';
