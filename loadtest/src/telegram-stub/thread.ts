/**
 * The Bot API stub on a worker thread of its own: its event loop is not the
 * generator's. The stub timestamps a call when its loop reads it, and its
 * 1-s window is strict, so on the generator's loop (10,000 player sockets,
 * expected boards rendered) a stall of the generator bunched calls the
 * product had spaced evenly, and a 429 could be the harness's (measured: 461–
 * 785 ms stalls, one bot-scope 429 right after one). Here only the stub's own
 * work delays its reads; its loop lag is sampled on its thread (LoopLagLog).
 *
 * The main thread talks to it by messages: {@link StubThread} has the
 * queries the rollover needs, each a round trip.
 */
import { Worker } from 'node:worker_threads';
import type { BoardView, CallRecord, StoredMessage, StubStats } from '@crowdplay/telegram/testing';

/** What the thread builds its stub from (structured-cloned: no functions). */
export interface StubThreadOptions {
  tokens: string[];
  /**
   * Avatars the stub serves: `photo` gives a user whose id is ≥ `playerIdBase` the libs/board sample avatar
   * number `1 + id % pool` (the rollover's own players), `none` gives nobody a photo.
   */
  avatars: { mode: 'photo' | 'none'; playerIdBase: number; pool: number };
}

/** A request to the thread. */
export type StubRequest =
  | { op: 'listen' }
  | { op: 'messages'; chatIds: number[] }
  | { op: 'boards'; chatIds: number[] }
  | { op: 'calls'; sinceSeq: number }
  | { op: 'stats' }
  | { op: 'lag'; around: number[] }
  | { op: 'close' };

/** The thread's answers, by op. */
export interface StubAnswers {
  listen: string;
  messages: StoredMessage[][];
  boards: Array<BoardView | null>;
  calls: CallRecord[];
  stats: StubStats;
  /** The thread's largest loop lag, and the largest around each asked time (LoopLagLog.maxAround), ms. */
  lag: { max: number; around: number[] };
  close: null;
}

/** The stub on its own thread. Start with {@link StubThread.start}. */
export class StubThread {
  private seq = 0;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private failed: Error | null = null;

  private constructor(
    private readonly worker: Worker,
    /** The stub's Bot API root (http://127.0.0.1:<port>). */
    readonly apiRoot: string,
  ) {}

  /**
   * Starts the thread and its stub's HTTP server on 127.0.0.1 and a free port.
   * @throws Error when the thread fails to start or listen
   */
  static async start(opts: StubThreadOptions): Promise<StubThread> {
    // The thread registers tsx's loader itself (the tsx CLI's hooks are the main thread's), then imports the
    // TypeScript module.
    const entry = new URL('./thread-worker.ts', import.meta.url).href;
    const tsxApi = import.meta.resolve('tsx/esm/api');
    const worker = new Worker(`import(${JSON.stringify(tsxApi)}).then((t) => { t.register(); return import(${JSON.stringify(entry)}); })`, {
      eval: true,
      workerData: opts,
    });
    const t = new StubThread(worker, '');
    worker.on('message', (m: { id: number; ok: boolean; value?: unknown; error?: string }) => {
      const p = t.pending.get(m.id);
      if (!p) return;
      t.pending.delete(m.id);
      if (m.ok) p.resolve(m.value);
      else p.reject(new Error(`stub thread: ${m.error}`));
    });
    const fail = (err: Error): void => {
      t.failed = err;
      for (const p of t.pending.values()) p.reject(err);
      t.pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`stub thread exited (${code})`)));
    try {
      const apiRoot = await t.ask({ op: 'listen' });
      return Object.assign(t, { apiRoot });
    } catch (err) {
      await worker.terminate();
      throw err;
    }
  }

  /** One round trip to the thread. @throws Error when the thread failed or answered an error */
  private ask<K extends StubRequest['op']>(req: Extract<StubRequest, { op: K }>): Promise<StubAnswers[K]> {
    if (this.failed) return Promise.reject(this.failed);
    const id = ++this.seq;
    return new Promise<StubAnswers[K]>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.worker.postMessage({ id, req });
    });
  }

  /** The messages of each chat in `chatIds` (TelegramStub.messages). */
  messages(chatIds: number[]): Promise<StoredMessage[][]> {
    return this.ask({ op: 'messages', chatIds });
  }

  /** The board each chat in `chatIds` shows (TelegramStub.board), null where none. */
  boards(chatIds: number[]): Promise<Array<BoardView | null>> {
    return this.ask({ op: 'boards', chatIds });
  }

  /** Calls after `sinceSeq` (TelegramStub.calls). */
  calls(sinceSeq = 0): Promise<CallRecord[]> {
    return this.ask({ op: 'calls', sinceSeq });
  }

  stats(): Promise<StubStats> {
    return this.ask({ op: 'stats' });
  }

  /** The stub thread's loop lag: the largest, and the largest around each of `around` (ms since epoch). */
  lag(around: number[] = []): Promise<{ max: number; around: number[] }> {
    return this.ask({ op: 'lag', around });
  }

  /** Closes the stub's server and ends the thread. Safe to call twice. */
  async close(): Promise<void> {
    if (!this.failed) await this.ask({ op: 'close' }).catch(() => undefined);
    await this.worker.terminate();
  }
}
