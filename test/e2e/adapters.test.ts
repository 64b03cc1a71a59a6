/**
 * The same product on the real engines: DATABASE_URL → PostgreSQL,
 * NATS_URL → NATS, with no other change.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import type { ChannelUpdate } from '@crowdplay/protocol';
import { serviceUrls, uniqueName } from '@crowdplay/testing';
import { devToken, startStandalone, type InProcess } from '../helpers.ts';

describe('standalone on PostgreSQL and NATS', () => {
  let s: InProcess;
  before(async () => {
    const { natsUrl } = await serviceUrls();
    s = await startStandalone({ bus: { natsUrl, subjectPrefix: uniqueName('e2e'), requestTimeoutMs: 2_000 } });
  });
  after(() => s?.stop());

  it('a viewer acts on the demo over NATS: acked, tallied, and the update comes back', async () => {
    assert.equal(s.running.bus.kind, 'nats');
    assert.equal(s.running.store.kind, 'postgres');
    const token = await devToken(s.baseUrl, 'demo');
    const v = new ViewerClient({ url: s.baseUrl, channel: 'demo', token, WebSocket, autoReconnect: false });
    const updates: ChannelUpdate[] = [];
    v.on('update', (u) => updates.push(u));
    await v.connect();
    const acks = await Promise.all([v.act('pull', 'right'), v.act('pull', 'right'), v.act('pull', 'sideways')]);
    assert.deepEqual(
      acks.map((a) => a.ok),
      [true, true, false],
    );
    assert.equal(acks[2]!.code, 'CP_ERR_INTENT_UNKNOWN_OPTION');
    const deadline = Date.now() + 5_000;
    while (!updates.some((u) => u.tally.pull?.right === 2) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.ok(
      updates.some((u) => u.tally.pull?.right === 2),
      'the update carries the two accepted pulls',
    );
    await v.close();
  });
});
