/** Helpers shared by the two adapters; not exported from the package. */

/**
 * Receives an error the bus cannot throw to a caller: a subscriber's handler
 * that threw (`subject` = the message subject) or an asynchronous connection
 * error (`subject` undefined).
 */
export type BusErrorReporter = (err: unknown, subject: string | undefined) => void;

/**
 * How many distinct subjects the default reporter remembers before it forgets
 * them all; bounds its memory when subjects are per channel.
 */
export const DEFAULT_REPORTER_MAX_SUBJECTS = 1_000;

/**
 * The default reporter: `console.error` once per subject (once per bus for
 * connection errors), so a handler failing on every message cannot flood the
 * log. Remembers at most `maxSubjects` subjects, then starts over.
 */
export function oncePerSubjectReporter(label: string, maxSubjects = DEFAULT_REPORTER_MAX_SUBJECTS): BusErrorReporter {
  const seen = new Set<string>();
  return (err, subject) => {
    const key = subject ?? '';
    if (seen.has(key)) return;
    if (seen.size >= maxSubjects) seen.clear();
    seen.add(key);
    const where = subject === undefined ? 'connection' : `subject ${subject}`;
    console.error(`[${label}] error on ${where} (further errors on it are not logged):`, err);
  };
}

/** Calls `report`, swallowing anything it throws (a reporter must never break delivery). */
export function safeReport(report: BusErrorReporter, err: unknown, subject: string | undefined): void {
  try {
    report(err, subject);
  } catch {
    // A broken reporter must not stop delivery to other subscribers.
  }
}

/** @throws RangeError unless `timeoutMs` is a finite number > 0. */
export function checkTimeoutMs(timeoutMs: number): void {
  if (!(Number.isFinite(timeoutMs) && timeoutMs > 0)) throw new RangeError(`timeoutMs must be a finite number > 0, got ${timeoutMs}`);
}
