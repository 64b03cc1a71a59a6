/**
 * The shard probes' own process. The harness process also runs every game
 * client; when the cluster saturates the machine its event loop lags by
 * hundreds of ms, which would stretch a probe's 100 ms cadence and delay
 * reading its acks. Here a process that does nothing else publishes the
 * probes and stamps their acks. The parent drives it with
 * {@link ShardProbeHost}; each request is answered with the same `req`.
 */
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import { connectNatsBus, subjects as makeSubjects, type Bus, type Subjects } from '@crowdplay/bus';
import { forkTs, guardWorker, sendToParent, waitExit } from '../fork.ts';
import { ShardProbeSet, type ShardProbeMode, type ShardProbeResult } from './shard-probe.ts';

/** One set of probes as the parent asks for it (viewer ids by position). */
export interface ShardProbeSpec {
  gateway: string;
  channels: string[];
  viewers: string[];
  mode: ShardProbeMode;
  intervalMs: number;
}

type Call =
  | { type: 'open'; natsUrl: string; prefix: string }
  | { type: 'set'; spec: ShardProbeSpec }
  | { type: 'arm'; id: number; atMs: number }
  | { type: 'ownerGone'; id: number }
  | { type: 'settle'; id: number; deadline: number }
  | { type: 'stop' };
type Request = Call & { req: number };

interface Done {
  req: number;
  ok: true;
  id?: number;
  results?: ShardProbeResult[][];
}
type Reply = Done | { req: number; ok: false; error: string };

/** Parent side: forks the probe process and forwards each call. */
export class ShardProbeHost {
  private readonly waiting = new Map<number, { resolve: (r: Reply) => void }>();
  private req = 0;
  private exited = false;

  private constructor(private readonly child: ChildProcess) {
    child.on('message', (m: Reply) => {
      if (m.req === -1 && !m.ok) {
        this.fail(new Error(`shard probe process: ${m.error}`));
        return;
      }
      const w = this.waiting.get(m.req);
      this.waiting.delete(m.req);
      w?.resolve(m);
    });
    child.once('exit', (code, signal) => {
      this.exited = true;
      this.fail(new Error(`shard probe process exited (${code ?? signal})`));
    });
  }

  private fail(err: Error): void {
    for (const [req, w] of this.waiting) w.resolve({ req, ok: false, error: err.message });
    this.waiting.clear();
  }

  /**
   * Forks the process and connects it to NATS with the cluster's subject prefix.
   * @throws Error when it cannot connect
   */
  static async start(natsUrl: string, prefix: string): Promise<ShardProbeHost> {
    const child = forkTs(fileURLToPath(import.meta.url), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const host = new ShardProbeHost(child);
    await host.call({ type: 'open', natsUrl, prefix });
    return host;
  }

  private async call(r: Call): Promise<Done> {
    if (this.exited) throw new Error('shard probe process has exited');
    const req = ++this.req;
    const reply = await new Promise<Reply>((resolve) => {
      this.waiting.set(req, { resolve });
      this.child.send({ ...r, req });
    });
    if (!reply.ok) throw new Error(reply.error);
    return reply;
  }

  /** Subscribes a set's ack subject (before the fault). @returns the set's id */
  async create(spec: ShardProbeSpec): Promise<number> {
    return (await this.call({ type: 'set', spec })).id!;
  }

  /** Starts a set's probes; `atMs` (ms since epoch) is the fault's instant, where a dead owner's gap starts. */
  async arm(id: number, atMs: number): Promise<void> {
    await this.call({ type: 'arm', id, atMs });
  }

  /** The drained owner exited (ShardProbeSet.ownerGone). */
  async ownerGone(id: number): Promise<void> {
    await this.call({ type: 'ownerGone', id });
  }

  /** Resolves once every gap of the set closed, or at `deadline` (ms since epoch). */
  async settle(id: number, deadline: number): Promise<void> {
    await this.call({ type: 'settle', id, deadline });
  }

  /** Stops every set and closes the process. @returns each set's results, by id */
  async stop(): Promise<Map<number, ShardProbeResult[]>> {
    const r = await this.call({ type: 'stop' });
    await waitExit(this.child, 5_000);
    return new Map((r.results ?? []).map((x, i) => [i, x]));
  }

  /** Ends the process without results (cleanup after a failure). */
  async kill(): Promise<void> {
    if (!this.exited) this.child.kill('SIGKILL');
    await waitExit(this.child, 5_000);
  }
}

/** Child side. */
async function main(): Promise<void> {
  guardWorker((stack) => ({ req: -1, ok: false, error: stack }));
  let bus: Bus | null = null;
  let subjects: Subjects | null = null;
  const sets: ShardProbeSet[] = [];
  const reply = (m: Reply): void => sendToParent(m);
  process.on('message', (m: Request) => {
    void (async (): Promise<void> => {
      try {
        switch (m.type) {
          case 'open':
            bus = await connectNatsBus({ servers: m.natsUrl, name: 'failover-shard-probes' });
            subjects = makeSubjects(m.prefix);
            reply({ req: m.req, ok: true });
            return;
          case 'set': {
            if (!bus || !subjects) throw new Error('not open');
            const viewers = m.spec.viewers;
            sets.push(new ShardProbeSet({ ...m.spec, bus, subjects, viewerOf: (i) => viewers[i]! }));
            await bus.flush();
            reply({ req: m.req, ok: true, id: sets.length - 1 });
            return;
          }
          case 'arm':
            sets[m.id]!.arm(m.atMs);
            reply({ req: m.req, ok: true });
            return;
          case 'ownerGone':
            sets[m.id]!.ownerGone();
            reply({ req: m.req, ok: true });
            return;
          case 'settle':
            await sets[m.id]!.settle(m.deadline);
            reply({ req: m.req, ok: true });
            return;
          case 'stop': {
            const results = sets.map((s) => s.stop());
            await (bus as Bus | null)?.close().catch(() => undefined);
            sendToParent({ req: m.req, ok: true, results } satisfies Reply, () => process.exit(0));
            return;
          }
        }
      } catch (err) {
        reply({ req: m.req, ok: false, error: (err as Error).message });
      }
    })();
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) void main();
