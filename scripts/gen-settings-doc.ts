/**
 * Writes the files generated from libs/config's schema — docs/settings.md,
 * `.env.example` and docs/decisions/0100-setting-defaults.md — and the error
 * table of docs/protocol.md from libs/protocol's catalogue. `npm run docs:settings`.
 * Also the metric table of docs/operations.md from libs/telemetry's catalogue.
 * libs/config/test/config.test.ts, libs/protocol/test/protocol.test.ts and
 * libs/telemetry/test/catalogue.test.ts fail when a file drifts.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { defaultsRecord, envExample, settingsDoc } from '@crowdplay/config';
import { renderErrorTable } from '@crowdplay/protocol';
import { renderMetricsTable } from '@crowdplay/telemetry';

mkdirSync('docs/decisions', { recursive: true });
writeFileSync('docs/settings.md', settingsDoc());
writeFileSync('.env.example', envExample());
writeFileSync('docs/decisions/0100-setting-defaults.md', defaultsRecord());
writeFileSync('docs/protocol.md', renderErrorTable(readFileSync('docs/protocol.md', 'utf8')));
writeFileSync('docs/operations.md', renderMetricsTable(readFileSync('docs/operations.md', 'utf8')));
console.log(
  'docs/settings.md, .env.example, docs/decisions/0100-setting-defaults.md, the docs/protocol.md error table and the docs/operations.md metric table regenerated',
);
