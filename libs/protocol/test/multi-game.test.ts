import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GAME_ATTACH_MAX, inboundContext, isCrowdplayError, isRetryable, parseInbound } from '../src/index.ts';

const code = (fn: () => unknown): string | undefined => {
  try {
    fn();
    return undefined;
  } catch (err) {
    return isCrowdplayError(err) ? err.code : 'not a CrowdplayError';
  }
};

test('multi-channel game frames - attach, detach and per-channel requests validate on decode', () => {
  const a = parseInbound('multigame', '{"t":"attach","ref":"a1","channels":["room1","tgn100"],"lastEventIds":{"room1":7}}');
  assert.deepEqual(a, { t: 'attach', ref: 'a1', channels: ['room1', 'tgn100'], lastEventIds: { room1: 7 } });
  assert.equal(parseInbound('multigame', '{"t":"attach","chats":true}').t, 'attach');
  assert.equal(parseInbound('multigame', '{"t":"detach","channels":["room1"]}').t, 'detach');
  const s = parseInbound('multigame', '{"t":"state","channel":"room1","state":{"n":1}}');
  assert.equal(s.t === 'state' && s.channel, 'room1');
  // A single-channel socket's frames may name a channel too (the socket checks it is its own).
  assert.equal(parseInbound('game', '{"t":"round.cancel","channel":"room1","round":"r1"}').t, 'round.cancel');
});

test('multi-channel game frames - bad input: the code names what is wrong', () => {
  const many = JSON.stringify({ t: 'attach', channels: Array.from({ length: GAME_ATTACH_MAX + 1 }, (_, i) => `c${i}`) });
  for (const raw of [
    '{"t":"attach","channels":["bad id"]}',
    '{"t":"attach","channels":[]}',
    '{"t":"attach","channels":["a","a"]}',
    '{"t":"attach","chats":false}',
    '{"t":"attach","lastEventIds":{"room1":-1}}',
    '{"t":"attach","lastEventIds":{"bad id":1}}',
    '{"t":"attach","extra":1}',
    many,
    '{"t":"detach","channels":"room1"}',
    '{"t":"state","channel":"a.b","state":{}}',
  ])
    assert.equal(
      code(() => parseInbound('multigame', raw)),
      'CP_ERR_PROTO_INVALID',
      raw.slice(0, 60),
    );
  // attach and detach are not frames of a single-channel game socket, nor of a viewer.
  assert.equal(
    code(() => parseInbound('game', '{"t":"attach","chats":true}')),
    'CP_ERR_PROTO_UNKNOWN_TYPE',
  );
  assert.equal(
    code(() => parseInbound('crowd', '{"t":"detach","chats":true}')),
    'CP_ERR_PROTO_UNKNOWN_TYPE',
  );
  // A refused frame's channel and ref are read back for the error frame.
  assert.deepEqual(inboundContext('{"t":"state","ref":"r9","channel":"room1","state":[]}'), { ref: 'r9', channel: 'room1' });
  assert.equal(isRetryable('CP_ERR_GAME_CHANNEL_BUSY'), true);
  assert.equal(isRetryable('CP_ERR_GAME_NOT_ATTACHED'), false);
});
