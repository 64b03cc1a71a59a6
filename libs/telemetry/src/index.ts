export * from './catalogue.ts';
export * from './catalogue-doc.ts';
export * from './logger.ts';
export * from './metrics.ts';
export * from './refusals.ts';
export * from './telemetry.ts';
export * from './tracing.ts';
export * from './tenant-quota-refusals.ts';
