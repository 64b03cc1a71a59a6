import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Ledger } from '@crowdplay/ledger';
import { MAX_POINTS } from '@crowdplay/protocol';
import { createTelemetry } from '@crowdplay/telemetry';
import { metricValue, openSuiteStore, startHarness, viewerToken, type Harness, type SuiteStore } from './helpers.ts';

describe('gateway funding', () => {
  let suite: SuiteStore;
  let h: Harness;
  let ledger: Ledger;
  before(async () => {
    suite = await openSuiteStore();
    ledger = new Ledger(
      suite.store.db,
      { commitMs: 1, commitMaxTransfers: 100, maxQueued: 1_000 },
      createTelemetry({ service: 'ledger-test', level: 'silent', refusalLogIntervalMs: 60_000 }),
    );
    h = await startHarness({ store: suite.store, ledger });
  });
  after(async () => {
    await h.close();
    await ledger.close();
    await suite.close();
  });

  const grant = (body: unknown, key: string | null = suite.acme.apiKey) =>
    h.gateway.app.inject({
      method: 'POST',
      url: '/v1/grants',
      headers: key ? { authorization: `Bearer ${key}` } : {},
      payload: body as object,
    });
  /** GET /v1/me/balance of the suite's channel with `credential` as the bearer. */
  const meBalance = (credential: string) =>
    h.gateway.app.inject({
      method: 'GET',
      url: `/v1/me/balance?channel=${suite.channel}`,
      headers: { authorization: `Bearer ${credential}` },
    });
  const balanceOf = async (viewer: string) =>
    (
      await h.gateway.app.inject({
        method: 'GET',
        url: `/v1/balances/${encodeURIComponent(viewer)}`,
        headers: { authorization: `Bearer ${suite.acme.apiKey}` },
      })
    ).json() as { balance: number };

  it('grants - a tenant grants points, committed before the answer; a replay is a no-op', async () => {
    const r = await grant({ viewer: 'alice', points: 500, id: 'welcome-alice' });
    assert.equal(r.statusCode, 200, r.body);
    assert.deepEqual(r.json(), { viewer: 'alice', points: 500, balance: 500, replayed: false });
    const again = await grant({ viewer: 'alice', points: 500, id: 'welcome-alice' });
    assert.deepEqual(again.json(), { viewer: 'alice', points: 500, balance: 500, replayed: true });
    assert.equal((await balanceOf('alice')).balance, 500);
    const conflict = await grant({ viewer: 'alice', points: 999, id: 'welcome-alice' });
    assert.equal(conflict.statusCode, 409);
    assert.equal((conflict.json() as { code: string }).code, 'CP_ERR_LEDGER_IDEMPOTENCY_CONFLICT');
    assert.equal((await balanceOf('alice')).balance, 500, 'the conflict changed nothing');
  });

  it('grants - bad input and bad keys are refused with a code and change no balance', async () => {
    const bad: unknown[] = [
      { viewer: 'bob', points: 0, id: 'a' },
      { viewer: 'bob', points: -5, id: 'b' },
      { viewer: 'bob', points: 1.5, id: 'c' },
      { viewer: 'bob', points: 1e13, id: 'd' },
      { viewer: 'bob', points: '5', id: 'e' },
      { viewer: '', points: 5, id: 'f' },
      { viewer: 'bob', points: 5 },
      { viewer: 'bob', points: 5, id: 'has space' },
      { viewer: 'bob', points: 5, id: 'g', extra: 1 },
      // Viewer ids as the WebSocket takes them (a token's `sub`): 1–128 UTF-16 units, no control characters.
      { viewer: 'x'.repeat(129), points: 5, id: 'h' },
      { viewer: '🎉'.repeat(65), points: 5, id: 'i' },
      { viewer: 'b\u0007ob', points: 5, id: 'j' },
    ];
    // Refused by the route's schema (area http), or by its handler (area funding: a viewer id within 128 code points
    // but over 128 UTF-16 units).
    const refused = async (): Promise<number> => {
      const text = await h.metricsText();
      return (['http', 'funding'] as const)
        .map((area) => metricValue(text, 'crowdplay_refusals_total', { area, reason: 'CP_ERR_PROTO_INVALID' }))
        .reduce((a, b) => a + b, 0);
    };
    const refusedBefore = await refused();
    for (const body of bad) {
      // Over a socket: a request node has read whole is destroyed by the time the route's async auth hook has run.
      const r = await fetch(`http://127.0.0.1:${h.port}/v1/grants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${suite.acme.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const text = await r.text();
      assert.equal(r.status, 400, `${JSON.stringify(body)} → ${text}`);
      const answer = JSON.parse(text) as { code: string; message: string };
      assert.equal(answer.code, 'CP_ERR_PROTO_INVALID');
      assert.doesNotMatch(answer.message, /ended before/, `${JSON.stringify(body)} is refused for what it holds: ${answer.message}`);
    }
    assert.equal((await refused()) - refusedBefore, bad.length, 'every bad body is counted (a grant over MAX_GRANT_POINTS among them)');
    const { rows } = await suite.store.db.query<{ n: string }>("SELECT count(*) AS n FROM transfers WHERE id LIKE 'grant:acme:_'");
    assert.equal(Number(rows[0]!.n), 0, 'no grant of a refused body reached the ledger');
    const form = await h.gateway.app.inject({
      method: 'POST',
      url: '/v1/grants',
      headers: { authorization: `Bearer ${suite.acme.apiKey}`, 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'viewer=bob&points=5&id=j',
    });
    assert.equal(form.statusCode, 415, form.body);
    assert.deepEqual(form.json(), {
      code: 'CP_ERR_PROTO_INVALID',
      message: 'send the body as JSON (Content-Type: application/json), not application/x-www-form-urlencoded',
    });
    // A JSON text sent as text/plain is refused by its type too (fastify parses text/plain by default).
    const plain = await h.gateway.app.inject({
      method: 'POST',
      url: '/v1/grants',
      headers: { authorization: `Bearer ${suite.acme.apiKey}`, 'content-type': 'text/plain' },
      payload: JSON.stringify({ viewer: 'bob', points: 5, id: 'k' }),
    });
    assert.equal(plain.statusCode, 415, plain.body);
    assert.deepEqual(plain.json(), {
      code: 'CP_ERR_PROTO_INVALID',
      message: 'send the body as JSON (Content-Type: application/json), not text/plain',
    });
    const noKey = await grant({ viewer: 'bob', points: 5, id: 'h' }, null);
    assert.equal(noKey.statusCode, 401);
    assert.deepEqual(noKey.json(), {
      code: 'CP_ERR_AUTH_MISSING',
      message: 'no credentials: send the header Authorization: Bearer <tenant API key>',
    });
    const wrongKey = await grant({ viewer: 'bob', points: 5, id: 'i' }, 'cpk_acme_000');
    assert.deepEqual([wrongKey.statusCode, (wrongKey.json() as { code: string }).code], [401, 'CP_ERR_AUTH_INVALID']);
    // The key is checked before the body's schema: a caller without a valid one learns nothing of the route's fields.
    for (const [key, code] of [
      [null, 'CP_ERR_AUTH_MISSING'],
      ['cpk_acme_000', 'CP_ERR_AUTH_INVALID'],
    ] as const) {
      const r = await grant({}, key);
      assert.deepEqual([r.statusCode, (r.json() as { code: string }).code], [401, code], r.body);
    }
    assert.equal((await balanceOf('bob')).balance, 0);
  });

  it("balances - a tenant sees only its own viewers' wallets; a viewer sees its own with its token", async () => {
    await grant({ viewer: 'carol', points: 70, id: 'c1' });
    const rival = await h.gateway.app.inject({
      method: 'GET',
      url: '/v1/balances/carol',
      headers: { authorization: `Bearer ${suite.rival.apiKey}` },
    });
    assert.deepEqual(rival.json(), { viewer: 'carol', balance: 0 }, "the rival tenant's carol is another wallet");
    const token = await viewerToken(suite.acme.tenant.signingSecret, { sub: 'carol' });
    const me = await meBalance(token);
    assert.deepEqual(me.json(), { viewer: 'carol', balance: 70 });
    const forged = await h.gateway.app.inject({
      method: 'GET',
      url: `/v1/me/balance?channel=${suite.channel}`,
      headers: { authorization: 'Bearer x.y.z' },
    });
    assert.deepEqual([forged.statusCode, (forged.json() as { code: string }).code], [401, 'CP_ERR_AUTH_INVALID']);
    const noToken = await h.gateway.app.inject({ method: 'GET', url: `/v1/me/balance?channel=${suite.channel}` });
    assert.deepEqual(noToken.json(), {
      code: 'CP_ERR_AUTH_MISSING',
      message: 'no credentials: send the header Authorization: Bearer <viewer token>',
    });
    for (const url of ['/v1/me/balance', '/v1/me/balance?channel=']) {
      const noChannel = await h.gateway.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${token}` } });
      const body = noChannel.json() as { code: string; message: string };
      assert.deepEqual([noChannel.statusCode, body.code], [400, 'CP_ERR_PROTO_INVALID'], url);
      assert.match(body.message, /query parameter channel is required: GET \/v1\/me\/balance\?channel=<channel id>/, url);
    }
    const badChannel = await h.gateway.app.inject({
      method: 'GET',
      url: '/v1/me/balance?channel=a%20b',
      headers: { authorization: `Bearer ${token}` },
    });
    assert.deepEqual([badChannel.statusCode, (badChannel.json() as { code: string }).code], [400, 'CP_ERR_CHANNEL_INVALID_ID']);
  });

  it('balances - viewer ids up to 128 characters work in the path; longer ones are refused with a code', async () => {
    const long = `v${'x'.repeat(127)}`;
    assert.equal((await grant({ viewer: long, points: 9, id: 'long-1' })).statusCode, 200);
    assert.equal((await balanceOf(long)).balance, 9);
    const tooLong = await h.gateway.app.inject({
      method: 'GET',
      url: `/v1/balances/${'y'.repeat(129)}`,
      headers: { authorization: `Bearer ${suite.acme.apiKey}` },
    });
    assert.deepEqual([tooLong.statusCode, (tooLong.json() as { code: string }).code], [400, 'CP_ERR_PROTO_INVALID']);
  });
  it('grants - a grant past MAX_POINTS in the wallet is refused with CP_ERR_LEDGER_BALANCE_LIMIT and changes nothing', async () => {
    // Up to the cap through the ledger (the route takes at most 10^12 a grant), then the route.
    await ledger.grant('acme', 'dave', MAX_POINTS - 10, 'cap-dave-1');
    const over = await grant({ viewer: 'dave', points: 11, id: 'cap-dave-2' });
    assert.equal(over.statusCode, 409, over.body);
    assert.equal((over.json() as { code: string }).code, 'CP_ERR_LEDGER_BALANCE_LIMIT');
    assert.equal((await balanceOf('dave')).balance, MAX_POINTS - 10, 'nothing granted');
    const { rows } = await suite.store.db.query<{ n: string }>("SELECT count(*) AS n FROM transfers WHERE id LIKE 'grant:acme:cap-dave-%'");
    assert.equal(Number(rows[0]!.n), 0);
    const upTo = await grant({ viewer: 'dave', points: 10, id: 'cap-dave-3' });
    assert.deepEqual(upTo.json(), { viewer: 'dave', points: 10, balance: MAX_POINTS, replayed: false });
  });

  it('balances - a balance past the safe-integer range is a 500 CP_ERR_INTERNAL, never a rounded figure', async () => {
    await grant({ viewer: 'erin', points: 1, id: 'erin-1' });
    const set = (v: string) =>
      suite.store.db.query("UPDATE accounts SET balance = $1::bigint WHERE tenant_id = 'acme' AND kind = 'wallet' AND owner = 'erin'", [v]);
    try {
      await set('9100000000000001');
      const byTenant = await h.gateway.app.inject({
        method: 'GET',
        url: '/v1/balances/erin',
        headers: { authorization: `Bearer ${suite.acme.apiKey}` },
      });
      assert.deepEqual([byTenant.statusCode, byTenant.json()], [500, { code: 'CP_ERR_INTERNAL', message: 'internal error' }]);
      const token = await viewerToken(suite.acme.tenant.signingSecret, { sub: 'erin' });
      const own = await meBalance(token);
      assert.deepEqual([own.statusCode, own.json()], [500, { code: 'CP_ERR_INTERNAL', message: 'internal error' }]);
    } finally {
      await set('1');
    }
  });
  it('auth - the Bearer scheme is case-insensitive; another scheme is told Bearer is expected', async () => {
    await grant({ viewer: 'fay', points: 4, id: 'fay-1' });
    for (const scheme of ['bearer', 'BEARER', 'beaRer']) {
      const r = await h.gateway.app.inject({
        method: 'GET',
        url: '/v1/balances/fay',
        headers: { authorization: `${scheme} ${suite.acme.apiKey}` },
      });
      assert.deepEqual([r.statusCode, r.json()], [200, { viewer: 'fay', balance: 4 }], scheme);
    }
    const token = await viewerToken(suite.acme.tenant.signingSecret, { sub: 'fay' });
    const own = await h.gateway.app.inject({
      method: 'GET',
      url: `/v1/me/balance?channel=${suite.channel}`,
      headers: { authorization: `bearer ${token}` },
    });
    assert.deepEqual(own.json(), { viewer: 'fay', balance: 4 });
    const basic = await h.gateway.app.inject({
      method: 'GET',
      url: '/v1/balances/fay',
      headers: { authorization: `Basic ${Buffer.from('acme:secret').toString('base64')}` },
    });
    assert.deepEqual(
      [basic.statusCode, basic.json()],
      [
        401,
        {
          code: 'CP_ERR_AUTH_MISSING',
          message:
            'no credentials: the Authorization scheme Basic is not accepted, the Bearer scheme is expected: send Authorization: Bearer <tenant API key>',
        },
      ],
    );
    const watch = await h.gateway.app.inject({ method: 'GET', url: '/v1/watch-tokens', headers: { authorization: 'Basic abc' } });
    assert.equal((watch.json() as { message: string }).message.includes('the Bearer scheme is expected'), true);
  });

  it('balances - a viewer token on a tenant-key route is refused as a viewer token, not an unknown key; nothing is granted', async () => {
    const token = await viewerToken(suite.acme.tenant.signingSecret, { sub: 'vtok' });
    for (const [method, url, payload] of [
      ['GET', '/v1/balances/vtok', undefined],
      ['POST', '/v1/grants', { viewer: 'vtok', points: 5, id: 'vt-1' }],
    ] as const) {
      const r = await h.gateway.app.inject({ method, url, headers: { authorization: `Bearer ${token}` }, ...(payload ? { payload } : {}) });
      assert.deepEqual(
        [r.statusCode, r.json()],
        [
          401,
          {
            code: 'CP_ERR_AUTH_INVALID',
            message: "credentials rejected: a viewer token is not a tenant API key: this route takes the tenant's API key (cpk_…)",
          },
        ],
        `${method} ${url}`,
      );
    }
    assert.equal((await balanceOf('vtok')).balance, 0, 'nothing granted');
    const garbage = await h.gateway.app.inject({ method: 'GET', url: '/v1/balances/dave', headers: { authorization: 'Bearer nonsense' } });
    assert.match((garbage.json() as { message: string }).message, /unknown API key/);
  });

  it('balances - a viewer token not valid yet (nbf beyond the clock skew) is refused saying so', async () => {
    const token = await viewerToken(suite.acme.tenant.signingSecret, { sub: 'early', nbfS: 3_600 });
    const r = await meBalance(token);
    assert.deepEqual(
      [r.statusCode, r.json()],
      [
        401,
        {
          code: 'CP_ERR_AUTH_INVALID',
          message: 'credentials rejected: not valid yet: its nbf (not before) is later than now plus TOKEN_CLOCK_SKEW_S',
        },
      ],
    );
  });

  it('balances - a tenant API key on /v1/me/balance is refused with a message naming the route the key reads balances on', async () => {
    const r = await meBalance(suite.acme.apiKey);
    assert.equal(r.statusCode, 401);
    const body = r.json() as { code: string; message: string };
    assert.equal(body.code, 'CP_ERR_AUTH_INVALID');
    assert.match(body.message, /a tenant API key is not a viewer token/);
    assert.match(body.message, /GET \/v1\/balances\/:viewer/);
  });

  it('balances - a watch token on /v1/me/balance is refused as read-only (403 CP_ERR_AUTH_READ_ONLY)', async () => {
    const { token } = await suite.store.watchTokens.create('acme', suite.channel, 600, 'overlay');
    const r = await meBalance(token);
    assert.deepEqual(
      [r.statusCode, r.json()],
      [
        403,
        {
          code: 'CP_ERR_AUTH_READ_ONLY',
          message: "a watch token is read-only (it only watches a channel's socket): this route takes a viewer token",
        },
      ],
    );
  });
});
