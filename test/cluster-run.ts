/**
 * A staking workload for the cluster fault suites (test/e2e/fencing.test.ts,
 * test/e2e/restarts.test.ts): one game client opening and settling pool
 * rounds back to back on a channel, and viewers that act and stake in the
 * open round without pause, each stake with its own idempotency key. It
 * records every stake's answer (ack, refusal, or none within
 * `answerTimeoutMs`) and every batch's event id, and `checkRun` then checks
 * what must hold whatever happened meanwhile: every stake answered, every
 * acked stake in the ledger exactly once (its round settled or refunded),
 * no refused stake in the ledger, `verifyLedger` ok, event ids strictly
 * increasing, never reused, and at most the sequencer's high-water mark.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import WebSocket from 'ws';
import { SignJWT } from 'jose';
import { verifyLedger } from '@crowdplay/ledger';
import type { ActAck, Batch } from '@crowdplay/protocol';
import { GameClient } from '@crowdplay/sdk-game';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import type { Store } from '@crowdplay/store';

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One stake sent by the workload, and what came back. */
export interface StakeRecord {
  viewer: string;
  round: string;
  key: string;
  points: number;
  sentAtMs: number;
  /** The ack (ok or refused), 'none' when nothing came back within answerTimeoutMs, or the client's error message. */
  answer: ActAck | 'none' | string | undefined;
  /** Times the SDK gave up waiting for its ack (CP_ERR_CLIENT_REQUEST_TIMEOUT) and the stake was sent again with its key. */
  timeouts: number;
}

export interface WorkloadOptions {
  gatewayUrl: string;
  channel: string;
  apiKey: string;
  /** The tenant's id and signing secret (viewer JWTs). */
  tenant: string;
  secret: string;
  viewers: string[];
  /** Points granted to each viewer before the run. */
  fund: number;
  /** A round is settled and the next one opened this often, ms. */
  roundEveryMs: number;
  /** A stake without an answer this long counts as unanswered, ms. */
  answerTimeoutMs?: number;
}

export interface Workload {
  stakes: StakeRecord[];
  /** Event ids of the batches the game received, in order. */
  eventIds: number[];
  /** Game requests refused or failed (code or message), in order (the workload retries them). */
  gameRetries: string[];
  /** Rounds opened, in order. */
  rounds: string[];
  /** Every ack the viewers received, by code ('ok' for accepted), late ones (after an SDK timeout) included. */
  ackCodes: Map<string, number>;
  /** Resolves once `n` more stakes than now were acked (ok). @throws Error after `ms` */
  ackedMore(n: number, ms: number, what: string): Promise<void>;
  /** Stops the viewers and the round loop, settles the round left open, closes every client. */
  stop(): Promise<void>;
}

/** How long a stake's answer may take, resends included, before it counts as missing (a failover and a NATS restart included), ms. */
const ANSWER_TIMEOUT_MS = 20_000;

/** The viewers' SDK ackTimeoutMs: a stake without an ack this long is sent again with its key, ms. */
const ACK_TIMEOUT_MS = 4_000;

function race<T>(p: Promise<T>, ms: number): Promise<T | 'none'> {
  let t: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<'none'>((r) => (t = setTimeout(() => r('none'), ms)))]).finally(() => clearTimeout(t));
}

/** How often each viewer stakes (and acts), ms. */
const STAKE_EVERY_MS = 200;

const RETRYABLE = new Set([
  'CP_ERR_CHANNEL_UNAVAILABLE',
  'CP_ERR_STORE_UNAVAILABLE',
  'CP_ERR_BUS_TIMEOUT',
  'CP_ERR_CLIENT_CLOSED',
  'CP_ERR_CLIENT_NOT_OPEN',
]);

/**
 * Grants every viewer `fund` points (tenant API), connects the game and the
 * viewers, opens the first round and starts staking.
 */
export async function startWorkload(o: WorkloadOptions): Promise<Workload> {
  const answerTimeoutMs = o.answerTimeoutMs ?? ANSWER_TIMEOUT_MS;
  for (const v of o.viewers) {
    const res = await fetch(`${o.gatewayUrl}/v1/grants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${o.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ viewer: v, points: o.fund, id: `fund-${o.channel}-${v}` }),
    });
    assert.ok(res.ok, `grant ${res.status} ${await res.text()}`);
  }
  const stakes: StakeRecord[] = [];
  const eventIds: number[] = [];
  const gameRetries: string[] = [];
  const rounds: string[] = [];
  const ackCodes = new Map<string, number>();
  const game = new GameClient({ url: o.gatewayUrl, channel: o.channel, apiKey: o.apiKey });
  game.on('batch', (b: Batch) => void eventIds.push(b.ev));
  game.on('error', () => undefined);
  await game.connect();
  game.declare([{ name: 'cheer', maxPerTick: 1_000 }]);
  let running = true;

  /** A game request, retried while the channel is between owners (retryable refusals, timeouts). */
  async function gameRequest<T>(what: string, f: () => Promise<T>, untilMs: number): Promise<T | null> {
    for (;;) {
      try {
        return await f();
      } catch (err) {
        const code = (err as { code?: string }).code ?? String(err);
        gameRetries.push(`${what}: ${code}`);
        if (!RETRYABLE.has(code) && !/timed out|no answer/.test(String(err))) throw err;
        if (Date.now() > untilMs) return null;
        await sleep(100);
      }
    }
  }

  let n = 0;
  let current = '';
  const openNext = async (): Promise<void> => {
    const id = `r${++n}`;
    let tries = 0;
    const view = await gameRequest(
      `open ${id}`,
      () =>
        game
          .openRound({ round: id, kind: 'pool', outcomes: ['a', 'b'], durationMs: 60_000 })
          .catch((err: { code?: string }) => {
            // Sent again after a refusal without an answer (a timeout): it may have been opened by the first try.
            if (tries > 0 && err.code === 'CP_ERR_ROUND_EXISTS') return { id };
            throw err;
          })
          .finally(() => tries++),
      Date.now() + 20_000,
    );
    if (view) {
      rounds.push(id);
      current = id;
    }
  };
  /** Settles `id` (retried while the channel moves); a round the failover already cancelled stays cancelled. */
  const settle = async (id: string): Promise<void> => {
    try {
      await gameRequest(`settle ${id}`, () => game.settleRound(id, 'a'), Date.now() + 20_000);
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code !== 'CP_ERR_ROUND_ALREADY_FINAL' && code !== 'CP_ERR_ROUND_UNKNOWN') throw err;
    }
  };
  try {
    await openNext();
    assert.ok(current, `first round opened: ${gameRetries.join('; ')}`);
  } catch (err) {
    await game.close().catch(() => undefined);
    throw err;
  }

  const roundLoop = (async () => {
    while (running) {
      await sleep(o.roundEveryMs);
      if (!running) break;
      const was = current;
      await openNext();
      await settle(was);
    }
  })();
  roundLoop.catch(() => undefined); // its error is thrown by stop()

  const opened: ViewerClient[] = [];
  const viewers = await Promise.all(
    o.viewers.map(async (name) => {
      const token = await new SignJWT({ tid: o.tenant })
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject(name)
        .setExpirationTime('10m')
        .sign(new TextEncoder().encode(o.secret));
      const v = new ViewerClient({ url: o.gatewayUrl, channel: o.channel, token, WebSocket, ackTimeoutMs: ACK_TIMEOUT_MS });
      v.on('ack', (a) => {
        const code = a.ok ? 'ok' : (a.code ?? '?');
        ackCodes.set(code, (ackCodes.get(code) ?? 0) + 1);
      });
      opened.push(v);
      await v.connect();
      return { name, v };
    }),
  ).catch(async (err: unknown) => {
    running = false;
    await Promise.all(opened.map((v) => v.close().catch(() => undefined)));
    await game.close().catch(() => undefined);
    throw err;
  });
  let seq = 0;
  const answers: Array<Promise<void>> = [];
  // A viewer does not wait for a stake's answer before the next one (one held by a paused shard would stop it):
  // it stakes every STAKE_EVERY_MS, with a free act beside every other one (under INTENT_RATE_PER_S, 10).
  const loops = viewers.map(async ({ name, v }, i) => {
    while (running) {
      if (seq % 2 === 0) v.act('cheer').catch(() => undefined);
      const rec: StakeRecord = {
        viewer: name,
        round: current,
        key: `${name}-${++seq}`,
        points: 1 + ((seq + i) % 3),
        sentAtMs: Date.now(),
        answer: undefined,
        timeouts: 0,
      };
      stakes.push(rec);
      const outcome = seq % 2 === 0 ? 'a' : 'b';
      answers.push(
        (async () => {
          // Lost on the bus (at most once): the SDK times out; sent again with the same key (a replay if it went through).
          for (;;) {
            try {
              rec.answer = await race(v.stake(rec.round, outcome, rec.points, { key: rec.key }), answerTimeoutMs);
              return;
            } catch (err) {
              const code = (err as { code?: string }).code ?? String(err);
              if (code !== 'CP_ERR_CLIENT_REQUEST_TIMEOUT' || Date.now() - rec.sentAtMs > answerTimeoutMs) {
                rec.answer = code;
                return;
              }
              rec.timeouts++;
            }
          }
        })(),
      );
      await sleep(STAKE_EVERY_MS);
    }
  });

  let stopped: Promise<void> | undefined;
  const acked = (): number => stakes.filter((s) => typeof s.answer === 'object' && s.answer.ok).length;
  return {
    stakes,
    eventIds,
    gameRetries,
    rounds,
    ackCodes,
    async ackedMore(k, ms, what) {
      const target = acked() + k;
      const deadline = Date.now() + ms;
      while (acked() < target) {
        if (Date.now() > deadline) throw new Error(`${what}: ${acked()} stakes acked, wanted ${target} within ${ms} ms`);
        await sleep(50);
      }
    },
    stop() {
      stopped ??= (async () => {
        running = false;
        try {
          await Promise.all(loops);
          await Promise.all(answers);
          await roundLoop;
          await settle(current);
        } finally {
          // Always: a client left open reconnects forever and keeps the test process alive.
          await Promise.all(viewers.map(({ v }) => v.close().catch(() => undefined)));
          await game.close().catch(() => undefined);
        }
      })();
      return stopped;
    },
  };
}

function hashOf(viewer: string, key: string): string {
  // The shard's transfer id of a stake (services/crowd-engine/src/round-ledger.ts hashOf).
  return createHash('sha256').update(viewer).update('\u0000').update(key).digest('base64url').slice(0, 22);
}

/** What checkRun found, for the test's own assertions and its failure messages. */
export interface RunFindings {
  acked: number;
  /** Stakes resent after an SDK timeout (CP_ERR_CLIENT_REQUEST_TIMEOUT). */
  resent: number;
  /** Of those, refused in the end but found in the ledger (the first send went through; refunded or paid with its round). */
  unknownInLedger: number;
  refused: Map<string, number>;
  /** Rounds (id → state) of the channel at the end. */
  roundStates: Map<string, string>;
}

/**
 * Checks a finished run (after `stop()`): every stake answered; each acked
 * stake's transfer in the ledger exactly once with its points, each refused
 * stake's absent; every round finished and paid (waits up to `settleMs`),
 * a cancelled round's stakes refunded to the point; `verifyLedger` ok;
 * event ids strictly increasing (so never reused) and at most the sequencer's
 * high-water mark.
 */
export async function checkRun(store: Store, channel: string, w: Workload, settleMs = 15_000): Promise<RunFindings> {
  const unanswered = w.stakes.filter((s) => s.answer === 'none' || s.answer === undefined);
  assert.deepEqual(
    unanswered.map((s) => `${s.viewer} ${s.round} ${s.key}`),
    [],
    'every stake gets an answer (an ack or a refusal)',
  );
  const refused = new Map<string, number>();
  for (const s of w.stakes) {
    const a = s.answer;
    const code = typeof a === 'string' ? a : a && !a.ok ? (a.code ?? '?') : null;
    if (code) refused.set(code, (refused.get(code) ?? 0) + 1);
  }
  // Rounds finish: settled or cancelled, and paid (refunds and payouts committed).
  const deadline = Date.now() + settleMs;
  let rows: Array<{ id: string; state: string; paid: boolean }> = [];
  for (;;) {
    rows = (
      await store.db.query<{ id: string; state: string; paid: boolean }>(
        'SELECT id, state, paid FROM rounds WHERE channel_id = $1 ORDER BY id',
        [channel],
      )
    ).rows;
    if (rows.every((r) => (r.state === 'settled' || r.state === 'cancelled') && r.paid)) break;
    if (Date.now() > deadline) assert.fail(`rounds not finished: ${JSON.stringify(rows.filter((r) => !r.paid))}`);
    await sleep(200);
  }
  const roundStates = new Map(rows.map((r) => [r.id, r.state]));
  const { rows: transfers } = await store.db.query<{ id: string; amount: string; kind: string; round_id: string | null }>(
    `SELECT id, amount, kind, round_id FROM transfers WHERE channel_id = $1`,
    [channel],
  );
  const byId = new Map(transfers.map((t) => [t.id, t]));
  let acked = 0;
  let unknownInLedger = 0;
  const staked = new Map<string, number>(); // `${round}|${viewer}` → points acked
  for (const s of w.stakes) {
    const a = s.answer;
    if (typeof a !== 'object') continue;
    const t = byId.get(`${channel}/${s.round}:s:${hashOf(s.viewer, s.key)}`);
    if (!a.ok && s.timeouts > 0) {
      // Sent again after a timeout and then refused (the round closed meanwhile): the first send's outcome is unknown.
      if (t) {
        unknownInLedger++;
        const k = `${s.round}|${s.viewer}`;
        staked.set(k, (staked.get(k) ?? 0) + s.points);
      }
      continue;
    }
    if (a.ok) {
      acked++;
      assert.ok(t, `acked stake ${s.viewer} ${s.round} ${s.key} is in the ledger`);
      assert.equal(Number(t.amount), s.points, `stake ${s.key}: the points acked`);
      assert.equal(a.cost, s.points);
      const k = `${s.round}|${s.viewer}`;
      staked.set(k, (staked.get(k) ?? 0) + s.points);
    } else {
      assert.equal(t, undefined, `refused stake ${s.key} (${a.code}) is not in the ledger`);
    }
  }
  // Every stake transfer in the ledger is one the workload saw acked (nothing committed behind a refusal or a lost answer).
  const stakeTransfers = transfers.filter((t) => t.kind === 'stake');
  assert.equal(
    stakeTransfers.length,
    acked + unknownInLedger,
    'stake transfers in the ledger = stakes acked (+ resent ones of unknown outcome)',
  );
  // A cancelled round gave each viewer back exactly what the acks say they staked.
  for (const [round, state] of roundStates) {
    if (state !== 'cancelled') continue;
    const { rows: refunds } = await store.db.query<{ owner: string; amount: string }>(
      `SELECT a.owner, t.amount FROM transfers t JOIN accounts a ON a.id = t.to_account
       WHERE t.channel_id = $1 AND t.round_id = $2 AND t.kind = 'refund'`,
      [channel, `${channel}/${round}`],
    );
    const got = new Map(refunds.map((r) => [r.owner, Number(r.amount)]));
    for (const [k, points] of staked) {
      const [r, viewer] = k.split('|') as [string, string];
      if (r === round) assert.equal(got.get(viewer), points, `round ${round} cancelled: ${viewer} refunded the ${points} acked`);
    }
  }
  assert.deepEqual((await verifyLedger(store.db)).failures, [], 'ledger verify');
  // Event ids: strictly increasing as the game received them (so none reused), all leased from the sequencer.
  const ids = w.eventIds;
  assert.ok(ids.length > 0, 'the game received batches');
  for (let i = 1; i < ids.length; i++) assert.ok(ids[i]! > ids[i - 1]!, `event ids rise: ${ids[i - 1]} then ${ids[i]} (#${i})`);
  const hw = await store.sequencer.highWater();
  assert.ok(ids.at(-1)! <= hw, `event ids ≤ the high-water mark ${hw}`);
  const resent = w.stakes.filter((s) => s.timeouts > 0).length;
  return { acked, resent, unknownInLedger, refused, roundStates };
}
