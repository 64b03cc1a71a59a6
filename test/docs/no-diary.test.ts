/**
 * The tracked files speak of the product only: no diary reference ("session"
 * followed by a number or a run label, "issue" followed by a number), except
 * as the text of a link to another host's issue tracker (test/docs/diary.ts).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ROOT } from '../helpers.ts';
import { diaryInTrackedFiles, diaryMatches } from './diary.ts';

// Built from parts so this file does not match itself.
const S = 'Sess' + 'ion';
const I = 'Iss' + 'ue';

describe('docs - diaryMatches', () => {
  it('finds a session number, a session run label and a ticket number, with their columns', () => {
    const line = `measured in ${S.toLowerCase()} 9, see ${S} H4 and ${I.toLowerCase()} 5`;
    assert.deepEqual(diaryMatches(line), [
      { text: `${S.toLowerCase()} 9`, column: 12 },
      { text: `${S} H4`, column: 27 },
      { text: `${I.toLowerCase()} 5`, column: 42 },
    ]);
    assert.deepEqual(diaryMatches(`docs/benchmarks.md "${S} 10"`), [{ text: `${S} 10`, column: 20 }]);
  });

  it("leaves the product's own sessions alone", () => {
    assert.deepEqual(diaryMatches('a PGlite session per test, the Mini App session expires after 3600 s'), []);
    assert.deepEqual(diaryMatches(`${S} Ids are opaque; ${S}Store; ${I}s: none`), []);
  });

  it("exempts the text of a link to another host's issue tracker, and nothing else", () => {
    assert.deepEqual(diaryMatches(`fixed upstream ([${I.toLowerCase()} 123](https://github.com/nodejs/node/issues/123))`), []);
    assert.deepEqual(diaryMatches(`see [${I} 7](https://gitlab.com/acme/tool/-/merge_requests/7#note_1)`), []);
    // a link to a page that is not a tracker, and a phrase next to (not inside) a tracker link
    assert.deepEqual(diaryMatches(`[${I.toLowerCase()} 4](docs/benchmarks.md)`), [{ text: `${I.toLowerCase()} 4`, column: 1 }]);
    assert.deepEqual(diaryMatches(`${S} 2: [node](https://github.com/nodejs/node/issues/1)`), [{ text: `${S} 2`, column: 0 }]);
    assert.deepEqual(diaryMatches(`[${I.toLowerCase()} 3](https://example.com/?u=https://github.com/a/b/issues/3)`), [
      { text: `${I.toLowerCase()} 3`, column: 1 },
    ]);
  });
});

describe('docs - tracked files', () => {
  it('carry no diary reference (file:line: phrase)', () => {
    const found = diaryInTrackedFiles(ROOT);
    assert.deepEqual(found, [], `${found.length} diary phrases:\n${found.join('\n')}`);
  });
});
