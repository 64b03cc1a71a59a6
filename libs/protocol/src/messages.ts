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

/** Most code points in a display label of an action, option or outcome. */
export const LABEL_MAX_CODE_POINTS = 64;
/** Most code points in a round's title (its question). */
export const TITLE_MAX_CODE_POINTS = 120;
// The schema only bounds the size (UTF-16 units, generously, so that a label a little too long is refused by
// `checkLabels` (validate.ts) with its length in code points); `checkLabels` counts code points and refuses control
// and bidi-override characters and labels with nothing visible.
// No minLength: an empty label is blank, refused by checkLabels as CP_ERR_LABEL_INVALID as every blank one is.
const Label = Type.String({ maxLength: 4 * LABEL_MAX_CODE_POINTS });
const Title = Type.String({ maxLength: 4 * TITLE_MAX_CODE_POINTS });
/** Display labels by id (an action's options, a round's outcomes); every key is one of the ids. */
const Labels = Type.Record(Type.String({ pattern: NAME_PATTERN }), Label, { maxProperties: 32 });

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
    /** What viewers see instead of `name` (at most 64 code points; plain text, never HTML). */
    label: Type.Optional(Label),
    /** What viewers see instead of each option's name, by option (keys among `options`). */
    optionLabels: Type.Optional(Labels),
  },
  { additionalProperties: false },
);
export type ActionSpec = Static<typeof ActionSpec>;

/** A request reference the game picks; echoed in the `result` (or `error`) frame that answers it. */
export const REF_PATTERN = '^[A-Za-z0-9_.:-]{1,64}$';
const Ref = Type.String({ pattern: REF_PATTERN });
/**
 * The channel a game message is for. On a multi-channel game socket (`multi=1`) every per-channel message names
 * one; on a single-channel socket it may be given and must be the socket's channel.
 */
const ChannelId = Type.String({ pattern: CHANNEL_ID_PATTERN });

export const GameDeclare = Type.Object(
  {
    t: Type.Literal('declare'),
    /** With a ref, success is answered with a `result` frame (without, it is silent). */
    ref: Type.Optional(Ref),
    /** Multi-channel socket: the channel; absent = every channel attached now and later (see `attach`). */
    channel: Type.Optional(ChannelId),
    actions: Type.Array(ActionSpec, { minItems: 1, maxItems: 32 }),
    /**
     * Points granted once per (channel, viewer) from the tenant's treasury
     * when the viewer first joins (0 or absent = none; at most
     * WELCOME_GRANT_MAX_POINTS).
     */
    welcomeGrant: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000_000 })),
  },
  { additionalProperties: false },
);
/** Game-owned state broadcast to viewers on the next update (any JSON object). */
export const GameState = Type.Object(
  {
    t: Type.Literal('state'),
    ref: Type.Optional(Ref),
    channel: Type.Optional(ChannelId),
    state: Type.Record(Type.String(), Type.Unknown()),
  },
  { additionalProperties: false },
);
/** Most points in one stake, budget or limit, and most shares in one trade (1e15 < 2^53: exact in a double). */
export const MAX_POINTS = 1e15;

/**
 * Opens a round (docs/protocol.md "Rounds"). `kind: 'pool'`: parimutuel
 * stakes; `kind: 'market'`: an LMSR market with liquidity `liquidity`
 * (shares; the maker's subsidy ceil(liquidity·ln n) points comes from the
 * tenant's treasury). The server sets the deadline: now + `durationMs`.
 */
export const RoundOpen = Type.Object(
  {
    t: Type.Literal('round.open'),
    ref: Type.Optional(Ref),
    channel: Type.Optional(ChannelId),
    round: Name,
    kind: Type.Union([Type.Literal('pool'), Type.Literal('market')]),
    outcomes: Type.Array(Name, { minItems: 2, maxItems: 10, uniqueItems: true }),
    durationMs: Type.Integer({ minimum: 1, maximum: 604_800_000 }),
    liquidity: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000_000 })),
    /** The question viewers see (at most 120 code points; plain text). */
    title: Type.Optional(Title),
    /** What viewers see instead of each outcome's name, by outcome (keys among `outcomes`; at most 64 code points each). */
    labels: Type.Optional(Labels),
  },
  { additionalProperties: false },
);
/** Locks the round (if open), then pays the winners of `outcome`. Idempotent for the same outcome. */
export const RoundSettle = Type.Object(
  { t: Type.Literal('round.settle'), ref: Type.Optional(Ref), channel: Type.Optional(ChannelId), round: Name, outcome: Name },
  { additionalProperties: false },
);
/** Cancels the round and refunds everyone exactly. Idempotent. */
export const RoundCancel = Type.Object(
  { t: Type.Literal('round.cancel'), ref: Type.Optional(Ref), channel: Type.Optional(ChannelId), round: Name },
  { additionalProperties: false },
);
export const GameInbound = Type.Union([GameDeclare, GameState, RoundOpen, RoundSettle, RoundCancel]);
export type GameDeclare = Static<typeof GameDeclare>;
export type GameState = Static<typeof GameState>;
export type RoundOpen = Static<typeof RoundOpen>;
export type RoundSettle = Static<typeof RoundSettle>;
export type RoundCancel = Static<typeof RoundCancel>;
export type GameInbound = Static<typeof GameInbound>;

/** Most channels one `attach` or `detach` frame names (a larger set is sent in several frames). */
export const GAME_ATTACH_MAX = 1_000;

/**
 * Multi-channel game socket only: serve these channels over this socket (docs/protocol.md "Multi-channel games").
 * `channels` names channels (each created for the key's tenant on first use, another tenant's refused); `chats: true`
 * attaches every Telegram chat channel of the tenant, now and as new ones are placed. `lastEventIds` resumes a
 * channel from the newest batch `ev` the game applied there. Answered with an `attached` frame.
 */
export const GameAttach = Type.Object(
  {
    t: Type.Literal('attach'),
    ref: Type.Optional(Ref),
    channels: Type.Optional(Type.Array(ChannelId, { minItems: 1, maxItems: GAME_ATTACH_MAX, uniqueItems: true })),
    chats: Type.Optional(Type.Literal(true)),
    lastEventIds: Type.Optional(
      Type.Record(Type.String({ pattern: CHANNEL_ID_PATTERN }), Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }), {
        maxProperties: GAME_ATTACH_MAX,
        additionalProperties: false,
      }),
    ),
  },
  { additionalProperties: false },
);
/**
 * Multi-channel game socket only: stop serving these channels (and, with `chats: true`, stop taking new chats). The
 * game gives the channels up: a Telegram chat plays the built-in word puzzle again. Answered with a `detached` frame.
 */
export const GameDetach = Type.Object(
  {
    t: Type.Literal('detach'),
    ref: Type.Optional(Ref),
    channels: Type.Optional(Type.Array(ChannelId, { minItems: 1, maxItems: GAME_ATTACH_MAX, uniqueItems: true })),
    chats: Type.Optional(Type.Literal(true)),
  },
  { additionalProperties: false },
);
export type GameAttach = Static<typeof GameAttach>;
export type GameDetach = Static<typeof GameDetach>;
/** What a multi-channel game socket may send: the per-channel game messages (naming their channel), attach and detach. */
export type MultiGameInbound = GameInbound | GameAttach | GameDetach;

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
const Seq = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
const Points = Type.Integer({ minimum: 1, maximum: MAX_POINTS });
const PointsOrZero = Type.Integer({ minimum: 0, maximum: MAX_POINTS });
/**
 * The client's idempotency key for a stake or trade (unique per viewer and
 * round): sending the same key again with the same fields returns the first
 * result; with other fields it is refused (CP_ERR_ROUND_DUPLICATE_ID).
 * Without a key, a resend after a reconnect is a new stake.
 */
const Key = Type.String({ pattern: '^[A-Za-z0-9_.:-]{1,64}$' });

/** A parimutuel stake of `points` on `outcome` of a `pool` round. */
export const CrowdStake = Type.Object(
  { t: Type.Literal('stake'), seq: Seq, round: Name, outcome: Name, points: Points, key: Type.Optional(Key) },
  { additionalProperties: false },
);
/**
 * Buys shares of `outcome` in a `market` round: either `shares` whole shares
 * paying at most `maxCost` points (slippage guard), or as many whole shares
 * as `budget` points buy.
 */
export const CrowdBuy = Type.Union([
  Type.Object(
    { t: Type.Literal('buy'), seq: Seq, round: Name, outcome: Name, shares: Points, maxCost: PointsOrZero, key: Type.Optional(Key) },
    { additionalProperties: false },
  ),
  Type.Object(
    { t: Type.Literal('buy'), seq: Seq, round: Name, outcome: Name, budget: Points, key: Type.Optional(Key) },
    { additionalProperties: false },
  ),
]);
/** Sells (cashes out) `shares` whole shares of `outcome`, receiving at least `minProceeds` points. */
export const CrowdSell = Type.Object(
  { t: Type.Literal('sell'), seq: Seq, round: Name, outcome: Name, shares: Points, minProceeds: PointsOrZero, key: Type.Optional(Key) },
  { additionalProperties: false },
);
/**
 * A guess in a word game (the Telegram word puzzle): the game scores it and
 * the ack carries the marks. `word` is checked by the game (five letters of
 * its word list); the schema only bounds it.
 */
export const CrowdGuess = Type.Object(
  { t: Type.Literal('guess'), seq: Seq, word: Type.String({ minLength: 1, maxLength: 16 }) },
  { additionalProperties: false },
);
export const CrowdInbound = Type.Union([CrowdAct, CrowdStake, CrowdBuy, CrowdSell, CrowdGuess]);
export type CrowdGuess = Static<typeof CrowdGuess>;
export type CrowdAct = Static<typeof CrowdAct>;
export type CrowdStake = Static<typeof CrowdStake>;
export type CrowdBuy = Static<typeof CrowdBuy>;
export type CrowdSell = Static<typeof CrowdSell>;
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
  /** The viewer id (crowd); absent on a socket opened with a watch token. */
  viewer?: string;
  /** True on a socket opened with a read-only watch token: it receives what a viewer sees and every frame it sends is refused. */
  readOnly?: true;
  /** True on a multi-channel game socket (`multi=1`; `channel` is then empty). */
  multi?: true;
  serverTime: number;
  tickMs: number;
}

/**
 * The act ack (for `act`, `stake`, `buy`, `sell`): accepted or refused with
 * a code. Stakes and trades are acked only after their ledger transfer
 * committed.
 */
export interface ActAck {
  t: 'ack';
  seq: number;
  ok: boolean;
  /** Points charged (0 for free actions; the stake or the trade's charge; 0 for a sell). */
  cost?: number;
  /** Refusal code from the error catalogue (when `ok` is false). */
  code?: string;
  /** Trades: whole shares bought or sold. */
  shares?: number;
  /** Sells: points received. */
  proceeds?: number;
  /** Trades: the viewer's shares of that outcome after the trade. */
  position?: number;
  /** The viewer's available points right after the commit (when known). */
  balance?: number;
  /** Guesses: one mark per letter (`g` right place, `y` elsewhere in the word, `.` not in it). */
  marks?: string;
  /** Guesses: the word was found. */
  solved?: boolean;
  /** Guesses: guesses left in this puzzle. */
  left?: number;
}

/**
 * The viewer's available points changed outside an ack (welcome grant,
 * payout, refund), or as the answer to joining a channel.
 */
export interface BalanceFrame {
  t: 'balance';
  /** Available points. */
  points: number;
  /** What moved them: 'join' (no change), 'welcome', 'payout', 'refund', 'clawback'. */
  reason: string;
  /** Points added (negative for a claw-back); absent for 'join'. */
  delta?: number;
  /** The round that paid or refunded. */
  round?: string;
}

/** A round as viewers and the game see it (in updates, `round` and `result` frames). */
export interface RoundView {
  id: string;
  kind: 'pool' | 'market';
  /** The question, when the game gave one. */
  title?: string;
  outcomes: string[];
  /** Display labels by outcome, when the game gave them. */
  labels?: Record<string, string>;
  state: 'open' | 'locked' | 'settled' | 'cancelled';
  /** Server time the round opened and the deadline (ms since epoch). */
  openedAt: number;
  deadline: number;
  /** Pool: points staked per outcome (same order as `outcomes`). */
  pool?: number[];
  /** Stakes (pool) or trades (market) accepted so far. */
  entries: number;
  /** Market: liquidity b, outstanding shares q and prices per outcome. */
  b?: number;
  q?: number[];
  prices?: number[];
  /** Settled: the winning outcome. */
  winner?: string;
}

/**
 * One round of a channel's history (`GET /v1/channels/:channel/rounds`): the
 * RoundView's identity, question, outcomes, state, times and winner, and, for
 * a viewer that took part, its own figures (points in, points back, their
 * difference), as in {@link RoundResultFrame}.
 */
export type RoundSummary = Pick<
  RoundView,
  'id' | 'kind' | 'title' | 'outcomes' | 'labels' | 'state' | 'openedAt' | 'deadline' | 'winner'
> & {
  mine?: { staked: number; paid: number; net: number };
};

/**
 * A viewer's own result in a round that finished (settled or cancelled), sent
 * to that viewer's sockets on the channel once every payout and refund of the
 * round committed. Points: `staked` is what the viewer put in (stakes, the
 * cost of buys), `paid` what the round gave back (payout, refund, sale
 * proceeds, less any claw-back), `net` = `paid` − `staked`.
 */
export interface RoundResultFrame {
  t: 'roundResult';
  channel: string;
  round: string;
  state: 'settled' | 'cancelled';
  /** Settled: the winning outcome. */
  winner?: string;
  staked: number;
  paid: number;
  net: number;
}

/** A round changed state (locked at its deadline, settled, cancelled): sent to the game socket. */
export interface RoundFrame {
  t: 'round';
  /** The round's channel. */
  channel?: string;
  round: RoundView;
}

/** The answer to a game request that carried `ref`. */
export interface ResultFrame {
  t: 'result';
  ref: string;
  /** Multi-channel game socket: the channel of the request. */
  channel?: string;
  ok: true;
  round?: RoundView;
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
  /** Open and locked rounds, then the newest finished ones (ROUND_RECENT_SHOWN). */
  rounds?: RoundView[];
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
  /** The `ref` of the game request this answers. */
  ref?: string;
  /** Multi-channel game socket: the channel the refused request was for. */
  channel?: string;
}

/**
 * Multi-channel game socket: channels now served over it. The answer to an `attach` (with its `ref`), and, without
 * `ref`, each Telegram chat attached later by an `attach` with `chats: true`. `refused` lists the channels not attached
 * and why (CP_ERR_AUTH_FORBIDDEN_CHANNEL, CP_ERR_CHANNEL_GAME_CONNECTED, CP_ERR_GAME_TOO_MANY_CHANNELS, …).
 */
export interface AttachedFrame {
  t: 'attached';
  ref?: string;
  channels: string[];
  refused?: Array<{ channel: string; code: string; message: string }>;
}

/** Multi-channel game socket: the answer to a `detach`: the channels no longer served over it. */
export interface DetachedFrame {
  t: 'detached';
  ref?: string;
  channels: string[];
}

/**
 * Sent after the welcome to a client that reconnected with `lastEventId` when
 * the gateway cannot give it exactly what it missed: the client must drop
 * what it derived from the events since `from` and resync from the snapshot
 * that follows (the channel's current `update` frame; a game client also gets
 * the live batches after it). Reasons: `pruned` (events after `from` are no
 * longer in the event log: EVENT_LOG_RETENTION_MS, or a log write failed),
 * `behind` (more than EVENT_LOG_RESUME_MAX_EVENTS missed), `ahead` (`from` is
 * newer than the channel's state: changes the client saw were lost, e.g. a
 * shard died before its snapshot), `unavailable` (the log could not be read).
 */
export interface ResyncFrame {
  t: 'resync';
  channel: string;
  /** The client's `lastEventId`. */
  from: number;
  reason: 'pruned' | 'behind' | 'ahead' | 'unavailable';
}

export type ServerFrame =
  | Welcome
  | ActAck
  | BalanceFrame
  | RoundResultFrame
  | ChannelUpdate
  | Batch
  | RoundFrame
  | ResultFrame
  | ErrorFrame
  | ResyncFrame
  | AttachedFrame
  | DetachedFrame;

// ---------------------------------------------------------------- bus payloads (gateway ↔ shard)

/** A stake or trade as the gateway forwards it (the crowd frame without `t` and `seq`). */
export type BusTrade =
  | { k: 'stake'; round: string; outcome: string; points: number; key?: string }
  | { k: 'buy'; round: string; outcome: string; shares: number; maxCost: number; key?: string }
  | { k: 'buy'; round: string; outcome: string; budget: number; key?: string }
  | { k: 'sell'; round: string; outcome: string; shares: number; minProceeds: number; key?: string };

/**
 * An intent as the gateway forwards it. `conn` identifies the socket on its
 * gateway. An `act` carries `action` (and `option`); a stake or trade carries
 * `trade` and an empty `action`.
 */
export interface BusIntent {
  conn: number;
  viewer: string;
  seq: number;
  action: string;
  option?: string;
  trade?: BusTrade;
  /** A word game's guess (the crowd frame's `word`), with an empty `action`. */
  guess?: string;
  /** The viewer's display name when the gateway knows it (Telegram Mini App sessions), for boards. */
  name?: string;
  /** Gateway receive time, ms since epoch. */
  at: number;
}

/** A micro-batch of one channel's intents from one gateway, on `ch.<C>.in`. */
export interface IntentBatch {
  gw: string;
  intents: BusIntent[];
  /** Viewer sockets that joined the channel: the shard answers each with its balance (and pays a welcome grant). */
  joins?: Array<{ conn: number; viewer: string }>;
}

/** An ack as the shard sends it: the ActAck's fields (without `t`) and the socket it is for. */
export interface BusAck extends Omit<ActAck, 't'> {
  conn: number;
  /**
   * Bus only (never sent to the viewer): the intent itself, when it was refused
   * (CP_ERR_CHANNEL_UNAVAILABLE) only because the channel is moving to another
   * shard. The gateway publishes it again until the new owner takes it or
   * INTENT_MOVE_RESEND_MS after it arrived, then sends the refusal.
   */
  resend?: BusIntent;
}

/** Acks for one IntentBatch, on `gw.<id>.acks`. `conn` routes each to its socket. */
export interface AckBatch {
  acks: BusAck[];
  /** Balance frames for single sockets (answers to joins). */
  balances?: Array<{ conn: number; frame: BalanceFrame }>;
  /** The batch's joins, sent back unanswered because the channel is moving: the gateway joins them again (like `resend`). */
  rejoin?: Array<{ conn: number; viewer: string }>;
}

/**
 * A grant committed through the tenant API (POST /v1/grants), on
 * `wallet.credit`: shards add it to their mirror of the viewer's balance
 * (so a stake right after the grant's 200 sees it), gateways send the viewer's
 * sockets a `balance` frame (reason `grant`).
 */
export interface WalletCredit {
  tenant: string;
  viewer: string;
  /** Points granted. */
  points: number;
  /** The wallet's committed balance right after the grant. */
  balance: number;
}

/**
 * Balance changes of viewers of one channel (payouts, refunds), on
 * `ch.<C>.wallet`: every gateway sends each entry to the sockets of that
 * viewer watching the channel.
 */
export interface WalletBatch {
  entries: Array<{ viewer: string; frame: BalanceFrame | RoundResultFrame }>;
}
