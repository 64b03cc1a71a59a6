/**
 * A small typed event emitter with no dependency on Node's `events`, so the
 * viewer SDK runs unchanged in browsers.
 *
 * `Events` maps each event name to its listener signature, e.g.
 * `{ update: (u: ChannelUpdate) => void }`.
 */
/** Any listener signature (`never[]` accepts every parameter list). */
type AnyListener = (...args: never[]) => void;
/** A listener called with the arguments of event `K`. */
type Call<Events, K extends keyof Events> = (...args: Events[K] extends (...a: infer P) => void ? P : never) => void;

export class TypedEmitter<Events extends { [K in keyof Events]: AnyListener }> {
  readonly #listeners = new Map<keyof Events, Set<AnyListener>>();

  /** Adds `listener` for `event`. Returns a function that removes it. */
  on<K extends keyof Events>(event: K, listener: Events[K]): () => void {
    let set = this.#listeners.get(event);
    if (!set) {
      set = new Set();
      this.#listeners.set(event, set);
    }
    set.add(listener);
    return () => this.off(event, listener);
  }

  /** Adds `listener` for the next `event` only. Returns a function that removes it. */
  once<K extends keyof Events>(event: K, listener: Events[K]): () => void {
    const wrapper = ((...args: Events[K] extends (...a: infer P) => void ? P : never) => {
      off();
      (listener as unknown as Call<Events, K>)(...args);
    }) as unknown as Events[K];
    const off = this.on(event, wrapper);
    return off;
  }

  /** Removes `listener` from `event` (no-op when it is not registered). */
  off<K extends keyof Events>(event: K, listener: Events[K]): void {
    this.#listeners.get(event)?.delete(listener);
  }

  /** Number of listeners currently registered for `event`. */
  listenerCount(event: keyof Events): number {
    return this.#listeners.get(event)?.size ?? 0;
  }

  /**
   * Calls every listener of `event` in registration order. A listener that
   * throws does not stop the others or the caller (the SDK's socket handler);
   * its exception is rethrown on a fresh microtask, where the host reports it
   * as uncaught like any other programming error.
   *
   * @returns true when at least one listener was called
   */
  protected emit<K extends keyof Events>(event: K, ...args: Events[K] extends (...a: infer P) => void ? P : never): boolean {
    const set = this.#listeners.get(event);
    if (!set || set.size === 0) return false;
    for (const listener of [...set]) {
      try {
        (listener as unknown as Call<Events, K>)(...args);
      } catch (err) {
        queueMicrotask(() => {
          throw err;
        });
      }
    }
    return true;
  }
}
