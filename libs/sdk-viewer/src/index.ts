/**
 * @crowdplay/sdk-viewer — the viewer (role=crowd) client. Browser-safe: no
 * import of `ws` or Node built-ins; Node callers pass `ws`' WebSocket class.
 */
export { ViewerClient, NO_RECONNECT_CLOSE_CODES, buildWsUrl } from './viewer-client.ts';
export type { ConnectionState, FrameInfo, ViewerClientOptions, ViewerEvents } from './viewer-client.ts';
export { backoffDelayMs, DEFAULT_BACKOFF } from './backoff.ts';
export type { BackoffOptions } from './backoff.ts';
export { TypedEmitter } from './emitter.ts';
export type { WebSocketConstructor, WebSocketLike } from './socket.ts';
