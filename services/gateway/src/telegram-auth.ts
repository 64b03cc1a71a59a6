/**
 * Mini App sessions: a viewer socket authenticated with Telegram initData
 * instead of a tenant-signed token (`GET /v1/ws?role=crowd&initData=…`).
 *
 * initData is verified as Telegram documents (libs/telegram `miniAppSession`:
 * HMAC-SHA256 keyed by HMAC("WebAppData", bot token), or the Ed25519
 * third-party signature; `auth_date` no older than
 * TELEGRAM_INITDATA_MAX_AGE_S). The chat comes only from the signed
 * `start_param` the bot issued for that chat, so data signed for chat A is
 * refused on chat B. The channel is the chat's (`tg<id>`, created for
 * TELEGRAM_TENANT_ID on first use), or, when the chat moved (a group
 * upgraded to a supergroup: `channels.migrated_to`), the channel it moved to,
 * so an old link lands in the new chat; the viewer is `tg:<user id>`.
 *
 * A tenant's own bot signs its Mini App's initData with its own token: data
 * the deployment's bot did not sign (CP_ERR_INITDATA_BAD_HASH) is checked
 * against each tenant bot's token, and the bot whose hash matches names the
 * tenant and the channel (`tb<bot id>_<chat>`). Data no bot signed is refused
 * CP_ERR_INITDATA_BAD_HASH.
 */
import { CrowdplayError } from '@crowdplay/protocol';
import type { Config } from '@crowdplay/config';
import type { Store } from '@crowdplay/store';
import { LRUCache } from 'lru-cache';
import { miniAppSession, startParamSecret, telegramChannelId, type MiniAppSession } from '@crowdplay/telegram';
import { lruCountBound } from '@crowdplay/ratelimit';

/** Chats whose channel is known to exist for the bot's tenant (a channel never changes tenant, so no expiry). */
const ENSURED_MAX = 100_000;
/**
 * Moves followed from a signed chat to the channel that plays now. Telegram
 * upgrades a group to a supergroup once (a supergroup never migrates), so 1
 * is the real case; a longer chain means corrupt data and is refused.
 */
export const MAX_MIGRATION_HOPS = 4;

/** A verified Mini App viewer. */
export interface TelegramIdentity {
  tenantId: string;
  viewer: string;
  /** The channel that plays: the signed chat's, or the one it moved to (group → supergroup). */
  channel: string;
  /** The channel of the chat the start parameter was signed for (differs from `channel` after a move). */
  signedChannel: string;
  /** The user's display name (first and last name), for the board. */
  name: string;
}

export class TelegramAuth {
  private readonly secret: Buffer | null;
  /**
   * Signed chat's channel → the channel that plays (itself, or where it moved), once ensured: a Mini
   * App connect costs no database round trip after the chat's first. A move after an entry was cached
   * is noticed by the router (CP_ERR_CHANNEL_MIGRATED) and the gateway then asks again with `fresh`.
   * Fetched through lru-cache's `fetch`, which shares one resolve among the connects that ask while it
   * is in flight: a chat's players all opening the app at a rollover cost one `channels.ensure`, not one each.
   */
  private readonly ensured = new LRUCache<string, string, string>({
    ...lruCountBound(ENSURED_MAX),
    fetchMethod: (signed, _stale, { context }) => this.resolve(signed, context),
  });

  constructor(
    private readonly cfg: Config['telegram'],
    private readonly store: Store,
    /** TENANT_MAX_CHANNELS (a chat's first player creates its channel). @defaultValue no limit but the tenant's override */
    private readonly maxChannels?: number,
    /** The tenants' own bots whose Mini Apps may connect (services/telegram's registry). @defaultValue none */
    private readonly tenantBots?: () => Promise<ReadonlyArray<{ botId: number; tenantId: string; token: string }>>,
  ) {
    this.secret = cfg.botToken ? startParamSecret(cfg.botToken) : null;
  }

  /** True when TELEGRAM_BOT_TOKEN is set, or tenants' bots may connect. */
  get enabled(): boolean {
    return this.secret !== null || this.tenantBots !== undefined;
  }

  /**
   * The session of whichever bot signed the data: the deployment's bot first, then each tenant bot.
   * @throws CrowdplayError CP_ERR_AUTH_INVALID (no bot at all), CP_ERR_INITDATA_BAD_HASH (no bot signed it), the other
   *   CP_ERR_INITDATA_* codes of the bot that signed it
   */
  private async session(raw: string, nowMs: number): Promise<{ s: MiniAppSession; tenantId: string; bot?: number }> {
    const check = (token: string): MiniAppSession =>
      miniAppSession(raw, { botToken: token, maxAgeS: this.cfg.initDataMaxAgeS, startParamSecret: startParamSecret(token), nowMs });
    // Built only when thrown: an Error captures its stack, and this runs on every Mini App connect.
    let firstErr: unknown;
    if (this.secret) {
      try {
        return { s: check(this.cfg.botToken), tenantId: this.cfg.tenantId };
      } catch (err) {
        if (!(err instanceof CrowdplayError) || err.code !== 'CP_ERR_INITDATA_BAD_HASH' || !this.tenantBots) throw err;
        firstErr = err;
      }
    }
    for (const b of this.tenantBots ? await this.tenantBots() : []) {
      try {
        return { s: check(b.token), tenantId: b.tenantId, bot: b.botId };
      } catch (err) {
        if (!(err instanceof CrowdplayError) || err.code !== 'CP_ERR_INITDATA_BAD_HASH') throw err;
        firstErr = err;
      }
    }
    throw firstErr ?? new CrowdplayError('CP_ERR_AUTH_INVALID', ['Telegram is not configured (TELEGRAM_BOT_TOKEN)']);
  }

  /**
   * Verifies a Mini App's initData and returns its viewer and channel.
   * @param channelParam the socket's `channel` query parameter: empty, or the chat's own channel id (or the one it moved to)
   * @param fresh read the chat's channel again instead of the cached one (the router said it moved)
   * @throws CrowdplayError CP_ERR_AUTH_INVALID (Telegram is off), the
   *   CP_ERR_INITDATA_* codes of libs/telegram (bad or stale data, no or
   *   forged start parameter, data for another chat), CP_ERR_AUTH_FORBIDDEN_CHANNEL
   *   (the chat's channel belongs to another tenant)
   */
  async crowd(rawInitData: string, channelParam: string, nowMs = Date.now(), fresh = false): Promise<TelegramIdentity> {
    const { s, tenantId, bot } = await this.session(rawInitData, nowMs);
    const signedChannel = telegramChannelId(s.chatId, bot);
    let channel: string | undefined;
    if (fresh) {
      // Read again now: a fetch already in flight may have started before the move was written (lru-cache
      // joins it even with forceRefresh).
      channel = await this.resolve(signedChannel, tenantId);
      this.ensured.set(signedChannel, channel);
    } else channel = await this.ensured.fetch(signedChannel, { context: tenantId });
    if (channel === undefined) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [signedChannel]); // not reached: resolve returns or throws
    if (channelParam !== '' && channelParam !== signedChannel && channelParam !== channel)
      throw new CrowdplayError('CP_ERR_INITDATA_WRONG_CHAT', [channelParam]);
    const name = [s.user.first_name, s.user.last_name].filter((x) => typeof x === 'string' && x !== '').join(' ');
    return { tenantId, viewer: `tg:${s.user.id}`, channel, signedChannel, name: name || `user ${s.user.id}` };
  }

  /**
   * Ensures the signed chat's channel for the signing bot's tenant and follows its
   * moves (`channels.migrated_to`, at most MAX_MIGRATION_HOPS): an old link
   * of a group that became a supergroup opens the supergroup's channel.
   * @throws CrowdplayError CP_ERR_AUTH_FORBIDDEN_CHANNEL, CP_ERR_CHANNEL_UNAVAILABLE (a chain of moves too long)
   */
  private async resolve(signedChannel: string, tenantId: string): Promise<string> {
    let row = await this.store.channels.ensure(signedChannel, tenantId, this.maxChannels);
    for (let hops = 0; row.migratedTo !== null; hops++) {
      const next = hops < MAX_MIGRATION_HOPS ? await this.store.channels.get(row.migratedTo) : null;
      if (!next || next.tenantId !== tenantId) throw new CrowdplayError('CP_ERR_CHANNEL_UNAVAILABLE', [signedChannel]);
      row = next;
    }
    return row.id;
  }
}
