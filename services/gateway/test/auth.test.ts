import { SignJWT } from 'jose';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CrowdplayError } from '@crowdplay/protocol';
import {
  Client,
  connected,
  fakeRouter,
  metricValue,
  openSuiteStore,
  startHarness,
  viewerToken,
  waitUntil,
  type Harness,
  type SuiteStore,
} from './helpers.ts';
import { Authenticator } from '../src/auth.ts';

let suite: SuiteStore;
let h: Harness;
before(async () => {
  suite = await openSuiteStore();
  h = await startHarness({ store: suite.store, channels: [suite.channel, suite.rivalChannel, 'gamechan'] });
});
after(async () => {
  await h.close();
  await suite.close();
});

/**
 * Connects with `query`, expects an error frame with `code` then a close with
 * `closeCode`, and checks that nothing changed: no welcome, no intent
 * forwarded, no connection opened, the socket is gone, and the refusal was counted.
 */
async function expectRefused(
  harness: Harness,
  query: Record<string, string | number | undefined>,
  code: string,
  closeCode: number,
  /** Appended to the URL as it is (`&k=v`): what a record cannot say, a repeated parameter. */
  extraQuery = '',
): Promise<void> {
  const before = await harness.metricsText();
  const refusedBefore = metricValue(before, 'crowdplay_refusals_total', { reason: code });
  const intentsBefore = harness.shard.intents;
  const socketsBefore = harness.gateway.stats().sockets;
  const c = new Client(harness.wsUrl(query) + extraQuery);
  await c.opened;
  c.act(1); // must be dropped: the socket never gets past auth
  const closed = await c.closed;
  assert.equal(closed.code, closeCode, `close code for ${code}`);
  assert.equal(closed.reason, code, 'the close reason is the error code');
  assert.deepEqual(
    c.frames.map((f) => f.t),
    ['error'],
    'only an error frame, no welcome',
  );
  assert.equal(c.frames[0]?.code, code);
  assert.equal(typeof c.frames[0]?.message, 'string');
  await waitUntil(() => harness.gateway.stats().sockets === socketsBefore, 'socket released');
  const text = await harness.metricsText();
  assert.equal(metricValue(text, 'crowdplay_refusals_total', { reason: code }), refusedBefore + 1, `refusal ${code} counted`);
  assert.equal(metricValue(text, 'crowdplay_connections_opened_total'), metricValue(before, 'crowdplay_connections_opened_total'));
  assert.equal(metricValue(text, 'crowdplay_connections'), metricValue(before, 'crowdplay_connections'));
  assert.equal(harness.shard.intents, intentsBefore, 'no intent forwarded');
}

describe('gateway auth - Authenticator', () => {
  it('crowd - a viewer whose channel read is in flight while a game creates the channel is authenticated', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let reads = 0;
    const channels = Object.create(suite.store.channels) as typeof suite.store.channels;
    channels.get = async (id) => {
      if (reads++ === 0) await gate; // only the viewer's read waits
      return suite.store.channels.get(id);
    };
    const auth = new Authenticator({ ...suite.store, channels } as typeof suite.store, { clockSkewS: 5 });
    const token = await viewerToken(suite.acme.tenant.signingSecret, { sub: 'racer' });
    const viewer = auth.crowd('racechan', token);
    await waitUntil(() => reads >= 1, 'the viewer reading the channel');
    assert.deepEqual(await auth.game('racechan', suite.acme.apiKey), { tenantId: 'acme' });
    release();
    assert.deepEqual(await viewer, { tenantId: 'acme', viewer: 'racer' });
  });
});

describe('gateway auth', () => {
  it('crowd - unknown channel is refused with CP_ERR_CHANNEL_UNKNOWN and 4004', async () => {
    const token = await viewerToken(suite.acme.tenant.signingSecret);
    await expectRefused(h, { role: 'crowd', channel: 'nosuchchannel', token }, 'CP_ERR_CHANNEL_UNKNOWN', 4004);
  });

  it('crowd - a channel id that is not subject-safe is refused with CP_ERR_CHANNEL_INVALID_ID and 4004', async () => {
    const token = await viewerToken(suite.acme.tenant.signingSecret);
    await expectRefused(h, { role: 'crowd', channel: 'a.b', token }, 'CP_ERR_CHANNEL_INVALID_ID', 4004);
    await expectRefused(h, { role: 'crowd', token }, 'CP_ERR_CHANNEL_INVALID_ID', 4004);
  });

  it('crowd - a token with a bad signature is refused with CP_ERR_AUTH_INVALID and 4001', async () => {
    const token = await viewerToken('not-the-tenant-secret');
    await expectRefused(h, { role: 'crowd', channel: suite.channel, token }, 'CP_ERR_AUTH_INVALID', 4001);
    // Signed by another tenant: its secret does not verify on this channel.
    const rivalToken = await viewerToken(suite.rival.tenant.signingSecret, { tid: 'rival' });
    await expectRefused(h, { role: 'crowd', channel: suite.channel, token: rivalToken }, 'CP_ERR_AUTH_INVALID', 4001);
    await expectRefused(h, { role: 'crowd', channel: suite.channel, token: 'not.a.jwt' }, 'CP_ERR_AUTH_INVALID', 4001);
  });

  it('crowd - an expired token is refused with CP_ERR_AUTH_EXPIRED and 4001 (beyond the clock skew)', async () => {
    const token = await viewerToken(suite.acme.tenant.signingSecret, { expS: -(h.config.gateway.tokenClockSkewS + 60) });
    await expectRefused(h, { role: 'crowd', channel: suite.channel, token }, 'CP_ERR_AUTH_EXPIRED', 4001);
    // Within the skew it is still accepted.
    const skewed = await viewerToken(suite.acme.tenant.signingSecret, { expS: -5 });
    const c = await connected(h.wsUrl({ role: 'crowd', channel: suite.channel, token: skewed }));
    await c.close();
  });

  it('crowd - a missing token is refused with CP_ERR_AUTH_MISSING and 4001', async () => {
    await expectRefused(h, { role: 'crowd', channel: suite.channel }, 'CP_ERR_AUTH_MISSING', 4001);
  });

  it('crowd - claims: sub is required, tid must be the tenant, ch must be the channel', async () => {
    const secret = suite.acme.tenant.signingSecret;
    await expectRefused(
      h,
      { role: 'crowd', channel: suite.channel, token: await viewerToken(secret, { sub: 'a\u0000b' }) },
      'CP_ERR_AUTH_INVALID',
      4001,
    );
    const noExp = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject('forever').sign(new TextEncoder().encode(secret));
    await expectRefused(h, { role: 'crowd', channel: suite.channel, token: noExp }, 'CP_ERR_AUTH_INVALID', 4001);
    await expectRefused(
      h,
      { role: 'crowd', channel: suite.channel, token: await viewerToken(secret, { sub: '' }) },
      'CP_ERR_AUTH_INVALID',
      4001,
    );
    await expectRefused(
      h,
      { role: 'crowd', channel: suite.channel, token: await viewerToken(secret, { sub: 'x'.repeat(129) }) },
      'CP_ERR_AUTH_INVALID',
      4001,
    );
    // `tg:` ids are Telegram players': only a Mini App session (verified initData) carries one.
    await expectRefused(
      h,
      { role: 'crowd', channel: suite.channel, token: await viewerToken(secret, { sub: 'tg:42' }) },
      'CP_ERR_AUTH_INVALID',
      4001,
    );
    await expectRefused(
      h,
      { role: 'crowd', channel: suite.channel, token: await viewerToken(secret, { tid: 'rival' }) },
      'CP_ERR_AUTH_INVALID',
      4001,
    );
    await expectRefused(
      h,
      { role: 'crowd', channel: suite.channel, token: await viewerToken(secret, { ch: 'otherroom' }) },
      'CP_ERR_AUTH_WRONG_CHANNEL',
      4003,
    );
    const ok = await connected(
      h.wsUrl({ role: 'crowd', channel: suite.channel, token: await viewerToken(secret, { tid: 'acme', ch: suite.channel }) }),
    );
    await ok.close();
  });

  it('crowd - a bad lastEventId, a bad role and a repeated parameter are refused with 4400', async () => {
    const token = await viewerToken(suite.acme.tenant.signingSecret);
    await expectRefused(h, { role: 'crowd', channel: suite.channel, token, lastEventId: '-1' }, 'CP_ERR_PROTO_INVALID', 4400);
    await expectRefused(h, { role: 'admin', channel: suite.channel, token }, 'CP_ERR_PROTO_INVALID', 4400);
    await expectRefused(h, { role: 'crowd', channel: suite.channel, token }, 'CP_ERR_PROTO_INVALID', 4400, '&role=game');
    await expectRefused(h, { role: 'crowd', channel: suite.channel, token }, 'CP_ERR_PROTO_INVALID', 4400, `&channel=${suite.channel}`);
  });

  it('game - a bad key is refused with CP_ERR_AUTH_INVALID and 4001; no key with CP_ERR_AUTH_MISSING', async () => {
    await expectRefused(h, { role: 'game', channel: suite.channel, key: 'cpk_acme_nope' }, 'CP_ERR_AUTH_INVALID', 4001);
    await expectRefused(h, { role: 'game', channel: suite.channel }, 'CP_ERR_AUTH_MISSING', 4001);
    assert.equal(await suite.store.channels.get('cpk_acme_nope'), null);
  });

  it("game - a key used on another tenant's channel is refused with CP_ERR_AUTH_FORBIDDEN_CHANNEL and 4003; the channel stays the other tenant's", async () => {
    await expectRefused(h, { role: 'game', channel: suite.rivalChannel, key: suite.acme.apiKey }, 'CP_ERR_AUTH_FORBIDDEN_CHANNEL', 4003);
    assert.equal((await suite.store.channels.get(suite.rivalChannel))?.tenantId, 'rival');
    assert.equal(h.gateway.stats().games, 0);
  });

  it("game - a Telegram chat's channel that does not exist is refused with CP_ERR_CHANNEL_UNKNOWN and 4004, and not created", async () => {
    for (const channel of ['tgn777', 'tg123', 'tb42_n5']) {
      await expectRefused(h, { role: 'game', channel, key: suite.acme.apiKey }, 'CP_ERR_CHANNEL_UNKNOWN', 4004);
      assert.equal(await suite.store.channels.get(channel), null, `${channel} not created`);
    }
    // One that exists (its bot's tenant made it) is served to that tenant's game like any channel of its own.
    await suite.store.channels.ensure('tgn778', 'acme');
    const game = await connected(h.wsUrl({ role: 'game', channel: 'tgn778', key: suite.acme.apiKey }));
    assert.equal((await game.welcome()).role, 'game');
    await game.close();
    await waitUntil(() => h.gateway.stats().games === 0, 'game slot released');
  });

  it('game - a valid key creates the channel for its tenant; a second game on it is refused with 4009', async () => {
    assert.equal(await suite.store.channels.get('gamechan'), null);
    const game = await connected(h.wsUrl({ role: 'game', channel: 'gamechan', key: suite.acme.apiKey }));
    const w = await game.welcome();
    assert.equal(w.role, 'game');
    assert.equal(w.viewer, undefined);
    assert.equal((await suite.store.channels.get('gamechan'))?.tenantId, 'acme');
    await expectRefused(h, { role: 'game', channel: 'gamechan', key: suite.acme.apiKey }, 'CP_ERR_CHANNEL_GAME_CONNECTED', 4009);
    assert.equal(game.ws.readyState, game.ws.OPEN, 'the first game is untouched');
    // Viewers can now join the new channel.
    const v = await connected(h.wsUrl({ role: 'crowd', channel: 'gamechan', token: await viewerToken(suite.acme.tenant.signingSecret) }));
    await v.close();
    await game.close();
    await waitUntil(() => h.gateway.stats().games === 0, 'game slot released');
    const again = await connected(h.wsUrl({ role: 'game', channel: 'gamechan', key: suite.acme.apiKey }));
    await again.close();
  });

  it('router - an assign failure is refused with CP_ERR_CHANNEL_UNAVAILABLE and 4500', async () => {
    const failing = await startHarness({
      store: suite.store,
      router: fakeRouter(async (channel) => {
        throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [channel]);
      }),
    });
    try {
      const token = await viewerToken(suite.acme.tenant.signingSecret);
      await expectRefused(failing, { role: 'crowd', channel: suite.channel, token }, 'CP_ERR_CHANNEL_UNAVAILABLE', 4500);
    } finally {
      await failing.close();
    }
  });

  it('limits - over the per-address connection bucket the upgrade gets HTTP 429 with Retry-After', async () => {
    const limited = await startHarness({ store: suite.store, gateway: { connBurst: 2, connRatePerS: 1 } });
    try {
      const token = await viewerToken(suite.acme.tenant.signingSecret);
      const url = limited.wsUrl({ role: 'crowd', channel: suite.channel, token });
      const a = await connected(url);
      const b = await connected(url);
      const c = new Client(url);
      const refused = await c.refused;
      assert.equal(refused.status, 429);
      assert.equal(refused.headers['retry-after'], '1');
      assert.equal((JSON.parse(refused.body) as { code: string }).code, 'CP_ERR_LIMIT_CONNECTION_RATE');
      const text = await limited.metricsText();
      assert.equal(metricValue(text, 'crowdplay_refusals_total', { area: 'gateway', reason: 'CP_ERR_LIMIT_CONNECTION_RATE' }), 1);
      assert.equal(metricValue(text, 'crowdplay_connections_opened_total'), 2);
      assert.equal(limited.gateway.stats().sockets, 2);
      await Promise.all([a.close(), b.close()]);
    } finally {
      await limited.close();
    }
  });

  it('limits - past WS_MAX_CONNECTIONS the upgrade gets HTTP 503', async () => {
    const full = await startHarness({ store: suite.store, gateway: { maxConnections: 1 } });
    try {
      const token = await viewerToken(suite.acme.tenant.signingSecret);
      const url = full.wsUrl({ role: 'crowd', channel: suite.channel, token });
      const a = await connected(url);
      const refused = await new Client(url).refused;
      assert.equal(refused.status, 503);
      assert.equal((JSON.parse(refused.body) as { code: string }).code, 'CP_ERR_LIMIT_MAX_CONNECTIONS');
      assert.equal(metricValue(await full.metricsText(), 'crowdplay_refusals_total', { reason: 'CP_ERR_LIMIT_MAX_CONNECTIONS' }), 1);
      await a.close();
    } finally {
      await full.close();
    }
  });
});
