/**
 * A tenant's game in its Telegram chats, through the SDK against the standalone product: one MultiGameClient
 * attached to every chat of its tenant takes them over from the word puzzle, gets each chat's batches and runs
 * rounds per chat; another tenant's chat stays out of reach; a detached chat plays the puzzle again.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import { isCrowdplayError, type Batch } from '@crowdplay/protocol';
import { MultiGameClient } from '@crowdplay/sdk-game';
import { openSocket, startStandalone, until, type InProcess, type TestSocket } from '../helpers.ts';

describe('a tenant game in its chats', () => {
  let s: InProcess;
  let game: MultiGameClient;
  let apiKey: string;
  let secret: string;
  const sockets: TestSocket[] = [];
  const batches: Batch[] = [];
  let seq = 0;

  before(async () => {
    s = await startStandalone();
    const acme = await s.running.store.tenants.create('acme', 'Acme');
    apiKey = acme.apiKey;
    secret = acme.tenant.signingSecret;
    await s.running.store.tenants.create('other', 'Other');
    for (const ch of ['tgn11', 'tgn12']) await s.running.store.channels.ensure(ch, 'acme');
    await s.running.store.channels.ensure('tgn21', 'other');
  });
  after(async () => {
    for (const v of sockets) v.close();
    await game?.close();
    await s?.stop();
  });

  async function viewer(channel: string, id: string): Promise<TestSocket> {
    const token = await new SignJWT({ tid: 'acme' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject(id)
      .setExpirationTime('10m')
      .sign(new TextEncoder().encode(secret));
    const v = openSocket(`${s.baseUrl.replace('http', 'ws')}/v1/ws?role=crowd&channel=${channel}&token=${token}`);
    sockets.push(v);
    await v.next((f) => f.t === 'welcome');
    return v;
  }
  async function send(v: TestSocket, frame: Record<string, unknown>): Promise<Record<string, unknown>> {
    const n = ++seq;
    v.send({ ...frame, seq: n });
    return v.next((f) => f.t === 'ack' && f.seq === n);
  }

  it('the chats play the game: batches per chat, rounds per chat, no guesses; a detached chat plays the puzzle again', async () => {
    const v = await viewer('tgn11', 'ann');
    assert.equal((await send(v, { t: 'guess', word: 'crane' })).ok, true, 'the puzzle runs before a game attaches');

    game = new MultiGameClient({ url: s.baseUrl, apiKey, chats: true });
    game.declare([{ name: 'vote', maxPerTick: 10, options: ['a', 'b'] }]);
    game.on('batch', (b) => batches.push(b));
    const attached = new Promise<string[]>((resolve) => game.once('attached', (chs) => resolve(chs)));
    await game.connect();
    assert.deepEqual((await attached).sort(), ['tgn11', 'tgn12'], "every chat of the tenant, not another tenant's");

    // The class-wide declaration reaches the chat shortly after the attach.
    for (let tries = 0; (await send(v, { t: 'act', action: 'vote', option: 'a' })).ok !== true; tries++) {
      assert.ok(tries < 200, 'the chat takes votes within 10 s');
      await new Promise((r) => setTimeout(r, 50));
    }
    const b = await until(() => batches.find((x) => x.channel === 'tgn11' && x.actions.vote), 'a batch of the chat');
    assert.equal(b.channel, 'tgn11');
    const guess = await send(v, { t: 'guess', word: 'crane' });
    assert.deepEqual([guess.ok, guess.code], [false, 'CP_ERR_INTENT_UNKNOWN_ACTION'], 'the puzzle is off');

    const round = await game.openRound({ channel: 'tgn12', round: 'r1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 60_000 });
    assert.deepEqual([round.id, round.state], ['r1', 'open']);
    await assert.rejects(
      game.openRound({ channel: 'tgn21', round: 'r1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 60_000 }),
      (err: unknown) => isCrowdplayError(err, 'CP_ERR_GAME_NOT_ATTACHED'),
    );
    assert.equal(await s.running.store.rounds.get('tgn21', 'r1'), null, "nothing opened in the other tenant's chat");

    assert.deepEqual(await game.detach(['tgn11']), ['tgn11']);
    const back = await send(v, { t: 'guess', word: 'crane' });
    assert.equal(back.ok, true, 'the puzzle is back');
  });
});
