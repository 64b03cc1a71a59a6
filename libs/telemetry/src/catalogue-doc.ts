import { metricCatalogue, prometheusType, type LabelValues, type MetricDefinition, type MetricUnit } from './catalogue.ts';

/** The markers around the generated metric table in docs/operations.md. */
export const METRICS_BEGIN = '<!-- metrics:begin -->';
export const METRICS_END = '<!-- metrics:end -->';

const UNIT_NAMES: Record<MetricUnit, string> = { ms: 'ms', s: 's', By: 'bytes', '1': '—', '1/s': 'per s' };

const TYPE_NAMES: Record<MetricDefinition['type'], string> = {
  counter: 'counter',
  observableCounter: 'counter (read at scrape)',
  upDownCounter: 'gauge (up/down counter)',
  gauge: 'gauge (read at scrape)',
  histogram: 'histogram',
};

const cell = (s: string): string => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');

function labelCell(labels: Readonly<Record<string, LabelValues>>): string {
  const parts = Object.entries(labels).map(([k, v]) => `\`${k}\`: ${typeof v === 'string' ? v : v.join(', ')}`);
  return parts.length === 0 ? '—' : cell(parts.join('; '));
}

/**
 * The catalogue as a Markdown table after a line naming its source, one row per metric in catalogue order: name (a histogram's with its
 * `_bucket`/`_sum`/`_count` series), type, unit, labels with their values, help, and the former name of a renamed one.
 */
export function metricsTable(): string {
  const rows = metricCatalogue.map((d: MetricDefinition) => {
    const name = prometheusType(d) === 'histogram' ? `\`${d.name}\` (\`_bucket\`, \`_sum\`, \`_count\`)` : `\`${d.name}\``;
    const help = d.formerly === undefined ? d.help : `${d.help} (formerly \`${d.formerly}\`, a gauge)`;
    return `| ${name} | ${TYPE_NAMES[d.type]} | ${UNIT_NAMES[d.unit]} | ${labelCell(d.labels)} | ${cell(help)} |`;
  });
  return [
    'Every metric a process exports, from libs/telemetry/src/catalogue.ts (`npm run docs:settings` regenerates this table):',
    '',
    '| name | type | unit | labels | help |',
    '|---|---|---|---|---|',
    ...rows,
  ].join('\n');
}

/**
 * `doc` with the text between {@link METRICS_BEGIN} and {@link METRICS_END} replaced by {@link metricsTable}.
 * @throws Error when the markers are missing or out of order
 */
export function renderMetricsTable(doc: string): string {
  const a = doc.indexOf(METRICS_BEGIN);
  const b = doc.indexOf(METRICS_END);
  if (a < 0 || b < a) throw new Error('no metrics markers in the document');
  return `${doc.slice(0, a + METRICS_BEGIN.length)}\n${metricsTable()}\n${doc.slice(b)}`;
}
