/**
 * Benchmark dispatcher: `npm run bench -- <name> [args…]` imports the one
 * `libs/<package>/bench/<name>.bench.ts` or `services/<package>/bench/<name>.bench.ts`
 * (e.g. `render` → libs/board/bench/render.bench.ts) and calls
 * its exported `main(args)`, which prints a table, writes JSON with
 * `--json FILE`, and resolves to the process exit code.
 */
import { existsSync, readdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

/** What a benchmark module exports. */
interface BenchModule {
  main(args: readonly string[]): Promise<number>;
}

function isBenchModule(m: unknown): m is BenchModule {
  return typeof m === 'object' && m !== null && typeof (m as { main?: unknown }).main === 'function';
}

async function run(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  const root = resolve(import.meta.dirname, '..');
  const file =
    name !== undefined && /^[a-z0-9-]+$/.test(name)
      ? ['libs', 'services']
          .flatMap((dir) => readdirSync(resolve(root, dir)).map((pkg) => resolve(root, dir, pkg, 'bench', `${name}.bench.ts`)))
          .find((p) => existsSync(p))
      : undefined;
  if (file === undefined) {
    console.error(
      `usage: npm run bench -- <name> [--json FILE] [...]  (name: a package with bench/<name>.bench.ts, e.g. lmsr); got ${name ?? 'nothing'}`,
    );
    return 2;
  }
  const mod: unknown = await import(pathToFileURL(file).href);
  if (!isBenchModule(mod)) throw new Error(`${file} does not export main(args)`);
  return mod.main(rest);
}

run(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err instanceof Error ? (err.stack ?? err.message) : err);
    process.exit(1);
  },
);
