import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessBus, decodeJson, encodeJson, subjects as makeSubjects } from '@crowdplay/bus';
import { defaultConfig } from '@crowdplay/config';
import { openStore, type Store } from '@crowdplay/store';
import { createTelemetry } from '@crowdplay/telemetry';
import { testSchema, type TestSchema } from '@crowdplay/testing';
import { MAX_LEASE_SIZE, SequencerService, type LeaseReply } from '../src/index.ts';

describe('sequencer service (PostgreSQL)', () => {
  let schema: TestSchema;
  let store: Store;
  const bus = new InProcessBus();
  const subjects = makeSubjects(`seq${process.pid}`);
  const telemetry = createTelemetry({ service: 'sequencer-test', level: 'silent', refusalLogIntervalMs: 60_000 });
  let seq: SequencerService;

  before(async () => {
    schema = await testSchema();
    store = await openStore(defaultConfig({ db: { url: schema.databaseUrl, schema: schema.schema, poolMax: 4, pgliteDir: 'memory' } }).db);
    seq = new SequencerService({ bus, subjects, store, telemetry });
    await seq.start();
  });
  after(async () => {
    await seq.close();
    await store.close();
    await schema.drop();
    await telemetry.close();
  });

  const lease = async (size: unknown): Promise<LeaseReply> =>
    decodeJson<LeaseReply>((await bus.request(subjects.sequencerLease(), encodeJson({ size }), { timeoutMs: 5_000 })).data);

  it('concurrent leases share high-water-mark updates: disjoint blocks, in arrival order, the mark raised by their sum', async () => {
    const before = await store.sequencer.highWater();
    const sizes = Array.from({ length: 60 }, (_, i) => 1 + ((i * 37) % 50));
    const replies = await Promise.all(sizes.map((n) => lease(n)));
    let next = before + 1;
    replies.forEach((r, i) => {
      assert.equal(r.ok, true, JSON.stringify(r));
      if (!r.ok) return;
      assert.deepEqual([r.first, r.last], [next, next + sizes[i]! - 1], `request ${i} gets the block after request ${i - 1}'s`);
      next = r.last + 1;
    });
    assert.equal(await store.sequencer.highWater(), before + sizes.reduce((a, b) => a + b, 0));
    const text = await telemetry.metrics.prometheusText();
    const writes = Number(/crowdplay_sequencer_lease_writes_total\{[^}]*\} (\d+)/.exec(text)?.[1] ?? NaN);
    assert.ok(writes >= 1 && writes < sizes.length, `60 requests answered by ${writes} updates`);
  });

  it('a bad size is refused and changes nothing', async () => {
    const before = await store.sequencer.highWater();
    for (const bad of [0, -1, 1.5, MAX_LEASE_SIZE + 1, 'ten', null]) {
      const r = await lease(bad);
      assert.equal(r.ok, false, `size ${String(bad)}`);
    }
    assert.equal(await store.sequencer.highWater(), before);
    const ok = await lease(3);
    assert.deepEqual(ok, { ok: true, first: before + 1, last: before + 3 });
  });
});
