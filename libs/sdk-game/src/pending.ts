/**
 * Requests a game client sent with a `ref` and is waiting on: each settles
 * once, by the frame that answers it, by an error frame with its `ref`, by a
 * socket error on sending, by its timeout, or with every other one when the
 * connection ends. Shared by GameClient and MultiGameClient.
 */
import { CrowdplayError } from '@crowdplay/protocol';

interface Waiting<T> {
  resolve: (value: T) => void;
  reject: (err: CrowdplayError) => void;
  timer: ReturnType<typeof setTimeout>;
}

/** The requests waiting for their answer, by `ref`. */
export class PendingRequests<T> {
  readonly #waiting = new Map<string, Waiting<T>>();
  readonly #timeoutMs: number;

  /** @param timeoutMs how long a request waits for its answer, ms (the client's `requestTimeoutMs`) */
  constructor(timeoutMs: number) {
    this.#timeoutMs = timeoutMs;
  }

  /** Requests waiting. */
  get size(): number {
    return this.#waiting.size;
  }

  /**
   * Registers `ref`, then sends it with `send`, and waits for its answer.
   * @param what how the timeout names the request (`round.open`, `attach`, …)
   * @param send writes the frame; calls `failed` when the socket reports the write failed
   * @returns the answer given to {@link resolve}; rejects with what {@link reject} or {@link rejectAll} is given,
   *   CP_ERR_CLIENT_REQUEST_TIMEOUT after `timeoutMs`, or CP_ERR_CLIENT_SOCKET when the write failed
   */
  wait(ref: string, what: string, send: (failed: (err: Error) => void) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        if (this.#waiting.delete(ref))
          reject(new CrowdplayError('CP_ERR_CLIENT_REQUEST_TIMEOUT', [`${what} (ref ${ref})`, this.#timeoutMs]));
      }, this.#timeoutMs);
      this.#waiting.set(ref, { resolve, reject, timer });
      send((err) => this.reject(ref, new CrowdplayError('CP_ERR_CLIENT_SOCKET', [err.message], { cause: err })));
    });
  }

  /** True when `ref` is a request waiting for its answer. */
  has(ref: unknown): boolean {
    return typeof ref === 'string' && this.#waiting.has(ref);
  }

  /** Settles request `ref` with `value`. @returns false when no such request waits (a late answer after a timeout) */
  resolve(ref: unknown, value: T): boolean {
    const w = this.#take(ref);
    w?.resolve(value);
    return w !== undefined;
  }

  /** Rejects request `ref` with `err`. @returns false when no such request waits */
  reject(ref: unknown, err: CrowdplayError): boolean {
    const w = this.#take(ref);
    w?.reject(err);
    return w !== undefined;
  }

  /** Rejects every request waiting with `err` (the connection ended). */
  rejectAll(err: CrowdplayError): void {
    const all = [...this.#waiting.values()];
    this.#waiting.clear();
    for (const w of all) {
      clearTimeout(w.timer);
      w.reject(err);
    }
  }

  #take(ref: unknown): Waiting<T> | undefined {
    if (typeof ref !== 'string') return undefined;
    const w = this.#waiting.get(ref);
    if (w === undefined) return undefined;
    this.#waiting.delete(ref);
    clearTimeout(w.timer);
    return w;
  }
}
