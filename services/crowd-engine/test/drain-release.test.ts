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

  it('drain - channels are handed off ROUTER_DRAIN_BATCH_CHANNELS at a time, each batch placed once it is handed off', async () => {
    const ids = Array.from({ length: 2 * PER + 1 }, (_, i) => `db${i}`);
    await h.store.db.query(`INSERT INTO channels (id, tenant_id) SELECT unnest($1::text[]), $2`, [ids, T]);
    await Promise.all(ids.map((id) => h.router.assign(id)));
    assert.equal(h.shard.channels.length, ids.length);
    const other = await h.newShard('s-other');
    await h.waitFor(async () => (await h.router.membership()).some((m) => m.id === other.id));
    // Every handoff (a `release` with `handoff` to the drained shard) and acquire either shard gets, in order.
    const handoffs: string[][] = [];
    const acquires: string[][] = [];
    const handedBefore: boolean[] = [];
    const watch = (shard: string) =>
      h.bus.subscribe(h.subjects.shardCtl(shard), (msg) => {
        const m = decodeControl(ShardControl, msg.data);
        if (m.op === 'release' && 'channels' in m && m.handoff) handoffs.push([...m.channels]);
        else if (m.op === 'acquire' && 'channels' in m) {
          const chans = m.channels.map((c) => c.channel);
          acquires.push(chans);
          handedBefore.push(chans.every((c) => handoffs.some((b) => b.includes(c))));
        }
      });
    const subs = [watch(h.shard.id), watch(other.id)];
    try {
      await h.shard.drain();
    } finally {
      for (const s of subs) s.unsubscribe();
    }
    assert.deepEqual(
      handoffs.map((b) => b.length),
      [PER, PER, 1],
      'handed off a batch at a time',
    );
    assert.deepEqual(acquires.map((b) => b.length).sort(), [1, PER, PER], 'each batch placed on its own');
    assert.deepEqual(handedBefore, [true, true, true], 'a batch is acquired only after its handoff');
    assert.deepEqual(h.shard.channels, []);
    assert.equal(other.channels.length, ids.length, 'every channel moved to the other shard');
  });
});

describe('shard drain past its deadline', () => {
  let h: Harness;
  before(async () => {
    // Ticks only when the drain closes them (the intents stay in the open tick); moves get 10 s − 9 s = 1 s.
    h = await startHarness({ engine: { tickMs: 10_000, drainFinalMs: 9_000 } });
  });
  after(() => h.close());

  it(
    'drain - channels not moved by SHUTDOWN_DEADLINE_MS − SHARD_DRAIN_FINAL_MS publish their acked intents and their final snapshots',
    { timeout: 20_000 },
    async () => {
      const ids = ['dl0', 'dl1', 'dl2'];
      await h.store.db.query(`INSERT INTO channels (id, tenant_id) SELECT unnest($1::text[]), $2`, [ids, T]);
      await Promise.all(ids.map((id) => h.router.assign(id)));
      for (const id of ids)
        assert.equal((await h.ctl(id, { op: 'declare', actions: [{ name: 'vote', options: ['a'], maxPerTick: 10 }] })).ok, true);
      ids.forEach((id, i) => h.send(id, [{ action: 'vote', option: 'a', seq: 7000 + i }]));
      await h.waitFor(() => ids.every((_, i) => h.acks.some((a) => a.seq === 7000 + i && a.ok)));
      assert.equal(h.batches.filter((b) => ids.includes(b.channel)).length, 0, 'the intents wait in the open ticks');
      // The router takes the drain request and never answers: a hung or overloaded one (the shard would wait 3 batch timeouts).
      await h.router.close();
      const held: number[] = [];
      const sub = h.bus.subscribe(h.subjects.routerCtl(), () => void held.push(1));
      try {
        await h.shard.drain();
      } finally {
        sub.unsubscribe();
      }
      assert.equal(held.length, 1, 'the drain asked the router');
      for (const id of ids) {
        const b = h.batches.find((x) => x.channel === id);
        assert.equal(b?.actions.vote?.intents.length, 1, `${id}: the acked intent reached the game`);
        assert.equal((await h.store.events.latest(id, 'batch'))?.eventId, b.ev, `${id}: and the event log`);
      }
      assert.deepEqual(h.shard.channels, []);
      // The owners stay recorded: the router places the channels once it declares this shard dead, as after a crash.
      const { rows } = await h.store.db.query<{ owner: string | null }>(`SELECT owner FROM channels WHERE id = ANY($1::text[])`, [ids]);
      assert.deepEqual(
        rows.map((r) => r.owner),
        ids.map(() => 's1'),
      );
      for (const id of ids) {
        const snap = await h.store.channels.loadSnapshot(id);
        assert.equal(
          (snap?.state as { tally?: { vote?: { a?: number } } }).tally?.vote?.a,
          1,
          `${id}: the final snapshot holds the intent`,
        );
      }
      assert.ok(
        h.logs.some(
          (l) => l.msg === 'drain: channels not moved in time; closing their ticks for the router to place them' && l.channels === 3,
        ),
      );
      assert.match(await h.telemetry.metrics.prometheusText(), /^crowdplay_drain_unmoved_channels_total(\{[^}]*\})? 3$/m);
    },
  );
});
