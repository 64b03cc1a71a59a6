import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CrowdplayError, isCrowdplayError } from '@crowdplay/protocol';
import { PendingRequests } from '../src/pending.ts';

test('pending - an answer settles its request once; a late or unknown answer settles nothing', async () => {
  const p = new PendingRequests<string>(5_000);
  const sent: string[] = [];
  const a = p.wait('r1', 'round.open', () => sent.push('r1'));
  assert.deepEqual(sent, ['r1']);
  assert.equal(p.size, 1);
  assert.equal(p.resolve('r2', 'nope'), false, 'an unknown ref');
  assert.equal(p.resolve(7, 'nope'), false, 'not a string ref');
  assert.equal(p.resolve('r1', 'ok'), true);
  assert.equal(await a, 'ok');
  assert.equal(p.resolve('r1', 'again'), false, 'settled once');
  assert.equal(p.size, 0);
});

test('pending - a request unanswered past the timeout is refused CP_ERR_CLIENT_REQUEST_TIMEOUT naming it', async () => {
  const p = new PendingRequests<string>(20);
  await assert.rejects(
    p.wait('r9', 'attach', () => {}),
    (e: unknown) => isCrowdplayError(e, 'CP_ERR_CLIENT_REQUEST_TIMEOUT') && /attach \(ref r9\)/.test(e.message),
  );
  assert.equal(p.size, 0);
  assert.equal(p.resolve('r9', 'late'), false, 'a late answer is dropped');
});

test('pending - a failed write rejects at once with CP_ERR_CLIENT_SOCKET; rejectAll ends every other one', async () => {
  const p = new PendingRequests<string>(5_000);
  const failedWrite = p.wait('w1', 'state', (failed) => failed(new Error('EPIPE')));
  await assert.rejects(failedWrite, (e: unknown) => isCrowdplayError(e, 'CP_ERR_CLIENT_SOCKET') && /EPIPE/.test(e.message));
  const b = p.wait('b', 'round.settle', () => {});
  const c = p.wait('c', 'round.cancel', () => {});
  const [errB, errC] = [b.catch((e: unknown) => e), c.catch((e: unknown) => e)];
  p.rejectAll(new CrowdplayError('CP_ERR_CLIENT_CLOSED', [1006, '']));
  for (const e of await Promise.all([errB, errC])) assert.ok(isCrowdplayError(e, 'CP_ERR_CLIENT_CLOSED'));
  assert.equal(p.size, 0);
});
