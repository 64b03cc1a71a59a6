/**
 * @crowdplay/sdk-game — the game (role=game) client for Node: declare actions,
 * receive batches, publish state; reconnects and re-declares by itself.
 */
export { GameClient } from './game-client.ts';
export type { BatchInfo, ConnectionState, GameClientOptions, GameEvents } from './game-client.ts';
