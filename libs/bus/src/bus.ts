/**
 * The message bus port. Two adapters implement it and pass one shared test
 * suite (`test/bus-suite.ts`): `InProcessBus` (standalone) and `NatsBus`
 * (NATS core, chosen by NATS_URL).
 *
 * Subjects are NATS-style dot-separated tokens; `*` matches one token and `>`
 * matches one or more trailing tokens. Build subjects only with `subjects.ts`.
 */

/** Message headers (string → string); carries trace context across the bus. */
export type Headers = Record<string, string>;

/** A received message. `respond` answers a `request`; it is a no-op without a reply subject. */
export interface BusMessage {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers: Headers | undefined;
  readonly reply: string | undefined;
  respond(data: Uint8Array, opts?: { headers?: Headers }): void;
}

export type BusHandler = (msg: BusMessage) => void;

export interface Subscription {
  /** Stops delivery. Safe to call twice. */
  unsubscribe(): void;
  /**
   * Stops routing new messages here at once, still hands the handler every
   * message already on its way to this subscription (NATS: whatever the
   * server sent before it read the UNSUB, e.g. what piled up while the
   * process was paused), then resolves. A queue-group member that leaves
   * this way loses no message. No-op after `unsubscribe`; never rejects.
   */
  drain(): Promise<void>;
}

export interface SubscribeOptions {
  /** Queue group: each message goes to one member of the group (load sharing). */
  queue?: string;
}

export interface RequestOptions {
  /** How long to wait for the reply, ms. */
  timeoutMs: number;
  headers?: Headers;
}

export interface Bus {
  /** Adapter name for the start-up log: `in-process` or `nats`. */
  readonly kind: string;
  /**
   * Fire-and-forget publish (at most once). After `close()`/`drain()` the
   * message is dropped silently (shutdown races must not throw from timers).
   * @throws Error on a malformed subject or header (programming error).
   */
  publish(subject: string, data: Uint8Array, opts?: { headers?: Headers }): void;
  /**
   * Delivers every matching message to `handler`, in publish order per publisher.
   * A handler that throws does not stop delivery to other subscribers; the
   * adapter reports the error through its `onError` option.
   * @throws BusError code `closed` after `close()` or during `drain()`.
   */
  subscribe(subject: string, handler: BusHandler, opts?: SubscribeOptions): Subscription;
  /**
   * Sends a request and waits for the first reply.
   * @throws BusError code `timeout` after `timeoutMs`, `no_responders` when nobody listens,
   *   `closed` when the bus is closed (also for requests pending at `close()`).
   * @throws RangeError when `timeoutMs` is not a finite number > 0.
   */
  request(subject: string, data: Uint8Array, opts: RequestOptions): Promise<BusMessage>;
  /**
   * Resolves once everything published so far has been handed to the server (NATS) or delivered (in-process).
   * @throws BusError code `closed` after `close()`/`drain()`.
   */
  flush(): Promise<void>;
  /** Ordered shutdown: stop subscriptions, deliver what is in flight, then close. Safe to call twice. */
  drain(): Promise<void>;
  /** Closes at once. Safe to call twice. */
  close(): Promise<void>;
}

/**
 * - `timeout`: no reply within `timeoutMs`, or the connection dropped before a
 *   reply came (NATS reconnecting); retrying may help.
 * - `no_responders`: nobody subscribes to the request subject.
 * - `closed`: this bus was closed or is draining.
 */
export type BusErrorCode = 'timeout' | 'no_responders' | 'closed';

/** A bus-level failure; branch on `code`. */
export class BusError extends Error {
  constructor(
    readonly code: BusErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'BusError';
  }
}

const enc = new TextEncoder();
const dec = new TextDecoder();

/** JSON → bytes for bus payloads. */
export function encodeJson(value: unknown): Uint8Array {
  return enc.encode(JSON.stringify(value));
}

/** Bytes → JSON for bus payloads. @throws SyntaxError on bad JSON. */
export function decodeJson<T>(data: Uint8Array): T {
  return JSON.parse(dec.decode(data)) as T;
}
