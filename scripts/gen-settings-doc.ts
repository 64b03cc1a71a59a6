/**
 * Writes the generated settings table into README.md (between the
 * `<!-- settings:begin -->` / `<!-- settings:end -->` markers) and
 * `.env.example`, from libs/config's schema, and the error table of
 * docs/protocol.md from libs/protocol's catalogue. `npm run docs:settings`.
 * libs/config/test/config.test.ts fails when either file drifts.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { envExample, renderReadmeSettings } from '@crowdplay/config';
import { renderErrorTable } from '@crowdplay/protocol';

const readme = readFileSync('README.md', 'utf8');
writeFileSync('README.md', renderReadmeSettings(readme));
writeFileSync('.env.example', envExample());
writeFileSync('docs/protocol.md', renderErrorTable(readFileSync('docs/protocol.md', 'utf8')));
console.log('README.md settings table, .env.example and the docs/protocol.md error table regenerated');
