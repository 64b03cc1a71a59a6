/**
 * Waiting on events in tests, instead of sleeping. A test that sleeps and
 * then asserts guesses how long the code under test needs; these helpers
 * resolve when the thing happens (an emitter's event, a callback, a value
 * reached) and fail with a message naming what never happened at their
 * deadline. For "nothing happened" assertions, wait for a later event that
 * proves the window passed (the next tick's batch, a round trip) and then
 * assert.
 */

/** Anything with a typed `on(event, listener)` that returns an unsubscribe function (the SDKs' emitters). */
export interface Subscribable<E> {
  on<K extends keyof E>(event: K, listener: E[K]): () => void;
}

/** Deadline options of the waiting helpers. */
export interface WaitOptions {
  /** Fail after this long (ms) [5,000]. */
  readonly timeoutMs?: number;
}

/** Poll options of {@link until}. */
export interface UntilOptions extends WaitOptions {
  /** Time between two checks (ms) [10]. */
  readonly intervalMs?: number;
}

/** The deadline of every waiting helper unless a test gives its own (ms). */
export const DEFAULT_WAIT_TIMEOUT_MS = 5_000;

/** Thrown (rejected) by a waiting helper whose deadline passed; names what was waited for. */
export class WaitTimeoutError extends Error {
  override readonly name = 'WaitTimeoutError';
}

/**
 * Resolves with the arguments of the next `event` whose arguments satisfy
 * `pred`, then unsubscribes. For tests that wait on events instead of sleeping.
 * With `timeoutMs`, rejects with a WaitTimeoutError (and unsubscribes) when no
 * such event came in time; without it, waits as long as the test runner lets it.
 */
export function nextEvent<E extends { [K in keyof E]: (...args: never[]) => void }, K extends keyof E>(
  emitter: Subscribable<E>,
  event: K,
  pred: (...args: Parameters<E[K]>) => boolean = () => true,
  opts: WaitOptions = {},
): Promise<Parameters<E[K]>> {
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const listener = ((...args: Parameters<E[K]>) => {
      if (!pred(...args)) return;
      off();
      clearTimeout(timer);
      resolve(args);
    }) as unknown as E[K];
    const off = emitter.on(event, listener);
    if (opts.timeoutMs !== undefined) {
      timer = setTimeout(() => {
        off();
        reject(new WaitTimeoutError(`no matching '${String(event)}' event within ${opts.timeoutMs} ms`));
      }, opts.timeoutMs);
    }
  });
}

/** A promise with its resolve and reject functions outside it, plus whether it settled. */
export interface Deferred<T = void> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(reason: unknown): void;
  /** True once resolve or reject was called. */
  readonly settled: boolean;
}

/**
 * A promise the test (or a fake it hands to the code under test) settles:
 * the callback that happens resolves it, the test awaits it.
 */
export function deferred<T = void>(): Deferred<T> {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  let settled = false;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return {
    promise,
    resolve: (v) => {
      settled = true;
      resolve(v);
    },
    reject: (e) => {
      settled = true;
      reject(e);
    },
    get settled() {
      return settled;
    },
  };
}

/**
 * Resolves with `promise`'s value, or rejects with a WaitTimeoutError
 * "timed out after <ms> ms waiting for <what>" when it has not settled by
 * then. The timer is cleared either way.
 * @param what what the promise stands for, for the message ("the second batch")
 */
export async function within<T>(promise: Promise<T>, what: string, opts: WaitOptions = {}): Promise<T> {
  const ms = opts.timeoutMs ?? DEFAULT_WAIT_TIMEOUT_MS;
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new WaitTimeoutError(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Polls `check` every `intervalMs` until it returns a value other than
 * `undefined`, `null` or `false`, and resolves with that value. Only for
 * state that announces no event (a counter of another process, a row in a
 * table); where an event exists, wait on it ({@link nextEvent}, {@link deferred}).
 * A `check` may be async; a throw rejects at once.
 * @param what what is waited for, for the message ("two renders on threads")
 * @throws WaitTimeoutError (rejects) at the deadline, naming `what` and the last value seen
 */
export async function until<T>(
  what: string,
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  opts: UntilOptions = {},
): Promise<T> {
  const ms = opts.timeoutMs ?? DEFAULT_WAIT_TIMEOUT_MS;
  const every = opts.intervalMs ?? 10;
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== null && v !== false) return v;
    if (Date.now() >= end) throw new WaitTimeoutError(`timed out after ${ms} ms waiting for ${what} (last: ${String(v)})`);
    await new Promise((r) => setTimeout(r, every));
  }
}

/**
 * Counts calls and lets a test wait for the n-th: `hit()` is the callback
 * handed to the code under test, `reached(n)` resolves once it was called at
 * least n times in total.
 */
export interface Counter {
  /** Calls so far. */
  readonly count: number;
  /** Counts one call. */
  hit(): void;
  /**
   * Resolves when `count >= n`.
   * @throws WaitTimeoutError (rejects) after `timeoutMs` [5,000] naming `what` and the count reached
   */
  reached(n: number, what?: string, opts?: WaitOptions): Promise<void>;
}

/** A {@link Counter} starting at zero. */
export function counter(): Counter {
  let count = 0;
  const waiters: Array<{ n: number; resolve: () => void }> = [];
  return {
    get count() {
      return count;
    },
    hit() {
      count++;
      for (let i = waiters.length - 1; i >= 0; i--) {
        const w = waiters[i]!;
        if (count >= w.n) {
          waiters.splice(i, 1);
          w.resolve();
        }
      }
    },
    reached(n, what = `${n} calls`, opts = {}) {
      if (count >= n) return Promise.resolve();
      const d = deferred();
      waiters.push({ n, resolve: () => d.resolve() });
      return within(d.promise, what, opts).catch((err: unknown) => {
        throw err instanceof WaitTimeoutError ? new WaitTimeoutError(`${err.message} (count: ${count})`) : err;
      });
    },
  };
}
