/**
 * Control-plane messages on the bus: router ↔ shard control, assignment
 * changes, heartbeats and sequencer leases. Each is declared once here as a
 * TypeBox schema and validated when decoded ({@link decodeControl}); a
 * malformed, oversized or stale message is refused with a code and changes
 * nothing.
 *
 * Versions: every message may carry `v`, the control protocol version of its
 * sender (absent = 1). A process speaks {@link CONTROL_VERSION} and accepts
 * the previous one, so in a rolling upgrade an old and a new process still
 * talk: a v1 message names one channel, a v2 message carries a batch. A
 * version above {@link CONTROL_VERSION} is refused (CP_ERR_PROTO_VERSION).
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { CrowdplayError } from './errors.ts';
import { CHANNEL_ID_PATTERN } from './messages.ts';

/** The control protocol version this code speaks. */
export const CONTROL_VERSION = 2 as const;
/** The oldest version it still accepts. */
export const CONTROL_MIN_VERSION = 1 as const;
/**
 * Most channels in one control batch. A batch of this many 64-character ids with epochs encodes to ~100 KB, a tenth
 * of NATS's default max_payload (1 MiB), so a batch never hits the bus's payload limit.
 */
export const CONTROL_BATCH_MAX = 1_000;

const Channel = Type.String({ pattern: CHANNEL_ID_PATTERN });
const Epoch = Type.Integer({ minimum: 0 });
const ShardId = Type.String({ minLength: 1, maxLength: 128 });
const V2 = Type.Literal(2);
const V1 = Type.Optional(Type.Literal(1));
const Code = Type.String({ pattern: '^CP_ERR_[A-Z0-9_]{1,64}$' });

// ---------------------------------------------------------------- router → shard (`shard.<id>.ctl`)

/** Take ownership of channels, each at the epoch the router wrote for this shard. */
export const AcquireBatch = Type.Object(
  {
    v: V2,
    op: Type.Literal('acquire'),
    channels: Type.Array(Type.Object({ channel: Channel, epoch: Epoch }, { additionalProperties: false }), {
      minItems: 1,
      maxItems: CONTROL_BATCH_MAX,
    }),
  },
  { additionalProperties: false },
);
/**
 * Snapshot and stop serving channels. `handoff` (a move): open rounds' books written first, subjects kept
 * (refusing, retryable) until `forget`. `ifIdle` (a rebalance): a channel with unfinished rounds is refused.
 */
export const ReleaseBatch = Type.Object(
  {
    v: V2,
    op: Type.Literal('release'),
    channels: Type.Array(Channel, { minItems: 1, maxItems: CONTROL_BATCH_MAX }),
    handoff: Type.Optional(Type.Boolean()),
    ifIdle: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
/** The moves of handed-off channels finished: drop their subscriptions. */
export const ForgetBatch = Type.Object(
  { v: V2, op: Type.Literal('forget'), channels: Type.Array(Channel, { minItems: 1, maxItems: CONTROL_BATCH_MAX }) },
  { additionalProperties: false },
);
/** The channels the shard serves now (the reconciler compares them with Postgres). */
export const OwnedQuery = Type.Object({ v: V2, op: Type.Literal('owned') }, { additionalProperties: false });

/** v1: one channel per message. */
export const AcquireOne = Type.Object(
  { v: V1, op: Type.Literal('acquire'), channel: Channel, epoch: Epoch },
  { additionalProperties: false },
);
export const ReleaseOne = Type.Object(
  { v: V1, op: Type.Literal('release'), channel: Channel, handoff: Type.Optional(Type.Boolean()), ifIdle: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
export const ForgetOne = Type.Object({ v: V1, op: Type.Literal('forget'), channel: Channel }, { additionalProperties: false });

export const ShardControl = Type.Union([AcquireBatch, ReleaseBatch, ForgetBatch, OwnedQuery, AcquireOne, ReleaseOne, ForgetOne]);
export type ShardControl = Static<typeof ShardControl>;
export type AcquireBatch = Static<typeof AcquireBatch>;
export type ReleaseBatch = Static<typeof ReleaseBatch>;

/** One channel's answer in a batch reply. */
export const ChannelResult = Type.Object({
  channel: Channel,
  ok: Type.Boolean(),
  code: Type.Optional(Code),
  message: Type.Optional(Type.String({ maxLength: 1_024 })),
});
export type ChannelResult = Static<typeof ChannelResult>;

/** A shard's reply: `results` per channel for a v2 batch, `owned` for an `owned` query; v1 replies carry neither. */
export const ShardControlReply = Type.Union([
  Type.Object({
    v: Type.Optional(Type.Integer({ minimum: 1 })),
    ok: Type.Literal(true),
    channels: Type.Integer({ minimum: 0 }),
    results: Type.Optional(Type.Array(ChannelResult, { maxItems: CONTROL_BATCH_MAX })),
    owned: Type.Optional(Type.Array(Channel)),
  }),
  Type.Object({ v: Type.Optional(Type.Integer({ minimum: 1 })), ok: Type.Literal(false), code: Code, message: Type.String() }),
]);
export type ShardControlReply = Static<typeof ShardControlReply>;

// ---------------------------------------------------------------- router → caches (`router.assignments`)

/** A channel's new owner and epoch, or `shard: null` when it has none. */
export const AssignmentChange = Type.Object({ channel: Channel, shard: Type.Union([ShardId, Type.Null()]), epoch: Epoch });
export type AssignmentChange = Static<typeof AssignmentChange>;
/** v2: a placement's changes in one message. */
export const AssignmentBatch = Type.Object({
  v: V2,
  changes: Type.Array(AssignmentChange, { minItems: 1, maxItems: CONTROL_BATCH_MAX }),
});
/** What `router.assignments` carries: a v2 batch or a v1 single change. */
export const AssignmentMessage = Type.Union([AssignmentBatch, Type.Intersect([AssignmentChange, Type.Object({ v: V1 })])]);

// ---------------------------------------------------------------- shard → router (`shard.heartbeat`)

/** A shard is alive, with its load; `v` tells the router which control version to send it. */
export const Heartbeat = Type.Object({
  v: Type.Optional(Type.Integer({ minimum: 1 })),
  id: ShardId,
  instance: Type.Optional(Type.String({ maxLength: 128 })),
  channels: Type.Integer({ minimum: 0 }),
  intentsPerS: Type.Optional(Type.Number({ minimum: 0 })),
  draining: Type.Optional(Type.Boolean()),
  atMs: Type.Optional(Type.Number()),
});
export type Heartbeat = Static<typeof Heartbeat>;

// ---------------------------------------------------------------- anyone → router (`router.ctl`)

const VAny = Type.Optional(Type.Integer({ minimum: 1 }));
/** The router's requests: placement of one channel or (v2) of a batch, look-ups, moves, and a drain of a whole shard (v2). */
export const RouterControl = Type.Union([
  Type.Object({ v: VAny, op: Type.Literal('assign'), channel: Channel }, { additionalProperties: false }),
  Type.Object(
    { v: V2, op: Type.Literal('assign'), channels: Type.Array(Channel, { minItems: 1, maxItems: CONTROL_BATCH_MAX }) },
    { additionalProperties: false },
  ),
  Type.Object({ v: VAny, op: Type.Literal('lookup'), channel: Channel }, { additionalProperties: false }),
  Type.Object({ v: VAny, op: Type.Literal('release'), channel: Channel }, { additionalProperties: false }),
  Type.Object({ v: VAny, op: Type.Literal('membership') }, { additionalProperties: false }),
  Type.Object({ v: VAny, op: Type.Literal('migrate'), from: Channel, to: Channel }, { additionalProperties: false }),
  Type.Object({ v: VAny, op: Type.Literal('move'), channel: Channel, from: Type.Optional(ShardId) }, { additionalProperties: false }),
  Type.Object({ v: V2, op: Type.Literal('drain'), shard: ShardId }, { additionalProperties: false }),
]);
export type RouterControl = Static<typeof RouterControl>;

// ---------------------------------------------------------------- shard → sequencer (`sequencer.lease`)

/** A block of `size` event ids. */
export const LeaseRequest = Type.Object({
  v: Type.Optional(Type.Integer({ minimum: 1 })),
  size: Type.Integer({ minimum: 1, maximum: 10_000_000 }),
});
export type LeaseRequest = Static<typeof LeaseRequest>;

// ---------------------------------------------------------------- decoding

const checks = new WeakMap<TSchema, TypeCheck<TSchema>>();
function checker<T extends TSchema>(schema: T): TypeCheck<T> {
  let c = checks.get(schema);
  if (!c) {
    c = TypeCompiler.Compile(schema);
    checks.set(schema, c);
  }
  return c as TypeCheck<T>;
}

/**
 * Decodes and validates one control message.
 * @param schema the message's schema (one of this module's)
 * @param data the bus payload (UTF-8 JSON)
 * @param maxBytes payloads larger than this are refused before parsing (default 1 MiB: NATS's default max_payload)
 * @returns the typed message
 * @throws CrowdplayError CP_ERR_PROTO_TOO_BIG (over maxBytes), CP_ERR_PROTO_MALFORMED (not a JSON object),
 *   CP_ERR_PROTO_VERSION (a `v` above CONTROL_VERSION or below CONTROL_MIN_VERSION), CP_ERR_PROTO_INVALID (schema mismatch)
 */
export function decodeControl<T extends TSchema>(schema: T, data: Uint8Array, maxBytes = 1_048_576): Static<T> {
  if (data.byteLength > maxBytes) throw new CrowdplayError('CP_ERR_PROTO_TOO_BIG', [maxBytes]);
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8'));
  } catch (err) {
    throw new CrowdplayError('CP_ERR_PROTO_MALFORMED', [], { cause: err });
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new CrowdplayError('CP_ERR_PROTO_MALFORMED');
  const v = (value as { v?: unknown }).v;
  if (v !== undefined && (typeof v !== 'number' || v > CONTROL_VERSION || v < CONTROL_MIN_VERSION))
    throw new CrowdplayError('CP_ERR_PROTO_VERSION', [String(v).slice(0, 16), `${CONTROL_MIN_VERSION}–${CONTROL_VERSION}`]);
  const c = checker(schema);
  if (!c.Check(value)) {
    const first = c.Errors(value).First();
    throw new CrowdplayError('CP_ERR_PROTO_INVALID', [first ? `${first.path || '/'} ${first.message}` : 'invalid']);
  }
  return value;
}

/** The changes of a `router.assignments` message, v1 or v2. @throws as {@link decodeControl} */
export function decodeAssignments(data: Uint8Array): AssignmentChange[] {
  const m = decodeControl(AssignmentMessage, data);
  return 'changes' in m ? m.changes : [{ channel: m.channel, shard: m.shard, epoch: m.epoch }];
}
