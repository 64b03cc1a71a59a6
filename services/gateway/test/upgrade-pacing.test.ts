/**
 * WS_UPGRADE_TURN_BUDGET_MS: upgrades one poll returns together are taken a
 * budget's worth per event-loop turn, the rest in later turns; none is lost.
 * The gateway's clock advances 8 ms each time it is read (an upgrade costs
 * that much), so a 20 ms budget takes three upgrades a turn.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { metricValue, startHarness, unusedStore, waitUntil } from './helpers.ts';

/** Opens `n` TCP connections, then writes every upgrade request in one go (loopback: they arrive in one poll). */
async function rawUpgrades(port: number, n: number): Promise<Array<{ socket: Socket; response: () => string }>> {
  const sockets = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<Socket>((resolve, reject) => {
          const s = connect(port, '127.0.0.1', () => resolve(s));
          s.once('error', reject);
        }),
    ),
  );
  await new Promise((r) => setTimeout(r, 100)); // the gateway has accepted and is reading every one
  return sockets.map((socket) => {
    let got = '';
    socket.on('data', (d: Buffer) => (got += d.toString('latin1')));
    socket.on('error', () => undefined);
    socket.write(
      'GET /v1/ws?role=crowd&channel=room HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
        `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
    );
    return { socket, response: () => got };
  });
}

const status = (r: string): number => Number(/^HTTP\/1\.1 (\d{3})/.exec(r)?.[1] ?? 0);

describe('gateway - upgrade pacing (WS_UPGRADE_TURN_BUDGET_MS)', () => {
  for (const budget of [20, 0]) {
    it(`budget ${budget}: every upgrade of a burst is answered 101; ${budget > 0 ? 'those past the budget wait for later turns, counted' : 'none waits'}`, async () => {
      let clock = 0;
      const h = await startHarness({ store: unusedStore(), gateway: { upgradeTurnBudgetMs: budget }, now: () => (clock += 8) });
      try {
        const socks = await rawUpgrades(h.port, 12);
        await waitUntil(() => socks.every((s) => status(s.response()) !== 0), 'every upgrade answered');
        assert.deepEqual(
          socks.map((s) => status(s.response())),
          Array.from({ length: 12 }, () => 101),
        );
        const text = await h.metricsText();
        const deferred = metricValue(text, 'crowdplay_upgrades_deferred_total');
        if (budget > 0) assert.ok(deferred >= 3 && deferred <= 9, `deferred ${deferred} of 12 (three a turn)`);
        else assert.equal(deferred, 0);
        assert.equal(metricValue(text, 'crowdplay_upgrades_waiting'), 0, 'none left waiting');
        for (const s of socks) s.socket.destroy();
      } finally {
        await h.close();
      }
    });
  }

  it('waiting upgrades count towards WS_MAX_CONNECTIONS: one past the limit is refused 503 at once, none jumps the queue', async () => {
    let clock = 0;
    // Every read of the clock is a full budget later: one upgrade a turn, the others wait.
    const h = await startHarness({
      store: unusedStore(),
      gateway: { upgradeTurnBudgetMs: 20, maxConnections: 5, upgradeWaitMs: 0 },
      now: () => (clock += 1_000),
    });
    try {
      const socks = await rawUpgrades(h.port, 12);
      await waitUntil(() => socks.every((s) => status(s.response()) !== 0), 'every upgrade answered');
      const codes = socks.map((s) => status(s.response()));
      const ok = codes.filter((c) => c === 101).length;
      assert.ok(ok >= 1 && ok <= 5, `101s: ${ok} (limit 5): ${codes.join(',')}`);
      assert.equal(codes.filter((c) => c === 503).length, 12 - ok, `the rest 503: ${codes.join(',')}`);
      // In arrival order (written in one go over loopback): the first ones in, the later ones refused.
      assert.deepEqual(codes, [...Array.from({ length: ok }, () => 101), ...Array.from({ length: 12 - ok }, () => 503)]);
      const text = await h.metricsText();
      assert.equal(metricValue(text, 'crowdplay_connections_refused_total', { reason: 'CP_ERR_LIMIT_MAX_CONNECTIONS' }), 12 - ok);
      assert.ok(metricValue(text, 'crowdplay_upgrades_deferred_total') >= 1);
      for (const s of socks) s.socket.destroy();
    } finally {
      await h.close();
    }
  });

  for (const waitMs of [2_500, 0]) {
    it(`WS_UPGRADE_WAIT_MS ${waitMs}: ${waitMs > 0 ? 'an upgrade that waited past it is answered 503 CP_ERR_LIMIT_OVERLOADED, counted, and opens nothing' : 'no upgrade is refused for its wait'}`, async () => {
      let clock = 0;
      // Every read of the clock is a full budget later: one upgrade a turn, and the waiting ones age 1 s per read.
      const h = await startHarness({
        store: unusedStore(),
        gateway: { upgradeTurnBudgetMs: 20, upgradeWaitMs: waitMs },
        now: () => (clock += 1_000),
      });
      try {
        const socks = await rawUpgrades(h.port, 12);
        await waitUntil(() => socks.every((s) => status(s.response()) !== 0), 'every upgrade answered');
        const codes = socks.map((s) => status(s.response()));
        const refused = socks.filter((s) => status(s.response()) === 503);
        const text = await h.metricsText();
        if (waitMs > 0) {
          assert.ok(refused.length >= 1, `some refused: ${codes.join(',')}`);
          assert.ok(codes[0] === 101, `the first one, taken at once, is in: ${codes.join(',')}`);
          for (const r of refused) assert.match(r.response(), /"code":"CP_ERR_LIMIT_OVERLOADED"/);
          assert.equal(codes.filter((c) => c === 101).length + refused.length, 12, codes.join(','));
        } else
          assert.deepEqual(
            codes,
            Array.from({ length: 12 }, () => 101),
          );
        assert.equal(metricValue(text, 'crowdplay_connections_refused_total', { reason: 'CP_ERR_LIMIT_OVERLOADED' }), refused.length);
        assert.equal(metricValue(text, 'crowdplay_upgrades_waiting'), 0, 'none left waiting');
        for (const s of socks) s.socket.destroy();
      } finally {
        await h.close();
      }
    });
  }

  it('close() answers the upgrades still waiting (503 draining) instead of leaving them hanging', async () => {
    let clock = 0;
    // Every read of the clock is a full budget later: one upgrade a turn.
    const h = await startHarness({ store: unusedStore(), gateway: { upgradeTurnBudgetMs: 20 }, now: () => (clock += 1_000) });
    const socks = await rawUpgrades(h.port, 30);
    await waitUntil(async () => metricValue(await h.metricsText(), 'crowdplay_upgrades_deferred_total') > 0, 'some upgrades waiting');
    await h.close();
    await waitUntil(() => socks.every((s) => status(s.response()) !== 0 || s.socket.destroyed), 'every upgrade answered or closed');
    const codes = socks.map((s) => status(s.response()));
    assert.ok(
      codes.every((c) => c === 101 || c === 503 || c === 0),
      `answers: ${codes.join(',')}`,
    );
    assert.ok(codes.includes(503), `some refused as draining: ${codes.join(',')}`);
    for (const s of socks) s.socket.destroy();
  });
});
