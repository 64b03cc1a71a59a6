import type { Bus } from './bus.ts';
import { InProcessBus } from './in-process-bus.ts';
import { connectNatsBus } from './nats-bus.ts';

/** Options of {@link openBus}. */
export interface OpenBusOptions {
  /** NATS server URL(s) (NATS_URL); `''` selects the in-process bus (standalone). */
  natsUrl: string;
  /** Connection name for NATS, e.g. `gateway-1`; unused in process. */
  name: string;
  /** See `NatsBusOptions.onError` / `InProcessBusOptions.onError`. @defaultValue `console.error` once per subject */
  onError?: (err: unknown, subject?: string) => void;
  /** NATS: how long the first connection may take per server, ms (NATS_CONNECT_TIMEOUT_MS). @defaultValue nats.js's 20,000 */
  connectTimeoutMs?: number;
}

/**
 * Opens the bus chosen by `natsUrl`: `InProcessBus` when it is `''`, else a
 * `NatsBus` (reconnecting forever). Log `bus.kind` at start-up.
 * @throws CrowdplayError CP_ERR_BUS_UNAVAILABLE when NATS cannot be reached at start (connectNatsBus).
 */
export async function openBus(opts: OpenBusOptions): Promise<Bus> {
  if (opts.natsUrl === '') return new InProcessBus({ onError: opts.onError });
  return connectNatsBus({ servers: opts.natsUrl, name: opts.name, onError: opts.onError, connectTimeoutMs: opts.connectTimeoutMs });
}
