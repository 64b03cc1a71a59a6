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
}

/**
 * Opens the bus chosen by `natsUrl`: `InProcessBus` when it is `''`, else a
 * `NatsBus` (reconnecting forever). Log `bus.kind` at start-up.
 * @throws the nats.js `ConnectionError` when NATS is unreachable at start.
 */
export async function openBus(opts: OpenBusOptions): Promise<Bus> {
  if (opts.natsUrl === '') return new InProcessBus({ onError: opts.onError });
  return connectNatsBus({ servers: opts.natsUrl, name: opts.name, onError: opts.onError });
}
