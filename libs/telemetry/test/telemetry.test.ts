import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { until } from '@crowdplay/testing';
import { Metrics, OTHER_TENANT_LABEL, Refusals, tenantQuotaRefusals, ThrottledLog } from '../src/index.ts';

function captureLogger(): { logger: pino.Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      cb();
    },
  });
  return { logger: pino({ level: 'info' }, stream), lines };
}

/** `crowdplay_event_loop_lag_ms{quantile="max"}` in one scrape, or null. */
async function lagMax(m: Metrics): Promise<number | null> {
  const line = (await m.prometheusText())
    .split('\n')
    .find((l) => l.startsWith('crowdplay_event_loop_lag_ms{') && l.includes('quantile="max"'));
  return line ? Number(line.split(' ').at(-1)) : null;
}

describe('telemetry', () => {
  it('event-loop lag - a stall a scrape follows at once still shows in the max (the histogram reset forgets its last tick)', async () => {
    const m = new Metrics({ service: 'test' });
    try {
      await until('a first event-loop lag sample', async () => (await lagMax(m)) !== null, { timeoutMs: 2_000 });
      await lagMax(m); // a scrape: the window starts
      const t0 = Date.now();
      while (Date.now() - t0 < 120); // a 120 ms stall
      const right = await lagMax(m); // read right after it, before any timer of the loop ran
      // Either that scrape or one after the loop's next sample shows it; a stall the reset forgot shows in none.
      const seen = await until(
        'the stall in the lag max',
        async () => {
          const v = Math.max(right ?? 0, (await lagMax(m)) ?? 0);
          return v >= 90 && v;
        },
        { timeoutMs: 1_000 },
      );
      assert.ok(seen >= 90, `the stall: ${right} then ${seen} ms`);
    } finally {
      await m.close();
    }
  });

  it('refusals - counted every time, logged once per interval with the count', async () => {
    const metrics = new Metrics({ service: 'test' });
    const { logger, lines } = captureLogger();
    let now = 1_000;
    const r = new Refusals(metrics, logger, 10_000, () => now);
    for (let i = 0; i < 5; i++) r.refuse('gateway', 'CP_ERR_INTENT_RATE_LIMITED');
    now += 10_000;
    r.refuse('gateway', 'CP_ERR_INTENT_RATE_LIMITED');
    r.refuse('gateway', 'CP_ERR_AUTH_INVALID');
    await new Promise((res) => setImmediate(res));
    const rate = lines.filter((l) => l.reason === 'CP_ERR_INTENT_RATE_LIMITED');
    assert.deepEqual(
      rate.map((l) => l.refused),
      [1, 5],
      'first line at once, second carries the 4 suppressed + 1',
    );
    assert.equal(lines.filter((l) => l.reason === 'CP_ERR_AUTH_INVALID').length, 1);
    const text = await metrics.prometheusText();
    assert.match(text, /crowdplay_refusals_total\{area="gateway",reason="CP_ERR_INTENT_RATE_LIMITED"[^}]*\} 6/);
    assert.match(text, /crowdplay_refusals_total\{area="gateway",reason="CP_ERR_AUTH_INVALID"[^}]*\} 1/);
    await metrics.close();
    await metrics.close();
  });

  it('throttled log - an error repeating many times a second: written at once, then once per interval per key with the count', async () => {
    const { logger, lines } = captureLogger();
    let now = 1_000;
    const t = new ThrottledLog(logger, 10_000, () => now);
    const written = [t.error('commit', { transfers: 3 }, 'ledger commit failed')];
    for (let i = 0; i < 4; i++) written.push(t.error('commit', { transfers: 1 }, 'ledger commit failed'));
    assert.deepEqual(written, [true, false, false, false, false], 'the first line only, within the interval');
    assert.equal(t.error('other', {}, 'another failure'), true, 'keys are apart');
    now += 9_999;
    assert.equal(t.error('commit', {}, 'ledger commit failed'), false, 'not before the interval');
    now += 1;
    assert.equal(t.error('commit', { transfers: 2 }, 'ledger commit failed'), true);
    await new Promise((res) => setImmediate(res));
    const commit = lines.filter((l) => l.msg === 'ledger commit failed');
    assert.deepEqual(
      commit.map((l) => [l.level, l.repeated, l.transfers]),
      [
        [50, 1, 3],
        [50, 6, 2],
      ],
      'the second line carries the 5 not written + itself',
    );
    assert.equal(lines.filter((l) => l.msg === 'another failure').length, 1);
  });

  it('metrics - histograms use ms buckets and event-loop lag is exported', async () => {
    const metrics = new Metrics({ service: 'test' });
    const h = metrics.histogram('crowdplay_trade_ack_ms');
    h.record(3);
    h.record(40);
    await until('a first event-loop lag sample', async () => (await lagMax(metrics)) !== null, { timeoutMs: 2_000 });
    const busyUntil = Date.now() + 30;
    while (Date.now() < busyUntil) {
      /* block the loop so lag is non-zero */
    }
    await until('the blocked loop in the lag max', async () => ((await lagMax(metrics)) ?? 0) > 5, { timeoutMs: 1_000 });
    const text = await metrics.prometheusText();
    assert.match(text, /crowdplay_trade_ack_ms_bucket\{[^}]*le="5"\} 1/);
    assert.match(text, /crowdplay_trade_ack_ms_bucket\{[^}]*le="50"\} 2/);
    const lag = /crowdplay_event_loop_lag_ms\{[^}]*quantile="max"[^}]*\} ([\d.]+)/.exec(text);
    assert.ok(lag, 'event-loop lag gauge exported');
    assert.ok(Number(lag[1]) > 5, `lag max ${lag[1]} ms reflects the blocked loop`);
    await metrics.close();
  });
});

describe('tenant quota refusals', () => {
  it('tenant quota refusals - at most maxTenants tenant labels, the rest under ~other, each also a refusal', async () => {
    const m = new Metrics({ service: 'test' });
    try {
      const { logger, lines } = captureLogger();
      const r = tenantQuotaRefusals({ metrics: m, refusals: new Refusals(m, logger, 60_000) }, 2);
      assert.equal(tenantQuotaRefusals({ metrics: m, refusals: new Refusals(m, logger, 60_000) }, 50), r, 'one per Metrics');
      for (const t of ['a', 'b', 'c', 'd', 'a']) r.refuse('gateway', t, 'connections');
      r.refuse('funding', 'c', 'grantPointsPerDay');
      const text = await m.prometheusText();
      const series = text.split('\n').filter((l) => l.startsWith('crowdplay_tenant_quota_refusals_total{'));
      const tenants = new Set(series.map((l) => /tenant="([^"]*)"/.exec(l)?.[1]));
      assert.deepEqual([...tenants].sort(), ['a', 'b', OTHER_TENANT_LABEL].sort());
      assert.ok(series.some((l) => l.includes('tenant="~other"') && l.includes('quota="connections"') && l.endsWith(' 2')));
      assert.ok(series.some((l) => l.includes('tenant="a"') && l.endsWith(' 2')));
      assert.ok(text.includes('crowdplay_refusals_total{area="gateway",reason="CP_ERR_TENANT_QUOTA"'));
      assert.equal(lines.filter((l) => l.reason === 'CP_ERR_TENANT_QUOTA').length, 2, 'logged once per area per interval');
      assert.doesNotMatch(OTHER_TENANT_LABEL, /^[A-Za-z0-9_-]{1,64}$/, 'never a tenant id');
    } finally {
      await m.close();
    }
  });
});
