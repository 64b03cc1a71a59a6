import { test } from 'node:test';
import assert from 'node:assert/strict';
import { main } from '../bench/cluster.bench.ts';

test('bench cluster - bad arguments throw before anything starts', async () => {
  const cases: Array<[string[], RegExp]> = [
    [['--only', 'nats,bogus'], /--only: unknown part "bogus"/],
    [['--only', 'shard'], /--only shard needs router/],
    [['--channels', '10', '--intent-channels', '11'], /--intent-channels must be ≤ --channels/],
    [['--seconds', '0'], /--seconds must be an integer ≥ 1/],
    [['--batch', '1.5'], /--batch must be an integer ≥ 1/],
    [['--concurrency', 'x'], /--concurrency must be an integer ≥ 1/],
  ];
  for (const [args, re] of cases) {
    await assert.rejects(main(args), (err: unknown) => err instanceof Error && re.test(err.message), args.join(' '));
  }
});
