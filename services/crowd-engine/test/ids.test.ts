import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { IdAllocator, type IdBlock } from '../src/ids.ts';

/** A sequencer whose answers the test releases in any order: blocks are numbered in request order (as Postgres would commit them). */
function fakeSequencer(size: number): { lease: () => Promise<IdBlock>; pending: Array<() => void>; high: () => number } {
  let high = 0;
  const pending: Array<() => void> = [];
  return {
    pending,
    high: () => high,
    lease: () => {
      const b = { first: high + 1, last: high + size };
      high += size;
      return new Promise((resolve) => pending.push(() => resolve(b)));
    },
  };
}

async function drainAll(ids: IdAllocator, seq: { pending: Array<() => void> }): Promise<number> {
  for (;;) {
    const id = ids.take();
    if (id !== null) return id;
    const p = ids.ready();
    while (seq.pending.length > 0) seq.pending.shift()!();
    await p;
  }
}

describe('IdAllocator', () => {
  it('ids rise strictly and a renew lifts them above every block leased before it', async () => {
    const seq = fakeSequencer(10);
    const ids = new IdAllocator(seq.lease, 3);
    const r = ids.renew();
    seq.pending.shift()!();
    await r;
    const seen: number[] = [];
    for (let i = 0; i < 5; i++) seen.push(await drainAll(ids, seq));
    const highBefore = seq.high();
    const renew = ids.renew();
    while (seq.pending.length > 0) seq.pending.shift()!();
    await renew;
    const after = await drainAll(ids, seq);
    assert.ok(after > highBefore, `after renew ${after} > every id leased before it (${highBefore})`);
    seen.push(after);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i]! > seen[i - 1]!, `${seen[i]} after ${seen[i - 1]}`);
  });

  it('out-of-order answers: a background refill answered after a later renew never makes ids go down', async () => {
    const seq = fakeSequencer(5);
    const ids = new IdAllocator(seq.lease, 4);
    const first = ids.renew();
    seq.pending.shift()!(); // block 1..5
    await first;
    assert.equal(ids.take(), 1);
    assert.equal(ids.take(), 2); // 3 left < 4: a refill is requested (block 6..10), not answered yet
    assert.equal(seq.pending.length, 1);
    const renew = ids.renew(); // block 11..15 requested after the refill
    seq.pending[1]!(); // the renew answers first
    await renew;
    seq.pending[0]!(); // then the refill (6..10): below the block in use, dropped
    seq.pending.length = 0;
    await ids.ready();
    const got: number[] = [];
    for (let i = 0; i < 12; i++) got.push(await drainAll(ids, seq));
    assert.equal(got[0], 11, 'the first id after the renew is from its block');
    for (let i = 1; i < got.length; i++) assert.ok(got[i]! > got[i - 1]!, `${got[i]} after ${got[i - 1]}`);
    assert.ok(!got.some((x) => x >= 3 && x <= 10), 'no id from the dropped block or the rest of the old one');
    assert.ok(ids.dropped >= 1);
  });

  it('renews asked while one is in flight share one lease, sent after it answers: ids above every block before them', async () => {
    const seq = fakeSequencer(5);
    const ids = new IdAllocator(seq.lease, 1);
    const a = ids.renew(); // 1..5
    const b = ids.renew();
    const c = ids.renew();
    assert.equal(b, c, 'the later callers share one renew');
    assert.equal(seq.pending.length, 1, 'and it is not sent while the first is in flight');
    seq.pending.shift()!();
    await a;
    for (let i = 0; i < 10 && seq.pending.length < 1; i++) await Promise.resolve();
    assert.equal(seq.pending.length, 1, 'one lease for both, requested after their calls');
    seq.pending.shift()!();
    await b;
    const x = await drainAll(ids, seq);
    assert.ok(x >= 6, `id ${x} is from the shared later block (6..10), above a's`);
    const d = ids.renew();
    assert.equal(seq.pending.length, 1, 'a renew with none in flight is sent at once');
    seq.pending.shift()!();
    await d;
    assert.ok((await drainAll(ids, seq)) >= 11);
  });

  it('a lease error surfaces from renew and leaves the allocator usable', async () => {
    let fail = true;
    let high = 0;
    const ids = new IdAllocator(() => {
      if (fail) return Promise.reject(new Error('sequencer down'));
      high += 3;
      return Promise.resolve({ first: high - 2, last: high });
    }, 1);
    await assert.rejects(ids.renew(), /sequencer down/);
    assert.equal(ids.take(), null);
    fail = false;
    await ids.renew();
    assert.equal(ids.take(), 1, 'the first block that was leased');
  });
});
