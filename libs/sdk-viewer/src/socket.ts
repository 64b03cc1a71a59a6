/**
 * The slice of the WHATWG WebSocket API the SDKs use. Both the browser's
 * global `WebSocket` and the `ws` package's `WebSocket` class (Node) satisfy
 * it, so the viewer SDK never imports `ws` itself: Node callers hand the class
 * in (`new ViewerClient({ WebSocket, ... })`).
 */

/** A handler whose parameter is checked bivariantly (DOM and `ws` event types differ in detail). */
type Handler<E> = { bivarianceHack(ev: E): void }['bivarianceHack'];

/** Minimal WebSocket instance: readyState, send, close and the four `on*` handlers. */
export interface WebSocketLike {
  readonly readyState: number;
  /** Bytes queued by `send` but not yet written to the network. */
  readonly bufferedAmount: number;
  onopen: Handler<unknown> | null;
  /** `data` is a string for text frames (browser and `ws` ≥ 8 EventTarget API). */
  onmessage: Handler<{ data: unknown }> | null;
  onclose: Handler<{ code: number; reason: string }> | null;
  /** Browser: a bare Event; `ws`: an ErrorEvent with `message` and `error`. */
  onerror: Handler<unknown> | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/**
 * A WebSocket class: `new (url, protocols?, options?)`. The third argument is
 * the `ws` package's client options (Node only: `localAddress`,
 * `perMessageDeflate`, `handshakeTimeout`, …); browsers take two arguments.
 * `S` is the instance type (e.g. `ws`' own WebSocket type for its extra methods).
 */
export type WebSocketConstructor<S extends WebSocketLike = WebSocketLike> = new (
  url: string,
  protocols?: string | string[],
  options?: object,
) => S;

/** `WebSocket.OPEN` (WHATWG): the only readyState in which `send` is allowed. */
export const WS_OPEN = 1;

/** Best-effort text of a socket `error` event (browsers give none; `ws` gives `message`). */
export function describeSocketError(ev: unknown): string {
  if (typeof ev === 'object' && ev !== null) {
    const { message, error } = ev as { message?: unknown; error?: unknown };
    if (typeof message === 'string' && message) return message;
    if (error instanceof Error) return error.message;
  }
  return 'WebSocket error';
}
