import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnCrowdplay } from '../helpers.ts';

describe('standalone process (npm start)', () => {
  it('starts on embedded PGlite and the in-process bus, serves the page, drains on SIGTERM', async () => {
    const s = await spawnCrowdplay({});
    try {
      assert.match(s.output(), /store: embedded PGlite/);
      assert.match(s.output(), /bus: in-process/);
      assert.equal((await fetch(`${s.baseUrl}/healthz`)).status, 200);
      assert.equal((await fetch(`${s.baseUrl}/readyz`)).status, 200);
      const page = await fetch(`${s.baseUrl}/`);
      assert.equal(page.status, 200);
      assert.match(await page.text(), /<html/i);
      assert.match(await (await fetch(`${s.baseUrl}/metrics`)).text(), /crowdplay_shard_channels/);
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
