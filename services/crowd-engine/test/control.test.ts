import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { decodeJson } from '@crowdplay/bus';
import type { ShardControlReply } from '@crowdplay/protocol';
import { startHarness, type Harness } from './harness.ts';

/** crowdplay_refusals_total of the engine for `reason`, from the metrics the shard exports. */
async function refusals(h: Harness, reason: string): Promise<number> {
  const text = await h.telemetry.metrics.prometheusText();
  const line = text
    .split('\n')
    .find((l) => l.startsWith('crowdplay_refusals_total{') && l.includes(`reason="${reason}"`) && l.includes('area="engine"'));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

/** The shard's control subject, as the router calls it, with the reply decoded. */
async function ctl(h: Harness, body: unknown): Promise<ShardControlReply> {
  const raw = typeof body === 'string' ? body : JSON.stringify(body);
  const msg = await h.bus.request(h.subjects.shardCtl(h.shard.id), Buffer.from(raw), { timeoutMs: 5_000 });
  return decodeJson<ShardControlReply>(msg.data);
}

describe('shard control (bulk and bad input)', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
    for (const c of ['b1', 'b2', 'b3', 'b4']) await h.store.channels.ensure(c, 'acme');
  });
  after(() => h?.close());

  it('acquire batch - one request, one result per channel: ids leased once, channels served together', async () => {
    const epochs = await h.store.channels.acquireMany(['b1', 'b2'].map((channel) => ({ channel, shard: h.shard.id })));
    const r = await ctl(h, { v: 2, op: 'acquire', channels: ['b1', 'b2'].map((channel) => ({ channel, epoch: epochs.get(channel)! })) });
    assert.equal(r.ok, true);
    assert.deepEqual(r.ok && r.results?.map((x) => [x.channel, x.ok]), [
      ['b1', true],
      ['b2', true],
    ]);
    assert.deepEqual(h.shard.channels.sort(), ['b1', 'b2']);
    const owned = await ctl(h, { v: 2, op: 'owned' });
    assert.deepEqual(owned.ok && owned.owned?.sort(), ['b1', 'b2']);
  });

  it("bad input - an acquire at an epoch other than the row's, a duplicate, an unknown channel: refused per channel, counted, nothing changed", async () => {
    const epoch = (await h.store.channels.acquireMany([{ channel: 'b3', shard: h.shard.id }])).get('b3')!;
    const staleBefore = await refusals(h, 'CP_ERR_CHANNEL_STALE_EPOCH');
    const r = await ctl(h, {
      v: 2,
      op: 'acquire',
      channels: [
        { channel: 'b3', epoch: epoch - 1 },
        { channel: 'b4', epoch: 7 },
        { channel: 'nope', epoch: 1 },
      ],
    });
    assert.equal(r.ok, true);
    const codes = r.ok ? r.results!.map((x) => [x.channel, x.ok, x.code]) : [];
    assert.deepEqual(codes, [
      ['b3', false, 'CP_ERR_CHANNEL_STALE_EPOCH'],
      ['b4', false, 'CP_ERR_CHANNEL_STALE_EPOCH'],
      ['nope', false, 'CP_ERR_CHANNEL_UNKNOWN'],
    ]);
    const dup = await ctl(h, {
      v: 2,
      op: 'acquire',
      channels: [
        { channel: 'b3', epoch },
        { channel: 'b3', epoch },
      ],
    });
    assert.deepEqual(dup.ok && dup.results!.map((x) => [x.ok, x.code ?? null]), [
      [true, null],
      [false, 'CP_ERR_PROTO_INVALID'],
    ]);
    assert.deepEqual(h.shard.channels.sort(), ['b1', 'b2', 'b3'], 'b4 and nope not taken; b3 only at its epoch');
    assert.equal((await refusals(h, 'CP_ERR_CHANNEL_STALE_EPOCH')) - staleBefore, 2, 'each refusal counted');
    assert.equal((await h.store.channels.get('b4'))?.owner, null, 'nothing written for b4');
  });

  it('bad input - malformed, oversized, stale-version and invalid control messages are refused with a code and change nothing', async () => {
    const held = h.shard.channels.sort();
    const versionBefore = await refusals(h, 'CP_ERR_PROTO_VERSION');
    const cases: Array<[unknown, string]> = [
      ['{"op":', 'CP_ERR_PROTO_MALFORMED'],
      [{ v: 9, op: 'release', channels: ['b1'] }, 'CP_ERR_PROTO_VERSION'],
      [{ v: 2, op: 'release', channels: [] }, 'CP_ERR_PROTO_INVALID'],
      [{ v: 2, op: 'release', channels: Array.from({ length: 1_001 }, (_, i) => `c${i}`) }, 'CP_ERR_PROTO_INVALID'],
      [{ op: 'release', channel: 'b1', extra: true }, 'CP_ERR_PROTO_INVALID'],
      [{ op: 'acquire', channel: 'b4', epoch: 'x' }, 'CP_ERR_PROTO_INVALID'],
    ];
    for (const [body, code] of cases) {
      const r = await ctl(h, body);
      assert.deepEqual([r.ok, !r.ok && r.code], [false, code], JSON.stringify(body).slice(0, 80));
    }
    const huge = JSON.stringify({ v: 2, op: 'forget', channels: ['b1'], pad: 'x'.repeat(1_100_000) });
    const r = await ctl(h, huge);
    assert.deepEqual([r.ok, !r.ok && r.code], [false, 'CP_ERR_PROTO_TOO_BIG']);
    assert.deepEqual(h.shard.channels.sort(), held, 'nothing released or acquired');
    assert.equal((await refusals(h, 'CP_ERR_PROTO_VERSION')) - versionBefore, 1, 'counted');
    const rows = await h.store.channels.getMany(held);
    for (const c of held) assert.equal(rows.get(c)?.owner, h.shard.id);
  });

  it('release batch - owners cleared in one statement, one assignments message for the batch', async () => {
    const changes: unknown[] = [];
    const sub = h.bus.subscribe(h.subjects.routerAssignments(), (m) => changes.push(decodeJson(m.data)));
    const r = await ctl(h, { v: 2, op: 'release', channels: ['b1', 'b2', 'gone'] });
    assert.deepEqual(r.ok && r.results!.map((x) => x.ok), [true, true, true]);
    assert.deepEqual(h.shard.channels, ['b3']);
    const rows = await h.store.channels.getMany(['b1', 'b2']);
    assert.deepEqual([rows.get('b1')?.owner, rows.get('b2')?.owner], [null, null]);
    await h.bus.flush();
    assert.equal(changes.length, 1, 'one message for the batch');
    sub.unsubscribe();
  });

  it('acquire batch - the id lease for a channel that had an owner is asked for while the reads are in flight, not after them', async () => {
    await h.store.channels.ensure('b5', 'acme');
    await h.store.channels.acquireMany([{ channel: 'b5', shard: 'shard-gone' }]);
    const epoch = (await h.store.channels.acquireMany([{ channel: 'b5', shard: h.shard.id }])).get('b5')!;
    let leaseAsked!: () => void;
    const asked = new Promise<void>((r) => (leaseAsked = r));
    const sub = h.bus.subscribe(h.subjects.sequencerLease(), () => leaseAsked());
    // The shard's row read answers only once a lease request is on the bus (or fails after 3 s): a lease that waited
    // for the reads would never be asked.
    const getMany = h.store.channels.getMany.bind(h.store.channels);
    h.store.channels.getMany = async (ids) => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('no lease asked while the rows were read')), 3_000);
      });
      try {
        await Promise.race([asked, late]);
      } finally {
        clearTimeout(timer);
      }
      return getMany(ids);
    };
    try {
      const r = await ctl(h, { v: 2, op: 'acquire', channels: [{ channel: 'b5', epoch }] });
      assert.deepEqual(r.ok && r.results!.map((x) => [x.channel, x.ok, x.message ?? null]), [['b5', true, null]]);
      assert.ok(h.shard.channels.includes('b5'));
    } finally {
      h.store.channels.getMany = getMany;
      sub.unsubscribe();
    }
  });
  it('acquire batch - a channel at epoch 1 (never owned) is read for its row alone and leases no ids; one that had an owner both', async () => {
    for (const c of ['f1', 'f2', 'f3']) await h.store.channels.ensure(c, 'acme');
    const first = (await h.store.channels.acquireMany([{ channel: 'f1', shard: h.shard.id }])).get('f1')!;
    await h.store.channels.acquireMany([{ channel: 'f2', shard: 'shard-gone' }]);
    const moved = (await h.store.channels.acquireMany([{ channel: 'f2', shard: h.shard.id }])).get('f2')!;
    const third = (await h.store.channels.acquireMany([{ channel: 'f3', shard: h.shard.id }])).get('f3')!;
    assert.deepEqual([first, moved, third], [1, 2, 1]);
    const asked: Record<string, string[][]> = { snapshots: [], batches: [] };
    let leases = 0;
    const sub = h.bus.subscribe(h.subjects.sequencerLease(), () => void leases++);
    const loadSnapshots = h.store.channels.loadSnapshots.bind(h.store.channels);
    const latestMany = h.store.events.latestMany.bind(h.store.events);
    h.store.channels.loadSnapshots = (ids) => (asked.snapshots!.push([...ids]), loadSnapshots(ids));
    h.store.events.latestMany = (ids, kind) => (asked.batches!.push([...ids]), latestMany(ids, kind));
    try {
      const r = await ctl(h, {
        v: 2,
        op: 'acquire',
        channels: [
          { channel: 'f1', epoch: first },
          { channel: 'f2', epoch: moved },
        ],
      });
      assert.deepEqual(r.ok && r.results!.map((x) => [x.channel, x.ok]), [
        ['f1', true],
        ['f2', true],
      ]);
      assert.deepEqual(asked, { snapshots: [['f2']], batches: [['f2']] });
      await h.bus.flush();
      assert.equal(leases, 1, 'one lease for the batch with a moved channel');
      // A batch of first owners only, the shard holding ids from that lease: no read beyond the rows, no lease.
      const r3 = await ctl(h, { v: 2, op: 'acquire', channels: [{ channel: 'f3', epoch: third }] });
      assert.deepEqual(r3.ok && r3.results!.map((x) => [x.channel, x.ok]), [['f3', true]]);
      await h.bus.flush();
      assert.deepEqual([asked, leases], [{ snapshots: [['f2'], []], batches: [['f2'], []] }, 1]);
      assert.ok(['f1', 'f2', 'f3'].every((c) => h.shard.channels.includes(c)));
    } finally {
      h.store.channels.loadSnapshots = loadSnapshots;
      h.store.events.latestMany = latestMany;
      sub.unsubscribe();
    }
  });
});
