/**
 * The shard's bus contracts besides the hot path (`ch.<C>.in` IntentBatch →
 * `gw.<id>.acks` AckBatch, `ch.<C>.out` update bytes, `ch.<C>.game` batch bytes;
 * see @crowdplay/protocol):
 *
 * - `ch.<C>.ctl` (request/reply, answered by C's owner): the game connection's
 *   declare/state, and the current update for a joining viewer.
 * - `shard.<id>.ctl` (request/reply, answered by that shard): acquire/release,
 *   sent by the router.
 */
import type { ActionSpec, ErrorCode, RoundView } from '@crowdplay/protocol';

export type ChannelCtlRequest =
  | { op: 'declare'; actions: ActionSpec[]; welcomeGrant?: number }
  /**
   * Round control from the game connection. `tenant` is the tenant the game
   * authenticated as; the shard refuses it unless it owns the channel
   * (CP_ERR_AUTH_FORBIDDEN_CHANNEL).
   */
  | {
      op: 'round.open';
      tenant: string;
      round: string;
      kind: 'pool' | 'market';
      outcomes: string[];
      durationMs: number;
      liquidity?: number;
      /** The question viewers see (checked again at the shard as protocol's checkLabels does). */
      title?: string;
      /** Display label by outcome. */
      labels?: Record<string, string>;
    }
  | { op: 'round.settle'; tenant: string; round: string; outcome: string }
  | { op: 'round.cancel'; tenant: string; round: string }
  | { op: 'state'; state: Record<string, unknown> }
  /** The channel's current `update` frame (JSON text), for a viewer that just joined. */
  | { op: 'snapshot' }
  /**
   * The external game gives the channel up (a multi-channel game's `detach`): a built-in game that yielded to it
   * (GameModule.yieldsToGame) runs again; the game's unfinished rounds are cancelled and refunded. No-op otherwise.
   */
  | { op: 'release' }
  /**
   * From the router's `migrate` only (never forwarded from a socket): merge
   * the final snapshot of channel `from` (whose chat became this channel's)
   * into this channel's game (GameModule.absorb), then snapshot this channel
   * at its epoch before answering.
   */
  | { op: 'absorb'; from: string; state: unknown };

/** What an `absorb` did (GameModule.absorb's counts). */
export interface AbsorbCounts {
  added: number;
  replaced: number;
  kept: number;
  stale: boolean;
}

export type ChannelCtlReply =
  { ok: true; update?: string; round?: RoundView; absorbed?: AbsorbCounts } | { ok: false; code: ErrorCode; message: string };

/** `shard.<id>.ctl`'s requests and replies: ShardControl and ShardControlReply in @crowdplay/protocol (control.ts). */
export type { ShardControl as ShardCtlRequest, ShardControlReply as ShardCtlReply } from '@crowdplay/protocol';
