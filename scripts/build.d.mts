/** Types of scripts/build.mjs (see its header). */
export function buildProduct(o?: { outdir?: string; quiet?: boolean }): Promise<{ main: string; worker: string; ms: number }>;
