/**
 * Writes the generated settings table into README.md (between the
 * `<!-- settings:begin -->` / `<!-- settings:end -->` markers) and
 * `.env.example`, from libs/config's schema. `npm run docs:settings`.
 * libs/config/test/config.test.ts fails when either file drifts.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { envExample, renderReadmeSettings } from '@crowdplay/config';

const readme = readFileSync('README.md', 'utf8');
writeFileSync('README.md', renderReadmeSettings(readme));
writeFileSync('.env.example', envExample());
console.log('README.md settings table and .env.example regenerated');
