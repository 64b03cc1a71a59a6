import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { CloseCode, CrowdplayError, ERRORS, isCrowdplayError, parseInbound, renderErrorTable } from '../src/index.ts';

const root = fileURLToPath(new URL('../../../', import.meta.url));

describe('protocol', () => {
  it('parseInbound - accepts valid crowd and game frames', () => {
    assert.deepEqual(parseInbound('crowd', '{"t":"act","seq":1,"action":"pull","option":"left"}'), {
      t: 'act',
      seq: 1,
      action: 'pull',
      option: 'left',
    });
    const d = parseInbound('game', '{"t":"declare","actions":[{"name":"vote","options":["a","b"],"maxPerTick":10,"cost":5}]}');
    assert.equal(d.t, 'declare');
  });

  it('parseInbound - bad frames get their code', () => {
    const cases: Array<[role: 'crowd' | 'game', raw: string, code: string]> = [
      ['crowd', '{not json', 'CP_ERR_PROTO_MALFORMED'],
      ['crowd', '[1,2]', 'CP_ERR_PROTO_MALFORMED'],
      ['crowd', 'null', 'CP_ERR_PROTO_MALFORMED'],
      ['crowd', '{"t":"declare","actions":[]}', 'CP_ERR_PROTO_UNKNOWN_TYPE'],
      ['crowd', '{"seq":1}', 'CP_ERR_PROTO_UNKNOWN_TYPE'],
      ['game', '{"t":"act","seq":1,"action":"x"}', 'CP_ERR_PROTO_UNKNOWN_TYPE'],
      ['crowd', '{"t":"act","seq":-1,"action":"x"}', 'CP_ERR_PROTO_INVALID'],
      ['crowd', '{"t":"act","seq":1.5,"action":"x"}', 'CP_ERR_PROTO_INVALID'],
      ['crowd', '{"t":"act","seq":1,"action":"x","extra":1}', 'CP_ERR_PROTO_INVALID'],
      ['crowd', '{"t":"act","seq":1,"action":"has space"}', 'CP_ERR_PROTO_INVALID'],
      ['game', '{"t":"declare","actions":[{"name":"x","maxPerTick":0}]}', 'CP_ERR_PROTO_INVALID'],
      ['game', '{"t":"declare","actions":[{"name":"x","maxPerTick":1,"cost":-5}]}', 'CP_ERR_PROTO_INVALID'],
      ['game', '{"t":"declare","actions":[{"name":"x","maxPerTick":1,"cost":1.5}]}', 'CP_ERR_PROTO_INVALID'],
      ['game', '{"t":"declare","actions":[{"name":"x","maxPerTick":1,"options":["a","a"]}]}', 'CP_ERR_PROTO_INVALID'],
      ['game', '{"t":"state","state":[1]}', 'CP_ERR_PROTO_INVALID'],
    ];
    for (const [role, raw, code] of cases) {
      assert.throws(
        () => parseInbound(role as 'crowd', raw),
        (e: unknown) => isCrowdplayError(e) && e.code === code,
        `${role} ${raw} → ${code}`,
      );
    }
  });

  it('errors - codes follow CP_ERR_<AREA>_<WHAT>, close codes are in the documented set', () => {
    const closeCodes = new Set<number>(Object.values(CloseCode));
    for (const [code, spec] of Object.entries(ERRORS)) {
      assert.match(code, /^CP_ERR_[A-Z]+(_[A-Z]+)*$/);
      const closeCode = (spec as { closeCode?: number }).closeCode;
      if (closeCode !== undefined) assert.ok(closeCodes.has(closeCode), `${code} close code ${closeCode}`);
    }
    const e = new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', ['demo']);
    assert.equal(e.message, 'unknown channel demo');
    assert.deepEqual([e.httpStatus, e.closeCode], [404, 4004]);
  });

  it('docs - the error table in docs/protocol.md matches the catalogue', () => {
    const doc = readFileSync(`${root}docs/protocol.md`, 'utf8');
    assert.equal(renderErrorTable(doc), doc, 'docs/protocol.md error table drifted: run `npm run docs:settings`');
  });
});

describe('protocol - error messages name the field', () => {
  it('a game declare without maxPerTick says so', () => {
    assert.throws(
      () => parseInbound('game', '{"t":"declare","actions":[{"name":"vote","options":["a","b"]}]}'),
      (e: unknown) => isCrowdplayError(e, 'CP_ERR_PROTO_INVALID') && /maxPerTick/.test(e.message),
    );
    assert.throws(
      () => parseInbound('crowd', '{}'),
      (e: unknown) => isCrowdplayError(e, 'CP_ERR_PROTO_UNKNOWN_TYPE') && /no t field/.test(e.message),
    );
  });
});

describe('protocol - display labels', () => {
  const open = (extra: Record<string, unknown>): string =>
    JSON.stringify({ t: 'round.open', round: 'r1', kind: 'pool', outcomes: ['heads', 'tails'], durationMs: 1_000, ...extra });
  const declare = (action: Record<string, unknown>): string =>
    JSON.stringify({ t: 'declare', actions: [{ name: 'vote', options: ['jp', 'fr'], maxPerTick: 10, ...action }] });

  it('labels - a title and labels in any script pass, counted in code points', () => {
    const title = '🎲'.repeat(120); // 120 code points, 240 UTF-16 units
    const m = parseInbound('game', open({ title, labels: { heads: '表 (おもて)', tails: 'Pile <b>' } }));
    assert.equal(m.t === 'round.open' && m.title, title);
    const d = parseInbound('game', declare({ label: 'Vote 🗳', optionLabels: { jp: '日本', fr: 'France' } }));
    assert.deepEqual(d.t === 'declare' && d.actions[0]?.optionLabels, { jp: '日本', fr: 'France' });
  });

  it('labels - bad labels are refused with CP_ERR_LABEL_INVALID naming the field', () => {
    const cases: Array<[raw: string, field: string]> = [
      [open({ title: 'é'.repeat(121) }), '/title'], // 121 code points in 121 UTF-16 units: within the schema's bound
      [open({ title: '   ' }), '/title'],
      [open({ title: '' }), '/title'], // empty is blank too: the label rule answers, not the schema
      [open({ labels: { heads: '' } }), '/labels/heads'],
      [declare({ label: '' }), '/actions/0/label'],
      [open({ title: 'who wins?\n' }), '/title'],
      [open({ title: 'abc\u202Eevil' }), '/title'],
      [open({ title: 'a\u2066b' }), '/title'],
      [open({ labels: { heads: 'x'.repeat(65) } }), '/labels/heads'],
      [open({ labels: { heads: '\u0000' } }), '/labels/heads'],
      [open({ labels: { edge: 'Edge' } }), '/labels/edge'],
      [declare({ label: 'a\u200Fb' }), '/actions/0/label'],
      [declare({ optionLabels: { de: 'Deutschland' } }), '/actions/0/optionLabels/de'],
      [JSON.stringify({ t: 'declare', actions: [{ name: 'go', maxPerTick: 1, optionLabels: { x: 'X' } }] }), '/actions/0/optionLabels/x'],
      [open({ title: '\uD800' }), '/title'],
      [open({ labels: { heads: '\u200B' } }), '/labels/heads'], // a zero-width space alone: nothing to see
      [open({ title: '🎲'.repeat(121) }), '/title'], // 242 UTF-16 units: still told in code points
      [declare({ optionLabels: { jp: 'x'.repeat(200) } }), '/actions/0/optionLabels/jp'],
    ];
    for (const [raw, field] of cases) {
      assert.throws(
        () => parseInbound('game', raw),
        (err: unknown) => isCrowdplayError(err) && err.code === 'CP_ERR_LABEL_INVALID' && err.message.includes(field),
        raw,
      );
    }
  });

  it('labels - a label over the schema bound in UTF-16 units is a schema refusal', () => {
    assert.throws(
      () => parseInbound('game', open({ title: 'x'.repeat(481) })),
      (err: unknown) => isCrowdplayError(err) && err.code === 'CP_ERR_PROTO_INVALID',
    );
  });
});
