import assert from 'node:assert/strict';

/**
 * "How you'd notice", checked: every reason counted in
 * `crowdplay_refusals_total` was logged, and exactly once — for suites whose
 * telemetry logs refusals at most once per interval and whose interval is
 * longer than the suite (so one line per reason, however often it was refused).
 * @param metricsText the Prometheus text of the suite's Metrics
 * @param logs the suite's captured JSON log lines
 * @throws AssertionError naming the area, reason and counts
 */
export function assertRefusalsLoggedOnce(metricsText: string, logs: ReadonlyArray<Record<string, unknown>>): void {
  for (const line of metricsText.split('\n')) {
    const m = /^crowdplay_refusals_total\{([^}]*)\} (\d+)/.exec(line);
    if (!m || Number(m[2]) === 0) continue;
    const area = /area="([^"]*)"/.exec(m[1]!)?.[1];
    const reason = /reason="([^"]*)"/.exec(m[1]!)?.[1];
    const logged = logs.filter((l) => l.area === area && l.reason === reason);
    assert.equal(logged.length, 1, `${area}/${reason}: refused ${m[2]} times, logged ${logged.length} times (want exactly 1 per interval)`);
    assert.equal(typeof logged[0]!.refused, 'number');
  }
}
