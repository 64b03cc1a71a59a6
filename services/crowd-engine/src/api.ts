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
import type { ActionSpec, ErrorCode } from '@crowdplay/protocol';

export type ChannelCtlRequest =
  | { op: 'declare'; actions: ActionSpec[] }
  | { op: 'state'; state: Record<string, unknown> }
  /** The channel's current `update` frame (JSON text), for a viewer that just joined. */
  | { op: 'snapshot' };

export type ChannelCtlReply = { ok: true; update?: string } | { ok: false; code: ErrorCode; message: string };

export type ShardCtlRequest =
  /** Take ownership of `channel` at `epoch` (already written to Postgres by the router). */
  | { op: 'acquire'; channel: string; epoch: number }
  /** Snapshot and stop serving `channel`. */
  | { op: 'release'; channel: string };

export type ShardCtlReply = { ok: true; channels: number } | { ok: false; code: ErrorCode; message: string };
