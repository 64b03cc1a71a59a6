/**
 * docs/benchmarks.md, rendered from the JSON reports in docs/benchmarks/ and
 * the index below: one table per rig, one row per figure, each naming its
 * target, the field reports' figure it answers (/work/shared/seeds in the
 * design; cited by name), the value read from the reports, the command,
 * machine, date and commit of the run, and the report itself.
 * `npm run docs:results` (scripts/gen-results.ts) writes the page;
 * test/docs/results.test.ts fails when the page drifts from the reports.
 *
 * A row's `value` is a template: `{path}` or `{path:format}` reads a dotted
 * path (array items by index) from each report the row names. With several
 * reports a number shows as `min–max` (or once, when they agree); a string
 * must agree across them.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Where and how a report was taken. */
export interface RunInfo {
  /** The command that wrote the report (without its `--json FILE`). */
  readonly command: string;
  /** A key of {@link ResultsIndex.machines}. */
  readonly machine: string;
  /** Commit measured; where the run did not name one, the commit that recorded the report. */
  readonly commit: string;
  /** YYYY-MM-DD; default: the report's `startedAt` or `date`. */
  readonly date?: string;
}

/** One figure of a rig. */
export interface ResultRow {
  readonly figure: string;
  readonly target: string;
  /** The field reports' figure this one answers ("—" where none applies). */
  readonly seed: string;
  /** Template, e.g. `{guessMs.p50:0} / {guessMs.p99:0} ms`. */
  readonly value: string;
  /** Report file names in docs/benchmarks/ (keys of {@link ResultsIndex.runs}). */
  readonly files: readonly string[];
}

/** One rig: a scenario or benchmark and its current figures. */
export interface Rig {
  readonly title: string;
  /** Paragraphs: what the rig measures and its shape. */
  readonly intro: readonly string[];
  /** Decision records in docs/decisions/ whose measurement is this rig's (file names). */
  readonly decisions?: readonly string[];
  readonly rows: readonly ResultRow[];
}

/** Everything the page is rendered from besides the reports. */
export interface ResultsIndex {
  readonly intro: readonly string[];
  readonly machines: Readonly<Record<string, string>>;
  readonly runs: Readonly<Record<string, RunInfo>>;
  readonly rigs: readonly Rig[];
}

/** Reads one report by file name; throws when it is missing or not JSON. */
export type ReportReader = (file: string) => unknown;

const EN_DASH = '–';

function lookup(report: unknown, path: string, file: string): unknown {
  let at: unknown = report;
  for (const key of path.split('.')) {
    if (typeof at !== 'object' || at === null || !(key in at)) {
      throw new Error(`${file}: no field ${path}`);
    }
    at = (at as Record<string, unknown>)[key];
  }
  if (at === null || at === undefined || typeof at === 'object') throw new Error(`${file}: ${path} is not a number or string`);
  return at;
}

/**
 * One number in a format: `0`–`4` decimals (thousands separated), `mb`
 * (bytes → MB, no decimals), `kb` (bytes → KB, one decimal), `pct` (a share
 * → percent, two decimals), `s` (ms → s, one decimal). No format: the
 * number as it is, thousands separated. MB and KB are decimal (10^6, 10^3 bytes).
 */
function formatNumber(n: number, format: string | undefined): string {
  const fixed = (x: number, d: number): string => x.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
  switch (format) {
    case undefined:
      return n.toLocaleString('en-US', { maximumFractionDigits: 6 });
    case 'mb':
      return fixed(n / 1e6, 0);
    case 'kb':
      return fixed(n / 1000, 1);
    case 'pct':
      return fixed(n * 100, 2);
    case 's':
      return fixed(n / 1000, 1);
    default:
      if (/^[0-4]$/.test(format)) return fixed(n, Number(format));
      throw new Error(`unknown format ${format}`);
  }
}

function renderValue(row: ResultRow, reports: readonly { file: string; report: unknown }[]): string {
  return row.value.replace(/\{([^}:]+)(?::([^}]+))?\}/g, (_, path: string, format: string | undefined) => {
    const values = reports.map(({ file, report }) => lookup(report, path, file));
    if (values.every((v) => typeof v === 'number')) {
      const shown = (values as number[]).map((v) => formatNumber(v, format));
      const lo = Math.min(...(values as number[]));
      const hi = Math.max(...(values as number[]));
      const a = formatNumber(lo, format);
      const b = formatNumber(hi, format);
      return a === b ? shown[0]! : `${a}${EN_DASH}${b}`;
    }
    const distinct = [...new Set(values.map(String))];
    if (distinct.length !== 1) throw new Error(`${row.figure}: ${path} differs across ${reports.map((r) => r.file).join(', ')}`);
    return distinct[0]!;
  });
}

function reportDate(report: unknown, file: string): string {
  const r = report as Record<string, unknown>;
  const at = typeof r.startedAt === 'string' ? r.startedAt : typeof r.date === 'string' ? r.date : undefined;
  if (at === undefined) throw new Error(`${file}: no startedAt or date: give the run a date in the index`);
  return at.slice(0, 10);
}

const cell = (s: string): string => s.replace(/\|/g, '\\|');
const distinctJoin = (xs: readonly string[]): string => [...new Set(xs)].join('; ');

/**
 * The whole of docs/benchmarks.md.
 * @param index rigs, runs and machines.
 * @param read reads a report from docs/benchmarks/ by file name.
 * @returns the page, Markdown, ending in one newline.
 * @throws Error naming the file and field when a row names a report the index
 *   has no run for, a field a report lacks, a machine the index does not
 *   define, or a string field that differs across a row's reports.
 */
export function renderResults(index: ResultsIndex, read: ReportReader): string {
  const cache = new Map<string, unknown>();
  const load = (file: string): unknown => {
    if (!cache.has(file)) cache.set(file, read(file));
    return cache.get(file);
  };
  const out: string[] = ['# Benchmarks', '', ...index.intro.flatMap((p) => [p, '']), '## Machines', ''];
  out.push('| machine | what it is |', '| --- | --- |');
  for (const [id, text] of Object.entries(index.machines)) out.push(`| \`${id}\` | ${cell(text)} |`);
  out.push('');
  for (const rig of index.rigs) {
    out.push(`## ${rig.title}`, '', ...rig.intro.flatMap((p) => [p, '']));
    if (rig.decisions !== undefined && rig.decisions.length > 0) {
      out.push(`Decisions: ${rig.decisions.map((f) => `[${f.slice(0, 4)}](decisions/${f})`).join(', ')}.`, '');
    }
    out.push(
      '| figure | target | seed | value | command | machine | date, commit | JSON |',
      '| --- | --- | --- | --- | --- | --- | --- | --- |',
    );
    for (const row of rig.rows) {
      if (row.files.length === 0) throw new Error(`${rig.title}: ${row.figure} names no report`);
      const runs = row.files.map((file) => {
        const run = index.runs[file];
        if (run === undefined) throw new Error(`${rig.title}: ${row.figure}: ${file} has no run in the index`);
        if (!(run.machine in index.machines)) throw new Error(`${file}: unknown machine ${run.machine}`);
        return { file, run, report: load(file) };
      });
      const value = renderValue(row, runs);
      const dates = runs.map(({ file, run, report }) => `${run.date ?? reportDate(report, file)}, ${run.commit}`);
      out.push(
        `| ${cell(row.figure)} | ${cell(row.target)} | ${cell(row.seed)} | ${cell(value)} | ${distinctJoin(runs.map(({ run }) => `\`${cell(run.command)}\``))} | ${distinctJoin(runs.map(({ run }) => `\`${run.machine}\``))} | ${distinctJoin(dates)} | ${runs.map(({ file }) => `[${file}](benchmarks/${file})`).join(', ')} |`,
      );
    }
    out.push('');
  }
  return `${out.join('\n').trimEnd()}\n`;
}

/** Reads reports from `<root>/docs/benchmarks/`; throws when one is missing or not JSON. */
export function reportReader(root: string): ReportReader {
  return (file) => {
    const p = join(root, 'docs', 'benchmarks', file);
    if (!existsSync(p)) throw new Error(`docs/benchmarks/${file} does not exist`);
    return JSON.parse(readFileSync(p, 'utf8')) as unknown;
  };
}

/**
 * Renders the page from `<root>/docs/benchmarks/` and writes
 * `<root>/docs/benchmarks.md`; renders completely first, so a failing
 * render leaves the page as it was.
 * @throws Error as {@link renderResults}.
 */
export function writeResults(root: string, index: ResultsIndex): void {
  const page = renderResults(index, reportReader(root));
  writeFileSync(join(root, 'docs', 'benchmarks.md'), page);
}
