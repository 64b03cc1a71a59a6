import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Ledger } from '@crowdplay/ledger';
import { utcDay } from '@crowdplay/store';
import { createTelemetry } from '@crowdplay/telemetry';
import {
  Client,
  connected,
  metricValue,
  openSuiteStore,
  startHarness,
  viewerToken,
  waitUntil,
  type Harness,
  type SuiteStore,
} from './helpers.ts';

let suite: SuiteStore;
before(async () => {
  suite = await openSuiteStore();
  // acme: the noisy tenant, over each quota; rival keeps the (generous) defaults.
  await suite.store.quotas.set('acme', { connections: 2, intentsPerS: 3, channels: 1 });
});
after(async () => {
  await suite.close();
});

async function crowd(h: Harness, tenant: 'acme' | 'rival', sub: string): Promise<Client> {
  const secret = (tenant === 'acme' ? suite.acme : suite.rival).tenant.signingSecret;
  const channel = tenant === 'acme' ? suite.channel : suite.rivalChannel;
  return new Client(h.wsUrl({ role: 'crowd', channel, token: await viewerToken(secret, { sub }) }));
}

async function refusedWith4030(c: Client): Promise<void> {
  const closed = await c.closed;
  assert.equal(closed.code, 4030);
  assert.equal(closed.reason, 'CP_ERR_TENANT_QUOTA');
  assert.deepEqual(
    c.frames.map((f) => [f.t, f.code]),
    [['error', 'CP_ERR_TENANT_QUOTA']],
    'an error frame, no welcome',
  );
}

describe('gateway tenant quotas', () => {
  it('tenant quotas - a tenant over its connections, intents and channels is refused; another tenant on the same gateway is not', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.channel, suite.rivalChannel, 'rival-new'] });
    try {
      // Connections: acme holds 2 sockets here, the third is closed with 4030.
      const a1 = await crowd(h, 'acme', 'a1');
      const a2 = await crowd(h, 'acme', 'a2');
      await Promise.all([a1.welcome(), a2.welcome()]);
      const a3 = await crowd(h, 'acme', 'a3');
      await refusedWith4030(a3);
      const rivals = await Promise.all(['r1', 'r2', 'r3', 'r4'].map((s) => crowd(h, 'rival', s)));
      await Promise.all(rivals.map((c) => c.welcome()));

      // Intents: acme's bucket holds 3 (its quota per second); rival's viewers are not slowed by it.
      for (let seq = 1; seq <= 5; seq++) a1.act(seq);
      const acks = await Promise.all([1, 2, 3, 4, 5].map((s) => a1.ack(s)));
      assert.deepEqual(
        acks.map((a) => a.ok),
        [true, true, true, false, false],
      );
      assert.equal(acks[3]!.code, 'CP_ERR_TENANT_QUOTA');
      for (let seq = 1; seq <= 5; seq++) rivals[0]!.act(seq);
      const rivalAcks = await Promise.all([1, 2, 3, 4, 5].map((s) => rivals[0]!.ack(s)));
      assert.ok(rivalAcks.every((a) => a.ok === true));

      // Channels: acme has its 1 channel, so a game creating another is refused and nothing is written.
      const g = new Client(h.wsUrl({ role: 'game', channel: 'acme-new', key: suite.acme.apiKey }));
      await refusedWith4030(g);
      assert.equal(await suite.store.channels.get('acme-new'), null);
      const rg = await connected(h.wsUrl({ role: 'game', channel: 'rival-new', key: suite.rival.apiKey }));
      assert.equal((await suite.store.channels.get('rival-new'))?.tenantId, 'rival');
      await rg.close();

      // A closed acme socket gives its slot back.
      await a2.close();
      await waitUntil(() => h.gateway.stats().sockets === 1 + rivals.length, 'a2 gone');
      const a4 = await crowd(h, 'acme', 'a4');
      await a4.welcome();

      const text = await h.metricsText();
      const q = (tenant: string, quota: string): number => metricValue(text, 'crowdplay_tenant_quota_refusals_total', { tenant, quota });
      assert.equal(q('acme', 'connections'), 1);
      assert.equal(q('acme', 'intentsPerS'), 2);
      assert.equal(q('acme', 'channels'), 1);
      assert.equal(metricValue(text, 'crowdplay_tenant_quota_refusals_total', { tenant: 'rival' }), 0);
      assert.equal(metricValue(text, 'crowdplay_refusals_total', { reason: 'CP_ERR_TENANT_QUOTA' }), 4);
      for (const c of [a1, a4, ...rivals]) await c.close();
    } finally {
      await h.close();
    }
  });

  it('tenant quotas - the defaults apply to a tenant without overrides; an override read again after TENANT_QUOTA_CACHE_MS', async () => {
    const h = await startHarness({ store: suite.store, channels: [suite.rivalChannel], quota: { connections: 1, cacheMs: 0 } });
    try {
      const r1 = await crowd(h, 'rival', 'r1');
      await r1.welcome();
      await refusedWith4030(await crowd(h, 'rival', 'r2'));
      await suite.store.quotas.set('rival', { connections: 2 });
      const r3 = await crowd(h, 'rival', 'r3');
      await r3.welcome();
      await suite.store.quotas.set('rival', { connections: null });
      await r1.close();
      await r3.close();
    } finally {
      await h.close();
    }
  });

  it('tenant quotas - grant points per UTC day: over it 429 and nothing granted; replays and conflicts not counted; another tenant unaffected', async () => {
    const ledger = new Ledger(
      suite.store.db,
      { commitMs: 1, commitMaxTransfers: 100, maxQueued: 1_000 },
      createTelemetry({ service: 'ledger-test', level: 'silent', refusalLogIntervalMs: 60_000 }),
    );
    const h = await startHarness({ store: suite.store, ledger, listen: false });
    try {
      await suite.store.quotas.set('acme', { grantPointsPerDay: 1_000 });
      const grant = (key: string, viewer: string, points: number, id: string) =>
        h.gateway.app.inject({
          method: 'POST',
          url: '/v1/grants',
          headers: { authorization: `Bearer ${key}` },
          payload: { viewer, points, id },
        });
      const balance = (tenant: string, viewer: string) => ledger.balance(tenant, { kind: 'wallet', owner: viewer });
      const day = utcDay(new Date());

      assert.equal((await grant(suite.acme.apiKey, 'alice', 700, 'q1')).statusCode, 200);
      assert.equal((await grant(suite.acme.apiKey, 'alice', 700, 'q1')).json().replayed, true, 'a replay');
      assert.equal((await grant(suite.acme.apiKey, 'alice', 5, 'q1')).statusCode, 409, 'a conflict');
      assert.equal(await suite.store.quotas.grantedPoints('acme', day), 700, 'neither the replay nor the conflict counted');

      const over = await grant(suite.acme.apiKey, 'bob', 301, 'q2');
      assert.equal(over.statusCode, 429, over.body);
      assert.equal(over.json().code, 'CP_ERR_TENANT_QUOTA');
      assert.equal(await balance('acme', 'bob'), 0, 'nothing granted');
      assert.equal(await suite.store.quotas.grantedPoints('acme', day), 700, 'nothing counted');
      assert.equal((await grant(suite.acme.apiKey, 'alice', 700, 'q1')).json().replayed, true, 'a replay still answers over the quota');
      assert.equal((await grant(suite.acme.apiKey, 'bob', 300, 'q3')).statusCode, 200, 'up to the quota exactly');

      // rival keeps the default (10^12 points a day): acme's refusals do not touch it.
      const r = await grant(suite.rival.apiKey, 'carol', 5_000, 'r1');
      assert.equal(r.statusCode, 200, r.body);
      assert.equal(await balance('rival', 'carol'), 5_000);

      const text = await h.metricsText();
      assert.equal(metricValue(text, 'crowdplay_tenant_quota_refusals_total', { tenant: 'acme', quota: 'grantPointsPerDay' }), 1);
      assert.equal(metricValue(text, 'crowdplay_tenant_quota_refusals_total', { tenant: 'rival' }), 0);
      assert.equal(metricValue(text, 'crowdplay_refusals_total', { area: 'funding', reason: 'CP_ERR_TENANT_QUOTA' }), 1);
    } finally {
      await suite.store.quotas.set('acme', { grantPointsPerDay: null });
      await h.close();
      await ledger.close();
    }
  });
});
