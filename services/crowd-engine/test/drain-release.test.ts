/**
 * A shard's drain when no other shard can take its channels (the whole cluster stopping): what is left is
 * released in batches, not one channel at a time.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CONTROL_BATCH_MAX, decodeAssignments } from '@crowdplay/protocol';
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
