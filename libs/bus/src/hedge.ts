import type { Bus, BusMessage, RequestOptions } from './bus.ts';
import { checkTimeoutMs } from './internal.ts';

/** Most re-sends one {@link hedgedRequest} may make: each is one more request a queue group answers. */
export const MAX_HEDGES = 3;

/** Options of {@link hedgedRequest}. */
export interface HedgedRequestOptions extends RequestOptions {
  /**
   * Re-send the request when no reply came this long after the previous send,
   * ms (finite, > 0). A value ≥ `timeoutMs` never re-sends.
   */
  hedgeAfterMs: number;
  /** Re-sends at most, 0–{@link MAX_HEDGES}. @defaultValue 1 */
  maxHedges?: number;
  /** Called as each re-send goes out (`hedge` = 1 for the first), e.g. to count it. */
  onHedge?: (hedge: number) => void;
}

/**
 * A request that is sent again when its reply is slow, for a subject served
 * by a queue group: a member that hangs (a paused process, a stalled event
 * loop) stays in the group and still gets its share of requests, and each
 * of those would otherwise wait for the whole timeout. The re-send is a new
 * request, which the server most likely routes to another member.
 *
 * - The request goes out at once; if no reply came `hedgeAfterMs` later, the
 *   same request (same data and headers) goes out again, at most `maxHedges`
 *   times, `hedgeAfterMs` apart.
 * - The first reply wins; the other replies are ignored (their requests were
 *   still handled: use it only when doing the work twice is harmless).
 * - The overall deadline is `timeoutMs` from the call, as for
 *   {@link Bus.request}: each re-send only waits for what is left of it, and
 *   no re-send goes out after it.
 * - It fails as soon as every request sent so far has failed, with the first
 *   request's error, and sends nothing more: `no_responders` or `closed` fail
 *   at once (re-sending would not help), a timeout at the deadline. An error
 *   from one request while another is still in flight is not final.
 *
 * @throws BusError as {@link Bus.request} (the first request's error)
 * @throws RangeError when `timeoutMs` or `hedgeAfterMs` is not a finite number > 0,
 *   or `maxHedges` not an integer in 0–{@link MAX_HEDGES}
 */
export function hedgedRequest(bus: Bus, subject: string, data: Uint8Array, opts: HedgedRequestOptions): Promise<BusMessage> {
  const maxHedges = opts.maxHedges ?? 1;
  try {
    checkTimeoutMs(opts.timeoutMs);
    if (!Number.isFinite(opts.hedgeAfterMs) || opts.hedgeAfterMs <= 0) {
      throw new RangeError(`hedgeAfterMs must be a finite number > 0, got ${opts.hedgeAfterMs}`);
    }
    if (!Number.isInteger(maxHedges) || maxHedges < 0 || maxHedges > MAX_HEDGES) {
      throw new RangeError(`maxHedges must be an integer in 0–${MAX_HEDGES}, got ${maxHedges}`);
    }
  } catch (err) {
    return Promise.reject(err as Error);
  }
  const deadline = performance.now() + opts.timeoutMs;
  return new Promise<BusMessage>((resolve, reject) => {
    let settled = false;
    let pending = 0;
    let hedges = 0;
    let firstError: unknown;
    let timer: NodeJS.Timeout | undefined;

    const settle = (): void => {
      settled = true;
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
    };
    const send = (timeoutMs: number, first: boolean): void => {
      pending++;
      bus.request(subject, data, { timeoutMs, headers: opts.headers }).then(
        (msg) => {
          pending--;
          if (settled) return;
          settle();
          resolve(msg);
        },
        (err: unknown) => {
          pending--;
          if (first) firstError = err;
          if (settled || pending > 0) return;
          // Every request sent failed (fast, or at the deadline): the first one's error is the answer.
          settle();
          reject(firstError);
        },
      );
    };
    const schedule = (): void => {
      if (hedges >= maxHedges) return;
      const left = deadline - performance.now();
      if (opts.hedgeAfterMs >= left) return;
      timer = setTimeout(() => {
        timer = undefined;
        if (settled) return;
        const remaining = Math.floor(deadline - performance.now());
        if (remaining < 1) return;
        hedges++;
        opts.onHedge?.(hedges);
        send(remaining, false);
        schedule();
      }, opts.hedgeAfterMs);
    };
    schedule();
    send(opts.timeoutMs, true);
  });
}
