/**
 * Writes the generated settings table into README.md (between the
 * `<!-- settings:begin -->` / `<!-- settings:end -->` markers) and
 * `.env.example`, from libs/config's schema, the error table of
 * docs/protocol.md from libs/protocol's catalogue, and the metric table of
 * docs/operations.md from libs/telemetry's catalogue. `npm run docs:settings`.
 * libs/config/test/config.test.ts, libs/protocol/test/protocol.test.ts and
 * libs/telemetry/test/catalogue.test.ts fail when a file drifts.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { envExample, renderReadmeSettings } from '@crowdplay/config';
import { renderErrorTable } from '@crowdplay/protocol';
import { renderMetricsTable } from '@crowdplay/telemetry';

const readme = readFileSync('README.md', 'utf8');
writeFileSync('README.md', renderReadmeSettings(readme));
writeFileSync('.env.example', envExample());
writeFileSync('docs/protocol.md', renderErrorTable(readFileSync('docs/protocol.md', 'utf8')));
writeFileSync('docs/operations.md', renderMetricsTable(readFileSync('docs/operations.md', 'utf8')));
console.log('README.md settings table, .env.example, the docs/protocol.md error table and the docs/operations.md metric table regenerated');
