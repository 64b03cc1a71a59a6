/**
 * The environment `crowdplay cluster` gives each child: every child's operator
 * listener on a port of its own (HEALTH_PORT + its index), none when
 * HEALTH_PORT is unset or 0.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { childEnv, startCluster } from '@crowdplay/cli';

describe('cluster child environment', () => {
  it('childEnv - HEALTH_PORT set: each child gets HEALTH_PORT + its index, the rest of the environment unchanged', () => {
    const base = { HEALTH_PORT: '9100', HEALTH_HOST: '127.0.0.1', NATS_URL: 'nats://127.0.0.1:4222' };
    const envs = [0, 1, 2, 5].map((i) => childEnv(base, i, i === 5 ? { GATEWAY_ID: 'gw-1', PORT: '8080' } : {}));
    assert.deepEqual(
      envs.map((e) => e.HEALTH_PORT),
      ['9100', '9101', '9102', '9105'],
    );
    assert.deepEqual(envs[3], {
      HEALTH_PORT: '9105',
      HEALTH_HOST: '127.0.0.1',
      NATS_URL: 'nats://127.0.0.1:4222',
      GATEWAY_ID: 'gw-1',
      PORT: '8080',
    });
    assert.equal(base.HEALTH_PORT, '9100', 'the cluster environment itself is not changed');
  });

  it('childEnv - HEALTH_PORT unset or 0: no listener in any child (no HEALTH_PORT added, 0 kept)', () => {
    assert.equal(childEnv({ PORT: '0' }, 3).HEALTH_PORT, undefined);
    assert.equal(childEnv({ HEALTH_PORT: '0' }, 3).HEALTH_PORT, '0');
  });

  it('childEnv - a child whose port would pass 65535 is refused, naming HEALTH_PORT', () => {
    assert.equal(childEnv({ HEALTH_PORT: '65530' }, 5).HEALTH_PORT, '65535');
    assert.throws(
      () => childEnv({ HEALTH_PORT: '65530' }, 6),
      (err: Error) => err instanceof TypeError && /HEALTH_PORT 65530/.test(err.message),
    );
  });

  it('startCluster - HEALTH_PORT too high for its children: refused before anything is spawned', async () => {
    let spawned = 0;
    await assert.rejects(
      startCluster({
        gateways: 1,
        shards: 2,
        routers: 1,
        env: {
          HEALTH_PORT: '65533',
          NATS_URL: 'nats://127.0.0.1:1',
          DATABASE_URL: 'postgresql://u@127.0.0.1:1/x',
          REDIS_URL: 'redis://127.0.0.1:1',
        },
        out: () => void spawned++,
      }),
      (err: Error) => err instanceof TypeError && /HEALTH_PORT 65533 \+ 4/.test(err.message),
    );
    assert.equal(spawned, 0);
  });
});
