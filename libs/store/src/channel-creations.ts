/**
 * New channels created together, per tenant (ChannelRepository.ensure). A tenant's creations are serialised by its
 * advisory lock, each counting the tenant's channels: created one at a time, a burst of first joins (a game attaching
 * thousands of chats, a cold start) waited in line for one transaction, one count and one commit per channel. Here
 * the creations asked while one of the tenant's transactions is in flight wait for it to end and then go together in
 * the next one: one lock, one count, one INSERT and one commit for all of them (insertChannelsWithinQuota), so the
 * batches grow with the load, as a group commit's do. Decision 0045 has the measurement.
 */
import type { Db } from './db.ts';
import { insertChannelsWithinQuota } from './quotas.ts';

/** Most channels created in one transaction; more wait for the next. */
export const CHANNEL_CREATE_BATCH_MAX = 1_000;

/** What a creation found: inserted now, or not (it exists, or the quota was reached: `overQuota`), and the quota. */
export interface CreateResult {
  inserted: boolean;
  overQuota: boolean;
  limit: number;
}

interface Waiter {
  id: string;
  resolve: (r: CreateResult) => void;
  reject: (err: unknown) => void;
}

interface TenantQueue {
  tenantId: string;
  maxChannels: number;
  waiting: Waiter[];
  busy: boolean;
}

/** The per-tenant queues of channel creations (one per store). */
export class ChannelCreations {
  private readonly queues = new Map<string, TenantQueue>();

  constructor(private readonly db: Db) {}

  /**
   * Creates channel `id` for `tenantId` if it does not exist and the tenant is within its quota of channels, in the
   * tenant's next creation transaction: it waits for the transaction in flight, then for the ones ahead of it at
   * CHANNEL_CREATE_BATCH_MAX per transaction. The queue holds only what callers asked and still wait for.
   * @param id a valid channel id (the caller checked it)
   * @param maxChannels TENANT_MAX_CHANNELS; a call with another value goes in a queue of its own
   * @throws the store's error (CP_ERR_STORE_UNAVAILABLE when unreachable): every creation of that transaction
   *   fails, nothing of it is written
   */
  create(id: string, tenantId: string, maxChannels: number): Promise<CreateResult> {
    const key = `${tenantId}\u0000${maxChannels}`;
    let q = this.queues.get(key);
    if (!q) {
      q = { tenantId, maxChannels, waiting: [], busy: false };
      this.queues.set(key, q);
    }
    const queue = q;
    return new Promise<CreateResult>((resolve, reject) => {
      queue.waiting.push({ id, resolve, reject });
      if (queue.busy) return;
      queue.busy = true;
      // The rest of this turn's creations join the first transaction.
      setImmediate(() => void this.drain(key, queue));
    });
  }

  /** Runs the tenant's transactions until nobody waits; then forgets the queue. */
  private async drain(key: string, q: TenantQueue): Promise<void> {
    while (q.waiting.length > 0) {
      const batch = q.waiting.splice(0, CHANNEL_CREATE_BATCH_MAX);
      const ids = [...new Set(batch.map((w) => w.id))];
      try {
        const r = await this.db.tx((t) => insertChannelsWithinQuota(t, ids, q.tenantId, q.maxChannels));
        for (const w of batch) w.resolve({ inserted: r.inserted.has(w.id), overQuota: r.overQuota.has(w.id), limit: r.limit });
      } catch (err) {
        for (const w of batch) w.reject(err);
      }
    }
    q.busy = false;
    if (this.queues.get(key) === q) this.queues.delete(key);
  }
}
