import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  METRICS_BEGIN,
  METRICS_END,
  metricsTable,
  renderMetricsTable,
  EXPORTER_SERIES_NAMES,
  exportedSeriesNames,
  Metrics,
  metricCatalogue,
  prometheusType,
  type MetricDefinition,
  type MetricName,
} from '../src/index.ts';

const catalogue: readonly MetricDefinition[] = metricCatalogue;
const root = fileURLToPath(new URL('../../../', import.meta.url));

/** `# HELP`, `# TYPE` and `# UNIT` of each family, and the series names, of a Prometheus text exposition. */
function families(text: string): {
  help: Map<string, string>;
  type: Map<string, string>;
  unit: Map<string, string>;
  series: Set<string>;
} {
  const help = new Map<string, string>();
  const type = new Map<string, string>();
  const unit = new Map<string, string>();
  const series = new Set<string>();
  for (const line of text.split('\n')) {
    const meta = /^# (HELP|TYPE|UNIT) (\S+) (.*)$/.exec(line);
    if (meta) {
      const [, kind, name, rest] = meta as unknown as [string, string, string, string];
      const value = rest.replace(/\\n/g, '\n').replace(/\\\\/g, '\\');
      (kind === 'HELP' ? help : kind === 'TYPE' ? type : unit).set(name, value);
    } else if (line !== '' && !line.startsWith('#')) series.add(/^[^{ ]+/.exec(line)![0]);
  }
  return { help, type, unit, series };
}

/** One label set of `d`: the first value of each bounded label, a placeholder for an open one. */
function sampleLabels(d: MetricDefinition): Record<string, string> {
  return Object.fromEntries(Object.entries(d.labels).map(([k, v]) => [k, typeof v === 'string' ? 'x' : (v[0] ?? 'x')]));
}

/** Registers `d` on `m` by its catalogued type and records one value. */
function registerAndRecord(m: Metrics, d: MetricDefinition): void {
  const attrs = sampleLabels(d);
  const name = d.name as never;
  switch (d.type) {
    case 'counter':
      return m.counter(name).add(1, attrs);
    case 'upDownCounter':
      return m.upDown(name).add(1, attrs);
    case 'histogram':
      return m.histogram(name).record(1, attrs);
    case 'gauge':
      return void m.gauge(name, () => [[1, attrs]]);
    case 'observableCounter':
      return void m.observableCounter(name, () => [[1, attrs]]);
  }
}

describe('catalogue - entries', () => {
  it('catalogue - names are unique crowdplay_ names; counters end in _total and nothing else does', () => {
    const names = catalogue.map((d) => d.name);
    assert.equal(new Set(names).size, names.length, 'a name is declared twice');
    for (const d of catalogue) {
      assert.match(d.name, /^crowdplay_[a-z0-9]+(_[a-z0-9]+)*$/, d.name);
      assert.equal(d.name.endsWith('_total'), prometheusType(d) === 'counter', `${d.name}: a ${d.type}`);
    }
  });

  it('catalogue - histograms carry increasing buckets, other types none; help is one line; labels are snake or camel case', () => {
    for (const d of catalogue) {
      if (d.type === 'histogram') {
        assert.ok(d.buckets && d.buckets.length > 0, `${d.name} has no buckets`);
        assert.ok(
          d.buckets.every((b, i) => i === 0 || b > d.buckets![i - 1]!),
          `${d.name} buckets increase`,
        );
      } else assert.equal(d.buckets, undefined, `${d.name} is a ${d.type} with buckets`);
      assert.ok(d.help.length > 0 && !d.help.includes('\n'), `${d.name} help`);
      for (const [label, values] of Object.entries(d.labels)) {
        assert.match(label, /^[a-z][a-zA-Z_]*$/, `${d.name} label ${label}`);
        if (typeof values !== 'string') assert.equal(new Set(values).size, values.length, `${d.name}{${label}} repeats a value`);
      }
    }
  });

  it('catalogue - a former name belongs to a running total and is no current name', () => {
    const names = new Set(catalogue.map((d) => d.name));
    const former = catalogue.filter((d) => d.formerly !== undefined);
    assert.ok(former.length > 0);
    for (const d of former) {
      assert.equal(prometheusType(d), 'counter', `${d.name} was renamed but is no counter`);
      assert.ok(!names.has(d.formerly!), `${d.name}: its former name ${d.formerly} is current`);
    }
  });

  it('catalogue - exportedSeriesNames: every counter and gauge name, a histogram as _bucket, _sum and _count only', () => {
    const series = exportedSeriesNames();
    assert.equal(new Set(series).size, series.length);
    const histograms = catalogue.filter((d) => d.type === 'histogram');
    assert.equal(series.length, catalogue.length + 2 * histograms.length);
    assert.ok(series.includes('crowdplay_intents_total'));
    assert.ok(series.includes('crowdplay_connections'));
    for (const suffix of ['_bucket', '_sum', '_count']) assert.ok(series.includes(`crowdplay_act_ack_ms${suffix}`), suffix);
    assert.ok(!series.includes('crowdplay_act_ack_ms'), 'no series carries a bare histogram name');
  });
});

describe('catalogue - registration', () => {
  it('metrics - every catalogued metric is exposed with its catalogued type, help and unit, and nothing else is', async () => {
    const m = new Metrics({ service: 'catalogue-test' });
    try {
      for (const d of catalogue) registerAndRecord(m, d);
      const got = families(await m.prometheusText());
      const exported = [...got.type.keys()].filter((n) => !EXPORTER_SERIES_NAMES.includes(n));
      assert.deepEqual(exported.sort(), catalogue.map((d) => d.name).sort());
      for (const d of catalogue) {
        assert.equal(got.type.get(d.name), prometheusType(d), `${d.name} TYPE`);
        assert.equal(got.help.get(d.name), d.help, `${d.name} HELP`);
        assert.equal(got.unit.get(d.name), d.unit === '1' ? undefined : d.unit, `${d.name} UNIT`);
      }
      const series = new Set([...exportedSeriesNames(), ...EXPORTER_SERIES_NAMES]);
      for (const s of got.series) assert.ok(series.has(s), `series ${s} is not in exportedSeriesNames()`);
    } finally {
      await m.close();
    }
  });

  it('metrics - a name not in the catalogue throws RangeError, and nothing is registered', async () => {
    const m = new Metrics({ service: 'catalogue-test' });
    try {
      const unknown = 'crowdplay_not_catalogued_total' as MetricName as never;
      assert.throws(() => m.counter(unknown), { name: 'RangeError', message: /crowdplay_not_catalogued_total is not in the catalogue/ });
      assert.throws(() => m.histogram(unknown), RangeError);
      assert.throws(() => m.gauge(unknown, () => 1), RangeError);
      assert.throws(() => m.observableCounter(unknown, () => 1), RangeError);
      assert.throws(() => m.upDown(unknown), RangeError);
      assert.doesNotMatch(await m.prometheusText(), /crowdplay_not_catalogued/);
    } finally {
      await m.close();
    }
  });

  it('metrics - a catalogued name registered as another type throws TypeError, and nothing is registered', async () => {
    const m = new Metrics({ service: 'catalogue-test' });
    try {
      assert.throws(() => m.counter('crowdplay_act_ack_ms' as never), {
        name: 'TypeError',
        message: 'metric crowdplay_act_ack_ms is a histogram in the catalogue, not a counter',
      });
      assert.throws(() => m.gauge('crowdplay_intents_total' as never, () => 1), TypeError);
      assert.throws(() => m.observableCounter('crowdplay_shard_channels' as never, () => 1), TypeError);
      assert.throws(() => m.histogram('crowdplay_connections' as never), TypeError);
      assert.throws(() => m.upDown('crowdplay_batches_total' as never), TypeError);
      const text = await m.prometheusText();
      for (const name of [
        'crowdplay_act_ack_ms',
        'crowdplay_intents_total',
        'crowdplay_shard_channels',
        'crowdplay_connections',
        'crowdplay_batches_total',
      ])
        assert.doesNotMatch(text, new RegExp(`^# TYPE ${name} `, 'm'), name);
    } finally {
      await m.close();
    }
  });

  it('docs - the metric table in docs/operations.md matches the catalogue', () => {
    const doc = readFileSync(`${root}docs/operations.md`, 'utf8');
    assert.equal(renderMetricsTable(doc), doc, 'docs/operations.md metric table drifted: run `npm run docs:settings`');
  });

  it('docs - metricsTable: one row per metric, histograms with their series, renamed ones with their former name', () => {
    const rows = metricsTable()
      .split('\n')
      .filter((l) => l.startsWith('| `crowdplay_'));
    assert.equal(rows.length, catalogue.length);
    assert.ok(rows.some((r) => r.startsWith('| `crowdplay_act_ack_ms` (`_bucket`, `_sum`, `_count`) | histogram | ms |')));
    assert.ok(
      rows.some(
        (r) =>
          r.startsWith('| `crowdplay_wallet_reloads_total` | counter (read at scrape) |') &&
          r.includes('formerly `crowdplay_wallet_reloads`'),
      ),
    );
    assert.ok(rows.some((r) => r.includes('`outcome`: accepted, dropped_over_cap, refused; `reason`: the error code, when refused')));
  });

  it('docs - renderMetricsTable replaces only the text between the markers; no markers throws', () => {
    const doc = `# Ops\n\nprose before\n${METRICS_BEGIN}\nstale table\n${METRICS_END}\nprose after\n`;
    const out = renderMetricsTable(doc);
    assert.equal(out, `# Ops\n\nprose before\n${METRICS_BEGIN}\n${metricsTable()}\n${METRICS_END}\nprose after\n`);
    assert.equal(renderMetricsTable(out), out, 'rendering twice changes nothing');
    const bare = '# Ops\n\nno markers\n';
    assert.throws(() => renderMetricsTable(bare), { message: 'no metrics markers in the document' });
    assert.throws(() => renderMetricsTable(`${METRICS_END}\n${METRICS_BEGIN}\n`), /no metrics markers/);
  });
});
