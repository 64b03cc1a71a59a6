import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { isCrowdplayError } from '@crowdplay/protocol';
import {
  AREAS,
  byArea,
  defaultConfig,
  defaultsRecord,
  DOC_MAX_CHARS,
  envExample,
  leaves,
  listenError,
  loadConfig,
  schema,
  settingEntries,
  settingsDoc,
} from '../src/index.ts';

const root = fileURLToPath(new URL('../../../', import.meta.url));

describe('config', () => {
  it('load - defaults when the environment is empty, frozen', () => {
    const c = loadConfig({});
    assert.equal(c.engine.tickMs, 250);
    assert.equal(c.http.port, 8080);
    assert.equal(c.mode, 'standalone');
    assert.ok(Object.isFrozen(c) && Object.isFrozen(c.engine));
    assert.throws(() => {
      (c.engine as { tickMs: number }).tickMs = 1;
    }, TypeError);
  });

  it('load - parses typed values, digit separators and booleans', () => {
    const c = loadConfig({
      TICK_MS: '100',
      WS_MAX_BUFFERED_BYTES: '2_097_152',
      DEMO_MOTION: 'off',
      NATS_URL: 'nats://a:4222,nats://b:4222',
    });
    assert.equal(c.engine.tickMs, 100);
    assert.equal(c.gateway.maxBufferedBytes, 2_097_152);
    assert.equal(c.standalone.demoMotion, false);
    assert.equal(c.bus.natsUrl, 'nats://a:4222,nats://b:4222');
  });

  it('load - a boolean takes true/false, on/off, yes/no or 1/0, and the refusal lists them', () => {
    for (const [raw, value] of [
      ['ON', true],
      [' yes ', true],
      ['1', true],
      ['Off', false],
      ['no', false],
      ['0', false],
    ] as const)
      assert.equal(loadConfig({ DEMO_MOTION: raw }).standalone.demoMotion, value, raw);
    assert.throws(
      () => loadConfig({ DEMO_MOTION: 'maybe' }),
      (err: unknown) =>
        isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID') &&
        err.message.includes('DEMO_MOTION: expected true or false (on/off, yes/no and 1/0 work too), got "maybe"'),
    );
  });

  it('load - every bad variable is named in one error', () => {
    assert.throws(
      () =>
        loadConfig({
          TICK_MS: 'fast',
          PORT: '70000',
          DATABASE_URL: 'mysql://x',
          LOG_LEVEL: 'loud',
          GATEWAY_ID: 'a.b',
          HEAP_GROWING_PERCENT: '-5',
          TELEGRAM_SENDQ_BOOK_MS: '20000',
          BOARD_RENDER_NICE: '20',
          ROUTER_DRAIN_BATCH_CHANNELS: '1001',
        }),
      (err: unknown) => {
        assert.ok(isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID'));
        for (const v of [
          'TICK_MS',
          'PORT',
          'DATABASE_URL',
          'LOG_LEVEL',
          'GATEWAY_ID',
          'HEAP_GROWING_PERCENT',
          'TELEGRAM_SENDQ_BOOK_MS',
          'BOARD_RENDER_NICE',
          'ROUTER_DRAIN_BATCH_CHANNELS',
        ])
          assert.match(err.message, new RegExp(`${v}: `));
        return true;
      },
    );
  });

  it('load - EMBED_ORIGINS takes origins only: a path, a quote or a CSP keyword is refused at start', () => {
    for (const bad of ['https://a.example/page', "'self'", 'https://a.example; script-src *', '*', 'a.example']) {
      assert.throws(
        () => loadConfig({ EMBED_ORIGINS: bad }),
        (err: unknown) => isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID') && /EMBED_ORIGINS: must match origins like/.test(err.message),
        bad,
      );
    }
    assert.equal(
      loadConfig({ EMBED_ORIGINS: 'https://a.example, http://localhost:3000' }).http.embedOrigins,
      'https://a.example, http://localhost:3000',
    );
  });

  it('load - ROUND_MIN_DURATION_MS above ROUND_MAX_DURATION_MS is refused, naming both; equal bounds are fine', () => {
    assert.equal(loadConfig({ ROUND_MIN_DURATION_MS: '5000', ROUND_MAX_DURATION_MS: '5000' }).rounds.minDurationMs, 5_000);
    assert.throws(
      () => loadConfig({ ROUND_MIN_DURATION_MS: '100000000' }),
      (err: unknown) =>
        isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID') &&
        /ROUND_MIN_DURATION_MS: must be at most ROUND_MAX_DURATION_MS \(86400000\), got 100000000/.test(err.message),
    );
    // A refused maximum is named alone: the minimum is not compared with it.
    assert.throws(
      () => loadConfig({ ROUND_MIN_DURATION_MS: '5000', ROUND_MAX_DURATION_MS: '10' }),
      (err: unknown) => isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID') && !/ROUND_MIN_DURATION_MS: /.test(err.message),
    );
  });

  it('load - TELEGRAM_GROUP_BURST: 1 by default, an integer from 1 to TELEGRAM_GROUP_RATE_PER_MIN, else refused at start', () => {
    assert.equal(loadConfig({}).telegram.groupBurst, 1);
    assert.equal(loadConfig({ TELEGRAM_GROUP_BURST: '2' }).telegram.groupBurst, 2);
    assert.equal(loadConfig({ TELEGRAM_GROUP_BURST: '20' }).telegram.groupBurst, 20);
    assert.equal(loadConfig({ TELEGRAM_GROUP_RATE_PER_MIN: '10', TELEGRAM_GROUP_BURST: '10' }).telegram.groupBurst, 10);
    const bad: Array<[Record<string, string>, string]> = [
      [{}, '0'],
      [{}, '-1'],
      [{}, '1.5'],
      [{}, 'two'],
      [{}, '21'],
      [{ TELEGRAM_GROUP_RATE_PER_MIN: '4' }, '5'],
    ];
    for (const [env, burst] of bad) {
      assert.throws(
        () => loadConfig({ ...env, TELEGRAM_GROUP_BURST: burst }),
        (err: unknown) =>
          isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID') &&
          /TELEGRAM_GROUP_BURST: /.test(err.message) &&
          !/TELEGRAM_GROUP_RATE_PER_MIN: /.test(err.message),
        burst,
      );
    }
    // A refused group rate is named alone: the burst is not compared with it.
    assert.throws(
      () => loadConfig({ TELEGRAM_GROUP_RATE_PER_MIN: '0', TELEGRAM_GROUP_BURST: '2' }),
      (err: unknown) =>
        isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID') &&
        /TELEGRAM_GROUP_RATE_PER_MIN: /.test(err.message) &&
        !/TELEGRAM_GROUP_BURST/.test(err.message),
    );
  });

  it('load - cluster mode requires every real engine URL', () => {
    assert.throws(
      () => loadConfig({ CROWDPLAY_MODE: 'cluster', DATABASE_URL: 'postgres://x/y' }),
      (err: unknown) =>
        isCrowdplayError(err) &&
        /NATS_URL: required/.test(err.message) &&
        /REDIS_URL: required/.test(err.message) &&
        !/DATABASE_URL/.test(err.message),
    );
  });

  it('load - a bot token without its webhook secret is refused before anything starts', () => {
    assert.throws(
      () => loadConfig({ TELEGRAM_BOT_TOKEN: '123:abc' }),
      (err: unknown) => isCrowdplayError(err) && /TELEGRAM_WEBHOOK_SECRET: required when TELEGRAM_BOT_TOKEN is set/.test(err.message),
    );
    assert.equal(loadConfig({ TELEGRAM_BOT_TOKEN: '123:abc', TELEGRAM_WEBHOOK_SECRET: 's3cret' }).telegram.webhookSecret, 's3cret');
    assert.equal(loadConfig({}).telegram.botToken, '', 'no bot: no secret needed');
  });

  it('schema - every setting has a unique env name, a doc and a default that parses', () => {
    const all = leaves(schema);
    assert.equal(new Set(all.map((l) => l.setting.env)).size, all.length);
    for (const { setting } of all) {
      assert.ok(setting.doc.length > 10, `${setting.env} has a doc`);
      if (setting.secret) continue;
      const parsed = setting.parse(String(setting.default));
      assert.ok(parsed.ok, `${setting.env} default parses`);
    }
  });

  it('defaultConfig - merges a patch per section', () => {
    const c = defaultConfig({ engine: { tickMs: 40 } });
    assert.equal(c.engine.tickMs, 40);
    assert.equal(c.engine.updateIntervalMs, 250);
  });

  it('docs - every doc is one sentence of at most 160 characters on one line; no doc or why cites a work period', () => {
    const long = leaves(schema)
      .filter(({ setting }) => setting.doc.length > DOC_MAX_CHARS)
      .map(({ setting }) => `${setting.env} (${setting.doc.length})`);
    assert.deepEqual(long, [], `docs over ${DOC_MAX_CHARS} characters: move the reason into \`why\``);
    for (const { setting } of leaves(schema)) {
      for (const text of [setting.doc, setting.why ?? ''])
        assert.doesNotMatch(text, /\bsession \d|\bissue\b|\bissue's rig\b/i, `${setting.env} cites a work period`);
      assert.ok(!/\n/.test(setting.doc), `${setting.env}: doc on one line`);
      assert.ok(!/[.!?;:]\s+[A-Z][a-z]/.test(setting.doc.replace(/`[^`]*`/g, '')), `${setting.env}: one sentence, got "${setting.doc}"`);
    }
  });

  it('docs - every setting has an area; the areas come in order, process tuning last, each setting once', () => {
    const groups = byArea();
    assert.deepEqual(
      groups.map((g) => g.area),
      AREAS.filter((a) => groups.some((g) => g.area === a)),
    );
    assert.equal(groups.at(-1)!.area, 'process tuning');
    assert.deepEqual(
      groups.find((g) => g.area === 'process tuning')!.entries.map((e) => e.setting.env),
      ['HEAP_GROWING_PERCENT', 'SEMI_SPACE_MB', 'HELPER_THREAD_NICE', 'BOARD_RENDER_NICE'],
    );
    assert.equal(groups.flatMap((g) => g.entries).length, leaves(schema).length);
    assert.ok(settingEntries().every((e) => AREAS.includes(e.area)));
  });

  it('docs - the table renders doc but not why; the defaults record renders why with its default', () => {
    const doc = settingsDoc();
    const record = defaultsRecord();
    const s = schema.http.listenBacklog;
    assert.ok(doc.includes(`| \`${s.env}\` | ${s.type} | connections | \`4096\` | ${s.doc} |`), 'the row of HTTP_LISTEN_BACKLOG');
    assert.ok(s.why && !doc.includes(s.why), 'why stays out of the table');
    assert.ok(record.includes(`- \`${s.env}\` = \`4096\` connections: ${s.why}`), 'why in the record');
    assert.ok(doc.indexOf('## Gateway') < doc.indexOf('## Process tuning'));
    assert.ok(!record.includes(schema.http.host.env), 'a setting without why is not in the record');
  });

  it('docs - docs/settings.md, .env.example and docs/decisions/0100-setting-defaults.md match the schema', () => {
    for (const [file, want] of [
      ['docs/settings.md', settingsDoc()],
      ['.env.example', envExample()],
      ['docs/decisions/0100-setting-defaults.md', defaultsRecord()],
    ] as const)
      assert.equal(readFileSync(`${root}${file}`, 'utf8'), want, `${file} drifted: run \`npm run docs:settings\``);
  });
});

describe('listenError', () => {
  const at = { portSetting: 'PORT', hostSetting: 'HOST', host: '::1', port: 80 };
  const sysErr = (code: string): Error => Object.assign(new Error(`listen ${code}`), { code });
  it('names the setting to change for a port in use, a privileged port and a host not of this machine', () => {
    const cases: Array<[string, string]> = [
      ['EADDRINUSE', 'PORT: [::1]:80 is in use by another process (EADDRINUSE); stop it or set PORT to a free port'],
      ['EACCES', 'PORT: [::1]:80 needs a privilege this process does not have (EACCES); set PORT to 1024 or above'],
      ['EADDRNOTAVAIL', 'HOST: ::1 is not an address of this machine (EADDRNOTAVAIL)'],
    ];
    for (const [code, why] of cases) {
      const cause = sysErr(code);
      const e = listenError(cause, at);
      assert.ok(isCrowdplayError(e, 'CP_ERR_CONFIG_INVALID'), code);
      assert.ok(e.message.endsWith(why), `${code}: ${e.message}`);
      assert.equal(e.cause, cause);
    }
  });
  it('returns any other error as it is', () => {
    const other = sysErr('ECONNRESET');
    assert.equal(listenError(other, at), other);
    assert.equal(listenError(null, at), null);
  });
});
