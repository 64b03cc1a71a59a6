/** What a start-up error may show of DATABASE_URL and NATS_URL: never a password or a NATS token. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { redactUrl } from '@crowdplay/cli';

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
