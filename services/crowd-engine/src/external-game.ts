/**
 * A channel whose built-in game yields to an external one (a Telegram chat's word puzzle,
 * GameModule.yieldsToGame): a game's `declare` takes the channel over, the game's `release` gives it back. The
 * state is one flag of the channel (`ChannelRuntime.external`), snapshotted with it, so a channel that moves to
 * another shard keeps its game: the new owner starts the built-in game only when the flag is off
 * (docs/decisions/0032-multi-channel-game-sockets.md).
 */
import type { ShardState, Owned } from './shard-state.ts';

/** What a takeover or a release needs from the shard. */
export interface ExternalGameDeps {
  s: ShardState;
  /** Schedules the channel's next viewer update. */
  scheduleUpdate(o: Owned): void;
}

/**
 * Cancels (and refunds) every unfinished round of the channel: a built-in game's rounds are its own, and the
 * rounds of a game that let the channel go have no one left to settle them. Best effort per round: one that fails
 * stays for the round recovery of a later owner (a cancelled round is final; a failure is logged).
 */
async function cancelUnfinished(d: ExternalGameDeps, o: Owned): Promise<void> {
  if (!o.rounds || o.rounds.unfinished === 0) return;
  for (const r of o.rounds.views()) {
    if (r.state !== 'open' && r.state !== 'locked') continue;
    await o.rounds.cancel(o.tenant, r.id).catch((err: unknown) => {
      d.s.deps.telemetry.logger.warn({ err, channel: o.rt.id, round: r.id }, 'could not cancel a round on a change of game');
    });
  }
}

/**
 * An external game declares on a channel running a built-in game that yields: the built-in game stops (its
 * unfinished rounds cancelled), its state is cleared from the viewers' update, and the channel is marked external.
 * The caller then applies the declaration and snapshots the channel before answering (so the flag is durable).
 * @param ev the event id of the change (taken by the caller)
 */
export async function takeOver(d: ExternalGameDeps, o: Owned, ev: number): Promise<void> {
  // Off first: a tick during the refunds must not run the built-in game (a new round of its own) any more.
  o.game = undefined;
  o.pendingState = undefined;
  o.rt.external = true;
  await cancelUnfinished(d, o);
  o.rt.setGameState({}, ev, d.s.now());
}

/**
 * The external game releases the channel: its unfinished rounds are cancelled, and the built-in game that yielded
 * starts afresh (its actions declared, its initial state set). No-op (false) when no external game holds it.
 * @param nextEv takes an event id (the sequencer's)
 * @returns true when the channel changed (the caller snapshots it)
 * @throws the sequencer's error (nothing changed: the game may release again)
 */
export async function release(d: ExternalGameDeps, o: Owned, nextEv: () => Promise<number>): Promise<boolean> {
  if (!o.rt.external) return false;
  const evDeclare = await nextEv();
  const evState = await nextEv();
  await cancelUnfinished(d, o);
  o.rt.external = false;
  const game = o.builtin;
  const now = d.s.now();
  if (game) {
    const pending = o.rt.pendingIntents;
    o.rt.declare(game.actions(), evDeclare, now);
    d.s.pendingIntents -= pending - o.rt.pendingIntents;
    o.rt.setGameState(game.init(null), evState, now);
    o.rt.welcomeGrant = game.welcomeGrant ?? 0;
    if (o.rounds) o.rounds.welcomeGrant = o.rt.welcomeGrant;
    o.game = game;
    d.s.wake(o); // its tick, bots and rounds run again
  }
  d.scheduleUpdate(o);
  return true;
}
