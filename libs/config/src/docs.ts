/**
 * The files generated from the schema by `npm run docs:settings`
 * (scripts/gen-settings-doc.ts): docs/settings.md (the one-line reference,
 * grouped by area), `.env.example`, and docs/decisions/0100-setting-defaults.md
 * (the reason behind each default that has one). libs/config/test/config.test.ts
 * fails when a file differs from what these return.
 */
import { AREAS, leaves, type Area, type Setting } from './dsl.ts';
import { schema, sectionAreas, type Schema } from './schema.ts';

/** One setting with its dotted path in the schema and its area. */
export interface SettingEntry {
  readonly path: string;
  readonly area: Area;
  readonly setting: Setting<unknown>;
}

/** Every setting in declaration order, with its area (its own `area`, else its schema section's). */
export function settingEntries(): SettingEntry[] {
  return leaves(schema).map(({ path, setting }) => ({
    path,
    area: setting.area ?? sectionAreas[path.split('.')[0] as keyof Schema],
    setting,
  }));
}

/** The entries grouped by area, in the order of {@link AREAS}; an area with no setting is left out. */
export function byArea(): Array<{ area: Area; entries: SettingEntry[] }> {
  const all = settingEntries();
  return AREAS.map((area) => ({ area, entries: all.filter((e) => e.area === area) })).filter((g) => g.entries.length > 0);
}

const cell = (s: string): string => s.replace(/\|/g, '\\|');
const title = (area: Area): string => area.charAt(0).toUpperCase() + area.slice(1);
/** The default as a cell: a placeholder such as `(empty)` or `(dev value)` as text, a value as code. */
const defaultCell = (s: Setting<unknown>): string => (/^\(.*\)$/.test(s.defaultText) ? s.defaultText : `\`${s.defaultText}\``);

/** One Markdown table row: variable, type, unit, default, what it does. */
function row(s: Setting<unknown>): string {
  return `| \`${s.env}\` | ${s.type} | ${s.unit || '—'} | ${defaultCell(s)} | ${cell(s.doc)} |`;
}

/** A line shown under an area's heading, before its table. */
const AREA_NOTES: Partial<Record<Area, string>> = {
  'process tuning':
    'What each knob trades, where it is applied and how to see its effect, and the allocator values fixed for every deployment: [tuning.md](tuning.md).',
};

const HEADER = ['| variable | type | unit | default | what it does |', '|---|---|---|---|---|'];

/** Every setting as one Markdown table, in declaration order (`crowdplay settings`). */
export function settingsTable(): string {
  return [...HEADER, ...leaves(schema).map(({ setting }) => row(setting))].join('\n');
}

/** docs/settings.md: an introduction, then one table per area. */
export function settingsDoc(): string {
  const parts = [
    '# Settings',
    '',
    '<!-- generated from libs/config/src/schema.ts by `npm run docs:settings`; do not edit -->',
    '',
    'Every crowdplay setting is an environment variable, read once at start-up by libs/config',
    '(`crowdplay settings` prints this table too). A bad value stops the process before anything',
    'starts, naming the variable. Integers accept `_` between digits (`60_000`). Why a default is',
    'what it is: [decisions/0100-setting-defaults.md](decisions/0100-setting-defaults.md); the',
    'process tuning knobs and the values fixed in the start script: [tuning.md](tuning.md).',
  ];
  for (const { area, entries } of byArea()) {
    parts.push('', `## ${title(area)}`, '');
    if (AREA_NOTES[area]) parts.push(AREA_NOTES[area], '');
    parts.push(...HEADER, ...entries.map((e) => row(e.setting)));
  }
  return `${parts.join('\n')}\n`;
}

/** `.env.example`: every setting commented out at its default (a secret empty), grouped by area. */
export function envExample(): string {
  const parts: string[] = [];
  for (const { area, entries } of byArea()) {
    parts.push(`# ---- ${area} ----`);
    for (const { setting: s } of entries)
      parts.push(`# ${s.doc}${s.unit ? ` (${s.unit})` : ''}\n# ${s.env}=${s.secret ? '' : String(s.default)}`);
  }
  return `${parts.join('\n\n')}\n`;
}

/** docs/decisions/0100-setting-defaults.md: the `why` of every setting that has one, grouped by area. */
export function defaultsRecord(): string {
  const parts = [
    '# 0100. Setting defaults',
    '',
    '<!-- generated from the `why` fields of libs/config/src/schema.ts by `npm run docs:settings`; do not edit -->',
    '',
    '## Context',
    '',
    "A setting's default should be right for a deployment that sets nothing. Where a default was",
    'chosen against a measurement or an outside rule (a Telegram limit, a retry window), the reason',
    'is kept beside the setting in libs/config (`why`) and collected here; the settings table',
    '([../settings.md](../settings.md)) says only what each setting does.',
    '',
    'The rigs named below, with their commands (figures and JSON in docs/benchmarks.md):',
    '',
    '- the pinned 1,000-chat rollover: `npm run loadtest -- rollover --chats 1000 --players 10` (the product on one core);',
    '- the 400-chat rollover on two cores: `npm run loadtest -- rollover --chats 400 --players 10 --no-pin`;',
    '- the crowd scenario: `npm run loadtest -- crowd --viewers 10000 --duration 30`;',
    '- the failover scenario and `npm run bench -- ledger`, `npm run bench -- sendq`, as docs/benchmarks.md runs them.',
    '',
    '## Decision',
    '',
    'Each default below is the value its reason gives. A setting not listed has a default that',
    'follows from what it does (an address, a protocol default, a size that bounds nothing measured).',
    'The process tuning figures are in [0101-memory-settings.md](0101-memory-settings.md).',
  ];
  for (const { area, entries } of byArea()) {
    const withWhy = entries.filter((e) => e.setting.why);
    if (withWhy.length === 0) continue;
    parts.push('', `### ${title(area)}`, '');
    for (const { setting: s } of withWhy) parts.push(`- \`${s.env}\` = ${defaultCell(s)}${s.unit ? ` ${s.unit}` : ''}: ${s.why}`);
  }
  parts.push(
    '',
    '## Consequences',
    '',
    'Changing a default means changing its `why` in the same commit, with the new measurement and its',
    'command; `npm run docs:settings` regenerates this record.',
  );
  return `${parts.join('\n')}\n`;
}
