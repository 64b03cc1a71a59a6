import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { openSuiteStore, startHarness, viewerToken, type Harness, type SuiteStore } from './helpers.ts';

describe('gateway round history route', () => {
  let suite: SuiteStore;
  let h: Harness;
  before(async () => {
    suite = await openSuiteStore();
    h = await startHarness({ store: suite.store, listen: false });
  });
  after(async () => {
    await h.close();
    await suite.close();
  });

  const rounds = (query: string, authorization = `Bearer ${suite.acme.apiKey}`) =>
    h.gateway.app.inject({ method: 'GET', url: `/v1/channels/${suite.channel}/rounds${query}`, headers: { authorization } });

  it('query - an unknown or repeated parameter is a 400 CP_ERR_PROTO_INVALID naming it', async () => {
    assert.deepEqual((await rounds('?limit=5')).json(), { rounds: [] });
    const cases: Array<[string, string]> = [
      ['?foo=bar', 'unknown query parameter "foo"'],
      ['?limit=5&foo=1', 'unknown query parameter "foo"'],
      ['?limit=1&limit=2', 'query parameter "limit" given more than once'],
      ['?before=a&before=b', 'query parameter "before" given more than once'],
    ];
    for (const [query, message] of cases) {
      const r = await rounds(query);
      assert.deepEqual([r.statusCode, r.json()], [400, { code: 'CP_ERR_PROTO_INVALID', message }], query);
    }
    const viewer = await viewerToken(suite.acme.tenant.signingSecret, { sub: 'vic' });
    const asViewer = await rounds('?foo=bar', `Bearer ${viewer}`);
    assert.deepEqual([asViewer.statusCode, (asViewer.json() as { code: string }).code], [400, 'CP_ERR_PROTO_INVALID']);
  });

  it('path - a parameter past 1,024 characters is a 414 CP_ERR_PROTO_INVALID that does not echo the URL', async () => {
    const long = 'q'.repeat(1_100);
    const urls: Array<['GET' | 'DELETE', string]> = [
      ['GET', `/v1/channels/${long}/rounds`],
      ['DELETE', `/v1/watch-tokens/${long}`],
    ];
    for (const [method, url] of urls) {
      const r = await h.gateway.app.inject({ method, url, headers: { authorization: `Bearer ${suite.acme.apiKey}` } });
      assert.deepEqual(
        [r.statusCode, r.json()],
        [414, { code: 'CP_ERR_PROTO_INVALID', message: 'a path segment is longer than 1024 characters' }],
        url.slice(0, 20),
      );
      assert.equal(r.body.includes('qqqq'), false);
    }
    const badUrl = await h.gateway.app.inject({ method: 'GET', url: '/v1/channels/%E0%A4%A/rounds' });
    assert.equal(badUrl.statusCode, 400);
    assert.deepEqual(badUrl.json(), { code: 'CP_ERR_PROTO_INVALID', message: 'the URL path is not valid percent-encoding' });
  });

  it('auth - a watch token is refused as read-only (403 CP_ERR_AUTH_READ_ONLY), naming what the route takes', async () => {
    const { token } = await suite.store.watchTokens.create('acme', suite.channel, 600, 'overlay');
    const r = await rounds('', `Bearer ${token}`);
    assert.deepEqual(
      [r.statusCode, r.json()],
      [
        403,
        {
          code: 'CP_ERR_AUTH_READ_ONLY',
          message: "a watch token is read-only (it only watches a channel's socket): this route takes a viewer token or tenant API key",
        },
      ],
    );
  });
});
