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

  it('a container without limits, an unknown env name, an undocumented Secret key, a secret in plain text, a short grace period', () => {
    const objs = fresh();
    const gw = find(objs, 'Deployment', 'gateway').spec.template.spec;
    delete gw.containers[0].resources.limits;
    gw.containers[0].env.push({ name: 'TICK_MSS', value: '250' });
    gw.containers[0].env.push({ name: 'PUZZLE_SECRET', value: 'in-the-repo' });
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
