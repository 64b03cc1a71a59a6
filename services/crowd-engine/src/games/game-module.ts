import type { ActionSpec, Batch } from '@crowdplay/protocol';

/**
 * A game that runs inside the shard instead of as a `role=game` process. It
 * declares actions, receives every batch of its channel, and returns the new
 * game state for viewers (or null when unchanged).
 */
export interface GameModule {
  readonly name: string;
  actions(): ActionSpec[];
  /** Initial state, or the state restored from a snapshot. */
  init(restored: Record<string, unknown> | null): Record<string, unknown>;
  onBatch(batch: Batch): Record<string, unknown> | null;
  /**
   * Optional intents of the game's own (the demo's bots), injected through the
   * normal intake each tick so they are tallied like any viewer's.
   */
  botIntents?(): Array<{ viewer: string; action: string; option?: string }>;
}
