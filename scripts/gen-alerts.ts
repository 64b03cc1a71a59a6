/**
 * Writes k8s/alerts/prometheusrule.yaml (a PrometheusRule of the Prometheus
 * operator) from k8s/alerts/crowdplay-rules.yaml (the plain rules file that
 * promtool and a Prometheus `rule_files` entry read): the same groups under
 * `spec`. `npm run docs:alerts`. test/deploy/alerts.test.ts fails when the
 * written file differs from what this renders.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, stringify } from 'yaml';

const ROOT = join(fileURLToPath(import.meta.url), '..', '..');
/** The rules file that is edited (repository-relative). */
export const RULES_FILE = 'k8s/alerts/crowdplay-rules.yaml';
/** The generated PrometheusRule (repository-relative). */
export const PROMETHEUS_RULE_FILE = 'k8s/alerts/prometheusrule.yaml';

const HEADER = `# Generated from ${RULES_FILE} by \`npm run docs:alerts\`; do not edit.
# The crowdplay alert rules as a PrometheusRule (Prometheus operator, CRD
# monitoring.coreos.com/v1). Applied by the k8s/overlays/prod-alerts overlay, or
# alone: kubectl -n crowdplay apply -f ${PROMETHEUS_RULE_FILE}
# The operator loads it when its Prometheus's ruleSelector matches these labels
# (kube-prometheus-stack's default wants release: <its release name>).
`;

/** One rule group as promtool reads it (`groups[]` of a rules file). */
export interface RuleGroup {
  name: string;
  rules: Array<Record<string, unknown>>;
  [k: string]: unknown;
}

/**
 * The groups of a rules file's text.
 * @param rulesText YAML with a top-level `groups:` list
 * @returns the groups, as parsed
 * @throws Error when the text is not YAML or has no non-empty `groups` list
 */
export function ruleGroups(rulesText: string): RuleGroup[] {
  const doc = parse(rulesText) as { groups?: unknown } | null;
  if (!doc || !Array.isArray(doc.groups) || doc.groups.length === 0) throw new Error('the rules file has no `groups:` list');
  return doc.groups as RuleGroup[];
}

/**
 * The PrometheusRule carrying the groups of `rulesText`, as YAML text
 * (header comment, then one document).
 * @param rulesText the plain rules file's text (see {@link ruleGroups})
 * @throws Error as {@link ruleGroups}
 */
export function renderPrometheusRule(rulesText: string): string {
  const rule = {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: {
      name: 'crowdplay',
      labels: { 'app.kubernetes.io/name': 'crowdplay-alerts', 'app.kubernetes.io/part-of': 'crowdplay' },
    },
    spec: { groups: ruleGroups(rulesText) },
  };
  return HEADER + stringify(rule, { lineWidth: 0, singleQuote: true });
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  writeFileSync(join(ROOT, PROMETHEUS_RULE_FILE), renderPrometheusRule(readFileSync(join(ROOT, RULES_FILE), 'utf8')));
  console.log(`${PROMETHEUS_RULE_FILE} regenerated from ${RULES_FILE}`);
}
