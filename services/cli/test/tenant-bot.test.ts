/**
 * `crowdplay tenant bot set|list|remove`: a tenant's own bot is checked with getMe (through TELEGRAM_API_ROOT: the
 * stub), stored with its secrets sealed, listed and removed; every refusal exits with its code and stores nothing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { openStore, type Store } from '@crowdplay/store';
import { BotSecretBox } from '@crowdplay/telegram';
import { TelegramStubs } from '@crowdplay/telegram/testing';
import { testSchema, type TestSchema } from '@crowdplay/testing';

const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));
const KEY = 'c0'.repeat(32);
const A = { token: '111111111:tokenOfBotAaaaaaaaaaaaaaaaaaaaaaaaaa', username: 'acme_bot' };
const B = { token: '222222222:tokenOfBotBbbbbbbbbbbbbbbbbbbbbbbbbb', username: 'acme_second_bot' };
const REVOKED = '111111111:revokedTokenRevokedTokenRevokedToken';

describe('crowdplay tenant bot', () => {
  let schema: TestSchema;
  let store: Store;
  let stubs: TelegramStubs;
  before(async () => {
    schema = await testSchema();
    store = await openStore({ url: schema.databaseUrl, schema: schema.schema, poolMax: 2, pgliteDir: 'memory' });
    await store.tenants.create('acme', 'Acme');
    await store.tenants.create('globex', 'Globex');
    stubs = new TelegramStubs([A, B]);
    await stubs.listen();
  });
  after(async () => {
    await stubs.close();
    await store.close();
    await schema.drop();
  });

  // Not spawnSync: the Bot API stub answers getMe from this process's event loop.
  const run = (argv: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stderr: string; stdout: string }> =>
    new Promise((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...argv], {
        env: {
          ...process.env,
          DATABASE_URL: schema.databaseUrl,
          DATABASE_SCHEMA: schema.schema,
          LOG_LEVEL: 'warn',
          TELEGRAM_API_ROOT: stubs.url,
          TELEGRAM_BOT_SECRETS_KEY: KEY,
          TELEGRAM_BOT_TOKEN: '',
          ...env,
        },
        timeout: 30_000,
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
  const cli = (args: string[], env: Record<string, string> = {}) => run(['tenant', 'bot', ...args], env);
  const count = async (): Promise<number> =>
    Number((await store.db.query<{ n: string }>('SELECT count(*) AS n FROM tenant_bots')).rows[0]!.n);

  it('tenant bot set - getMe names the bot; stored with its token and secret sealed, never printed; set again updates it', async () => {
    const r = await cli(['set', 'acme', '--token', A.token, '--webhook-secret', 'acme-secret-1']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /@acme_bot \(id 111111111\) registered/);
    assert.match(r.stdout, /\/v1\/telegram\/webhook\/111111111/);
    assert.ok(!r.stdout.includes(A.token) && !r.stdout.includes('acme-secret-1'), 'nothing secret is printed');
    const row = (await store.bots.get(111111111))!;
    assert.equal(row.tenantId, 'acme');
    assert.equal(row.username, 'acme_bot');
    assert.ok(!row.tokenEnc.includes(A.token.split(':')[1]!) && !row.webhookSecretEnc.includes('acme-secret-1'), 'sealed at rest');
    const box = new BotSecretBox(Buffer.from(KEY, 'hex'));
    assert.equal(box.open(111111111, row.tokenEnc), A.token);
    assert.equal(box.open(111111111, row.webhookSecretEnc), 'acme-secret-1');
    const again = await cli(['set', 'acme', '--token', A.token, '--webhook-secret', 'acme-secret-2']);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /updated/);
    assert.equal(box.open(111111111, (await store.bots.get(111111111))!.webhookSecretEnc), 'acme-secret-2');
    const list = await cli(['list', 'acme']);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /^111111111\t@acme_bot\t\/v1\/telegram\/webhook\/111111111\t/m);
    assert.ok(!list.stdout.includes(A.token));
    // `crowdplay telegram setup --tenant-bot`: the bot's own webhook URL and secret, set at Telegram with its own token.
    const setup = await run(['telegram', 'setup', '--public-url', 'https://bot.example.org', '--tenant-bot', '111111111']);
    assert.equal(setup.code, 0, setup.stderr + setup.stdout);
    assert.equal(stubs.of(A.token).webhook().url, 'https://bot.example.org/v1/telegram/webhook/111111111');
    assert.equal(stubs.of(A.token).webhook().secretToken, 'acme-secret-2');
    assert.ok(!setup.stdout.includes(A.token) && !setup.stdout.includes('acme-secret-2'));
    const unknown = await run(['telegram', 'setup', '--public-url', 'https://bot.example.org', '--tenant-bot', '333']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /CP_ERR_TELEGRAM_BOT_UNKNOWN/);
  });

  it("tenant bot set - a token Telegram rejects, an unknown tenant, another tenant's bot, a second bot over the quota, no key outside dev: each refused with its code, nothing stored", async () => {
    const before = await count();
    const sealedBefore = (await store.bots.get(111111111))!.tokenEnc;
    const refused = async (args: string[], code: RegExp, env: Record<string, string> = {}, exit = 1): Promise<void> => {
      const r = await cli(args, env);
      assert.equal(r.code, exit, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, code, args.join(' '));
      for (const secret of [A.token, B.token, REVOKED]) assert.ok(!r.stderr.includes(secret.split(':')[1]!), 'the token is never printed');
    };
    await refused(
      ['set', 'acme', '--token', REVOKED, '--webhook-secret', 's'],
      /CP_ERR_TELEGRAM_BOT_REJECTED: Telegram did not accept the bot token: getMe answered 401/,
    );
    await refused(['set', 'nobody', '--token', B.token, '--webhook-secret', 's'], /CP_ERR_TENANT_UNKNOWN/);
    await refused(['set', 'globex', '--token', A.token, '--webhook-secret', 's'], /CP_ERR_TELEGRAM_BOT_TAKEN/);
    await refused(['set', 'acme', '--token', A.token, '--webhook-secret', 's'], /CP_ERR_TELEGRAM_BOT_TAKEN/, {
      TELEGRAM_BOT_TOKEN: A.token,
      TELEGRAM_WEBHOOK_SECRET: 'x',
    });
    await store.quotas.set('acme', { bots: 1 });
    await refused(
      ['set', 'acme', '--token', B.token, '--webhook-secret', 's'],
      /CP_ERR_TENANT_QUOTA: tenant acme is over its bots quota of 1/,
    );
    await store.quotas.set('acme', { bots: null });
    await refused(['set', 'acme', '--token', B.token, '--webhook-secret', 's'], /CP_ERR_CONFIG_INVALID.*TELEGRAM_BOT_SECRETS_KEY/s, {
      TELEGRAM_BOT_SECRETS_KEY: '',
      HOST: '0.0.0.0',
    });
    // On loopback too: a DATABASE_URL (this suite's PostgreSQL) is no place for the published dev key.
    await refused(['set', 'acme', '--token', B.token, '--webhook-secret', 's'], /CP_ERR_CONFIG_INVALID.*TELEGRAM_BOT_SECRETS_KEY/s, {
      TELEGRAM_BOT_SECRETS_KEY: '',
      HOST: '127.0.0.1',
    });
    // Bad flags: refused before the store is opened or Telegram asked.
    await refused(['set', 'acme', '--token', 'not-a-token', '--webhook-secret', 's'], /CP_ERR_PROTO_INVALID: .*--token/, {}, 2);
    await refused(['set', 'acme', '--token', B.token], /CP_ERR_PROTO_INVALID: .*--webhook-secret/, {}, 2);
    await refused(['set', 'acme', '--token', B.token, '--webhook-secret', 'has space'], /CP_ERR_PROTO_INVALID/, {}, 2);
    assert.equal(await count(), before, 'nothing stored');
    assert.equal((await store.bots.get(111111111))!.tokenEnc, sealedBefore, 'nothing changed');
    assert.equal(await store.bots.get(222222222), null);
  });

  it("tenant bot remove - removes the tenant's bot; another tenant's or an unknown one is refused CP_ERR_TELEGRAM_BOT_UNKNOWN", async () => {
    const wrong = await cli(['remove', 'globex', '111111111']);
    assert.equal(wrong.code, 1);
    assert.match(wrong.stderr, /CP_ERR_TELEGRAM_BOT_UNKNOWN/);
    assert.notEqual(await store.bots.get(111111111), null);
    const ok = await cli(['remove', 'acme', '111111111']);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(await store.bots.get(111111111), null);
    assert.match((await cli(['list', 'acme'])).stdout, /has no bots/);
  });
});
