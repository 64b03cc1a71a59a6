/**
 * Offline checks of the k8s/ manifests: `kubectl kustomize` renders an
 * overlay, kubernetes-models (4.x: runs on Node 20) validates every object
 * against the Kubernetes OpenAPI schemas, and `manifestProblems` checks the
 * deployment's own invariants.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { leaves, schema, type Setting } from '@crowdplay/config';

/** Where kubectl is expected (the machine's package); PATH is searched too. */
export const KUBECTL_PATHS = ['/usr/bin/kubectl', '/usr/local/bin/kubectl'];

// Loose shapes: the objects are checked by the schema validator first.
/* eslint-disable @typescript-eslint/no-explicit-any */
export type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; [k: string]: any }; [k: string]: any };

/**
 * Renders `dir` with `kubectl kustomize` and parses every document.
 * @throws Error naming the fix when kubectl is not installed, or with kubectl's stderr when the build fails
 */
export function kustomize(dir: string): K8sObject[] {
  const kubectl =
    KUBECTL_PATHS.find((p) => existsSync(p)) ??
    (spawnSync('sh', ['-c', 'command -v kubectl'], { encoding: 'utf8' }).stdout.trim() || undefined);
  if (!kubectl)
    throw new Error(
      `kubectl not found (looked in ${KUBECTL_PATHS.join(', ')} and PATH): install it (e.g. the Debian package kubernetes-client or https://kubernetes.io/docs/tasks/tools/) to validate k8s/`,
    );
  const r = spawnSync(kubectl, ['kustomize', dir], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`kubectl kustomize ${dir} failed (exit ${r.status}):\n${r.stderr}`);
  return parseAllDocuments(r.stdout)
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null);
}

/**
 * Validates each object with kubernetes-models' class for its apiVersion and kind.
 * @returns one line per invalid or unknown object (empty when all are valid)
 */
export async function schemaProblems(objects: readonly K8sObject[]): Promise<string[]> {
  const problems: string[] = [];
  for (const o of objects) {
    const at = `${o.kind}/${o.metadata?.name}`;
    const mod = `kubernetes-models/${o.apiVersion}`;
    let cls: (new (x: unknown) => { validate(): void }) | undefined;
    try {
      cls = ((await import(mod)) as Record<string, new (x: unknown) => { validate(): void }>)[o.kind];
    } catch {
      cls = undefined;
    }
    if (!cls) {
      problems.push(`${at}: no schema for ${o.apiVersion} ${o.kind}`);
      continue;
    }
    try {
      new cls(o).validate();
    } catch (err) {
      problems.push(`${at}: ${(err as Error).message}`);
    }
  }
  return problems;
}

/** Every env name libs/config reads, those marked secret, and each name's setting. */
export function settingNames(): { all: Set<string>; secret: Set<string>; byName: Map<string, Setting<unknown>> } {
  const all = new Set<string>();
  const secret = new Set<string>();
  const byName = new Map<string, Setting<unknown>>();
  for (const { setting } of leaves(schema)) {
    all.add(setting.env);
    byName.set(setting.env, setting);
    if (setting.secret) secret.add(setting.env);
  }
  return { all, secret, byName };
}

/**
 * The Secret keys listed in docs/operations.md under "### Secrets": the first cell of each table row, in backticks.
 * @throws Error when the section is missing
 */
export function documentedSecretKeys(root: string): Set<string> {
  const text = readFileSync(join(root, 'docs/operations.md'), 'utf8');
  const start = text.indexOf('\n### Secrets');
  if (start < 0) throw new Error('docs/operations.md has no "### Secrets" section');
  const end = text.indexOf('\n#', start + 1);
  const section = text.slice(start, end < 0 ? undefined : end);
  return new Set([...section.matchAll(/^\| `([A-Z0-9_]+)` +\|/gm)].map((m) => m[1]!));
}

const WORKLOADS = new Set(['Deployment', 'StatefulSet', 'DaemonSet', 'Job', 'CronJob']);
const SHUTDOWN_DEFAULT_MS = Number(schema.gateway.shutdownMs.default);

function podSpec(o: K8sObject): any {
  return o.kind === 'CronJob' ? o.spec?.jobTemplate?.spec?.template?.spec : o.spec?.template?.spec;
}

/**
 * The deployment's invariants, one line per violation (empty when none):
 * - every container: cpu and memory requests and limits, readiness and liveness probes, non-root
 *   (runAsNonRoot on the pod or container, allowPrivilegeEscalation false, readOnlyRootFilesystem true, all
 *   capabilities dropped);
 * - every env name set (env, and the keys of ConfigMaps used with envFrom) is a setting of libs/config, and
 *   every literal value parses as that setting (what loadConfig would refuse at start-up is refused here);
 *   a secret setting comes only from a secretKeyRef; every secretKeyRef key is in `secretKeys` (the docs' list);
 * - terminationGracePeriodSeconds ≥ the preStop sleep + SHUTDOWN_DEADLINE_MS;
 * - only Services selecting the gateway are LoadBalancer / NodePort / externalIPs, Ingresses route only to
 *   the gateway Service; a default-deny ingress NetworkPolicy and one admitting the gateway exist;
 * - every workload has a PodDisruptionBudget; the gateway and board-renderer have HorizontalPodAutoscalers;
 *   the shards are a StatefulSet taking SHARD_ID from the pod name, gateways GATEWAY_ID from the pod name.
 */
export function manifestProblems(objects: readonly K8sObject[], secretKeys: ReadonlySet<string>): string[] {
  const problems: string[] = [];
  const { all, secret, byName } = settingNames();
  const configMaps = new Map(objects.filter((o) => o.kind === 'ConfigMap').map((o) => [o.metadata.name, o.data ?? {}]));
  const workloads = objects.filter((o) => WORKLOADS.has(o.kind));
  const nameOf = (o: K8sObject): string => o.spec?.selector?.matchLabels?.['app.kubernetes.io/name'] ?? o.metadata.name;

  for (const w of workloads) {
    const spec = podSpec(w);
    const at = `${w.kind}/${w.metadata.name}`;
    const podNonRoot = spec?.securityContext?.runAsNonRoot === true;
    for (const c of [...(spec?.initContainers ?? []), ...(spec?.containers ?? [])]) {
      const cat = `${at} container ${c.name}`;
      for (const kind of ['requests', 'limits'])
        for (const r of ['cpu', 'memory']) if (!c.resources?.[kind]?.[r]) problems.push(`${cat}: no ${r} ${kind}`);
      for (const p of ['readinessProbe', 'livenessProbe']) if (!c[p]) problems.push(`${cat}: no ${p}`);
      const sc = c.securityContext ?? {};
      if (!(podNonRoot || sc.runAsNonRoot === true) || sc.runAsNonRoot === false) problems.push(`${cat}: not runAsNonRoot`);
      if (sc.runAsUser === 0 || (spec?.securityContext?.runAsUser === 0 && sc.runAsUser === undefined))
        problems.push(`${cat}: runAsUser 0`);
      if (sc.allowPrivilegeEscalation !== false) problems.push(`${cat}: allowPrivilegeEscalation is not false`);
      if (sc.readOnlyRootFilesystem !== true) problems.push(`${cat}: readOnlyRootFilesystem is not true`);
      if (sc.privileged === true) problems.push(`${cat}: privileged`);
      if (!(sc.capabilities?.drop ?? []).includes('ALL')) problems.push(`${cat}: capabilities not dropped (drop: [ALL])`);

      const env = new Map<string, any>();
      for (const ef of c.envFrom ?? []) {
        if (ef.secretRef) problems.push(`${cat}: envFrom a Secret (name each key with secretKeyRef)`);
        const cm = ef.configMapRef ? configMaps.get(ef.configMapRef.name) : undefined;
        if (ef.configMapRef && !cm) problems.push(`${cat}: envFrom ConfigMap ${ef.configMapRef.name} is not in the manifests`);
        for (const [k, v] of Object.entries(cm ?? {})) env.set(k, { value: v, from: 'configMap' });
      }
      for (const e of c.env ?? []) env.set(e.name, e);
      for (const [name, e] of env) {
        if (!all.has(name)) problems.push(`${cat}: env ${name} is not a setting of libs/config`);
        const parsed = typeof e.value === 'string' ? byName.get(name)?.parse(e.value) : undefined;
        if (parsed && !parsed.ok) problems.push(`${cat}: env ${name}=${e.value}: ${parsed.error}`);
        const ref = e.valueFrom?.secretKeyRef;
        if (secret.has(name) && !ref) problems.push(`${cat}: secret setting ${name} not taken from a Secret`);
        if (ref && !secretKeys.has(ref.key)) problems.push(`${cat}: Secret key ${ref.key} is not listed in docs/operations.md "Secrets"`);
      }
      const deadlineMs = Number(env.get('SHUTDOWN_DEADLINE_MS')?.value ?? SHUTDOWN_DEFAULT_MS);
      const pre = c.lifecycle?.preStop;
      const preStopS = pre?.sleep?.seconds ?? (pre?.exec?.command?.[0] === 'sleep' ? Number(pre.exec.command[1]) : 0);
      const grace = spec?.terminationGracePeriodSeconds ?? 30;
      if (grace < preStopS + deadlineMs / 1000)
        problems.push(
          `${cat}: terminationGracePeriodSeconds ${grace} < preStop ${preStopS} s + SHUTDOWN_DEADLINE_MS ${deadlineMs / 1000} s`,
        );
      if (!pre) problems.push(`${cat}: no preStop`);
      // Prometheus scrapes /metrics on HEALTH_PORT at the pod's address: every process, a gateway's included.
      const healthPort = Number(env.get('HEALTH_PORT')?.value ?? 0);
      if (!(healthPort > 0)) problems.push(`${cat}: no HEALTH_PORT (no /metrics to scrape)`);
      else if (!(c.ports ?? []).some((p: any) => p.containerPort === healthPort))
        problems.push(`${cat}: HEALTH_PORT ${healthPort} is not a container port`);
      if (env.get('HEALTH_HOST')?.value !== '0.0.0.0') problems.push(`${cat}: HEALTH_HOST is not 0.0.0.0 (the listener stays on loopback)`);
    }
    const name = nameOf(w);
    const pdb = objects.find((o) => o.kind === 'PodDisruptionBudget' && o.spec?.selector?.matchLabels?.['app.kubernetes.io/name'] === name);
    if (!pdb) problems.push(`${at}: no PodDisruptionBudget`);
    const envOf = (n: string): any => spec?.containers?.[0]?.env?.find((e: any) => e.name === n);
    if (name === 'crowd-engine') {
      if (w.kind !== 'StatefulSet') problems.push(`${at}: the shards are not a StatefulSet`);
      if (envOf('SHARD_ID')?.valueFrom?.fieldRef?.fieldPath !== 'metadata.name') problems.push(`${at}: SHARD_ID not from the pod name`);
    }
    if (name === 'gateway' && envOf('GATEWAY_ID')?.valueFrom?.fieldRef?.fieldPath !== 'metadata.name')
      problems.push(`${at}: GATEWAY_ID not from the pod name`);
  }
  for (const name of ['gateway', 'router', 'sequencer', 'crowd-engine', 'telegram-sender', 'board-renderer'])
    if (!workloads.some((w) => nameOf(w) === name)) problems.push(`no workload for ${name}`);
  for (const name of ['gateway', 'board-renderer'])
    if (!objects.some((o) => o.kind === 'HorizontalPodAutoscaler' && o.spec?.scaleTargetRef?.name === name))
      problems.push(`no HorizontalPodAutoscaler for ${name}`);

  const gatewayServices = new Set<string>();
  for (const s of objects.filter((o) => o.kind === 'Service')) {
    const isGateway = s.spec?.selector?.['app.kubernetes.io/name'] === 'gateway';
    if (isGateway) gatewayServices.add(s.metadata.name);
    const exposed = ['LoadBalancer', 'NodePort'].includes(s.spec?.type) || (s.spec?.externalIPs ?? []).length > 0;
    if (exposed && !isGateway) problems.push(`Service/${s.metadata.name}: exposed outside the cluster (${s.spec?.type}) but not a gateway`);
  }
  for (const ing of objects.filter((o) => o.kind === 'Ingress')) {
    const backends = JSON.stringify(ing.spec ?? {}).match(/"service":\{"name":"[^"]+"/g) ?? [];
    for (const b of backends) {
      const svc = b.slice(b.lastIndexOf('"', b.length - 2) + 1, -1);
      if (!gatewayServices.has(svc)) problems.push(`Ingress/${ing.metadata.name}: routes to ${svc}, not a gateway Service`);
    }
  }
  const policies = objects.filter((o) => o.kind === 'NetworkPolicy');
  const denyAll = policies.some(
    (p) =>
      Object.keys(p.spec?.podSelector ?? {}).length === 0 &&
      (p.spec?.policyTypes ?? []).includes('Ingress') &&
      (p.spec?.ingress ?? []).length === 0,
  );
  if (!denyAll) problems.push('no default-deny ingress NetworkPolicy (podSelector {}, policyTypes [Ingress], no rules)');
  const open = policies.filter((p) => (p.spec?.ingress ?? []).some((r: any) => !r.from || r.from.length === 0));
  if (!open.some((p) => p.spec?.podSelector?.matchLabels?.['app.kubernetes.io/name'] === 'gateway'))
    problems.push('no NetworkPolicy admitting the gateways from anywhere');
  for (const p of open)
    if (p.spec?.podSelector?.matchLabels?.['app.kubernetes.io/name'] !== 'gateway')
      problems.push(`NetworkPolicy/${p.metadata.name}: admits traffic from anywhere to pods that are not gateways`);
  return problems;
}
