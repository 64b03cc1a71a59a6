/**
 * Every Redis key, channel and BullMQ name of the Telegram send path, built
 * here only: the send queue and its bucket, the webhook's shared updates, the
 * bot's board budget and the render queue. These names are contracts:
 * renaming one strands state in a running Redis.
 *
 * Each component's keys start with the hash tag `{<prefix>}` so that they
 * share one Redis Cluster slot (its Lua scripts touch several keys atomically).
 */

/** Default key prefix (tests use a unique one from `uniqueName()`). */
export const DEFAULT_PREFIX = 'crowdplay:sendq';

/** Default key prefix of the render queue (BOARD_RENDER_PREFIX). */
export const DEFAULT_RENDER_PREFIX = 'crowdplay:render';

const PREFIX_RE = /^[A-Za-z0-9_:.-]{1,100}$/;

/**
 * `{prefix}`, the hash-tagged start of a component's keys.
 * @throws RangeError unless `prefix` is 1–100 characters of `A-Za-z0-9_:.-`.
 */
export function keyBase(prefix: string): string {
  if (!PREFIX_RE.test(prefix)) throw new RangeError(`prefix must be 1-100 characters of A-Za-z0-9_:.-, got "${prefix}"`);
  return `{${prefix}}`;
}

/** The keys of one send queue / bucket under `prefix`. */
export interface SendqKeys {
  /** `{p}`: the common start of every key (SCAN `{p}*` finds them all). */
  readonly base: string;
  /** Bot-wide pause end, µs (string integer), PX-expiring. */
  readonly pause: string;
  /** Bot rate GCRA tat, µs. */
  readonly bot: string;
  /** Per-chat rate GCRA tat, µs. */
  chat(chatKey: string): string;
  /** Per-group rate GCRA tat, µs. */
  group(chatKey: string): string;
  /** ZSET of recorded board bookings (member `<chatKey>|<group 1/0>|<id>`, score = departure µs): a reply may take the earliest. */
  readonly bookings: string;
  /** BullMQ `prefix` option (queue keys are `{p}:<queueName>:…`). */
  readonly bullPrefix: string;
  /** BullMQ queue name of each lane (`q` transactional, `qb` board): one queue and one worker per lane. */
  readonly queueName: Readonly<Record<'tx' | 'board', string>>;
  /** Latest version (INCR counter) of a supersession key. */
  version(key: string): string;
  /** Highest producer version (`SendJobInput.version`) enqueued for a supersession key. */
  producerVersion(key: string): string;
  /** SET of deactivated chat ids. */
  readonly deactivated: string;
  /** HASH old chat id → new chat id (migrations). */
  readonly moved: string;
  /**
   * ZSET of a chat's unfinished jobs, score = lane offset (tx 0, board 2^50) +
   * enqueue sequence: rank 0 is the chat's head (per-chat order, purge, migration).
   */
  chatJobs(chatId: number): string;
  /** INCR counter: enqueue sequence. */
  readonly seq: string;
  /** HASH lane → jobs not finished (depth). */
  readonly depth: string;
  /** INCR counter: calls of `send` started for job `id` (a restarted job never repeats a call whose outcome was lost). */
  called(id: string): string;
  /** BullMQ's hash of job `id` in the queue of `lane`. */
  bullJob(id: string, lane: 'tx' | 'board'): string;
  /** Pub/sub channel carrying `{id, result}` when a job ends (feeds `EnqueueResult.result` across processes). */
  readonly settled: string;
}

/**
 * The key layout for `prefix`.
 * @throws RangeError unless `prefix` is 1–100 characters of `A-Za-z0-9_:.-`.
 */
export function sendqKeys(prefix: string = DEFAULT_PREFIX): SendqKeys {
  const base = keyBase(prefix);
  return {
    base,
    pause: `${base}:b:pause`,
    bot: `${base}:b:bot`,
    chat: (k) => `${base}:b:chat:${k}`,
    group: (k) => `${base}:b:group:${k}`,
    bookings: `${base}:b:bk`,
    bullPrefix: base,
    queueName: { tx: 'q', board: 'qb' },
    version: (k) => `${base}:v:${k}`,
    producerVersion: (k) => `${base}:pv:${k}`,
    deactivated: `${base}:off`,
    moved: `${base}:moved`,
    chatJobs: (id) => `${base}:cj:${id}`,
    seq: `${base}:seq`,
    depth: `${base}:depth`,
    bullJob: (id, lane) => `${base}:${lane === 'tx' ? 'q' : 'qb'}:${id}`,
    called: (id) => `${base}:called:${id}`,
    settled: `${base}:settled`,
  };
}

/**
 * The keys of the webhook's shared updates under `prefix` (`<TELEGRAM_SENDQ_PREFIX>:updates`): an update id seen
 * (de-duplication), a chat's queue of updates, a chat's lease (who handles its updates now).
 * @throws RangeError on a bad prefix (see {@link keyBase})
 */
export function updateKeys(prefix: string): {
  base: string;
  seen(id: number): string;
  queue(chat: string): string;
  lock(chat: string): string;
} {
  const base = keyBase(prefix);
  return { base, seen: (id) => `${base}:seen:${id}`, queue: (c) => `${base}:q:${c}`, lock: (c) => `${base}:lock:${c}` };
}

/**
 * The key of the bot's board budget shared by every gateway under `prefix` (`<TELEGRAM_SENDQ_PREFIX>:budget`).
 * @throws RangeError on a bad prefix (see {@link keyBase})
 */
export function boardBudgetKey(prefix: string): string {
  return `${keyBase(prefix)}:board`;
}

/**
 * The render queue's keys under `prefix`: a chat's render state, the set of chats queued, BullMQ's prefix and
 * queue name, and the pub/sub channel of board ends (what became of each board handed to the send queue).
 * @throws RangeError on a bad prefix (see {@link keyBase})
 */
export function renderQueueKeys(prefix: string = DEFAULT_RENDER_PREFIX): {
  base: string;
  chat(chatId: number): string;
  queued: string;
  bullPrefix: string;
  queueName: string;
  ends: string;
} {
  const base = keyBase(prefix);
  return { base, chat: (id) => `${base}:c:${id}`, queued: `${base}:queued`, bullPrefix: base, queueName: 'r', ends: `${base}:ends` };
}
