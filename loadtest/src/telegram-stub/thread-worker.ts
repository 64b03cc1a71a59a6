/**
 * The stub thread's side (thread.ts): builds a TelegramStub from
 * `workerData` (StubThreadOptions), samples this thread's loop lag, and
 * answers the main thread's requests ({id, req} → {id, ok, value | error}).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { sampleAvatar } from '@crowdplay/board';
import { LoopLagLog } from '../rollover/lag.ts';
import { TelegramStub } from '@crowdplay/telegram/testing';
import type { StubAnswers, StubRequest, StubThreadOptions } from './thread.ts';

const opts = workerData as StubThreadOptions;
const { mode, playerIdBase, pool } = opts.avatars;
const images = mode === 'photo' ? Array.from({ length: pool }, (_, i) => sampleAvatar(i + 1)) : [];
const stub = new TelegramStub({
  tokens: opts.tokens,
  avatarFor: (userId) => (mode === 'photo' && userId >= playerIdBase ? images[userId % pool]! : null),
});
const lag = new LoopLagLog();

async function answer(req: StubRequest): Promise<StubAnswers[StubRequest['op']]> {
  switch (req.op) {
    case 'listen':
      return stub.listen();
    case 'messages':
      return req.chatIds.map((c) => stub.messages(c));
    case 'boards':
      return req.chatIds.map((c) => stub.board(c) ?? null);
    case 'calls':
      return stub.calls(req.sinceSeq);
    case 'stats':
      return stub.stats();
    case 'lag':
      return { max: lag.max, around: req.around.map((t) => lag.maxAround(t)) };
    case 'close':
      lag.stop();
      await stub.close();
      return null;
  }
}

parentPort!.on('message', ({ id, req }: { id: number; req: StubRequest }) => {
  const fail = (err: unknown): void => parentPort!.postMessage({ id, ok: false, error: err instanceof Error ? err.message : String(err) });
  answer(req)
    .then((value) => parentPort!.postMessage({ id, ok: true, value }))
    .catch(fail); // an answer that cannot be cloned is an error answer, not a dead thread
});
