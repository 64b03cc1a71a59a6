import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { embedOriginMatcher } from '../src/cors.ts';
import { startHarness, unusedStore, type Harness } from './helpers.ts';

describe('gateway CORS for embedding', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({
      store: unusedStore(),
      listen: false,
      http: { embedOrigins: 'https://streamer.example, https://*.widgets.example:8443' },
    });
  });
  after(async () => {
    await h.close();
  });

  const preflight = (url: string, origin: string, method = 'GET') =>
    h.gateway.app.inject({
      method: 'OPTIONS',
      url,
      headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': 'authorization, content-type' },
    });
  const devToken = (origin: string) =>
    h.gateway.app.inject({ method: 'POST', url: '/v1/tokens/dev', headers: { origin }, payload: { channel: 'demo' } });

  it('cors - a listed origin gets access-control-allow-origin on the viewer routes, without credentials', async () => {
    for (const origin of ['https://streamer.example', 'https://a.widgets.example:8443', 'https://b.c.widgets.example:8443']) {
      const r = await devToken(origin);
      assert.equal(r.statusCode, 200, r.body);
      assert.equal(r.headers['access-control-allow-origin'], origin, origin);
      assert.equal(r.headers['access-control-allow-credentials'], undefined, 'never with credentials');
      assert.match(String(r.headers.vary), /origin/i);
      for (const url of ['/sdk-viewer.js', '/v1/me/balance?channel=demo', '/v1/tokens/dev', '/v1/channels/demo/rounds?limit=5']) {
        const p = await preflight(url, origin, url === '/v1/tokens/dev' ? 'POST' : 'GET');
        assert.equal(p.statusCode, 204, `${url} ${origin}: ${p.body}`);
        assert.equal(p.headers['access-control-allow-origin'], origin, url);
        assert.match(String(p.headers['access-control-allow-headers']), /authorization/i, url);
        assert.equal(p.headers['access-control-allow-credentials'], undefined, url);
      }
    }
  });

  it('cors - another origin gets no CORS headers', async () => {
    for (const origin of [
      'https://evil.example',
      'http://streamer.example',
      'https://widgets.example:8443',
      'https://a.widgets.example',
      'null',
    ]) {
      const r = await devToken(origin);
      assert.equal(r.statusCode, 200, 'the route still answers (same-origin rules are the browser’s)');
      assert.equal(r.headers['access-control-allow-origin'], undefined, origin);
      const p = await preflight('/v1/me/balance?channel=demo', origin);
      assert.equal(p.headers['access-control-allow-origin'], undefined, origin);
      assert.notEqual(p.statusCode, 204, origin);
    }
  });

  it('cors - the API-key routes and the rest get no CORS, even for a listed origin', async () => {
    const origin = 'https://streamer.example';
    for (const [url, method] of [
      ['/v1/watch-tokens', 'POST'],
      ['/v1/watch-tokens', 'GET'],
      ['/v1/watch-tokens/wt_x', 'DELETE'],
      ['/v1/grants', 'POST'],
      ['/v1/balances/alice', 'GET'],
      ['/v1/channels/demo/rounds/extra', 'GET'],
      ['/healthz', 'GET'],
    ] as const) {
      const p = await preflight(url, origin, method);
      assert.equal(p.headers['access-control-allow-origin'], undefined, `${method} ${url}`);
      assert.notEqual(p.statusCode, 204, `${method} ${url}`);
    }
    // An actual call without a key (refused before the store): no CORS header either.
    const r = await h.gateway.app.inject({ method: 'GET', url: '/v1/watch-tokens', headers: { origin } });
    assert.equal(r.statusCode, 401);
    assert.equal(r.headers['access-control-allow-origin'], undefined);
  });

  it('cors - without EMBED_ORIGINS nothing answers CORS', async () => {
    const plain = await startHarness({ store: unusedStore(), listen: false });
    try {
      const r = await plain.gateway.app.inject({
        method: 'POST',
        url: '/v1/tokens/dev',
        headers: { origin: 'https://streamer.example' },
        payload: { channel: 'demo' },
      });
      assert.equal(r.statusCode, 200);
      assert.equal(r.headers['access-control-allow-origin'], undefined);
    } finally {
      await plain.close();
    }
  });

  it('cors - origin matching: exact scheme, host and port; a wildcard is any subdomain, not the domain', () => {
    const ok = embedOriginMatcher(['https://streamer.example', 'https://*.widgets.example']);
    assert.equal(ok('https://streamer.example'), true);
    assert.equal(ok('https://STREAMER.example'), true);
    assert.equal(ok('https://streamer.example:444'), false);
    assert.equal(ok('https://streamer.example.evil'), false);
    assert.equal(ok('https://xstreamer.example'), false);
    assert.equal(ok('https://a.widgets.example'), true);
    assert.equal(ok('https://widgets.example'), false);
    assert.equal(ok('https://a.widgetsxexample'), false);
    assert.equal(embedOriginMatcher([])('https://streamer.example'), false);
  });
});
