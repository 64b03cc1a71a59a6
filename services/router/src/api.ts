/**
 * The router's request/reply contract on the bus (`subjects.routerCtl()`),
 * and a typed client for it. Gateways call `assign` before serving a channel;
 * operators and tests use `lookup`, `release` and `membership`.
 */
import { decodeJson, encodeJson, type Bus, type Subjects } from '@crowdplay/bus';
import { CONTROL_BATCH_MAX, CrowdplayError, isCrowdplayError, type ErrorCode } from '@crowdplay/protocol';

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

/** One channel's answer to a batched assign: its owner and epoch, or the code that refused it (retryable or not). */
export interface AssignResult {
  channel: string;
  shard?: string;
  epoch?: number;
  code?: ErrorCode;
  message?: string;
}

export type RouterRequest =
  | { op: 'assign'; channel: string }
  | { v: 2; op: 'assign'; channels: string[] }
  | { op: 'lookup'; channel: string }
  | { op: 'release'; channel: string }
  | { op: 'membership' }
  | { op: 'migrate'; from: string; to: string }
  | { op: 'move'; channel: string; from?: string }
  | { v: 2; op: 'drain'; shard: string };

export type RouterReply =
  | {
      ok: true;
      assignment?: Assignment | null;
      assigned?: AssignResult[];
      shards?: ShardInfo[];
      migration?: Migration;
      move?: Move;
      moves?: Move[];
    }
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

/** How long a client that found the router unable to take batched assigns (an older version) asks one by one, ms. */
const BATCH_RETRY_MS = 60_000;

/**
 * RouterApi over bus request/reply. The `assign`s made in one turn of the event loop (a burst of first joins)
 * go as one batched request of up to CONTROL_BATCH_MAX channels; a router too old to take one is asked one by
 * one for BATCH_RETRY_MS.
 */
export class RouterClient implements RouterApi {
  private pending = new Map<string, Array<{ resolve: (a: Assignment) => void; reject: (err: unknown) => void }>>();
  private flushing = false;
  private singlesUntilMs = 0;

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
      const what = 'channel' in req ? req.channel : 'from' in req ? req.from : 'shard' in req ? req.shard : '*';
      throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [what], { cause: err });
    }
    if (!reply.ok) throw new CrowdplayError(reply.code, [], { cause: reply.message });
    return reply;
  }

  /**
   * The channel's owner, placing it first if it has none (see RouterApi.assign); batched with the other
   * assigns of this turn.
   * @throws CrowdplayError the router's code for this channel (CP_ERR_CHANNEL_UNKNOWN, CP_ERR_CHANNEL_MIGRATED,
   *   CP_ERR_CHANNEL_UNAVAILABLE and CP_ERR_CHANNEL_PLACEMENT_OVERLOADED: retryable), or CP_ERR_CHANNEL_UNAVAILABLE
   *   when the router did not answer within the client's timeout
   */
  assign(channel: string): Promise<Assignment> {
    return new Promise<Assignment>((resolve, reject) => {
      const waiters = this.pending.get(channel);
      if (waiters) waiters.push({ resolve, reject });
      else this.pending.set(channel, [{ resolve, reject }]);
      if (!this.flushing) {
        this.flushing = true;
        setImmediate(() => this.flushAssigns());
      }
    });
  }

  /** Sends the assigns gathered this turn: one request per CONTROL_BATCH_MAX channels, or one each to an older router. */
  private flushAssigns(): void {
    this.flushing = false;
    const batch = this.pending;
    this.pending = new Map();
    const channels = [...batch.keys()];
    const settle = (channel: string, a: Assignment | null, err?: unknown): void => {
      for (const w of batch.get(channel) ?? []) {
        if (a) w.resolve(a);
        else w.reject(err ?? new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [channel]));
      }
    };
    const one = (channel: string): void => {
      this.call({ op: 'assign', channel }).then(
        (r) => settle(channel, r.assignment ?? null),
        (err: unknown) => settle(channel, null, err),
      );
    };
    if (channels.length === 1 || performance.now() < this.singlesUntilMs) {
      for (const ch of channels) one(ch);
      return;
    }
    for (let i = 0; i < channels.length; i += CONTROL_BATCH_MAX) {
      const chunk = channels.slice(i, i + CONTROL_BATCH_MAX);
      this.call({ v: 2, op: 'assign', channels: chunk }).then(
        (r) => {
          const byChannel = new Map((r.assigned ?? []).map((x) => [x.channel, x]));
          for (const ch of chunk) {
            const x = byChannel.get(ch);
            if (x?.shard !== undefined && x.epoch !== undefined) settle(ch, { channel: ch, shard: x.shard, epoch: x.epoch });
            else settle(ch, null, new CrowdplayError(x?.code ?? 'CP_ERR_CHANNEL_UNAVAILABLE', [ch], { cause: x?.message }));
          }
        },
        (err: unknown) => {
          // A router that does not know batches refuses the request's shape: ask it one by one for a while.
          if (isCrowdplayError(err) && err.code === 'CP_ERR_PROTO_INVALID') {
            this.singlesUntilMs = performance.now() + BATCH_RETRY_MS;
            for (const ch of chunk) one(ch);
          } else for (const ch of chunk) settle(ch, null, err);
        },
      );
    }
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
