/**
 * What `npm start` starts the process with, and the same read from an image's
 * entry point: the process-start values (node's --max-semi-space-size,
 * glibc's MALLOC_ARENA_MAX and MALLOC_MMAP_THRESHOLD_, mimalloc's options)
 * as crowdplay_process_start_setting exports them.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ALLOCATOR_DEFAULTS, processStartSettings } from '../../services/cli/src/allocator.ts';
import type { K8sObject } from './manifests.ts';

/** Variables a process reads only when it starts; an environment that sets one starts a different process. */
export const PROCESS_START_VARIABLES = [
  'NODE_OPTIONS',
  'SEMI_SPACE_MB',
  'MALLOC_ARENA_MAX',
  'MALLOC_MMAP_THRESHOLD_',
  ...Object.keys(ALLOCATOR_DEFAULTS),
] as const;

/** The gauge's label for each field of processStartSettings (services/cli/src/compose.ts). */
const GAUGE_LABELS: Record<string, string> = {
  semiSpaceMb: 'semi_space_mb',
  mallocArenaMax: 'malloc_arena_max',
  mallocMmapThreshold: 'malloc_mmap_threshold',
  mimallocAllowThp: 'mimalloc_allow_thp',
  mimallocPurgeDelayMs: 'mimalloc_purge_delay_ms',
};

/** `env` without the process-start variables: what a deployment that sets none of them passes. */
export function withoutProcessStartVariables(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out = { ...env };
  for (const name of PROCESS_START_VARIABLES) delete out[name];
  return out;
}

/**
 * The crowdplay_process_start_setting values `npm start` gives a process (`sh scripts/start.sh start` run
 * from `root` with a stand-in bundle reporting its execArgv and environment; main.ts's allocator defaults
 * applied as the real bundle does), by label, 0 for a runtime default.
 * @throws Error when the script fails or the stand-in did not run
 */
export function npmStartSettings(root: string): Record<string, number> {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  const m = /^exec sh (\S+) start$/.exec(pkg.scripts.start ?? '');
  if (!m) throw new Error(`npm start is "${pkg.scripts.start}", not \`exec sh <script> start\``);
  const dir = mkdtempSync(join(tmpdir(), 'crowdplay-npm-start-'));
  try {
    const out = join(dir, 'seen.json');
    const bundle = join(dir, 'bundle.mjs');
    writeFileSync(
      bundle,
      `import { writeFileSync } from 'node:fs';\nwriteFileSync(${JSON.stringify(out)}, JSON.stringify({ execArgv: process.execArgv, env: process.env }));\n`,
    );
    const env = { ...withoutProcessStartVariables(process.env), CROWDPLAY_BUNDLE: bundle, CROWDPLAY_NODE: process.execPath };
    const r = spawnSync('sh', [m[1]!, 'start'], { cwd: root, env, encoding: 'utf8', timeout: 30_000 });
    if (r.status !== 0) throw new Error(`npm start's script failed (exit ${r.status}): ${r.stderr}`);
    const seen = JSON.parse(readFileSync(out, 'utf8')) as { execArgv: string[]; env: NodeJS.ProcessEnv };
    const started = processStartSettings(seen.execArgv, { ...ALLOCATOR_DEFAULTS, ...seen.env });
    return Object.fromEntries(Object.entries(started).map(([k, v]) => [GAUGE_LABELS[k] ?? k, v ?? 0]));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** crowdplay_process_start_setting from a Prometheus text exposition, by its `setting` label. */
export function scrapedStartSettings(metrics: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of metrics.matchAll(/^crowdplay_process_start_setting\{[^}]*setting="([a-z_]+)"[^}]*\} (\S+)$/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

/**
 * Every problem with how `objects` (rendered manifests) start the image, one line each (empty when none): a
 * container `command` (it would bypass the image's entry point), args other than `service <name>`, a
 * process-start variable other than the setting SEMI_SPACE_MB set in env or an envFrom ConfigMap.
 */
export function startProblems(objects: readonly K8sObject[]): string[] {
  const problems: string[] = [];
  const configMaps = new Map(objects.filter((o) => o.kind === 'ConfigMap').map((o) => [o.metadata.name, o.data ?? {}]));
  for (const w of objects.filter((o) => ['Deployment', 'StatefulSet'].includes(o.kind))) {
    for (const c of w.spec.template.spec.containers ?? []) {
      const at = `${w.kind}/${w.metadata.name} container ${c.name}`;
      if (c.command) problems.push(`${at}: command ${JSON.stringify(c.command)} bypasses the image's entry point (scripts/start.sh)`);
      if (c.args?.[0] !== 'service' || c.args.length !== 2)
        problems.push(`${at}: args ${JSON.stringify(c.args)} are not ["service", <name>]`);
      const names = [
        ...(c.env ?? []).map((e: { name: string }) => e.name),
        ...(c.envFrom ?? []).flatMap((ef: { configMapRef?: { name: string } }) =>
          Object.keys(configMaps.get(ef.configMapRef?.name ?? '') ?? {}),
        ),
      ];
      for (const n of names)
        if ((PROCESS_START_VARIABLES as readonly string[]).includes(n) && n !== 'SEMI_SPACE_MB')
          problems.push(`${at}: sets ${n}, which scripts/start.sh decides`);
    }
  }
  return problems;
}
