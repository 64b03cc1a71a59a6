/**
 * The rollover scenario's report: the JSON written by `--json` and the
 * printed table. Every field is defined in loadtest/README.md ("rollover").
 */
import type { TailSummary } from './tail.ts';
import type { MachineInfo } from '../crowd/report.ts';
import type { LatencySummary } from '../hist.ts';
import type { BoardPipelineCounts, SumCount } from './product.ts';

/** Percentiles of a set of ms samples (nearest rank), null when there are none. */
export interface MsSummary {
  count: number;
  p50: number | null;
  p95: number | null;
  p99: number | null;
  max: number | null;
}

/** One target figure: the measured value, the limit, and whether it is met. */
export interface RolloverTarget {
  value: number | null;
  limit: string;
  ok: boolean;
}

export interface RolloverReport {
  scenario: 'rollover';
  command: string;
  startedAt: string;
  machine: MachineInfo;
  config: {
    chats: number;
    players: number;
    periodMs: number;
    boards: boolean;
    /** How `--no-boards` was realised (null with boards on). */
    noBoardsMode: string | null;
    /** Players' profile photos on the stub: `photo` or `none`. */
    avatars: 'photo' | 'none';
    connectConcurrency: number;
    thinkMs: [number, number];
    playersPerAddress: number;
    sourceAddresses: string[];
    /** CPU list the product was pinned to (`taskset -c`), null when unpinned. */
    productCpus: string | null;
    /** The competing load on the product's CPU (`--contend BUSY,IDLE`, ms), null without one. */
    contend?: { busyMs: number; idleMs: number } | null;
    /** CPU list this process (generator + stub) was pinned to, null when unpinned. */
    generatorCpus: string | null;
    databaseSchema: string;
    redis: string;
    puzzle: number | null;
    rolloverAt: string | null;
  };
  /** Guesses: `served` = acks ok, `refused` = acks with a code, `failed` = no ack (socket error, close, timeout). */
  requests: {
    sent: number;
    served: number;
    refused: number;
    refusedByCode: Record<string, number>;
    failed: number;
    failedByCode: Record<string, number>;
  };
  /** Guesses the generator did not send because the puzzle was about to roll over again. */
  guessesSkipped: number;
  /** Acks whose marks differ from the generator's own scoring of the guess. */
  marksMismatches: number;
  players: { requested: number; connected: number; failed: number; failedByCode: Record<string, number>; dropped: number };
  guessMs: LatencySummary;
  /**
   * The product's own part of a guess, from its `crowdplay_act_ack_ms` (gateway receipt of the intent → the
   * shard's act ack; the socket reads and writes and the generator's own event loop are outside it): acks from
   * the rollover on, and the share of them within `withinMs`. Null figures when not scraped (a cluster's shards).
   */
  actAck: { withinMs: number; count: number | null; shareWithin: number | null };
  connectMs: LatencySummary;
  /** First socket opened → last guess answered, s. */
  guessingS: number | null;
  /** Largest peak RSS of one product process (standalone: the process), MB. */
  peakRssMb: number | null;
  /** Largest `crowdplay_process_memory_bytes` over the scraped gateways by kind (heap_used, heap_total, external, array_buffers) `crowdplay_board_thread_heap_bytes` (render_thread_heaps) and `crowdplay_ws_buffered_bytes` (ws_buffered: bytes the sockets hold for slow readers), MB: where the RSS is. */
  memoryPeakMb: Record<string, number>;
  /** Cluster runs: which process had it; the largest sum over the processes at one sample; each process's peak, MB. */
  rssCluster: { peakProcess: string | null; peakSumMb: number | null; byProcess: Record<string, number> } | null;
  /** How the product ran: `crowdplay start`, or `crowdplay cluster` with its gateways and shards. */
  product: { mode: 'standalone' | 'cluster'; gateways: number; shards: number };
  /** Largest event-loop stall from the rollover on (samples of crowdplay_event_loop_lag_ms{quantile="max"}), ms. */
  maxLoopStallMs: number | null;
  /** The same before the rollover (start-up, /start replies), ms. */
  setupLoopStallMs: number | null;
  /** The product's RSS one second before the rollover, MB. */
  rssAtRolloverMb: number | null;
  telegram: {
    calls: number;
    /** Calls the ceilings count (every method but the stub's UNLIMITED_METHODS), answered ok. */
    sends: number;
    rejected429: number;
    /** By the stub's ceiling that answered 429 (bot, group, chat; injected ones have none). */
    rejected429ByScope: Record<string, number>;
    /** The first 10 calls answered 429 (whole run), time relative to the rollover. */
    /** The first 429 answers; stubLoopLagMs: the largest lag of the stub's event loop in the second before (it timestamps calls when it reads them). */
    rejected429Calls: Array<{
      method: string;
      chatId: number | null;
      scope: string | null;
      atMsAfterRollover: number;
      stubLoopLagMs: number;
    }>;
    /** Largest event-loop lag of the generator's process, which runs the stub, ms. */
    stubLoopMaxLagMs: number;
    /** Counted sends answered ok per second after the rollover (index 0 = the first second). */
    sendsPerSecond: number[];
    errors: Record<string, number>;
    byMethod: Record<string, number>;
    /** sends in the busy window ÷ what the bucket allowed in it (README); null with boards off. */
    utilisation: number | null;
    busyWindowMs: number | null;
    allowedInWindow: number | null;
  };
  boards: {
    /** Chats with at least one accepted guess (each must end with a board). */
    chats: number;
    /** Of those, chats with at least one board photo applied after the rollover. */
    delivered: number;
    /** Of those, chats whose last board before the deadline is byte-identical to the render of their final state. */
    finalCorrect: number;
    /** Chats whose final state is unknown (a guess without an ack): not checked. */
    unverifiable: number;
    /** Chats with more than one board photo message at the end (a duplicate board). */
    duplicates: number;
    stalenessMs: MsSummary;
    /**
     * The staleness floor, ms: the p95 of {@link idealStalenessMs}, rounded up; 0 with no chat. What the bucket
     * needs to send the boards that were dirty: `stalenessMs.p95` is held against it.
     */
    stalenessFloorMs: number;
    /** Staleness an ideal sender under the product's bucket leaves on the same changes (bucket-model.ts `idealStaleness`). */
    idealStalenessMs: MsSummary;
    /**
     * Chats whose last avatar download came after their last accepted guess (`count`), and how long after, ms
     * (avatar-lag.ts): the part of their staleness the floor, which replays guesses only, does not see.
     */
    avatarAfterLastChangeMs: MsSummary;
    /** The product's crowdplay_board_interval_ms: the last value seen and the largest. */
    intervalMs: { last: number | null; max: number | null };
    /**
     * Chats that got a board after their last change that was not their final board: one drawn before that change,
     * so the final board waited out the chat's interval after it.
     */
    staleSends: number;
    /**
     * The slowest 5 % of the chats with a right final board, by what their final board waited for (rollover/tail.ts):
     * a stale board before it, no board before it, or the spacing after a board that went before the last change.
     * Absent in reports from before it was counted.
     */
    tail?: TailSummary;
    /**
     * Per chat, the time from when the bucket first allowed its final board (after its last change and its earlier
     * board sends) to that board's send (bucket-model.ts `slotLagMs`): the product's lag behind its pacing, which the
     * staleness adds to the floor.
     */
    slotLagMs: MsSummary;
    /**
     * Where a board's time went in the product, means over the run in ms (product.ts `boardPipelineOf`, from its
     * /metrics at the end: summed over the gateways in a cluster, whose renders may run elsewhere); null when no
     * scrape had them.
     */
    pipeline: BoardPipeline | null;
    /** Up to 10 chats whose final board was wrong or missing. */
    samples: string[];
  };
  errorLogLines: number;
  /** The rollover's target figures for this run, each `{value, limit, ok}` (README); null with boards off. */
  targets: Record<string, RolloverTarget> | null;
  /** Up to 10 of those lines (truncated). */
  errorLogSamples: string[];
  productExit: { code: number | null; signal: string | null; duringRun: boolean };
  elapsedS: number;
  /** No crash, every guess answered, every chat's final board correct (with boards on). */
  complete: boolean;
  warnings: string[];
}

/** {@link RolloverReport} `boards.pipeline`. */
export interface BoardPipeline {
  /** Boards rendered. */
  renders: number;
  /** Hand-on → PNG on the send queue (render queue, render thread, render), ms. */
  renderJobMs: number | null;
  /** Of which waiting for a render thread, ms. */
  renderWaitMs: number | null;
  /** Of which drawing and encoding, ms. */
  renderMs: number | null;
  /** Send queue → Telegram's answer, boards sent, ms. */
  sendLaneMs: number | null;
  /** Render jobs replaced by a newer one before they started; boards replaced while waiting in the board lane. */
  supersededBeforeRender: number;
  supersededInLane: number;
}

/** {@link BoardPipeline} of a sampler's cumulative counts (means rounded to 0.1 ms; null for an empty histogram). */
export function boardPipelineSummary(c: BoardPipelineCounts): BoardPipeline {
  const mean = (x: SumCount): number | null => (x.count > 0 ? Math.round((x.sum / x.count) * 10) / 10 : null);
  return {
    renders: c.render.count,
    renderJobMs: mean(c.renderJob),
    renderWaitMs: mean(c.renderWait),
    renderMs: mean(c.render),
    sendLaneMs: mean(c.sendLane),
    supersededBeforeRender: c.supersededBeforeRender.count,
    supersededInLane: c.supersededInLane.count,
  };
}

const fmt = (n: number | null | undefined, d = 0): string =>
  n === null || n === undefined ? '–' : n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: 0 });
const codes = (m: Record<string, number>): string => {
  const e = Object.entries(m);
  return e.length === 0 ? '' : ` (${e.map(([k, v]) => `${k} ${fmt(v)}`).join(', ')})`;
};
const lat = (l: LatencySummary | MsSummary): string =>
  l.count === 0
    ? 'no samples'
    : `p50 ${fmt(l.p50, 1)}  p95 ${fmt(l.p95, 1)}  p99 ${fmt(l.p99, 1)}  max ${fmt(l.max, 1)}  (n ${fmt(l.count)})`;

/** The report as an aligned two-column table (for stdout). */
export function formatRolloverReport(r: RolloverReport): string {
  const rows: Array<[string, string]> = [
    ['command', r.command],
    [
      'machine',
      `${r.machine.cpuCount}× ${r.machine.cpuModel}, ${(r.machine.memoryBytes / 2 ** 30).toFixed(1)} GiB, node ${r.machine.nodeVersion}`,
    ],
    [
      'config',
      `${fmt(r.config.chats)} chats × ${fmt(r.config.players)} players, period ${fmt(r.config.periodMs / 1000)} s, boards ${r.config.boards ? 'on' : `off (${r.config.noBoardsMode})`}, product cpus ${r.config.productCpus ?? 'unpinned'}${r.config.contend ? ` beside a load busy ${r.config.contend.busyMs} ms, idle ${r.config.contend.idleMs} ms` : ''}`,
    ],
    ['puzzle', `${r.config.puzzle ?? '–'} (rollover ${r.config.rolloverAt ?? '–'})`],
    [
      'players connected',
      `${fmt(r.players.connected)} / ${fmt(r.players.requested)}; failed ${fmt(r.players.failed)}${codes(r.players.failedByCode)}; dropped ${fmt(r.players.dropped)}`,
    ],
    ['guesses sent', `${fmt(r.requests.sent)} (skipped near the next rollover ${fmt(r.guessesSkipped)})`],
    [
      'served / refused / failed',
      `${fmt(r.requests.served)} / ${fmt(r.requests.refused)}${codes(r.requests.refusedByCode)} / ${fmt(r.requests.failed)}${codes(r.requests.failedByCode)}`,
    ],
    ['marks mismatches', fmt(r.marksMismatches)],
    ['guess ms', lat(r.guessMs)],
    [
      `act acks ≤ ${r.actAck.withinMs} ms (product)`,
      r.actAck.shareWithin === null ? '–' : `${fmt(r.actAck.shareWithin * 100, 2)} % of ${fmt(r.actAck.count)}`,
    ],
    ['connect ms', lat(r.connectMs)],
    ['guessing', `${fmt(r.guessingS, 1)} s`],
    [
      'product',
      r.product.mode === 'cluster' ? `crowdplay cluster --gateways ${r.product.gateways} --shards ${r.product.shards}` : 'crowdplay start',
    ],
    [
      r.rssCluster ? 'peak RSS (largest process)' : 'peak RSS (product)',
      `${fmt(r.peakRssMb, 1)} MB${r.rssCluster ? ` (${r.rssCluster.peakProcess ?? '–'}; all processes ${fmt(r.rssCluster.peakSumMb, 1)} MB)` : ''} (at the rollover ${fmt(r.rssAtRolloverMb, 1)} MB)`,
    ],
    [
      'memory peaks (gateway)',
      Object.keys(r.memoryPeakMb).length === 0
        ? '–'
        : Object.entries(r.memoryPeakMb)
            .map(([k, v]) => `${k} ${v} MB`)
            .join(', '),
    ],
    ['max loop stall (product)', `${fmt(r.maxLoopStallMs, 1)} ms (before the rollover ${fmt(r.setupLoopStallMs, 1)} ms)`],
    [
      'telegram calls / sends / 429',
      `${fmt(r.telegram.calls)} / ${fmt(r.telegram.sends)} / ${fmt(r.telegram.rejected429)}${codes(r.telegram.errors)}`,
    ],
    [
      'stub loop lag (max; before each 429)',
      `${fmt(r.telegram.stubLoopMaxLagMs, 0)} ms; ${r.telegram.rejected429Calls.map((c) => `${fmt(c.stubLoopLagMs, 0)} ms`).join(', ') || '–'}`,
    ],
    [
      'telegram utilisation',
      r.telegram.utilisation === null
        ? '–'
        : `${fmt(r.telegram.utilisation, 3)} (${fmt(r.telegram.allowedInWindow, 1)} allowed in ${fmt((r.telegram.busyWindowMs ?? 0) / 1000, 1)} s)`,
    ],
    [
      'boards chats / delivered / final ok',
      `${fmt(r.boards.chats)} / ${fmt(r.boards.delivered)} / ${fmt(r.boards.finalCorrect)}; unverifiable ${fmt(r.boards.unverifiable)}; duplicates ${fmt(r.boards.duplicates)}`,
    ],
    ['board staleness ms', lat(r.boards.stalenessMs)],
    ['board staleness floor', `${fmt(r.boards.stalenessFloorMs)} ms (an ideal sender's p95; ${lat(r.boards.idealStalenessMs)})`],
    [
      'last avatar after last guess',
      `${fmt(r.boards.avatarAfterLastChangeMs.count)} of ${fmt(r.boards.chats)} chats (${lat(r.boards.avatarAfterLastChangeMs)})`,
    ],
    ['board interval ms', `last ${fmt(r.boards.intervalMs.last)}, max ${fmt(r.boards.intervalMs.max)}`],
    ['stale boards sent', `${fmt(r.boards.staleSends)} chats (a board drawn before their last change went after it)`],
    [
      'slowest chats, by kind',
      r.boards.tail
        ? `${fmt(r.boards.tail.chats)} (the slowest ${fmt(r.boards.tail.share * 100)} %): ${fmt(r.boards.tail.staleSend)} after a stale board, ` +
          `${fmt(r.boards.tail.firstBoard)} with no board before, ${fmt(r.boards.tail.afterBoard)} after a board that went before their last change`
        : '–',
    ],
    ['final board after its slot', `${lat(r.boards.slotLagMs)} (the lag behind the chat's pacing)`],
    [
      'board pipeline ms (means)',
      r.boards.pipeline === null
        ? '–'
        : `render job ${fmt(r.boards.pipeline.renderJobMs, 1)} (thread wait ${fmt(r.boards.pipeline.renderWaitMs, 1)}, render ${fmt(r.boards.pipeline.renderMs, 1)}), send lane ${fmt(r.boards.pipeline.sendLaneMs, 1)}; ${fmt(r.boards.pipeline.renders)} renders, superseded ${fmt(r.boards.pipeline.supersededBeforeRender)} before render and ${fmt(r.boards.pipeline.supersededInLane)} in the lane`,
    ],
    ['error log lines', fmt(r.errorLogLines)],
    [
      'product exit',
      r.productExit.duringRun ? `DURING THE RUN: code ${r.productExit.code} signal ${r.productExit.signal}` : 'after the run (stopped)',
    ],
    ['elapsed', `${fmt(r.elapsedS, 1)} s`],
    ['complete', String(r.complete)],
  ];
  const w = Math.max(...rows.map(([k]) => k.length));
  const lines = rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`);
  if (r.targets)
    for (const [k, t] of Object.entries(r.targets)) lines.push(`target ${k}: ${fmt(t.value, 3)} (${t.limit}) ${t.ok ? 'ok' : 'MISSED'}`);
  for (const s of r.boards.samples) lines.push(`  board: ${s}`);
  for (const s of r.errorLogSamples) lines.push(`  error log: ${s}`);
  for (const x of r.warnings) lines.push(`WARNING: ${x}`);
  return lines.join('\n');
}
