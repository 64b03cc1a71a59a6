/**
 * The multigame scenario's report: the JSON written by `--json` and the printed table. Every field is defined in
 * loadtest/README.md ("multigame").
 */
import type { MachineInfo } from '../crowd/report.ts';
import type { GameFigures } from './game.ts';

export interface MultigameReport {
  scenario: 'multigame';
  command: string;
  machine: MachineInfo;
  chats: number;
  /** The steady window, s. */
  durationS: number;
  roundEvery: number;
  /** The game process (one connection, every chat), over the window. */
  game: GameFigures & {
    /** CPU of the game process as a share of one core, %. */
    cpuPct: number;
    /** CPU ms per chat per second of the window. */
    cpuMsPerChatPerS: number;
    /** (RSS at the end − RSS after the welcome) ÷ chats, KiB (noisy below a few hundred chats: the allocator's pages). */
    rssKbPerChat: number;
    /** (heap after a GC at the end − heap after a GC at the welcome) ÷ chats, KiB. */
    heapKbPerChat: number;
    batchesPerS: number;
  };
  viewers: { connected: number; acksPerS: number; refused: number; refusals: Record<string, number> };
  /** The product process (standalone) over the same window: CPU % of one core, RSS MiB (null when unreadable). */
  product: { cpuPct: number | null; rssMb: number | null };
  warnings: string[];
}

/** The printed table. */
export function formatMultigameReport(r: MultigameReport): string {
  const g = r.game;
  const errors = Object.entries(g.errors)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  const lines = [
    `multigame: one game process, ${g.chats}/${r.chats} chats attached over one connection, ${r.durationS} s window`,
    `  game CPU             ${g.cpuMs} ms (${g.cpuPct} % of a core) = ${g.cpuMsPerChatPerS} ms per chat per s`,
    `  game RSS             ${g.rssMb} MiB (${g.rssBeforeAttachMb} MiB before attaching) = ${g.rssKbPerChat} KiB per chat`,
    `  game heap            ${g.heapUsedMb} MiB after GC (${g.heapBeforeAttachMb} MiB before attaching) = ${g.heapKbPerChat} KiB per chat`,
    `  batches              ${g.batches} (${g.batchesPerS}/s) from ${g.chatsWithBatches} chats; states sent ${g.statesSent}`,
    `  rounds               opened ${g.roundsOpened}, settled ${g.roundsSettled} (one in every ${r.roundEvery} chats)`,
    `  game errors          ${errors || 'none'}`,
    `  viewers              ${r.viewers.connected} connected, ${r.viewers.acksPerS} acks/s, ${r.viewers.refused} refused ${JSON.stringify(r.viewers.refusals)}`,
    `  product              CPU ${r.product.cpuPct ?? '?'} % of a core, RSS ${r.product.rssMb ?? '?'} MiB`,
  ];
  for (const w of r.warnings) lines.push(`  warning: ${w}`);
  return lines.join('\n');
}
