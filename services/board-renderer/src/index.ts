export * from './render-queue.ts';
export {
  BullmqRenderQueue,
  DEFAULT_RENDER_PREFIX,
  STALE_MS,
  renderQueueKeys,
  type BullmqRenderQueueOptions,
} from './render-queue-bullmq.ts';
export * from './render-queue-open.ts';
export * from './rendering.ts';
export * from './start.ts';
