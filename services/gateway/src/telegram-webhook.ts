/**
 * The bot's webhook: `POST /v1/telegram/webhook` (the URL given to Telegram's
 * setWebhook, with `secret_token` = TELEGRAM_WEBHOOK_SECRET).
 *
 * - The `X-Telegram-Bot-Api-Secret-Token` header must equal the secret
 *   (constant-time compare); otherwise 401 and nothing is queued.
 * - The update is answered at once with an empty 200 — never with a Bot API
 *   method in the response body: every call the bot makes goes through the
 *   send queue — and its work is queued (bounded: past the limit the update
 *   is answered 503 so Telegram delivers it again later, counted).
 * - Updates are de-duplicated on `update_id` (Telegram re-delivers an update
 *   it did not see answered): an id seen within the last `dedupeSize`
 *   updates is answered 200 and dropped, counted.
 * - With `shared` (REDIS_URL: libs/telegram `RedisUpdates`) several gateways
 *   take one bot's webhook: the in-process LRU answers the re-deliveries this
 *   gateway saw, then the shared log decides (`SET NX PX` per update_id:
 *   a duplicate on any gateway is dropped, counted as `duplicate` with
 *   `scope="shared"`), and orders the update behind its chat's earlier ones:
 *   the gateway holding the chat's lease handles them one at a time, oldest
 *   first (chats run concurrently, at most `maxQueued` at once per gateway).
 *   A Redis error answers 500 (Telegram re-delivers; the update was either
 *   wholly admitted, then the re-delivery is a duplicate, or not at all).
 */
import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { LRUCache } from 'lru-cache';
import type { ErrorCode } from '@crowdplay/protocol';
import { updateChatKey, type SharedUpdates } from '@crowdplay/telegram';
import type { Telemetry } from '@crowdplay/telemetry';
import { lruCountBound } from '@crowdplay/ratelimit';

/** A Telegram Update as received (only `update_id` is relied on here; the handler reads the rest). */
export interface TelegramUpdate {
  update_id: number;
  [field: string]: unknown;
}

/** Options of {@link registerTelegramWebhook}. */
export interface TelegramWebhookOptions {
  /** TELEGRAM_WEBHOOK_SECRET. */
  secret: string;
  /** Handles one update, in arrival order, one at a time; errors are logged and counted, never retried. */
  handle: (update: TelegramUpdate) => Promise<void>;
  telemetry: Telemetry;
  /** TELEGRAM_WEBHOOK_MAX_QUEUED: updates queued at most (answered 503 beyond). @defaultValue 10_000 */
  maxQueued?: number;
  /** TELEGRAM_WEBHOOK_DEDUPE_SIZE: update_ids remembered for de-duplication. @defaultValue 100_000 */
  dedupeSize?: number;
  /** TELEGRAM_WEBHOOK_MAX_BODY_BYTES: largest update body, bytes. @defaultValue 1_048_576 */
  bodyLimitBytes?: number;
  /**
   * The shared de-duplication and per-chat order of every gateway of the bot
   * (cluster mode, REDIS_URL). Unset: this process alone (one in-order queue).
   */
  shared?: SharedUpdates;
}

/** The webhook's path. */
export const TELEGRAM_WEBHOOK_PATH = '/v1/telegram/webhook';

/** One bot's webhook intake: its secret check, de-duplication and queue (or shared order). */
export interface WebhookIntake {
  /** Answers one webhook request (see the module doc). */
  accept(req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply>;
  /** Resolves when every queued update was handled. */
  idle(): Promise<void>;
  /** Stops taking updates' work (shared: the chats being handled stop after their current update and give their leases up), then idle. */
  drain(): Promise<void>;
  /** Updates waiting. */
  readonly queued: number;
}

/**
 * Registers the webhook route on `app` and returns a handle to drain its queue.
 * @returns `idle()` resolves when every queued update was handled; `drain()` also stops (shared: the
 *   chats being handled stop after their current update and give their leases up); `queued` the updates waiting
 */
export function registerTelegramWebhook(
  app: FastifyInstance,
  opts: TelegramWebhookOptions,
): { drain(): Promise<void>; idle(): Promise<void>; readonly queued: number } {
  const intake = webhookIntake(opts);
  app.post(TELEGRAM_WEBHOOK_PATH, { bodyLimit: opts.bodyLimitBytes ?? 1_048_576 }, (req, reply) => intake.accept(req, reply));
  return intake;
}

/**
 * One bot's webhook intake, not bound to a route: the deployment's bot's at {@link TELEGRAM_WEBHOOK_PATH}, each
 * tenant bot's at `<TELEGRAM_WEBHOOK_PATH>/<bot id>` (tenant-bot-webhooks.ts). Update ids are a bot's own
 * numbering, so each bot has its own de-duplication.
 */
export function webhookIntake(opts: TelegramWebhookOptions): WebhookIntake {
  const { telemetry } = opts;
  const maxQueued = opts.maxQueued ?? 10_000;
  const seen = new LRUCache<number, true>(lruCountBound(opts.dedupeSize ?? 100_000));
  const secret = Buffer.from(opts.secret);
  const queue: TelegramUpdate[] = [];
  let running = false;
  let idle: Array<() => void> = [];
  const m = telemetry.metrics;
  const updates = m.counter('crowdplay_telegram_updates_total');
  m.gauge('crowdplay_telegram_updates_queued', () => (opts.shared ? draining.size : queue.length));
  /** Shared mode: chats this gateway is draining → whether an `owner` admit arrived meanwhile (look again before stopping). */
  const draining = new Map<string, { again: boolean }>();
  let stopping = false;

  const refuse = (code: ErrorCode, detail: Record<string, unknown>): void => {
    updates.add(1, { outcome: 'refused', reason: code });
    telemetry.refusals.refuse('telegram', code, detail);
  };

  const handleOne = async (u: TelegramUpdate): Promise<void> => {
    try {
      await opts.handle(u);
      updates.add(1, { outcome: 'handled' });
    } catch (err) {
      updates.add(1, { outcome: 'failed' });
      telemetry.logger.error({ err, update_id: u.update_id }, 'telegram update failed');
    }
  };

  const settle = (): void => {
    if (draining.size > 0 || queue.length > 0 || running) return;
    const w = idle;
    idle = [];
    for (const f of w) f();
  };

  /** Shared mode: handles the chat's waiting updates while this gateway holds its lease. */
  const drainChat = async (chatKey: string): Promise<void> => {
    const shared = opts.shared!;
    try {
      for (;;) {
        if (stopping) {
          await shared.release(chatKey);
          return;
        }
        const n = await shared.next(chatKey);
        if (n === 'lost') updates.add(1, { outcome: 'lease_lost' });
        const d = draining.get(chatKey)!;
        if (n === 'empty' && d.again) {
          d.again = false; // the lease was deleted and taken again by this gateway's admit: go on
          continue;
        }
        if (n === 'empty' || n === 'lost') return;
        await handleOne(n.update as TelegramUpdate);
      }
    } catch (err) {
      telemetry.logger.error({ err, chat: chatKey }, 'telegram shared updates: the chat could not be drained (its next update resumes it)');
    } finally {
      draining.delete(chatKey);
      settle();
    }
  };

  const pump = async (): Promise<void> => {
    if (running) return;
    running = true;
    try {
      for (let u = queue.shift(); u !== undefined; u = queue.shift()) await handleOne(u);
    } finally {
      running = false;
      settle();
    }
  };

  const whenIdle = (): Promise<void> =>
    queue.length === 0 && !running && draining.size === 0 ? Promise.resolve() : new Promise<void>((r) => idle.push(r));

  const accept = async (req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => {
    const header = req.headers['x-telegram-bot-api-secret-token'];
    const given = Buffer.from(typeof header === 'string' ? header : '');
    if (given.length !== secret.length || !timingSafeEqual(given, secret)) {
      refuse('CP_ERR_AUTH_INVALID', { route: 'webhook' });
      return reply.status(401).send({ code: 'CP_ERR_AUTH_INVALID', message: 'bad X-Telegram-Bot-Api-Secret-Token' });
    }
    const u = req.body as Partial<TelegramUpdate> | null;
    if (!u || typeof u !== 'object' || !Number.isSafeInteger(u.update_id)) {
      refuse('CP_ERR_PROTO_INVALID', { route: 'webhook' });
      return reply.status(400).send({ code: 'CP_ERR_PROTO_INVALID', message: 'an Update with an integer update_id' });
    }
    const id = u.update_id!;
    if (seen.has(id)) {
      updates.add(1, { outcome: 'duplicate', scope: 'local' });
      return reply.status(200).send();
    }
    if (opts.shared) {
      const chatKey = updateChatKey(u as TelegramUpdate);
      if (!draining.has(chatKey) && draining.size >= maxQueued) {
        refuse('CP_ERR_INTENT_OVERLOADED', { route: 'webhook', limit: maxQueued });
        return reply.status(503).send({ code: 'CP_ERR_INTENT_OVERLOADED', message: `${maxQueued} chats are being handled` });
      }
      let admitted;
      try {
        admitted = await opts.shared.admit(chatKey, u as TelegramUpdate);
      } catch (err) {
        telemetry.logger.error({ err, update_id: id }, 'telegram shared updates: admit failed (Telegram re-delivers)');
        updates.add(1, { outcome: 'error' });
        return reply.status(500).send({ code: 'CP_ERR_INTERNAL', message: 'update not taken' });
      }
      seen.set(id, true);
      if (admitted === 'duplicate') {
        updates.add(1, { outcome: 'duplicate', scope: 'shared' });
        return reply.status(200).send();
      }
      updates.add(1, { outcome: 'queued' });
      if (admitted === 'owner') {
        const d = draining.get(chatKey);
        if (d) d.again = true;
        else {
          draining.set(chatKey, { again: false });
          void drainChat(chatKey);
        }
      }
      return reply.status(200).send();
    }
    if (queue.length >= maxQueued) {
      refuse('CP_ERR_INTENT_OVERLOADED', { route: 'webhook', limit: maxQueued });
      return reply.status(503).send({ code: 'CP_ERR_INTENT_OVERLOADED', message: `${maxQueued} updates are waiting` });
    }
    seen.set(id, true);
    queue.push(u as TelegramUpdate);
    updates.add(1, { outcome: 'queued' });
    void pump();
    return reply.status(200).send();
  };

  return {
    accept,
    get queued() {
      return queue.length;
    },
    idle: whenIdle,
    drain() {
      stopping = true;
      return whenIdle();
    },
  };
}
