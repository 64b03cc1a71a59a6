/**
 * docs/benchmarks.md is rendered from docs/benchmarks/*.json and
 * scripts/results-index.ts (`npm run docs:results`): the page must match a
 * fresh render, every report in docs/benchmarks/ must be cited by a row, and
 * a broken index must fail with the file and field named, leaving the page
 * as it was.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { RESULTS } from '../../scripts/results-index.js';
import { renderResults, reportReader, writeResults, type ResultsIndex } from '../../scripts/results.js';

const root = resolve(import.meta.dirname, '..', '..');

describe('docs/benchmarks.md', () => {
  it('is the render of the reports and the index', () => {
    const page = readFileSync(join(root, 'docs', 'benchmarks.md'), 'utf8');
    assert.equal(renderResults(RESULTS, reportReader(root)), page, 'docs/benchmarks.md drifted: run `npm run docs:results`');
  });

  it('cites every report in docs/benchmarks/ and names a run for each', () => {
    const cited = new Set(RESULTS.rigs.flatMap((rig) => rig.rows.flatMap((row) => row.files)));
    const onDisk = readdirSync(join(root, 'docs', 'benchmarks')).filter((f) => f.endsWith('.json'));
    assert.deepEqual(
      onDisk.filter((f) => !cited.has(f)),
      [],
      'reports no row cites: cite them or git rm them',
    );
    assert.deepEqual(
      [...cited].filter((f) => !onDisk.includes(f)),
      [],
      'rows cite reports that do not exist',
    );
    assert.deepEqual(
      Object.keys(RESULTS.runs).filter((f) => !cited.has(f)),
      [],
      'runs in the index no row cites',
    );
  });

  it('links only decision records that exist', () => {
    const linked = RESULTS.rigs.flatMap((rig) => rig.decisions ?? []);
    assert.ok(linked.length > 0);
    assert.deepEqual(
      linked.filter((f) => !existsSync(join(root, 'docs', 'decisions', f))),
      [],
    );
  });

  it('says nothing of work periods', () => {
    const page = readFileSync(join(root, 'docs', 'benchmarks.md'), 'utf8');
    assert.doesNotMatch(page, /\bsession ?\d/i);
  });
});

describe('renderResults', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'results-'));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  mkdirSync(join(tmp, 'docs', 'benchmarks'), { recursive: true });
  writeFileSync(
    join(tmp, 'docs', 'benchmarks', 'a.json'),
    JSON.stringify({ startedAt: '2026-01-02T03:04:05Z', x: { p95: 12.345 }, s: 'ok' }),
  );
  writeFileSync(join(tmp, 'docs', 'benchmarks', 'b.json'), JSON.stringify({ date: '2026-01-03T00:00:00Z', x: { p95: 1234.5 }, s: 'ok' }));
  const index = (value: string, files: string[] = ['a.json', 'b.json'], machine = 'm'): ResultsIndex => ({
    intro: ['Intro.'],
    machines: { m: 'a machine' },
    runs: { 'a.json': { command: 'run a', machine, commit: 'abc1234' }, 'b.json': { command: 'run b', machine: 'm', commit: 'def5678' } },
    rigs: [{ title: 'Rig', intro: ['What it measures.'], rows: [{ figure: 'p95', target: '≤ 1', seed: '—', value, files }] }],
  });

  it('shows a range over the reports, each date and commit, and the files', () => {
    const page = renderResults(index('{x.p95:1} ms, {s}'), reportReader(tmp));
    assert.match(
      page,
      /\| p95 \| ≤ 1 \| — \| 12\.3–1,234\.5 ms, ok \| `run a`; `run b` \| `m` \| 2026-01-02, abc1234; 2026-01-03, def5678 \| \[a\.json\]\(benchmarks\/a\.json\), \[b\.json\]\(benchmarks\/b\.json\) \|/,
    );
  });

  it('links the rig’s decision records', () => {
    const idx = index('{s}', ['a.json']);
    const withDecisions: ResultsIndex = { ...idx, rigs: [{ ...idx.rigs[0]!, decisions: ['0042-a-choice.md'] }] };
    assert.match(renderResults(withDecisions, reportReader(tmp)), /^Decisions: \[0042\]\(decisions\/0042-a-choice\.md\)\.$/m);
  });

  it('shows one value when the reports agree', () => {
    assert.match(renderResults(index('{s}', ['a.json']), reportReader(tmp)), /\| ok \|/);
  });

  const page = join(tmp, 'docs', 'benchmarks.md');
  for (const [name, bad, message] of [
    ['a field a report lacks', index('{x.p99}'), /a\.json: no field x\.p99/],
    ['an object where a value belongs', index('{x}'), /a\.json: x is not a number or string/],
    ['a report with no run in the index', index('{s}', ['c.json']), /c\.json has no run in the index/],
    ['an unknown machine', index('{s}', ['a.json'], 'nowhere'), /a\.json: unknown machine nowhere/],
    ['an unknown format', index('{x.p95:hex}'), /unknown format hex/],
  ] as const) {
    it(`throws on ${name} and leaves the page as it was`, () => {
      writeFileSync(page, 'before\n');
      assert.throws(() => writeResults(tmp, bad), message);
      assert.equal(readFileSync(page, 'utf8'), 'before\n');
    });
  }

  it('throws when a string differs across reports', () => {
    writeFileSync(join(tmp, 'docs', 'benchmarks', 'b.json'), JSON.stringify({ date: '2026-01-03', x: { p95: 1 }, s: 'failed' }));
    assert.throws(() => renderResults(index('{s}'), reportReader(tmp)), /p95: s differs across a\.json, b\.json/);
  });

  it('throws when a report is missing', () => {
    const idx = index('{s}', ['a.json']);
    const missing: ResultsIndex = { ...idx, runs: { ...idx.runs, 'gone.json': { command: 'x', machine: 'm', commit: 'x' } } };
    const rigs = [{ ...idx.rigs[0]!, rows: [{ ...idx.rigs[0]!.rows[0]!, files: ['gone.json'] }] }];
    assert.throws(() => renderResults({ ...missing, rigs }, reportReader(tmp)), /docs\/benchmarks\/gone\.json does not exist/);
  });
});
