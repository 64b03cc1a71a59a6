/**
 * A game's round with a title and labels, played by two viewers through the
 * SDKs against the standalone product: each viewer is pushed its own result
 * (roundResult), and the round history route pages the channel's rounds with
 * each viewer's figures from the ledger. Bad requests get their code.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { SignJWT } from 'jose';
import type { RoundResultFrame, RoundView } from '@crowdplay/protocol';
import { GameClient } from '@crowdplay/sdk-game';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import { openSocket, startStandalone, type InProcess } from '../helpers.ts';

const CHANNEL = 'quiz';
const TITLE = 'Qui gagne ? 誰が勝つ?';
const LABELS = { ann: 'Ann 🎯', bob: '<i>Bob</i>' };

describe('round results and history', () => {
  let s: InProcess;
  let apiKey: string;
  let secret: string;
  let otherKey: string;
  let game: GameClient;
  const viewers: ViewerClient[] = [];

  before(async () => {
    s = await startStandalone({ standalone: { demoMotion: false } });
    const acme = await s.running.store.tenants.create('acme', 'Acme');
    apiKey = acme.apiKey;
    secret = acme.tenant.signingSecret;
    otherKey = (await s.running.store.tenants.create('other', 'Other')).apiKey;
    game = new GameClient({ url: s.baseUrl, channel: CHANNEL, apiKey });
    await game.connect();
    game.declare([{ name: 'cheer', label: 'Cheer 📣', options: ['ann', 'bob'], optionLabels: LABELS, maxPerTick: 10 }], {
      welcomeGrant: 100,
    });
  });
  after(async () => {
    for (const v of viewers) await v.close();
    await game?.close();
    await s?.stop();
  });

  const token = (viewer: string): Promise<string> =>
    new SignJWT({ tid: 'acme' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject(viewer)
      .setExpirationTime('10m')
      .sign(new TextEncoder().encode(secret));

  interface Viewer {
    v: ViewerClient;
    /** Resolves with the first `n` roundResult frames, as they arrive. */
    results(n: number): Promise<RoundResultFrame[]>;
  }

  async function viewer(id: string): Promise<Viewer> {
    const v = new ViewerClient({ url: s.baseUrl, channel: CHANNEL, token: await token(id), WebSocket, autoReconnect: false });
    const got: RoundResultFrame[] = [];
    let wake = (): void => undefined;
    v.on('roundResult', (f) => {
      got.push(f);
      wake();
    });
    viewers.push(v);
    await v.connect();
    return {
      v,
      results: (n) =>
        new Promise((resolve) => {
          wake = () => void (got.length >= n && resolve(got.slice(0, n)));
          wake();
        }),
    };
  }

  async function history(credential: string | undefined, query = ''): Promise<{ status: number; body: Record<string, unknown> }> {
    const res = await fetch(`${s.baseUrl}/v1/channels/${CHANNEL}/rounds${query}`, {
      headers: credential ? { authorization: `Bearer ${credential}` } : {},
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  }

  it('labels reach viewers; each viewer gets its own result; the history pages with the viewer figures', async () => {
    const ann = await viewer('ann');
    const bob = await viewer('bob');
    const settledRounds: RoundView[] = [];
    for (const n of [1, 2, 3]) {
      const round = await game.openRound({
        round: `q${n}`,
        kind: 'pool',
        outcomes: ['ann', 'bob'],
        durationMs: 60_000,
        title: TITLE,
        labels: LABELS,
      });
      assert.deepEqual([round.title, round.labels], [TITLE, LABELS]);
      // A viewer sees the round (its title and labels) in an update before staking.
      await new Promise<void>((resolve) => {
        const check = (u: { rounds?: RoundView[] }): void => {
          const r = u.rounds?.find((x) => x.id === round.id);
          if (r?.title === TITLE && r.labels?.bob === LABELS.bob) {
            ann.v.off('update', check);
            resolve();
          }
        };
        ann.v.on('update', check);
      });
      assert.equal((await ann.v.stake(round.id, 'ann', 30)).ok, true);
      assert.equal((await bob.v.stake(round.id, 'bob', 10)).ok, true);
      settledRounds.push(await game.settleRound(round.id, 'ann'));
    }
    assert.deepEqual(
      (await ann.results(3)).map((f) => [f.round, f.state, f.winner, f.staked, f.paid, f.net]),
      [
        ['q1', 'settled', 'ann', 30, 40, 10],
        ['q2', 'settled', 'ann', 30, 40, 10],
        ['q3', 'settled', 'ann', 30, 40, 10],
      ],
    );
    assert.deepEqual(
      (await bob.results(3)).map((f) => [f.round, f.net]),
      [
        ['q1', -10],
        ['q2', -10],
        ['q3', -10],
      ],
    );

    // The viewer's own figures, two rounds a page, newest first.
    const first = await history(await token('bob'), '?limit=2');
    assert.equal(first.status, 200);
    const page1 = first.body.rounds as Array<Record<string, unknown>>;
    assert.deepEqual(
      page1.map((r) => [r.id, r.title, r.state, r.winner, r.mine]),
      [
        ['q3', TITLE, 'settled', 'ann', { staked: 10, paid: 0, net: -10 }],
        ['q2', TITLE, 'settled', 'ann', { staked: 10, paid: 0, net: -10 }],
      ],
    );
    assert.deepEqual(page1[0]!.labels, LABELS);
    const second = await history(await token('bob'), `?limit=2&before=${encodeURIComponent(String(first.body.next))}`);
    assert.deepEqual(
      (second.body.rounds as Array<Record<string, unknown>>).map((r) => [r.id, r.mine]),
      [['q1', { staked: 10, paid: 0, net: -10 }]],
    );
    assert.equal(second.body.next, undefined, 'the last page has no cursor');
    // A viewer that never played sees the rounds without figures; the tenant sees them too.
    const carol = await history(await token('carol'));
    assert.deepEqual(
      (carol.body.rounds as Array<Record<string, unknown>>).map((r) => [r.id, r.mine]),
      [
        ['q3', undefined],
        ['q2', undefined],
        ['q1', undefined],
      ],
    );
    const tenant = await history(apiKey);
    assert.equal((tenant.body.rounds as unknown[]).length, 3);
    assert.equal(settledRounds.length, 3);
  });

  it('history - bad requests get their code', async () => {
    const bobToken = await token('bob');
    const cases: Array<[credential: string | undefined, query: string, status: number, code: string]> = [
      [undefined, '', 401, 'CP_ERR_AUTH_MISSING'],
      ['not-a-token', '', 401, 'CP_ERR_AUTH_INVALID'],
      ['cpk_acme_00000000000000000000000000000000000000000000', '', 401, 'CP_ERR_AUTH_INVALID'],
      [otherKey, '', 403, 'CP_ERR_AUTH_FORBIDDEN_CHANNEL'],
      [bobToken, '?limit=0', 400, 'CP_ERR_PROTO_INVALID'],
      [bobToken, '?limit=101', 400, 'CP_ERR_PROTO_INVALID'],
      [bobToken, '?limit=ten', 400, 'CP_ERR_PROTO_INVALID'],
      [bobToken, '?before=yesterday', 400, 'CP_ERR_PROTO_INVALID'],
    ];
    for (const [credential, query, status, code] of cases) {
      const res = await history(credential, query);
      assert.deepEqual([res.status, res.body.code], [status, code], `${credential ?? '(none)'} ${query}`);
    }
    const unknown = await fetch(`${s.baseUrl}/v1/channels/nowhere/rounds`, { headers: { authorization: `Bearer ${apiKey}` } });
    assert.deepEqual([unknown.status, ((await unknown.json()) as { code: string }).code], [404, 'CP_ERR_CHANNEL_UNKNOWN']);
    const badId = await fetch(`${s.baseUrl}/v1/channels/${encodeURIComponent('no way')}/rounds`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    assert.deepEqual([badId.status, ((await badId.json()) as { code: string }).code], [400, 'CP_ERR_CHANNEL_INVALID_ID']);
  });

  it('labels - a bad title or label gets CP_ERR_LABEL_INVALID from the SDK and from the gateway; nothing opens', async () => {
    await assert.rejects(
      game.openRound({ round: 'bad', kind: 'pool', outcomes: ['ann', 'bob'], durationMs: 60_000, title: 'evil\u202E' }),
      (err: { code?: string }) => err.code === 'CP_ERR_LABEL_INVALID',
    );
    // A game that skips the SDK's check: the gateway refuses the frame itself.
    const raw = openSocket(`${s.baseUrl.replace('http', 'ws')}/v1/ws?role=game&channel=quiz-raw&key=${apiKey}`);
    await raw.next((f) => f.t === 'welcome');
    const open = { t: 'round.open', round: 'bad', kind: 'pool', outcomes: ['ann', 'bob'], durationMs: 60_000 };
    raw.send({ ...open, ref: 'b1', title: 'line one\nline two' });
    raw.send({ ...open, ref: 'b2', labels: { ann: 'Ann', carl: 'Carl' } });
    raw.send({ ...open, ref: 'b3', title: 'x'.repeat(121) });
    for (const ref of ['b1', 'b2', 'b3']) {
      const err = await raw.next((f) => f.t === 'error' && f.ref === ref);
      assert.equal(err.code, 'CP_ERR_LABEL_INVALID', JSON.stringify(err));
    }
    raw.close();
    assert.equal(await s.running.store.rounds.get(CHANNEL, 'bad'), null);
    assert.equal(await s.running.store.rounds.get('quiz-raw', 'bad'), null);
  });
});
