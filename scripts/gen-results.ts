/**
 * Writes docs/benchmarks.md from the JSON reports in docs/benchmarks/ and the
 * index in scripts/results-index.ts. `npm run docs:results`.
 * test/docs/results.test.ts fails when the page drifts.
 */
import { resolve } from 'node:path';
import { RESULTS } from './results-index.js';
import { writeResults } from './results.js';

writeResults(resolve(import.meta.dirname, '..'), RESULTS);
console.log('docs/benchmarks.md regenerated from docs/benchmarks/*.json');
