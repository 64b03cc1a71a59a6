/**
 * `crowdplay start` on a busy machine: the demo channel's first placement
 * may outlast ROUTER_ASSIGN_DEADLINE_MS. The join is refused with its code,
 * the placement goes on, and the start does not fail on it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import { defaultConfig } from '@crowdplay/config';
import { devToken, startStandalone, type InProcess } from '../helpers.ts';

describe('standalone start with a placement deadline shorter than a placement', () => {
  let s: InProcess | undefined;
  before(async () => {
    // 10 ms (the setting's least): the demo's first placement (an epoch bump, a snapshot read, an id lease) takes longer.
    s = await startStandalone({ router: { ...defaultConfig().router, assignDeadlineMs: 10 } });
  });
  after(() => s?.stop());

  it('starts, and a viewer of the demo is served once its placement is done', async () => {
    assert.ok(s, 'the product started');
    const token = await devToken(s.baseUrl, 'demo');
    // The SDK asks again after a retryable refusal (CP_ERR_CHANNEL_UNAVAILABLE while the placement goes on).
    const v = new ViewerClient({ url: s.baseUrl, channel: 'demo', token, WebSocket });
    await v.connect();
    const ack = await v.act('pull', 'right');
    assert.equal(ack.ok, true, JSON.stringify(ack));
    await v.close();
  });
});
