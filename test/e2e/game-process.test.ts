/**
 * An sdk-game process against the real gateway and shard: viewers (sdk-viewer)
 * press, and the game process receives the batches.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import WebSocket from 'ws';
import { SignJWT } from 'jose';
import type { Batch } from '@crowdplay/protocol';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import { ROOT, startStandalone, type InProcess } from '../helpers.ts';

describe('external game process (sdk-game)', () => {
  let s: InProcess;
  let game: ChildProcess;
  let apiKey: string;
  let secret: string;
  const batches: Batch[] = [];

  before(async () => {
    s = await startStandalone();
    const created = await s.running.store.tenants.create('acme', 'Acme');
    apiKey = created.apiKey;
    secret = created.tenant.signingSecret;
    game = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'test/fixtures/game-process.ts'), s.baseUrl, 'arena', apiKey, '4'], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const lines = createInterface({ input: game.stdout! });
    await new Promise<void>((resolve, reject) => {
      game.once('exit', (code) => reject(new Error(`game process exited with ${code}`)));
      lines.on('line', (line) => {
        if (line === 'ready') resolve();
        else batches.push(JSON.parse(line) as Batch);
      });
    });
  });
  after(async () => {
    game?.kill('SIGTERM');
    await s?.stop();
  });

  async function viewer(id: string): Promise<ViewerClient> {
    const token = await new SignJWT({ tid: 'acme' })
      .setProtectedHeader({ alg: 'HS256', kid: 'acme' })
      .setSubject(id)
      .setExpirationTime('10m')
      .sign(new TextEncoder().encode(secret));
    const v = new ViewerClient({ url: s.baseUrl, channel: 'arena', token, WebSocket, autoReconnect: false });
    await v.connect();
    return v;
  }

  it('receives batches with tallies, up to maxPerTick listed intents and the dropped count', async () => {
    const [v1, v2] = await Promise.all([viewer('alice'), viewer('bob')]);
    // The declare reached the shard before `ready` was printed only from the game's side: wait for it.
    for (let i = 0; ; i++) {
      const ack = await v1.act('vote', 'a');
      if (ack.ok) break;
      assert.equal(ack.code, 'CP_ERR_INTENT_NO_GAME');
      assert.ok(i < 100, 'the declaration took effect');
      await new Promise((r) => setTimeout(r, 20));
    }
    const acks = await Promise.all([
      ...Array.from({ length: 5 }, () => v1.act('vote', 'a')),
      ...Array.from({ length: 4 }, () => v2.act('vote', 'b')),
      v2.act('vote', 'c'),
      v2.act('nope'),
    ]);
    assert.deepEqual(
      acks.map((a) => (a.ok ? 'ok' : a.code)),
      [...Array(9).fill('ok'), 'CP_ERR_INTENT_UNKNOWN_OPTION', 'CP_ERR_INTENT_UNKNOWN_ACTION'],
    );
    const deadline = Date.now() + 5_000;
    const total = (): number => batches.reduce((n, b) => n + Object.values(b.actions.vote?.tally ?? {}).reduce((x, y) => x + y, 0), 0);
    while (total() < 10 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(total(), 10, 'the probe press + 9 accepted presses, no refused ones');
    let a = 0;
    let b = 0;
    for (const batch of batches) {
      const vote = batch.actions.vote!;
      assert.equal(batch.channel, 'arena');
      assert.ok(vote.intents.length <= 4, 'at most maxPerTick listed');
      const tallied = Object.values(vote.tally).reduce((x, y) => x + y, 0);
      assert.equal(vote.intents.length + vote.dropped, tallied, 'listed + dropped = tallied');
      for (const it of vote.intents) assert.ok(['alice', 'bob'].includes(it.viewer) && typeof it.at === 'number');
      a += vote.tally.a ?? 0;
      b += vote.tally.b ?? 0;
    }
    assert.deepEqual([a, b], [6, 4]);
    const evs = batches.map((x) => x.ev);
    assert.deepEqual(
      [...evs].sort((x, y) => x - y),
      evs,
      'event ids rise',
    );
    assert.equal(new Set(evs).size, evs.length);
    await v1.close();
    await v2.close();
  });

  it('drain - every acked intent reaches the game before its socket closes', async () => {
    const v = await viewer('carol');
    const before = batches.reduce((n, b) => n + (b.actions.vote?.tally.b ?? 0), 0);
    const acks = await Promise.all(Array.from({ length: 15 }, () => v.act('vote', 'b')));
    const accepted = acks.filter((a) => a.ok).length;
    assert.equal(accepted, 15);
    // Stop at once: these intents are still in the open tick.
    await s.stop();
    const deadline = Date.now() + 5_000;
    const tallied = (): number => batches.reduce((n, b) => n + (b.actions.vote?.tally.b ?? 0), 0) - before;
    while (tallied() < accepted && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(tallied(), accepted, 'no acked intent was lost in the drain');
  });
});
