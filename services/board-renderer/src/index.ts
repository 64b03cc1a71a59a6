export * from './board-ends.ts';
export * from './render-queue.ts';
export { BullmqRenderQueue, STALE_MS, type BullmqRenderQueueOptions } from './render-queue-bullmq.ts';
export * from './render-queue-open.ts';
export * from './rendering.ts';
export * from './start.ts';
