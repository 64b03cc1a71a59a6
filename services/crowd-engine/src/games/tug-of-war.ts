import type { ActionSpec, Batch } from '@crowdplay/protocol';
import type { GameModule, RoundCommand } from './game-module.ts';

/** Ids of the rounds the demo opens (`demo-<time in base 36>`); it settles only those. */
export const DEMO_ROUND_PREFIX = 'demo-';

export interface TugOfWarOptions {
  /** maxPerTick of the `pull` action. */
  maxPerTick: number;
  /** When true, a few bots pull each tick so the demo moves on its own. */
  motion: boolean;
  /** Bots pulling per tick when motion is on (default 3). */
  botsPerTick?: number;
  /** Random source in [0,1) (tests pass a seeded one). */
  random?: () => number;
  /**
   * Rounds on "which side of centre is the rope at the deadline?" (outcomes
   * left, right), alternating pool and market, each `durationMs` long, one at
   * a time; settled by the rope's position once locked. Absent: no rounds.
   */
  rounds?: { durationMs: number; liquidity?: number };
  /** Points each viewer is granted on first joining (0 = none). */
  welcomeGrant?: number;
}

/**
 * The standalone demo: a rope at `position` in [-100, 100]. Each batch moves
 * it by 10 × (right − left) / (right + left) of that tick's pulls, so a bigger
 * crowd pulls harder only by being more one-sided. Reaching ±100 is a win for
 * that side and the rope resets to 0.
 */
export function tugOfWar(opts: TugOfWarOptions): GameModule {
  const random = opts.random ?? Math.random;
  const bots = opts.botsPerTick ?? 3;
  let position = 0;
  let wins = { left: 0, right: 0 };
  let bias = 0.5;
  let opened = 0;
  /** Round id being opened or settled → when the command was sent (a command that failed is retried after 5 s). */
  const inFlight = new Map<string, number>();
  const roundCfg = opts.rounds;
  return {
    name: 'tug-of-war',
    welcomeGrant: opts.welcomeGrant ?? 0,
    rounds: roundCfg
      ? (now, rounds): RoundCommand[] => {
          for (const [id, at] of inFlight) if (now - at > 5_000) inFlight.delete(id);
          const out: RoundCommand[] = [];
          let live = false;
          for (const r of rounds) {
            // Only the demo's own rounds (a restored snapshot may list others).
            if (!r.id.startsWith(DEMO_ROUND_PREFIX)) continue;
            if (r.state === 'open') live = true;
            else if (r.state === 'locked') {
              live = true;
              if (!inFlight.has(r.id)) {
                inFlight.set(r.id, now);
                out.push({ op: 'settle', round: r.id, outcome: position < 0 ? 'left' : 'right' });
              }
            } else inFlight.delete(r.id);
          }
          const opening = [...inFlight.keys()].some((id) => id.startsWith('o:'));
          if (!live && !opening) {
            const id = `${DEMO_ROUND_PREFIX}${now.toString(36)}`;
            const kind = opened++ % 2 === 0 ? 'pool' : 'market';
            inFlight.set(`o:${id}`, now);
            out.push({
              op: 'open',
              request: {
                round: id,
                kind,
                outcomes: ['left', 'right'],
                title: 'Which side holds the rope when betting closes?',
                labels: { left: 'Left', right: 'Right' },
                durationMs: roundCfg.durationMs,
                ...(kind === 'market' ? { liquidity: roundCfg.liquidity ?? 100 } : {}),
              },
            });
          }
          for (const r of rounds) inFlight.delete(`o:${r.id}`);
          return out;
        }
      : undefined,
    actions(): ActionSpec[] {
      return [
        {
          name: 'pull',
          label: 'Pull',
          options: ['left', 'right'],
          optionLabels: { left: '◀ Left', right: 'Right ▶' },
          maxPerTick: opts.maxPerTick,
        },
      ];
    },
    init(restored) {
      if (restored && typeof restored.position === 'number') {
        position = restored.position;
        const w = restored.wins as { left?: unknown; right?: unknown } | undefined;
        wins = { left: Number(w?.left ?? 0) || 0, right: Number(w?.right ?? 0) || 0 };
      }
      return { position, wins };
    },
    onBatch(batch: Batch) {
      const pulls = batch.actions.pull?.tally;
      if (!pulls) return null;
      const left = pulls.left ?? 0;
      const right = pulls.right ?? 0;
      if (left + right === 0) return null;
      position += (10 * (right - left)) / (left + right);
      if (position >= 100) {
        wins = { ...wins, right: wins.right + 1 };
        position = 0;
      } else if (position <= -100) {
        wins = { ...wins, left: wins.left + 1 };
        position = 0;
      }
      position = Math.round(position * 100) / 100;
      return { position, wins };
    },
    botIntents: opts.motion
      ? () => {
          // The bots drift between sides so the rope wanders instead of pinning.
          bias = Math.min(0.8, Math.max(0.2, bias + (random() - 0.5) * 0.1));
          const out = [];
          for (let i = 0; i < bots; i++) out.push({ viewer: `bot-${i}`, action: 'pull', option: random() < bias ? 'left' : 'right' });
          return out;
        }
      : undefined,
  };
}
