/**
 * @crowdplay/sdk-viewer — the viewer (role=crowd) client. Browser-safe: no
 * import of `ws` or Node built-ins; Node callers pass `ws`' WebSocket class.
 *
 * `ReconnectingSocket` is the connection lifecycle both SDK clients are built
 * on; it is exported for @crowdplay/sdk-game and is not a stable API.
 */
export { ViewerClient, buildWsUrl, DEFAULT_ACK_TIMEOUT_MS } from './viewer-client.ts';
export type { BuyAmount, TradeOptions, ViewerClientOptions, ViewerEvents } from './viewer-client.ts';
/** The frames a viewer receives (re-exported for SDK users: `update.rounds` holds RoundViews). */
export type { ActAck, BalanceFrame, ChannelUpdate, RoundResultFrame, RoundView, Welcome } from '@crowdplay/protocol';
export {
  ReconnectingSocket,
  NO_RECONNECT_CLOSE_CODES,
  DEFAULT_CLOSE_DEADLINE_MS,
  DEFAULT_WELCOME_DEADLINE_MS,
} from './reconnecting-socket.ts';
export type { ConnectionState, FrameInfo, ReconnectingSocketHooks, ReconnectingSocketOptions } from './reconnecting-socket.ts';
export { backoffDelayMs, DEFAULT_BACKOFF } from './backoff.ts';
export type { BackoffOptions } from './backoff.ts';
export { TypedEmitter } from './emitter.ts';
export { WS_OPEN } from './socket.ts';
export type { WebSocketConstructor, WebSocketLike } from './socket.ts';
