/**
 * v1 wire messages: WebSocket frames between the gateway and its clients
 * (role=crowd viewers, role=game processes), and the bus payloads between
 * gateways and shards. JSON text frames; every field name is short because
 * broadcasts are paid per byte per socket.
 *
 * Schemas are TypeBox (JSON Schema) so the same definitions validate at the
 * edge (compiled checkers, see `validate.ts`) and document the protocol.
 */
import { Type, type Static } from '@sinclair/typebox';

export const PROTOCOL_VERSION = 1 as const;

/** Channel ids are bus-subject safe: letters, digits, `_`, `-`, 1–64 chars. */
export const CHANNEL_ID_PATTERN = '^[A-Za-z0-9_-]{1,64}$';
export const CHANNEL_ID_RE = new RegExp(CHANNEL_ID_PATTERN);
/** Action and option names: 1–32 chars of letters, digits, `_`, `-`, `.`. */
export const NAME_PATTERN = '^[A-Za-z0-9_.-]{1,32}$';

const Name = Type.String({ pattern: NAME_PATTERN });

// ---------------------------------------------------------------- game → server

/** One action the game accepts. `maxPerTick` caps individual intents per tick. */
export const ActionSpec = Type.Object(
  {
    name: Name,
    /** Individual intents forwarded per tick; more are tallied and counted as dropped, never queued. */
    maxPerTick: Type.Integer({ minimum: 1, maximum: 100_000 }),
    /** Allowed options; absent means the action takes no option. */
    options: Type.Optional(Type.Array(Name, { minItems: 1, maxItems: 32, uniqueItems: true })),
    /** Points charged per intent (integer, default 0 = free). */
    cost: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000_000 })),
  },
  { additionalProperties: false },
);
export type ActionSpec = Static<typeof ActionSpec>;

export const GameDeclare = Type.Object(
  { t: Type.Literal('declare'), actions: Type.Array(ActionSpec, { minItems: 1, maxItems: 32 }) },
  { additionalProperties: false },
);
/** Game-owned state broadcast to viewers on the next update (any JSON object). */
export const GameState = Type.Object(
  { t: Type.Literal('state'), state: Type.Record(Type.String(), Type.Unknown()) },
  { additionalProperties: false },
);
export const GameInbound = Type.Union([GameDeclare, GameState]);
export type GameDeclare = Static<typeof GameDeclare>;
export type GameState = Static<typeof GameState>;
export type GameInbound = Static<typeof GameInbound>;

// ---------------------------------------------------------------- crowd → server

/** One viewer press. `seq` is the client's counter, echoed in the act ack. */
export const CrowdAct = Type.Object(
  {
    t: Type.Literal('act'),
    seq: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
    action: Name,
    option: Type.Optional(Name),
  },
  { additionalProperties: false },
);
export const CrowdInbound = Type.Union([CrowdAct]);
export type CrowdAct = Static<typeof CrowdAct>;
export type CrowdInbound = Static<typeof CrowdInbound>;

// ---------------------------------------------------------------- server → clients

/** Per action, count by option (`_` when the action has no options). */
export type Tally = Record<string, Record<string, number>>;

/** Sent once after the socket is authenticated. `serverTime` is ms since epoch. */
export interface Welcome {
  t: 'welcome';
  v: typeof PROTOCOL_VERSION;
  role: 'crowd' | 'game';
  channel: string;
  viewer?: string;
  serverTime: number;
  tickMs: number;
}

/** The act ack: accepted (with its cost in points) or refused with a code. */
export interface ActAck {
  t: 'ack';
  seq: number;
  ok: boolean;
  /** Points charged (0 for free actions). */
  cost?: number;
  /** Refusal code from the error catalogue (when `ok` is false). */
  code?: string;
}

/**
 * Compact channel update to viewers, sent only on change and at most once per
 * CHANNEL_UPDATE_MS. A full state (not a delta), so a viewer that missed
 * updates is current after the next one.
 */
export interface ChannelUpdate {
  t: 'update';
  channel: string;
  /** Event id of the newest change included. */
  ev: number;
  /** Server time (ms since epoch) of the newest change included. */
  at: number;
  actions: ActionSpec[];
  /** Cumulative tally since the game last declared its actions. */
  tally: Tally;
  game?: Record<string, unknown>;
}

/** One intent as the game sees it in a batch. `at` is when the shard took it (ms since epoch). */
export interface BatchIntent {
  viewer: string;
  option?: string;
  at: number;
}

/** One tick's intents for the game. */
export interface Batch {
  t: 'batch';
  channel: string;
  ev: number;
  /** Tick number since the channel was acquired. */
  tick: number;
  /** Server time the tick closed (ms since epoch). */
  closedAt: number;
  actions: Record<string, { tally: Record<string, number>; intents: BatchIntent[]; dropped: number }>;
}

/** An error report; sent before a close when the error ends the socket. */
export interface ErrorFrame {
  t: 'error';
  code: string;
  message: string;
}

export type ServerFrame = Welcome | ActAck | ChannelUpdate | Batch | ErrorFrame;

// ---------------------------------------------------------------- bus payloads (gateway ↔ shard)

/** An intent as the gateway forwards it. `conn` identifies the socket on its gateway. */
export interface BusIntent {
  conn: number;
  viewer: string;
  seq: number;
  action: string;
  option?: string;
  /** Gateway receive time, ms since epoch. */
  at: number;
}

/** A micro-batch of one channel's intents from one gateway, on `ch.<C>.in`. */
export interface IntentBatch {
  gw: string;
  intents: BusIntent[];
}

/** Acks for one IntentBatch, on `gw.<id>.acks`. `conn` routes each to its socket. */
export interface AckBatch {
  acks: Array<{ conn: number; seq: number; ok: boolean; cost?: number; code?: string }>;
}
