/**
 * One channel's state inside its shard: the declared actions, the open tick's
 * accumulators, the cumulative tally and the game state. Pure logic (no I/O):
 * the shard feeds it intents and clock ticks and publishes what it returns.
 */
import type { ActionSpec, Batch, BatchIntent, BusIntent, ChannelUpdate, ErrorCode, RoundView, Tally } from '@crowdplay/protocol';

/** The option key used in tallies for actions that take no option. */
export const NO_OPTION = '_';

interface TickAcc {
  tally: Record<string, number>;
  intents: BatchIntent[];
  dropped: number;
}

/** What `intake` decided for one intent. */
export type IntakeResult = { ok: true; cost: number; listed: boolean } | { ok: false; code: ErrorCode };

/** The durable part of a channel (snapshotted to Postgres, restored on acquire). */
export interface ChannelSnapshotState {
  v: 1;
  actions: ActionSpec[];
  tally: Tally;
  game: Record<string, unknown> | null;
  tick: number;
  /** The game's welcome grant (declare.welcomeGrant), points; absent = 0. The next owner pays it to viewers joining after a move. */
  welcomeGrant?: number;
  /**
   * True while an external game holds a channel whose built-in game yields to one (a Telegram chat's word puzzle):
   * the next owner keeps the built-in game off until the game releases the channel. Absent = false.
   */
  external?: true;
}

export class ChannelRuntime {
  private actions = new Map<string, ActionSpec & { optionSet: Set<string> | null }>();
  private actionList: ActionSpec[] = [];
  private acc = new Map<string, TickAcc>();
  private accCount = 0;
  private tally: Tally = {};
  private game: Record<string, unknown> | null = null;
  /** Rounds shown to viewers (not snapshotted: the rounds table is their durable form). */
  private rounds: RoundView[] = [];
  tick = 0;
  /** The game's welcome grant (declare.welcomeGrant), points: snapshotted with the actions. */
  welcomeGrant = 0;
  /** An external game holds the channel in place of its built-in game ({@link ChannelSnapshotState.external}). */
  external = false;
  /** Event id of the newest change; 0 before any. */
  ev = 0;
  /** Server time (ms since epoch) of the newest change. */
  changedAtMs = 0;
  /** True when a change has not been sent to viewers yet. */
  dirty = false;
  /** True when a change has not been snapshotted yet. */
  unsaved = false;
  /** The newest update frame (JSON text), cached for joining viewers. */
  private updateText: string | null = null;

  constructor(readonly id: string) {}

  get declared(): boolean {
    return this.actionList.length > 0;
  }

  /** True when the open tick has any intent (listed or over the cap). */
  get hasOpenIntents(): boolean {
    return this.acc.size > 0;
  }

  /** Individual intents held for the open tick. */
  get pendingIntents(): number {
    return this.accCount;
  }

  /**
   * Replaces the declared actions (a game's `declare`). Resets the tally and
   * drops the open tick, unless the actions are the ones already declared
   * (the game reconnected and declared again; {@link sameSpecs}): then the
   * open tick's intents, acked already, stay for its batch, and the tally stays.
   * The caller validated the specs against the protocol schema.
   * @param ev event id of this change
   */
  declare(actions: ActionSpec[], ev: number, nowMs: number): void {
    if (this.declared && sameSpecs(this.actionList, actions)) {
      this.markChanged(ev, nowMs);
      return;
    }
    this.actions = new Map(actions.map((a) => [a.name, { ...a, optionSet: a.options ? new Set(a.options) : null }]));
    this.actionList = actions.map((a) => ({ ...a }));
    this.acc.clear();
    this.accCount = 0;
    this.tally = {};
    for (const a of actions) this.tally[a.name] = Object.fromEntries((a.options ?? [NO_OPTION]).map((o) => [o, 0]));
    this.markChanged(ev, nowMs);
  }

  /** Sets the game state broadcast to viewers. @param ev event id of this change */
  setGameState(state: Record<string, unknown>, ev: number, nowMs: number): void {
    this.game = state;
    this.markChanged(ev, nowMs);
  }

  /** Sets the rounds shown to viewers. @param ev event id of this change */
  setRounds(rounds: RoundView[], ev: number, nowMs: number): void {
    this.rounds = rounds;
    this.markChanged(ev, nowMs);
  }

  /**
   * Validates one intent and adds it to the open tick. Over the action's
   * maxPerTick it is still tallied but not listed (counted as dropped): the
   * game gets the crowd's shape, never a flood, and nothing is queued.
   * Does not check cost: the shard charges paid actions before calling this.
   */
  check(intent: Pick<BusIntent, 'action' | 'option'>): { ok: true; cost: number } | { ok: false; code: ErrorCode } {
    if (!this.declared) return { ok: false, code: 'CP_ERR_INTENT_NO_GAME' };
    const a = this.actions.get(intent.action);
    if (!a) return { ok: false, code: 'CP_ERR_INTENT_UNKNOWN_ACTION' };
    if (a.optionSet ? intent.option === undefined || !a.optionSet.has(intent.option) : intent.option !== undefined) {
      return { ok: false, code: 'CP_ERR_INTENT_UNKNOWN_OPTION' };
    }
    return { ok: true, cost: a.cost ?? 0 };
  }

  /**
   * Adds a checked intent to the open tick.
   * @returns whether it was listed individually (false = over maxPerTick, dropped from the list)
   */
  add(viewer: string, action: string, option: string | undefined, atMs: number): boolean {
    const a = this.actions.get(action)!;
    let acc = this.acc.get(action);
    if (!acc) {
      acc = { tally: {}, intents: [], dropped: 0 };
      this.acc.set(action, acc);
    }
    const key = option ?? NO_OPTION;
    acc.tally[key] = (acc.tally[key] ?? 0) + 1;
    if (acc.intents.length < a.maxPerTick) {
      acc.intents.push(option === undefined ? { viewer, at: atMs } : { viewer, option, at: atMs });
      this.accCount++;
      return true;
    }
    acc.dropped++;
    return false;
  }

  /** Counts `n` ticks that closed nothing (ticks that skipped the channel while it had no open intent). */
  skipTicks(n: number): void {
    this.tick += n;
  }

  /**
   * Closes the open tick. Returns the batch (null when no intent arrived) and
   * folds its tally into the cumulative one.
   * @param ev event id for this batch (ignored when the tick is empty)
   */
  closeTick(ev: number, nowMs: number): Batch | null {
    this.tick++;
    if (this.acc.size === 0) return null;
    const actions: Batch['actions'] = {};
    for (const [name, acc] of this.acc) {
      actions[name] = acc;
      const t = (this.tally[name] ??= {});
      for (const [opt, n] of Object.entries(acc.tally)) t[opt] = (t[opt] ?? 0) + n;
    }
    this.acc = new Map();
    this.accCount = 0;
    this.markChanged(ev, nowMs);
    return { t: 'batch', channel: this.id, ev, tick: this.tick, closedAt: nowMs, actions };
  }

  /** The viewer update for the current state, serialised once; clears `dirty`. */
  takeUpdate(): string {
    this.dirty = false;
    const u: ChannelUpdate = {
      t: 'update',
      channel: this.id,
      ev: this.ev,
      at: this.changedAtMs,
      actions: this.actionList,
      tally: this.tally,
    };
    if (this.game) u.game = this.game;
    if (this.rounds.length > 0) u.rounds = this.rounds;
    this.updateText = JSON.stringify(u);
    return this.updateText;
  }

  /** The newest update frame for a joining viewer (built if none was sent yet). */
  currentUpdate(): string {
    return this.updateText !== null && !this.dirty ? this.updateText : this.takeUpdateKeepDirty();
  }

  private takeUpdateKeepDirty(): string {
    const dirty = this.dirty;
    const text = this.takeUpdate();
    this.dirty = dirty;
    return text;
  }

  snapshot(): ChannelSnapshotState {
    const s: ChannelSnapshotState = { v: 1, actions: this.actionList, tally: this.tally, game: this.game, tick: this.tick };
    if (this.welcomeGrant > 0) s.welcomeGrant = this.welcomeGrant;
    if (this.external) s.external = true;
    return s;
  }

  /** Restores a snapshot (after acquire). `ev` is the snapshot's event id. */
  restore(s: ChannelSnapshotState, ev: number): void {
    this.actions = new Map(s.actions.map((a) => [a.name, { ...a, optionSet: a.options ? new Set(a.options) : null }]));
    this.actionList = s.actions;
    this.tally = s.tally;
    this.game = s.game;
    this.tick = s.tick;
    this.welcomeGrant = s.welcomeGrant ?? 0;
    this.external = s.external === true;
    this.ev = ev;
  }

  private markChanged(ev: number, nowMs: number): void {
    this.ev = ev;
    this.changedAtMs = nowMs;
    this.dirty = true;
    this.unsaved = true;
  }
}

/**
 * Whether two declarations declare the same actions in the same order (name,
 * maxPerTick, cost with 0 = absent, options): key order does not matter (a
 * snapshot's actions come back from jsonb reordered).
 */
export function sameSpecs(a: readonly ActionSpec[], b: readonly ActionSpec[]): boolean {
  if (a.length !== b.length) return false;
  return a.every((x, i) => {
    const y = b[i]!;
    return (
      x.name === y.name &&
      x.maxPerTick === y.maxPerTick &&
      (x.cost ?? 0) === (y.cost ?? 0) &&
      JSON.stringify(x.options ?? null) === JSON.stringify(y.options ?? null)
    );
  });
}
