import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnCrowdplay } from '../helpers.ts';
import { freePort } from '../servers.ts';

describe('standalone process (npm start)', () => {
  it('starts on embedded PGlite and the in-process bus, serves the page, drains on SIGTERM', async () => {
    const healthPort = await freePort();
    const s = await spawnCrowdplay({ HEALTH_PORT: String(healthPort) });
    try {
      assert.match(s.output(), /store: embedded PGlite/);
      assert.match(s.output(), /bus: in-process/);
      assert.equal((await fetch(`${s.baseUrl}/healthz`)).status, 200);
      assert.equal((await fetch(`${s.baseUrl}/readyz`)).status, 200);
      const page = await fetch(`${s.baseUrl}/`);
      assert.equal(page.status, 200);
      assert.match(await page.text(), /<html/i);
      // /metrics is for operators: on HEALTH_HOST:HEALTH_PORT (loopback by default), not on the viewers' port.
      const publicMetrics = await fetch(`${s.baseUrl}/metrics`);
      assert.equal(publicMetrics.status, 404);
      assert.doesNotMatch(await publicMetrics.text(), /crowdplay_/);
      assert.match(await (await fetch(`http://127.0.0.1:${healthPort}/metrics`)).text(), /crowdplay_shard_channels/);
      assert.equal((await fetch(`http://127.0.0.1:${healthPort}/readyz`)).status, 200);
    } finally {
      const code = await s.stop();
      assert.equal(code, 0, `exit code 0 after drain; output:\n${s.output().slice(-2000)}`);
    }
    assert.match(s.output(), /channel released/, 'the demo channel was handed back on drain');
  });

  it('refuses a bad setting at start with a message naming the variable, and exits non-zero', async () => {
    await assert.rejects(
      spawnCrowdplay({ TICK_MS: 'soon' }, 30_000),
      (err: Error) => /TICK_MS: expected an integer/.test(err.message) && /exited with 2/.test(err.message),
    );
  });
});
