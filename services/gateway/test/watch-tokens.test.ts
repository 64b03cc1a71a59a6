import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { openSuiteStore, startHarness, type Harness, type SuiteStore } from './helpers.ts';

interface Minted {
  id: string;
  token: string;
  channel: string;
  label: string;
  createdAt: string;
  expiresAt: string;
}

describe('gateway watch tokens', () => {
  let suite: SuiteStore;
  let h: Harness;
  before(async () => {
    suite = await openSuiteStore();
    await suite.store.channels.ensure('capped', 'acme');
    await suite.store.channels.ensure('room2', 'acme');
    h = await startHarness({
      store: suite.store,
      channels: ['room1', 'room2'],
      gateway: { watchTokenMaxPerChannel: 20 },
    });
  });
  after(async () => {
    await h.close();
    await suite.close();
  });

  const api = (method: 'GET' | 'POST' | 'DELETE', url: string, body?: unknown, key: string | null = suite.acme.apiKey) =>
    h.gateway.app.inject({
      method,
      url,
      headers: key ? { authorization: `Bearer ${key}` } : {},
      ...(body === undefined ? {} : { payload: body as object }),
    });
  const mint = async (body: Record<string, unknown>, key = suite.acme.apiKey): Promise<Minted> => {
    const r = await api('POST', '/v1/watch-tokens', body, key);
    assert.equal(r.statusCode, 201, r.body);
    return r.json() as Minted;
  };
  /** Every watch token row (id, revoked?), to check that a refused request changed nothing. */
  const rows = async () =>
    (
      await suite.store.db.query<{ id: string; revoked: boolean }>(
        'SELECT id, revoked_at IS NOT NULL AS revoked FROM watch_tokens ORDER BY id',
      )
    ).rows;

  it('routes - a tenant mints, lists and revokes a watch token; the token text is shown once', async () => {
    const t0 = Date.now();
    const m = await mint({ channel: 'room1', ttlS: 3_600, label: 'OBS main scene' });
    assert.match(m.id, /^wt_[A-Za-z0-9_-]+$/);
    assert.match(m.token, /^cpw_[A-Za-z0-9_-]{43}$/);
    assert.equal(m.channel, 'room1');
    assert.equal(m.label, 'OBS main scene');
    const exp = Date.parse(m.expiresAt);
    assert.ok(Math.abs(exp - (t0 + 3_600_000)) < 60_000, `expiresAt ${m.expiresAt}`);
    const defaulted = await mint({ channel: 'room1' });
    assert.ok(Date.parse(defaulted.expiresAt) - t0 > 364 * 86_400_000, 'default TTL: a year');

    const list = await api('GET', '/v1/watch-tokens?channel=room1');
    assert.equal(list.statusCode, 200, list.body);
    const listed = list.json() as { tokens: Array<Record<string, unknown>>; next: string | null };
    const mine = listed.tokens.find((t) => t.id === m.id);
    assert.deepEqual(mine, {
      id: m.id,
      channel: 'room1',
      label: 'OBS main scene',
      createdAt: m.createdAt,
      expiresAt: m.expiresAt,
      revokedAt: null,
      state: 'live',
    });
    assert.ok(!list.body.includes(m.token), 'the listing never shows a token');

    const del = await api('DELETE', `/v1/watch-tokens/${m.id}`);
    assert.equal(del.statusCode, 200, del.body);
    const revoked = del.json() as { id: string; channel: string; revokedAt: string };
    assert.equal(revoked.id, m.id);
    assert.ok(Date.parse(revoked.revokedAt) >= t0 - 60_000);
    const again = await api('DELETE', `/v1/watch-tokens/${m.id}`);
    assert.equal(again.statusCode, 200, 'revoking twice is a no-op');
    assert.equal((again.json() as { revokedAt: string }).revokedAt, revoked.revokedAt);
    const after = (await api('GET', '/v1/watch-tokens?channel=room1')).json() as { tokens: Array<Record<string, unknown>> };
    assert.equal(after.tokens.find((t) => t.id === m.id)?.state, 'revoked');
    await api('DELETE', `/v1/watch-tokens/${defaulted.id}`);
  });

  it('routes - bad input is refused with a code and mints or revokes nothing', async () => {
    const rivalToken = await mint({ channel: 'rivalroom' }, suite.rival.apiKey);
    const before = await rows();
    const max = h.config.gateway.watchTokenMaxTtlS;
    const cases: Array<{
      name: string;
      method: 'POST' | 'DELETE' | 'GET';
      url: string;
      body?: unknown;
      key?: string | null;
      status: number;
      code: string;
    }> = [
      {
        name: 'unknown channel',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'nosuch' },
        status: 404,
        code: 'CP_ERR_CHANNEL_UNKNOWN',
      },
      {
        name: "another tenant's channel",
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'rivalroom' },
        status: 403,
        code: 'CP_ERR_AUTH_FORBIDDEN_CHANNEL',
      },
      {
        name: 'ttlS 0',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'room1', ttlS: 0 },
        status: 400,
        code: 'CP_ERR_PROTO_INVALID',
      },
      {
        name: 'ttlS < 0',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'room1', ttlS: -5 },
        status: 400,
        code: 'CP_ERR_PROTO_INVALID',
      },
      {
        name: 'ttlS over the maximum',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'room1', ttlS: max + 1 },
        status: 400,
        code: 'CP_ERR_PROTO_INVALID',
      },
      {
        name: 'ttlS a string',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'room1', ttlS: '60' },
        status: 400,
        code: 'CP_ERR_PROTO_INVALID',
      },
      {
        name: 'bad channel id',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'a b' },
        status: 400,
        code: 'CP_ERR_PROTO_INVALID',
      },
      {
        name: 'unknown field',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'room1', x: 1 },
        status: 400,
        code: 'CP_ERR_PROTO_INVALID',
      },
      {
        name: 'no key',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'room1' },
        key: null,
        status: 401,
        code: 'CP_ERR_AUTH_MISSING',
      },
      {
        name: 'bad key',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'room1' },
        key: 'cpk_acme_nope',
        status: 401,
        code: 'CP_ERR_AUTH_INVALID',
      },
      {
        name: 'revoke an unknown id',
        method: 'DELETE',
        url: '/v1/watch-tokens/wt_nosuchtoken',
        status: 404,
        code: 'CP_ERR_WATCH_UNKNOWN_TOKEN',
      },
      { name: 'revoke a malformed id', method: 'DELETE', url: '/v1/watch-tokens/zzz', status: 404, code: 'CP_ERR_WATCH_UNKNOWN_TOKEN' },
      {
        name: "revoke another tenant's token",
        method: 'DELETE',
        url: `/v1/watch-tokens/${rivalToken.id}`,
        status: 404,
        code: 'CP_ERR_WATCH_UNKNOWN_TOKEN',
      },
      { name: 'list without a key', method: 'GET', url: '/v1/watch-tokens', key: null, status: 401, code: 'CP_ERR_AUTH_MISSING' },
      {
        name: "list another tenant's channel",
        method: 'GET',
        url: '/v1/watch-tokens?channel=rivalroom',
        status: 403,
        code: 'CP_ERR_AUTH_FORBIDDEN_CHANNEL',
      },
      {
        name: 'list an unknown channel',
        method: 'GET',
        url: '/v1/watch-tokens?channel=nosuch',
        status: 404,
        code: 'CP_ERR_CHANNEL_UNKNOWN',
      },
      { name: 'list over 100 a page', method: 'GET', url: '/v1/watch-tokens?limit=101', status: 400, code: 'CP_ERR_PROTO_INVALID' },
      { name: 'list with limit 0', method: 'GET', url: '/v1/watch-tokens?limit=0', status: 400, code: 'CP_ERR_PROTO_INVALID' },
    ];
    for (const c of cases) {
      const r = await api(c.method, c.url, c.body, c.key === undefined ? suite.acme.apiKey : c.key);
      assert.equal(r.statusCode, c.status, `${c.name}: ${r.body}`);
      assert.equal((r.json() as { code: string }).code, c.code, c.name);
    }
    assert.deepEqual(await rows(), before, 'nothing minted or revoked');
    const rivalList = (await api('GET', '/v1/watch-tokens', undefined, suite.rival.apiKey)).json() as {
      tokens: Array<{ id: string; state: string }>;
    };
    assert.deepEqual(
      rivalList.tokens.map((t) => [t.id, t.state]),
      [[rivalToken.id, 'live']],
      "the rival's token is untouched, and acme's are not listed to it",
    );
  });

  it('routes - a channel holds at most WATCH_TOKEN_MAX_PER_CHANNEL live tokens; the list pages by id', async () => {
    const max = h.config.gateway.watchTokenMaxPerChannel;
    const minted: string[] = [];
    for (let i = 0; i < max; i++) minted.push((await mint({ channel: 'capped' })).id);
    const before = await rows();
    const over = await api('POST', '/v1/watch-tokens', { channel: 'capped' });
    assert.equal(over.statusCode, 429, over.body);
    assert.equal((over.json() as { code: string }).code, 'CP_ERR_WATCH_TOO_MANY');
    assert.deepEqual(await rows(), before);
    const seen: string[] = [];
    let after: string | null = null;
    for (let page = 0; page < 10; page++) {
      const r = await api('GET', `/v1/watch-tokens?channel=capped&limit=7${after ? `&after=${after}` : ''}`);
      const body = r.json() as { tokens: Array<{ id: string }>; next: string | null };
      assert.ok(body.tokens.length <= 7);
      seen.push(...body.tokens.map((t) => t.id));
      after = body.next;
      if (after === null) break;
    }
    assert.deepEqual(seen, [...minted].sort(), 'every token once, by id');
    await api('DELETE', `/v1/watch-tokens/${minted[0]}`);
    await mint({ channel: 'capped' }); // a revoked token no longer counts
  });
});
