/** Anything with a typed `on(event, listener)` that returns an unsubscribe function (the SDKs' emitters). */
export interface Subscribable<E> {
  on<K extends keyof E>(event: K, listener: E[K]): () => void;
}

/**
 * Resolves with the arguments of the next `event` whose arguments satisfy
 * `pred`, then unsubscribes. For tests that wait on events instead of sleeping.
 */
export function nextEvent<E extends { [K in keyof E]: (...args: never[]) => void }, K extends keyof E>(
  emitter: Subscribable<E>,
  event: K,
  pred: (...args: Parameters<E[K]>) => boolean = () => true,
): Promise<Parameters<E[K]>> {
  return new Promise((resolve) => {
    const listener = ((...args: Parameters<E[K]>) => {
      if (!pred(...args)) return;
      off();
      resolve(args);
    }) as unknown as E[K];
    const off = emitter.on(event, listener);
  });
}
