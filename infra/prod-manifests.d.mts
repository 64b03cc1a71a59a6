/** Types of infra/prod-manifests.mjs (see its header). */
export function workspaceDirs(root?: string): string[];
export function writeProdManifests(outdir: string, root?: string): string[];
