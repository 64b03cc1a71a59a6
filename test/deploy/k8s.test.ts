/**
 * k8s/, offline: both overlays render with `kubectl kustomize`, every object
 * validates against the Kubernetes schemas (kubernetes-models), the
 * deployment's invariants hold (test/deploy/manifests.ts), and deliberately
 * broken manifests are reported.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ROOT } from '../helpers.ts';
import { documentedSecretKeys, kustomize, manifestProblems, schemaProblems, type K8sObject } from './manifests.ts';
import { parseSizingTable, quantity, sizingProblems, sizingTable, type SizingRow } from './sizing.ts';

const secretKeys = documentedSecretKeys(ROOT);

for (const overlay of ['dev', 'prod']) {
  describe(`k8s/overlays/${overlay}`, () => {
    const objects = kustomize(`${ROOT}/k8s/overlays/${overlay}`);

    it('renders with kubectl kustomize and every object validates against the Kubernetes schemas', async () => {
      assert.ok(objects.length >= 20, `only ${objects.length} objects`);
      assert.deepEqual(await schemaProblems(objects), []);
    });

    it('holds the invariants: resources, probes, non-root, known settings, documented Secret keys, drain time, exposure, PDBs, HPAs', () => {
      assert.deepEqual(manifestProblems(objects, secretKeys), []);
    });

    it('commits no Secret object (values live outside the repository)', () => {
      assert.deepEqual(
        objects.filter((o) => o.kind === 'Secret').map((o) => o.metadata.name),
        [],
      );
    });
  });
}

describe('the docs list every Secret key the manifests use, and only those', () => {
  it('the secretKeyRef keys of both overlays equal docs/operations.md "Secrets"', () => {
    const used = new Set<string>();
    for (const overlay of ['dev', 'prod'])
      for (const m of JSON.stringify(kustomize(`${ROOT}/k8s/overlays/${overlay}`)).matchAll(/"secretKeyRef":\{[^}]*"key":"([^"]+)"/g))
        used.add(m[1]!);
    assert.deepEqual([...used].sort(), [...secretKeys].sort());
  });
});

describe('broken manifests are reported', () => {
  const fresh = (): K8sObject[] => kustomize(`${ROOT}/k8s/overlays/prod`);
  const find = (objs: K8sObject[], kind: string, name: string): K8sObject => objs.find((o) => o.kind === kind && o.metadata.name === name)!;

  it('a metrics listener Prometheus cannot reach: HEALTH_HOST left on loopback, the gateway without its health port', () => {
    const objs = fresh();
    const gw = find(objs, 'Deployment', 'gateway').spec.template.spec;
    gw.containers[0].ports = gw.containers[0].ports.filter((p: { name: string }) => p.name !== 'health');
    const cm = objs.find((o) => o.kind === 'ConfigMap')!;
    delete cm.data.HEALTH_HOST;
    const problems = manifestProblems(objs, secretKeys);
    assert.ok(problems.includes('Deployment/gateway container gateway: HEALTH_PORT 9090 is not a container port'), problems.join('\n'));
    assert.ok(
      problems.includes('StatefulSet/crowd-engine container crowd-engine: HEALTH_HOST is not 0.0.0.0 (the listener stays on loopback)'),
      problems.join('\n'),
    );
  });

  it('a container without limits, an unknown env name, a value the setting refuses (env or ConfigMap), an undocumented Secret key, a secret in plain text, a short grace period', () => {
    const objs = fresh();
    const gw = find(objs, 'Deployment', 'gateway').spec.template.spec;
    delete gw.containers[0].resources.limits;
    gw.containers[0].env.push({ name: 'TICK_MSS', value: '250' });
    gw.containers[0].env.push({ name: 'PUZZLE_SECRET', value: 'in-the-repo' });
    find(objs, 'ConfigMap', objs.find((o) => o.kind === 'ConfigMap')!.metadata.name).data.LOG_LEVEL = 'loud';
    gw.containers[0].env.push({ name: 'TICK_MS', value: 'fast' });
    const shard = find(objs, 'StatefulSet', 'crowd-engine').spec.template.spec;
    shard.containers[0].env.push({ name: 'LOG_LEVEL', valueFrom: { secretKeyRef: { name: 'crowdplay-secrets', key: 'NOT_DOCUMENTED' } } });
    shard.terminationGracePeriodSeconds = 30;
    delete shard.containers[0].readinessProbe;
    shard.containers[0].securityContext.allowPrivilegeEscalation = true;
    const problems = manifestProblems(objs, secretKeys);
    for (const p of [
      /Deployment\/gateway container gateway: no cpu limits/,
      /Deployment\/gateway container gateway: no memory limits/,
      /env TICK_MSS is not a setting of libs\/config/,
      /secret setting PUZZLE_SECRET not taken from a Secret/,
      /container gateway: env LOG_LEVEL=loud: must be one of/,
      /container gateway: env TICK_MS=fast: expected an integer/,
      /Secret key NOT_DOCUMENTED is not listed/,
      /StatefulSet\/crowd-engine container crowd-engine: terminationGracePeriodSeconds 30 < preStop 2 s \+ SHUTDOWN_DEADLINE_MS 60 s/,
      /crowd-engine: no readinessProbe/,
      /crowd-engine: allowPrivilegeEscalation is not false/,
    ])
      assert.ok(
        problems.some((x) => p.test(x)),
        `${p} not in ${JSON.stringify(problems, null, 1)}`,
      );
    assert.deepEqual(manifestProblems(fresh(), secretKeys), []); // the rendered manifests themselves are unchanged
  });

  it('a non-gateway Service exposed, an Ingress to a shard, no default-deny NetworkPolicy, no HPA, a missing PDB', () => {
    const objs = fresh().filter(
      (o) =>
        !(o.kind === 'NetworkPolicy' && o.metadata.name === 'default-deny-ingress') &&
        !(o.kind === 'HorizontalPodAutoscaler' && o.metadata.name === 'board-renderer') &&
        !(o.kind === 'PodDisruptionBudget' && o.metadata.name === 'router'),
    );
    find(objs, 'Service', 'crowd-engine').spec.type = 'LoadBalancer';
    objs.push({
      apiVersion: 'networking.k8s.io/v1',
      kind: 'Ingress',
      metadata: { name: 'oops' },
      spec: {
        rules: [
          { http: { paths: [{ path: '/', pathType: 'Prefix', backend: { service: { name: 'crowd-engine', port: { number: 9090 } } } }] } },
        ],
      },
    });
    const problems = manifestProblems(objs, secretKeys);
    for (const p of [
      /Service\/crowd-engine: exposed outside the cluster \(LoadBalancer\) but not a gateway/,
      /Ingress\/oops: routes to crowd-engine/,
      /no default-deny ingress NetworkPolicy/,
      /no HorizontalPodAutoscaler for board-renderer/,
      /Deployment\/router: no PodDisruptionBudget/,
    ])
      assert.ok(
        problems.some((x) => p.test(x)),
        `${p} not in ${JSON.stringify(problems, null, 1)}`,
      );
  });

  // kubernetes-models 4 checks types, enums and required fields; it does not refuse unknown fields (k8s/README.md).
  it('schema violations (replicas as a string, a Service without its port) fail validation', async () => {
    const objs = fresh();
    find(objs, 'Deployment', 'gateway').spec.replicas = 'many';
    delete find(objs, 'Service', 'gateway').spec.ports[0].port;
    const problems = await schemaProblems(objs);
    assert.ok(
      problems.some((p) => /Deployment\/gateway: .*replicas must be integer/.test(p)),
      JSON.stringify(problems),
    );
    assert.ok(
      problems.some((p) => /Service\/gateway: .*must have required property '?port'?/.test(p)),
      JSON.stringify(problems),
    );
  });
});

describe('k8s/overlays/prod is docs/scaling.md section 4 "Resources per service"', () => {
  const rows = sizingTable(ROOT);
  const prod = (): K8sObject[] => kustomize(`${ROOT}/k8s/overlays/prod`);
  const find = (objs: K8sObject[], kind: string, name: string): K8sObject => objs.find((o) => o.kind === kind && o.metadata.name === name)!;

  it('the table has a row for every service (and NATS as a chart), with figures', () => {
    assert.deepEqual(
      rows.map((r) => [r.service, r.chart]),
      [
        ['gateway', false],
        ['crowd-engine', false],
        ['router', false],
        ['sequencer', false],
        ['board-renderer', false],
        ['telegram-sender', false],
        ['NATS', true],
      ],
    );
    for (const r of rows.filter((x) => !x.chart)) {
      assert.ok(
        Number.isInteger(r.replicas) && r.replicas >= 1 && r.replicas1M >= r.replicas,
        `${r.service}: ${r.replicas} / ${r.replicas1M}`,
      );
      for (const q of [r.cpu.request, r.cpu.limit]) assert.ok(quantity(q, 'cpu') > 0, `${r.service}: cpu ${q}`);
      for (const q of [r.memory.request, r.memory.limit]) assert.ok(quantity(q, 'memory') > 0, `${r.service}: memory ${q}`);
    }
    const gw = rows.find((r) => r.service === 'gateway')!;
    assert.ok(gw.hpaCpuPercent! > 0 && gw.hpaCpuPercent! <= 100, `gateway HPA target ${gw.hpaCpuPercent}`);
    assert.ok(gw.settings.has('WS_MAX_CONNECTIONS'));
  });

  it('replicas, HPA bounds, CPU and memory requests and limits, and the settings of each row match the rendered overlay', () => {
    assert.deepEqual(sizingProblems(prod(), rows), []);
  });

  it('a drift in any of them is reported; an equal quantity written differently is not', () => {
    const row = (name: string): SizingRow => rows.find((r) => r.service === name)!;
    const [gw, shard, seq, renderer, router] = ['gateway', 'crowd-engine', 'sequencer', 'board-renderer', 'router'].map(row) as SizingRow[];
    const objs = prod();
    const container = (kind: string, name: string) => find(objs, kind, name).spec.template.spec.containers[0];
    find(objs, 'Deployment', 'gateway').spec.replicas = gw!.replicas + 1;
    find(objs, 'HorizontalPodAutoscaler', 'gateway').spec.maxReplicas = gw!.replicas1M + 1;
    find(objs, 'HorizontalPodAutoscaler', 'gateway').spec.metrics[0].resource.target.averageUtilization = gw!.hpaCpuPercent! - 10;
    const ws = gw!.settings.get('WS_MAX_CONNECTIONS')!;
    container('Deployment', 'gateway').env.find((e: { name: string }) => e.name === 'WS_MAX_CONNECTIONS').value = `${ws}0`;
    container('StatefulSet', 'crowd-engine').resources.limits.memory = '12345Mi';
    container('Deployment', 'sequencer').resources.requests.cpu = '7';
    find(objs, 'HorizontalPodAutoscaler', 'board-renderer').spec.minReplicas = renderer!.replicas + 1;
    container('Deployment', 'router').resources.requests.cpu = String(quantity(router!.cpu.request, 'cpu') / 1000); // e.g. 0.25 for 250m
    container('Deployment', 'router').resources.limits.cpu = `${quantity(router!.cpu.limit, 'cpu')}m`; // e.g. 1000m for 1
    const without = objs.filter((o) => !(o.kind === 'Deployment' && o.metadata.name === 'telegram-sender'));
    without.push({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'stray' }, spec: { replicas: 1 } });
    assert.deepEqual(
      sizingProblems(without, rows).sort(),
      [
        `Deployment/gateway: env WS_MAX_CONNECTIONS=${ws}0, the table says ${ws}`,
        `Deployment/gateway: replicas ${gw!.replicas + 1}, the table says ${gw!.replicas}`,
        `Deployment/sequencer: cpu request 7, the table says ${seq!.cpu.request}`,
        'Deployment/stray: no row in docs/scaling.md section 4',
        `HPA/board-renderer: minReplicas ${renderer!.replicas + 1}, the table says ${renderer!.replicas}`,
        `HPA/gateway: CPU target ${gw!.hpaCpuPercent! - 10} %, the table says ${gw!.hpaCpuPercent} %`,
        `HPA/gateway: maxReplicas ${gw!.replicas1M + 1}, the table says ${gw!.replicas1M} (1,000,000)`,
        `StatefulSet/crowd-engine: memory limit 12345Mi, the table says ${shard!.memory.limit}`,
        'row telegram-sender: no Deployment or StatefulSet telegram-sender in the overlay',
      ].sort(),
    );
    assert.deepEqual(sizingProblems(prod(), rows), []); // the overlay itself is unchanged
  });

  it('a table that lost its shape is an error naming the row, not an empty comparison', () => {
    const good =
      '## 4. Resources per service (x)\n\n| service | replicas 500,000 / 1,000,000 | CPU request / limit | memory request / limit |\n|---|---|---|---|\n';
    assert.equal(parseSizingTable(`${good}| router | 1 / 1 | 250m / 1 | 256Mi / 512Mi |\n`)[0]!.replicas, 1);
    assert.throws(
      () => parseSizingTable(`${good}| router | one per bot | 250m / 1 | 256Mi / 512Mi |\n`),
      /row "router": replicas cell "one per bot"/,
    );
    assert.throws(() => parseSizingTable(`${good}| router | 1 / 1 | 250m | 256Mi / 512Mi |\n`), /row "router": CPU cell "250m"/);
    assert.throws(() => parseSizingTable(good), /the table has no rows/);
    assert.throws(() => parseSizingTable(good.replace('CPU request', 'cores')), /no column matching/);
    assert.throws(() => parseSizingTable('## 3. Something else\n'), /no "## 4\. Resources per service" section/);
    assert.deepEqual(
      [quantity('1', 'cpu'), quantity('1500m', 'cpu'), quantity('0.75', 'cpu'), quantity('1Gi', 'memory'), quantity('2 cores', 'cpu')],
      [1000, 1500, 750, 2 ** 30, NaN],
    );
  });
});
