import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { testSchema, type TestSchema } from '@crowdplay/testing';
import { openStore, type Store } from '../src/index.ts';

describe('event log (Postgres)', () => {
  let schema: TestSchema;
  let store: Store;
  before(async () => {
    schema = await testSchema();
    store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 2, pgliteDir: 'memory' });
    await store.tenants.create('acme', 'Acme');
    await store.channels.ensure('room', 'acme');
    await store.channels.ensure('hall', 'acme');
  });
  after(async () => {
    await store?.close();
    await schema?.drop();
  });

  it('append and since - events after the resume point, oldest first, with the limit and the floor', async () => {
    const epoch = await store.channels.acquire('room', 's1');
    await store.events.append([10, 20, 30, 40].map((ev) => ({ channel: 'room', eventId: ev, epoch, kind: 'batch', body: `{"ev":${ev}}` })));
    await store.events.append([{ channel: 'room', eventId: 20, epoch, kind: 'batch', body: 'replayed' }]); // ignored
    const s = await store.events.since('room', 15, 2);
    assert.deepEqual(
      s.events.map((e) => [e.eventId, e.body]),
      [
        [20, '{"ev":20}'],
        [30, '{"ev":30}'],
      ],
    );
    assert.equal(s.more, true);
    assert.equal(s.floor, 0);
    assert.deepEqual((await store.events.since('room', 40, 5)).events, []);
    await assert.rejects(store.events.since('room', 0, 0), RangeError);
  });

  it('fencing - an append drops the rows of a channel at a stale epoch, names it, and writes the others', async () => {
    const old = (await store.channels.get('room'))!.epoch;
    const hallEpoch = await store.channels.acquire('hall', 's1');
    await store.channels.acquire('room', 's2');
    const stale = await store.events.append([
      { channel: 'hall', eventId: 50, epoch: hallEpoch, kind: 'batch', body: 'h' },
      { channel: 'room', eventId: 50, epoch: old, kind: 'batch', body: 'stale' },
      { channel: 'room', eventId: 51, epoch: old, kind: 'batch', body: 'stale' },
      { channel: 'nowhere', eventId: 50, epoch: 1, kind: 'batch', body: 'unknown' },
    ]);
    assert.deepEqual(stale, ['nowhere', 'room']);
    assert.deepEqual((await store.events.since('room', 40, 5)).events, [], 'nothing of the stale channel');
    assert.deepEqual(
      (await store.events.since('hall', 0, 5)).events.map((e) => [e.eventId, e.body]),
      [[50, 'h']],
    );
    assert.deepEqual((await store.events.since('nowhere', 0, 5)).events, []);
  });

  it('latestMany - the newest event of a kind per channel, one query', async () => {
    const m = await store.events.latestMany(['room', 'hall', 'nowhere'], 'batch');
    assert.equal(m.get('room')?.eventId, 40);
    assert.equal(m.get('hall')?.eventId, 50);
    assert.equal(m.has('nowhere'), false);
    assert.equal((await store.events.latestMany([], 'batch')).size, 0);
  });

  it('prune - deletes the oldest past the cutoff, at most maxRows per pass, and raises the floors', async () => {
    const hallEpoch = (await store.channels.get('hall'))!.epoch;
    await store.events.append([1, 2, 3].map((ev) => ({ channel: 'hall', eventId: ev, epoch: hallEpoch, kind: 'batch', body: 'x' })));
    await assert.rejects(store.events.prune(new Date(), 0), RangeError);
    assert.equal(await store.events.prune(new Date(Date.now() - 60_000), 100), 0, 'nothing older than a minute');
    const cutoff = new Date(Date.now() + 1_000);
    assert.equal(await store.events.prune(cutoff, 3), 3, 'bounded: 3 of 8');
    assert.equal(await store.events.prune(cutoff, 100), 5);
    assert.equal(await store.events.floor('room'), 40);
    assert.equal(await store.events.floor('hall'), 50);
    assert.equal(await store.events.floor('nobody'), 0);
  });

  it('raiseFloor - only ever raises', async () => {
    await store.events.raiseFloor('hall', 2);
    assert.equal(await store.events.floor('hall'), 50);
    await store.events.raiseFloor('hall', 99);
    assert.equal(await store.events.floor('hall'), 99);
  });
});
