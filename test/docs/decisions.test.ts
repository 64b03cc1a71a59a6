/**
 * docs/decisions/README.md lists every decision record under its own title
 * and no number is used twice.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';

const dir = resolve(import.meta.dirname, '..', '..', 'docs', 'decisions');
const records = readdirSync(dir).filter((f) => /^\d{4}-[a-z0-9-]+\.md$/.test(f));

describe('docs/decisions', () => {
  it('has records', () => {
    assert.ok(records.length > 0);
  });

  it('lists every record in README.md with its title', () => {
    const index = readFileSync(join(dir, 'README.md'), 'utf8');
    const missing = records.filter((f) => {
      const title = /^# \d{4}\. (.+)$/m.exec(readFileSync(join(dir, f), 'utf8'))?.[1];
      return title === undefined || !index.includes(`](${f}) | ${title} |`);
    });
    assert.deepEqual(missing, [], 'records missing from docs/decisions/README.md (or listed under another title)');
  });

  it('numbers each record once', () => {
    const numbers = records.map((f) => f.slice(0, 4));
    assert.deepEqual(
      numbers.filter((n, i) => numbers.indexOf(n) !== i),
      [],
    );
  });
});
