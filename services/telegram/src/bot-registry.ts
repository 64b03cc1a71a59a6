/**
 * The tenants' own bots in a gateway process: one bot runtime each
 * (bot-runtime.ts), started on the first webhook update or Mini App session
 * that names the bot, read again from the store after TELEGRAM_BOTS_CACHE_MS
 * (a token or secret changed by `crowdplay tenant bot set` restarts the
 * runtime; a removed bot's runtime is closed). Which bot ids exist is read as
 * one list per TELEGRAM_BOTS_CACHE_MS, so webhooks for ids nobody registered
 * (any number of them) cost no store read each. The deployment's bot is not
 * here: it starts with the process (start.ts).
 */
import { CrowdplayError } from '@crowdplay/protocol';
import { startBotRuntime, type BotRuntimeDeps, type BotSpec, type TelegramPart } from './bot-runtime.ts';

/** A tenant bot as the registry reads it (secrets opened). */
export type TenantBotSpec = BotSpec & { botId: number };

/** What the registry needs beyond a runtime's dependencies. */
export interface BotRegistryDeps extends BotRuntimeDeps {
  /**
   * Reads a tenant bot (its secrets opened), or null when none has this id.
   * @throws on a store error, or CP_ERR_CONFIG_INVALID when the secrets do not open (TELEGRAM_BOT_SECRETS_KEY)
   */
  read(botId: number): Promise<TenantBotSpec | null>;
  /** Every tenant bot (secrets opened): the candidates of a Mini App session's signature. */
  readAll(): Promise<TenantBotSpec[]>;
  /** The ids of every tenant bot (no secrets read). */
  readIds(): Promise<ReadonlySet<number>>;
  /** TELEGRAM_BOTS_CACHE_MS. */
  cacheMs: number;
  /** Starts a runtime (tests). @defaultValue startBotRuntime */
  start?: (deps: BotRuntimeDeps, spec: BotSpec) => Promise<TelegramPart>;
  /** Clock, ms. @defaultValue performance.now */
  now?: () => number;
}

interface Entry {
  part: TelegramPart;
  at: number;
}

/** True when two specs run the same bot the same way (nothing to restart). */
function sameSpec(a: BotSpec, b: BotSpec): boolean {
  return (
    a.botId === b.botId &&
    a.tenantId === b.tenantId &&
    a.token === b.token &&
    a.webhookSecret === b.webhookSecret &&
    a.username === b.username
  );
}

/** The bot id a webhook path names, or null: a positive integer of at most 16 digits. */
export function parseBotId(raw: string): number | null {
  return /^[1-9]\d{0,15}$/.test(raw) && Number.isSafeInteger(Number(raw)) ? Number(raw) : null;
}

/** The tenants' bot runtimes of this process. */
export class BotRegistry {
  private readonly running = new Map<number, Entry>();
  /** The registered bot ids as last read, and when (one read at a time). */
  private ids: { at: number; ids: ReadonlySet<number> } | null = null;
  private idsLoading: Promise<ReadonlySet<number>> | null = null;
  private readonly loading = new Map<number, Promise<TelegramPart>>();
  private all: { at: number; specs: TenantBotSpec[] } | null = null;
  private readonly now: () => number;
  private closed = false;

  constructor(private readonly d: BotRegistryDeps) {
    this.now = d.now ?? (() => performance.now());
  }

  /** The bots running here now, by id. */
  get size(): number {
    return this.running.size;
  }

  /** The runtime of bot `botId` if it runs here now (no store read). */
  peek(botId: number): TelegramPart | undefined {
    return this.running.get(botId)?.part;
  }

  /**
   * The runtime of tenant bot `botId`, started on first use and read again from the store once older than
   * TELEGRAM_BOTS_CACHE_MS (a changed token or secret restarts it). One read and one start at a time per bot.
   * @throws CrowdplayError CP_ERR_TELEGRAM_BOT_UNKNOWN (no such bot in the id list, read once per TELEGRAM_BOTS_CACHE_MS);
   *   the store's error or the runtime's start error (a running runtime is kept when the store read fails)
   */
  async get(botId: number): Promise<TelegramPart> {
    if (this.closed) throw new CrowdplayError('CP_ERR_LIMIT_DRAINING');
    const e = this.running.get(botId);
    if (e && this.now() - e.at < this.d.cacheMs) return e.part;
    if (!e && !(await this.knownIds()).has(botId)) throw new CrowdplayError('CP_ERR_TELEGRAM_BOT_UNKNOWN', [botId]);
    let p = this.loading.get(botId);
    if (!p) {
      p = this.refresh(botId).finally(() => this.loading.delete(botId));
      this.loading.set(botId, p);
    }
    return p;
  }

  /**
   * Every tenant bot's spec (read again after TELEGRAM_BOTS_CACHE_MS): the Mini App's candidates.
   * A failed read keeps the last list (empty before the first).
   */
  async specs(): Promise<readonly TenantBotSpec[]> {
    if (this.all && this.now() - this.all.at < this.d.cacheMs) return this.all.specs;
    try {
      this.all = { at: this.now(), specs: await this.d.readAll() };
    } catch (err) {
      this.d.telemetry.logger.warn({ err }, 'tenant bots: the list could not be read (the last one is kept)');
    }
    return this.all?.specs ?? [];
  }

  /** Closes every runtime (their send queues drain for up to 5 s each). */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.allSettled([...this.loading.values()]);
    const parts = [...this.running.values()].map((e) => e.part);
    this.running.clear();
    await Promise.all(parts.map((p) => p.close().catch(() => undefined)));
  }

  /** The registered bot ids, read again once older than TELEGRAM_BOTS_CACHE_MS (a failed read keeps the last list). */
  private async knownIds(): Promise<ReadonlySet<number>> {
    if (this.ids && this.now() - this.ids.at < this.d.cacheMs) return this.ids.ids;
    this.idsLoading ??= this.d
      .readIds()
      .then(
        (ids) => {
          this.ids = { at: this.now(), ids };
          return ids;
        },
        (err: unknown) => {
          if (!this.ids) throw err;
          this.d.telemetry.logger.warn({ err }, 'tenant bots: the ids could not be read (the last list is kept)');
          return this.ids.ids;
        },
      )
      .finally(() => (this.idsLoading = null));
    return this.idsLoading;
  }

  private async refresh(botId: number): Promise<TelegramPart> {
    const old = this.running.get(botId);
    let spec: TenantBotSpec | null;
    try {
      spec = await this.d.read(botId);
    } catch (err) {
      if (!old) throw err;
      this.d.telemetry.logger.warn({ err, bot: botId }, 'tenant bot: could not be read again (it runs as it was)');
      old.at = this.now();
      return old.part;
    }
    if (!spec) {
      if (old) {
        this.running.delete(botId);
        this.d.telemetry.logger.info({ bot: botId }, 'tenant bot removed: its runtime stops');
        await old.part.close().catch(() => undefined);
      }
      throw new CrowdplayError('CP_ERR_TELEGRAM_BOT_UNKNOWN', [botId]);
    }
    if (old && sameSpec(old.part.spec, spec)) {
      old.at = this.now();
      return old.part;
    }
    const part = await (this.d.start ?? startBotRuntime)(this.d, spec);
    if (this.closed) {
      await part.close();
      throw new CrowdplayError('CP_ERR_LIMIT_DRAINING');
    }
    this.running.set(botId, { part, at: this.now() });
    if (old) {
      this.d.telemetry.logger.info({ bot: botId }, 'tenant bot changed (token, secret or username): its runtime restarts');
      await old.part.close().catch(() => undefined);
    }
    this.all = null;
    return part;
  }
}
