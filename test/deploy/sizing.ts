/**
 * docs/scaling.md section 4 "Resources per service" is the source of the prod
 * overlay's sizing: `parseSizingTable` reads that table and `sizingProblems`
 * compares a rendered overlay with it, so the two cannot drift apart.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { K8sObject } from './manifests.ts';

/* eslint-disable @typescript-eslint/no-explicit-any */

/** One row of docs/scaling.md section 4. Quantities are kept as written (`750m`, `512Mi`). */
export type SizingRow = {
  /** first word of the service cell: the workload's name (`crowd-engine`), or the chart's (`NATS`) */
  service: string;
  /** true for rows marked `(chart)`: not a workload of ours, not in the overlay */
  chart: boolean;
  /** replicas at 500,000 viewers (the overlay's replicas and HPA minimum); NaN for a chart's row not written `N / M` */
  replicas: number;
  /** replicas at 1,000,000 viewers (the overlay's HPA maximum) */
  replicas1M: number;
  /** `HPA on CPU N %` in the replicas cell: the HPA's target average CPU utilisation, percent */
  hpaCpuPercent?: number;
  cpu: { request: string; limit: string };
  memory: { request: string; limit: string };
  /** every `NAME=value` (in backticks) anywhere in the row: env settings the container must have */
  settings: Map<string, string>;
};

const SECTION = /^## 4\. Resources per service.*$/m;

/**
 * Parses the table of docs/scaling.md section 4 (its first Markdown table).
 * Columns are found by their headers (`service`, `replicas …`, `CPU request …`, `memory request …`);
 * the replicas cell reads `N / M …`, the CPU and memory cells `request / limit …`.
 * @param text the whole of docs/scaling.md
 * @throws Error naming the section, header or row (and cell) that does not have that shape
 */
export function parseSizingTable(text: string): SizingRow[] {
  const head = SECTION.exec(text);
  if (!head) throw new Error('docs/scaling.md has no "## 4. Resources per service" section');
  const rest = text.slice(head.index + head[0].length);
  const next = rest.search(/^## /m);
  const lines = (next < 0 ? rest : rest.slice(0, next)).split('\n');
  const first = lines.findIndex((l) => l.startsWith('|'));
  if (first < 0) throw new Error('docs/scaling.md section 4 has no table');
  const table: string[] = [];
  for (const l of lines.slice(first)) {
    if (!l.startsWith('|')) break;
    table.push(l);
  }
  const cells = (l: string): string[] =>
    l
      .slice(1, l.trimEnd().endsWith('|') ? l.trimEnd().length - 1 : undefined)
      .split('|')
      .map((c) => c.trim());
  const header = cells(table[0]!);
  const col = (re: RegExp): number => {
    const i = header.findIndex((h) => re.test(h));
    if (i < 0) throw new Error(`docs/scaling.md section 4: no column matching ${re} in ${JSON.stringify(header)}`);
    return i;
  };
  const cService = col(/^service$/i);
  const cReplicas = col(/^replicas/i);
  const cCpu = col(/^CPU request/i);
  const cMemory = col(/^memory request/i);
  const rows: SizingRow[] = [];
  for (const line of table.slice(2)) {
    const c = cells(line);
    const service = c[cService]?.split(/\s+/)[0] ?? '';
    const at = `docs/scaling.md section 4, row ${JSON.stringify(service)}`;
    const chart = /\(chart\)/.test(c[cService] ?? '');
    // A chart's row (NATS: "3 nodes") is not ours to deploy and may read otherwise.
    const rep = /^(\d[\d,]*) \/ (\d[\d,]*)(?!\d)/.exec(c[cReplicas] ?? '') ?? (chart ? ['', 'NaN', 'NaN'] : null);
    if (!service || !rep) throw new Error(`${at}: replicas cell ${JSON.stringify(c[cReplicas])} is not "N / M …" (500,000 / 1,000,000)`);
    const pair = (cell: string | undefined, what: string): { request: string; limit: string } => {
      const m = /^(\S+) \/ (\S+)/.exec(cell ?? '');
      if (!m) throw new Error(`${at}: ${what} cell ${JSON.stringify(cell)} is not "request / limit"`);
      return { request: m[1]!, limit: m[2]! };
    };
    const hpa = /HPA on CPU (\d+) ?%/.exec(c[cReplicas]!);
    rows.push({
      service,
      chart,
      replicas: Number(rep[1]!.replace(/,/g, '')),
      replicas1M: Number(rep[2]!.replace(/,/g, '')),
      ...(hpa ? { hpaCpuPercent: Number(hpa[1]) } : {}),
      cpu: pair(c[cCpu], 'CPU'),
      memory: pair(c[cMemory], 'memory'),
      settings: new Map([...line.matchAll(/`([A-Z][A-Z0-9_]*)=([^`]*)`/g)].map((m) => [m[1]!, m[2]!])),
    });
  }
  if (rows.length === 0) throw new Error('docs/scaling.md section 4: the table has no rows');
  return rows;
}

/** `parseSizingTable` of `<root>/docs/scaling.md`. */
export function sizingTable(root: string): SizingRow[] {
  return parseSizingTable(readFileSync(join(root, 'docs/scaling.md'), 'utf8'));
}

/**
 * A Kubernetes quantity as a number: CPU in millicores (`1` → 1000, `750m` → 750, `0.5` → 500),
 * memory in bytes (`512Mi`, `1Gi`, `500M`, plain bytes). NaN when it is neither.
 */
export function quantity(q: string | number | undefined, kind: 'cpu' | 'memory'): number {
  const m = /^(\d+(?:\.\d+)?)([a-zA-Z]*)$/.exec(String(q ?? '').trim());
  if (!m) return NaN;
  const n = Number(m[1]);
  const units: Record<string, number> =
    kind === 'cpu' ? { '': 1000, m: 1 } : { '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 };
  const u = units[m[2]!];
  return u === undefined ? NaN : n * u;
}

const WORKLOADS = new Set(['Deployment', 'StatefulSet']);

/**
 * Compares a rendered overlay with the section 4 table, one line per difference (empty when none):
 * each non-chart row has a Deployment or StatefulSet of that name whose replicas equal the 500,000 figure,
 * whose container (the one named like the service, else the first) has exactly the row's CPU and memory
 * requests and limits (compared as quantities: `1` = `1000m`) and every `NAME=value` of the row in its env;
 * an HPA on it runs from the 500,000 to the 1,000,000 figure (and at the row's CPU target, if it names one);
 * and every workload of the overlay has a row.
 */
export function sizingProblems(objects: readonly K8sObject[], rows: readonly SizingRow[]): string[] {
  const problems: string[] = [];
  const workloads = objects.filter((o) => WORKLOADS.has(o.kind));
  for (const w of workloads)
    if (!rows.some((r) => !r.chart && r.service === w.metadata.name))
      problems.push(`${w.kind}/${w.metadata.name}: no row in docs/scaling.md section 4`);
  for (const r of rows.filter((x) => !x.chart)) {
    const w = workloads.find((o) => o.metadata.name === r.service);
    if (!w) {
      problems.push(`row ${r.service}: no Deployment or StatefulSet ${r.service} in the overlay`);
      continue;
    }
    const at = `${w.kind}/${r.service}`;
    if (w.spec?.replicas !== r.replicas) problems.push(`${at}: replicas ${w.spec?.replicas}, the table says ${r.replicas}`);
    const containers: any[] = w.spec?.template?.spec?.containers ?? [];
    const c = containers.find((x) => x.name === r.service) ?? containers[0];
    for (const kind of ['cpu', 'memory'] as const)
      for (const [side, k8s] of [
        ['request', 'requests'],
        ['limit', 'limits'],
      ] as const) {
        const want = r[kind][side];
        const got = c?.resources?.[k8s]?.[kind];
        if (!(quantity(got, kind) === quantity(want, kind) && !Number.isNaN(quantity(want, kind))))
          problems.push(`${at}: ${kind} ${side} ${got}, the table says ${want}`);
      }
    for (const [name, value] of r.settings) {
      const e = (c?.env ?? []).find((x: any) => x.name === name);
      if (e?.value !== value) problems.push(`${at}: env ${name}=${e?.value}, the table says ${value}`);
    }
    const hpa = objects.find((o) => o.kind === 'HorizontalPodAutoscaler' && o.spec?.scaleTargetRef?.name === r.service);
    if (r.hpaCpuPercent !== undefined && !hpa) problems.push(`${at}: no HPA, the table says "HPA on CPU ${r.hpaCpuPercent} %"`);
    if (hpa) {
      const s = hpa.spec;
      if (s.minReplicas !== r.replicas)
        problems.push(`HPA/${hpa.metadata.name}: minReplicas ${s.minReplicas}, the table says ${r.replicas}`);
      if (s.maxReplicas !== r.replicas1M)
        problems.push(`HPA/${hpa.metadata.name}: maxReplicas ${s.maxReplicas}, the table says ${r.replicas1M} (1,000,000)`);
      if (r.hpaCpuPercent !== undefined) {
        const cpu = (s.metrics ?? []).find((m: any) => m.type === 'Resource' && m.resource?.name === 'cpu');
        const got = cpu?.resource?.target?.averageUtilization;
        if (got !== r.hpaCpuPercent) problems.push(`HPA/${hpa.metadata.name}: CPU target ${got} %, the table says ${r.hpaCpuPercent} %`);
      }
    }
  }
  return problems;
}
