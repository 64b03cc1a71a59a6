/** frameEv: the `ev` of a game frame, read from the first bytes of the shard's encoding, parsed in full otherwise. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeJson } from '@crowdplay/bus';
import { frameEv } from '../src/gateway.ts';

test('frameEv - the shard’s batch encoding, any other key order, round frames and bad bytes', () => {
  const shardOrder = { t: 'batch', channel: 'tg_-100123', ev: 30071, tick: 9, closedAt: 1, actions: { cheer: { count: 2 } } };
  assert.equal(frameEv(encodeJson(shardOrder)), 30071);
  // A view into a larger buffer (as a bus delivers): only its own bytes count.
  const padded = Buffer.concat([Buffer.from('xxxx'), Buffer.from(encodeJson({ ...shardOrder, ev: 7 }))]);
  assert.equal(frameEv(padded.subarray(4)), 7);
  assert.equal(frameEv(encodeJson({ ev: 42, t: 'batch', channel: 'c' })), 42, 'another key order: parsed in full');
  assert.equal(frameEv(encodeJson({ t: 'batch', channel: 'c"x', ev: 5 })), 5, 'an unexpected channel: parsed in full');
  assert.equal(frameEv(encodeJson({ t: 'round', round: { id: 'r1' } })), undefined);
  assert.equal(frameEv(encodeJson({ t: 'batch', channel: 'c', ev: '9' })), undefined, 'ev not a number');
  assert.equal(frameEv(Buffer.from('{"t":"batch","channel":"c","ev":12')), undefined, 'truncated: not a frame');
});
