/**
 * Offline checks of infra/Dockerfile (no Docker engine needed): parsed with
 * dockerfile-ast, the build context filtered with @balena/dockerignore (Docker's
 * own matching rules).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DockerfileParser, type Instruction } from 'dockerfile-ast';
import dockerignore from '@balena/dockerignore';

/** One stage: its name (AS …), its base image with ARG defaults substituted, its instructions after FROM. */
export interface Stage {
  name: string | undefined;
  image: string;
  instructions: Instruction[];
}

/** The runtime stage's entry point: the script `npm start` runs (package.json), relative to WORKDIR. */
export const ENTRYPOINT = ['sh', 'scripts/start.sh'] as const;

/** Flags of an instruction (`--from=build` → `{ from: 'build' }`). */
export function flags(i: Instruction): Record<string, string> {
  const out: Record<string, string> = {};
  const withFlags = i as unknown as { getFlags?: () => { getName(): string; getValue(): string | null }[] };
  for (const f of withFlags.getFlags?.() ?? []) out[f.getName()] = f.getValue() ?? '';
  return out;
}

/** The arguments of an instruction without its flags. */
export function args(i: Instruction): string[] {
  return i
    .getArguments()
    .map((a) => a.getValue())
    .filter((a) => !a.startsWith('--'));
}

/**
 * Splits a Dockerfile into stages.
 * @throws Error when an ARG used in FROM has no default
 */
export function stages(text: string): Stage[] {
  const df = DockerfileParser.parse(text);
  const argDefaults = new Map<string, string>();
  for (const a of df.getInitialARGs()) for (const p of a.getProperties()) argDefaults.set(p.getName(), p.getValue() ?? '');
  const out: Stage[] = [];
  for (const i of df.getInstructions()) {
    if (i.getKeyword() === 'FROM') {
      const [image, as, name] = args(i);
      const resolved = image!.replace(/\$\{?([A-Za-z_]+)\}?/g, (_m, v: string) => {
        const d = argDefaults.get(v);
        if (d === undefined) throw new Error(`FROM uses ARG ${v} without a default`);
        return d;
      });
      out.push({ name: as?.toUpperCase() === 'AS' ? name : undefined, image: resolved, instructions: [] });
    } else if (out.length > 0) out.at(-1)!.instructions.push(i);
  }
  return out;
}

/**
 * Every problem found in the Dockerfile `text` for the repository at `root`
 * (empty when none):
 * - at least two stages, every base image `node:20.<minor>.<patch>-<Debian variant>` (pinned, glibc);
 * - the runtime (last) stage installs with `npm ci --omit=dev` and nothing else installs there; its last USER
 *   is a numeric non-zero uid; ENTRYPOINT is {@link ENTRYPOINT} (the start script `npm start` runs) and the stage
 *   copies that script to the path it names;
 * - every COPY from the build context names paths that exist in `root` and that .dockerignore does not exclude;
 * - every COPY --from names an earlier stage.
 */
export function dockerfileProblems(text: string, root: string, ignoreText: string): string[] {
  const problems: string[] = [];
  let list: Stage[];
  try {
    list = stages(text);
  } catch (err) {
    return [(err as Error).message];
  }
  if (list.length < 2) problems.push(`multi-stage: ${list.length} stage(s)`);
  for (const s of list) {
    if (!/^node:20\.\d+\.\d+-(bookworm|bullseye|trixie)(-slim)?$/.test(s.image))
      problems.push(`stage ${s.name ?? '?'}: base image ${s.image} is not node:20.x.y-<debian> pinned by tag`);
  }
  const runtime = list.at(-1);
  if (!runtime) return problems;
  const kw = (k: string): Instruction[] => runtime.instructions.filter((i) => i.getKeyword() === k);
  const runs = kw('RUN').map((i) => i.getArgumentsContent() ?? '');
  const installs = runs.flatMap((r) => r.split(/&&|;|\n/)).filter((c) => /\bnpm\s+(ci|install|i)\b|\byarn\b|\bpnpm\b/.test(c));
  if (!installs.some((c) => /\bnpm\s+ci\b/.test(c) && c.includes('--omit=dev'))) problems.push('runtime: no `npm ci --omit=dev`');
  for (const c of installs) if (!c.includes('--omit=dev')) problems.push(`runtime: installs without --omit=dev: ${c.trim()}`);
  const user = kw('USER').at(-1);
  const uid = user ? args(user)[0]!.split(':')[0]! : undefined;
  if (!uid) problems.push('runtime: no USER (runs as root)');
  else if (!/^\d+$/.test(uid)) problems.push(`runtime: USER ${uid} is not numeric (runAsNonRoot cannot verify it)`);
  else if (Number(uid) === 0) problems.push('runtime: USER is root');
  const entry = kw('ENTRYPOINT').at(-1);
  let entryArgs: unknown;
  try {
    entryArgs = JSON.parse(entry?.getArgumentsContent() ?? 'null');
  } catch {
    entryArgs = null;
  }
  if (JSON.stringify(entryArgs) !== JSON.stringify(ENTRYPOINT))
    problems.push(`runtime: ENTRYPOINT is not ${JSON.stringify(ENTRYPOINT)} (the start script npm start runs)`);
  const script = ENTRYPOINT[1];
  const copied = kw('COPY').some((i) => !flags(i).from && args(i).length === 2 && args(i)[0] === script && args(i)[1] === script);
  if (!copied) problems.push(`runtime: ${script} is not copied to ${script} (the entry point runs it)`);
  const ig = dockerignore().add(ignoreText);
  const names = new Set(list.map((s) => s.name).filter(Boolean));
  for (const s of list) {
    for (const i of s.instructions.filter((x) => x.getKeyword() === 'COPY' || x.getKeyword() === 'ADD')) {
      const f = flags(i);
      const a = args(i);
      if (f.from) {
        if (!names.has(f.from)) problems.push(`COPY --from=${f.from}: no such stage`);
        continue;
      }
      for (const src of a.slice(0, -1)) {
        const rel = src.replace(/^\.\/?/, '').replace(/\/$/, '');
        if (rel === '') continue; // the whole context
        if (!existsSync(join(root, rel))) problems.push(`COPY ${src}: no such path in the repository`);
        else if (ig.ignores(rel)) problems.push(`COPY ${src}: excluded by .dockerignore`);
      }
    }
  }
  return problems;
}

/** The repository's Dockerfile and .dockerignore. */
export function repoDockerfile(root: string): { text: string; ignore: string } {
  return { text: readFileSync(join(root, 'infra/Dockerfile'), 'utf8'), ignore: readFileSync(join(root, '.dockerignore'), 'utf8') };
}
