/**
 * A gateway's cache of channel assignments in front of the router: `assign`
 * answers from the cache when it can, and the cache follows the router's
 * changes on `router.assignments` (a moved channel is replaced, a released
 * one dropped), so a channel that changes shard needs no call. Bounded
 * (ROUTER_ASSIGNMENT_CACHE_MAX, least recently used dropped first).
 */
import { type Bus, type Subjects, type Subscription } from '@crowdplay/bus';
import { decodeAssignments } from '@crowdplay/protocol';
import { LRUCache } from 'lru-cache';
import type { Assignment, AssignmentChange, Migration, RouterApi, ShardInfo } from './api.ts';
import { lruCountBound } from '@crowdplay/ratelimit';

export class CachingRouter implements RouterApi {
  private readonly cache: LRUCache<string, Assignment>;
  private sub: Subscription | null = null;
  /** Answers served from the cache, and changes applied, since start (tests, metrics). */
  hits = 0;
  changes = 0;
  /** Entries dropped because the cache held ROUTER_ASSIGNMENT_CACHE_MAX (the limit biting: the next assign of one asks the router). */
  evictions = 0;

  /**
   * @param inner the router (usually a RouterClient over the bus)
   * @param max most cached assignments (ROUTER_ASSIGNMENT_CACHE_MAX)
   */
  constructor(
    private readonly inner: RouterApi,
    private readonly deps: { bus: Bus; subjects: Subjects },
    max: number,
  ) {
    this.cache = new LRUCache({
      ...lruCountBound(max),
      dispose: (_v, _k, reason) => {
        if (reason === 'evict') this.evictions++;
      },
    });
  }

  /** Starts following `router.assignments`. */
  async start(): Promise<void> {
    const { bus, subjects } = this.deps;
    this.sub = bus.subscribe(subjects.routerAssignments(), (msg) => {
      try {
        for (const c of decodeAssignments(msg.data)) this.apply(c);
      } catch {
        // A malformed change: drop nothing; the next assign asks the router.
      }
    });
    await bus.flush();
  }

  /** Applies one change: a newer owner replaces the entry, `shard: null` drops it. */
  apply(c: AssignmentChange): void {
    if (typeof c.channel !== 'string') return;
    this.changes++;
    const cur = this.cache.peek(c.channel);
    if (c.shard === null) {
      if (!cur || cur.epoch <= c.epoch || c.epoch === 0) this.cache.delete(c.channel);
    } else if (!cur || cur.epoch < c.epoch) this.cache.set(c.channel, { channel: c.channel, shard: c.shard, epoch: c.epoch });
  }

  /** Cached entries now. */
  get size(): number {
    return this.cache.size;
  }

  /** The cached assignment, if any (no router call). */
  cached(channel: string): Assignment | undefined {
    return this.cache.peek(channel);
  }

  async assign(channel: string): Promise<Assignment> {
    const hit = this.cache.get(channel);
    if (hit) {
      this.hits++;
      return hit;
    }
    const a = await this.inner.assign(channel);
    const cur = this.cache.peek(channel);
    if (!cur || cur.epoch < a.epoch) this.cache.set(channel, a);
    return this.cache.get(channel)!;
  }

  lookup(channel: string): Promise<Assignment | null> {
    return this.inner.lookup(channel);
  }

  async release(channel: string): Promise<void> {
    this.cache.delete(channel);
    await this.inner.release(channel);
  }

  membership(): Promise<ShardInfo[]> {
    return this.inner.membership();
  }

  async migrate(from: string, to: string): Promise<Migration> {
    this.cache.delete(from);
    return this.inner.migrate(from, to);
  }

  /** Stops following changes. */
  close(): void {
    this.sub?.unsubscribe();
    this.sub = null;
  }
}
