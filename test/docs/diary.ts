/**
 * The repository describes the product, not the work that made it: no file
 * carries a diary reference, the word "session" followed by a number or a run
 * label (`H4`), or "issue" followed by a number. `diaryMatches` finds those in one
 * line; the one exemption is a phrase that is the text of a link to another
 * host's issue tracker (`[issue 123](https://github.com/nodejs/node/issues/123)`),
 * which names someone else's ticket. The product's own sessions ("a PGlite
 * session", "the Mini App session") never match: only a diary follows the
 * word with a number or a run label.
 */
import { execFileSync } from 'node:child_process';
import { lstatSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The diary phrases, in one alternation (global: every match in a line). */
const DIARY = /\b[Ss]ession [0-9]+|\bSession [A-Z][0-9]?\b|\b[Ii]ssue [0-9]+/g;

/**
 * A URL into another host's issue tracker: `https://host/owner/repo/issues/N`
 * (also `pull/N`, `pulls/N`, GitLab's `-/issues/N` and `-/merge_requests/N`),
 * optionally with a `#fragment` or `?query`; the whole link target, nothing around it.
 */
const TRACKER_URL = /^https?:\/\/[a-z0-9.-]+\/[\w.-]+\/[\w.-]+\/(?:-\/)?(?:issues|pulls?|merge_requests)\/[0-9]+(?:[#?]\S*)?$/;

/** A Markdown link `[text](url)`; the text holds no `]`, the url no `)` or space. */
const MARKDOWN_LINK = /\[([^\]]*)\]\(([^)\s]+)\)/g;

/** One diary phrase found in a line. */
export type DiaryMatch = {
  /** the phrase as written, e.g. the word "session" and a number */
  text: string;
  /** 0-based offset of the phrase in the line, UTF-16 code units */
  column: number;
};

/** Spans `[start, end)` of a line that are links to another host's issue tracker. */
function exemptSpans(line: string): Array<[number, number]> {
  const spans: Array<[number, number]> = [];
  for (const m of line.matchAll(MARKDOWN_LINK)) {
    if (TRACKER_URL.test(m[2] ?? '')) spans.push([m.index, m.index + m[0].length]);
  }
  return spans;
}

/**
 * Every diary phrase of `line` that does not lie inside a link to another
 * project's issue tracker.
 *
 * @param line one line of text, without its line break
 * @returns the phrases in order of appearance; empty when the line is clean
 */
export function diaryMatches(line: string): DiaryMatch[] {
  const found = [...line.matchAll(DIARY)];
  if (found.length === 0) return [];
  const spans = exemptSpans(line);
  return found
    .filter((m) => !spans.some(([start, end]) => m.index >= start && m.index + m[0].length <= end))
    .map((m) => ({ text: m[0], column: m.index }));
}

/** True when `bytes` look binary: a NUL in the first 8,000 bytes (git's own test). */
function isBinary(bytes: Buffer): boolean {
  return bytes.subarray(0, 8000).includes(0);
}

/**
 * Every diary phrase in the files git tracks under `root`, as `path:line: text`.
 * Binary files, symbolic links, files missing from the work tree and every
 * `package-lock.json` (third parties' names) are skipped.
 *
 * @param root the repository's top directory
 * @returns one string per phrase, sorted by path then line; empty when clean
 * @throws Error when `git ls-files` fails (no git, or `root` is not a repository)
 */
export function diaryInTrackedFiles(root: string): string[] {
  const listing = execFileSync('git', ['ls-files', '-z'], { cwd: root, maxBuffer: 64 * 1024 * 1024 });
  const paths = listing
    .toString('utf8')
    .split('\0')
    .filter((p) => p !== '');
  const out: string[] = [];
  for (const path of paths.sort()) {
    if (path === 'package-lock.json' || path.endsWith('/package-lock.json')) continue;
    const full = join(root, path);
    let bytes: Buffer;
    try {
      if (!lstatSync(full).isFile()) continue;
      bytes = readFileSync(full);
    } catch {
      continue; // deleted in the work tree, not yet in the index
    }
    if (isBinary(bytes)) continue;
    bytes
      .toString('utf8')
      .split(/\r?\n/)
      .forEach((line, i) => {
        for (const m of diaryMatches(line)) out.push(`${path}:${i + 1}: ${m.text}`);
      });
  }
  return out;
}
