/**
 * @crowdplay/sdk-game — the game (role=game) client for Node: declare actions,
 * receive batches, publish state, open/settle/cancel rounds; reconnects and
 * re-declares by itself. `GameClient` serves one channel; `MultiGameClient`
 * serves many (every Telegram chat of the tenant) over one connection.
 */
export { GameClient, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_REQUEST_TIMEOUT_MS, GAME_FRAME_MAX_BYTES } from './game-client.ts';
export type { BatchInfo, ConnectionState, DeclareOptions, GameClientOptions, GameEvents, OpenRoundOptions } from './game-client.ts';
export { MultiGameClient } from './multi-game-client.ts';
export type { MultiGameClientOptions, MultiGameEvents } from './multi-game-client.ts';
export type { RoundView } from '@crowdplay/protocol';
