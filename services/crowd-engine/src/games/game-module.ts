import type { ActionSpec, Batch, RoundView } from '@crowdplay/protocol';
import type { OpenRoundRequest } from '../round-state.ts';

/** A round command of a built-in game (the same requests a game process sends). */
export type RoundCommand =
  { op: 'open'; request: OpenRoundRequest } | { op: 'settle'; round: string; outcome: string } | { op: 'cancel'; round: string };

/** What {@link GameModule.absorb} did with the other channel's state. */
export interface AbsorbResult {
  /** The game state now (as viewers see it). */
  state: Record<string, unknown>;
  /** Players (or entries) taken over that this channel did not have. */
  added: number;
  /** Entries this channel had too, replaced by the other channel's (further along). */
  replaced: number;
  /** Entries this channel had too and kept (as far along or further). */
  kept: number;
  /** The other state is of another period (an earlier puzzle): nothing was taken. */
  stale: boolean;
}

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
  /**
   * True when an external game may take the channel over: its `declare` turns this game off (its unfinished rounds
   * are cancelled and refunded) until the game releases the channel (`release`), then this game starts afresh.
   * Without it an external declare is refused (CP_ERR_GAME_INVALID_DECLARE).
   */
  readonly yieldsToGame?: boolean;
  /** Points granted once per viewer joining the channel (0 = none). */
  readonly welcomeGrant?: number;
  /**
   * Optional round commands, asked every tick with the server time (ms since
   * epoch) and the channel's rounds as viewers see them.
   */
  rounds?(nowMs: number, rounds: RoundView[]): RoundCommand[];
  /**
   * Optional: scores a viewer's `guess` frame (word games). Throws a
   * CrowdplayError to refuse it (its code goes into the ack).
   */
  guess?(viewer: string, word: string, nowMs: number, name?: string): { marks: string; solved: boolean; left: number };
  /**
   * Optional: called every tick; returns the new game state when it changed
   * since the last call (guesses, a rollover), else null.
   */
  tick?(nowMs: number): Record<string, unknown> | null;
  /**
   * Optional: merges the final game state of another channel whose chat
   * became this one (a Telegram group upgraded to a supergroup; router
   * `migrate` → `ch.<new>.ctl` `absorb`). Must be idempotent (absorbing the
   * same state twice changes nothing the second time) and must never lose
   * newer state of this channel. Without it a channel refuses to absorb.
   */
  absorb?(state: Record<string, unknown> | null, nowMs: number): AbsorbResult;
}
