import { test } from 'node:test';
import assert from 'node:assert/strict';
import { labelledMetrics, Metrics } from '../src/index.ts';

test('labelled metrics - two copies of one component export the same metrics under their own label, not over each other', async (t) => {
  const m = new Metrics({ service: 'labelled-test' });
  t.after(() => m.close());
  const plain = m;
  const a = labelledMetrics(m, { bot: '111' });
  const b = labelledMetrics(m, { bot: '222' });
  plain.counter('crowdplay_telegram_commands_total').add(1, { command: 'start' });
  a.counter('crowdplay_telegram_commands_total').add(2, { command: 'start' });
  b.counter('crowdplay_telegram_commands_total').add(5, { command: 'start' });
  plain.gauge('crowdplay_telegram_updates_queued', () => 1);
  a.gauge('crowdplay_telegram_updates_queued', () => 3);
  b.gauge('crowdplay_telegram_updates_queued', () => [[7, {}]]);
  a.histogram('crowdplay_telegram_call_ms').record(12);
  // The exporter's own scope label is dropped to compare.
  const text = (await m.prometheusText()).replace(/,?otel_scope_name="[^"]*"/g, '').replace(/\{\}/g, '');
  assert.match(text, /^crowdplay_telegram_commands_total\{command="start"\} 1$/m);
  assert.match(text, /^crowdplay_telegram_commands_total\{command="start",bot="111"\} 2$/m);
  assert.match(text, /^crowdplay_telegram_commands_total\{command="start",bot="222"\} 5$/m);
  assert.match(text, /^crowdplay_telegram_updates_queued 1$/m);
  assert.match(text, /^crowdplay_telegram_updates_queued\{bot="111"\} 3$/m);
  assert.match(text, /^crowdplay_telegram_updates_queued\{bot="222"\} 7$/m);
  assert.match(text, /^crowdplay_telegram_call_ms_count\{bot="111"\} 1$/m);
  assert.ok(a instanceof Metrics, 'the view is a Metrics');
});
