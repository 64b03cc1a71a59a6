/**
 * The word puzzle's words: every five-letter word a–z of the `word-list`
 * package (sindresorhus/word-list: ~275,000 English words, one per line).
 * Both the accepted guesses and the answers; read once, on first use.
 */
import { readFileSync } from 'node:fs';
import wordListPath from 'word-list';
import { WORD_LENGTH } from './word-puzzle.ts';

let cached: { answers: string[]; dictionary: Set<string> } | null = null;

/** The five-letter words: `answers` sorted, `dictionary` the same as a set. Reads the package's file once (~3 MB). */
export function fiveLetterWords(): { answers: readonly string[]; dictionary: ReadonlySet<string> } {
  if (!cached) {
    const re = new RegExp(`^[a-z]{${WORD_LENGTH}}$`);
    const answers = readFileSync(wordListPath, 'utf8')
      .split('\n')
      .map((w) => w.trim())
      .filter((w) => re.test(w))
      .sort();
    cached = { answers, dictionary: new Set(answers) };
  }
  return cached;
}
