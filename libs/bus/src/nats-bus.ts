import {
  ClosedConnectionError,
  connect,
  ConnectionError,
  DrainingConnectionError,
  headers as natsHeaders,
  NoRespondersError,
  RequestError,
  TimeoutError,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
} from '@nats-io/transport-node';
import { CrowdplayError } from '@crowdplay/protocol';
import {
  BusError,
  type Bus,
  type BusHandler,
  type BusMessage,
  type Headers,
  type RequestOptions,
  type SubscribeOptions,
  type Subscription,
} from './bus.ts';
import { checkTimeoutMs, oncePerSubjectReporter, safeReport, type BusErrorReporter } from './internal.ts';
import { publishHeaders, runInContext } from './trace-context.ts';

/** Options of {@link connectNatsBus}. */
export interface NatsBusOptions {
  /** Server URL(s), comma-separated, e.g. `nats://127.0.0.1:4222` (NATS_URL). */
  servers: string;
  /** Connection name shown by the server (`nats server report connections`), e.g. `gateway-1`. */
  name: string;
  /**
   * Receives errors nobody can be thrown to: a handler that threw (`subject`
   * set), an asynchronous server error or a connection closed by an error
   * (`subject` undefined).
   * @defaultValue `console.error` once per subject
   */
  onError?: (err: unknown, subject?: string) => void;
  /**
   * How long the first connection may take per server, handshake included, ms (NATS_CONNECT_TIMEOUT_MS).
   * @defaultValue nats.js's 20,000
   */
  connectTimeoutMs?: number;
}

/**
 * Reconnect policy: never give up (`maxReconnectAttempts: -1`), wait
 * `RECONNECT_WAIT_MS` between attempts to one server (nats.js default 2 s,
 * shortened so a restarted NATS is picked up quickly).
 */
export const NATS_RECONNECT_WAIT_MS = 1_000;

/**
 * Connects to NATS and returns a {@link NatsBus}. Reconnects forever after a
 * connection loss (publishes are buffered by the client meanwhile).
 * @throws CrowdplayError CP_ERR_BUS_UNAVAILABLE when the first connection fails (each server of the list tried
 *   once: refused, unreachable, no handshake within `connectTimeoutMs`): failing fast at boot is intended; other
 *   nats.js errors (credentials refused) as they are.
 */
export async function connectNatsBus(opts: NatsBusOptions): Promise<NatsBus> {
  const servers = opts.servers
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers,
      name: opts.name,
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: NATS_RECONNECT_WAIT_MS,
      ...(opts.connectTimeoutMs === undefined ? {} : { timeout: opts.connectTimeoutMs }),
    });
  } catch (err) {
    if (err instanceof ConnectionError || err instanceof TimeoutError)
      throw new CrowdplayError('CP_ERR_BUS_UNAVAILABLE', [err.message], { cause: err });
    throw err;
  }
  return new NatsBus(nc, opts.onError ?? oncePerSubjectReporter(`nats-bus ${opts.name}`));
}

/** NATS headers → plain record (last value wins for repeated keys). */
function toRecord(h: MsgHdrs): Headers {
  const out: Headers = {};
  for (const [k, values] of h) {
    const last = values[values.length - 1];
    if (last !== undefined) out[k] = last;
  }
  return out;
}

/** Plain record → NATS headers; `undefined` when there is none (no header block on the wire). The active span's trace context is added by the callers (publishHeaders). */
function toNats(h: Headers | undefined): MsgHdrs | undefined {
  if (h === undefined) return undefined;
  let out: MsgHdrs | undefined;
  for (const k in h) {
    const v = h[k];
    if (v === undefined) continue;
    out ??= natsHeaders();
    out.set(k, v);
  }
  return out;
}

/** A received NATS message; headers are converted only when read. */
class NatsBusMessage implements BusMessage {
  private converted: Headers | undefined;
  constructor(
    private readonly msg: Msg,
    private readonly bus: NatsBus,
  ) {}
  get subject(): string {
    return this.msg.subject;
  }
  get data(): Uint8Array {
    return this.msg.data;
  }
  get reply(): string | undefined {
    return this.msg.reply || undefined;
  }
  get headers(): Headers | undefined {
    if (this.converted === undefined && this.msg.headers !== undefined) this.converted = toRecord(this.msg.headers);
    return this.converted;
  }
  respond(data: Uint8Array, opts?: { headers?: Headers }): void {
    const reply = this.msg.reply;
    if (reply) this.bus.publish(reply, data, opts);
  }
}

/** True when `err` means the connection is closed or draining (nothing can be sent any more). */
function isClosedError(err: unknown): boolean {
  return err instanceof ClosedConnectionError || err instanceof DrainingConnectionError;
}

/**
 * The cluster bus on NATS core (`@nats-io/transport-node` v3): at-most-once
 * publish, subjects with `*`/`>` wildcards, queue groups, request/reply with
 * no-responders detection, headers. Subscriptions use callbacks (no async
 * iterator per message). A handler that throws is reported through `onError`
 * and does not affect other subscribers or the connection.
 */
export class NatsBus implements Bus {
  readonly kind = 'nats';
  private closing: Promise<void> | undefined;
  private draining: Promise<void> | undefined;
  /**
   * Publishes of this event-loop turn, handed to nats.js together at its end (or before any other operation, so
   * their order with requests, subscriptions and flushes is kept): nats.js writes its buffer to the socket once per
   * microtask checkpoint, so publishes spread over a turn's promise continuations became one socket write each.
   */
  private pending: Array<{ subject: string; data: Uint8Array; headers: Headers | undefined }> = [];
  private pendingFlush: NodeJS.Immediate | undefined;

  /** Prefer {@link connectNatsBus}; `onError` as in {@link NatsBusOptions}. */
  constructor(
    private readonly nc: NatsConnection,
    private readonly onError: BusErrorReporter,
  ) {
    void this.watch();
  }

  /** The underlying connection, for diagnostics (server info, stats). */
  get connection(): NatsConnection {
    return this.nc;
  }

  /**
   * Allowed while draining (handlers of in-flight requests may still respond), dropped once nats.js refuses. Handed
   * to nats.js at the end of the event-loop turn with the turn's other publishes (see `pending`), in order.
   */
  publish(subject: string, data: Uint8Array, opts?: { headers?: Headers }): void {
    if (this.closing) return;
    this.pending.push({ subject, data, headers: publishHeaders(opts?.headers) });
    this.pendingFlush ??= setImmediate(() => this.sendPending());
  }

  /** Hands this turn's publishes to nats.js now, in order (before any other operation on the connection). */
  private sendPending(): void {
    if (this.pendingFlush) {
      clearImmediate(this.pendingFlush);
      this.pendingFlush = undefined;
    }
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    for (const p of batch) {
      if (this.closing) return;
      try {
        this.nc.publish(p.subject, p.data, { headers: toNats(p.headers) });
      } catch (err) {
        if (isClosedError(err)) return; // at most once: dropped after close
        safeReport(this.onError, err, p.subject);
      }
    }
  }

  subscribe(subject: string, handler: BusHandler, opts?: SubscribeOptions): Subscription {
    if (this.closing || this.draining) throw new BusError('closed', 'bus is closed');
    this.sendPending();
    let active = true;
    let sub;
    try {
      sub = this.nc.subscribe(subject, {
        queue: opts?.queue,
        callback: (err, msg) => {
          if (err) {
            safeReport(this.onError, err, subject);
            return;
          }
          if (!active) return;
          try {
            runInContext(handler, new NatsBusMessage(msg, this));
          } catch (e) {
            safeReport(this.onError, e, msg.subject);
          }
        },
      });
    } catch (err) {
      if (isClosedError(err)) throw new BusError('closed', 'bus is closed', { cause: err });
      throw err;
    }
    const natsSub = sub;
    return {
      unsubscribe: () => {
        if (!active) return;
        active = false;
        if (this.nc.isClosed()) return;
        this.sendPending();
        try {
          natsSub.unsubscribe();
        } catch (err) {
          if (!isClosedError(err)) throw err;
        }
      },
      // nats.js: UNSUB, then a flush; messages received before the flush's PONG are delivered to the callback.
      drain: async () => {
        if (!active) return;
        if (this.nc.isClosed()) {
          active = false;
          return;
        }
        try {
          this.sendPending();
          await natsSub.drain();
        } catch {
          // closed or draining meanwhile: nothing more can arrive
        }
        active = false;
      },
    };
  }

  async request(subject: string, data: Uint8Array, opts: RequestOptions): Promise<BusMessage> {
    checkTimeoutMs(opts.timeoutMs);
    if (this.closing || this.draining) throw new BusError('closed', 'bus is closed');
    this.sendPending();
    try {
      const msg = await this.nc.request(subject, data, { timeout: opts.timeoutMs, headers: toNats(publishHeaders(opts.headers)) });
      return new NatsBusMessage(msg, this);
    } catch (err) {
      throw this.mapRequestError(err, subject, opts.timeoutMs);
    }
  }

  async flush(): Promise<void> {
    if (this.closing || this.nc.isClosed()) throw new BusError('closed', 'bus is closed');
    this.sendPending();
    try {
      await this.nc.flush();
    } catch (err) {
      if (isClosedError(err)) throw new BusError('closed', 'bus is closed', { cause: err });
      throw err;
    }
  }

  /**
   * nats.js ordered shutdown (`nc.drain()`): unsubscribes every subscription,
   * delivers the messages already on their way to it, flushes what was
   * published, then closes. Publishes and new subscriptions are refused from
   * the start. Resolves when closed; a second call returns the same promise.
   */
  drain(): Promise<void> {
    if (this.closing) return this.closing;
    this.sendPending();
    this.draining ??= (async () => {
      try {
        if (!this.nc.isClosed()) await this.nc.drain();
      } catch (err) {
        if (!isClosedError(err)) throw err;
      }
    })();
    return this.draining;
  }

  /** Closes at once: pending requests reject with `closed`, undelivered messages are dropped. Idempotent. */
  close(): Promise<void> {
    if (!this.closing) this.sendPending();
    this.closing ??= this.nc.close();
    return this.closing;
  }

  private mapRequestError(err: unknown, subject: string, timeoutMs: number): unknown {
    if (err instanceof TimeoutError)
      return new BusError('timeout', `request to ${subject} timed out after ${timeoutMs} ms`, { cause: err });
    if (err instanceof NoRespondersError || (err instanceof RequestError && err.isNoResponders())) {
      return new BusError('no_responders', `no responders for ${subject}`, { cause: err });
    }
    if (isClosedError(err) || this.closing || this.draining || this.nc.isClosed()) {
      return new BusError('closed', `bus closed before the reply to ${subject}`, { cause: err });
    }
    // The connection dropped (nats.js rejects pending requests on disconnect); it reconnects by itself.
    if (err instanceof RequestError) return new BusError('timeout', `connection lost before the reply to ${subject}`, { cause: err });
    return err;
  }

  /** Reports asynchronous server errors and an error that closed the connection. */
  private async watch(): Promise<void> {
    void this.nc.closed().then((err) => {
      if (err) safeReport(this.onError, err, undefined);
    });
    try {
      for await (const s of this.nc.status()) {
        if (s.type === 'error') safeReport(this.onError, s.error, undefined);
      }
    } catch (err) {
      safeReport(this.onError, err, undefined);
    }
  }
}
