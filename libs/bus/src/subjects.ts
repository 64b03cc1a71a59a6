/**
 * The one naming module for bus subjects. These names are contracts between
 * processes (renaming one strands traffic across a rolling upgrade), so every
 * subject is built here and nowhere else.
 *
 * Every subject starts with a prefix (BUS_SUBJECT_PREFIX, default `cp`) so
 * test suites and tenants of one NATS server stay apart.
 */
import { CHANNEL_ID_RE } from '@crowdplay/protocol';

function token(kind: string, value: string): string {
  if (!CHANNEL_ID_RE.test(value)) throw new TypeError(`${kind} "${value}" is not subject-safe (^[A-Za-z0-9_-]{1,64}$)`);
  return value;
}

export interface Subjects {
  readonly prefix: string;
  /** Gateway → owning shard: micro-batched intents of a channel (IntentBatch). */
  channelIn(channel: string): string;
  /** Shard → gateways: serialized viewer updates of a channel (ChannelUpdate bytes). */
  channelOut(channel: string): string;
  /** Shard → the channel's game connection: batches (Batch bytes). */
  channelGame(channel: string): string;
  /** Game connection → shard: declare/state (request/reply). */
  channelCtl(channel: string): string;
  /** Shard → gateways: balance changes of a channel's viewers (WalletBatch: payouts, refunds). */
  channelWallet(channel: string): string;
  /** Gateway → shards and gateways: a grant committed through the tenant API (WalletCredit). */
  walletCredits(): string;
  /** Shard → one gateway: act acks (AckBatch). */
  gatewayAcks(gatewayId: string): string;
  /** Router → one shard: acquire / release (request/reply). */
  shardCtl(shardId: string): string;
  /** Shards → sequencer: lease a block of event ids (request/reply). */
  sequencerLease(): string;
  /** Anyone → router: assign / lookup / release / membership (request/reply). */
  routerCtl(): string;
  /** Every channel's in-subject (tests and tools; a shard subscribes per owned channel). */
  allChannelsIn(): string;
  /** Shards → router: membership heartbeats ({ id, channels, intentsPerS, draining, atMs }). */
  shardHeartbeat(): string;
  /**
   * Gateway → gateways: a chat's live board taken, stopped or moved (services/telegram ChatBoards: one gateway holds a chat's board).
   * `bot`: a tenant's own bot (its Telegram id) has a subject of its own, `tg.boards.<bot>`; the deployment's bot uses `tg.boards`.
   */
  telegramBoards(bot?: number): string;
  /** Router → gateways and shards: a channel's assignment changed ({ channel, shard (null: none), epoch }). */
  routerAssignments(): string;
  /** Gateway → gateways: a watch token was revoked ({ id }): every gateway closes the sockets open with it. */
  watchRevocations(): string;
}

/** Builds the subject helpers for `prefix` (letters, digits, `_`, `-`). */
export function subjects(prefix: string): Subjects {
  token('prefix', prefix);
  return {
    prefix,
    channelIn: (c) => `${prefix}.ch.${token('channel', c)}.in`,
    channelOut: (c) => `${prefix}.ch.${token('channel', c)}.out`,
    channelGame: (c) => `${prefix}.ch.${token('channel', c)}.game`,
    channelCtl: (c) => `${prefix}.ch.${token('channel', c)}.ctl`,
    channelWallet: (c) => `${prefix}.ch.${token('channel', c)}.wallet`,
    walletCredits: () => `${prefix}.wallet.credit`,
    gatewayAcks: (g) => `${prefix}.gw.${token('gateway', g)}.acks`,
    shardCtl: (s) => `${prefix}.shard.${token('shard', s)}.ctl`,
    sequencerLease: () => `${prefix}.seq.lease`,
    routerCtl: () => `${prefix}.router.ctl`,
    allChannelsIn: () => `${prefix}.ch.*.in`,
    shardHeartbeat: () => `${prefix}.shard.heartbeat`,
    telegramBoards: (bot) => (bot === undefined ? `${prefix}.tg.boards` : `${prefix}.tg.boards.${bot}`),
    routerAssignments: () => `${prefix}.router.assignments`,
    watchRevocations: () => `${prefix}.watch.revoked`,
  };
}
