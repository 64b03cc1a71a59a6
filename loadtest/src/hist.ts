/**
 * Latency histograms (hdr-histogram-js): values are recorded in microseconds
 * (loopback act acks are sub-millisecond), reported in milliseconds.
 * Workers ship histograms to the coordinator as compressed base64
 * (`encodeIntoCompressedBase64`), which merges them losslessly.
 */
import * as hdr from 'hdr-histogram-js';

export type Histogram = hdr.Histogram;

/** Largest recordable value: one hour, in µs. Larger values are clamped to it. */
export const HIST_MAX_US = 3_600_000_000;

/** A histogram of µs values, 1 µs to 1 h, 3 significant digits (0.1 % resolution). */
export function newHistogram(): Histogram {
  return hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: HIST_MAX_US, numberOfSignificantValueDigits: 3 });
}

/** Records `us` microseconds, clamped to [0, HIST_MAX_US] and rounded. */
export function recordUs(h: Histogram, us: number): void {
  h.recordValue(Math.min(HIST_MAX_US, Math.max(0, Math.round(us))));
}

/** Encodes for IPC (compressed base64). */
export function encodeHistogram(h: Histogram): string {
  return hdr.encodeIntoCompressedBase64(h);
}

/** Adds an encoded histogram into `into`. */
export function addEncoded(into: Histogram, encoded: string): void {
  const h = hdr.decodeFromCompressedBase64(encoded);
  into.add(h);
  h.destroy();
}

/** Percentiles in ms (3 decimals), from a µs histogram; every value null when it is empty. */
export interface LatencySummary {
  count: number;
  p50: number | null;
  p95: number | null;
  p99: number | null;
  max: number | null;
}

const ms = (us: number): number => Math.round(us) / 1000;

/** Summarises a µs histogram into ms percentiles, adding `offsetMs` to each (batch lag's intake estimate). */
export function summarize(h: Histogram, offsetMs = 0): LatencySummary {
  const count = h.totalCount;
  if (count === 0) return { count, p50: null, p95: null, p99: null, max: null };
  const at = (p: number): number => Math.round((ms(h.getValueAtPercentile(p)) + offsetMs) * 1000) / 1000;
  return { count, p50: at(50), p95: at(95), p99: at(99), max: Math.round((ms(h.maxValue) + offsetMs) * 1000) / 1000 };
}
