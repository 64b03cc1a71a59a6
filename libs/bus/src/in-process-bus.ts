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

/** Options of {@link InProcessBus}. */
export interface InProcessBusOptions {
  /**
   * Called when a subscriber's handler throws (`subject` = the message
   * subject); delivery to the other subscribers goes on.
   * @defaultValue `console.error` once per subject
   */
  onError?: (err: unknown, subject: string | undefined) => void;
}

interface Sub {
  tokens: string[];
  handler: BusHandler;
  queue: string | undefined;
  active: boolean;
}

/** True when NATS-style `pattern` tokens match `subject` tokens. */
export function subjectMatches(pattern: readonly string[], subject: readonly string[]): boolean {
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i];
    if (p === '>') return subject.length > i;
    if (i >= subject.length) return false;
    if (p !== '*' && p !== subject[i]) return false;
  }
  return pattern.length === subject.length;
}

/**
 * The standalone bus: same semantics as NATS core (wildcards, queue groups,
 * request/reply, headers) inside one process. Delivery is asynchronous
 * (microtask) so a publisher never re-enters its own subscriber, as with NATS.
 * Exact subjects are looked up in a map; wildcard subscriptions are scanned.
 * A handler that throws is reported through `onError` and does not stop
 * delivery to the other subscribers.
 */
export class InProcessBus implements Bus {
  readonly kind = 'in-process';
  private readonly exact = new Map<string, Sub[]>();
  private readonly wild: Sub[] = [];
  /** Round-robin cursor per queue group, keyed by the group's first member (bounded by live subscriptions). */
  private readonly queueCursor = new WeakMap<Sub, number>();
  private readonly onError: BusErrorReporter;
  /** Rejecters of requests still waiting for a reply; `close()` rejects them with `closed`. */
  private readonly pendingRequests = new Set<(err: BusError) => void>();
  private inbox = 0;
  private closed = false;
  private draining: Promise<void> | undefined;
  private pending = 0;
  private idleWaiters: Array<() => void> = [];

  /** @param opts see {@link InProcessBusOptions}. */
  constructor(opts: InProcessBusOptions = {}) {
    this.onError = opts.onError ?? oncePerSubjectReporter('in-process-bus');
  }

  publish(subject: string, data: Uint8Array, opts?: { headers?: Headers }): void {
    this.deliver(subject, data, opts?.headers, undefined);
  }

  subscribe(subject: string, handler: BusHandler, opts?: SubscribeOptions): Subscription {
    if (this.closed || this.draining) throw new BusError('closed', 'bus is closed');
    return this.addSub(subject, handler, opts?.queue);
  }

  request(subject: string, data: Uint8Array, opts: RequestOptions): Promise<BusMessage> {
    try {
      checkTimeoutMs(opts.timeoutMs);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    if (this.closed || this.draining) return Promise.reject(new BusError('closed', 'bus is closed'));
    const reply = `_INBOX.${++this.inbox}`;
    return new Promise<BusMessage>((resolve, reject) => {
      const finish = (): void => {
        clearTimeout(timer);
        sub.unsubscribe();
        this.pendingRequests.delete(fail);
      };
      const fail = (err: BusError): void => {
        finish();
        reject(err);
      };
      const timer = setTimeout(() => {
        fail(new BusError('timeout', `request to ${subject} timed out after ${opts.timeoutMs} ms`));
      }, opts.timeoutMs);
      const sub = this.addSub(
        reply,
        (msg) => {
          finish();
          resolve(msg);
        },
        undefined,
      );
      if (this.matching(subject).length === 0) {
        fail(new BusError('no_responders', `no responders for ${subject}`));
        return;
      }
      this.pendingRequests.add(fail);
      this.deliver(subject, data, opts.headers, reply);
    });
  }

  flush(): Promise<void> {
    if (this.closed) return Promise.reject(new BusError('closed', 'bus is closed'));
    return this.idle();
  }

  /** Refuses new subscriptions and requests, delivers every queued message (and what their handlers publish), then closes. */
  drain(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.draining ??= this.idle().then(() => this.close());
    return this.draining;
  }

  /** Drops queued deliveries, rejects pending requests with `closed`, removes every subscription. */
  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    for (const list of this.exact.values()) for (const s of list) s.active = false;
    for (const s of this.wild) s.active = false;
    this.exact.clear();
    this.wild.length = 0;
    for (const fail of [...this.pendingRequests]) fail(new BusError('closed', 'bus closed before the reply'));
    return Promise.resolve();
  }

  private idle(): Promise<void> {
    if (this.pending === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private addSub(subject: string, handler: BusHandler, queue: string | undefined): Subscription {
    const tokens = subject.split('.');
    const sub: Sub = { tokens, handler, queue, active: true };
    const isWild = tokens.some((t) => t === '*' || t === '>');
    if (isWild) this.wild.push(sub);
    else {
      const list = this.exact.get(subject);
      if (list) list.push(sub);
      else this.exact.set(subject, [sub]);
    }
    const detach = (): void => {
      if (isWild) {
        const i = this.wild.indexOf(sub);
        if (i >= 0) this.wild.splice(i, 1);
      } else {
        const list = this.exact.get(subject);
        if (list) {
          const i = list.indexOf(sub);
          if (i >= 0) list.splice(i, 1);
          if (list.length === 0) this.exact.delete(subject);
        }
      }
    };
    return {
      unsubscribe: () => {
        if (!sub.active) return;
        sub.active = false;
        detach();
      },
      // Deliveries already queued (microtasks, in publish order) still reach the handler; nothing new is routed here.
      drain: () => {
        if (!sub.active) return Promise.resolve();
        detach();
        return new Promise<void>((resolve) =>
          queueMicrotask(() => {
            sub.active = false;
            resolve();
          }),
        );
      },
    };
  }

  private matching(subject: string): Sub[] {
    const direct = this.exact.get(subject);
    if (this.wild.length === 0) return direct ? direct.slice() : [];
    const tokens = subject.split('.');
    const out = direct ? direct.slice() : [];
    for (const s of this.wild) if (subjectMatches(s.tokens, tokens)) out.push(s);
    return out;
  }

  private deliver(subject: string, data: Uint8Array, given: Headers | undefined, reply: string | undefined): void {
    if (this.closed) return;
    // As on NATS: the publisher's active span travels in the headers, and the handler runs in that context only.
    const headers = publishHeaders(given);
    const subs = this.matching(subject);
    if (subs.length === 0) return;
    // Queue groups: one member per group, round robin.
    const targets: Sub[] = [];
    const groups = new Map<string, Sub[]>();
    for (const s of subs) {
      if (s.queue === undefined) targets.push(s);
      else {
        const g = groups.get(s.queue);
        if (g) g.push(s);
        else groups.set(s.queue, [s]);
      }
    }
    for (const members of groups.values()) {
      const key = members[0]!;
      const n = (this.queueCursor.get(key) ?? 0) % members.length;
      this.queueCursor.set(key, n + 1);
      targets.push(members[n]!);
    }
    const msg: BusMessage = {
      subject,
      data,
      headers,
      reply,
      respond: (d, o) => {
        if (reply) this.deliver(reply, d, o?.headers, undefined);
      },
    };
    this.pending++;
    queueMicrotask(() => {
      for (const s of targets) {
        if (!s.active) continue;
        try {
          runInContext(s.handler, msg);
        } catch (err) {
          safeReport(this.onError, err, subject);
        }
      }
      if (--this.pending === 0) {
        const w = this.idleWaiters;
        this.idleWaiters = [];
        for (const f of w) f();
      }
    });
  }
}
