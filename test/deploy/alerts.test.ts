/**
 * k8s/alerts: the Prometheus alert rules for docs/operations.md "How you'd
 * notice: every limit". promtool (Debian's `prometheus` package) checks the
 * rules file and runs its unit tests; the PrometheusRule carries the same
 * groups and is what scripts/gen-alerts.ts renders; every metric an expr reads
 * is one crowdplay exports, every reason code is in the error catalogue, and
 * every rule names its runbook row, whose metrics include the rule's.
 */
import { exportedSeriesNames } from '@crowdplay/telemetry';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { ERRORS } from '@crowdplay/protocol';
import { ROOT } from '../helpers.ts';
import { kustomize } from './manifests.ts';
import { PROMETHEUS_RULE_FILE, RULES_FILE, renderPrometheusRule, ruleGroups, type RuleGroup } from '../../scripts/gen-alerts.ts';

/** Where promtool is expected (Debian's `prometheus` package); PATH is searched too. */
const PROMTOOL_PATHS = ['/usr/bin/promtool', '/usr/local/bin/promtool'];
const RULES_TEST_FILE = 'k8s/alerts/crowdplay-rules.test.yaml';
const OPERATIONS = 'docs/operations.md';
const RUNBOOK_HEADING = "How you'd notice: every limit";
const SEVERITIES = new Set(['critical', 'warning', 'info']);

/** Every Prometheus series name the product exports (the metrics catalogue in libs/telemetry). */
function seriesNames(): string[] {
  return exportedSeriesNames();
}

/** The executable of promtool. @throws Error naming the package when it is not installed */
function promtool(): string {
  const found =
    PROMTOOL_PATHS.find((p) => existsSync(p)) ??
    (spawnSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' }).stdout.trim() || undefined);
  if (!found)
    throw new Error(
      `promtool not found (looked in ${PROMTOOL_PATHS.join(', ')} and PATH): apt-get install prometheus (Debian) to check k8s/alerts`,
    );
  return found;
}

function runPromtool(args: string[]): { status: number | null; out: string } {
  const r = spawnSync(promtool(), args, { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

/** GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens. */
function anchorOf(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^a-z0-9 _-]/g, '')
    .replace(/ /g, '-');
}

interface RunbookRow {
  /** The first cell without backticks. */
  title: string;
  /** The settings written in backticks in the first cell. */
  settings: string[];
  /** The `crowdplay_…` names (a trailing `*` kept as a wildcard) and `CP_ERR_…` codes of the metric cell. */
  metrics: string[];
  codes: string[];
}

/** The rows of the table under RUNBOOK_HEADING in docs/operations.md. */
function runbookRows(markdown: string): RunbookRow[] {
  const start = markdown.indexOf(`\n## ${RUNBOOK_HEADING}\n`);
  assert.ok(start >= 0, `${OPERATIONS} has no section "## ${RUNBOOK_HEADING}"`);
  const end = markdown.indexOf('\n## ', start + 1);
  const rows: RunbookRow[] = [];
  for (const line of markdown.slice(start, end < 0 ? undefined : end).split('\n')) {
    if (!line.startsWith('| ') || line.startsWith('| limit (setting)')) continue;
    const cells = line.split(/(?<!\\)\|/).map((c) => c.trim());
    const [first, , metricCell] = [cells[1] ?? '', cells[2] ?? '', cells[3] ?? ''];
    rows.push({
      title: first.replace(/`/g, '').trim(),
      settings: [...first.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]!),
      metrics: [...metricCell.matchAll(/crowdplay_[a-z0-9_]*\*?/g)].map((m) => m[0]),
      codes: [...metricCell.matchAll(/CP_ERR_[A-Z0-9_]*\*?/g)].map((m) => m[0]),
    });
  }
  return rows;
}

/** The row a rule's `runbook` names: its title, or a setting only one row's first cell lists. */
function rowsNamed(rows: RunbookRow[], runbook: string): RunbookRow[] {
  const byTitle = rows.filter((r) => r.title === runbook);
  return byTitle.length > 0 ? byTitle : rows.filter((r) => r.settings.includes(runbook));
}

const PROMQL_WORDS = new Set([
  'and',
  'or',
  'unless',
  'bool',
  'offset',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'inf',
  'nan',
]);

/**
 * The metric names a PromQL expression selects: strings, label matchers,
 * ranges and grouping clauses removed, then every identifier that is not a
 * function or aggregation call (followed by `(`) nor a keyword.
 */
function exprMetrics(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set<string>();
  for (const m of bare.matchAll(/(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const rest = bare.slice(m.index + m[0].length);
    if (/^\s*\(/.test(rest) || PROMQL_WORDS.has(m[0].toLowerCase())) continue;
    names.add(m[0]);
  }
  return [...names];
}

/** The `CP_ERR_…` codes in an expression's `reason` matchers (values of `=`, `!=`, `=~`, `!~`, alternatives split). */
function exprReasonCodes(expr: string): string[] {
  return [...expr.matchAll(/\breason\s*!?[=~]~?\s*"([^"]*)"/g)].flatMap((m) => m[1]!.split('|')).filter((c) => c.startsWith('CP_ERR_'));
}

function baseName(series: string): string {
  return series.replace(/_(bucket|sum|count)$/, '');
}

/** A row mentions a metric by its name, or by a `prefix_*` wildcard. */
function rowMentions(row: RunbookRow, metric: string): boolean {
  return row.metrics.some((m) => (m.endsWith('*') ? metric.startsWith(m.slice(0, -1)) : m === metric));
}

/** Every problem of the rule groups, one string each, naming the rule. */
function rulesProblems(groups: RuleGroup[], series: ReadonlySet<string>, rows: RunbookRow[], runbookUrl: string): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const g of groups)
    for (const r of g.rules) {
      const name = typeof r.alert === 'string' ? r.alert : '';
      const at = `${g.name}/${name || '(no alert name)'}`;
      if (!/^Crowdplay[A-Z][A-Za-z0-9]+$/.test(name)) problems.push(`${at}: alert name is not Crowdplay<Name>`);
      if (seen.has(name)) problems.push(`${at}: alert name used twice`);
      seen.add(name);
      const expr = typeof r.expr === 'string' ? r.expr : '';
      if (!expr) problems.push(`${at}: no expr`);
      if (typeof r.for !== 'string' || !/^\d+[smh]$/.test(r.for)) problems.push(`${at}: no for`);
      const labels = (r.labels ?? {}) as Record<string, unknown>;
      if (!SEVERITIES.has(String(labels.severity)))
        problems.push(`${at}: severity ${String(labels.severity)} is not one of ${[...SEVERITIES].join(', ')}`);
      const ann = (r.annotations ?? {}) as Record<string, unknown>;
      if (typeof ann.summary !== 'string' || ann.summary.length < 20) problems.push(`${at}: no summary`);
      if (ann.runbook_url !== runbookUrl) problems.push(`${at}: runbook_url ${String(ann.runbook_url)} is not ${runbookUrl}`);
      const metrics = exprMetrics(expr);
      if (metrics.length === 0) problems.push(`${at}: the expr selects no metric`);
      for (const m of metrics) if (!series.has(m)) problems.push(`${at}: metric ${m} is not exported by crowdplay`);
      const codes = exprReasonCodes(expr);
      for (const c of codes) if (!(c in ERRORS)) problems.push(`${at}: reason ${c} is not in libs/protocol's error catalogue`);
      const runbook = typeof ann.runbook === 'string' ? ann.runbook : '';
      const named = rowsNamed(rows, runbook);
      if (named.length !== 1) problems.push(`${at}: runbook "${runbook}" names ${named.length} rows of ${OPERATIONS} "${RUNBOOK_HEADING}"`);
      else {
        const row = named[0]!;
        const shown = metrics.some((m) => rowMentions(row, baseName(m))) || codes.some((c) => row.codes.includes(c));
        if (!shown)
          problems.push(`${at}: the runbook row "${row.title}" mentions none of the expr's metrics (${metrics.join(', ')}) or reasons`);
      }
    }
  return problems;
}

const rulesText = readFileSync(join(ROOT, RULES_FILE), 'utf8');
const groups = (): RuleGroup[] => ruleGroups(rulesText);
const series: ReadonlySet<string> = new Set(seriesNames());
const rows = runbookRows(readFileSync(join(ROOT, OPERATIONS), 'utf8'));
const runbookUrl = `${OPERATIONS}#${anchorOf(RUNBOOK_HEADING)}`;

describe('k8s/alerts: promtool', () => {
  it('promtool check rules accepts the rules file and counts every rule', () => {
    const r = runPromtool(['check', 'rules', RULES_FILE]);
    assert.equal(r.status, 0, r.out);
    const count = groups().reduce((n, g) => n + g.rules.length, 0);
    assert.match(r.out, new RegExp(`SUCCESS: ${count} rules found`));
  });

  it('promtool test rules: the unit tests of crowdplay-rules.test.yaml pass', () => {
    const r = runPromtool(['test', 'rules', RULES_TEST_FILE]);
    assert.equal(r.status, 0, r.out);
    assert.match(r.out, /SUCCESS/);
  });

  it('promtool refuses a rule with broken PromQL, and a unit test whose alert does not fire', () => {
    const dir = mkdtempSync(join(tmpdir(), 'crowdplay-alerts-'));
    try {
      const broken = groups();
      broken[0]!.rules[0]!.expr = 'sum by (namespace) (rate(crowdplay_refusals_total[5m]) > 0';
      writeFileSync(join(dir, 'rules.yaml'), stringify({ groups: broken }));
      const r = runPromtool(['check', 'rules', join(dir, 'rules.yaml')]);
      assert.notEqual(r.status, 0, r.out);
      assert.match(r.out, /parse error|unclosed left parenthesis/);

      const tests = parse(readFileSync(join(ROOT, RULES_TEST_FILE), 'utf8')) as {
        rule_files: string[];
        tests: Array<Record<string, unknown>>;
      };
      const quiet = { ...tests, rule_files: [join(ROOT, RULES_FILE)], tests: [tests.tests[0]!] };
      const input = (quiet.tests[0]!.input_series as Array<{ values: string }>)[0]!;
      input.values = '0x20'; // no refusal: the expected alert must not fire
      writeFileSync(join(dir, 'quiet.test.yaml'), stringify(quiet));
      const t = runPromtool(['test', 'rules', join(dir, 'quiet.test.yaml')]);
      assert.notEqual(t.status, 0, t.out);
      assert.match(t.out, /FAILED/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    assert.equal(readFileSync(join(ROOT, RULES_FILE), 'utf8'), rulesText); // the file itself is untouched
  });
});

describe('k8s/alerts: the PrometheusRule', () => {
  const text = readFileSync(join(ROOT, PROMETHEUS_RULE_FILE), 'utf8');
  const doc = parse(text) as { apiVersion: string; kind: string; metadata: { name: string }; spec: { groups: RuleGroup[] } };

  it('is a monitoring.coreos.com/v1 PrometheusRule whose groups equal the rules file', () => {
    assert.equal(doc.apiVersion, 'monitoring.coreos.com/v1');
    assert.equal(doc.kind, 'PrometheusRule');
    assert.equal(doc.metadata.name, 'crowdplay');
    assert.deepEqual(doc.spec.groups, groups());
  });

  it('is what `npm run docs:alerts` writes (scripts/gen-alerts.ts)', () => {
    assert.equal(text, renderPrometheusRule(rulesText), `${PROMETHEUS_RULE_FILE} is stale: run npm run docs:alerts`);
  });

  it('a changed rule in either file makes the groups differ', () => {
    const changed = groups();
    changed[1]!.rules[0]!.for = '1m';
    assert.notDeepEqual(doc.spec.groups, changed);
    assert.notEqual(renderPrometheusRule(stringify({ groups: changed })), text);
  });

  it('only the prod-alerts overlay carries it: dev and prod apply without the operator', () => {
    const render = (o: string) => kustomize(join(ROOT, 'k8s/overlays', o));
    const prod = render('prod');
    assert.ok(!render('dev').some((d) => d.kind === 'PrometheusRule'));
    assert.ok(!prod.some((d) => d.kind === 'PrometheusRule'));
    const all = render('prod-alerts');
    assert.deepEqual(
      all.filter((d) => d.kind !== 'PrometheusRule'),
      prod,
      'prod-alerts is prod plus the PrometheusRule',
    );
    const withAlerts = all.filter((d) => d.kind === 'PrometheusRule');
    assert.equal(withAlerts.length, 1);
    assert.equal(withAlerts[0]!.metadata.namespace, 'crowdplay');
    assert.deepEqual(withAlerts[0]!.spec.groups, groups());
  });

  it('the rules file without groups is refused', () => {
    assert.throws(() => renderPrometheusRule('groups: []\n'), /no `groups:` list/);
    assert.throws(() => renderPrometheusRule('rules: {}\n'), /no `groups:` list/);
  });
});

describe('k8s/alerts: every rule reads real series and names its runbook row', () => {
  it('the series names are the exported ones (counters with _total, histograms as _bucket/_sum/_count)', () => {
    assert.ok(series.size > 100, `only ${series.size} series names`);
    for (const s of [
      'crowdplay_refusals_total',
      'crowdplay_event_loop_lag_ms',
      'crowdplay_router_live_shards',
      'crowdplay_ledger_commit_ms_bucket',
    ])
      assert.ok(series.has(s), s);
    assert.ok(!series.has('crowdplay_ledger_commit_ms'), 'a histogram has no series of its bare name');
  });

  it('the runbook table is read: its rows, their settings and metrics', () => {
    assert.ok(rows.length > 50, `only ${rows.length} rows`);
    const max = rows.find((r) => r.title === 'WS_MAX_CONNECTIONS');
    assert.deepEqual(max && { settings: max.settings, codes: max.codes }, {
      settings: ['WS_MAX_CONNECTIONS'],
      codes: ['CP_ERR_LIMIT_MAX_CONNECTIONS'],
    });
  });

  it('every rule: name, expr, for, severity, summary, runbook row, runbook_url; metrics exported; reasons in the catalogue', () => {
    assert.deepEqual(rulesProblems(groups(), series, rows, runbookUrl), []);
  });

  it('covers the refusals, event-loop lag, Telegram 429s and pauses, queue depths, shard liveness, ledger commits and gateway limits', () => {
    const read = new Set(groups().flatMap((g) => g.rules.flatMap((r) => exprMetrics(String(r.expr)).map(baseName))));
    for (const m of [
      'crowdplay_refusals_total',
      'crowdplay_event_loop_lag_ms',
      'crowdplay_sendq_rate_limited_total',
      'crowdplay_sendq_pause_ms_total',
      'crowdplay_sendq_depth',
      'crowdplay_render_queue_depth',
      'crowdplay_router_live_shards',
      'crowdplay_ledger_commit_ms',
      'crowdplay_connections_refused_total',
      'crowdplay_listen_overflows_total',
    ])
      assert.ok(read.has(m), `no rule reads ${m}`);
  });

  it('the expr reader finds metric names, not functions, keywords, labels or durations', () => {
    assert.deepEqual(
      exprMetrics(
        'histogram_quantile(0.99, sum by (namespace, le) (rate(crowdplay_a_ms_bucket{lane="tx"}[5m]))) > 1e3 and on (namespace) crowdplay_b offset 5m unless absent(crowdplay_c)',
      ).sort(),
      ['crowdplay_a_ms_bucket', 'crowdplay_b', 'crowdplay_c'],
    );
    assert.deepEqual(exprReasonCodes('x{reason=~"CP_ERR_A|CP_ERR_B",area="gateway"} + y{reason!="CP_ERR_C"}'), [
      'CP_ERR_A',
      'CP_ERR_B',
      'CP_ERR_C',
    ]);
  });

  it('a misspelt metric, an unknown reason, a runbook naming no row or the wrong row, a missing severity or for are caught', () => {
    const bad = groups();
    const rule = (alert: string) => bad.flatMap((g) => g.rules).find((r) => r.alert === alert)!;
    rule('CrowdplayNoLiveShards').expr = 'max by (namespace) (crowdplay_router_live_shard) == 0';
    rule('CrowdplayRouterNotScraped').expr = 'absent(crowdpaly_router_live_shards)';
    rule('CrowdplayLedgerCommitSlow').expr = 'histogram_quantile(0.99, sum by (le) (rate(crowdplay_ledger_commit_ms[5m]))) > 250';
    rule('CrowdplayGatewayConnectionsFull').expr = 'sum(rate(crowdplay_refusals_total{reason="CP_ERR_LIMIT_MAX_CONNECTION"}[5m])) > 0';
    (rule('CrowdplayShardOverloaded').annotations as Record<string, string>).runbook = 'SHARD_MAX_PENDING';
    (rule('CrowdplayTelegramPaused').annotations as Record<string, string>).runbook = 'WS_MAX_CONNECTIONS';
    delete (rule('CrowdplayEventLoopLagHigh').labels as Record<string, string>).severity;
    delete rule('CrowdplaySendQueueFull').for;
    const problems = rulesProblems(bad, series, rows, runbookUrl);
    const shardTimeoutRow = rows.find((r) => r.settings[0] === 'ROUTER_SHARD_TIMEOUT_MS')!.title;
    for (const p of [
      'crowdplay-routing/CrowdplayNoLiveShards: metric crowdplay_router_live_shard is not exported by crowdplay',
      'crowdplay-routing/CrowdplayRouterNotScraped: metric crowdpaly_router_live_shards is not exported by crowdplay',
      'crowdplay-ledger/CrowdplayLedgerCommitSlow: metric crowdplay_ledger_commit_ms is not exported by crowdplay',
      "crowdplay-gateway/CrowdplayGatewayConnectionsFull: reason CP_ERR_LIMIT_MAX_CONNECTION is not in libs/protocol's error catalogue",
      `crowdplay-saturation/CrowdplayShardOverloaded: runbook "SHARD_MAX_PENDING" names 0 rows of ${OPERATIONS} "${RUNBOOK_HEADING}"`,
      'crowdplay-telegram/CrowdplayTelegramPaused: the runbook row "WS_MAX_CONNECTIONS" mentions none of the expr\'s metrics (crowdplay_sendq_pause_ms_total) or reasons',
      'crowdplay-saturation/CrowdplayEventLoopLagHigh: severity undefined is not one of critical, warning, info',
      'crowdplay-telegram/CrowdplaySendQueueFull: no for',
      // and, as a consequence, the rows no longer show what the broken exprs read:
      'crowdplay-gateway/CrowdplayGatewayConnectionsFull: the runbook row "WS_MAX_CONNECTIONS" mentions none of the expr\'s metrics (crowdplay_refusals_total) or reasons',
      `crowdplay-routing/CrowdplayRouterNotScraped: the runbook row "${shardTimeoutRow}" mentions none of the expr's metrics (crowdpaly_router_live_shards) or reasons`,
      `crowdplay-routing/CrowdplayNoLiveShards: the runbook row "${shardTimeoutRow}" mentions none of the expr's metrics (crowdplay_router_live_shard) or reasons`,
    ])
      assert.ok(problems.includes(p), `${p}\nnot in ${JSON.stringify(problems, null, 1)}`);
    assert.equal(problems.length, 11, JSON.stringify(problems, null, 1));
    assert.deepEqual(rulesProblems(groups(), series, rows, runbookUrl), []); // the parsed file itself is unchanged
  });
});
