/**
 * The sequencer: hands out blocks of event ids over bus request/reply
 * (`subjects.sequencerLease()`, queue group `sequencer`). The high-water mark
 * is raised in Postgres (committed) before a block is handed out, so no
 * restart of any process reuses an id.
 */
import { decodeJson, encodeJson, type Bus, type Subjects, type Subscription } from '@crowdplay/bus';
import type { Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';

/** Request: `{ size }` (ids wanted). Reply: `{ ok, first, last }` inclusive, or `{ ok: false, message }`. */
export interface LeaseRequest {
  size: number;
}
export type LeaseReply = { ok: true; first: number; last: number } | { ok: false; message: string };

/** Largest block one request may take (a sanity bound on a bad request). */
export const MAX_LEASE_SIZE = 1_000_000;

export class SequencerService {
  private sub: Subscription | null = null;
  private chain: Promise<void> = Promise.resolve();

  constructor(private readonly deps: { bus: Bus; subjects: Subjects; store: Store; telemetry: Telemetry }) {
    const leases = deps.telemetry.metrics.counter('crowdplay_sequencer_leases_total', 'Blocks of event ids leased, by outcome');
    this.count = (outcome) => leases.add(1, { outcome });
  }
  private readonly count: (outcome: string) => void;

  /** Starts answering lease requests. */
  async start(): Promise<void> {
    const { bus, subjects } = this.deps;
    this.sub = bus.subscribe(
      subjects.sequencerLease(),
      (msg) => {
        // Leases are serialised in this process; Postgres serialises across processes.
        this.chain = this.chain.then(async () => {
          let reply: LeaseReply;
          try {
            const req = decodeJson<LeaseRequest>(msg.data);
            const size = req.size;
            if (!Number.isSafeInteger(size) || size < 1 || size > MAX_LEASE_SIZE) {
              reply = { ok: false, message: `size must be an integer in [1, ${MAX_LEASE_SIZE}]` };
              this.count('refused');
            } else {
              const b = await this.deps.store.sequencer.lease(size);
              reply = { ok: true, first: b.first, last: b.last };
              this.count('ok');
            }
          } catch (err) {
            this.deps.telemetry.logger.error({ err }, 'lease failed');
            reply = { ok: false, message: 'lease failed' };
            this.count('error');
          }
          msg.respond(encodeJson(reply));
        });
      },
      { queue: 'sequencer' },
    );
    await bus.flush();
  }

  /** Stops answering (in-flight leases finish). Safe to call twice. */
  async close(): Promise<void> {
    this.sub?.unsubscribe();
    this.sub = null;
    await this.chain;
  }
}
