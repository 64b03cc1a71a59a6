/**
 * A shard's drain when no other shard can take its channels (the whole cluster stopping): what is left is
 * released in batches, not one channel at a time.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CONTROL_BATCH_MAX, decodeAssignments, decodeControl, ShardControl } from '@crowdplay/protocol';
import { startHarness, type Harness } from './harness.ts';

const T = 'acme';
const CHANNELS = CONTROL_BATCH_MAX + 200;

describe('shard drain', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(() => h.close());

  it('drain - with no other shard, every channel is released in batches of CONTROL_BATCH_MAX', { timeout: 120_000 }, async () => {
    const ids = Array.from({ length: CHANNELS }, (_, i) => `dr${i}`);
    await h.store.db.query(`INSERT INTO channels (id, tenant_id) SELECT unnest($1::text[]), $2`, [ids, T]);
    await Promise.all(ids.map((id) => h.router.assign(id)));
    assert.equal(h.shard.channels.length, CHANNELS);
    const messages: number[] = [];
    const sub = h.bus.subscribe(h.subjects.routerAssignments(), (msg) => {
      messages.push(decodeAssignments(msg.data).filter((c) => c.shard === null).length);
    });
    try {
      await h.shard.drain();
    } finally {
      sub.unsubscribe();
    }
    assert.deepEqual(h.shard.channels, []);
    const { rows } = await h.store.db.query<{ n: string }>(
      `SELECT count(*) AS n FROM channels WHERE id = ANY($1::text[]) AND owner IS NOT NULL`,
      [ids],
    );
    assert.equal(Number(rows[0]!.n), 0, 'no channel keeps an owner');
    assert.equal(
      messages.reduce((a, b) => a + b, 0),
      CHANNELS,
      'every release announced',
    );
    assert.ok(
      messages.length <= Math.ceil(CHANNELS / CONTROL_BATCH_MAX),
      `${messages.length} assignment messages for ${CHANNELS} channels`,
    );
  });
});

describe('shard drain with another live shard', () => {
  const PER = 3;
  let h: Harness;
  before(async () => {
    h = await startHarness({ router: { drainBatchChannels: PER } });
  });
  after(() => h.close());

  it('drain - channels move ROUTER_DRAIN_BATCH_CHANNELS at a time, each batch placed before the next is handed off', async () => {
    const ids = Array.from({ length: 2 * PER + 1 }, (_, i) => `db${i}`);
    await h.store.db.query(`INSERT INTO channels (id, tenant_id) SELECT unnest($1::text[]), $2`, [ids, T]);
    await Promise.all(ids.map((id) => h.router.assign(id)));
    assert.equal(h.shard.channels.length, ids.length);
    const other = await h.newShard('s-other');
    await h.waitFor(async () => (await h.router.membership()).some((m) => m.id === other.id));
    // Every control request either shard gets, in order: a handoff is a `release` with `handoff` to the drained shard.
    const steps: string[] = [];
    const watch = (shard: string) =>
      h.bus.subscribe(h.subjects.shardCtl(shard), (msg) => {
        const m = decodeControl(ShardControl, msg.data);
        if (m.op === 'release' && 'channels' in m && m.handoff) steps.push(`handoff ${m.channels.length}`);
        else if (m.op === 'acquire' && 'channels' in m) steps.push(`acquire ${m.channels.length}`);
      });
    const subs = [watch(h.shard.id), watch(other.id)];
    try {
      await h.shard.drain();
    } finally {
      for (const s of subs) s.unsubscribe();
    }
    assert.deepEqual(steps, [`handoff ${PER}`, `acquire ${PER}`, `handoff ${PER}`, `acquire ${PER}`, 'handoff 1', 'acquire 1']);
    assert.deepEqual(h.shard.channels, []);
    assert.equal(other.channels.length, ids.length, 'every channel moved to the other shard');
  });
});
