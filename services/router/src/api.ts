/**
 * The router's request/reply contract on the bus (`subjects.routerCtl()`),
 * and a typed client for it. Gateways call `assign` before serving a channel;
 * operators and tests use `lookup`, `release` and `membership`.
 */
import { decodeJson, encodeJson, type Bus, type Subjects } from '@crowdplay/bus';
import { CrowdplayError, type ErrorCode } from '@crowdplay/protocol';

/** Where a channel lives: its shard and the epoch of that ownership. */
export interface Assignment {
  channel: string;
  shard: string;
  epoch: number;
}

/** A shard known to the router. `lastSeenMs` is ms since epoch; `intentsPerS` from its last heartbeat. */
export interface ShardInfo {
  id: string;
  channels: number;
  intentsPerS?: number;
  lastSeenMs: number;
}

/**
 * What the router publishes on `router.assignments` when a channel's owner
 * changes: the new owner and epoch, or `shard: null` when the channel has
 * none any more (released, moved to another chat). Caches drop or replace
 * their entry; a shard that sees another owner at a newer epoch for a
 * channel it serves stops serving it.
 */
export interface AssignmentChange {
  channel: string;
  shard: string | null;
  epoch: number;
}

/**
 * What a `migrate` did:
 * - `none`: the old channel does not exist (the chat never played): nothing changed.
 * - `moved`: the old channel's final state was merged into the new one now
 *   (`absorbed`: null when the old channel had no snapshot).
 * - `done`: the same move had finished before (a re-delivered update): nothing changed.
 */
export interface Migration {
  from: string;
  to: string;
  outcome: 'none' | 'moved' | 'done';
  absorbed: { added: number; replaced: number; kept: number; stale: boolean } | null;
}

/**
 * What a `move` did: `moved` with the new owner and epoch, or not moved
 * (`shard`: the owner it stays with, null when unowned) because no other
 * live shard could take it or `from` no longer owns it.
 */
export interface Move {
  channel: string;
  moved: boolean;
  shard: string | null;
  epoch: number;
}

export type RouterRequest =
  | { op: 'assign'; channel: string }
  | { op: 'lookup'; channel: string }
  | { op: 'release'; channel: string }
  | { op: 'membership' }
  | { op: 'migrate'; from: string; to: string }
  | { op: 'move'; channel: string; from?: string }
  | { v: 2; op: 'drain'; shard: string };

export type RouterReply =
  | { ok: true; assignment?: Assignment | null; shards?: ShardInfo[]; migration?: Migration; move?: Move; moves?: Move[] }
  | { ok: false; code: ErrorCode; message: string };

/** The router's operations, as a service or through the bus. */
export interface RouterApi {
  /**
   * Returns the channel's owner, acquiring it on a shard first if it has none.
   * Idempotent. @throws CrowdplayError CP_ERR_CHANNEL_UNKNOWN, CP_ERR_CHANNEL_UNAVAILABLE (no shard could take it)
   */
  assign(channel: string): Promise<Assignment>;
  /** The channel's owner, or null when unassigned. */
  lookup(channel: string): Promise<Assignment | null>;
  /** Makes the owner release the channel (snapshot, then unassign). */
  release(channel: string): Promise<void>;
  /** Shards the router knows, with their load. */
  membership(): Promise<ShardInfo[]>;
  /**
   * Moves channel `from`'s state to channel `to` (its chat became `to`'s: a
   * Telegram group upgraded to a supergroup): records the move durably (the
   * old channel is never served again), stops the old channel's owner
   * (final snapshot at its epoch), fences it, and has `to`'s owner merge that
   * snapshot into its game. Idempotent; a move interrupted half-way is
   * resumed by the next call.
   * @throws CrowdplayError CP_ERR_CHANNEL_INVALID_ID, CP_ERR_CHANNEL_MIGRATION_INVALID
   *   (same channel, another target before, another tenant, a target that moved
   *   on, a target whose game cannot absorb), CP_ERR_CHANNEL_UNAVAILABLE (no
   *   shard could take `to`; the move stays recorded and the next call resumes it)
   */
  migrate(from: string, to: string): Promise<Migration>;
}

/** RouterApi over bus request/reply. */
export class RouterClient implements RouterApi {
  constructor(
    private readonly bus: Bus,
    private readonly subjects: Subjects,
    private readonly timeoutMs: number,
  ) {}

  private async call(req: RouterRequest): Promise<RouterReply & { ok: true }> {
    let reply: RouterReply;
    try {
      const msg = await this.bus.request(this.subjects.routerCtl(), encodeJson(req), { timeoutMs: this.timeoutMs });
      reply = decodeJson<RouterReply>(msg.data);
    } catch (err) {
      throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', ['channel' in req ? req.channel : 'from' in req ? req.from : 'shard' in req ? req.shard : '*'], {
        cause: err,
      });
    }
    if (!reply.ok) throw new CrowdplayError(reply.code, [], { cause: reply.message });
    return reply;
  }

  async assign(channel: string): Promise<Assignment> {
    const r = await this.call({ op: 'assign', channel });
    if (!r.assignment) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [channel]);
    return r.assignment;
  }

  async lookup(channel: string): Promise<Assignment | null> {
    return (await this.call({ op: 'lookup', channel })).assignment ?? null;
  }

  async release(channel: string): Promise<void> {
    await this.call({ op: 'release', channel });
  }

  async membership(): Promise<ShardInfo[]> {
    return (await this.call({ op: 'membership' })).shards ?? [];
  }

  /**
   * Moves `channel` from its owner (which must be `from` when given) to the
   * live shard with the fewest channels among the others, open rounds
   * included: the owner hands it off (release with `handoff`: in-flight
   * stakes commit, open rounds' books written at its epoch), the new owner
   * acquires it at a new epoch and resumes the rounds, then the old owner
   * drops its subscriptions (`forget`). Not moved (nothing changes) when no
   * other live shard exists or `from` is not the owner.
   * @throws CrowdplayError CP_ERR_CHANNEL_UNKNOWN; CP_ERR_CHANNEL_UNAVAILABLE
   *   or the owner's code when the handoff failed (the owner still serves
   *   it) or the new owner's acquire failed (the channel is then unowned, its
   *   rounds durable: the next assign resumes them)
   */
  async move(channel: string, from?: string): Promise<Move> {
    const r = await this.call(from === undefined ? { op: 'move', channel } : { op: 'move', channel, from });
    if (!r.move) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [channel]);
    return r.move;
  }

  async migrate(from: string, to: string): Promise<Migration> {
    const r = await this.call({ op: 'migrate', from, to });
    if (!r.migration) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [from]);
    return r.migration;
  }
}
