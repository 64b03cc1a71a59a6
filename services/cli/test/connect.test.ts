/** What a start-up error may show of DATABASE_URL and NATS_URL (never a password or a NATS token), and how a refused login reads. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '@crowdplay/config';
import { isCrowdplayError } from '@crowdplay/protocol';
import { serviceUrls } from '@crowdplay/testing';
import { connectStore, redactUrl } from '@crowdplay/cli';

describe('redactUrl', () => {
  it('redactUrl - hides passwords and NATS tokens, keeps user, host, port, path and query', () => {
    assert.equal(redactUrl('postgresql://postgres:s3cret@127.0.0.1:5432/test'), 'postgresql://postgres:***@127.0.0.1:5432/test');
    assert.equal(redactUrl('postgres://u:p%40ss@db/x?sslmode=require'), 'postgres://u:***@db/x?sslmode=require');
    assert.equal(redactUrl('nats://tok3n@h:4222,nats://u:p@ss@h2:4222'), 'nats://***@h:4222,nats://u:***@h2:4222');
  });

  it('redactUrl - a URL without a secret is unchanged', () => {
    for (const u of ['postgresql://postgres@127.0.0.1/x', 'nats://127.0.0.1:4222', 'redis://h:6379', 'not a url'])
      assert.equal(redactUrl(u), u);
  });
});

describe('connectStore', () => {
  it('a login PostgreSQL refuses (unknown role or database) is CP_ERR_CONFIG_INVALID naming DATABASE_URL, password hidden', async () => {
    const { databaseUrl } = await serviceUrls();
    const role = new URL(databaseUrl);
    role.username = 'cp_no_such_role';
    role.password = 'hunter2secret';
    const db = new URL(databaseUrl);
    db.pathname = '/cp_no_such_database';
    const cases: Array<[string, RegExp]> = [
      [role.toString(), /role "cp_no_such_role" does not exist|password authentication failed for user "cp_no_such_role"/],
      [db.toString(), /database "cp_no_such_database" does not exist/],
    ];
    for (const [url, reason] of cases) {
      const config = defaultConfig({ db: { url, connectTimeoutMs: 5_000 } });
      await assert.rejects(connectStore(config), (err: unknown) => {
        assert.ok(isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID'), String(err));
        assert.match(
          err.message,
          new RegExp(`DATABASE_URL=${redactUrl(url).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: PostgreSQL refused the login: `),
        );
        assert.match(err.message, reason);
        assert.doesNotMatch(err.message, /hunter2secret/);
        return true;
      });
    }
  });
});
