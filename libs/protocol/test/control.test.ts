import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  AssignmentMessage,
  CONTROL_BATCH_MAX,
  CONTROL_VERSION,
  Heartbeat,
  RouterControl,
  ShardControl,
  decodeAssignments,
  decodeControl,
  isCrowdplayError,
} from '../src/index.ts';

const enc = (v: unknown): Uint8Array => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v));
const refused = (code: string) => (e: unknown) => isCrowdplayError(e) && e.code === code;

describe('control messages', () => {
  it('versions - a v2 process takes v1 single-channel requests and v2 batches', () => {
    assert.deepEqual(decodeControl(ShardControl, enc({ op: 'acquire', channel: 'c1', epoch: 3 })), {
      op: 'acquire',
      channel: 'c1',
      epoch: 3,
    });
    assert.deepEqual(decodeControl(ShardControl, enc({ v: 1, op: 'forget', channel: 'c1' })), { v: 1, op: 'forget', channel: 'c1' });
    const batch = { v: CONTROL_VERSION, op: 'acquire', channels: [{ channel: 'c1', epoch: 3 }] };
    assert.deepEqual(decodeControl(ShardControl, enc(batch)), batch);
    assert.deepEqual(decodeControl(RouterControl, enc({ op: 'assign', channel: 'c1' })), { op: 'assign', channel: 'c1' });
    const assigns = { v: 2, op: 'assign', channels: ['c1', 'c2'] };
    assert.deepEqual(decodeControl(RouterControl, enc(assigns)), assigns);
    assert.deepEqual(decodeControl(RouterControl, enc({ v: 2, op: 'drain', shard: 's1' })), { v: 2, op: 'drain', shard: 's1' });
  });

  it('versions - a v1 sender (no v) is what the previous version spoke: heartbeats and assignment changes decode', () => {
    assert.equal(decodeControl(Heartbeat, enc({ id: 's1', channels: 4, intentsPerS: 0 })).v, undefined);
    assert.deepEqual(decodeAssignments(enc({ channel: 'c1', shard: 's1', epoch: 2 })), [{ channel: 'c1', shard: 's1', epoch: 2 }]);
    assert.deepEqual(decodeAssignments(enc({ v: 2, changes: [{ channel: 'c1', shard: null, epoch: 2 }] })), [
      { channel: 'c1', shard: null, epoch: 2 },
    ]);
    decodeControl(AssignmentMessage, enc({ channel: 'c1', shard: null, epoch: 0 }));
  });

  it('bad input - an unknown version, malformed, invalid, oversized or over-long batches are refused with their codes', () => {
    assert.throws(() => decodeControl(ShardControl, enc({ v: 3, op: 'acquire', channels: [] })), refused('CP_ERR_PROTO_VERSION'));
    assert.throws(() => decodeControl(ShardControl, enc({ v: 0, op: 'forget', channel: 'c' })), refused('CP_ERR_PROTO_VERSION'));
    assert.throws(() => decodeControl(ShardControl, enc({ v: '2', op: 'forget', channel: 'c' })), refused('CP_ERR_PROTO_VERSION'));
    assert.throws(() => decodeControl(ShardControl, enc('{"op":')), refused('CP_ERR_PROTO_MALFORMED'));
    assert.throws(() => decodeControl(ShardControl, enc('[1]')), refused('CP_ERR_PROTO_MALFORMED'));
    assert.throws(() => decodeControl(ShardControl, enc({ op: 'acquire', channel: 'no.dots', epoch: 1 })), refused('CP_ERR_PROTO_INVALID'));
    assert.throws(() => decodeControl(ShardControl, enc({ op: 'acquire', channel: 'c', epoch: -1 })), refused('CP_ERR_PROTO_INVALID'));
    assert.throws(() => decodeControl(ShardControl, enc({ op: 'explode', channel: 'c' })), refused('CP_ERR_PROTO_INVALID'));
    assert.throws(() => decodeControl(ShardControl, enc({ v: 2, op: 'acquire', channels: [] })), refused('CP_ERR_PROTO_INVALID'));
    const tooMany = Array.from({ length: CONTROL_BATCH_MAX + 1 }, (_, i) => ({ channel: `c${i}`, epoch: 1 }));
    assert.throws(() => decodeControl(ShardControl, enc({ v: 2, op: 'acquire', channels: tooMany })), refused('CP_ERR_PROTO_INVALID'));
    assert.throws(() => decodeControl(ShardControl, enc({ v: 2, op: 'owned' }), 8), refused('CP_ERR_PROTO_TOO_BIG'));
    assert.throws(() => decodeAssignments(enc({ channel: 'c1', shard: 7, epoch: 1 })), refused('CP_ERR_PROTO_INVALID'));
    assert.throws(() => decodeControl(Heartbeat, enc({ id: 's1' })), refused('CP_ERR_PROTO_INVALID'));
    // A full batch at the limit encodes within the bus's payload limit (1 MiB, NATS's default).
    const full = Array.from({ length: CONTROL_BATCH_MAX }, (_, i) => ({
      channel: `${'x'.repeat(58)}${String(i).padStart(6, '0')}`,
      epoch: 2 ** 40,
    }));
    const bytes = enc({ v: 2, op: 'acquire', channels: full });
    assert.ok(bytes.byteLength < 1_048_576, `${bytes.byteLength} bytes`);
    assert.equal(decodeControl(ShardControl, bytes).op, 'acquire');
  });
});
