import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Attributes, Counter } from '@opentelemetry/api';
import { Metrics, SummedCounter, SUMMED_LABEL_SETS_MAX } from '../src/index.ts';

/** Every series of `name` in one scrape: its labels as written (the exporter's scope label left out), and its value. */
async function series(m: Metrics, name: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const line of (await m.prometheusText()).split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(name.length, at).replace(/,?otel_scope_name="[^"]*"/, ''), Number(line.slice(at + 1)));
  }
  return out;
}

describe('telemetry - counters summed until read', () => {
  it('each read shows every add made before it, once; label sets in any order are one series', async () => {
    const m = new Metrics({ service: 'test' });
    try {
      const c = m.counter('crowdplay_intents_total');
      c.add(1, { outcome: 'accepted' });
      c.add(2, { outcome: 'accepted' });
      c.add(1, { outcome: 'refused', reason: 'CP_ERR_INTENT_NO_GAME' });
      c.add(4, { reason: 'CP_ERR_INTENT_NO_GAME', outcome: 'refused' });
      assert.deepEqual(
        await series(m, 'crowdplay_intents_total'),
        new Map([
          ['{outcome="accepted"}', 3],
          ['{outcome="refused",reason="CP_ERR_INTENT_NO_GAME"}', 5],
        ]),
      );
      c.add(10, { outcome: 'accepted' });
      const again = await series(m, 'crowdplay_intents_total');
      assert.equal(again.get('{outcome="accepted"}'), 13, 'the second read adds only what came after the first');
      assert.equal(again.get('{outcome="refused",reason="CP_ERR_INTENT_NO_GAME"}'), 5);
      assert.equal(m.counter('crowdplay_intents_total'), c, 'one counter per name');
    } finally {
      await m.close();
    }
  });

  it('bad adds change nothing; label sets past the limit and labels that are not plain values still count', async () => {
    const m = new Metrics({ service: 'test' });
    try {
      const c = m.counter('crowdplay_refusals_total');
      c.add(2, { area: 'a', reason: 'r' });
      c.add(-1, { area: 'a', reason: 'r' });
      c.add(Number.NaN, { area: 'a', reason: 'r' });
      c.add(Number.POSITIVE_INFINITY, { area: 'a', reason: 'r' });
      assert.deepEqual(await series(m, 'crowdplay_refusals_total'), new Map([['{area="a",reason="r"}', 2]]));
      c.add(3, { area: 'list', reason: ['x', 'y'] });
      const listed = await series(m, 'crowdplay_refusals_total');
      assert.equal([...listed.entries()].find(([k]) => k.includes('area="list"'))?.[1], 3, 'a list label: counted by the SDK');
      // Past the limit the SDK takes the adds (and folds the series past its own limit, the same, into its overflow series).
      for (let i = 0; i < SUMMED_LABEL_SETS_MAX + 10; i++) c.add(1, { area: 'many', reason: `r${i}` });
      c.add(1, { area: 'many', reason: `r${SUMMED_LABEL_SETS_MAX + 5}` });
      const all = await series(m, 'crowdplay_refusals_total');
      let total = 0;
      for (const v of all.values()) total += v;
      assert.equal(total, 2 + 3 + SUMMED_LABEL_SETS_MAX + 11, 'every add counted once, in a series of its own or the overflow');
      assert.equal(all.get(`{area="many",reason="r0"}`), 1);
      assert.equal(all.get('{area="a",reason="r"}'), 2);
    } finally {
      await m.close();
    }
  });
  it('label sets stay apart whatever their values spell: separators, types, undefined', () => {
    const got: Array<[number, Attributes | undefined]> = [];
    const sdk = { add: (v: number, a?: Attributes) => void got.push([v, a]) } as Counter;
    const c = new SummedCounter(sdk);
    const sets: Attributes[] = [
      { area: 'x', reason: 'y' },
      { area: 'x\u0001reason\u0000sy' },
      { area: '1:x', reason: 'y' },
      { area: '1', reason: 1 },
      { area: '1', reason: '1' },
      { area: '1', reason: true },
      { area: '1', reason: 'true' },
      { area: 'a', reason: undefined },
      { area: 'a' },
      { 'area:1': 'a' },
    ];
    for (const [i, a] of sets.entries()) c.add(i + 1, a);
    c.add(100, { area: 'x', reason: 'y' });
    assert.deepEqual(got, [], 'nothing reaches the SDK before a flush');
    c.flush();
    assert.deepEqual(
      got,
      sets.map((a, i) => [i === 0 ? 101 : i + 1, a]),
    );
    got.length = 0;
    c.flush();
    assert.deepEqual(got, [], 'a flush with nothing new adds nothing');
  });
});
