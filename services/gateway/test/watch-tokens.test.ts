import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client,
  connected,
  metricValue,
  openSuiteStore,
  startHarness,
  updateFrame,
  viewerToken,
  type Harness,
  type SuiteStore,
} from './helpers.ts';

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
      gateway: { watchTokenMaxPerChannel: 20, watchTokenRecheckMs: 60_000 },
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
  const refusedCount = async (reason: string) => metricValue(await h.metricsText(), 'crowdplay_refusals_total', { reason });

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
      // The key is checked before the schema: a caller without one learns nothing of the route's fields.
      {
        name: 'no key, a bad body',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: {},
        key: null,
        status: 401,
        code: 'CP_ERR_AUTH_MISSING',
      },
      {
        name: 'an unknown key, a bad body',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { nosuch: 1 },
        key: 'cpk_acme_000',
        status: 401,
        code: 'CP_ERR_AUTH_INVALID',
      },
      { name: 'no key, a bad query', method: 'GET', url: '/v1/watch-tokens?nosuch=1', key: null, status: 401, code: 'CP_ERR_AUTH_MISSING' },
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
        name: 'a label with a bidi override',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'room1', label: 'OBS \u202Eenecs' },
        status: 400,
        code: 'CP_ERR_LABEL_INVALID',
      },
      {
        name: 'a blank label',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 'room1', label: ' \u200B ' },
        status: 400,
        code: 'CP_ERR_LABEL_INVALID',
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
        code: 'CP_ERR_CHANNEL_INVALID_ID',
      },
      {
        name: 'a channel id that is not a string',
        method: 'POST',
        url: '/v1/watch-tokens',
        body: { channel: 7 },
        status: 400,
        code: 'CP_ERR_PROTO_INVALID',
      },
      {
        name: 'list a bad channel id',
        method: 'GET',
        url: '/v1/watch-tokens?channel=bad!',
        status: 400,
        code: 'CP_ERR_CHANNEL_INVALID_ID',
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
    // Every bad page size gets the same answer, as on the rounds route.
    for (const limit of ['0', '101', '1000', 'x', '-1', '1.5']) {
      const r = await api('GET', `/v1/watch-tokens?limit=${limit}`, undefined, suite.acme.apiKey);
      assert.deepEqual(
        [r.statusCode, r.json()],
        [400, { code: 'CP_ERR_PROTO_INVALID', message: 'message does not match the v1 schema: limit: a whole number 1–100' }],
        `limit=${limit}`,
      );
    }
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

  it('socket - a watch token receives the channel but joins nothing, and every frame is refused read-only', async () => {
    const m = await mint({ channel: 'room1' });
    const refusedBefore = await refusedCount('CP_ERR_AUTH_READ_ONLY');
    const joinsBefore = h.shard.joins.length;
    const batchesBefore = h.shard.batches.length;
    const c = await connected(h.wsUrl({ role: 'crowd', channel: 'room1', token: m.token }));
    const w = await c.welcome();
    assert.equal(w.readOnly, true);
    assert.equal(w.role, 'crowd');
    assert.equal(w.viewer, undefined, 'a watch socket has no viewer id');
    h.shard.publishUpdate('room1', updateFrame('room1', 77, { rounds: [{ id: 'r1', kind: 'pool', state: 'open', outcomes: ['a', 'b'] }] }));
    const u = await c.frame((f) => f.t === 'update' && f.ev === 77, 'update');
    assert.equal((u.rounds as Array<{ id: string }>)[0]!.id, 'r1');

    c.act(1);
    c.send({ t: 'stake', seq: 2, round: 'r1', outcome: 'a', points: 10 });
    c.send({ t: 'buy', seq: 3, round: 'r1', outcome: 'a', budget: 10 });
    for (const seq of [1, 2, 3]) {
      const ack = await c.ack(seq);
      assert.equal(ack.ok, false);
      assert.equal(ack.code, 'CP_ERR_AUTH_READ_ONLY');
    }
    // A viewer's act after them reaches the shard: the watch socket's did not.
    const viewer = await connected(
      h.wsUrl({ role: 'crowd', channel: 'room1', token: await viewerToken(suite.acme.tenant.signingSecret, { sub: 'v-watch' }) }),
    );
    viewer.act(9);
    assert.equal((await viewer.ack(9)).ok, true);
    const intents = h.shard.batches.slice(batchesBefore).flatMap((b) => b.intents);
    assert.deepEqual(
      intents.map((i) => i.viewer),
      ['v-watch'],
      'only the viewer intent reached the shard',
    );
    assert.deepEqual(
      h.shard.joins.slice(joinsBefore).map((j) => j.viewer),
      ['v-watch'],
      'the watch socket joined nothing (no wallet, no welcome grant)',
    );
    assert.equal(await refusedCount('CP_ERR_AUTH_READ_ONLY'), refusedBefore + 3);
    await viewer.close();
    await c.close();
  });

  it('socket - a watch token opens only its channel; unknown, revoked and expired tokens are refused at connect', async () => {
    const m = await mint({ channel: 'room1' });
    const expired = await mint({ channel: 'room1' });
    await suite.store.db.query("UPDATE watch_tokens SET expires_at = now() - interval '1 second' WHERE id = $1", [expired.id]);
    const revoked = await mint({ channel: 'room1' });
    await api('DELETE', `/v1/watch-tokens/${revoked.id}`);
    const cases: Array<{ channel: string; token: string; code: string; close: number }> = [
      { channel: 'room2', token: m.token, code: 'CP_ERR_AUTH_WRONG_CHANNEL', close: 4003 },
      { channel: 'rivalroom', token: m.token, code: 'CP_ERR_AUTH_WRONG_CHANNEL', close: 4003 },
      { channel: 'room1', token: `cpw_${'A'.repeat(43)}`, code: 'CP_ERR_AUTH_INVALID', close: 4001 },
      { channel: 'room1', token: expired.token, code: 'CP_ERR_AUTH_EXPIRED', close: 4001 },
      { channel: 'room1', token: revoked.token, code: 'CP_ERR_AUTH_REVOKED', close: 4001 },
    ];
    for (const k of cases) {
      const before = await refusedCount(k.code);
      const c = new Client(h.wsUrl({ role: 'crowd', channel: k.channel, token: k.token }));
      const err = await c.frame((f) => f.t === 'error', `error ${k.code}`);
      assert.equal(err.code, k.code);
      assert.equal((await c.closed).code, k.close, k.code);
      assert.equal(c.frames.filter((f) => f.t === 'welcome').length, 0);
      assert.equal(await refusedCount(k.code), before + 1, `refusal ${k.code} counted`);
    }
  });

  it('socket - a revocation closes the sockets open with the token on every gateway within 5 s', async () => {
    // h2: a second gateway of the same deployment (bus and subjects); h3: one that misses the bus message and
    // finds the revocation by its periodic re-check.
    const h2 = await startHarness({ store: suite.store, bus: h.bus, prefix: h.subj.prefix, gateway: { watchTokenRecheckMs: 60_000 } });
    const h3 = await startHarness({ store: suite.store, channels: ['room1'], gateway: { watchTokenRecheckMs: 200 } });
    try {
      const m = await mint({ channel: 'room1' });
      const other = await mint({ channel: 'room1' });
      const sockets = [
        await connected(h.wsUrl({ role: 'crowd', channel: 'room1', token: m.token })),
        await connected(h2.wsUrl({ role: 'crowd', channel: 'room1', token: m.token })),
        await connected(h3.wsUrl({ role: 'crowd', channel: 'room1', token: m.token })),
      ];
      const kept = await connected(h.wsUrl({ role: 'crowd', channel: 'room1', token: other.token }));
      const t0 = Date.now();
      assert.equal((await api('DELETE', `/v1/watch-tokens/${m.id}`)).statusCode, 200);
      const closes = await Promise.all(sockets.map((s) => s.closed));
      assert.ok(Date.now() - t0 < 5_000, `closed after ${Date.now() - t0} ms`);
      for (const [i, s] of sockets.entries()) {
        assert.equal(closes[i]!.code, 4001, `gateway ${i + 1}`);
        assert.equal(s.frames.at(-1)?.code, 'CP_ERR_AUTH_REVOKED', `gateway ${i + 1}`);
      }
      assert.equal(kept.ws.readyState, kept.ws.OPEN, 'another token of the channel stays open');
      // A gateway that starts afterwards (a restart) refuses it too: the revocation is in the store.
      const late = new Client(h3.wsUrl({ role: 'crowd', channel: 'room1', token: m.token }));
      assert.equal((await late.frame((f) => f.t === 'error')).code, 'CP_ERR_AUTH_REVOKED');
      await kept.close();
    } finally {
      await h3.close();
      await h2.close();
    }
  });

  it('socket - an open watch socket whose token expires is closed by the re-check', async () => {
    const h3 = await startHarness({ store: suite.store, channels: ['room1'], gateway: { watchTokenRecheckMs: 100 } });
    try {
      const m = await mint({ channel: 'room1' });
      const c = await connected(h3.wsUrl({ role: 'crowd', channel: 'room1', token: m.token }));
      await suite.store.db.query("UPDATE watch_tokens SET expires_at = now() - interval '1 second' WHERE id = $1", [m.id]);
      assert.equal((await c.closed).code, 4001);
      assert.equal(c.frames.at(-1)?.code, 'CP_ERR_AUTH_EXPIRED');
    } finally {
      await h3.close();
    }
  });
});
