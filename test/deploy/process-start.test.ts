/**
 * The image starts the process the way `npm start` does: infra/Dockerfile's
 * entry point is the script package.json's start runs, nothing in the image
 * or the k8s manifests sets a process-start variable past it, and the
 * manifests only give it arguments. (test/deploy/image.test.ts starts a
 * gateway through that entry point and compares its exported settings.)
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../helpers.ts';
import { args, ENTRYPOINT, repoDockerfile, stages } from './dockerfile.ts';
import { kustomize } from './manifests.ts';
import { npmStartSettings, PROCESS_START_VARIABLES, startProblems } from './process-start.ts';

describe('the image starts the process as npm start does', () => {
  const runtime = stages(repoDockerfile(ROOT).text).at(-1)!;
  const last = (kw: string) => runtime.instructions.filter((i) => i.getKeyword() === kw).at(-1);

  it('ENTRYPOINT runs the script package.json start runs, with the arguments of CMD after it', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    assert.equal(pkg.scripts.start, `exec ${ENTRYPOINT.join(' ')} start`);
    assert.deepEqual(JSON.parse(last('ENTRYPOINT')!.getArgumentsContent()!), [...ENTRYPOINT]);
    assert.deepEqual(JSON.parse(last('CMD')!.getArgumentsContent()!), ['service', 'gateway']);
    assert.equal(args(last('WORKDIR')!)[0], '/app', 'the script path is relative to WORKDIR');
  });

  it('the image sets no process-start variable (the script decides them for both)', () => {
    const set = runtime.instructions
      .filter((i) => i.getKeyword() === 'ENV')
      .flatMap((i) => (i as unknown as { getProperties(): { getName(): string }[] }).getProperties().map((p) => p.getName()));
    assert.ok(set.includes('NODE_ENV'), `ENV parsed: ${JSON.stringify(set)}`);
    assert.deepEqual(
      set.filter((n) => (PROCESS_START_VARIABLES as readonly string[]).includes(n)),
      [],
    );
  });

  it("npm start's script gives the fixed values and the setting's default", () => {
    assert.deepEqual(npmStartSettings(ROOT), {
      semi_space_mb: 4,
      malloc_arena_max: 2,
      malloc_mmap_threshold: 1_048_576,
      mimalloc_allow_thp: 0,
      mimalloc_purge_delay_ms: 0,
    });
  });

  for (const overlay of ['dev', 'prod'])
    it(`k8s/overlays/${overlay}: every container gives the entry point only its arguments and sets no process-start variable`, () => {
      assert.deepEqual(startProblems(kustomize(`${ROOT}/k8s/overlays/${overlay}`)), []);
    });

  it('a manifest with a command, other args, or MALLOC_ARENA_MAX in its ConfigMap is reported', () => {
    const objs = kustomize(`${ROOT}/k8s/overlays/prod`);
    const gw = objs.find((o) => o.kind === 'Deployment' && o.metadata.name === 'gateway')!.spec.template.spec.containers[0];
    gw.command = ['node', 'dist/crowdplay.js'];
    const router = objs.find((o) => o.kind === 'Deployment' && o.metadata.name === 'router')!.spec.template.spec.containers[0];
    router.args = ['start'];
    objs.find((o) => o.kind === 'ConfigMap')!.data.MALLOC_ARENA_MAX = '8';
    const problems = startProblems(objs);
    for (const p of [
      /Deployment\/gateway container gateway: command \["node","dist\/crowdplay.js"\] bypasses/,
      /Deployment\/router container router: args \["start"\] are not/,
      /StatefulSet\/crowd-engine container crowd-engine: sets MALLOC_ARENA_MAX/,
    ])
      assert.ok(
        problems.some((x) => p.test(x)),
        `${p} not in ${JSON.stringify(problems, null, 1)}`,
      );
  });
});
