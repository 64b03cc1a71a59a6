/**
 * The rollover scenario at smoke size, through the CLI exactly as
 * `npm run loadtest -- rollover` runs it: the product as its own process on
 * the machine's PostgreSQL (a fresh schema) and Redis, the Bot API stub, 30
 * chats × 3 players guessing at a rollover with a 20 s period. Asserts
 * correctness, not speed: no crash, every guess answered ok, no Telegram
 * 429, every chat's final board byte-identical to the render of its final
 * state. Then the same against `crowdplay cluster --gateways 2 --shards 2`
 * (NATS, Redis, Postgres; a telegram-sender process; updates and players
 * spread over both gateways). Also the utilisation allowance's arithmetic.
 * About 45 s + 60 s.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadtestCli } from './cli.ts';
import {
  BUCKET_RATES,
  actAckShare,
  allowedSends,
  avatarsAfterLastChange,
  boardPipelineOf,
  boardPipelineSummary,
  metricValue,
  msSummary,
  playerWords,
  idealStaleness,
  slotLagMs,
  parseContention,
  startContention,
  tailKind,
  tailKinds,
  type RolloverReport,
} from '@crowdplay/loadtest';

const CHATS = 30;
const PLAYERS = 3;
/**
 * The puzzle's period, s. 20: the product runs on one core (the generator has the other) beside the rest of `npm test`; there
 * boards took up to 8 s from a change to Telegram, and a board drawn just before a chat's last change leaves the next one
 * 3 s behind (20 per minute per group). With 12 s, 5–6 s of it guessing, a final board missed the rollover in about one run in
 * five (standalone in CI, the cluster here). The smoke checks that the final board is right, not how fast it came: the
 * full-size run measures that (docs/benchmarks.md).
 */
const PERIOD_S = 20;

describe('loadtest rollover - helpers', () => {
  it('allowedSends: with a group burst of 2 a quiet chat sends twice 1 s apart, then every T_group; never 21 in a minute', () => {
    const B2 = { botPerS: 30, groupPerMin: 20, groupBurst: 2, chatPerS: 1 };
    // One chat pending 10 s: sends at 0, 1,000, then T_group = ceil(60e6 / 19) µs from the first: 3,157.895, 6,315.79, 9,473.685 ms.
    assert.equal(allowedSends([[0, 10_000]], B2), 5);
    // A minute: 0, 1 s, then 18 more by 56,842.11 ms (the 19th, at 60,000.005 ms, is past it): 20, Telegram's limit.
    assert.equal(allowedSends([[0, 60_000]], B2), 20);
    assert.equal(allowedSends([[0, 120_000]], B2), 39, 'then 19 a minute');
    // Many chats: the bot's slots bind as before.
    assert.equal(
      allowedSends(
        Array.from({ length: 40 }, (): [number, number] => [0, 999]),
        B2,
      ),
      30,
    );
    // Two chats for 3 s: each its burst of two, 1 s apart.
    assert.equal(
      allowedSends(
        [
          [0, 2_999],
          [0, 2_999],
        ],
        B2,
      ),
      4,
    );
  });

  it('allowedSends: with a group burst of 1 the bucket spaces a group chat 3 s apart and the bot 1/30 s apart', () => {
    const R30 = { botPerS: 30, groupPerMin: 20, groupBurst: 1, chatPerS: 1 };
    assert.equal(BUCKET_RATES.groupBurst, 1, "the product's default");
    // One chat pending 10 s: sends at 0, 3,000, 6,000, 9,000 ms.
    assert.equal(allowedSends([[0, 10_000]], R30), 4);
    assert.equal(allowedSends([[0, 30_000]], R30), 11);
    // 40 chats pending for 999 ms: the bot's slots at 0, 33.3, …, 966.7 ms.
    assert.equal(
      allowedSends(
        Array.from({ length: 40 }, (): [number, number] => [0, 999]),
        R30,
      ),
      30,
    );
    // 200 chats for 3 s: 90 bot slots; 2 chats for 3 s: one send each.
    assert.equal(
      allowedSends(
        Array.from({ length: 200 }, (): [number, number] => [0, 2_999]),
        R30,
      ),
      90,
    );
    assert.equal(
      allowedSends(
        [
          [0, 2_999],
          [0, 2_999],
        ],
        R30,
      ),
      2,
    );
    // A chat pending later starts when it starts.
    assert.equal(allowedSends([[5_000, 5_000]], R30), 1);
    assert.equal(allowedSends([]), 0);
  });

  it('avatarsAfterLastChange: the last avatar of a chat’s players after its last guess, and nothing else', () => {
    const chats = [
      { lastChangeMs: 1_000, userIds: [1, 2] },
      { lastChangeMs: 5_000, userIds: [3] },
      { lastChangeMs: null, userIds: [4] },
      { lastChangeMs: 2_000, userIds: [5] },
    ];
    const downloads = [
      { userId: 2, atMs: 1_800 },
      { userId: 1, atMs: 900 },
      { userId: 3, atMs: 4_000 }, // before its chat's last guess
      { userId: 4, atMs: 9_000 }, // a chat that never changed
      { userId: 2, atMs: 1_500 }, // an earlier download of the same user
      { userId: 9, atMs: 9_000 }, // nobody's player
    ];
    // Chat 0: user 2's last download at 1,800, 800 ms after the guess; chat 1: before; chat 2: left out; chat 3: no download.
    assert.deepEqual(avatarsAfterLastChange(chats, downloads), [800]);
    assert.deepEqual(avatarsAfterLastChange([], downloads), []);
    assert.throws(() => avatarsAfterLastChange(chats, [{ userId: 1, atMs: Number.NaN }]), RangeError);
    assert.throws(() => avatarsAfterLastChange([{ lastChangeMs: Number.POSITIVE_INFINITY, userIds: [1] }], []), RangeError);
    assert.equal(chats[0]!.lastChangeMs, 1_000, 'the input is not changed');
  });

  it('idealStaleness: a chat that changes after its board waits out its interval; chats share the bot slots', () => {
    const R25 = { botPerS: 25, groupPerMin: 20, groupBurst: 1, chatPerS: 1 };
    // One change: sent at once.
    assert.deepEqual(idealStaleness([{ changesMs: [1_000] }], R25), [0]);
    // Changes at 0, 500 and 1,000 ms: the board of 0 goes at 0, the next may go 3,000 ms after it (20 a minute).
    assert.deepEqual(idealStaleness([{ changesMs: [1_000, 0, 500] }], R25), [2_000]);
    // A change after the interval went by is sent at once: boards at 0 and 4,000.
    assert.deepEqual(idealStaleness([{ changesMs: [0, 4_000] }], R25), [0]);
    // Two chats at one instant: the second takes the next bot slot, 40 ms later; a chat without changes is skipped.
    assert.deepEqual(idealStaleness([{ changesMs: [0] }, { changesMs: [] }, { changesMs: [0] }], R25), [0, 40]);
    // 1,000 chats changed at one instant: the last waits 999 bot slots.
    const many = idealStaleness(
      Array.from({ length: 1_000 }, () => ({ changesMs: [0] })),
      R25,
    );
    assert.equal(Math.max(...many), 39_960);
    // Quietest first: one bot slot a second; at 1,000 ms the second and third chats both wait, and the third's
    // change (300) is older than the second's (600), so it goes first though it comes later in the input.
    const R1 = { ...R25, botPerS: 1 };
    assert.deepEqual(idealStaleness([{ changesMs: [0] }, { changesMs: [600] }, { changesMs: [300] }], R1), [0, 1_400, 700]);
    assert.deepEqual(idealStaleness([]), []);
  });

  it('idealStaleness: with a lag a board shows the changes made up to lagMs before its send', () => {
    const R25 = { botPerS: 25, groupPerMin: 20, groupBurst: 1, chatPerS: 1 };
    // The change of 1,000 is seen at 1,200 and sent then; the next board goes at 4,200 and shows all three changes.
    assert.deepEqual(idealStaleness([{ changesMs: [1_000, 1_500, 2_000] }], R25, 200), [2_200]);
    // The board after the interval goes at 4,000 with no lag, at 4,200 with 200 ms.
    assert.deepEqual(idealStaleness([{ changesMs: [1_000, 3_900] }], R25, 0), [100]);
    assert.deepEqual(idealStaleness([{ changesMs: [1_000, 3_900] }], R25, 200), [300]);
  });

  it('slotLagMs: the final board measured from when the chat’s pacing first allowed it', () => {
    const R25 = { botPerS: 25, groupPerMin: 20, groupBurst: 1, chatPerS: 1 };
    // No board before: allowed at the change; the final board itself is not an earlier send.
    assert.equal(slotLagMs(1_000, 1_500, [1_500], R25), 500);
    // A board at 0, the change at 100: the next board is allowed at 3,000 (20 a minute), sent at 3,500.
    assert.equal(slotLagMs(100, 3_500, [3_500, 0], R25), 500);
    // A stale board at 3,000 (drawn before the change at 2,900): the final one is allowed at 6,000.
    assert.equal(slotLagMs(2_900, 6_200, [0, 3_000, 6_200], R25), 200);
    // With a burst of 2 a rested chat may go again 1 s after its board.
    assert.equal(slotLagMs(100, 1_300, [0, 1_300], { ...R25, groupBurst: 2 }), 300);
    // Sends are timed at the stub, after the bucket's grant: a lag may come out slightly below 0.
    assert.equal(slotLagMs(100, 2_990, [0], R25), -10);
  });

  it('slotLagMs: bad times and rates are refused', () => {
    assert.throws(() => slotLagMs(Number.NaN, 1_000, []), /a time must be a finite number, got NaN/);
    assert.throws(() => slotLagMs(0, 1_000, [Infinity]), /a time must be a finite number, got Infinity/);
    assert.throws(() => slotLagMs(2_000, 1_000, []), /cannot go before the last change/);
    assert.throws(() => slotLagMs(0, 1_000, [], { ...BUCKET_RATES, groupPerMin: 0 }), /groupPerMin must be a finite number > 0, got 0/);
  });

  it('idealStaleness: bad rates and times are refused', () => {
    assert.throws(
      () => idealStaleness([{ changesMs: [0] }], { ...BUCKET_RATES, botPerS: 0 }),
      /botPerS must be a finite number > 0, got 0/,
    );
    assert.throws(() => idealStaleness([{ changesMs: [0] }], { ...BUCKET_RATES, groupPerMin: -1 }), /groupPerMin/);
    assert.throws(() => idealStaleness([{ changesMs: [0, Number.NaN] }]), /not a finite number: null/);
    assert.throws(() => idealStaleness([{ changesMs: [0, '2' as unknown as number] }]), /not a finite number: "2"/);
    // A rate left out (plain JavaScript) or infinite is refused, not looped on.
    assert.throws(() => idealStaleness([{ changesMs: [1, 2] }], { botPerS: 30 } as unknown as typeof BUCKET_RATES), /groupPerMin/);
    assert.throws(() => idealStaleness([{ changesMs: [1, 2] }], { ...BUCKET_RATES, botPerS: Number.POSITIVE_INFINITY }), /botPerS/);
    assert.throws(() => idealStaleness([{ changesMs: [0] }], BUCKET_RATES, -1), /lagMs/);
  });

  it('parseContention: BUSY,IDLE in whole ms; anything else is refused', () => {
    assert.deepEqual(parseContention('4,8'), { busyMs: 4, idleMs: 8 });
    assert.deepEqual(parseContention(' 1000 , 0 '), { busyMs: 1000, idleMs: 0 });
    for (const bad of ['', '4', '4,', ',8', '0,8', '1001,8', '4,1001', '4,-1', '4.5,8', 'a,b', '4,8,1', '1e3,0'])
      assert.throws(
        () => parseContention(bad),
        (e: unknown) => e instanceof RangeError && /--contend must be BUSY,IDLE/.test(e.message),
        bad,
      );
  });

  it('startContention: a pinned process that runs until stopped', async () => {
    const load = startContention({ busyMs: 1, idleMs: 20 }, '0', 60_000);
    assert.ok(load.pid !== undefined && load.pid > 0);
    process.kill(load.pid!, 0); // running
    load.stop();
    load.stop(); // twice is safe
    const end = Date.now() + 5_000;
    let alive = true;
    while (alive && Date.now() < end) {
      try {
        process.kill(load.pid!, 0);
        await new Promise((r) => setTimeout(r, 20));
      } catch {
        alive = false;
      }
    }
    assert.equal(alive, false, 'stopped');
  });

  it('tailKind / tailKinds: the slowest chats by what their final board waited for', () => {
    assert.equal(tailKind({ lastChangeMs: 1_000, finalMs: 4_000, sendsMs: [] }), 'firstBoard');
    assert.equal(tailKind({ lastChangeMs: 1_000, finalMs: 4_000, sendsMs: [4_000, 5_000] }), 'firstBoard', 'sends from the final one on');
    assert.equal(tailKind({ lastChangeMs: 1_000, finalMs: 4_000, sendsMs: [900] }), 'afterBoard');
    assert.equal(tailKind({ lastChangeMs: 1_000, finalMs: 4_000, sendsMs: [900, 1_100] }), 'staleSend');
    const boards = [
      { lastChangeMs: 0, finalMs: 500, sendsMs: [] }, // 500 ms
      { lastChangeMs: 0, finalMs: 3_600, sendsMs: [200] }, // stale, 3,600 ms
      { lastChangeMs: 100, finalMs: 3_300, sendsMs: [50] }, // after a board, 3,200 ms
      { lastChangeMs: 0, finalMs: 3_200, sendsMs: [] }, // first board, 3,200 ms: after the chat above (input order)
    ];
    assert.deepEqual(tailKinds(boards, 0.5), { share: 0.5, chats: 2, staleSend: 1, firstBoard: 0, afterBoard: 1 });
    assert.deepEqual(tailKinds(boards, 0.75), { share: 0.75, chats: 3, staleSend: 1, firstBoard: 1, afterBoard: 1 });
    assert.deepEqual(tailKinds(boards), { share: 0.05, chats: 1, staleSend: 1, firstBoard: 0, afterBoard: 0 });
    assert.deepEqual(tailKinds([]), { share: 0.05, chats: 0, staleSend: 0, firstBoard: 0, afterBoard: 0 });
    for (const share of [0, -0.1, 1.5, Number.NaN]) assert.throws(() => tailKinds(boards, share), /share must be in \(0, 1\]/);
    assert.throws(() => tailKind({ lastChangeMs: 1_000, finalMs: 900, sendsMs: [] }), /cannot go before the last change/);
    assert.throws(() => tailKind({ lastChangeMs: 0, finalMs: 900, sendsMs: [Number.NaN] }), /a time must be a finite number, got NaN/);
  });

  it('msSummary: nearest rank; null on no samples', () => {
    assert.deepEqual(msSummary([5, 1, 4, 2, 3]), { count: 5, p50: 3, p95: 5, p99: 5, max: 5 });
    assert.deepEqual(msSummary([]), { count: 0, p50: null, p95: null, p99: null, max: null });
  });

  it('playerWords: 2–6 guesses, the answer last and only last', () => {
    let r = 0;
    // solveAt = 2 + ⌊0.5 × 5⌋ = 4; then 'crane' (0) is the answer and skipped, 'slate', 'pious', 'slate'.
    const seq = [0.5, 0, 0.5, 0.9];
    const words = playerWords('crane', ['crane', 'slate', 'pious'], () => seq[r++ % seq.length]!);
    assert.deepEqual(words, ['slate', 'pious', 'slate', 'crane']);
  });

  it('metricValue: reads a gauge, with a label filter and a unit suffix', () => {
    const text = [
      '# HELP crowdplay_event_loop_lag_ms x',
      'crowdplay_event_loop_lag_ms{quantile="p50"} 10.5',
      'crowdplay_event_loop_lag_ms{quantile="max"} 42.25',
      'crowdplay_board_interval_ms 3000',
    ].join('\n');
    assert.equal(metricValue(text, 'crowdplay_event_loop_lag_ms', 'quantile="max"'), 42.25);
    assert.equal(metricValue(text, 'crowdplay_board_interval_ms'), 3000);
    assert.equal(metricValue(text, 'crowdplay_nothing'), null);
    const hist = [
      'crowdplay_act_ack_ms_bucket{le="100"} 97',
      'crowdplay_act_ack_ms_bucket{le="1000"} 99',
      'crowdplay_act_ack_ms_count 99',
    ].join('\n');
    assert.equal(metricValue(hist, 'crowdplay_act_ack_ms_bucket', 'le="100"'), 97, 'le="100", not le="1000"');
    assert.equal(metricValue(hist, 'crowdplay_act_ack_ms_count'), 99);
  });

  it('boardPipelineOf / boardPipelineSummary: the board stages from /metrics, means per stage; none without renders', () => {
    const scope = 'otel_scope_name="crowdplay.standalone"';
    const text = [
      `crowdplay_board_render_ms_count{${scope}} 4`,
      `crowdplay_board_render_ms_sum{${scope}} 60`,
      `crowdplay_board_queued_ms_count{${scope}} 4`,
      `crowdplay_board_queued_ms_sum{${scope}} 400`,
      `crowdplay_render_queue_job_ms_count{${scope}} 4`,
      `crowdplay_render_queue_job_ms_sum{${scope}} 3000`,
      `crowdplay_render_queue_superseded_total{${scope}} 2`,
      `crowdplay_sendq_job_ms_count{lane="tx",status="sent",${scope}} 9`,
      `crowdplay_sendq_job_ms_sum{lane="tx",status="sent",${scope}} 9000`,
      `crowdplay_sendq_job_ms_count{lane="board",status="sent",${scope}} 3`,
      `crowdplay_sendq_job_ms_sum{lane="board",status="sent",${scope}} 1000`,
      `crowdplay_sendq_job_ms_count{lane="board",status="superseded",${scope}} 1`,
    ].join('\n');
    const c = boardPipelineOf(text);
    assert.ok(c);
    assert.deepEqual(c.sendLane, { sum: 1000, count: 3 }, 'boards sent only, not replies');
    assert.deepEqual(boardPipelineSummary(c), {
      renders: 4,
      renderJobMs: 750,
      renderWaitMs: 100,
      renderMs: 15,
      sendLaneMs: 333.3,
      supersededBeforeRender: 2,
      supersededInLane: 1,
    });
    assert.equal(boardPipelineOf('crowdplay_board_interval_ms 3000'), null, 'no render metric: boards off');
    const bare = boardPipelineOf(`crowdplay_board_render_ms_count 0\ncrowdplay_board_render_ms_sum 0`);
    assert.ok(bare);
    assert.deepEqual(boardPipelineSummary(bare), {
      renders: 0,
      renderJobMs: null,
      renderWaitMs: null,
      renderMs: null,
      sendLaneMs: null,
      supersededBeforeRender: 0,
      supersededInLane: 0,
    });
  });

  it('actAckShare: the acks between two scrapes and the share within the bound; none scraped: nulls; counts going back: an error', () => {
    assert.deepEqual(actAckShare({ within: 10, count: 10 }, { within: 106, count: 110 }), { withinMs: 100, count: 100, shareWithin: 0.96 });
    assert.deepEqual(actAckShare({ within: 5, count: 5 }, { within: 5, count: 5 }), { withinMs: 100, count: 0, shareWithin: 1 });
    assert.deepEqual(actAckShare(null, { within: 5, count: 5 }), { withinMs: 100, count: null, shareWithin: null });
    assert.throws(() => actAckShare({ within: 5, count: 9 }, { within: 4, count: 9 }), RangeError);
    assert.throws(() => actAckShare({ within: 5, count: 9 }, { within: 5, count: 8 }), RangeError);
  });
});

/** Runs the smoke through the CLI with `extra` flags and checks its report; returns it. */
async function smoke(extra: string[], hardMs: number): Promise<RolloverReport> {
  const dir = mkdtempSync(join(tmpdir(), 'rollover-smoke-'));
  try {
    const file = join(dir, 'report.json');
    const res = await loadtestCli(
      ['rollover', '--chats', String(CHATS), '--players', String(PLAYERS), '--period-s', String(PERIOD_S), '--json', file, ...extra],
      hardMs,
    );
    assert.equal(res.code, 0, `exit ${res.code}\n${res.stdout}\n${res.stderr.slice(-3000)}`);
    const r = JSON.parse(readFileSync(file, 'utf8')) as RolloverReport;
    assert.equal(r.scenario, 'rollover');
    assert.equal(r.productExit.duringRun, false, 'the product did not exit during the run');
    assert.equal(r.players.connected, CHATS * PLAYERS);
    assert.equal(r.players.failed, 0);
    assert.equal(r.requests.failed, 0, JSON.stringify(r.requests.failedByCode));
    assert.equal(r.requests.refused, 0, JSON.stringify(r.requests.refusedByCode));
    assert.ok(r.requests.sent >= 2 * CHATS * PLAYERS, `each player guesses at least twice: ${r.requests.sent}`);
    assert.equal(r.requests.served, r.requests.sent);
    assert.equal(r.guessesSkipped, 0);
    assert.equal(r.marksMismatches, 0);
    assert.equal(r.telegram.rejected429, 0);
    assert.equal(r.boards.chats, CHATS);
    assert.equal(r.boards.unverifiable, 0);
    assert.equal(r.boards.delivered, CHATS);
    assert.equal(r.boards.finalCorrect, CHATS, r.boards.samples.join('\n'));
    assert.equal(r.boards.duplicates, 0);
    assert.equal(r.boards.stalenessMs.count, CHATS);
    assert.equal(r.boards.idealStalenessMs.count, CHATS);
    assert.equal(r.boards.stalenessFloorMs, Math.ceil(r.boards.idealStalenessMs.p95!));
    assert.ok(r.boards.stalenessFloorMs > 0, `floor ${r.boards.stalenessFloorMs} ms`);
    const lag = r.boards.avatarAfterLastChangeMs;
    assert.ok(lag.count >= 0 && lag.count <= CHATS && (lag.count === 0 || lag.p50! > 0), JSON.stringify(lag));
    assert.ok(r.peakRssMb !== null && r.peakRssMb > 0);
    assert.ok(r.maxLoopStallMs !== null);
    assert.ok(Number.isInteger(r.boards.staleSends) && r.boards.staleSends >= 0 && r.boards.staleSends <= CHATS, `${r.boards.staleSends}`);
    // One lag per chat whose final board was timed, and the final board never goes long before its chat may go.
    assert.equal(r.boards.slotLagMs.count, r.boards.stalenessMs.count);
    assert.ok(r.boards.slotLagMs.p50! > -1_000 && r.boards.slotLagMs.max! >= r.boards.slotLagMs.p50!, JSON.stringify(r.boards.slotLagMs));
    // The slowest 5 % of the timed chats, each of one kind; a stale board in the tail is a stale board counted.
    const tail = r.boards.tail!;
    assert.equal(tail.chats, Math.ceil(0.05 * r.boards.stalenessMs.count), JSON.stringify(tail));
    assert.equal(tail.staleSend + tail.firstBoard + tail.afterBoard, tail.chats, JSON.stringify(tail));
    assert.ok(tail.staleSend <= r.boards.staleSends, JSON.stringify(tail));
    if (r.product.mode === 'standalone') {
      // The product renders its own boards: every board sent was rendered, and each stage took some time.
      const p = r.boards.pipeline;
      assert.ok(p !== null, 'the board pipeline was scraped');
      assert.ok(p.renders >= r.boards.delivered, `${p.renders} renders for ${r.boards.delivered} chats with a board`);
      for (const ms of [p.renderJobMs, p.renderMs, p.sendLaneMs]) assert.ok(ms !== null && ms > 0, JSON.stringify(p));
      assert.ok(p.renderJobMs! >= p.renderMs!, JSON.stringify(p));
    }
    if (r.product.mode === 'standalone') {
      // Every served guess was acked by the shard after the rollover (the /metrics scrape sees them all).
      assert.ok(
        r.actAck.count !== null && r.actAck.count >= r.requests.served,
        `act acks ${r.actAck.count} of ${r.requests.served} guesses`,
      );
      assert.ok(r.actAck.shareWithin !== null && r.actAck.shareWithin > 0 && r.actAck.shareWithin <= 1);
    } else assert.equal(r.actAck.count, null, "a cluster's shards are not scraped");
    assert.ok(r.telegram.utilisation !== null && r.telegram.utilisation > 0);
    assert.equal(r.errorLogLines, 0, r.errorLogSamples.join('\n'));
    assert.equal(r.complete, true);
    return r;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('loadtest rollover - smoke against crowdplay start on PostgreSQL and Redis', () => {
  it(`${CHATS} chats × ${PLAYERS} players: every guess served, no 429, every final board correct`, { timeout: 90_000 }, async () => {
    const side = mkdtempSync(join(tmpdir(), 'rollover-side-'));
    try {
      // The trace goes to a folder the run makes; the product log to a path under a file, which cannot be written.
      const trace = join(side, 'new-folder', 'trace.json');
      writeFileSync(join(side, 'a-file'), '');
      const prof = join(side, 'prof');
      const r = await smoke(
        ['--board-trace', trace, '--product-log', join(side, 'a-file', 'product.log'), '--product-cpu-prof', prof],
        90_000,
      );
      assert.deepEqual(r.product, { mode: 'standalone', gateways: 1, shards: 1 });
      const profiles = readdirSync(prof).filter((f) => f.endsWith('.cpuprofile'));
      // One per thread of the product's process (the main thread's first, then the render threads').
      assert.ok(profiles.length >= 1, `CPU profiles of the product: ${readdirSync(prof).join(', ')}`);
      assert.equal(new Set(profiles.map((f) => f.split('.')[3])).size, 1, `all of one process: ${profiles.join(', ')}`);
      for (const f of profiles) assert.ok((JSON.parse(readFileSync(join(prof, f), 'utf8')) as { samples: number[] }).samples.length > 0, f);
      assert.equal(r.rssCluster, null);
      const t = JSON.parse(readFileSync(trace, 'utf8')) as Array<{
        chat: number;
        changesMs: number[];
        finalAtMs: number | null;
        sends: Array<{ atMs: number; method: string; outcome: string }>;
      }>;
      assert.deepEqual(
        t.map((c) => c.chat),
        Array.from({ length: CHATS }, (_, i) => i),
      );
      assert.equal(
        t.reduce((n, c) => n + c.changesMs.length, 0),
        r.requests.served,
        'every accepted guess is a change',
      );
      for (const c of t) {
        assert.ok(c.finalAtMs !== null, `chat ${c.chat} has its final board`);
        assert.ok(c.sends.some((x) => x.method === 'sendPhoto' && x.outcome === 'ok' && x.atMs <= c.finalAtMs!));
      }
      assert.ok(
        r.warnings.some((w) => w.startsWith('the product output could not be written')),
        r.warnings.join('\n'),
      );
    } finally {
      rmSync(side, { recursive: true, force: true });
    }
  });
});

describe('loadtest rollover - bad file flags', () => {
  it('an empty --json, --product-log, --board-trace or --product-cpu-prof, a profile with --cluster, or a bad --contend is refused before anything starts (exit 2)', async () => {
    for (const flag of ['--json', '--product-log', '--board-trace']) {
      const res = await loadtestCli(['rollover', '--chats', '1', '--players', '1', flag, ''], 30_000);
      assert.equal(res.code, 2, `${flag} '': exit ${res.code}\n${res.stderr.slice(-500)}`);
      assert.match(res.stderr, new RegExp(`${flag} must name a file`));
      assert.doesNotMatch(res.stderr, /starting the product/);
    }
    for (const [args, message] of [
      [['--product-cpu-prof', ' '], /--product-cpu-prof must name a directory/],
      [['--product-cpu-prof', 'prof', '--cluster'], /--product-cpu-prof profiles the standalone product: not with --cluster/],
      [['--contend', '4'], /--contend must be BUSY,IDLE/],
      [['--contend', '0,8'], /--contend must be BUSY,IDLE/],
      [['--contend', '4,8', '--no-pin'], /--contend runs on the product’s CPU: not with --no-pin/],
    ] as const) {
      const res = await loadtestCli(['rollover', '--chats', '1', '--players', '1', ...args], 30_000);
      assert.equal(res.code, 2, `${args.join(' ')}: exit ${res.code}\n${res.stderr.slice(-500)}`);
      assert.match(res.stderr, message);
      assert.doesNotMatch(res.stderr, /starting the product/);
    }
  });
});

describe('loadtest rollover - smoke against crowdplay cluster --gateways 2 --shards 2 (NATS, Redis, PostgreSQL)', () => {
  it(`${CHATS} chats × ${PLAYERS} players over two gateways: the same checks as standalone`, { timeout: 150_000 }, async () => {
    const r = await smoke(['--cluster', '--gateways', '2', '--shards', '2'], 150_000);
    assert.deepEqual(r.product, { mode: 'cluster', gateways: 2, shards: 2 });
    assert.ok(r.rssCluster, 'per-process RSS is reported');
    for (const p of ['sequencer', 'router', 'shard-1', 'shard-2', 'tg-sender', 'gw-1', 'gw-2'])
      assert.ok((r.rssCluster.byProcess[p] ?? 0) > 0, `RSS of ${p}: ${JSON.stringify(r.rssCluster.byProcess)}`);
    assert.ok(r.rssCluster.peakSumMb !== null && r.peakRssMb !== null && r.rssCluster.peakSumMb > r.peakRssMb);
  });

  it('bad cluster flags are refused before anything starts (exit 2)', async () => {
    for (const args of [
      ['--gateways', '2'],
      ['--cluster', '--shards', '0'],
      ['--cluster', '--gateways', '33'],
    ]) {
      const res = await loadtestCli(['rollover', '--chats', '1', '--players', '1', ...args], 30_000);
      assert.equal(res.code, 2, `${args.join(' ')}: exit ${res.code}\n${res.stderr.slice(-500)}`);
      assert.doesNotMatch(res.stderr, /starting the product/);
    }
  });
});
