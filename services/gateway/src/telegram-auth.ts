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
 * TELEGRAM_TENANT_ID on first use); the viewer is `tg:<user id>`.
 */
import { CrowdplayError } from '@crowdplay/protocol';
import type { Config } from '@crowdplay/config';
import type { Store } from '@crowdplay/store';
import { LRUCache } from 'lru-cache';
import { miniAppSession, startParamSecret, telegramChannelId } from '@crowdplay/telegram';

/** Chats whose channel is known to exist for the bot's tenant (a channel never changes tenant, so no expiry). */
const ENSURED_MAX = 100_000;

/** A verified Mini App viewer. */
export interface TelegramIdentity {
  tenantId: string;
  viewer: string;
  channel: string;
  /** The user's display name (first and last name), for the board. */
  name: string;
}

export class TelegramAuth {
  private readonly secret: Buffer | null;
  /** Channels already ensured: a Mini App connect costs no database round trip after the chat's first. */
  private readonly ensured = new LRUCache<string, true>({ max: ENSURED_MAX });

  constructor(
    private readonly cfg: Config['telegram'],
    private readonly store: Store,
  ) {
    this.secret = cfg.botToken ? startParamSecret(cfg.botToken) : null;
  }

  /** True when TELEGRAM_BOT_TOKEN is set. */
  get enabled(): boolean {
    return this.secret !== null;
  }

  /**
   * Verifies a Mini App's initData and returns its viewer and channel.
   * @param channelParam the socket's `channel` query parameter: empty, or the chat's own channel id
   * @throws CrowdplayError CP_ERR_AUTH_INVALID (Telegram is off), the
   *   CP_ERR_INITDATA_* codes of libs/telegram (bad or stale data, no or
   *   forged start parameter, data for another chat), CP_ERR_AUTH_FORBIDDEN_CHANNEL
   *   (the chat's channel belongs to another tenant)
   */
  async crowd(rawInitData: string, channelParam: string, nowMs = Date.now()): Promise<TelegramIdentity> {
    if (!this.secret) throw new CrowdplayError('CP_ERR_AUTH_INVALID', ['Telegram is not configured (TELEGRAM_BOT_TOKEN)']);
    const s = miniAppSession(rawInitData, {
      botToken: this.cfg.botToken,
      maxAgeS: this.cfg.initDataMaxAgeS,
      startParamSecret: this.secret,
      nowMs,
    });
    const channel = telegramChannelId(s.chatId);
    if (channelParam !== '' && channelParam !== channel) throw new CrowdplayError('CP_ERR_INITDATA_WRONG_CHAT', [channelParam]);
    if (!this.ensured.has(channel)) {
      await this.store.channels.ensure(channel, this.cfg.tenantId);
      this.ensured.set(channel, true);
    }
    const name = [s.user.first_name, s.user.last_name].filter((x) => typeof x === 'string' && x !== '').join(' ');
    return { tenantId: this.cfg.tenantId, viewer: `tg:${s.user.id}`, channel, name: name || `user ${s.user.id}` };
  }
}
