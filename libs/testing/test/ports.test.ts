/** freePorts: consecutive free ports below the kernel's ephemeral range, so no outgoing connection can take one first. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { freePort, freePorts } from '../src/index.ts';

function bind(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => s.close(() => resolve()));
  });
}

describe('testing - free ports', () => {
  it('n consecutive ports, each bindable, all below the ephemeral range', async () => {
    let first = 32_768; // Linux's default, where /proc does not say
    try {
      first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    } catch {
      // not Linux
    }
    for (let k = 0; k < 20; k++) {
      const base = await freePorts(4);
      assert.ok(base >= 10_000 && base + 3 < first, `${base}…${base + 3} below ${first}`);
      for (let i = 0; i < 4; i++) await bind(base + i);
    }
    const one = await freePort();
    assert.ok(one < first);
    await bind(one);
  });

  it('a count that is not a positive integer is refused', async () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) await assert.rejects(freePorts(bad), /no room/, String(bad));
  });
});
